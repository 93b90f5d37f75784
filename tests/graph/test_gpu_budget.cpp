// Placement under a GPU memory budget (PlaceOptions::gpu_memory_bytes): nothing on the GPU at
// budget 0, the unconstrained cost-model plan when everything fits, and in between the units
// with the most estimated time saved per byte (checked on a hand-made graph whose layers
// differ only in weight bytes), with the reasons naming the budget; the overhead estimate,
// the choice kept across step shapes, byte strings and the CLI's size parser.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "../common/costed_backend.hpp"
#include "../common/tiny_model.hpp"
#include "models/architecture.hpp"
#include "sched/place.hpp"
#include "sched/profile.hpp"
#include "size_arg.hpp"

namespace geniex {
namespace {

using backends::DeviceKind;
using graph::Op;
using test_support::CostedBackend;

const std::map<Op, double> kAllOps(double us) {
  return {{Op::GetRows, us}, {Op::RmsNorm, us},   {Op::MatMul, us}, {Op::Add, us},
          {Op::Rope, us},    {Op::Attention, us}, {Op::SwiGlu, us}, {Op::Scale, us}};
}

// Transfers cheap and quick, no split cost: node costs come from the doubles' estimates.
sched::PlaceOptions cheap_copies() {
  auto profile = std::make_shared<sched::DeviceProfile>();
  sched::BackendProfile gpu;
  gpu.name = "gpu";
  gpu.transfer_latency_us = 1;
  gpu.upload_gbps = gpu.download_gbps = 1000;
  gpu.split_us = 0;
  profile->set(gpu);
  sched::PlaceOptions o;
  o.profile = profile;
  o.gpu_overhead_bytes = 0;
  return o;
}

// ids -> x = get_rows(table) [embedding] -> three layers h = h + W_l * rms_norm(h) -> out =
// scale(h) [output head]. The layers cost the same on each backend (the doubles' estimates
// are per op) but their weights differ: F32 16 KiB, Q8_0 4352 B, Q4_0 2304 B.
struct LayeredGraph {
  graph::WeightRef table{"table", DType::F32, {64, 4, 1, 1}, nullptr, 0};  // 1 KiB
  graph::WeightRef norm[3] = {{"norm0", DType::F32, {64, 1, 1, 1}, nullptr, 0},
                              {"norm1", DType::F32, {64, 1, 1, 1}, nullptr, 0},
                              {"norm2", DType::F32, {64, 1, 1, 1}, nullptr, 0}};
  graph::WeightRef w[3] = {{"w0", DType::F32, {64, 64, 1, 1}, nullptr, 0},
                           {"w1", DType::Q8_0, {64, 64, 1, 1}, nullptr, 0},
                           {"w2", DType::Q4_0, {64, 64, 1, 1}, nullptr, 0}};
  graph::Graph g;
  int32_t x = 0, out = 0;
  int32_t mm[3] = {};
  explicit LayeredGraph(int64_t T = 1) {
    const int32_t ids = g.input(graph::InputKind::Tokens, T, "ids");
    x = g.get_rows(g.weight(table), ids, "x");
    int32_t h = x;
    for (int l = 0; l < 3; ++l) {
      const int32_t n = g.rms_norm(h, g.weight(norm[l]), 1e-5f, "n" + std::to_string(l), l);
      mm[l] = g.matmul(g.weight(w[l]), n, "mm" + std::to_string(l), l);
      h = g.add(mm[l], h, "h" + std::to_string(l), l);
    }
    out = g.scale(h, 0.5f, "out", -1);
    g.set_output(out);
  }
};

int64_t layer_bytes(DType t) { return row_bytes(t, 64) * 64 + 64 * 4; }  // matmul + norm weights

TEST(GpuBudget, ZeroBudgetPutsEverythingOnTheCpu) {
  LayeredGraph c;
  CostedBackend gpu("gpu", DeviceKind::Gpu, kAllOps(1));
  CostedBackend host("host", DeviceKind::Cpu, kAllOps(50));
  sched::PlaceOptions o = cheap_copies();
  sched::Placement free;
  ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, o, free).has_value());
  EXPECT_EQ(free.where[static_cast<size_t>(c.mm[0])], 0);  // without a budget the gpu runs it
  o.gpu_memory_bytes = 0;
  sched::Placement p;
  ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, o, p).has_value());
  ASSERT_NE(p.budget, nullptr);
  EXPECT_EQ(p.budget->used, 0);
  EXPECT_EQ(p.budget->n_layers, 3);
  EXPECT_EQ(p.budget->n_layers_gpu, 0);
  for (int32_t i = 0; i < c.g.size(); ++i) {
    if (c.g.node(i).op == Op::Weight) continue;
    EXPECT_EQ(p.where[static_cast<size_t>(i)], 1) << c.g.node(i).name << ": " << p.why[static_cast<size_t>(i)];
    if (c.g.node(i).op == Op::Input) continue;
    EXPECT_EQ(p.why[static_cast<size_t>(i)].rfind("gpu memory budget 0 B: ", 0), 0u) << p.why[static_cast<size_t>(i)];
  }
  EXPECT_EQ(p.why[static_cast<size_t>(c.mm[2])], "gpu memory budget 0 B: layer 2 does not fit (needs 2.5 KiB, 0 B left)");
  // Without a profile (capability-only placement unconstrained) the budget still holds.
  o.profile = nullptr;
  ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, o, p).has_value());
  for (int32_t i = 0; i < c.g.size(); ++i) {
    if (c.g.node(i).op != Op::Weight) {
      EXPECT_EQ(p.where[static_cast<size_t>(i)], 1) << c.g.node(i).name;
    }
  }
}

