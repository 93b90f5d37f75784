// geniex tokenize / detokenize: a tokenizer on its own, from a model or a vocabulary file.
//   geniex tokenize -p "Hello world"                  -> [19556,905]
//   geniex tokenize -p "Hello" --show-pieces          -> id / piece table
//   geniex tokenize --tokenizer vocab-llama-bpe.gguf -f text.txt --no-special
//   geniex tokenize --bench 5 -f corpus.jsonl --bench-unit jsonl   -> timings as JSON
//   geniex detokenize 19556 905                       -> Hello world
//
// Only the tokenizer is loaded (never the weights): -m MODEL reads it from the model's GGUF,
// --tokenizer PATH from any GGUF that has tokenizer.ggml.* metadata (llama.cpp's vocab-only
// files included), a Hugging Face tokenizer folder or tokenizer.json, or a SentencePiece
// tokenizer.model.
#include <algorithm>
#include <chrono>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "formats/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace geniex::cli {
namespace {

// Where the tokenizer comes from: --tokenizer when given, else the model (-m / $GENIEX_MODEL).
struct TokenizerSource {
  ModelOptions model;
  std::string tokenizer;
  const std::string& path() const { return tokenizer.empty() ? model.path : tokenizer; }
};

void add_tokenizer_options(CLI::App& app, TokenizerSource& src) {
  add_model_options(app, src.model, /*with_threads=*/false, /*with_ctx=*/false, /*with_device=*/false);
  CLI::Option* tok = app.add_option("--tokenizer", src.tokenizer,
                                    "load the tokenizer from this file instead of the model: a GGUF with "
                                    "tokenizer metadata (a full model or a vocab-only file), a Hugging Face "
                                    "tokenizer folder or tokenizer.json, or a SentencePiece .model");
  if (CLI::Option* m = app.get_option_no_throw("--model")) tok->excludes(m);
}

Result<std::unique_ptr<tok::Tokenizer>> load_tokenizer(const TokenizerSource& src) {
  const std::string& path = src.path();
  if (path.empty()) {
    return make_error(ErrorCode::InvalidArgument, "no tokenizer: pass --tokenizer PATH, -m MODEL or set GENIEX_MODEL");
  }
  // The kind is told by content (tok::Tokenizer::from_path); its errors name the path.
  return tok::Tokenizer::from_path(path);
}

struct TokenizeOptions {
  TokenizerSource source;
  PromptOptions prompt;
  bool no_special = false;        // add no BOS/EOS
  bool no_parse_special = false;  // special-token literals are plain text
  bool add_bos = false;
  bool show_pieces = false;
  int32_t bench_runs = 0;
  std::string bench_unit = "all";
};

Result<std::vector<int32_t>> encode(const tok::Tokenizer& t, std::string_view text, const TokenizeOptions& opts) {
  // add_special = true lets the metadata decide (tokenizer.ggml.add_bos_token / add_eos_token);
  // --add-bos forces a BOS even where the tokenizer adds none.
  GX_ASSIGN_OR_RETURN(std::vector<int32_t> ids, t.encode(text, !opts.no_special, !opts.no_parse_special));
  if (opts.add_bos && (ids.empty() || ids.front() != t.bos_id())) ids.insert(ids.begin(), t.bos_id());
  return ids;
}

// The texts a benchmark encodes: the whole input, each line, or each JSON line's "text".
Result<std::vector<std::string>> bench_texts(const std::string& input, const std::string& unit) {
  std::vector<std::string> texts;
  if (unit == "all") {
    texts.push_back(input);
    return texts;
  }
  size_t start = 0;
  size_t line_no = 0;
  while (start < input.size()) {
    size_t end = input.find('\n', start);
    if (end == std::string::npos) end = input.size();
    const std::string line = input.substr(start, end - start);
    ++line_no;
    start = end + 1;
    if (unit == "line") {
      texts.push_back(line);
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_string()) {
      texts.push_back(j.get<std::string>());
    } else if (j.is_object() && j.contains("text") && j["text"].is_string()) {
      texts.push_back(j["text"].get<std::string>());
    } else {
      return make_error(ErrorCode::InvalidArgument,
                        fmt::format("--bench-unit jsonl: line {} is not a JSON string or an object with a \"text\" string",
                                    line_no));
    }
  }
  return texts;
}

// Encodes the texts `runs` times on this thread and prints one JSON object with the timings:
// wall clock and process CPU time per run, their medians, MB/s (10^6 bytes of input) from each.
int run_bench(const tok::Tokenizer& t, const std::string& input, double load_s, const TokenizeOptions& opts) {
  Result<std::vector<std::string>> texts = bench_texts(input, opts.bench_unit);
  if (!texts) return report_error(texts.error());
  size_t bytes = 0;
  for (const std::string& s : *texts) bytes += s.size();
  std::vector<double> seconds, cpu_seconds;  // wall clock; CPU time of the process (robust under load)
  size_t tokens = 0;
  for (int32_t r = 0; r < opts.bench_runs; ++r) {
    size_t n = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    for (const std::string& s : *texts) {
      Result<std::vector<int32_t>> ids = encode(t, s, opts);
      if (!ids) return report_error(ids.error());
      n += ids->size();
    }
    cpu_seconds.push_back(static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    tokens = n;
  }
  auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t k = v.size();
    return k % 2 == 1 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
  };
  const double median = median_of(seconds);
  const double median_cpu = median_of(cpu_seconds);
  nlohmann::json out = {
      {"tokenizer", opts.source.path()},
      {"unit", opts.bench_unit},
      {"n_texts", texts->size()},
      {"bytes", bytes},
      {"tokens", tokens},
      {"runs", opts.bench_runs},
      {"load_s", load_s},
      {"seconds", seconds},
      {"first_s", seconds.front()},
      {"median_s", median},
      {"min_s", *std::min_element(seconds.begin(), seconds.end())},
      {"mb_per_s", median > 0 ? static_cast<double>(bytes) / median / 1e6 : 0.0},
      {"tokens_per_s", median > 0 ? static_cast<double>(tokens) / median : 0.0},
      {"cpu_seconds", cpu_seconds},
      {"median_cpu_s", median_cpu},
      {"mb_per_s_cpu", median_cpu > 0 ? static_cast<double>(bytes) / median_cpu / 1e6 : 0.0},
  };
  fmt::print("{}\n", out.dump());
  return 0;
}

int run_tokenize(const TokenizeOptions& opts) {
  Result<std::string> text = read_prompt(opts.prompt, /*allow_stdin=*/true, /*strip_final_newline=*/false);
  if (!text) return report_error(text.error());
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::unique_ptr<tok::Tokenizer>> loaded = load_tokenizer(opts.source);
  if (!loaded) return report_error(loaded.error());
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const tok::Tokenizer& t = **loaded;
  if (opts.add_bos && t.bos_id() < 0) {
    return report_error(make_error(ErrorCode::NotFound, "--add-bos: the tokenizer defines no BOS token"));
  }
  if (opts.bench_runs > 0) return run_bench(t, *text, load_s, opts);

  Result<std::vector<int32_t>> ids = encode(t, *text, opts);
  if (!ids) return report_error(ids.error());
  if (!opts.show_pieces) {
    fmt::print("{}\n", nlohmann::json(*ids).dump());
    return 0;
  }
  fmt::print("{:>8}  {}\n", "id", "piece");
  for (const int32_t id : *ids) fmt::print("{:>8}  '{}'\n", id, escape_piece(t.token_bytes(id)));
  fmt::print("({} tokens)\n", ids->size());
  return 0;
}

std::string shorten(std::string_view s) {
  std::string out = escape_piece(s.substr(0, 40));
  if (s.size() > 40) out += "...";
  return out;
}

// Ids as a JSON list ("[1, 2]") or separated by whitespace or commas. Anything that is not a
// non-negative integer below 2^31 is an error naming the item and its position.
Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_array()) {
      return make_error(ErrorCode::InvalidArgument, "token ids: invalid JSON list");
    }
    for (size_t k = 0; k < j.size(); ++k) {
      const nlohmann::json& v = j[k];
      if (!v.is_number_integer()) {
        return make_error(ErrorCode::InvalidArgument,
                          fmt::format("token ids: item {} is {}, not an integer", k + 1, shorten(v.dump())));
      }
      const bool bad = v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX
                                             : (v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX);
      if (bad) {
        return make_error(ErrorCode::OutOfRange, fmt::format("token ids: item {} ({}) is not a valid token id", k + 1,
                                                             v.dump()));
      }
      ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    return ids;
  }
  auto is_sep = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ','; };
  size_t i = 0;
  while (i < text.size()) {
    if (is_sep(text[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && !is_sep(text[end])) ++end;
    const std::string_view item(text.data() + i, end - i);
    int64_t id = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && ptr == item.data() + item.size() &&
                                                 (id < 0 || id > INT32_MAX))) {
      return make_error(ErrorCode::OutOfRange,
                        fmt::format("token ids: item {} ({}) is not a valid token id", ids.size() + 1, shorten(item)));
    }
    if (ec != std::errc() || ptr != item.data() + item.size()) {
      return make_error(ErrorCode::InvalidArgument,
                        fmt::format("token ids: item {} ('{}') is not an integer", ids.size() + 1, shorten(item)));
    }
    ids.push_back(static_cast<int32_t>(id));
    i = end;
  }
  return ids;
}

