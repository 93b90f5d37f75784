// geniex chat: interactive multi-turn conversation on one Session (the KV cache keeps the
// conversation, so each turn only processes the new message). Reads one user message per
// line from stdin until EOF or /exit; works with a pipe as well as a terminal:
//   printf 'hi\n/exit\n' | geniex chat
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "common.hpp"

namespace geniex::cli {
namespace {

struct ChatOptions {
  ModelOptions model;
  SamplingOptions sampling;
  std::string system;
  bool escape = false;
  bool stats = false;
};

constexpr const char* kChatHelp =
    "commands: /exit (or /quit) ends the chat, /reset starts a new conversation, /help this text";

int run(const ChatOptions& opts) {
  Result<Model> model = load_model(opts.model);
  if (!model) return report_error(model.error());
  Result<Session> session = model->new_session();
  if (!session) return report_error(session.error());

  const bool interactive = stdin_is_tty();
  const std::string system = opts.escape ? process_escapes(opts.system) : opts.system;
  std::vector<ChatMessage> messages;
  auto start_conversation = [&] {
    messages.clear();
    if (!system.empty()) messages.push_back({"system", system});
  };
  start_conversation();

  GenerationConfig config = make_generation_config(opts.sampling, opts.escape);
  GenerationStats stats;
  config.stats = &stats;
  bool ends_with_newline = true;
  config.on_text = [&](std::string_view piece) {
    if (!piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      ends_with_newline = piece.back() == '\n';
    }
    return !interrupted();
  };

  install_interrupt_handler();
  if (interactive) {
    fmt::print(stderr, "geniex chat: {} on {} ({}). {}\n", basename_of(model->info().path),
               model->info().device, std::to_string(model->info().n_ctx) + " tokens of context", kChatHelp);
  }
  std::string line;
  while (true) {
    fmt::print(stderr, "> ");
    std::fflush(stderr);
    clear_interrupted();
    if (!std::getline(std::cin, line)) {
      if (interactive) fmt::print(stderr, "\n");
      break;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      start_conversation();
      session->reset();
      fmt::print(stderr, "(conversation reset)\n");
      continue;
    }
    if (line == "/help") {
      fmt::print(stderr, "{}\n", kChatHelp);
      continue;
    }

    messages.push_back({"user", opts.escape ? process_escapes(line) : line});
    stats = GenerationStats{};
    ends_with_newline = true;
    Result<std::string> reply = session->chat(messages, config);
    if (!ends_with_newline) std::fputc('\n', stdout);
    std::fflush(stdout);
    const bool cancelled = interrupted() || (!reply && reply.error().code == ErrorCode::Cancelled);
    if (!reply && !cancelled) {
      messages.pop_back();
      report_error(reply.error());
      if (!interactive) return kExitError;
      fmt::print(stderr, "(the message was dropped; /reset starts a new conversation)\n");
      continue;
    }
    // A cancelled reply is kept as far as it got, so the history matches what was shown.
    messages.push_back({"assistant", reply ? *reply : std::string()});
    if (opts.stats) {
      fmt::print(stderr, "[{} prompt tokens ({} reused), ttft {:.1f} ms, {:.1f} tok/s prefill, {:.1f} tok/s decode, {}]\n",
                 stats.prompt_tokens, stats.reused_prompt_tokens, stats.time_to_first_token_ms,
                 stats.prefill_tokens_per_second(), stats.decode_tokens_per_second(), stats.stop_reason);
    }
    if (stats.stop_reason == "context_full") {
      warn("the context is full; /reset starts a new conversation (or raise -c/--ctx-size)");
    }
  }
  return 0;
}

}  // namespace

Command make_chat_command(CLI::App& root) {
  auto opts = std::make_shared<ChatOptions>();
  CLI::App* app = root.add_subcommand("chat", "interactive multi-turn chat (reads lines from stdin)");
  app->footer(std::string("Replies go to stdout, the \"> \" prompt to stderr. ") + kChatHelp +
              ".\nExample: printf 'Hi!\\n/exit\\n' | geniex chat --system \"You are concise.\"\n");
  add_model_options(*app, opts->model);
  add_sampling_options(*app, opts->sampling);
  app->add_option("--system", opts->system, "system message that starts every conversation");
  app->add_flag("-e,--escape", opts->escape, R"(process escapes (\n, \t, \xNN) in messages and stop strings)");
  app->add_flag("--stats", opts->stats, "print timings after each reply on stderr");
  return Command{app, [opts] { return run(*opts); }};
}

}  // namespace geniex::cli
