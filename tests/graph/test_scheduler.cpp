// Scheduler tests: placement by capability with fallback reasons, copies between backends,
// liveness-based memory reuse, plan caching, and results of mixed plans equal to CPU-only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "../common/test_backends.hpp"
#include "../common/tiny_model.hpp"
#include "backends/cpu/backend/cpu_backend.hpp"
#include "backends/cpu/backend/ops.hpp"
#include "kv/kv_cache.hpp"
#include "models/architecture.hpp"
#include "sched/scheduler.hpp"

namespace geniex {
namespace {

struct Fixture {
  gguf::File file;
  std::unique_ptr<models::Architecture> arch;
};

Fixture load_tiny(const test_support::TinyLlamaConfig& cfg = {}) {
  const std::vector<uint8_t> bytes = test_support::make_tiny_llama(cfg);
  auto file = gguf::File::parse(MappedFile::from_bytes(bytes.data(), bytes.size()));
  EXPECT_TRUE(file.has_value()) << (file ? "" : file.error().to_string());
  Fixture f{std::move(file).value(), nullptr};
  auto arch = models::load_architecture(f.file);
  EXPECT_TRUE(arch.has_value()) << (arch ? "" : arch.error().to_string());
  f.arch = std::move(arch).value();
  return f;
}

// Runs a prompt then a few single-token steps; returns all logits, step after step.
std::vector<float> run_steps(const models::Architecture& arch, sched::Scheduler& sched,
                             const std::vector<int32_t>& prompt, int n_decode) {
  const models::HParams& hp = arch.hparams();
  kv::KvConfig kc;
  kc.n_layer = hp.n_layer;
  kc.n_head_kv = hp.n_head_kv;
  kc.head_dim = hp.head_dim;
  kc.n_ctx = 64;
  kc.block_size = 4;  // small blocks: attention crosses block boundaries
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
    backends::StepData sd{tokens, positions, seqs, out_rows, cache->get()};
    auto out = sched.execute(**plan, sd);
    EXPECT_TRUE(out.has_value()) << (out ? "" : out.error().to_string());
    all.insert(all.end(), *out, *out + hp.n_vocab);
    pos += static_cast<int32_t>(tokens.size());
    // next token: argmax, so a wrong step changes the whole continuation
    int32_t best = 0;
    for (int32_t v = 1; v < hp.n_vocab; ++v) if ((*out)[v] > (*out)[best]) best = v;
    tokens = {best};
  }
  return all;
}

TEST(Scheduler, CpuOnlyPlacesEverythingOnCpu) {
  Fixture f = load_tiny();
  backends::CpuBackend cpu(2);
  sched::Scheduler s({&cpu});
  auto plan = s.plan(f.arch->build_graph({5, 1}));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ((*plan)->n_copies, 0);
  EXPECT_EQ((*plan)->splits.size(), 1u);
  for (int32_t i = 0; i < (*plan)->graph.size(); ++i) {
    const auto& n = (*plan)->graph.node(i);
    if (n.op == graph::Op::Weight) {
      EXPECT_EQ((*plan)->backend_of[static_cast<size_t>(i)], -1);
      continue;
    }
    EXPECT_EQ((*plan)->backend_of[static_cast<size_t>(i)], 0) << n.name;
  }
}

TEST(Scheduler, FallbackRecordsReasonAndInsertsCopies) {
  Fixture f = load_tiny();
  test_support::MatMulOnlyBackend partial({DType::Q8_0, DType::F32});
  backends::CpuBackend cpu(2);
  sched::Scheduler s({&partial, &cpu});
  auto plan = s.plan(f.arch->build_graph({3, 1}));
  ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
  const sched::Plan& p = **plan;
  int on_partial = 0, copies = 0;
  for (int32_t i = 0; i < p.graph.size(); ++i) {
    const graph::Node& n = p.graph.node(i);
    const int32_t b = p.backend_of[static_cast<size_t>(i)];
    if (n.op == graph::Op::MatMul) {
      const DType w = p.graph.node(n.src[0]).type;
      const bool ok = w == DType::Q8_0 || w == DType::F32;
      EXPECT_EQ(b, ok ? 0 : 1) << n.name;
      if (!ok) {
        EXPECT_NE(p.reason[static_cast<size_t>(i)].find("fallback: matmul-only: no"), std::string::npos);
      }
      on_partial += ok;
    }
    if (n.op == graph::Op::RmsNorm) {
      EXPECT_EQ(b, 1);
      EXPECT_EQ(p.reason[static_cast<size_t>(i)], "fallback: matmul-only: only matmul");
    }
    if (n.op == graph::Op::Copy) {
      ++copies;
      // A copy lives on the backend of its reader and reads from the other one.
      EXPECT_NE(p.backend_of[static_cast<size_t>(n.src[0])], b);
    }
    // Every non-weight input of a node lives on the node's own backend.
    if (n.op != graph::Op::Copy && n.op != graph::Op::Weight && n.op != graph::Op::Input) {
      for (int32_t src : n.src) {
        if (src < 0 || p.graph.node(src).op == graph::Op::Weight) continue;
        EXPECT_EQ(p.backend_of[static_cast<size_t>(src)], b) << n.name << " reads " << p.graph.node(src).name;
      }
    }
  }
  // q, k, v, ffn_down per layer are Q8_0 and ffn_up is f32: 5 matmuls per layer.
  EXPECT_EQ(on_partial, 5 * 2);
  EXPECT_EQ(copies, p.n_copies);
  EXPECT_GT(copies, 0);
  EXPECT_GT(p.splits.size(), 2u);
}

TEST(Scheduler, NoCapableBackendIsAnError) {
  Fixture f = load_tiny();
  test_support::MatMulOnlyBackend partial({DType::Q8_0});
  sched::Scheduler s({&partial});
  auto plan = s.plan(f.arch->build_graph({1, 1}));
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code, ErrorCode::Unsupported);
  EXPECT_NE(plan.error().message.find("no backend can run node"), std::string::npos);
}

