// Cost model and cost-based placement: node and copy estimates from a given profile, the
// profile's JSON round trip and its errors, placement that moves work to a faster backend
// only when the copies pay off (checked against hand-computed totals), ties to the declared
// order, and forced GPU layers.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "../common/costed_backend.hpp"
#include "../common/tiny_model.hpp"
#include "models/architecture.hpp"
#include "sched/cost_model.hpp"
#include "sched/place.hpp"
#include "sched/profile.hpp"
#include "sched/scheduler.hpp"

namespace geniex {
namespace {

using backends::DeviceKind;
using graph::Op;
using test_support::CostedBackend;

sched::BackendProfile rates_profile() {
  sched::BackendProfile p;
  p.name = "dev";
  p.launch_us = 5;
  p.memory_gbps = 10;
  p.matmul_decode_gflops = {{DType::F32, 4}, {DType::Q4_0, 8}};
  p.matmul_prefill_gflops = {{DType::F32, 100}, {DType::Q4_0, 200}};
  p.transfer_latency_us = 20;
  p.upload_gbps = 5;
  p.download_gbps = 2;
  return p;
}

struct MatMulGraph {
  graph::WeightRef table, w;
  graph::Graph g;
  int32_t mm = 0;
};

std::unique_ptr<MatMulGraph> matmul_graph(DType type, int64_t K, int64_t N, int64_t T) {
  auto m = std::make_unique<MatMulGraph>();
  m->table = {"table", DType::F32, {K, 4, 1, 1}, nullptr, 0};
  m->w = {"w", type, {K, N, 1, 1}, nullptr, 0};
  const int32_t ids = m->g.input(graph::InputKind::Tokens, T, "ids");
  const int32_t x = m->g.get_rows(m->g.weight(m->table), ids, "x");
  m->mm = m->g.matmul(m->g.weight(m->w), x, "mm", 0);
  m->g.set_output(m->mm);
  return m;
}

TEST(CostModel, MatMulFromRatesAndPhase) {
  const sched::BackendProfile p = rates_profile();
  // Decode, F32 1024x512: 2 MiB of weights at 10 GB/s = 209.7 us; 1.05 MFLOP at 4 GFLOP/s =
  // 262.1 us; the larger plus 5 us launch.
  auto d = matmul_graph(DType::F32, 1024, 512, 1);
  EXPECT_NEAR(sched::node_cost_us(p, d->g, d->g.node(d->mm)), 5 + 2.0 * 1024 * 512 / 4e3, 1e-6);
  // Q4_0 decode: 1024*512/32 blocks * 18 bytes = 294912 bytes / 10e3 = 29.5 us; flops / 8e3 = 131.1 us.
  auto q = matmul_graph(DType::Q4_0, 1024, 512, 1);
  EXPECT_NEAR(sched::node_cost_us(p, q->g, q->g.node(q->mm)), 5 + 2.0 * 1024 * 512 / 8e3, 1e-6);
  // Prefill at 128 tokens runs at the prefill rate: 134 MFLOP / 100e3 = 1342 us.
  auto pf = matmul_graph(DType::F32, 1024, 512, 128);
  EXPECT_NEAR(sched::node_cost_us(p, pf->g, pf->g.node(pf->mm)), 5 + 2.0 * 1024 * 512 * 128 / 100e3, 1e-6);
  // 8 tokens: rate 4 + (100 - 4) * 3/7 (log2 8 of log2 128) gives 186.4 us of arithmetic,
  // under the 209.7 us of weight streaming. Q4_0 at 2 tokens: rate 8 + 192/7, 59.2 us of
  // arithmetic over 29.5 us of streaming.
  auto mid = matmul_graph(DType::F32, 1024, 512, 8);
  const double rate8 = 4 + 96.0 * 3.0 / 7.0;
  EXPECT_LT(2.0 * 1024 * 512 * 8 / (rate8 * 1e3), 1024 * 512 * 4 / 10e3);
  EXPECT_NEAR(sched::node_cost_us(p, mid->g, mid->g.node(mid->mm)), 5 + 1024 * 512 * 4 / 10e3, 1e-6);
  auto two = matmul_graph(DType::Q4_0, 1024, 512, 2);
  const double rate2 = 8 + 192.0 / 7.0;
  EXPECT_NEAR(sched::node_cost_us(p, two->g, two->g.node(two->mm)), 5 + 2.0 * 1024 * 512 * 2 / (rate2 * 1e3), 1e-6);
  // A type without a rate uses F32's.
  auto h = matmul_graph(DType::F16, 1024, 512, 1);
  EXPECT_NEAR(sched::node_cost_us(p, h->g, h->g.node(h->mm)), 5 + 2.0 * 1024 * 512 / 4e3, 1e-6);
  // GetRows: 1 row of 1024 floats gathered (4 KiB read) and written (4 KiB) at 10 GB/s, the ids read.
  const graph::Node& x = d->g.node(d->g.node(d->mm).src[1]);
  EXPECT_NEAR(sched::node_cost_us(p, d->g, x), 5 + (4096.0 + 4096.0 + 4.0) / 10e3, 1e-6);
}

TEST(CostModel, CopyCostsBothSides) {
  const sched::BackendProfile gpu = rates_profile();
  sched::BackendProfile cpu = sched::default_backend_profile("cpu");
  cpu.upload_gbps = cpu.download_gbps = 10;
  // 1 MB from the CPU (0 latency, 100 us at 10 GB/s) into the GPU (20 us + 200 us at 5 GB/s).
  EXPECT_NEAR(sched::copy_cost_us(cpu, gpu, 1000000), 100 + 20 + 200, 1e-9);
  // Back: 20 us + 500 us at 2 GB/s out of the GPU, 100 us into the CPU.
  EXPECT_NEAR(sched::copy_cost_us(gpu, cpu, 1000000), 20 + 500 + 100, 1e-9);
}

TEST(CostModel, BackendsOutsideTheProfileUseTheirOwnEstimates) {
  CostedBackend a("a", DeviceKind::Gpu, {{Op::MatMul, 7.5}, {Op::GetRows, 1}});
  auto d = matmul_graph(DType::F32, 256, 256, 1);
  auto profile = std::make_shared<sched::DeviceProfile>();
  const sched::CostModel plain(profile, {&a});
  EXPECT_FALSE(plain.from_profile(0));
  EXPECT_DOUBLE_EQ(plain.node_us(0, d->g, d->g.node(d->mm)), 7.5);
  sched::BackendProfile with_rates = rates_profile();
  with_rates.name = "a";
  profile->set(with_rates);
  const sched::CostModel rated(profile, {&a});
  EXPECT_TRUE(rated.from_profile(0));
  EXPECT_NEAR(rated.node_us(0, d->g, d->g.node(d->mm)), sched::node_cost_us(with_rates, d->g, d->g.node(d->mm)), 1e-12);
}

// ---- profile files ----

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("geniex_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(Profile, JsonAndFileRoundTrip) {
  std::mt19937 rng(20261201);
  std::uniform_real_distribution<double> u(0.5, 500.0);
  sched::DeviceProfile d = sched::default_profile();
  d.created = "2026-12-01T00:00:00Z";
  sched::BackendProfile p = rates_profile();
  p.name = "opencl";
  p.device = "Test \"device\" <1>";
  p.measured = true;
  p.threads = 3;
  p.launch_us = u(rng);
  p.memory_gbps = u(rng);
  for (DType t : {DType::F32, DType::F16, DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    p.matmul_decode_gflops[t] = u(rng);
    p.matmul_prefill_gflops[t] = u(rng);
  }
  p.host_shared = false;
  d.set(p);
  const std::string path = temp_path("profile/sub/profile.json");
  ASSERT_TRUE(sched::save_profile(d, path).has_value());
  auto back = sched::load_profile(path);
  ASSERT_TRUE(back.has_value()) << back.error().to_string();
  EXPECT_EQ(back->created, d.created);
  EXPECT_EQ(back->source, path);
  ASSERT_EQ(back->backends.size(), 2u);
  const sched::BackendProfile* q = back->find("opencl");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->device, p.device);
  EXPECT_TRUE(q->measured);
  EXPECT_EQ(q->threads, 3);
  EXPECT_DOUBLE_EQ(q->launch_us, p.launch_us);
  EXPECT_DOUBLE_EQ(q->memory_gbps, p.memory_gbps);
  EXPECT_EQ(q->matmul_decode_gflops, p.matmul_decode_gflops);
  EXPECT_EQ(q->matmul_prefill_gflops, p.matmul_prefill_gflops);
  EXPECT_DOUBLE_EQ(q->transfer_latency_us, p.transfer_latency_us);
  EXPECT_DOUBLE_EQ(q->upload_gbps, p.upload_gbps);
  EXPECT_DOUBLE_EQ(q->download_gbps, p.download_gbps);
  EXPECT_FALSE(q->host_shared);
  EXPECT_EQ(sched::profile_to_json(*back), sched::profile_to_json(d));
  std::filesystem::remove_all(temp_path("profile"));
}

TEST(Profile, PartialProfileKeepsDefaults) {
  auto d = sched::profile_from_json(R"({"geniex_profile": 1, "backends": {"cpu": {"launch_us": 0.5}}})");
  ASSERT_TRUE(d.has_value()) << d.error().to_string();
  const sched::BackendProfile* cpu = d->find("cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_DOUBLE_EQ(cpu->launch_us, 0.5);
  const sched::BackendProfile def = sched::default_backend_profile("cpu");
  EXPECT_DOUBLE_EQ(cpu->memory_gbps, def.memory_gbps);
  EXPECT_EQ(cpu->matmul_prefill_gflops, def.matmul_prefill_gflops);
  EXPECT_NE(d->find("opencl"), nullptr);
}

TEST(Profile, MalformedProfilesNameTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "not valid JSON"},
      {"{\"geniex_profile\": 1, ", "not valid JSON"},
      {"[1, 2]", "expected an object"},
      {"{}", "missing version"},
      {"{\"geniex_profile\": 7}", "version 7"},
      {"{\"geniex_profile\": 1, \"backends\": []}", "backends"},
      {"{\"geniex_profile\": 1, \"backends\": {\"cpu\": 3}}", "backends.cpu"},
      {"{\"geniex_profile\": 1, \"backends\": {\"cpu\": {\"launch_us\": \"fast\"}}}", "backends.cpu.launch_us"},
      {"{\"geniex_profile\": 1, \"backends\": {\"cpu\": {\"memory_gbps\": -3}}}", "backends.cpu.memory_gbps"},
      {"{\"geniex_profile\": 1, \"backends\": {\"cpu\": {\"memory_gbps\": 0}}}", "backends.cpu.memory_gbps"},
      {"{\"geniex_profile\": 1, \"backends\": {\"cpu\": {\"matmul_gflops\": {\"decode\": {\"q9_9\": 1}}}}}", "q9_9"},
      {"{\"geniex_profile\": 1, \"backends\": {\"cpu\": {\"matmul_gflops\": {\"warp\": {}}}}}", "warp"},
      {"{\"geniex_profile\": 1, \"backends\": {\"cpu\": {\"matmul_gflops\": {\"decode\": {\"f32\": null}}}}}", "f32"},
      {"{\"geniex_profile\": 1, \"backends\": {\"cpu\": {\"host_shared\": 1}}}", "host_shared"},
      {"{\"geniex_profile\": 1, \"backends\": {\"cpu\": {\"threads\": -2}}}", "threads"},
  };
  for (const auto& [text, expect] : cases) {
    auto d = sched::profile_from_json(text);
    ASSERT_FALSE(d.has_value()) << text;
    EXPECT_EQ(d.error().code, ErrorCode::InvalidFormat) << text;
    EXPECT_NE(d.error().message.find(expect), std::string::npos) << text << " -> " << d.error().message;
  }
  auto missing = sched::load_profile(temp_path("does_not_exist.json"));
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::NotFound);
}

