// OpenCL backend: fault injection (build and allocation failures fall back to the CPU,
// never crash), per-kernel fallback, and a scheduled graph that mixes both backends
// (copies in both directions) agreeing with the CPU alone. Skips without an OpenCL device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <random>

#include "backends/cpu/backend/cpu_backend.hpp"
#include "backends/opencl/opencl_backend.hpp"
#include "kv/kv_cache.hpp"
#include "quant/quant.hpp"
#include "sched/scheduler.hpp"
#include "../common/random_weights.hpp"

namespace geniex::backends::opencl {
namespace {

#define GX_REQUIRE_OPENCL()                                                            \
  do {                                                                                 \
    auto probe = probe_device();                                                       \
    if (!probe) GTEST_SKIP() << "no OpenCL device: " << probe.error().message;         \
  } while (0)

std::unique_ptr<OpenClBackend> make_backend(const std::string& fault) {
  auto f = Fault::parse(fault);
  EXPECT_TRUE(f.has_value());
  OpenClBackend::Options o;
  o.fault = *f;
  auto be = OpenClBackend::create(o);
  EXPECT_TRUE(be.has_value()) << be.error().to_string();
  return be ? std::move(be).value() : nullptr;
}

// A small model-like graph: embedding lookup (Q8_0), norm, Q4_0 and Q4_K projections, add.
struct MiniModel {
  test_support::RandomWeights store;
  graph::Graph g;

  int32_t weight(const std::string& name, DType t, int64_t k, int64_t n, std::mt19937& rng) {
    return store.add(g, name, t, k, n, rng);
  }

