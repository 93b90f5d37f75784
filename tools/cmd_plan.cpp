// geniex plan: the scheduler's placement of every node for a decode step (1 token) and a
// prefill step (-p tokens): which backend runs it and why, the splits, the copies between
// backends and the activation memory per backend.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "common.hpp"

namespace geniex::cli {
namespace {

struct PlanOptions {
  ModelOptions model;
  int32_t n_prefill = 512;
  std::string phase = "both";
  bool summary = false;
  bool json = false;
};

nlohmann::json plan_json(const PlanSummary& plan) {
  nlohmann::json rows = nlohmann::json::array();
  for (const PlanRow& r : plan.rows) {
    rows.push_back({{"node", r.node},
                    {"layer", r.layer},
                    {"op", r.op},
                    {"name", r.name},
                    {"type", r.type},
                    {"shape", r.shape},
                    {"backend", r.backend},
                    {"reason", r.reason}});
  }
  nlohmann::json act = nlohmann::json::object();
  for (const auto& [backend, bytes] : plan.activation_bytes) act[backend] = bytes;
  return {{"n_tokens", plan.n_tokens}, {"n_splits", plan.n_splits},   {"n_copies", plan.n_copies},
          {"activation_bytes", act},   {"planning_ms", plan.planning_ms}, {"rows", rows}};
}

void print_plan(const std::string& title, const PlanSummary& plan, bool summary_only) {
  fmt::print("== {} plan: {} token{} ==\n", title, plan.n_tokens, plan.n_tokens == 1 ? "" : "s");
  if (!summary_only) {
    size_t w_op = 2, w_name = 4, w_type = 4, w_shape = 5, w_backend = 7;
    for (const PlanRow& r : plan.rows) {
      w_op = std::max(w_op, r.op.size());
      w_name = std::max(w_name, r.name.size());
      w_type = std::max(w_type, r.type.size());
      w_shape = std::max(w_shape, r.shape.size());
      w_backend = std::max(w_backend, r.backend.size());
    }
    const auto header = [&](const std::string& layer) {
      fmt::print("{:<6}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", layer, "op", w_op, "name", w_name, "type",
                 w_type, "shape", w_shape, "backend", w_backend, "reason");
    };
    header("layer");
    bool first = true;
    int32_t current_layer = -2;
    for (const PlanRow& r : plan.rows) {
      // Rows come in graph order; a new layer number starts a group.
      const bool new_group = first || r.layer != current_layer;
      if (new_group && !first) fmt::print("\n");
      first = false;
      current_layer = r.layer;
      const std::string layer = new_group ? (r.layer < 0 ? std::string("-") : std::to_string(r.layer)) : "";
      fmt::print("{:<6}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", layer, r.op, w_op, r.name, w_name, r.type,
                 w_type, r.shape, w_shape, r.backend, w_backend, r.reason);
    }
    fmt::print("\n");
  }
  std::map<std::string, int> nodes_per_backend;
  for (const PlanRow& r : plan.rows) nodes_per_backend[r.backend] += 1;
  std::string per_backend;
  for (const auto& [backend, count] : nodes_per_backend) {
    per_backend += fmt::format("{}{} {}", per_backend.empty() ? "" : ", ", backend, count);
  }
  fmt::print("nodes: {} ({})\n", plan.rows.size(), per_backend.empty() ? "none" : per_backend);
  fmt::print("splits: {}   copies between backends: {}\n", plan.n_splits, plan.n_copies);
  std::string act;
  for (const auto& [backend, bytes] : plan.activation_bytes) {
    act += fmt::format("{}{} {}", act.empty() ? "" : ", ", backend, format_bytes(static_cast<double>(bytes)));
  }
  fmt::print("activation memory: {}\n", act.empty() ? "-" : act);
  fmt::print("planning time: {:.3f} ms\n\n", plan.planning_ms);
}

int run(const PlanOptions& opts) {
  Result<Model> model = load_model(opts.model);
  if (!model) return report_error(model.error());
  const ModelInfo& info = model->info();
  if (opts.n_prefill > info.n_ctx && opts.phase != "decode") {
    return report_error(make_error(ErrorCode::OutOfRange, fmt::format("-p {} exceeds the context of {} tokens (raise -c)",
                                                                      opts.n_prefill, info.n_ctx)));
  }

  std::vector<std::pair<std::string, int32_t>> phases;
  if (opts.phase != "prefill") phases.emplace_back("decode", 1);
  if (opts.phase != "decode") phases.emplace_back("prefill", opts.n_prefill);

  nlohmann::json j;
  if (opts.json) {
    j["model"] = info.path;
    j["device"] = info.device;
    j["backends"] = info.backends;
    j["device_notes"] = info.device_notes;
    j["n_threads"] = info.n_threads;
    j["n_ctx"] = info.n_ctx;
  } else {
    std::string backends;
    for (const std::string& b : info.backends) backends += (backends.empty() ? "" : " > ") + b;
    fmt::print("model: {} ({}, {} layers)\n", info.path, info.architecture, info.n_layer);
    fmt::print("declared device: {}   backends in use: {}   threads: {}   ctx: {}\n", info.device,
               backends.empty() ? "-" : backends, info.n_threads, info.n_ctx);
    for (const std::string& note : info.device_notes) fmt::print("  fallback: {}\n", note);
    fmt::print("\n");
  }
  for (const auto& [title, n_tokens] : phases) {
    Result<PlanSummary> plan = model->plan(n_tokens);
    if (!plan) return report_error(plan.error());
    if (opts.json) {
      j[title] = plan_json(*plan);
    } else {
      print_plan(title, *plan, opts.summary);
    }
  }
  if (opts.json) fmt::print("{}\n", j.dump(2));
  return 0;
}

}  // namespace

Command make_plan_command(CLI::App& root) {
  auto opts = std::make_shared<PlanOptions>();
  CLI::App* app = root.add_subcommand("plan", "show the scheduler's backend placement for decode and prefill");
  app->footer("Example: geniex plan --device npu -p 128   (shows the fallback to cpu and why)\n");
  add_model_options(*app, opts->model);
  app->add_option("-p,--n-prompt", opts->n_prefill, "tokens of the prefill step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--phase", opts->phase, "which plans to show")
      ->capture_default_str()
      ->check(CLI::IsMember({"decode", "prefill", "both"}));
  app->add_flag("--summary", opts->summary, "only the totals, no per-node table");
  app->add_flag("--json", opts->json, "machine-readable output");
  return Command{app, [opts] { return run(*opts); }};
}

}  // namespace geniex::cli