TEST(GpuBudget, HugeBudgetGivesTheUnconstrainedPlan) {
  // The hand-made graph, and the tiny Llama whose attention the gpu double cannot run.
  LayeredGraph c;
  const std::vector<uint8_t> bytes = test_support::make_tiny_llama({});
  auto file = gguf::File::parse(MappedFile::from_bytes(bytes.data(), bytes.size()));
  ASSERT_TRUE(file.has_value());
  auto arch = models::load_architecture(*file);
  ASSERT_TRUE(arch.has_value());
  const graph::Graph tiny = (*arch)->build_graph({5, 1});
  std::map<Op, double> no_attention = kAllOps(1);
  no_attention.erase(Op::Attention);
  CostedBackend gpu("gpu", DeviceKind::Gpu, no_attention);
  CostedBackend host("host", DeviceKind::Cpu, kAllOps(50));
  for (const graph::Graph* g : std::vector<const graph::Graph*>{&c.g, &tiny}) {
    sched::PlaceOptions o = cheap_copies();
    sched::Placement free, p;
    ASSERT_TRUE(sched::place(*g, {&gpu, &host}, o, free).has_value());
    o.gpu_memory_bytes = int64_t{1} << 40;
    o.gpu_overhead_bytes = -1;  // estimated
    ASSERT_TRUE(sched::place(*g, {&gpu, &host}, o, p).has_value());
    ASSERT_NE(p.budget, nullptr);
    EXPECT_TRUE(p.budget->everything_fits);
    EXPECT_EQ(p.where, free.where);
    EXPECT_EQ(p.cost_us, free.cost_us);
    EXPECT_GT(p.budget->used, p.budget->overhead);
    EXPECT_EQ(p.budget->n_layers_gpu, p.budget->n_layers);
    for (size_t i = 0; i < p.why.size(); ++i) {
      const std::string& why = p.why[i];
      ASSERT_GE(why.size(), free.why[i].size());
      EXPECT_EQ(why.substr(why.size() - free.why[i].size()), free.why[i]) << "budget changed the reason: " << why;
    }
  }
}

