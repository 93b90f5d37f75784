// The static-int8 test double (tests/common/static_int8_double.hpp) under the scheduler: its
// capability answers (static step shapes, integer operands only), its int8 x int8 -> int32
// matmul against the scalar reference, the plan of a 128-token step (matmuls on the double,
// the rest on the CPU with reasons, copies both ways), and its checks and fault switch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "../common/static_int8_double.hpp"
#include "../common/test_seed.hpp"
#include "../common/tiny_model.hpp"
#include "backends/cpu/backend/cpu_backend.hpp"
#include "kv/kv_cache.hpp"
#include "models/architecture.hpp"
#include "sched/scheduler.hpp"

namespace geniex {
namespace {

using test_support::StaticInt8Double;

// Weight types chosen so the double takes some matmuls (Q8_0, Q4_0) and refuses others.
test_support::TinyLlamaConfig int8_config() {
  test_support::TinyLlamaConfig c;
  c.attn_type = DType::Q8_0;
  c.attn_out_type = DType::Q4_0;
  c.ffn_gate_type = DType::Q8_0;
  c.ffn_up_type = DType::Q4_1;  // asymmetric: refused
  c.ffn_down_type = DType::Q4_0;
  c.output_type = DType::F16;   // float: refused
  return c;
}

struct Fixture {
  gguf::File file;
  std::unique_ptr<models::Architecture> arch;
};

Fixture load(const test_support::TinyLlamaConfig& cfg) {
  const std::vector<uint8_t> bytes = test_support::make_tiny_llama(cfg);
  auto file = gguf::File::parse(MappedFile::from_bytes(bytes.data(), bytes.size()));
  EXPECT_TRUE(file.has_value()) << (file ? "" : file.error().to_string());
  Fixture f{std::move(file).value(), nullptr};
  auto arch = models::load_architecture(f.file);
  EXPECT_TRUE(arch.has_value()) << (arch ? "" : arch.error().to_string());
  f.arch = std::move(arch).value();
  return f;
}

bool takes(DType w) { return w == DType::Q8_0 || w == DType::Q4_0; }

TEST(StaticInt8Double, RefusesOtherStepSizesAndFloatOps) {
  Fixture f = load(int8_config());
  StaticInt8Double dbl;
  for (const int32_t n : {1, 5, 127, 129}) {
    const graph::Graph g = f.arch->build_graph({n, 1});
    for (const graph::Node& node : g.nodes()) {
      if (node.op == graph::Op::Weight || node.op == graph::Op::Input) continue;
      const backends::Support s = dbl.supports(g, node);
      EXPECT_FALSE(s.ok) << n << " " << node.name;
      EXPECT_EQ(s.reason, "static shapes: compiled for 128-token steps (this step has " + std::to_string(n) + ")");
    }
  }
  const graph::Graph g = f.arch->build_graph({128, 128});
  int taken = 0;
  for (const graph::Node& node : g.nodes()) {
    if (node.op == graph::Op::Weight || node.op == graph::Op::Input) continue;
    const backends::Support s = dbl.supports(g, node);
    if (node.op != graph::Op::MatMul) {
      EXPECT_FALSE(s.ok) << node.name;
      EXPECT_NE(s.reason.find("int8/int16 operands only: "), std::string::npos) << s.reason;
      EXPECT_NE(s.reason.find("needs float arithmetic"), std::string::npos) << s.reason;
      continue;
    }
    const DType w = g.node(node.src[0]).type;
    EXPECT_EQ(s.ok, takes(w)) << node.name;
    if (!s.ok) {
      EXPECT_NE(s.reason.find(std::string(dtype_name(w)) + " weights are not symmetric int8"), std::string::npos)
          << s.reason;
    }
    taken += s.ok;
  }
  EXPECT_EQ(taken, 2 * 6);  // per layer: q, k, v, gate (Q8_0), attn_out, down (Q4_0); not up (Q4_1)
}

// The double's matmul is the scalar reference's arithmetic (int32 per block, scales after, in
// block order), so it equals quant::vec_dot_ref on the same int8 activations bit for bit.
TEST(StaticInt8Double, MatMulEqualsScalarReference) {
  const uint32_t seed = test_support::test_seed();
  std::mt19937 rng = test_support::make_rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  constexpr int64_t K = 96, N = 37, T = 128;
  for (const DType type : {DType::Q8_0, DType::Q4_0}) {
    std::vector<float> wf(static_cast<size_t>(K * N));
    for (float& v : wf) v = dist(rng);
    const auto rb = static_cast<size_t>(row_bytes(type, K));
    std::vector<uint8_t> wq(rb * N);
    for (int64_t r = 0; r < N; ++r) quant::quantize_row_ref(type, wf.data() + r * K, wq.data() + static_cast<size_t>(r) * rb, K);
    graph::WeightRef wref;
    wref.name = "w";
    wref.type = type;
    wref.ne[0] = K;
    wref.ne[1] = N;
    wref.data = wq.data();
    wref.nbytes = wq.size();
    graph::WeightRef table;  // only gives x its shape: the test writes x itself
    table.name = "table";
    table.type = DType::F32;
    table.ne[0] = K;
    table.ne[1] = 4;

    graph::Graph g;
    const int32_t tokens = g.input(graph::InputKind::Tokens, T, "tokens");
    const int32_t x = g.get_rows(g.weight(table), tokens, "x");
    const int32_t w = g.weight(wref);
    const int32_t mm = g.matmul(w, x, "mm", 0);
    g.set_output(mm);

    StaticInt8Double dbl;
    ASSERT_TRUE(dbl.supports(g, g.node(mm)).ok);
    auto xbuf = dbl.allocate(g.node(x).nbytes());
    auto obuf = dbl.allocate(g.node(mm).nbytes());
    ASSERT_TRUE(xbuf && obuf);
    auto* xs = static_cast<float*>((*xbuf)->data());
    for (int64_t i = 0; i < K * T; ++i) xs[i] = dist(rng);
    auto* out = static_cast<float*>((*obuf)->data());
    std::fill(out, out + N * T, std::nanf(""));  // poison
    backends::ExecContext ctx;
    ctx.graph = &g;
    ctx.data.assign(static_cast<size_t>(g.size()), nullptr);
    ctx.data[static_cast<size_t>(x)] = xs;
    ctx.data[static_cast<size_t>(w)] = wq.data();
    ctx.data[static_cast<size_t>(mm)] = out;
    const int32_t ids[1] = {mm};
    ASSERT_TRUE(dbl.compute(ids, ctx).has_value());
    EXPECT_EQ(dbl.matmuls_run, 1);

    std::vector<uint8_t> act(static_cast<size_t>(row_bytes(DType::Q8_0, K)));
    int mismatches = 0;
    for (int64_t t = 0; t < T; ++t) {
      quant::quantize_activations_ref(DType::Q8_0, xs + t * K, act.data(), K);
      for (int64_t r = 0; r < N; ++r) {
        const float want = quant::vec_dot_ref(type, wq.data() + static_cast<size_t>(r) * rb, act.data(), K);
        mismatches += !(out[t * N + r] == want);
      }
    }
    EXPECT_EQ(mismatches, 0) << dtype_name(type) << " seed " << seed;
  }
}

struct StepResult {
  std::vector<float> logits;
  Status status;
};

StepResult run_step(const models::Architecture& arch, sched::Scheduler& s, kv::KvCache& cache,
                    const std::vector<int32_t>& tokens, int32_t n_out) {
  const auto n = static_cast<int32_t>(tokens.size());
  std::vector<int32_t> positions(tokens.size()), seqs(tokens.size(), 0), rows(static_cast<size_t>(n_out));
  for (int32_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = cache.seq_length(0) + i;
  for (int32_t i = 0; i < n_out; ++i) rows[static_cast<size_t>(i)] = n - n_out + i;
  StepResult r;
  r.status = cache.begin_batch(seqs, positions);
  if (!r.status) return r;
  auto plan = s.plan(arch.build_graph({n, n_out}));
  if (!plan) {
    r.status = plan.take_error();
    return r;
  }
  backends::StepData sd{tokens, positions, seqs, rows, &cache};
  auto out = s.execute(**plan, sd);
  if (!out) {
    r.status = out.take_error();
    return r;
  }
  r.logits.assign(*out, *out + arch.hparams().n_vocab * n_out);
  return r;
}

std::unique_ptr<kv::KvCache> make_cache(const models::Architecture& arch) {
  const models::HParams& hp = arch.hparams();
  kv::KvConfig kc;
  kc.n_layer = hp.n_layer;
  kc.n_head_kv = hp.n_head_kv;
  kc.head_dim = hp.head_dim;
  kc.n_ctx = 256;
  auto cache = kv::PagedKvCache::create(kc);
  EXPECT_TRUE(cache.has_value());
  return std::move(cache).value();
}

TEST(StaticInt8Double, PlanOf128TokenStepSplitsMatmulsFromTheRest) {
  Fixture f = load(int8_config());
  StaticInt8Double dbl;
  backends::CpuBackend cpu(1);
  sched::Scheduler s({&dbl, &cpu});
  auto plan = s.plan(f.arch->build_graph({128, 128}));
  ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
  const sched::Plan& p = **plan;
  int on_double = 0;
  for (int32_t i = 0; i < p.graph.size(); ++i) {
    const graph::Node& n = p.graph.node(i);
    const auto si = static_cast<size_t>(i);
    if (n.op == graph::Op::Weight || n.op == graph::Op::Input) continue;
    if (n.op == graph::Op::Copy) {
      EXPECT_NE(p.backend_of[si], p.backend_of[static_cast<size_t>(n.src[0])]);
      continue;
    }
    const bool mm_int8 = n.op == graph::Op::MatMul && takes(p.graph.node(n.src[0]).type);
    EXPECT_EQ(p.backend_of[si], mm_int8 ? 0 : 1) << n.name;
    if (mm_int8) {
      EXPECT_EQ(p.reason[si], "preferred");
      ++on_double;
    } else {
      EXPECT_EQ(p.reason[si].rfind("fallback: static-int8-double: ", 0), 0u) << p.reason[si];
    }
  }
  EXPECT_EQ(on_double, 12);
  EXPECT_GT(p.n_copies, 0);

  // Decode: nothing on the double, and the plan says why.
  auto decode = s.plan(f.arch->build_graph({1, 1}));
  ASSERT_TRUE(decode.has_value());
  for (int32_t i = 0; i < (*decode)->graph.size(); ++i) {
    const graph::Node& n = (*decode)->graph.node(i);
    if (n.op == graph::Op::Weight || n.op == graph::Op::Input) continue;
    EXPECT_EQ((*decode)->backend_of[static_cast<size_t>(i)], 1) << n.name;
    EXPECT_EQ((*decode)->reason[static_cast<size_t>(i)],
              "fallback: static-int8-double: static shapes: compiled for 128-token steps (this step has 1)");
  }
}

// A 128-token step through the mixed plan, against the CPU alone. With the CPU's kernels in the
// double the logits are the same bits (the plan's copies and splits lose nothing); with the
// double's own int8 arithmetic they differ only where a float-order ulp moved an int8 rounding
// (tests/runtime/test_static_shapes.cpp explains it; here, over 200 seeds, the largest difference
// was 2.5e-3 of the largest logit at the median and 3.3e-2 at most).
TEST(StaticInt8Double, MixedStepMatchesCpuOnly) {
  for (const auto arithmetic : {StaticInt8Double::Arithmetic::CpuKernels, StaticInt8Double::Arithmetic::OwnInt8}) {
    Fixture f = load(int8_config());
    std::mt19937 rng = test_support::make_rng(12);
    std::vector<int32_t> tokens(128);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 96);

    backends::CpuBackend cpu_ref(1);
    sched::Scheduler ref_s({&cpu_ref});
    auto ref_cache = make_cache(*f.arch);
    const StepResult ref = run_step(*f.arch, ref_s, *ref_cache, tokens, 128);
    ASSERT_TRUE(ref.status.has_value()) << ref.status.error().to_string();

    StaticInt8Double dbl(128, arithmetic);
    backends::CpuBackend cpu(1);
    sched::Scheduler s({&dbl, &cpu});
    auto cache = make_cache(*f.arch);
    const StepResult got = run_step(*f.arch, s, *cache, tokens, 128);
    ASSERT_TRUE(got.status.has_value()) << got.status.error().to_string();
    EXPECT_EQ(dbl.matmuls_run, 12);
    EXPECT_EQ(dbl.rows_run, 12 * 128);
    EXPECT_GT(dbl.copies_run, 0);

    float max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < ref.logits.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(ref.logits[i] - got.logits[i]));
      max_ref = std::max(max_ref, std::fabs(ref.logits[i]));
    }
    if (arithmetic == StaticInt8Double::Arithmetic::CpuKernels) {
      EXPECT_EQ(std::memcmp(ref.logits.data(), got.logits.data(), ref.logits.size() * sizeof(float)), 0)
          << "max|diff| " << max_diff;
    } else {
      std::printf("128-token step, own int8 arithmetic vs cpu: max|diff| %.3g of max|logit| %.3g\n",
                  static_cast<double>(max_diff), static_cast<double>(max_ref));
      EXPECT_LE(max_diff, 0.15f * max_ref);
    }
  }
}