// Restores an environment variable when it goes out of scope.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    if (value != nullptr) {
      ::setenv(name.c_str(), value, 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    if (old) {
      ::setenv(name.c_str(), old->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
};

TEST(Profile, DefaultPathAndBadFilesFallBackToDefaults) {
  {
    ScopedEnv env("GENIEX_PROFILE", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/xdg-test");
    EXPECT_EQ(sched::default_profile_path(), "/tmp/xdg-test/geniex/profile.json");
    ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv home("HOME", "/home/someone");
    EXPECT_EQ(sched::default_profile_path(), "/home/someone/.cache/geniex/profile.json");
  }
  const std::string path = temp_path("bad_profile.json");
  {
    std::ofstream(path) << "{\"geniex_profile\": 1, \"backends\": {\"opencl\": {\"upload_gbps\": \"x\"}}}";
  }
  ScopedEnv env("GENIEX_PROFILE", path.c_str());
  EXPECT_EQ(sched::default_profile_path(), path);
  sched::LoadedProfile loaded = sched::load_profile_or_defaults();
  EXPECT_NE(loaded.warning.find("upload_gbps"), std::string::npos) << loaded.warning;
  EXPECT_NE(loaded.warning.find("built-in defaults"), std::string::npos) << loaded.warning;
  EXPECT_EQ(sched::profile_to_json(loaded.profile), sched::profile_to_json(sched::default_profile()));
  // Random bytes never crash the reader.
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string junk = R"({"geniex_profile": 1, "backends": {"cpu": {"launch_us": )";
    const int n = static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) junk += static_cast<char>(rng() % 96 + 32);
    (void)sched::profile_from_json(junk);
  }
  std::filesystem::remove(path);
  ScopedEnv gone("GENIEX_PROFILE", temp_path("missing_profile.json").c_str());
  EXPECT_NE(sched::load_profile_or_defaults().warning.find("not found"), std::string::npos);
}

// ---- placement ----

// ids -> x = get_rows -> n = rms_norm(x) -> mm = matmul(W, n) -> y = add(mm, x) -> out = scale(y).
struct ChainGraph {
  graph::WeightRef table{"table", DType::F32, {64, 4, 1, 1}, nullptr, 0};
  graph::WeightRef norm{"norm", DType::F32, {64, 1, 1, 1}, nullptr, 0};
  graph::WeightRef w{"w", DType::F32, {64, 64, 1, 1}, nullptr, 0};
  graph::Graph g;
  int32_t mm = 0, out = 0;
  ChainGraph() {
    const int32_t ids = g.input(graph::InputKind::Tokens, 1, "ids");
    const int32_t x = g.get_rows(g.weight(table), ids, "x");
    const int32_t n = g.rms_norm(x, g.weight(norm), 1e-5f, "n", 0);
    mm = g.matmul(g.weight(w), n, "mm", 0);
    const int32_t y = g.add(mm, x, "y", 0);
    out = g.scale(y, 0.5f, "out", 0);
    g.set_output(out);
  }
};

sched::PlaceOptions gpu_latency(double latency_us) {
  auto profile = std::make_shared<sched::DeviceProfile>();
  sched::BackendProfile gpu;  // transfers only: node costs come from the double's estimates
  gpu.name = "gpu";
  gpu.transfer_latency_us = latency_us;
  gpu.upload_gbps = gpu.download_gbps = 1000;
  gpu.split_us = 0;
  profile->set(gpu);
  sched::PlaceOptions o;
  o.profile = profile;
  return o;
}

TEST(Placement, MovesToTheFasterBackendWhenCopiesAreCheap) {
  ChainGraph c;
  CostedBackend gpu("gpu", DeviceKind::Gpu, {{Op::MatMul, 10}});
  CostedBackend host("host", DeviceKind::Cpu,
                     {{Op::GetRows, 1}, {Op::RmsNorm, 1}, {Op::MatMul, 100}, {Op::Add, 1}, {Op::Scale, 1}});
  sched::Placement p;
  ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, gpu_latency(1), p).has_value());
  EXPECT_EQ(p.where[static_cast<size_t>(c.mm)], 0);
  EXPECT_EQ(p.why[static_cast<size_t>(c.mm)].rfind("cost: gpu 10.0us (+copy 1.0us) < host 100us", 0), 0u)
      << p.why[static_cast<size_t>(c.mm)];
  EXPECT_DOUBLE_EQ(p.cost_us[static_cast<size_t>(c.mm)], 10);
  // Two copies: n to the gpu, mm back (host side at 10 GB/s: 256 B = 0.0256 us each).
  EXPECT_NEAR(p.copies_us, 2 * (1 + 0.0256 + 0.000256), 1e-9);
  EXPECT_EQ(p.why[static_cast<size_t>(c.out)], "fallback: gpu: no scale");

  sched::SchedulerOptions so;
  so.placement = gpu_latency(1);
  sched::Scheduler s({&gpu, &host}, so);
  auto plan = s.plan(c.g);
  ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
  EXPECT_EQ((*plan)->n_copies, 2);
}