TEST(GpuBudget, MiddleBudgetTakesTheMostTimeSavedPerByte) {
  LayeredGraph c;
  CostedBackend gpu("gpu", DeviceKind::Gpu, kAllOps(1));
  CostedBackend host("host", DeviceKind::Cpu, kAllOps(50));
  // Time saved per byte: output head (no weights) first, then layer 2 (2.5 KiB), the embedding
  // (1 KiB, one node), layer 1 (4.5 KiB), layer 0 (16.25 KiB); weights with their norms. A unit
  // that does not fit is skipped and a smaller one after it may still fit (l2 - 1: the embedding).
  const int64_t l0 = layer_bytes(DType::F32), l1 = layer_bytes(DType::Q8_0), l2 = layer_bytes(DType::Q4_0);
  const int64_t emb = 64 * 4 * 4;
  struct Case {
    int64_t budget;
    bool emb, layer[3];
  };
  for (const Case& k : {Case{l2 + emb + l1, true, {false, true, true}}, Case{l2 + emb + l1 - 1, true, {false, false, true}},
                        Case{l2 + emb - 1, false, {false, false, true}}, Case{l2 - 1, true, {false, false, false}},
                        Case{l2 + emb + l1 + l0, true, {true, true, true}}}) {
    sched::PlaceOptions o = cheap_copies();
    o.gpu_memory_bytes = k.budget;
    sched::Placement p;
    ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, o, p).has_value());
    ASSERT_NE(p.budget, nullptr);
    const sched::GpuBudgetChoice& b = *p.budget;
    EXPECT_LE(b.used, k.budget);
    ASSERT_EQ(b.units.size(), 5u);  // embedding, 3 layers, output head, in graph order
    EXPECT_EQ(b.units[0].key, sched::kEmbeddingUnit);
    EXPECT_EQ(b.units[4].key, sched::kOutputUnit);
    EXPECT_TRUE(b.units[4].on_gpu) << "weightless output head: " << b.units[4].why;
    EXPECT_EQ(b.units[0].on_gpu, k.emb) << "budget " << k.budget << ": " << b.units[0].why;
    int64_t weights = 0;
    for (int l = 0; l < 3; ++l) {
      EXPECT_EQ(b.units[static_cast<size_t>(l) + 1].on_gpu, k.layer[l]) << "budget " << k.budget << ": " << b.units[l + 1u].why;
      EXPECT_EQ(p.where[static_cast<size_t>(c.mm[l])], k.layer[l] ? 0 : 1) << p.why[static_cast<size_t>(c.mm[l])];
      if (k.layer[l]) weights += layer_bytes(c.w[l].type);
    }
    if (k.emb) weights += emb;
    EXPECT_EQ(b.weight_bytes, weights);
    EXPECT_EQ(b.used, weights);  // overhead given as 0
    EXPECT_EQ(p.where[static_cast<size_t>(c.x)], k.emb ? 0 : 1);
    // Sum of the weights read by GPU nodes: within the budget.
    int64_t on_gpu = 0;
    std::set<std::string> seen;
    for (int32_t i = 0; i < c.g.size(); ++i) {
      if (p.where[static_cast<size_t>(i)] != 0) continue;
      for (int32_t s : c.g.node(i).src) {
        if (s == graph::kNoInput) continue;
        const graph::Node& src = c.g.node(s);
        if (src.op == Op::Weight && seen.insert(src.weight->name).second) on_gpu += row_bytes(src.type, src.ne[0]) * src.ne[1];
      }
    }
    EXPECT_LE(on_gpu, k.budget);
  }
  // The reasons, for the first case: an 8 KiB budget; layer 0 left out with nothing left.
  sched::PlaceOptions o = cheap_copies();
  o.gpu_memory_bytes = l2 + emb + l1;
  sched::Placement p;
  ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, o, p).has_value());
  EXPECT_EQ(sched::bytes_string(o.gpu_memory_bytes), "8 KiB");
  EXPECT_EQ(p.why[static_cast<size_t>(c.mm[0])], "gpu memory budget 8 KiB: layer 0 does not fit (needs 16 KiB, 0 B left)");
  EXPECT_EQ(p.why[static_cast<size_t>(c.mm[2])].rfind("gpu memory budget 8 KiB: layer 2 fits (needs 2.5 KiB, 8 KiB left, saves ", 0), 0u)
      << p.why[static_cast<size_t>(c.mm[2])];
  EXPECT_NE(p.why[static_cast<size_t>(c.mm[2])].find("; cost: gpu"), std::string::npos) << p.why[static_cast<size_t>(c.mm[2])];
  EXPECT_EQ(p.budget->summary(), "2 of 3 layers + embedding + output head, 8 KiB of 8 KiB budget");
  // One byte less: layer 1 no longer fits, and says by how much.
  o.gpu_memory_bytes -= 1;
  ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, o, p).has_value());
  EXPECT_EQ(p.why[static_cast<size_t>(c.mm[1])], "gpu memory budget 8 KiB: layer 1 does not fit (needs 4608 B, 4607 B left)");
}

