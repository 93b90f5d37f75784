// geniex quantize IN.gguf OUT.gguf TYPE: rewrites a model's weights in another type
// (src/convert/quantize.cpp), with a progress bar and a size/time summary.
#include <map>
#include <memory>
#include <string>

#include <fmt/core.h>

#include "common.hpp"
#include "convert/quantize.hpp"
#include "progress.hpp"

namespace geniex::cli {
namespace {

struct QuantizeCliOptions {
  std::string in;
  std::string out;
  std::string type;
  bool force = false;
  bool pure = false;
  bool verbose = false;
  int32_t threads = 0;
};

std::string type_list() {
  std::string s;
  for (const convert::QuantTarget& t : convert::quant_targets()) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

int run(const QuantizeCliOptions& opts) {
  Result<convert::QuantTarget> target = convert::find_quant_target(opts.type);
  if (!target) return report_error(target.error());
  convert::QuantizeOptions qopts;
  qopts.force = opts.force;
  qopts.pure = opts.pure;
  qopts.n_threads = opts.threads;
  std::unique_ptr<ProgressBar> bar;
  qopts.on_tensor = [&](size_t index, size_t count, const std::string& name) {
    if (!bar) bar = std::make_unique<ProgressBar>("quantize", count);
    if (index == count) {
      bar->finish();
    } else {
      bar->update(index, name);
    }
  };
  Result<convert::QuantizeSummary> s = convert::quantize_file(opts.in, opts.out, *target, qopts);
  bar.reset();
  if (!s) return report_error(s.error());

  std::map<std::string, int> by_type;
  std::map<std::string, int> fallbacks;  // "q4_k -> q5_0"
  for (const convert::TensorChoice& c : s->tensors) {
    ++by_type[std::string(dtype_name(c.to))];
    if (c.fallback) ++fallbacks[fmt::format("{} -> {}", dtype_name(c.preferred), dtype_name(c.to))];
    if (opts.verbose && !c.reason.empty()) {
      fmt::print(stderr, "  {:<32} {:>5} -> {:<5} {}{}\n", c.name, dtype_name(c.from), dtype_name(c.to),
                 c.fallback ? "fallback: " : "", c.reason);
    }
  }
  for (const auto& [what, n] : fallbacks) {
    fmt::print(stderr, "note: {} tensor(s) fell back {}: their rows are not a multiple of the block size{}\n", n,
               what, opts.verbose ? "" : " (-v lists them)");
  }
  std::string types;
  for (const auto& [name, n] : by_type) types += fmt::format("{}{} {}", types.empty() ? "" : ", ", n, name);
  fmt::print("quantized {} -> {} as {} ({} threads)\n", basename_of(opts.in), basename_of(opts.out), target->name,
             s->n_threads);
  fmt::print("  tensors: {} ({})\n", s->tensors.size(), types);
  fmt::print("  size:    {} -> {} ({:.1f}%)\n", format_bytes(static_cast<double>(s->in_file_bytes)),
             format_bytes(static_cast<double>(s->out_file_bytes)),
             s->in_file_bytes ? 100.0 * static_cast<double>(s->out_file_bytes) / static_cast<double>(s->in_file_bytes)
                              : 0.0);
  fmt::print("  bits per weight: {:.2f} -> {:.2f} over {} weights\n", s->bits_per_weight_in(),
             s->bits_per_weight_out(), format_count(static_cast<double>(s->n_elements)));
  fmt::print("  time:    {:.2f} s\n", s->seconds);
  return 0;
}

}  // namespace

Command make_quantize_command(CLI::App& root) {
  auto opts = std::make_shared<QuantizeCliOptions>();
  CLI::App* app = root.add_subcommand("quantize", "rewrite a GGUF model with its weights in another type");
  app->add_option("input", opts->in, "GGUF model to read")->required();
  app->add_option("output", opts->out, "GGUF file to write")->required();
  app->add_option("type", opts->type, "target type: " + type_list())->required();
  app->add_flag("--force", opts->force, "overwrite the output file if it exists");
  app->add_flag("--pure", opts->pure, "no mix rules: every weight matrix in TYPE where its rows allow");
  app->add_flag("-v,--verbose", opts->verbose, "list every tensor whose type differs from TYPE, and why");
  app->add_option("-t,--threads", opts->threads, "threads (0: all cores)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  return Command{app, [opts] { return run(*opts); }};
}

}  // namespace geniex::cli