TEST(Placement, StaysWhenTheCopyBackCostsMore) {
  // Greedy would move mm (10 + 20 in < 40) and then pay 20 more to bring it back: 50 > 40.
  ChainGraph c;
  CostedBackend gpu("gpu", DeviceKind::Gpu, {{Op::MatMul, 10}});
  CostedBackend host("host", DeviceKind::Cpu,
                     {{Op::GetRows, 1}, {Op::RmsNorm, 1}, {Op::MatMul, 40}, {Op::Add, 1}, {Op::Scale, 1}});
  sched::Placement p;
  ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, gpu_latency(20), p).has_value());
  EXPECT_EQ(p.where[static_cast<size_t>(c.mm)], 1);
  const std::string& why = p.why[static_cast<size_t>(c.mm)];
  EXPECT_EQ(why.rfind("cost: host 40.0us > gpu 10.0us (+copy 20.0us)", 0), 0u) << why;
  EXPECT_NE(why.find("fewer copies later"), std::string::npos) << why;
  EXPECT_DOUBLE_EQ(p.copies_us, 0);

  sched::SchedulerOptions so;
  so.placement = gpu_latency(20);
  sched::Scheduler s({&gpu, &host}, so);
  auto plan = s.plan(c.g);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ((*plan)->n_copies, 0);
  EXPECT_EQ((*plan)->splits.size(), 1u);
}