TEST(GpuBudget, OverheadCountsOnceAndCanLeaveNothing) {
  LayeredGraph c(4);
  CostedBackend gpu("gpu", DeviceKind::Gpu, kAllOps(1));
  CostedBackend host("host", DeviceKind::Cpu, kAllOps(50));
  // T = 4: the largest working set is an add (64x4 F32 out, two such in) = 3 KiB, twice; the
  // largest MatMul weight as F16 for prefill: 64*64*2 = 8 KiB; no attention.
  const int64_t overhead = sched::estimate_gpu_overhead_bytes(c.g, 256, 2);
  EXPECT_EQ(overhead, 2 * 3 * 64 * 4 * 4 + 64 * 64 * 2);
  EXPECT_EQ(sched::estimate_gpu_overhead_bytes(LayeredGraph(1).g, 256, 2), 2 * 3 * 64 * 4);
  sched::PlaceOptions o = cheap_copies();
  o.gpu_overhead_bytes = -1;  // estimated from the graph: the value above
  o.gpu_memory_bytes = overhead - 1;
  sched::Placement p;
  ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, o, p).has_value());
  EXPECT_EQ(p.budget->overhead, overhead);
  EXPECT_EQ(p.budget->used, 0);
  for (const sched::GpuUnit& u : p.budget->units) EXPECT_FALSE(u.on_gpu) << u.why;
  EXPECT_NE(p.why[static_cast<size_t>(c.out)].find("0 B left after 14 KiB of activations and scratch"), std::string::npos)
      << p.why[static_cast<size_t>(c.out)];
  o.gpu_memory_bytes = overhead + layer_bytes(DType::Q4_0);
  ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, o, p).has_value());
  EXPECT_EQ(p.budget->used, overhead + layer_bytes(DType::Q4_0));
  EXPECT_EQ(p.budget->n_layers_gpu, 1);
  EXPECT_TRUE(p.budget->units[3].on_gpu);
}

TEST(GpuBudget, UnitsThatSaveNoTimeStayOnTheCpu) {
  LayeredGraph c;
  // Slow transfers: each unit alone would pay more for its copies than it saves.
  CostedBackend gpu("gpu", DeviceKind::Gpu, kAllOps(1));
  CostedBackend host("host", DeviceKind::Cpu, kAllOps(2));
  sched::PlaceOptions o = cheap_copies();
  sched::Placement free;
  ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, o, free).has_value());
  ASSERT_EQ(free.where[static_cast<size_t>(c.mm[1])], 0);
  auto profile = std::make_shared<sched::DeviceProfile>(*o.profile);
  sched::BackendProfile slow = *profile->find("gpu");
  slow.transfer_latency_us = 5;  // a layer saves 3 us, its copies in and out cost 10 us
  profile->set(slow);
  o.profile = profile;
  ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, o, free).has_value());
  ASSERT_EQ(free.where[static_cast<size_t>(c.mm[1])], 0) << "the whole chain still moves to the gpu";
  o.gpu_memory_bytes = layer_bytes(DType::Q4_0) + layer_bytes(DType::Q8_0);  // not everything
  sched::Placement p;
  ASSERT_TRUE(sched::place(c.g, {&gpu, &host}, o, p).has_value());
  EXPECT_EQ(p.budget->n_layers_gpu, 0);
  EXPECT_EQ(p.where[static_cast<size_t>(c.mm[2])], 1);
  EXPECT_NE(p.why[static_cast<size_t>(c.mm[2])].find("layer 2 stays on the cpu: the gpu saves no time"), std::string::npos)
      << p.why[static_cast<size_t>(c.mm[2])];
}

