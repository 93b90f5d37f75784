// Row splits (scheduler pass 5) and concurrent queues: a large MatMul split by output rows
// between two backends gives logits bit-identical to the unsplit CPU plan, sequentially and
// on concurrent queues; memory reuse stays ordered under concurrency; a failing or throwing
// backend makes execute() return an error (never a crash or a hang).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <set>

#include "../common/tiny_model.hpp"
#include "backends/cpu/backend/cpu_backend.hpp"
#include "backends/cpu/kernels.hpp"
#include "kv/kv_cache.hpp"
#include "models/architecture.hpp"
#include "plan_checks.hpp"
#include "sched/row_split.hpp"
#include "sched/scheduler.hpp"

namespace geniex {
namespace {

struct Fixture {
  gguf::File file;
  std::unique_ptr<models::Architecture> arch;
};

test_support::TinyLlamaConfig wide_config() {
  test_support::TinyLlamaConfig cfg;
  cfg.n_embd = 128;
  cfg.n_ff = 384;
  cfg.n_vocab = 320;
  return cfg;
}

Fixture load_tiny(const test_support::TinyLlamaConfig& cfg) {
  const std::vector<uint8_t> bytes = test_support::make_tiny_llama(cfg);
  auto file = gguf::File::parse(MappedFile::from_bytes(bytes.data(), bytes.size()));
  EXPECT_TRUE(file.has_value()) << (file ? "" : file.error().to_string());
  Fixture f{std::move(file).value(), nullptr};
  auto arch = models::load_architecture(f.file);
  EXPECT_TRUE(arch.has_value()) << (arch ? "" : arch.error().to_string());
  f.arch = std::move(arch).value();
  return f;
}

// A prompt then greedy single-token steps; all logits, step after step. Stops at the first
// error and returns it in *error.
std::vector<float> run_steps(const models::Architecture& arch, sched::Scheduler& sched,
                             const std::vector<int32_t>& prompt, int n_decode, std::string* error = nullptr) {
  const models::HParams& hp = arch.hparams();
  kv::KvConfig kc;
  kc.n_layer = hp.n_layer;
  kc.n_head_kv = hp.n_head_kv;
  kc.head_dim = hp.head_dim;
  kc.n_ctx = 64;
  kc.block_size = 4;
  auto cache = kv::PagedKvCache::create(kc);
  EXPECT_TRUE(cache.has_value());
  std::vector<float> all;
  std::vector<int32_t> tokens = prompt;
  int32_t pos = 0;
  for (int step = 0; step <= n_decode; ++step) {
    std::vector<int32_t> positions(tokens.size()), seqs(tokens.size(), 0);
    for (size_t i = 0; i < tokens.size(); ++i) positions[i] = pos + static_cast<int32_t>(i);
    const std::vector<int32_t> out_rows = {static_cast<int32_t>(tokens.size() - 1)};
    EXPECT_TRUE((*cache)->begin_batch(seqs, positions).has_value());
    const graph::Graph g = arch.build_graph({static_cast<int32_t>(tokens.size()), 1});
    auto plan = sched.plan(g);
    EXPECT_TRUE(plan.has_value()) << (plan ? "" : plan.error().to_string());
    if (!plan) return all;
    backends::StepData sd{tokens, positions, seqs, out_rows, cache->get()};
    auto out = sched.execute(**plan, sd);
    if (!out) {
      if (error != nullptr) *error = out.error().to_string();
      else ADD_FAILURE() << out.error().to_string();
      return all;
    }
    all.insert(all.end(), *out, *out + hp.n_vocab);
    pos += static_cast<int32_t>(tokens.size());
    int32_t best = 0;
    for (int32_t v = 1; v < hp.n_vocab; ++v) if ((*out)[v] > (*out)[best]) best = v;
    tokens = {best};
  }
  return all;
}

// MatMul (any row range, into any host memory) and Copy with the CPU kernels, single-threaded;
// optionally failing or throwing on its n-th compute() call.
class RowMatMulDouble final : public backends::Backend {
 public:
  enum class Fault { None, Error, Throw };
  explicit RowMatMulDouble(Fault fault = Fault::None, int fail_at = 0) : fault_(fault), fail_at_(fail_at) {}