TEST(Placement, SwitchingBackendsCostsTheSplit) {
  // Copies cost 1 us each way; moving mm saves 90 us, so a split cost of 40 us on each side
  // still pays (10 + 2 + 40 + 40 < 100), 50 does not (10 + 2 + 50 + 50 > 100).
  ChainGraph c;
  CostedBackend gpu("gpu", DeviceKind::Gpu, {{Op::MatMul, 10}});
  CostedBackend host("host", DeviceKind::Cpu,
                     {{Op::GetRows, 1}, {Op::RmsNorm, 1}, {Op::MatMul, 100}, {Op::Add, 1}, {Op::Scale, 1}});
  for (const double split : {40.0, 50.0}) {
    sched::PlaceOptions o = gpu_latency(1);
    auto profile = std::make_shared<sched::DeviceProfile>(*o.profile);
    sched::BackendProfile g = *profile->find("gpu");
    g.split_us = split;
    profile->set(g);
    sched::BackendProfile h;  // transfers as the defaults, no rates: the double's estimates
    h.name = "host";
    h.split_us = split;
    profile->set(h);
    o.profile = profile;
    sched::Placement p;
    ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, o, p).has_value());
    EXPECT_EQ(p.where[static_cast<size_t>(c.mm)], split < 45 ? 0 : 1) << "split " << split;
    EXPECT_NEAR(p.copies_us, split < 45 ? 2 * (1 + 0.0256 + 0.000256) + 2 * split : 0.0, 1e-9);
  }
}