  explicit MiniModel(int64_t n_tok) {
    std::mt19937 rng(7);
    const int32_t tok = g.input(graph::InputKind::Tokens, n_tok, "tokens");
    const int32_t emb = weight("emb", DType::Q8_0, 256, 50, rng);
    const int32_t x = g.get_rows(emb, tok, "x");
    const int32_t norm_w = weight("norm", DType::F32, 256, 1, rng);
    const int32_t h = g.rms_norm(x, norm_w, 1e-5f, "h", 0);
    const int32_t a = g.matmul(weight("wa", DType::Q4_0, 256, 256, rng), h, "a", 0);
    const int32_t b = g.matmul(weight("wb", DType::Q4_K, 256, 256, rng), h, "b", 0);
    const int32_t s = g.swiglu(a, b, "s", 0);
    const int32_t y = g.matmul(weight("wc", DType::Q6_K, 256, 70, rng), g.add(s, s, "s2", 0), "y", 0);
    g.set_output(y);
  }
};

std::vector<float> run(sched::Scheduler& s, const graph::Graph& g, const std::vector<int32_t>& tokens) {
  auto plan = s.plan(g);
  EXPECT_TRUE(plan.has_value()) << plan.error().to_string();
  if (!plan) return {};
  StepData step;
  step.tokens = tokens;
  auto out = s.execute(**plan, step);
  EXPECT_TRUE(out.has_value()) << out.error().to_string();
  if (!out) return {};
  return std::vector<float>(*out, *out + g.node(g.output()).n_elements());
}

double nmse(const std::vector<float>& y, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(y[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(y[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  return num / den;
}

TEST(OpenClFault, ParsesSpecs) {
  auto f = Fault::parse("build:mul_mv_q4_0,alloc");
  ASSERT_TRUE(f.has_value());
  EXPECT_FALSE(f->build);
  EXPECT_TRUE(f->alloc);
  EXPECT_EQ(f->missing_kernels.count("mul_mv_q4_0"), 1u);
  auto bad = Fault::parse("explode");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("explode"), std::string::npos);
}

TEST(OpenClBackend, MixedPlanMatchesCpuAlone) {
  GX_REQUIRE_OPENCL();
  for (int64_t n_tok : {1, 3, 21}) {
    MiniModel m(n_tok);
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < n_tok; ++i) tokens.push_back(static_cast<int32_t>((i * 13 + 5) % 50));
    CpuBackend cpu_ref(2);
    sched::Scheduler ref_sched({&cpu_ref});
    const std::vector<float> ref = run(ref_sched, m.g, tokens);

    // The Q4_K matrix-vector kernel "failed to build": those MatMuls run on the CPU, the
    // rest on OpenCL, with copies both ways.
    auto cl = make_backend("build:mul_mv_q4_k,build:mul_mm_q4_k");
    ASSERT_NE(cl, nullptr);
    CpuBackend cpu(2);
    sched::Scheduler mixed({cl.get(), &cpu});
    auto plan = mixed.plan(m.g);
    ASSERT_TRUE(plan.has_value());
    int on_cpu = 0, on_cl = 0;
    for (int32_t i = 0; i < (*plan)->graph.size(); ++i) {
      const graph::Node& n = (*plan)->graph.node(i);
      if (n.op == graph::Op::Weight || n.op == graph::Op::Input || n.op == graph::Op::Copy) continue;
      const int32_t b = (*plan)->backend_of[static_cast<size_t>(i)];
      (b == 0 ? on_cl : on_cpu)++;
      if (n.name == "b") {
        EXPECT_EQ(b, 1);
        EXPECT_NE((*plan)->reason[static_cast<size_t>(i)].find("mul_mv_q4_k"), std::string::npos)
            << (*plan)->reason[static_cast<size_t>(i)];
      }
    }
    EXPECT_EQ(on_cpu, 1);
    EXPECT_GE(on_cl, 5);
    EXPECT_GE((*plan)->n_copies, 2);
    const std::vector<float> got = run(mixed, m.g, tokens);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_LT(nmse(got, ref), 1e-8) << "tokens " << n_tok;
  }
}

TEST(OpenClBackend, BuildFailureFallsBackToCpu) {
  GX_REQUIRE_OPENCL();
  auto cl = make_backend("build");
  ASSERT_NE(cl, nullptr);
  EXPECT_NE(cl->unusable_reason().find("build"), std::string::npos);
  MiniModel m(4);
  CpuBackend cpu(2);
  sched::Scheduler s({cl.get(), &cpu});
  auto plan = s.plan(m.g);
  ASSERT_TRUE(plan.has_value());
  for (const graph::Node& n : (*plan)->graph.nodes()) {
    const auto i = static_cast<size_t>(&n - (*plan)->graph.nodes().data());
    if (n.op == graph::Op::Weight || n.op == graph::Op::Input) continue;
    EXPECT_EQ((*plan)->backend_of[i], 1) << n.name;
    EXPECT_NE((*plan)->reason[i].find("program build failed"), std::string::npos) << (*plan)->reason[i];
  }
  CpuBackend cpu_ref(2);
  sched::Scheduler ref({&cpu_ref});
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  EXPECT_EQ(run(s, m.g, tokens), run(ref, m.g, tokens));
}

TEST(OpenClBackend, AllocationFailureFallsBackAndNeverCrashes) {
  GX_REQUIRE_OPENCL();
  auto cl = make_backend("alloc");
  ASSERT_NE(cl, nullptr);
  EXPECT_NE(cl->unusable_reason().find("cannot allocate"), std::string::npos) << cl->unusable_reason();
  auto buf = cl->allocate(1 << 20);
  ASSERT_FALSE(buf.has_value());
  EXPECT_EQ(buf.error().code, ErrorCode::OutOfMemory);
  MiniModel m(2);
  CpuBackend cpu(2), cpu_ref(2);
  sched::Scheduler s({cl.get(), &cpu});
  sched::Scheduler ref({&cpu_ref});
  const std::vector<int32_t> tokens = {9, 8};
  EXPECT_EQ(run(s, m.g, tokens), run(ref, m.g, tokens));
  // compute() on an unusable backend is an error value, not a crash.
  ExecContext ctx;
  ctx.graph = &m.g;
  const int32_t out = m.g.output();
  EXPECT_FALSE(cl->compute(std::span<const int32_t>(&out, 1), ctx));
}

TEST(OpenClBackend, WeightsAreWrappedOncePerWeight) {
  GX_REQUIRE_OPENCL();
  auto cl = make_backend("");
  ASSERT_NE(cl, nullptr);
  ASSERT_TRUE(cl->unusable_reason().empty()) << cl->unusable_reason();
  MiniModel m(2);
  sched::Scheduler s({cl.get()});
  const std::vector<int32_t> tokens = {3, 4};
  const std::vector<float> a = run(s, m.g, tokens);
  EXPECT_EQ(cl->cached_weights(), 5u);  // emb, norm, wa, wb, wc
  const std::vector<float> b = run(s, m.g, tokens);
  EXPECT_EQ(cl->cached_weights(), 5u);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace geniex::backends::opencl