  std::string_view name() const override { return "row-double"; }
  backends::DeviceKind kind() const override { return backends::DeviceKind::Gpu; }
  backends::Support supports(const graph::Graph&, const graph::Node& n) const override {
    if (n.op == graph::Op::Copy || n.op == graph::Op::MatMul) return backends::Support::yes();
    return backends::Support::no("only matmul");
  }
  double estimate_us(const graph::Graph&, const graph::Node&) const override { return 3.0; }
  Result<std::unique_ptr<backends::Buffer>> allocate(size_t bytes) override {
    return std::unique_ptr<backends::Buffer>(std::make_unique<backends::HostBuffer>(bytes));
  }
  bool host_visible() const override { return true; }
  bool computes_row_ranges() const override { return true; }
  bool uses_any_host_memory() const override { return true; }
  Status compute(std::span<const int32_t> nodes, backends::ExecContext& ctx) override {
    const int call = ++calls;
    if (fault_ != Fault::None && call >= fail_at_) {
      if (fault_ == Fault::Throw) throw std::bad_alloc();
      return make_error(ErrorCode::BackendError, "row-double: injected failure");
    }
    const graph::Graph& g = *ctx.graph;
    for (int32_t id : nodes) {
      const graph::Node& n = g.node(id);
      void* dst = ctx.data[static_cast<size_t>(id)];
      if (n.op == graph::Op::Copy) {
        std::memcpy(dst, ctx.data[static_cast<size_t>(n.src[0])], n.nbytes());
        continue;
      }
      if (n.op != graph::Op::MatMul) return make_error(ErrorCode::Internal, "row-double: not a matmul");
      const graph::Node& w = g.node(n.src[0]);
      const cpu::TypeKernels* k = cpu::kernels_for(w.type);
      const int64_t K = w.ne[0], N = w.ne[1], T = n.ne[1];
      const backends::RowRange r = ctx.rows_of(id, N);
      if (!ctx.rows.empty() && !ctx.rows[static_cast<size_t>(id)].full()) ++parts_run;
      const auto* x = static_cast<const float*>(ctx.data[static_cast<size_t>(n.src[1])]);
      const void* act = x;
      size_t act_stride = static_cast<size_t>(K) * 4;
      if (k->act_type != DType::F32) {
        act_stride = static_cast<size_t>(row_bytes(k->act_type, K));
        scratch_.resize(act_stride * static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) k->quantize_act(x + t * K, scratch_.data() + static_cast<size_t>(t) * act_stride, K);
        act = scratch_.data();
      }
      const auto w_stride = static_cast<size_t>(row_bytes(w.type, K));
      const auto* wd = static_cast<const uint8_t*>(ctx.data[static_cast<size_t>(n.src[0])]);
      k->gemm(K, wd + static_cast<size_t>(r.begin) * w_stride, w_stride, r.end - r.begin, act, act_stride, T,
              static_cast<float*>(dst) + r.begin, N);
    }
    return ok_status();
  }

  std::atomic<int> calls{0};
  std::atomic<int> parts_run{0};