// Per node of the plan's graph: the last node that reads it, -1 if none.
std::vector<int32_t> last_readers(const sched::Plan& p) {
  std::vector<int32_t> last(static_cast<size_t>(p.graph.size()), -1);
  for (int32_t i = 0; i < p.graph.size(); ++i)
    for (int32_t src : p.graph.node(i).src) if (src >= 0) last[static_cast<size_t>(src)] = i;
  return last;
}

TEST(Scheduler, MemoryPlanReusesWithoutOverlap) {
  Fixture f = load_tiny();
  test_support::MatMulOnlyBackend partial({DType::Q8_0, DType::F32});
  backends::CpuBackend cpu(1);
  sched::Scheduler s({&partial, &cpu});
  auto plan = s.plan(f.arch->build_graph({7, 2}));
  ASSERT_TRUE(plan.has_value());
  const sched::Plan& p = **plan;
  const auto n = static_cast<size_t>(p.graph.size());
  std::vector<int32_t> last = last_readers(p);
  last[static_cast<size_t>(p.graph.output())] = p.graph.size();
  std::vector<int64_t> total(2, 0);
  for (size_t a = 0; a < n; ++a) {
    if (p.offset[a] < 0) continue;
    const int64_t sa = static_cast<int64_t>(p.graph.node(static_cast<int32_t>(a)).nbytes());
    total[static_cast<size_t>(p.backend_of[a])] += sa;
    EXPECT_LE(p.offset[a] + sa, p.arena_bytes[static_cast<size_t>(p.backend_of[a])]);
    for (size_t b = a + 1; b < n; ++b) {
      if (p.offset[b] < 0 || p.backend_of[a] != p.backend_of[b]) continue;
      // Lifetimes (inputs are written before the first node runs): closed intervals.
      auto start = [&](size_t x) -> int64_t {
        return p.graph.node(static_cast<int32_t>(x)).op == graph::Op::Input ? 0 : static_cast<int64_t>(x);
      };
      // A storage lives until the last use of every node written into it (ops in place).
      auto end = [&](size_t x) {
        int64_t e = std::max<int64_t>(static_cast<int64_t>(x), last[x]);
        for (size_t t = 0; t < n; ++t) {
          if (static_cast<size_t>(p.store_of[t]) == x) e = std::max<int64_t>(e, std::max<int64_t>(static_cast<int64_t>(t), last[t]));
        }
        return e;
      };
      if (start(a) > end(b) || start(b) > end(a)) continue;
      const int64_t sb = static_cast<int64_t>(p.graph.node(static_cast<int32_t>(b)).nbytes());
      const bool disjoint = p.offset[a] + sa <= p.offset[b] || p.offset[b] + sb <= p.offset[a];
      EXPECT_TRUE(disjoint) << p.graph.node(static_cast<int32_t>(a)).name << " overlaps "
                            << p.graph.node(static_cast<int32_t>(b)).name;
    }
  }
  // Reuse: the arena is far smaller than the sum of all activations.
  EXPECT_LT(p.arena_bytes[1] * 2, total[1]);
}

