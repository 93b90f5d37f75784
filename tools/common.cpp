#include "common.hpp"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include <fmt/core.h>

namespace geniex::cli {

namespace {
std::string cache_root() {
  if (const char* env = std::getenv("GENIEX_CACHE"); env && *env) return env;
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/geniex";
  return ".cache/geniex";
}
}  // namespace

std::string default_model_path() {
  if (const char* env = std::getenv("GENIEX_MODEL"); env && *env) return env;
  return cache_root() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string default_packed_cache_dir() { return cache_root() + "/packed"; }

void add_packed_cache_options(CLI::App& app, ModelOptions& opts) {
  app.add_flag("--packed-cache", opts.packed_cache,
               "keep the CPU's repacked weights in a cache file (" + default_packed_cache_dir() +
                   ") that later loads of this model map instead of repacking");
  app.add_option("--packed-cache-dir", opts.packed_cache_dir, "the packed-weights cache in this folder (implies --packed-cache)");
}

void add_model_options(CLI::App& app, ModelOptions& opts, bool with_threads, bool with_ctx,
                       bool with_device) {
  app.add_option("-m,--model", opts.path, "GGUF model file ($GENIEX_MODEL or the cached SmolLM2-135M-Instruct)")
      ->capture_default_str();
  if (with_threads) {
    app.add_option("-t,--threads", opts.threads, "CPU threads (0: every CPU this process may use)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
  }
  if (with_ctx) {
    app.add_option("-c,--ctx-size", opts.ctx_size, "context length in tokens (0: min(trained, 4096))")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("--kv-type", opts.kv_type, "KV cache storage type")
        ->capture_default_str()
        ->check(CLI::IsMember({"f16", "f32"}));
  }
  app.add_option("--load-type", opts.load_type,
                 "Hugging Face folders: convert weights to this type while loading (f16, q8_0, q4_0, q4_k, ...)");
  if (with_device) {
    app.add_option("--device", opts.device, "target compute unit; falls back npu -> gpu -> cpu")
        ->capture_default_str()
        ->check(CLI::IsMember({"cpu", "gpu", "npu", "auto"}));
    CLI::Option* layers = app.add_option("--gpu-layers", opts.gpu_layers,
                   "mixed plan: the first N layers on the GPU backend, the rest on the CPU (-1: cost model)")
        ->capture_default_str()
        ->check(CLI::Range(-1, 1 << 20));
    add_gpu_memory_option(app, opts.gpu_memory, layers);
    app.add_flag("--split-rows", opts.split_rows,
                 "split large matmuls by rows between the GPU and CPU backends, run at once");
    add_packed_cache_options(app, opts);  // the commands that load weights (tokenize does not)
  }
}

Result<Model> load_model(const ModelOptions& opts) {
  if (opts.path.empty()) {
    return make_error(ErrorCode::InvalidArgument, "no model: pass -m/--model or set GENIEX_MODEL");
  }
  if (::access(opts.path.c_str(), R_OK) != 0) {
    const int err = errno;
    return make_error(ErrorCode::NotFound,
                      fmt::format("cannot read model '{}': {} (run scripts/fetch_model.sh or pass -m)",
                                  opts.path, std::strerror(err)));
  }
  Result<Device> device = Device::parse(opts.device);
  if (!device) return device.take_error();
  int64_t gpu_memory = -1;
  if (!opts.gpu_memory.empty()) {
    GX_ASSIGN_OR_RETURN(gpu_memory, parse_size(opts.gpu_memory, "--gpu-memory"));
  }
  Result<Model> model = ModelBuilder(opts.path)
      .with_device(*device)
      .with_threads(opts.threads)
      .with_context(opts.ctx_size)
      .with_kv_cache_type(opts.kv_type == "f32" ? KvCacheType::F32 : KvCacheType::F16)
      .with_load_type(opts.load_type)
      .with_gpu_layers(opts.gpu_layers)
      .with_gpu_memory(gpu_memory)
      .with_row_split(opts.split_rows)
      .with_trace(opts.trace)
      .with_packed_cache(!opts.packed_cache_dir.empty() ? opts.packed_cache_dir
                         : opts.packed_cache          ? default_packed_cache_dir()
                                                      : std::string())
      .build();
  if (model && !model->info().profile_warning.empty()) warn(model->info().profile_warning);
  if (model && !model->info().packed_cache_note.empty()) warn("packed cache: " + model->info().packed_cache_note);
  return model;
}

void add_sampling_options(CLI::App& app, SamplingOptions& opts) {
  app.add_option("-n,--n-predict", opts.n_predict, "maximum number of tokens to generate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--temp", opts.temp, "temperature (<= 0: greedy)")->capture_default_str();
  app.add_option("--top-k", opts.top_k, "top-k sampling (<= 0: off)")->capture_default_str();
  app.add_option("--top-p", opts.top_p, "top-p (nucleus) sampling (>= 1: off)")->capture_default_str();
  app.add_option("--min-p", opts.min_p, "min-p sampling (<= 0: off)")->capture_default_str();
  app.add_option("--repeat-penalty", opts.repeat_penalty, "penalty for repeated tokens (1: off)")
      ->capture_default_str();
  app.add_option("--repeat-last-n", opts.repeat_last_n, "tokens considered for the repeat penalty")
      ->capture_default_str();
  app.add_option("-s,--seed", opts.seed, "random seed (-1: random)")->capture_default_str();
  app.add_option("--stop", opts.stop, "stop string, not included in the output (repeatable)")
      ->type_size(1)
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

GenerationConfig make_generation_config(const SamplingOptions& opts, bool escape) {
  GenerationConfig config;
  config.max_new_tokens = opts.n_predict;
  config.temperature = opts.temp;
  config.top_k = opts.top_k;
  config.top_p = opts.top_p;
  config.min_p = opts.min_p;
  config.repeat_penalty = opts.repeat_penalty;
  config.repeat_last_n = opts.repeat_last_n;
  config.seed = opts.seed < 0 ? UINT64_MAX : static_cast<uint64_t>(opts.seed);
  for (const std::string& s : opts.stop) {
    config.stop.push_back(escape ? process_escapes(s) : s);
  }
  return config;
}

void add_prompt_options(CLI::App& app, PromptOptions& opts, bool with_escape) {
  CLI::Option* p = app.add_option("-p,--prompt", opts.prompt, "prompt text");
  CLI::Option* f = app.add_option("-f,--file", opts.file, "read the prompt from a file");
  p->excludes(f);
  if (with_escape) {
    app.add_flag("-e,--escape", opts.escape, R"(process escapes (\n, \t, \\, \xNN) in the prompt and stop strings)");
  }
}

std::string read_all(std::FILE* f) {
  std::string out;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  return out;
}

Result<std::string> read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    return make_error(ErrorCode::IoError, fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  }
  std::string out = read_all(f);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return make_error(ErrorCode::IoError, fmt::format("error reading '{}'", path));
  return out;
}

Result<std::string> read_prompt(const PromptOptions& opts, bool allow_stdin, bool strip_final_newline) {
  std::string text;
  if (!opts.file.empty()) {
    Result<std::string> content = read_file(opts.file);
    if (!content) return content.take_error();
    text = std::move(content).value();
  } else if (!opts.prompt.empty()) {
    text = opts.prompt;
  } else if (allow_stdin && !stdin_is_tty()) {
    text = read_all(stdin);
  } else {
    return make_error(ErrorCode::InvalidArgument,
                      allow_stdin ? "no prompt: pass -p TEXT, -f FILE or pipe text on stdin"
                                  : "no prompt: pass -p TEXT or -f FILE");
  }
  if (strip_final_newline && opts.prompt.empty()) {
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (!text.empty() && text.back() == '\r') text.pop_back();
  }
  if (opts.escape) text = process_escapes(text);
  return text;
}

std::string process_escapes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '0': out += '\0'; break;
      case '\\': out += '\\'; break;
      case '"': out += '"'; break;
      case '\'': out += '\''; break;
      case 'x': {
        int value = 0;
        size_t digits = 0;
        while (digits < 2 && i + 1 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1]))) {
          const char h = s[++i];
          value = value * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
          ++digits;
        }
        if (digits == 0) {
          out += "\\x";
        } else {
          out += static_cast<char>(value);
        }
        break;
      }
      default:
        out += '\\';
        out += c;
    }
  }
  return out;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