TEST(GpuBudget, ChoiceIsKeptAcrossStepShapes) {
  const std::vector<uint8_t> bytes = test_support::make_tiny_llama({});
  auto file = gguf::File::parse(MappedFile::from_bytes(bytes.data(), bytes.size()));
  ASSERT_TRUE(file.has_value());
  auto arch = models::load_architecture(*file);
  ASSERT_TRUE(arch.has_value());
  const graph::Graph prefill = (*arch)->build_graph({16, 1});
  const graph::Graph decode = (*arch)->build_graph({1, 1});
  CostedBackend gpu("gpu", DeviceKind::Gpu, kAllOps(1));
  CostedBackend host("host", DeviceKind::Cpu, kAllOps(50));
  sched::PlaceOptions o = cheap_copies();
  o.gpu_memory_bytes = 1;  // set below: room for one layer
  o.budget_memo = std::make_shared<sched::GpuBudgetMemo>();
  sched::Placement p;
  {
    sched::PlaceOptions all = cheap_copies();
    all.gpu_memory_bytes = int64_t{1} << 40;
    ASSERT_TRUE(sched::place(prefill, {&gpu, &host}, all, p).has_value());
    ASSERT_EQ(p.budget->n_layers, 2);
    o.gpu_memory_bytes = p.budget->weight_bytes / 2;
  }
  ASSERT_TRUE(sched::place(prefill, {&gpu, &host}, o, p).has_value());
  const auto first = p.budget;
  ASSERT_NE(first, nullptr);
  EXPECT_GT(first->used, 0);
  EXPECT_LE(first->used, o.gpu_memory_bytes);
  EXPECT_FALSE(first->everything_fits);
  EXPECT_EQ(o.budget_memo->choice, first);
  sched::Placement q;
  ASSERT_TRUE(sched::place(decode, {&gpu, &host}, o, q).has_value());
  EXPECT_EQ(q.budget, first);  // the same choice object: same units, same weights
  for (int32_t i = 0; i < decode.size(); ++i) {
    const graph::Node& n = decode.node(i);
    if (n.op == Op::Weight || n.op == Op::Input) continue;
    if (q.where[static_cast<size_t>(i)] != 0) continue;
    for (int32_t s : n.src) {
      if (s == graph::kNoInput) continue;
      if (decode.node(s).op == Op::Weight) {
        EXPECT_EQ(first->weights.count(decode.node(s).weight->name), 1u) << n.name;
      }
    }
  }
}

TEST(GpuBudget, ExcludesForcedLayers) {
  LayeredGraph c;
  CostedBackend gpu("gpu", DeviceKind::Gpu, kAllOps(1));
  CostedBackend host("host", DeviceKind::Cpu, kAllOps(50));
  sched::PlaceOptions o = cheap_copies();
  o.gpu_memory_bytes = 1000;
  o.gpu_layers = 1;
  sched::Placement p;
  const Status s = sched::place(c.g, {&gpu, &host}, o, p);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::InvalidArgument);
}

TEST(GpuBudget, ByteStrings) {
  EXPECT_EQ(sched::bytes_string(0), "0 B");
  EXPECT_EQ(sched::bytes_string(512), "512 B");
  EXPECT_EQ(sched::bytes_string(1536), "1.5 KiB");
  EXPECT_EQ(sched::bytes_string(int64_t{60} << 20), "60 MiB");
  EXPECT_EQ(sched::bytes_string(int64_t{3} << 29), "1.5 GiB");
  EXPECT_EQ(sched::bytes_string(int64_t{2} << 30), "2 GiB");
}

TEST(GpuBudget, CliSizes) {
  const auto size = [](const char* s) { return cli::parse_size(s, "--gpu-memory"); };
  EXPECT_EQ(*size("4096"), 4096);
  EXPECT_EQ(*size("0"), 0);
  EXPECT_EQ(*size("512M"), int64_t{512} << 20);
  EXPECT_EQ(*size("512m"), int64_t{512} << 20);
  EXPECT_EQ(*size("300MB"), int64_t{300} << 20);
  EXPECT_EQ(*size("1.5G"), int64_t{3} << 29);
  EXPECT_EQ(*size("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(*size("1.5 GiB"), int64_t{3} << 29);
  EXPECT_EQ(*size("64k"), 65536);
  EXPECT_EQ(*size("1T"), int64_t{1} << 40);
  EXPECT_EQ(*size("100B"), 100);
  for (const char* bad : {"", "G", "abc", "-1", "12X", "1.5", "1..5G", "1.2.3M", "5 GB extra", "1e3", "99999999999T"}) {
    auto r = size(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument);
    EXPECT_NE(r.error().message.find("--gpu-memory: '" + std::string(bad) + "' is not a size"), std::string::npos)
        << r.error().message;
  }
}

}  // namespace
}  // namespace geniex