TEST(Placement, TiesGoToTheDeclaredOrder) {
  ChainGraph c;
  const std::map<Op, double> same = {{Op::GetRows, 3}, {Op::RmsNorm, 3}, {Op::MatMul, 3}, {Op::Add, 3}, {Op::Scale, 3}};
  CostedBackend first("first", DeviceKind::Gpu, same);
  CostedBackend second("second", DeviceKind::Cpu, same);
  sched::PlaceOptions o;
  o.profile = std::make_shared<sched::DeviceProfile>();
  for (const bool swapped : {false, true}) {
    std::vector<backends::Backend*> order = {&first, &second};
    if (swapped) std::swap(order[0], order[1]);
    sched::Placement p;
    ASSERT_TRUE(sched::place(c.g, order, o, p).has_value());
    for (int32_t i = 0; i < c.g.size(); ++i) {
      if (c.g.node(i).op == Op::Weight) continue;
      EXPECT_EQ(p.where[static_cast<size_t>(i)], 0) << c.g.node(i).name;
    }
    // The first node has no copies either way: an exact tie.
    const size_t x = 2;  // ids, table, x
    ASSERT_EQ(c.g.node(static_cast<int32_t>(x)).op, Op::GetRows);
    const std::string want = std::string("cost: ") + std::string(order[0]->name()) + " 3.0us = " +
                             std::string(order[1]->name()) + " 3.0us, preferred";
    EXPECT_EQ(p.why[x], want);
  }
}

