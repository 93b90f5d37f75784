// Row splits between OpenCL and the CPU, run on concurrent queues: a graph of 32-element
// block types (whose OpenCL kernels accumulate in the CPU's order) gives CPU-identical
// outputs on devices with fp64; SmolLM2 with every layer on OpenCL and the large MatMuls
// split with the CPU decodes the CPU's greedy tokens (bit-identical logits on the exact
// path); fault injection falls back without a crash; a traced run has both queues' rows.
// Skips without an OpenCL device (and the SmolLM2 tests without the model).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include <unistd.h>

#include "backends/cpu/backend/cpu_backend.hpp"
#include "backends/opencl/opencl_backend.hpp"
#include "core/cpu_features.hpp"
#include "geniex/geniex.hpp"
#include "quant/quant.hpp"
#include "runtime/model_path.hpp"
#include "sched/scheduler.hpp"
#include "../common/random_weights.hpp"

namespace geniex::backends::opencl {
namespace {

#define GX_REQUIRE_OPENCL()                                                    \
  do {                                                                         \
    auto probe = probe_device();                                               \
    if (!probe) GTEST_SKIP() << "no OpenCL device: " << probe.error().message; \
  } while (0)

// The exact paths run (the CPU's summation orders) where the program has the fp64 kernels
// and the CPU its AVX2+FMA helpers.
bool exact_device() {
#if defined(__x86_64__) && defined(__GLIBC__)
  auto rt = ClRuntime::get(Fault{});
  const CpuFeatures& f = cpu_features();
  return rt && (*rt)->has_kernel("attention_exact_f32") && f.avx2 && f.fma && f.f16c;
#else
  return false;
#endif
}

std::unique_ptr<OpenClBackend> make_backend(const std::string& fault) {
  auto f = Fault::parse(fault);
  EXPECT_TRUE(f.has_value());
  OpenClBackend::Options o;
  o.fault = *f;
  auto be = OpenClBackend::create(o);
  EXPECT_TRUE(be.has_value()) << be.error().to_string();
  return be ? std::move(be).value() : nullptr;
}

// x = rows of an embedding; h = norm(x); a = Wa h (Q4_0, 512 rows), b = Wb h (Q4_1, 512 rows),
// s = a + b; y = Wc s (Q8_0, 384 rows). Every MatMul is large enough to split.
struct BlockModel {
  test_support::RandomWeights store;
  graph::Graph g;

  int32_t weight(const std::string& name, DType t, int64_t k, int64_t n, std::mt19937& rng) {
    return store.add(g, name, t, k, n, rng);
  }

  explicit BlockModel(int64_t n_tok) {
    std::mt19937 rng(11);
    const int32_t tok = g.input(graph::InputKind::Tokens, n_tok, "tokens");
    const int32_t x = g.get_rows(weight("emb", DType::Q8_0, 256, 64, rng), tok, "x");
    const int32_t h = g.rms_norm(x, weight("norm", DType::F32, 256, 1, rng), 1e-5f, "h", 0);
    const int32_t a = g.matmul(weight("wa", DType::Q4_0, 256, 512, rng), h, "a", 0);
    const int32_t b = g.matmul(weight("wb", DType::Q4_1, 256, 512, rng), h, "b", 0);
    const int32_t y = g.matmul(weight("wc", DType::Q8_0, 512, 384, rng), g.add(a, b, "s", 0), "y", 0);
    g.set_output(y);
  }
};

std::vector<float> run(sched::Scheduler& s, const graph::Graph& g, const std::vector<int32_t>& tokens,
                       std::string* error = nullptr) {
  auto plan = s.plan(g);
  EXPECT_TRUE(plan.has_value()) << plan.error().to_string();
  if (!plan) return {};
  StepData step;
  step.tokens = tokens;
  auto out = s.execute(**plan, step);
  if (!out) {
    if (error != nullptr) *error = out.error().to_string();
    else ADD_FAILURE() << out.error().to_string();
    return {};
  }
  return std::vector<float>(*out, *out + g.node(g.output()).n_elements());
}

sched::SchedulerOptions split_options(double share) {
  sched::SchedulerOptions o;
  o.row_split = true;
  o.min_rows = 256;
  o.split_share = share;
  return o;
}

TEST(OpenClRowSplit, CpuAndOpenClPartsEqualTheCpuAlone) {
  GX_REQUIRE_OPENCL();
  const bool exact = exact_device();
  for (const int64_t n_tok : {1, 5, 19}) {
    BlockModel m(n_tok);
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < n_tok; ++i) tokens.push_back(static_cast<int32_t>((i * 7 + 3) % 64));
    CpuBackend cpu_ref(2);
    sched::Scheduler ref_sched({&cpu_ref});
    const std::vector<float> ref = run(ref_sched, m.g, tokens);
    for (const double share : {0.25, 0.5}) {
      auto cl = make_backend("");
      ASSERT_NE(cl, nullptr);
      ASSERT_TRUE(cl->unusable_reason().empty()) << cl->unusable_reason();
      CpuBackend cpu(1);
      sched::Scheduler s({cl.get(), &cpu}, split_options(share));
      auto plan = s.plan(m.g);
      ASSERT_TRUE(plan.has_value());
      EXPECT_EQ((*plan)->n_row_splits, 3);
      for (int32_t i = 0; i < (*plan)->graph.size(); ++i) {
        if ((*plan)->store_of[static_cast<size_t>(i)] == i) continue;
        EXPECT_EQ((*plan)->backend_of[static_cast<size_t>(i)], 1) << "the CPU writes the part";
        EXPECT_EQ((*plan)->backend_of[static_cast<size_t>((*plan)->store_of[static_cast<size_t>(i)])], 0);
      }
      EXPECT_EQ((*plan)->concurrent, cl->device_info().unified_memory);
      const std::vector<float> got = run(s, m.g, tokens);
      ASSERT_EQ(got.size(), ref.size());
      float max_diff = 0;
      for (size_t i = 0; i < ref.size(); ++i) max_diff = std::max(max_diff, std::fabs(got[i] - ref[i]));
      if (exact) {
        EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0)
            << "tokens " << n_tok << " share " << share << " max diff " << max_diff;
      } else {
        EXPECT_LT(max_diff, 1e-3f) << "tokens " << n_tok;
      }
    }
  }
}

