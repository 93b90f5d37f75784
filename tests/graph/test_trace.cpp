// Execution traces: a traced run of a tiny model on two backends with row splits is valid
// Chrome trace JSON, with complete events on every backend's row, named rows, node names,
// layers and token counts, and no two events overlapping within one queue's row.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include "../common/tiny_model.hpp"
#include "backends/cpu/backend/cpu_backend.hpp"
#include "kv/kv_cache.hpp"
#include "models/architecture.hpp"
#include "sched/scheduler.hpp"
#include "sched/trace.hpp"

namespace geniex {
namespace {

void run_traced(sched::Scheduler& s, const models::Architecture& arch) {
  const models::HParams& hp = arch.hparams();
  kv::KvConfig kc;
  kc.n_layer = hp.n_layer;
  kc.n_head_kv = hp.n_head_kv;
  kc.head_dim = hp.head_dim;
  kc.n_ctx = 64;
  auto cache = kv::PagedKvCache::create(kc);
  ASSERT_TRUE(cache.has_value());
  std::vector<int32_t> tokens = {5, 9, 13, 2, 7, 11, 3, 8};
  int32_t pos = 0;
  for (int step = 0; step < 4; ++step) {
    std::vector<int32_t> positions(tokens.size()), seqs(tokens.size(), 0);
    for (size_t i = 0; i < tokens.size(); ++i) positions[i] = pos + static_cast<int32_t>(i);
    const std::vector<int32_t> out_rows = {static_cast<int32_t>(tokens.size() - 1)};
    ASSERT_TRUE((*cache)->begin_batch(seqs, positions).has_value());
    const graph::Graph g = arch.build_graph({static_cast<int32_t>(tokens.size()), 1});
    auto plan = s.plan(g);
    ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
    backends::StepData sd{tokens, positions, seqs, out_rows, cache->get()};
    auto out = s.execute(**plan, sd);
    ASSERT_TRUE(out.has_value()) << out.error().to_string();
    pos += static_cast<int32_t>(tokens.size());
    tokens = {static_cast<int32_t>(step + 1)};
  }
}

TEST(Trace, RunOfTinyModelIsValidChromeTrace) {
  test_support::TinyLlamaConfig cfg;
  cfg.n_embd = 128;
  cfg.n_ff = 384;
  cfg.n_vocab = 320;
  const std::vector<uint8_t> bytes = test_support::make_tiny_llama(cfg);
  auto file = gguf::File::parse(MappedFile::from_bytes(bytes.data(), bytes.size()));
  ASSERT_TRUE(file.has_value());
  auto arch = models::load_architecture(*file);
  ASSERT_TRUE(arch.has_value());

  const std::string path =
      (std::filesystem::temp_directory_path() / ("geniex_trace_" + std::to_string(::getpid()) + ".json")).string();
  {
    auto recorder = std::make_shared<sched::TraceRecorder>(path);
    backends::CpuBackend a(1), b(1);
    sched::SchedulerOptions o;
    o.row_split = true;
    o.min_rows = 128;
    o.split_share = 0.5;
    o.trace = recorder;
    sched::Scheduler s({&a, &b}, o);
    run_traced(s, **arch);
    EXPECT_GT(recorder->size(), 8u);
  }  // the last owner writes the file

  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(in));
  std::remove(path.c_str());
  ASSERT_TRUE(j.contains("traceEvents"));
  ASSERT_TRUE(j["traceEvents"].is_array());

  std::map<int, std::string> row_names;
  std::map<int, std::vector<std::pair<double, double>>> by_row;  // tid -> (ts, end)
  std::map<std::string, int> cats;
  bool saw_layer = false, saw_rows = false, saw_prefill = false;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("tid") && e.contains("name"));
    if (e["ph"] == "M") {
      if (e["name"] == "thread_name") row_names[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
    EXPECT_GE(ts, 0);
    EXPECT_GE(dur, 0);
    const std::string cat = e["cat"].get<std::string>();
    ++cats[cat];
    if (cat == "step") {
      saw_prefill = saw_prefill || e["args"]["n_tokens"].get<double>() == 8;
      continue;
    }
    by_row[e["tid"].get<int>()].push_back({ts, ts + dur});
    EXPECT_FALSE(e["args"]["first"].get<std::string>().empty());
    EXPECT_TRUE(e["args"].contains("n_tokens"));
    if (e["args"].contains("layers")) saw_layer = true;
    for (const auto& [k, v] : e["args"].items()) saw_rows = saw_rows || k.rfind("rows ", 0) == 0;
  }
  EXPECT_EQ(row_names[1], "cpu queue 0");
  EXPECT_EQ(row_names[2], "cpu queue 1");
  EXPECT_EQ(row_names[0], "host (steps)");
  // Events on each backend's row, copies among them; 4 steps.
  EXPECT_GT(by_row[1].size(), 0u);
  EXPECT_GT(by_row[2].size(), 0u);
  EXPECT_GT(cats["copy"], 0);
  EXPECT_EQ(cats["step"], 4);
  EXPECT_TRUE(saw_layer);
  EXPECT_TRUE(saw_rows);
  EXPECT_TRUE(saw_prefill);
  // One queue runs one thing at a time.
  for (auto& [tid, events] : by_row) {
    std::sort(events.begin(), events.end());
    for (size_t k = 1; k < events.size(); ++k) {
      EXPECT_LE(events[k - 1].second, events[k].first + 1e-3) << "row " << tid << " event " << k;
    }
  }
}

TEST(Trace, OffRecordsNothingAndQuotesNames) {
  EXPECT_EQ(sched::json_quote("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
  sched::TraceRecorder r;
  EXPECT_EQ(r.size(), 0u);
  const auto j = nlohmann::json::parse(r.to_json());
  EXPECT_TRUE(j["traceEvents"].empty());
  EXPECT_FALSE(r.write("/nonexistent-dir/x/trace.json").has_value());
}

}  // namespace
}  // namespace geniex
