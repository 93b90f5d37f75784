// geniex plan: the scheduler's placement of every node for a decode step (1 token) and a
// prefill step (-p tokens): which backend runs it and why, the cost model's estimate, the
// splits, the copies between backends, totals per backend (estimated time, activation
// memory), and with --svg/--html a picture of it (plan_render.hpp).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "plan_render.hpp"

namespace geniex::cli {
namespace {

struct PlanOptions {
  ModelOptions model;
  int32_t n_prefill = 512;
  std::string phase = "both";
  bool summary = false;
  bool json = false;
  std::string svg;
  std::string html;
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
                    {"reason", r.reason},
                    {"estimated_us", r.estimated_us}});
  }
  nlohmann::json act = nlohmann::json::object();
  for (const auto& [backend, bytes] : plan.activation_bytes) act[backend] = bytes;
  nlohmann::json est = nlohmann::json::object();
  for (const auto& [backend, us] : plan.estimated_us) est[backend] = us;
  return {{"n_tokens", plan.n_tokens},
          {"n_splits", plan.n_splits},
          {"n_copies", plan.n_copies},
          {"activation_bytes", act},
          {"estimated_us", est},
          {"estimated_copy_us", plan.estimated_copy_us},
          {"estimated_switch_us", plan.estimated_switch_us},
          {"planning_ms", plan.planning_ms},
          {"lookup_ms", plan.lookup_ms},
          {"graph_build_ms", plan.graph_build_ms},
          {"rows", rows}};
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
      fmt::print("{:<6}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>9}  {}\n", layer, "op", w_op, "name", w_name, "type",
                 w_type, "shape", w_shape, "backend", w_backend, "est us", "reason");
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
      fmt::print("{:<6}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>9.1f}  {}\n", layer, r.op, w_op, r.name, w_name,
                 r.type, w_type, r.shape, w_shape, r.backend, w_backend, r.estimated_us, r.reason);
    }
    fmt::print("\n");
  }
  std::map<std::string, int> nodes_per_backend;
  for (const PlanRow& r : plan.rows) {
    if (r.op != "copy" && r.op != "input") nodes_per_backend[r.backend] += 1;
  }
  fmt::print("nodes: {} ({} copies, {} splits)\n", plan.rows.size(), plan.n_copies, plan.n_splits);
  fmt::print("{:<10} {:>6} {:>14} {:>18}\n", "backend", "ops", "estimated us", "activation memory");
  double total = plan.estimated_copy_us;
  for (size_t b = 0; b < plan.activation_bytes.size(); ++b) {
    const std::string& name = plan.activation_bytes[b].first;
    const double us = b < plan.estimated_us.size() ? plan.estimated_us[b].second : 0.0;
    total += us;
    fmt::print("{:<10} {:>6} {:>14.1f} {:>18}\n", name, nodes_per_backend[name], us,
               format_bytes(static_cast<double>(plan.activation_bytes[b].second)));
  }
  fmt::print("{:<10} {:>6} {:>14.1f}\n", "copies", plan.n_copies, plan.estimated_copy_us);
  fmt::print("{:<10} {:>6} {:>14.1f}\n", "splits", plan.n_splits, plan.estimated_switch_us);
  total += plan.estimated_switch_us;
  fmt::print("{:<10} {:>6} {:>14.1f}   (estimated step time, splits run one after another)\n", "total", "", total);
  fmt::print("planning: {:.3f} ms graph build + {:.3f} ms planning once per shape; then {:.5f} ms per step to find it in the cache\n\n",
             plan.graph_build_ms, plan.planning_ms, plan.lookup_ms);
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
    if (info.gpu_memory_budget >= 0) {
      j["gpu_memory"] = {{"budget_bytes", info.gpu_memory_budget},       {"backend", info.gpu_backend},
                         {"layers", info.gpu_budget_layers},              {"n_layer", info.n_layer},
                         {"embedding", info.gpu_budget_embedding},        {"output", info.gpu_budget_output},
                         {"weight_bytes", info.gpu_weight_bytes},         {"overhead_bytes", info.gpu_overhead_bytes},
                         {"used_bytes", info.gpu_memory_bytes},           {"split", gpu_budget_line(info)}};
    }
  } else {
    std::string backends;
    for (const std::string& b : info.backends) backends += (backends.empty() ? "" : " > ") + b;
    fmt::print("model: {} ({}, {} layers)\n", info.path, info.architecture, info.n_layer);
    fmt::print("declared device: {}   backends in use: {}   threads: {}   ctx: {}\n", info.device,
               backends.empty() ? "-" : backends, info.n_threads, info.n_ctx);
    fmt::print("placement: {}   device profile: {}\n",
               info.gpu_layers >= 0          ? fmt::format("first {} layers on the gpu (--gpu-layers)", info.gpu_layers)
               : info.gpu_memory_budget >= 0 ? fmt::format("cost model under a gpu memory budget (--gpu-memory)")
                                             : std::string("cost model"),
               info.profile);
    if (info.gpu_memory_budget >= 0) fmt::print("gpu memory budget: {}\n", gpu_budget_line(info));
    for (const std::string& note : info.device_notes) fmt::print("  fallback: {}\n", note);
    fmt::print("\n");
  }
  std::vector<TitledPlan> pictures;
  for (const auto& [title, n_tokens] : phases) {
    Result<PlanSummary> plan = model->plan(n_tokens);
    if (!plan) return report_error(plan.error());
    if (opts.json) {
      j[title] = plan_json(*plan);
    } else {
      print_plan(title, *plan, opts.summary);
    }
    pictures.push_back({title, std::move(plan).value()});
  }
  if (opts.json) fmt::print("{}\n", j.dump(2));
  if (!opts.svg.empty() || !opts.html.empty()) {
    std::string backends;
    for (const std::string& b : info.backends) backends += (backends.empty() ? "" : " > ") + b;
    const std::string heading = fmt::format("{} ({} layers), device {} [{}], {}", basename_of(info.path), info.n_layer,
                                            info.device, backends,
                                            info.gpu_layers >= 0 ? fmt::format("--gpu-layers {}", info.gpu_layers)
                                            : info.gpu_memory_budget >= 0 ? "--gpu-memory: " + gpu_budget_line(info)
                                                                          : std::string("cost model"));
    for (const auto& [file, text] : {std::pair{opts.svg, render_plan_svg(heading, pictures)},
                                     std::pair{opts.html, render_plan_html(heading, pictures)}}) {
      if (file.empty()) continue;
      std::FILE* f = std::fopen(file.c_str(), "wb");
      if (f == nullptr) return report_error(make_error(ErrorCode::IoError, "cannot write '" + file + "'"));
      const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
      if (std::fclose(f) != 0 || !ok) return report_error(make_error(ErrorCode::IoError, "writing '" + file + "' failed"));
      if (!opts.json) fmt::print("wrote {}\n", file);
    }
  }
  return 0;
}

}  // namespace

