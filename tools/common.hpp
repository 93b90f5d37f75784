// Shared pieces of the `geniex` CLI: flag groups, model loading, prompt input, error and
// statistics printing. Every subcommand is a Command built by one make_*_command function.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "geniex/geniex.hpp"
#include "size_arg.hpp"

namespace geniex::cli {

// A registered subcommand: its CLI11 app and the function that runs it once parsed.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command make_run_command(CLI::App& root);
Command make_chat_command(CLI::App& root);
Command make_info_command(CLI::App& root);
Command make_tokenize_command(CLI::App& root);
Command make_detokenize_command(CLI::App& root);
Command make_bench_command(CLI::App& root);
Command make_plan_command(CLI::App& root);
Command make_perplexity_command(CLI::App& root);
Command make_quantize_command(CLI::App& root);
Command make_convert_command(CLI::App& root);
Command make_calibrate_command(CLI::App& root);

// Exit codes: 0 success, 1 runtime error (any geniex::Error), 2 usage error.
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// $GENIEX_MODEL if set, else ${GENIEX_CACHE:-$HOME/.cache/geniex}/models/SmolLM2-135M-Instruct.Q4_1.gguf.
std::string default_model_path();

// -m/--model, -t/--threads, -c/--ctx-size, --device.
struct ModelOptions {
  std::string path = default_model_path();
  int32_t threads = 0;
  int32_t ctx_size = 0;
  std::string device = "auto";
  std::string kv_type = "f16";
  std::string load_type;  // Hugging Face folders: weight type to convert to while loading
  int32_t gpu_layers = -1;  // --gpu-layers: first N layers on the GPU backend, the rest on the CPU
  std::string gpu_memory;   // --gpu-memory SIZE: memory budget of the GPU backend ("": none)
  bool split_rows = false;  // --split-rows: large MatMuls split by rows between GPU and CPU
  std::string trace;        // --trace FILE (commands that offer it): Chrome trace of the run
  bool packed_cache = false;     // --packed-cache: the packed-weights cache in default_packed_cache_dir()
  std::string packed_cache_dir;  // --packed-cache-dir DIR: the cache in DIR
};
void add_model_options(CLI::App& app, ModelOptions& opts, bool with_threads = true,
                       bool with_ctx = true, bool with_device = true);
// --packed-cache and --packed-cache-dir (part of add_model_options; for commands with their own
// model flags).
void add_packed_cache_options(CLI::App& app, ModelOptions& opts);
// ${GENIEX_CACHE:-$HOME/.cache/geniex}/packed
std::string default_packed_cache_dir();
Result<Model> load_model(const ModelOptions& opts);

std::string format_bytes(double bytes);  // (declared again below with the other helpers)

// With a GPU memory budget: "15 of 30 layers on opencl (+ output head), 210 MiB of 256 MiB budget
// (weights 190 MiB, activations and scratch 20 MiB)"; "" without one.
inline std::string gpu_budget_line(const ModelInfo& info) {
  if (info.gpu_memory_budget < 0) return {};
  if (info.gpu_backend.empty()) return "no gpu backend in use: all layers on the cpu";
  std::string s = std::to_string(info.gpu_budget_layers) + " of " + std::to_string(info.n_layer) + " layers on " +
                  info.gpu_backend;
  if (info.gpu_budget_embedding) s += " + embedding";
  if (info.gpu_budget_output) s += " + output head";
  s += ", " + format_bytes(static_cast<double>(info.gpu_memory_bytes)) + " of " +
       format_bytes(static_cast<double>(info.gpu_memory_budget)) + " budget";
  if (info.gpu_memory_bytes > 0) {
    s += " (weights " + format_bytes(static_cast<double>(info.gpu_weight_bytes)) + ", activations and scratch " +
         format_bytes(static_cast<double>(info.gpu_overhead_bytes)) + ")";
  }
  return s;
}

// --gpu-memory SIZE (parse_size; a bad value is a usage error naming it) excluding --gpu-layers.
inline CLI::Option* add_gpu_memory_option(CLI::App& app, std::string& value, CLI::Option* gpu_layers) {
  CLI::Option* o = app.add_option("--gpu-memory", value,
                                  "GPU memory budget (512M, 1.5G, 2GiB, bytes): the scheduler puts the layers that save "
                                  "the most time per byte on the GPU backend, the rest on the CPU")
                       ->check(CLI::Validator(
                           [](std::string& v) {
                             auto r = parse_size(v, "");  // CLI11 names the option
                             return r ? std::string() : r.error().message;
                           },
                           "SIZE"));
  if (gpu_layers != nullptr) o->excludes(gpu_layers);
  return o;
}

// Sampling and generation flags, defaults taken from GenerationConfig.
struct SamplingOptions {
  int32_t n_predict = 256;
  float temp = GenerationConfig{}.temperature;
  int32_t top_k = GenerationConfig{}.top_k;
  float top_p = GenerationConfig{}.top_p;
  float min_p = GenerationConfig{}.min_p;
  float repeat_penalty = GenerationConfig{}.repeat_penalty;
  int32_t repeat_last_n = GenerationConfig{}.repeat_last_n;
  int64_t seed = -1;
  std::vector<std::string> stop;
};
void add_sampling_options(CLI::App& app, SamplingOptions& opts);
// Builds a config (no callback, no stats); escapes in stop strings processed when `escape`.
GenerationConfig make_generation_config(const SamplingOptions& opts, bool escape);

// -p/--prompt and -f/--file (mutually exclusive).
struct PromptOptions {
  std::string prompt;
  std::string file;
  bool escape = false;
};
void add_prompt_options(CLI::App& app, PromptOptions& opts, bool with_escape = true);
// The prompt from -p, -f, or (when allow_stdin and stdin is not a terminal) all of stdin.
// strip_final_newline: drop the newline that ends a file or piped text (for a chat message;
// raw prompts and tokenize keep the bytes as they are).
Result<std::string> read_prompt(const PromptOptions& opts, bool allow_stdin, bool strip_final_newline);

// Reads a whole stream (until EOF) or file.
std::string read_all(std::FILE* f);
Result<std::string> read_file(const std::string& path);
// "\n", "\t", "\\", "\"", "\'", "\r", "\0" and "\xNN" escapes, as llama.cpp's -e.
std::string process_escapes(std::string_view s);
// Printable form of a token piece: control bytes and invalid UTF-8 as \n, \t, \xNN.
std::string escape_piece(std::string_view s);
// True when the bytes are valid UTF-8.
bool is_valid_utf8(std::string_view s);

// "geniex: error: <code>: <message>" on stderr (one line); returns kExitError.
int report_error(const Error& error);
int report_error(std::string_view message);
// "geniex: warning: ..." on stderr.
void warn(std::string_view message);

// "85.81 MiB", "1.20 GiB", "512 B".
std::string format_bytes(double bytes);
// "134.52 M", "1.10 B".
std::string format_count(double n);
// Comma-separated positive integers ("128,512"); InvalidArgument naming the flag otherwise.
Result<std::vector<int32_t>> parse_int_list(std::string_view text, std::string_view flag,
                                            int32_t min_value);
// Last path component.
std::string basename_of(std::string_view path);
bool stdin_is_tty();

// Prints load time, prompt tokens, TTFT, prefill and decode rates on stderr.
void print_generation_stats(const ModelInfo& info, const GenerationStats& stats);

// Cancellation by Ctrl-C: install_interrupt_handler() makes SIGINT set a flag that
// interrupted() reads (a second Ctrl-C while the flag is set exits immediately).
void install_interrupt_handler();
bool interrupted();
void clear_interrupted();

}  // namespace geniex::cli