TEST(OpenClRowSplit, FaultsFallBackWithoutACrash) {
  GX_REQUIRE_OPENCL();
  BlockModel m(6);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  CpuBackend cpu_ref(2);
  sched::Scheduler ref({&cpu_ref});
  const std::vector<float> want = run(ref, m.g, tokens);
  for (const char* fault : {"alloc", "build", "build:mul_mm_q4_1,build:mul_mv_q4_1"}) {
    auto cl = make_backend(fault);
    ASSERT_NE(cl, nullptr);
    CpuBackend cpu(2);
    sched::Scheduler s({cl.get(), &cpu}, split_options(0.5));
    std::string error;
    const std::vector<float> got = run(s, m.g, tokens, &error);
    EXPECT_TRUE(error.empty()) << fault << ": " << error;
    EXPECT_EQ(got, want) << fault;
  }
}

// A queue whose backend fails mid-step: the OpenCL backend's arena allocation fails once the
// plan needs it (an unusable device refuses everything at planning, so the failure is forced
// here by an arena too large for the device).
TEST(OpenClRowSplit, ErrorsFromTheOpenClQueueAreValues) {
  GX_REQUIRE_OPENCL();
  auto cl = make_backend("");
  ASSERT_NE(cl, nullptr);
  BlockModel m(3);
  CpuBackend cpu(1);
  sched::Scheduler s({cl.get(), &cpu}, split_options(0.5));
  auto plan = s.plan(m.g);
  ASSERT_TRUE(plan.has_value());
  // The same plan on a backend list where the kernels are gone: compute() fails on the queue.
  auto broken = make_backend("build:mul_mv_q4_0");
  ASSERT_NE(broken, nullptr);
  CpuBackend cpu2(1);
  sched::Scheduler s2({broken.get(), &cpu2}, split_options(0.5));
  StepData step;
  const std::vector<int32_t> tokens = {1, 2, 3};
  step.tokens = tokens;
  auto out = s2.execute(**plan, step);  // a plan made for a working device
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.error().message.find("mul_mv_q4_0"), std::string::npos) << out.error().to_string();
  // The scheduler still runs a plan of its own afterwards.
  auto own = s2.plan(m.g);
  ASSERT_TRUE(own.has_value());
  EXPECT_TRUE(s2.execute(**own, step).has_value());
}

// ---- SmolLM2 through the public API ------------------------------------------------------

std::vector<int32_t> greedy(const Model& model, const std::string& prompt, int n, std::vector<std::vector<float>>* logits) {
  std::vector<int32_t> out;
  auto ids = model.tokenize(prompt);
  auto s = model.new_session();
  EXPECT_TRUE(ids.has_value() && s.has_value());
  if (!ids || !s) return out;
  std::vector<int32_t> feed = *ids;
  for (int i = 0; i < n; ++i) {
    auto l = s->eval(feed);
    EXPECT_TRUE(l.has_value()) << l.error().to_string();
    if (!l) return out;
    logits->emplace_back(l->begin(), l->end());
    const auto best = static_cast<int32_t>(std::max_element(l->begin(), l->end()) - l->begin());
    out.push_back(best);
    feed = {best};
  }
  return out;
}