 private:
  Fault fault_;
  int fail_at_;
  std::vector<uint8_t> scratch_;
};

const std::vector<int32_t> kPrompt = {3, 17, 42, 5, 88, 1, 60, 200, 301, 9, 11};

std::vector<float> reference(const Fixture& f) {
  backends::CpuBackend cpu(2);
  sched::Scheduler s({&cpu});
  return run_steps(*f.arch, s, kPrompt, 6);
}

sched::SchedulerOptions split_options(bool async, double share = 0) {
  sched::SchedulerOptions o;
  o.row_split = true;
  o.min_rows = 128;
  o.split_share = share;
  o.async = async;
  return o;
}

TEST(RowSplit, ChoosesLargeMatMulsOnly) {
  Fixture f = load_tiny(wide_config());
  backends::CpuBackend a(1), b(1);
  const graph::Graph g = f.arch->build_graph({4, 1});
  std::vector<int32_t> where(static_cast<size_t>(g.size()), 0);
  sched::RowSplitOptions o;
  o.min_rows = 300;
  o.share = 0.25;
  const auto choice = sched::choose_row_splits(g, {&a, &b}, where, o);
  int n_split = 0;
  for (int32_t i = 0; i < g.size(); ++i) {
    const graph::Node& n = g.node(i);
    const auto& c = choice[static_cast<size_t>(i)];
    if (c.part < 0) continue;
    ++n_split;
    EXPECT_EQ(n.op, graph::Op::MatMul);
    EXPECT_GE(n.ne[0], 300);
    EXPECT_EQ(c.primary, 0);
    EXPECT_EQ(c.part, 1);
    EXPECT_EQ(c.split_row % 64, 0);
    // 25% of 384 rows is 96, rounded to the 64-row grain: the part takes 128 (or 64).
    EXPECT_GT(c.split_row, n.ne[0] / 2);
  }
  // ffn_gate and ffn_up (384 rows) per layer and the output (320 rows).
  EXPECT_EQ(n_split, 2 * 2 + 1);
  // One backend: nothing to split with.
  const auto none = sched::choose_row_splits(g, {&a}, where, o);
  for (const auto& c : none) EXPECT_EQ(c.part, -1);
}

TEST(RowSplit, CpuPlusCpuIsBitIdenticalToCpuOnly) {
  Fixture f = load_tiny(wide_config());
  const std::vector<float> ref = reference(f);
  for (const bool async : {false, true}) {
    for (const double share : {0.0, 0.3, 0.7}) {
      backends::CpuBackend a(2), b(1);
      sched::Scheduler s({&a, &b}, split_options(async, share));
      const std::vector<float> got = run_steps(*f.arch, s, kPrompt, 6);
      auto plan = s.plan(f.arch->build_graph({1, 1}));
      ASSERT_TRUE(plan.has_value());
      EXPECT_EQ((*plan)->n_row_splits, 11);  // q, o, gate, up, down per layer and the output
      EXPECT_TRUE((*plan)->concurrent);
      ASSERT_EQ(got.size(), ref.size());
      EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0)
          << "async " << async << " share " << share;
    }
  }
}

TEST(RowSplit, DoubleTakesPartsAndResultsAreIdentical) {
  Fixture f = load_tiny(wide_config());
  const std::vector<float> ref = reference(f);
  for (const bool async : {false, true}) {
    // The double is preferred for MatMul; the CPU is the second backend for each split.
    RowMatMulDouble dbl;
    backends::CpuBackend cpu(2);
    sched::Scheduler s({&dbl, &cpu}, split_options(async, 0.5));
    const std::vector<float> got = run_steps(*f.arch, s, kPrompt, 6);
    EXPECT_GT(dbl.parts_run.load() + 0, 0);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0) << "async " << async;
  }
}

TEST(RowSplit, PartsWriteIntoTheOneOutputTensor) {
  Fixture f = load_tiny(wide_config());
  backends::CpuBackend a(1), b(1);
  sched::Scheduler s({&a, &b}, split_options(true, 0.5));
  auto plan = s.plan(f.arch->build_graph({9, 1}));
  ASSERT_TRUE(plan.has_value());
  const sched::Plan& p = **plan;
  int parts = 0;
  for (int32_t i = 0; i < p.graph.size(); ++i) {
    const auto si = static_cast<size_t>(i);
    if (p.store_of[si] == i || p.rows[si].full()) continue;  // itself, or an op written in place
    ++parts;
    const int32_t owner = p.store_of[si];
    EXPECT_GT(owner, i) << "a part runs before its node";
    EXPECT_EQ(p.offset[si], -1);
    EXPECT_GE(p.offset[static_cast<size_t>(owner)], 0);
    EXPECT_NE(p.backend_of[si], p.backend_of[static_cast<size_t>(owner)]);
    // The two row ranges tile the output exactly.
    const auto& rp = p.rows[si];
    const auto& ro = p.rows[static_cast<size_t>(owner)];
    EXPECT_EQ(ro.begin, 0);
    EXPECT_EQ(ro.end, rp.begin);
    EXPECT_EQ(rp.end, p.graph.node(owner).ne[0]);
    // Nobody reads the part: readers name the node.
    for (int32_t j = 0; j < p.graph.size(); ++j) {
      for (int32_t src : p.graph.node(j).src) EXPECT_NE(src, i);
    }
  }
  EXPECT_EQ(parts, p.n_row_splits);
  EXPECT_EQ(parts, 11);
  // Both backends have activation memory: the parts' inputs were copied to the second one.
  EXPECT_GT(p.arena_bytes[0], 0);
  EXPECT_GT(p.arena_bytes[1], 0);
}