// Element-wise ops on the CPU write over a first input that dies at them (SwiGLU over the gate
// projection, residual adds): same storage, never an input that is read later or that lives
// on another backend, and the results stay those of a plan without ops in place, bit for bit.
TEST(Scheduler, ElementwiseOpsRunInPlaceOverDyingInputs) {
  Fixture f = load_tiny();
  backends::CpuBackend cpu(1);
  sched::Scheduler s({&cpu});
  auto plan = s.plan(f.arch->build_graph({7, 2}));
  ASSERT_TRUE(plan.has_value());
  const sched::Plan& p = **plan;
  const std::vector<int32_t> last = last_readers(p);
  int swiglu = 0, in_place = 0;
  for (int32_t i = 0; i < p.graph.size(); ++i) {
    const auto si = static_cast<size_t>(i);
    const graph::Node& node = p.graph.node(i);
    if (node.op == graph::Op::SwiGlu) ++swiglu;
    if (p.store_of[si] == i) continue;
    ++in_place;
    const auto in0 = static_cast<size_t>(node.src[0]);
    EXPECT_TRUE(node.op == graph::Op::SwiGlu || node.op == graph::Op::Add) << node.name;
    EXPECT_EQ(p.store_of[si], p.store_of[in0]) << node.name << " is not written over its first input";
    EXPECT_EQ(last[in0], i) << node.name << ": its input is read after it";
    EXPECT_EQ(p.offset[si], -1);
  }
  EXPECT_GT(swiglu, 0);
  EXPECT_GE(in_place, swiglu) << "every SwiGLU writes over its gate";

  // Bit for bit the results of a plan without ops in place, with a smaller arena.
  sched::SchedulerOptions no;
  no.in_place = false;
  backends::CpuBackend cpu2(2);
  sched::Scheduler separate({&cpu2}, no);
  auto plan2 = separate.plan(f.arch->build_graph({7, 2}));
  ASSERT_TRUE(plan2.has_value());
  for (int32_t i = 0; i < (*plan2)->graph.size(); ++i) EXPECT_EQ((*plan2)->store_of[static_cast<size_t>(i)], i);
  EXPECT_LT(p.arena_bytes[0], (*plan2)->arena_bytes[0]);
  backends::CpuBackend cpu3(2);
  sched::Scheduler shared({&cpu3});
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 7};
  const std::vector<float> want = run_steps(*f.arch, separate, prompt, 3);
  const std::vector<float> got = run_steps(*f.arch, shared, prompt, 3);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
}

