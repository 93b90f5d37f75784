// geniex run: one prompt in, generated text streamed to stdout, timings on stderr.
//
// By default the prompt is sent as a single user message through the model's chat template
// (with an optional --system message), which is what instruction-tuned models expect; a
// model without a template gets the prompt raw. --raw always sends the prompt as is.
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/core.h>

#include "common.hpp"

namespace geniex::cli {
namespace {

struct RunOptions {
  ModelOptions model;
  SamplingOptions sampling;
  PromptOptions prompt;
  std::string system;
  bool raw = false;
  bool no_stats = false;
  bool verbose = false;
};

int run(const RunOptions& opts) {
  Result<std::string> prompt = read_prompt(opts.prompt, /*allow_stdin=*/true, /*strip_final_newline=*/!opts.raw);
  if (!prompt) return report_error(prompt.error());
  if (prompt->empty()) return report_error("empty prompt");

  Result<Model> model = load_model(opts.model);
  if (!model) return report_error(model.error());
  const ModelInfo& info = model->info();
  if (opts.verbose) {
    fmt::print(stderr, "geniex: loaded {} ({}, {} params) in {:.1f} ms\n", info.path, info.architecture,
               format_count(static_cast<double>(info.n_params)), info.load_ms);
    for (const std::string& note : info.device_notes) fmt::print(stderr, "geniex: device: {}\n", note);
    if (const std::string split = gpu_budget_line(info); !split.empty()) {
      fmt::print(stderr, "geniex: gpu memory budget: {}\n", split);
    }
  }

  std::vector<ChatMessage> messages;
  bool use_template = !opts.raw;
  if (use_template) {
    if (!opts.system.empty()) messages.push_back({"system", opts.system});
    messages.push_back({"user", *prompt});
    Result<std::string> rendered = model->apply_chat_template(messages);
    if (!rendered) {
      const ErrorCode code = rendered.error().code;
      if (code != ErrorCode::NotFound && code != ErrorCode::Unsupported) {
        return report_error(rendered.error());
      }
      if (!opts.system.empty()) {
        return report_error("--system needs a chat template, and this model has none (" +
                            rendered.error().message + ")");
      }
      if (opts.verbose) warn("model has no usable chat template; sending the prompt raw");
      use_template = false;
    } else if (opts.verbose) {
      fmt::print(stderr, "geniex: prompt after the chat template:\n{}\n", *rendered);
    }
  } else if (!opts.system.empty()) {
    return report_error("--system cannot be combined with --raw");
  }

  GenerationConfig config = make_generation_config(opts.sampling, opts.prompt.escape);
  GenerationStats stats;
  config.stats = &stats;
  bool wrote_any = false;
  bool ends_with_newline = false;
  config.on_text = [&](std::string_view piece) {
    if (!piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      wrote_any = true;
      ends_with_newline = piece.back() == '\n';
    }
    return !interrupted();
  };

  install_interrupt_handler();
  Result<std::string> text = use_template ? model->chat(messages, config) : model->generate(*prompt, config);
  const bool cancelled = interrupted() || (!text && text.error().code == ErrorCode::Cancelled);
  if (!text && !cancelled) return report_error(text.error());
  // The callback streams the text; print whatever it did not see (a backend that returns the
  // text without streaming it) and end the output with one newline.
  if (text && !wrote_any && !text->empty()) {
    std::fwrite(text->data(), 1, text->size(), stdout);
    ends_with_newline = text->back() == '\n';
    wrote_any = true;
  }
  if (wrote_any && !ends_with_newline) std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!opts.no_stats) print_generation_stats(info, stats);
  if (stats.stop_reason == "context_full") {
    warn("generation stopped: the context is full (raise -c/--ctx-size)");
  }
  return cancelled ? 130 : 0;
}

}  // namespace

Command make_run_command(CLI::App& root) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App* app = root.add_subcommand("run", "generate text from a prompt, streamed to stdout");
  app->footer(
      "The prompt goes through the model's chat template as one user message unless --raw\n"
      "is given. Generated text goes to stdout; timings go to stderr.\n"
      "Example: geniex run -p \"Explain in two sentences why on-device inference matters.\" -n 128\n");
  add_model_options(*app, opts->model);
  add_prompt_options(*app, opts->prompt);
  add_sampling_options(*app, opts->sampling);
  app->add_option("--system", opts->system, "system message (chat template only)");
  app->add_flag("--raw", opts->raw, "send the prompt as is, without the chat template");
  app->add_flag("--no-stats", opts->no_stats, "do not print timings on stderr");
  app->add_flag("-v,--verbose", opts->verbose, "print model and template details on stderr");
  app->add_option("--trace", opts->model.trace,
                  "write a Chrome trace (chrome://tracing, Perfetto) of the run's steps to FILE")
      ->type_name("FILE");
  return Command{app, [opts] { return run(*opts); }};
}

}  // namespace geniex::cli