TEST(RowSplit, ConcurrentPlansNeverShareLiveMemory) {
  Fixture f = load_tiny(wide_config());
  for (const int32_t n_tok : {1, 7, 16}) {
    backends::CpuBackend a(1), b(1);
    sched::Scheduler s({&a, &b}, split_options(true, 0.4));
    auto plan = s.plan(f.arch->build_graph({n_tok, 1}));
    ASSERT_TRUE(plan.has_value());
    EXPECT_GT(test_support::check_plan_memory_is_ordered(**plan), 0);
    // Some split runs without waiting for everything before it: there is concurrency.
    bool overlap = false;
    const auto& splits = (*plan)->splits;
    for (size_t k = 1; k < splits.size() && !overlap; ++k) {
      if (splits[k].backend == splits[k - 1].backend) continue;
      overlap = std::find(splits[k].waits.begin(), splits[k].waits.end(), static_cast<int32_t>(k - 1)) ==
                splits[k].waits.end();
    }
    EXPECT_TRUE(overlap);
  }
  // Plans without row splits, and with the double, too.
  RowMatMulDouble dbl;
  backends::CpuBackend cpu(1);
  sched::Scheduler mixed({&dbl, &cpu}, split_options(true, 0.5));
  auto plan = mixed.plan(f.arch->build_graph({5, 1}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_GT(test_support::check_plan_memory_is_ordered(**plan), 0);
  sched::Scheduler plain({&dbl, &cpu});
  auto plan2 = plain.plan(f.arch->build_graph({5, 1}));
  ASSERT_TRUE(plan2.has_value());
  EXPECT_GT(test_support::check_plan_memory_is_ordered(**plan2), 0);
}

TEST(RowSplit, FailingQueueReturnsAnErrorWithoutHanging) {
  Fixture f = load_tiny(wide_config());
  const std::vector<float> ref = reference(f);
  for (const auto fault : {RowMatMulDouble::Fault::Error, RowMatMulDouble::Fault::Throw}) {
    for (const bool async : {false, true}) {
      for (const int at : {1, 3, 9}) {
        RowMatMulDouble dbl(fault, at);
        backends::CpuBackend cpu(2);
        sched::Scheduler s({&dbl, &cpu}, split_options(async, 0.5));
        std::string error;
        run_steps(*f.arch, s, kPrompt, 2, &error);
        EXPECT_NE(error.find(fault == RowMatMulDouble::Fault::Throw ? "out of memory" : "injected failure"),
                  std::string::npos)
            << error;
      }
    }
  }
  // The scheduler's queues survive a failure: a healthy scheduler after a failing one works.
  backends::CpuBackend a(1), b(1);
  sched::Scheduler s({&a, &b}, split_options(true, 0.5));
  const std::vector<float> got = run_steps(*f.arch, s, kPrompt, 6);
  EXPECT_EQ(got, ref);
}

TEST(RowSplit, OffByDefault) {
  Fixture f = load_tiny(wide_config());
  backends::CpuBackend a(1), b(1);
  sched::Scheduler s({&a, &b});
  auto plan = s.plan(f.arch->build_graph({3, 1}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ((*plan)->n_row_splits, 0);
  EXPECT_FALSE((*plan)->concurrent);  // everything on the first backend
  EXPECT_EQ((*plan)->splits.size(), 1u);
}

}  // namespace
}  // namespace geniex