std::string escape_piece(std::string_view s) {
  const bool utf8 = is_valid_utf8(s);
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && !utf8)) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  return out;
}

namespace {
std::string one_line(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}
}  // namespace

int report_error(const Error& error) {
  std::fflush(stdout);
  fmt::print(stderr, "geniex: error: {}\n", one_line(error.to_string()));
  return kExitError;
}

int report_error(std::string_view message) {
  std::fflush(stdout);
  fmt::print(stderr, "geniex: error: {}\n", one_line(message));
  return kExitError;
}

void warn(std::string_view message) {
  fmt::print(stderr, "geniex: warning: {}\n", one_line(message));
}

std::string format_bytes(double bytes) {
  if (bytes < 1024.0) return fmt::format("{:.0f} B", bytes);
  if (bytes < 1024.0 * 1024.0) return fmt::format("{:.2f} KiB", bytes / 1024.0);
  if (bytes < 1024.0 * 1024.0 * 1024.0) return fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024.0));
  return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

std::string format_count(double n) {
  if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.2f} K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

Result<std::vector<int32_t>> parse_int_list(std::string_view text, std::string_view flag,
                                            int32_t min_value) {
  std::vector<int32_t> values;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(start, end - start);
    int32_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < min_value) {
      return make_error(ErrorCode::InvalidArgument,
                        fmt::format("{}: expected a comma-separated list of integers >= {}, got '{}'",
                                    flag, min_value, text));
    }
    values.push_back(v);
    start = end + 1;
  }
  return values;
}