// The CPU compute loop's barriers follow memory dependencies; with a barrier after every node
// the results are the same bits (4 threads on fewer cores: a missing barrier shows up as a
// race, and under TSan as a report), for a prompt and decode steps. The second model's q and k
// quantize their input as Q8_K and its v as Q8_0, with no barrier between them in decode: each
// thread's part of the work buffer must not overlap another's in either format.
TEST(Scheduler, BarriersByDependencyGiveTheSameBitsAsEveryNode) {
  test_support::TinyLlamaConfig mixed;
  mixed.n_embd = 512;
  mixed.n_head = 8;
  mixed.n_head_kv = 2;
  mixed.attn_type = DType::Q4_K;
  mixed.attn_v_type = DType::Q8_0;
  for (const test_support::TinyLlamaConfig& cfg : {test_support::TinyLlamaConfig{}, mixed}) {
    Fixture f = load_tiny(cfg);
    const std::vector<int32_t> prompt = {3, 17, 42, 5, 88, 1, 60, 9, 12};
    backends::CpuBackend all(4);
    all.set_barrier_every_node(true);
    sched::Scheduler s_all({&all});
    backends::CpuBackend dep(4);
    sched::Scheduler s_dep({&dep});
    for (int round = 0; round < 3; ++round) {
      const std::vector<float> want = run_steps(*f.arch, s_all, prompt, 8);
      const std::vector<float> got = run_steps(*f.arch, s_dep, prompt, 8);
      ASSERT_EQ(want.size(), got.size());
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << "n_embd " << cfg.n_embd << ", round " << round;
    }
  }
}

// One-token attention over a long context runs in three phases split across the threads
// (op_attention.cpp); the same bits as the unit path, here taken from the first key on, with
// 1, 3 and 4 threads, head size 16 (groups of 2) and 64 (groups of 3, 4 KV heads in groups of 2,
// one KV head of 8), and across KV blocks.
TEST(Scheduler, SplitDecodeAttentionGivesTheUnitPathsBits) {
  test_support::TinyLlamaConfig wide;
  wide.n_embd = 384;
  wide.n_head = 6;
  wide.n_head_kv = 2;
  test_support::TinyLlamaConfig many_kv;
  many_kv.n_embd = 512;
  many_kv.n_head = 8;
  many_kv.n_head_kv = 4;
  test_support::TinyLlamaConfig group8;  // 8 queries per KV head: the scores' query-lanes kernels
  group8.n_embd = 512;
  group8.n_head = 8;
  group8.n_head_kv = 1;
  for (const test_support::TinyLlamaConfig& cfg : {test_support::TinyLlamaConfig{}, wide, many_kv, group8}) {
    Fixture f = load_tiny(cfg);
    const std::vector<int32_t> prompt = {3, 17, 42, 5, 88, 1, 60, 9, 12};
    for (const int threads : {1, 3, 4}) {
      backends::CpuBackend units(threads);
      units.set_attention_split_min_keys(1 << 30);
      sched::Scheduler s_units({&units});
      backends::CpuBackend split(threads);
      split.set_attention_split_min_keys(1);
      sched::Scheduler s_split({&split});
      const uint64_t runs0 = backends::cpu_ops::attention_split_runs();
      const std::vector<float> want = run_steps(*f.arch, s_units, prompt, 40);
      const uint64_t runs1 = backends::cpu_ops::attention_split_runs();
      const std::vector<float> got = run_steps(*f.arch, s_split, prompt, 40);
      const uint64_t runs2 = backends::cpu_ops::attention_split_runs();
      ASSERT_EQ(want.size(), got.size());
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << "n_embd " << cfg.n_embd << ", " << threads << " threads";
      EXPECT_EQ(runs1, runs0) << "the unit path's backend ran the split path";
      EXPECT_EQ(runs2 - runs1, 40u * static_cast<uint64_t>(cfg.n_layer)) << "every decode step's attention splits";
    }
  }
}