Command make_plan_command(CLI::App& root) {
  auto opts = std::make_shared<PlanOptions>();
  CLI::App* app = root.add_subcommand("plan", "show the scheduler's backend placement for decode and prefill");
  app->footer(
      "Examples: geniex plan --device npu -p 128   (shows the fallback to cpu and why)\n"
      "          geniex plan --device gpu --gpu-layers 15 --html plan.html   (a mixed plan, drawn)\n"
      "          geniex plan --device gpu --gpu-memory 64M --summary   (the layers that fit 64 MiB on the gpu)\n"
      "Estimates come from the device profile (geniex calibrate) or built-in rates.\n");
  add_model_options(*app, opts->model);
  app->add_option("-p,--n-prompt", opts->n_prefill, "tokens of the prefill step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--phase", opts->phase, "which plans to show")
      ->capture_default_str()
      ->check(CLI::IsMember({"decode", "prefill", "both"}));
  app->add_flag("--summary", opts->summary, "only the totals, no per-node table");
  app->add_flag("--json", opts->json, "machine-readable output");
  app->add_option("--svg", opts->svg, "write the plans as an SVG picture (one row per layer, coloured by backend)");
  app->add_option("--html", opts->html, "write the plans as a self-contained HTML page (totals and the picture)");
  return Command{app, [opts] { return run(*opts); }};
}

}  // namespace geniex::cli