TEST(OpenClRowSplit, SmolLM2GpuWithSplitRowsMatchesCpu) {
  GX_REQUIRE_OPENCL();
  const std::string path = test_support::default_model_path();
  if (::access(path.c_str(), R_OK) != 0) GTEST_SKIP() << "no model at " << path;
  auto build = [&](bool gpu, bool split) {
    auto b = ModelBuilder(path).with_threads(2).with_context(256);
    if (gpu) b.with_device(Device::gpu()).with_gpu_layers(1 << 20);
    else b.with_device(Device::cpu());
    return b.with_row_split(split).build();
  };
  auto cpu = build(false, false);
  auto gpu = build(true, false);
  auto split = build(true, true);
  ASSERT_TRUE(cpu.has_value()) << cpu.error().to_string();
  ASSERT_TRUE(gpu.has_value()) << gpu.error().to_string();
  ASSERT_TRUE(split.has_value()) << split.error().to_string();
  auto plan = split->plan(9);
  ASSERT_TRUE(plan.has_value());
  int parts = 0;
  for (const PlanRow& r : plan->rows) parts += r.reason.rfind("row split", 0) == 0;
  EXPECT_GT(parts, 30) << "ffn_gate/ffn_up per layer and the output head";
  // Where OpenCL alone reproduces the CPU bit for bit (fp64 device, CPU kernels in the order
  // the OpenCL ones follow), the split must too; elsewhere tokens may differ only at a tie.
  std::vector<std::vector<float>> l_cpu, l_gpu;
  greedy(*cpu, "Hello", 1, &l_cpu);
  greedy(*gpu, "Hello", 1, &l_gpu);
  const bool exact = exact_device() && l_cpu == l_gpu;
  std::printf("opencl alone %s the cpu's logits\n", exact ? "reproduces" : "does not reproduce");
  for (const std::string prompt : {"The capital of France is", "def fibonacci(n):"}) {
    std::vector<std::vector<float>> la, lb;
    const std::vector<int32_t> a = greedy(*cpu, prompt, 24, &la);
    const std::vector<int32_t> b = greedy(*split, prompt, 24, &lb);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      if (exact) {
        EXPECT_EQ(la[i], lb[i]) << prompt << ": logits differ at token " << i;
      }
      if (a[i] != b[i]) {
        const float gap = la[i][static_cast<size_t>(a[i])] - la[i][static_cast<size_t>(b[i])];
        EXPECT_FALSE(exact) << prompt << ": token " << i << " differs on the exact path";
        EXPECT_LT(gap, 0.05f) << prompt << ": token " << i << " differs and is not a near-tie";
        break;
      }
    }
  }
}

TEST(OpenClRowSplit, TraceOfSmolLM2HasBothQueues) {
  GX_REQUIRE_OPENCL();
  const std::string path = test_support::default_model_path();
  if (::access(path.c_str(), R_OK) != 0) GTEST_SKIP() << "no model at " << path;
  const std::string trace =
      (std::filesystem::temp_directory_path() / ("geniex_cl_trace_" + std::to_string(::getpid()) + ".json")).string();
  {
    auto model = ModelBuilder(path)
                     .with_device(Device::gpu())
                     .with_threads(2)
                     .with_context(128)
                     .with_gpu_layers(1 << 20)
                     .with_row_split(true)
                     .with_trace(trace)
                     .build();
    ASSERT_TRUE(model.has_value()) << model.error().to_string();
    std::vector<std::vector<float>> l;
    EXPECT_EQ(greedy(*model, "Hello", 3, &l).size(), 3u);
  }
  std::ifstream in(trace);
  ASSERT_TRUE(in.good());
  const auto j = nlohmann::json::parse(in, nullptr, false);
  std::remove(trace.c_str());
  ASSERT_FALSE(j.is_discarded());
  std::map<int, std::string> rows;
  std::map<int, int> events;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") rows[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
    if (e["ph"] == "X" && e["cat"] != "step") ++events[e["tid"].get<int>()];
  }
  EXPECT_EQ(rows[1], "opencl queue");
  EXPECT_EQ(rows[2], "cpu queue");
  EXPECT_GT(events[1], 0);
  EXPECT_GT(events[2], 0);
  // An unwritable trace path is an error at build time.
  auto bad = ModelBuilder(path).with_device(Device::cpu()).with_trace("/nonexistent-dir/t.json").build();
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("trace"), std::string::npos);
}

}  // namespace
}  // namespace geniex::backends::opencl