struct DetokenizeOptions {
  TokenizerSource source;
  std::vector<std::string> ids;
  std::string file;
  bool no_newline = false;
  bool skip_special = false;
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

  Result<std::unique_ptr<tok::Tokenizer>> loaded = load_tokenizer(opts.source);
  if (!loaded) return report_error(loaded.error());
  const tok::Tokenizer& t = **loaded;
  for (size_t k = 0; k < ids->size(); ++k) {
    if ((*ids)[k] >= t.n_vocab()) {
      return report_error(make_error(ErrorCode::OutOfRange, fmt::format("token id {} (item {}) is not below the "
                                                                        "vocabulary size {}",
                                                                        (*ids)[k], k + 1, t.n_vocab())));
    }
  }
  Result<std::string> out = t.decode(*ids, opts.skip_special);
  if (!out) return report_error(out.error());
  std::fwrite(out->data(), 1, out->size(), stdout);
  if (!opts.no_newline) std::fputc('\n', stdout);
  return 0;
}

}  // namespace

Command make_tokenize_command(CLI::App& root) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* app = root.add_subcommand("tokenize", "print the token ids of a text as a JSON list");
  app->footer(
      "The text comes from -p, -f FILE or stdin, byte for byte (invalid UTF-8 included).\n"
      "Examples: geniex tokenize -p \"Hello world\" --show-pieces\n"
      "          geniex tokenize --tokenizer vocab-llama-bpe.gguf -f text.txt --no-special\n"
      "          geniex tokenize --bench 5 -f corpus.jsonl --bench-unit jsonl\n");
  add_tokenizer_options(*app, opts->source);
  add_prompt_options(*app, opts->prompt);
  CLI::Option* no_special =
      app->add_flag("--no-special,--no-add-bos", opts->no_special,
                    "add no BOS/EOS (default: as the tokenizer's metadata says)");
  app->add_flag("--no-parse-special", opts->no_parse_special,
                "treat special-token literals (<|im_start|>) as plain text");
  CLI::Option* add = app->add_flag("--add-bos", opts->add_bos, "always start with the BOS token");
  add->excludes(no_special);
  CLI::Option* pieces = app->add_flag("--show-pieces", opts->show_pieces, "print an id / piece table instead of the list");
  CLI::Option* bench = app->add_option("--bench", opts->bench_runs,
                                       "encode the input N times on one thread and print the timings as JSON")
                           ->check(CLI::Range(1, 1000000));
  bench->excludes(pieces);
  app->add_option("--bench-unit", opts->bench_unit,
                  "with --bench: encode the input as one text (all), line by line (line), or the "
                  "\"text\" of each JSON line (jsonl)")
      ->capture_default_str()
      ->check(CLI::IsMember({"all", "line", "jsonl"}));
  return Command{app, [opts] { return run_tokenize(*opts); }};
}

Command make_detokenize_command(CLI::App& root) {
  auto opts = std::make_shared<DetokenizeOptions>();
  CLI::App* app = root.add_subcommand("detokenize", "turn token ids (JSON list or space-separated) into text");
  app->footer("Example: geniex detokenize '[19556, 905]'   or   geniex tokenize -p hi | geniex detokenize\n");
  add_tokenizer_options(*app, opts->source);
  app->add_option("ids", opts->ids, "token ids (default: read from stdin)");
  app->add_option("-f,--file", opts->file, "read the ids from a file");
  app->add_flag("--skip-special", opts->skip_special, "drop control tokens (BOS, EOS, <|im_end|>...)");
  app->add_flag("--no-newline", opts->no_newline, "do not end the output with a newline");
  return Command{app, [opts] { return run_detokenize(*opts); }};
}

}  // namespace geniex::cli
