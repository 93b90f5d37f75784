// geniex tokenize / detokenize: the model's tokenizer on its own.
//   geniex tokenize -p "Hello world"          -> [19556, 905]
//   geniex tokenize -p "Hello" --show-pieces  -> id / piece table
//   geniex detokenize 19556 905               -> Hello world
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "formats/gguf.hpp"

namespace geniex::cli {
namespace {

struct TokenizeOptions {
  ModelOptions model;
  PromptOptions prompt;
  bool no_special = false;
  bool add_bos = false;
  bool no_add_bos = false;
  bool show_pieces = false;
};

// The BOS id from the file's metadata (for --add-bos on a model that does not add one).
Result<int32_t> bos_token_id(const std::string& path) {
  Result<gguf::File> file = gguf::File::open(path);
  if (!file) return file.take_error();
  Result<uint64_t> id = file->get_u64("tokenizer.ggml.bos_token_id");
  if (!id) return make_error(ErrorCode::NotFound, "--add-bos: the model defines no BOS token (" + id.error().message + ")");
  return static_cast<int32_t>(*id);
}

int run_tokenize(const TokenizeOptions& opts) {
  Result<std::string> text = read_prompt(opts.prompt, /*allow_stdin=*/true, /*strip_final_newline=*/false);
  if (!text) return report_error(text.error());
  Result<Model> model = load_model(opts.model);
  if (!model) return report_error(model.error());

  // add_special = true lets the model decide (its tokenizer.ggml.add_bos_token); --no-add-bos
  // turns special tokens off; --add-bos forces a BOS even where the model adds none.
  const bool add_special = !opts.no_add_bos;
  Result<std::vector<int32_t>> ids = model->tokenize(*text, add_special, !opts.no_special);
  if (!ids) return report_error(ids.error());
  if (opts.add_bos) {
    Result<int32_t> bos = bos_token_id(opts.model.path);
    if (!bos) return report_error(bos.error());
    if (ids->empty() || ids->front() != *bos) ids->insert(ids->begin(), *bos);
  }

  if (!opts.show_pieces) {
    fmt::print("{}\n", nlohmann::json(*ids).dump());
    return 0;
  }
  fmt::print("{:>8}  {}\n", "id", "piece");
  for (const int32_t id : *ids) {
    const int32_t one[1] = {id};
    Result<std::string> piece = model->detokenize(one);
    if (!piece) return report_error(piece.error());
    fmt::print("{:>8}  '{}'\n", id, escape_piece(*piece));
  }
  fmt::print("({} tokens)\n", ids->size());
  return 0;
}

// Ids as a JSON list ("[1, 2]") or separated by spaces, commas or newlines.
Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_array()) {
      return make_error(ErrorCode::InvalidArgument, "token ids: invalid JSON list");
    }
    for (const nlohmann::json& v : j) {
      if (!v.is_number_integer()) return make_error(ErrorCode::InvalidArgument, "token ids: expected integers, got " + v.dump());
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id > INT32_MAX) return make_error(ErrorCode::OutOfRange, fmt::format("token id {} out of range", id));
      ids.push_back(static_cast<int32_t>(id));
    }
    return ids;
  }
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ',') {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && text[end] != ' ' && text[end] != '\t' && text[end] != '\r' &&
           text[end] != '\n' && text[end] != ',') {
      ++end;
    }
    int32_t id = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + end, id);
    if (ec != std::errc() || ptr != text.data() + end || id < 0) {
      return make_error(ErrorCode::InvalidArgument,
                        fmt::format("token ids: '{}' is not a token id", text.substr(i, end - i)));
    }
    ids.push_back(id);
    i = end;
  }
  return ids;
}

struct DetokenizeOptions {
  ModelOptions model;
  std::vector<std::string> ids;
  std::string file;
  bool no_newline = false;
};

int run_detokenize(const DetokenizeOptions& opts) {
  std::string text;
  if (!opts.file.empty()) {
    Result<std::string> content = read_file(opts.file);
    if (!content) return report_error(content.error());
    text = std::move(content).value();
  } else if (!opts.ids.empty()) {
    for (const std::string& s : opts.ids) text += s + " ";
  } else if (!stdin_is_tty()) {
    text = read_all(stdin);
  } else {
    return report_error("no token ids: pass them as arguments, with -f FILE, or on stdin");
  }
  Result<std::vector<int32_t>> ids = parse_ids(text);
  if (!ids) return report_error(ids.error());

  Result<Model> model = load_model(opts.model);
  if (!model) return report_error(model.error());
  const int32_t n_vocab = model->info().n_vocab;
  for (const int32_t id : *ids) {
    if (n_vocab > 0 && id >= n_vocab) {
      return report_error(make_error(ErrorCode::OutOfRange, fmt::format("token id {} >= n_vocab {}", id, n_vocab)));
    }
  }
  Result<std::string> out = model->detokenize(*ids);
  if (!out) return report_error(out.error());
  std::fwrite(out->data(), 1, out->size(), stdout);
  if (!opts.no_newline) std::fputc('\n', stdout);
  return 0;
}

}  // namespace

Command make_tokenize_command(CLI::App& root) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* app = root.add_subcommand("tokenize", "print the token ids of a text as a JSON list");
  app->footer("Example: geniex tokenize -p \"Hello world\" --show-pieces\n");
  add_model_options(*app, opts->model, /*with_threads=*/false, /*with_ctx=*/false, /*with_device=*/false);
  add_prompt_options(*app, opts->prompt);
  app->add_flag("--no-special", opts->no_special, "treat special-token literals (<|im_start|>) as plain text");
  CLI::Option* add = app->add_flag("--add-bos", opts->add_bos, "always start with the BOS token");
  CLI::Option* no_add = app->add_flag("--no-add-bos", opts->no_add_bos, "add no BOS/special tokens (default: as the model says)");
  add->excludes(no_add);
  app->add_flag("--show-pieces", opts->show_pieces, "print an id / piece table instead of the list");
  return Command{app, [opts] { return run_tokenize(*opts); }};
}

Command make_detokenize_command(CLI::App& root) {
  auto opts = std::make_shared<DetokenizeOptions>();
  CLI::App* app = root.add_subcommand("detokenize", "turn token ids (JSON list or space-separated) into text");
  app->footer("Example: geniex detokenize '[19556, 905]'   or   geniex tokenize -p hi | geniex detokenize\n");
  add_model_options(*app, opts->model, /*with_threads=*/false, /*with_ctx=*/false, /*with_device=*/false);
  app->add_option("ids", opts->ids, "token ids (default: read from stdin)");
  app->add_option("-f,--file", opts->file, "read the ids from a file");
  app->add_flag("--no-newline", opts->no_newline, "do not end the output with a newline");
  return Command{app, [opts] { return run_detokenize(*opts); }};
}

}  // namespace geniex::cli