TEST(StaticInt8Double, ReadingMemoryItDoesNotOwnIsAnError) {
  Fixture f = load(int8_config());
  const graph::Graph g = f.arch->build_graph({128, 1});
  int32_t mm = -1;
  for (int32_t i = 0; i < g.size() && mm < 0; ++i) {
    if (g.node(i).op == graph::Op::MatMul) mm = i;
  }
  ASSERT_GE(mm, 0);
  StaticInt8Double dbl;
  ASSERT_TRUE(dbl.supports(g, g.node(mm)).ok);
  auto out = dbl.allocate(g.node(mm).nbytes());
  ASSERT_TRUE(out.has_value());
  std::vector<float> host_x(static_cast<size_t>(g.node(g.node(mm).src[1]).n_elements()), 0.5f);
  backends::ExecContext ctx;
  ctx.graph = &g;
  ctx.data.assign(static_cast<size_t>(g.size()), nullptr);
  ctx.data[static_cast<size_t>(g.node(mm).src[0])] = const_cast<uint8_t*>(g.node(g.node(mm).src[0]).weight->data);
  ctx.data[static_cast<size_t>(g.node(mm).src[1])] = host_x.data();  // not the double's memory
  ctx.data[static_cast<size_t>(mm)] = (*out)->data();
  const int32_t ids[1] = {mm};
  const Status st = dbl.compute(ids, ctx);
  ASSERT_FALSE(st.has_value());
  EXPECT_NE(st.error().message.find("outside the double's own memory"), std::string::npos);
}

TEST(StaticInt8Double, ComputeFaultIsAnErrorValue) {
  Fixture f = load(int8_config());
  std::vector<int32_t> tokens(128, 7);
  StaticInt8Double dbl;
  backends::CpuBackend cpu(1);
  sched::Scheduler s({&dbl, &cpu});
  auto cache = make_cache(*f.arch);
  dbl.fail_at_compute = 1;
  const StepResult r = run_step(*f.arch, s, *cache, tokens, 1);
  ASSERT_FALSE(r.status.has_value());
  EXPECT_EQ(r.status.error().code, ErrorCode::BackendError);
  EXPECT_NE(r.status.error().message.find("injected fault"), std::string::npos);
  EXPECT_EQ(dbl.matmuls_run, 0);
}

}  // namespace
}  // namespace geniex