TEST(Placement, WithoutOptionsItIsCapabilityOnly) {
  ChainGraph c;
  CostedBackend gpu("gpu", DeviceKind::Gpu, {{Op::MatMul, 1000}});
  CostedBackend host("host", DeviceKind::Cpu,
                     {{Op::GetRows, 1}, {Op::RmsNorm, 1}, {Op::MatMul, 1}, {Op::Add, 1}, {Op::Scale, 1}});
  sched::Placement p;
  ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, sched::PlaceOptions{}, p).has_value());
  EXPECT_EQ(p.where[static_cast<size_t>(c.mm)], 0);
  EXPECT_EQ(p.why[static_cast<size_t>(c.mm)], "preferred");
  EXPECT_DOUBLE_EQ(p.cost_us[static_cast<size_t>(c.mm)], 1000);
}

struct Tiny {
  gguf::File file;
  std::unique_ptr<models::Architecture> arch;
};

Tiny load_tiny() {
  const std::vector<uint8_t> bytes = test_support::make_tiny_llama({});
  auto file = gguf::File::parse(MappedFile::from_bytes(bytes.data(), bytes.size()));
  EXPECT_TRUE(file.has_value());
  Tiny t{std::move(file).value(), nullptr};
  auto arch = models::load_architecture(t.file);
  EXPECT_TRUE(arch.has_value());
  t.arch = std::move(arch).value();
  return t;
}

TEST(Placement, ForcedGpuLayers) {
  Tiny t = load_tiny();
  const graph::Graph g = t.arch->build_graph({3, 1});
  const std::map<Op, double> all = {{Op::GetRows, 1},   {Op::RmsNorm, 1}, {Op::MatMul, 1}, {Op::Add, 1},
                                    {Op::Rope, 1},      {Op::Attention, 1}, {Op::SwiGlu, 1}, {Op::Scale, 1}};
  std::map<Op, double> no_attention = all;
  no_attention.erase(Op::Attention);
  CostedBackend gpu("gpu", DeviceKind::Gpu, no_attention);
  CostedBackend host("host", DeviceKind::Cpu, all);
  for (const int32_t n : {0, 1, 2, 99}) {
    sched::PlaceOptions o;
    o.gpu_layers = n;
    sched::Placement p;
    ASSERT_TRUE(sched::place(g, {&gpu, &host}, o, p).has_value());
    int32_t last_layer = -1;
    for (int32_t i = 0; i < g.size(); ++i) {
      const graph::Node& node = g.node(i);
      if (node.op == Op::Weight || node.op == Op::Input) continue;
      if (node.layer >= 0) last_layer = node.layer;
      const int32_t layer = node.layer >= 0 ? node.layer : std::max(last_layer, 0);
      const std::string& why = p.why[static_cast<size_t>(i)];
      if (node.op == Op::Attention && layer < n) {
        EXPECT_EQ(p.where[static_cast<size_t>(i)], 1) << node.name;
        EXPECT_EQ(why.rfind("fallback: gpu: no attention (forced: layer", 0), 0u) << why;
        continue;
      }
      EXPECT_EQ(p.where[static_cast<size_t>(i)], layer < n ? 0 : 1) << node.name << " n=" << n;
      EXPECT_EQ(why, "forced: layer " + std::to_string(layer) + (layer < n ? " < " : " >= ") + "gpu layers " +
                         std::to_string(n))
          << node.name;
    }
  }
}

}  // namespace
}  // namespace geniex