TEST(Scheduler, PlansAreCachedBySignature) {
  Fixture f = load_tiny();
  backends::CpuBackend cpu(1);
  sched::Scheduler s({&cpu});
  auto a = s.plan(f.arch->build_graph({1, 1}));
  auto b = s.plan(f.arch->build_graph({1, 1}));
  auto c = s.plan(f.arch->build_graph({4, 1}));
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->get(), b->get());
  EXPECT_NE(a->get(), c->get());
  EXPECT_EQ(s.cached_plans(), 2u);
}

TEST(Scheduler, MixedPlanMatchesCpuOnly) {
  Fixture f = load_tiny();
  const std::vector<int32_t> prompt = {3, 17, 42, 5, 88, 1, 60};
  backends::CpuBackend cpu_a(2);
  sched::Scheduler only_cpu({&cpu_a});
  const std::vector<float> ref = run_steps(*f.arch, only_cpu, prompt, 6);

  test_support::MatMulOnlyBackend partial({DType::Q8_0, DType::F32});
  backends::CpuBackend cpu_b(2);
  sched::Scheduler mixed({&partial, &cpu_b});
  const std::vector<float> got = run_steps(*f.arch, mixed, prompt, 6);
  EXPECT_GT(partial.nodes_run, 0);
  ASSERT_EQ(ref.size(), got.size());
  float max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) max_diff = std::max(max_diff, std::fabs(ref[i] - got[i]));
  // Same kernels on the same rows: identical results.
  EXPECT_EQ(max_diff, 0.0f);
}

// The queued run starts one worker per backend when a scheduler first runs a plan with
// concurrent splits. Eight backends, most of them idle, and a fresh scheduler each time: every
// start races its workers against the queues' construction (the case ASan caught once, a
// worker reading a queue the constructor was still moving). Each run also gives CPU's bits.
TEST(Scheduler, QueuedRunsStartCleanlyWithManyBackends) {
  Fixture f = load_tiny();
  const std::vector<int32_t> prompt = {3, 17, 42, 5};
  backends::CpuBackend cpu_ref(1);
  sched::Scheduler only_cpu({&cpu_ref});
  const std::vector<float> ref = run_steps(*f.arch, only_cpu, prompt, 1);
  for (int round = 0; round < 12; ++round) {
    test_support::MatMulOnlyBackend partial({DType::Q8_0, DType::F32});
    std::vector<std::unique_ptr<test_support::MatMulOnlyBackend>> idle;
    std::vector<backends::Backend*> list = {&partial};
    for (int i = 0; i < 6; ++i) {
      idle.push_back(std::make_unique<test_support::MatMulOnlyBackend>(std::set<DType>{}, "idle-" + std::to_string(i)));
      list.push_back(idle.back().get());
    }
    backends::CpuBackend cpu(1);
    list.push_back(&cpu);
    sched::Scheduler mixed(list);
    // The case under test: a plan over two backends that runs on the per-backend queues.
    auto plan = mixed.plan(f.arch->build_graph({static_cast<int32_t>(prompt.size()), 1}));
    ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
    ASSERT_TRUE((*plan)->concurrent) << "the mixed plan would run sequentially, not on the queues";
    EXPECT_EQ(run_steps(*f.arch, mixed, prompt, 1), ref) << "round " << round;
    EXPECT_GT(partial.nodes_run, 0);
  }
}

TEST(Scheduler, ThreadCountDoesNotChangeResults) {
  Fixture f = load_tiny();
  const std::vector<int32_t> prompt = {9, 8, 7, 6, 5, 4, 3, 2, 1};
  backends::CpuBackend one(1), three(3);
  sched::Scheduler s1({&one}), s3({&three});
  EXPECT_EQ(run_steps(*f.arch, s1, prompt, 4), run_steps(*f.arch, s3, prompt, 4));
}

}  // namespace
}  // namespace geniex