std::string basename_of(std::string_view path) {
  const size_t slash = path.find_last_of('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool stdin_is_tty() { return ::isatty(STDIN_FILENO) != 0; }

void print_generation_stats(const ModelInfo& info, const GenerationStats& stats) {
  std::string backends;
  for (const std::string& b : info.backends) backends += (backends.empty() ? "" : ",") + b;
  fmt::print(stderr, "\n");
  fmt::print(stderr, "geniex: model {} | device {} -> {} | {} threads | ctx {}\n",
             basename_of(info.path), info.device, backends.empty() ? "?" : backends, info.n_threads,
             info.n_ctx);
  fmt::print(stderr, "geniex: load time          {:10.2f} ms\n", info.load_ms);
  if (info.packed_cache != "off") {
    fmt::print(stderr, "geniex: packed cache       {:>10} {}\n", info.packed_cache,
               info.packed_cache_path.empty() ? info.packed_cache_note : info.packed_cache_path);
  }
  fmt::print(stderr, "geniex: prompt tokens      {:10d}", stats.prompt_tokens);
  if (stats.reused_prompt_tokens > 0) {
    fmt::print(stderr, " ({} reused from cache)", stats.reused_prompt_tokens);
  }
  fmt::print(stderr, "\n");
  fmt::print(stderr, "geniex: time to 1st token  {:10.2f} ms\n", stats.time_to_first_token_ms);
  fmt::print(stderr, "geniex: prefill            {:10.2f} tok/s ({:.2f} ms)\n",
             stats.prefill_tokens_per_second(), stats.prefill_ms);
  fmt::print(stderr, "geniex: decode             {:10.2f} tok/s ({} tokens, {:.2f} ms)\n",
             stats.decode_tokens_per_second(), stats.generated_tokens, stats.decode_ms);
  fmt::print(stderr, "geniex: stop reason        {:>10}\n",
             stats.stop_reason.empty() ? std::string("?") : stats.stop_reason);
}

namespace {
std::atomic<bool> g_interrupted{false};

void on_sigint(int) {
  if (g_interrupted.load()) {
    std::_Exit(130);
  }
  g_interrupted.store(true);
}
}  // namespace

void install_interrupt_handler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

bool interrupted() { return g_interrupted.load(); }
void clear_interrupted() { g_interrupted.store(false); }

}  // namespace geniex::cli
