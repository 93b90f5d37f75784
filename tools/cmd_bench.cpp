// geniex bench: prompt-processing and text-generation throughput, in the manner of
// llama-bench, so the two can be compared on the same GGUF.
//   pp{N}: one Session::eval of N random token ids on an empty session.
//   tg{N}: N single-token evals on an empty session.
//   with -d D (llama-bench's depth): the same after D random tokens already in the KV cache
//   (evaluated before the clock starts, again for each run), named "pp{N} @ d{D}" and
//   "tg{N} @ d{D}": how prefill and decode hold up over a long context.
// Each test runs once to warm up, then -r times; the table reports the median tokens/s and
// the standard deviation; --json prints one JSON object per test and line. After the table,
// the scheduler's cost per step: planning a shape once (cold) and finding the plan in the
// cache on every later step (plus building the step's graph), against the measured step time.
// For GGUF files, also the decode roof: this machine's read bandwidth (a streaming read of a
// buffer larger than the caches, with the bench's threads) divided by the weight bytes one
// decode step reads (every tensor except the embedding table, of which one row is read; a
// tied output head reads it whole), and each tg test as a share of that roof.
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "core/read_stream.hpp"
#include "formats/gguf.hpp"

namespace geniex::cli {
namespace {

struct BenchOptions {
  ModelOptions model;
  std::string n_prompt = "512";
  std::string n_gen = "128";
  std::string n_depth = "0";
  std::string threads = "0";
  int32_t repetitions = 3;
  int64_t seed = 42;
  bool json = false;
};

struct TestResult {
  std::string name;
  int32_t n_prompt = 0;
  int32_t n_gen = 0;
  int32_t n_depth = 0;
  std::vector<double> samples_tps;
  double median = 0;
  double stddev = 0;
};

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double stddev_of(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

int64_t peak_rss_bytes() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

using Clock = std::chrono::steady_clock;

// Bytes of weights one decode step reads, from the GGUF's tensor table; 0 when the model is
// not a GGUF file (e.g. a Hugging Face folder).
int64_t decode_bytes_per_token(const std::string& path) {
  Result<gguf::File> file = gguf::File::open(path);
  if (!file) return 0;
  const gguf::TensorInfo* embd = file->find_tensor("token_embd.weight");
  const bool tied = file->find_tensor("output.weight") == nullptr;
  int64_t total = 0;
  for (const gguf::TensorInfo& t : file->tensors()) {
    if (&t == embd && !tied) {
      const int64_t rows = t.n_dims > 1 ? t.ne[1] : 1;
      total += static_cast<int64_t>(t.nbytes) / std::max<int64_t>(rows, 1);  // one row per token
    } else {
      total += static_cast<int64_t>(t.nbytes);
    }
  }
  return total;
}

// Bytes for the roof's probe buffer: twice the last-level cache, so that the probe reads DRAM
// as a model larger than the cache does (this Intel VM reports 480 MiB of L3, and reads a
// 128 MiB buffer at 33-51 GB/s against 32-33 for 1 GiB, four streams, two threads), within
// 256 MiB to 1 GiB.
size_t probe_bytes() {
  long llc = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
  llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  return std::clamp(2 * static_cast<size_t>(std::max(llc, 0L)), size_t{256} << 20, size_t{1} << 30);
}

// Streaming read bandwidth in bytes/s with n_threads threads, as geniex::read_bandwidth
// measures it (the best of one plain stream and four prefetching streams per thread): the
// decode kernels read several streams and prefetch, so the roof counts what such a read
// reaches. One scalar stream (this probe before) read 19-25 GB/s on an Intel Xeon VM where the
// two-thread 1B decode itself read 23-25, and the roof column showed up to 126%.
double read_bandwidth(int32_t n_threads) {
  std::vector<uint64_t> buf(probe_bytes() / sizeof(uint64_t));
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i;
  return geniex::read_bandwidth(buf, n_threads);
}

// read_bandwidth in a child process, so that its probe buffer never counts in this
// process's peak RSS (which the bench reports); 0 when the child fails.
double read_bandwidth_isolated(int32_t n_threads) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return 0;
  }
  if (pid == 0) {
    close(fds[0]);
    const double bw = read_bandwidth(n_threads);
    const ssize_t w = write(fds[1], &bw, sizeof bw);
    _exit(w == static_cast<ssize_t>(sizeof bw) ? 0 : 1);
  }
  close(fds[1]);
  double bw = 0;
  const ssize_t r = read(fds[0], &bw, sizeof bw);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (r != static_cast<ssize_t>(sizeof bw) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 0;
  return bw;
}

// One timed run: seconds spent evaluating `tokens` (the reset and the context prefix before them
// are not timed).
Result<double> run_once(Session& session, const std::vector<int32_t>& prefix, const std::vector<int32_t>& tokens,
                        bool prompt) {
  session.reset();
  if (!prefix.empty()) {
    Result<std::span<const float>> logits = session.eval(prefix);
    if (!logits) return logits.take_error();
  }
  const auto t0 = Clock::now();
  if (prompt) {
    Result<std::span<const float>> logits = session.eval(tokens);
    if (!logits) return logits.take_error();
  } else {
    for (const int32_t token : tokens) {
      const int32_t one[1] = {token};
      Result<std::span<const float>> logits = session.eval(one);
      if (!logits) return logits.take_error();
    }
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Result<TestResult> run_test(Session& session, int32_t n_vocab, int32_t n, int32_t depth, bool prompt,
                            const BenchOptions& opts) {
  TestResult r;
  r.name = fmt::format("{}{}", prompt ? "pp" : "tg", n);
  if (depth > 0) r.name += fmt::format(" @ d{}", depth);
  (prompt ? r.n_prompt : r.n_gen) = n;
  r.n_depth = depth;
  std::mt19937_64 rng(static_cast<uint64_t>(opts.seed) + static_cast<uint64_t>(n) * 2 + (prompt ? 1 : 0));
  std::uniform_int_distribution<int32_t> dist(0, n_vocab - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int32_t& t : tokens) t = dist(rng);
  std::mt19937_64 prefix_rng(static_cast<uint64_t>(opts.seed) ^ (static_cast<uint64_t>(depth) << 32));
  std::vector<int32_t> prefix(static_cast<size_t>(depth));
  for (int32_t& t : prefix) t = dist(prefix_rng);

  Result<double> warmup = run_once(session, prefix, tokens, prompt);
  if (!warmup) return warmup.take_error();
  for (int32_t rep = 0; rep < opts.repetitions; ++rep) {
    Result<double> seconds = run_once(session, prefix, tokens, prompt);
    if (!seconds) return seconds.take_error();
    r.samples_tps.push_back(*seconds > 0 ? n / *seconds : 0.0);
  }
  r.median = median_of(r.samples_tps);
  r.stddev = stddev_of(r.samples_tps);
  return r;
}

int run(const BenchOptions& opts) {
  Result<std::vector<int32_t>> prompts = parse_int_list(opts.n_prompt, "-p/--n-prompt", 0);
  if (!prompts) return report_error(prompts.error());
  Result<std::vector<int32_t>> gens = parse_int_list(opts.n_gen, "-n/--n-gen", 0);
  if (!gens) return report_error(gens.error());
  Result<std::vector<int32_t>> threads = parse_int_list(opts.threads, "-t/--threads", 0);
  if (!threads) return report_error(threads.error());
  Result<std::vector<int32_t>> depths = parse_int_list(opts.n_depth, "-d/--n-depth", 0);
  if (!depths) return report_error(depths.error());

  int32_t longest_test = 1;
  for (int32_t n : *prompts) longest_test = std::max(longest_test, n);
  for (int32_t n : *gens) longest_test = std::max(longest_test, n);
  const int32_t deepest = *std::max_element(depths->begin(), depths->end());
  if (deepest > std::numeric_limits<int32_t>::max() - longest_test) {
    return report_error(make_error(ErrorCode::InvalidArgument, "-d/--n-depth plus the longest test overflows"));
  }
  const int32_t needed_ctx = deepest + longest_test;
  if (opts.model.ctx_size > 0 && opts.model.ctx_size < needed_ctx) {
    return report_error(make_error(ErrorCode::InvalidArgument,
                                   fmt::format("-c {} is smaller than the largest test with its depth ({} tokens)",
                                               opts.model.ctx_size, needed_ctx)));
  }

  if (!opts.json) {
    fmt::print("| {:<32} | {:>10} | {:>10} | {:<8} | {:>7} | {:>14} | {:>20} |\n", "model", "size", "params",
               "backend", "threads", "test", "t/s");
    fmt::print("| {:-<32} | {:->10} | {:->10} | {:-<8} | {:->7} | {:->14} | {:->20} |\n", "", "", "", "", "", "", "");
    std::fflush(stdout);
  }

  std::vector<std::string> planning_lines;
  std::vector<std::string> roof_lines;
  for (const int32_t n_threads : *threads) {
    ModelOptions mo = opts.model;
    mo.threads = n_threads;
    mo.ctx_size = opts.model.ctx_size > 0 ? opts.model.ctx_size : needed_ctx;
    // The decode roof's bandwidth, measured before the model is loaded (nothing else runs).
    const int64_t bytes_per_token = decode_bytes_per_token(mo.path);
    double bandwidth = 0;
    bool any_tg = false;
    for (const int32_t n : *gens) any_tg = any_tg || n > 0;
    if (bytes_per_token > 0 && any_tg) {
      int32_t bw_threads = n_threads;
      if (bw_threads <= 0) {  // as the runtime's 0: every CPU this process may use
        cpu_set_t set;
        CPU_ZERO(&set);
        bw_threads = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                                  : static_cast<int32_t>(std::thread::hardware_concurrency());
      }
      bandwidth = read_bandwidth_isolated(bw_threads);
    }
    Result<Model> model = load_model(mo);
    if (!model) return report_error(model.error());
    const ModelInfo& info = model->info();
    if (info.n_vocab <= 0) return report_error("the model reports no vocabulary");
    Result<Session> session = model->new_session();
    if (!session) return report_error(session.error());

    std::string backends;
    for (const std::string& b : info.backends) backends += (backends.empty() ? "" : ",") + b;
    if (backends.empty()) backends = info.device;
    for (const std::string& note : info.device_notes) fmt::print(stderr, "geniex bench: {}\n", note);
    if (const std::string split = gpu_budget_line(info); !split.empty()) {
      fmt::print(stderr, "geniex bench: --gpu-memory: {}\n", split);
    }

    auto plan_of = [&](int32_t n_tokens) -> std::optional<PlanSummary> {
      Result<PlanSummary> plan = model->plan(n_tokens);
      if (!plan) {
        warn(fmt::format("plan({}) failed: {}", n_tokens, plan.error().to_string()));
        return std::nullopt;
      }
      return std::move(plan).value();
    };
    const std::optional<PlanSummary> decode_plan = plan_of(1);
    const double roof_tps = bandwidth > 0 ? bandwidth / static_cast<double>(bytes_per_token) : 0.0;
    if (roof_tps > 0) {
      roof_lines.push_back(fmt::format(
          "{} threads: read bandwidth {:.1f} GB/s / {} of weights read per decode token = roof {:.1f} tok/s",
          info.n_threads, bandwidth / 1e9, format_bytes(static_cast<double>(bytes_per_token)), roof_tps));
    }
    const nlohmann::json decode_planning_ms = decode_plan ? nlohmann::json(decode_plan->planning_ms) : nlohmann::json();

    for (const int32_t depth : *depths) {
      for (const bool prompt : {true, false}) {
        for (const int32_t n : prompt ? *prompts : *gens) {
          if (n == 0) continue;
          fmt::print(stderr, "geniex bench: {}{}{} with {} threads...\n", prompt ? "pp" : "tg", n,
                     depth > 0 ? fmt::format(" @ d{}", depth) : std::string(), info.n_threads);
          Result<TestResult> r = run_test(*session, info.n_vocab, n, depth, prompt, opts);
          if (!r) return report_error(r.error());
          // The step this plan serves: the whole prompt for pp, one token for tg.
          const std::optional<PlanSummary> plan = prompt ? plan_of(std::min(n, 512)) : decode_plan;
          const double step_ms = r->median > 0 ? (prompt ? n : 1) * 1e3 / r->median : 0.0;
          if (plan && step_ms > 0) {
            planning_lines.push_back(fmt::format(
                "{:<13} {:>3} threads: step {:9.3f} ms | cold: graph {:.3f} ms + plan {:.3f} ms ({:.2f}% of a step, once "
                "per shape) | every step: cached plan {:.5f} ms ({:.4f}% of a step)",
                r->name, info.n_threads, step_ms, plan->graph_build_ms, plan->planning_ms,
                100.0 * (plan->graph_build_ms + plan->planning_ms) / step_ms, plan->lookup_ms,
                100.0 * plan->lookup_ms / step_ms));
          }
          if (opts.json) {
            nlohmann::json j;
            j["test"] = r->name;
            j["tokens_per_second"] = r->median;
            j["stddev_tps"] = r->stddev;
            j["model"] = basename_of(info.path);
            j["model_bytes"] = info.file_bytes;
            j["n_params"] = info.n_params;
            j["threads"] = info.n_threads;
            j["n_prompt"] = r->n_prompt;
            j["n_gen"] = r->n_gen;
            j["n_depth"] = r->n_depth;
            j["n_ctx"] = info.n_ctx;
            j["repetitions"] = opts.repetitions;
            j["samples_tps"] = r->samples_tps;
            j["peak_rss_bytes"] = peak_rss_bytes();
            j["planning_ms"] = plan ? nlohmann::json(plan->planning_ms) : nlohmann::json();
            j["planning_ms_decode"] = decode_planning_ms;
            j["plan_lookup_ms"] = plan ? nlohmann::json(plan->lookup_ms) : nlohmann::json();
            j["graph_build_ms"] = plan ? nlohmann::json(plan->graph_build_ms) : nlohmann::json();
            j["step_ms"] = step_ms;
            if (!prompt && roof_tps > 0 && depth == 0) {
              j["read_bandwidth_bytes_per_s"] = bandwidth;
              j["bytes_per_token"] = bytes_per_token;
              j["roof_tokens_per_second"] = roof_tps;
              j["fraction_of_roof"] = r->median / roof_tps;
            }
            j["device"] = info.device;
            j["backends"] = info.backends;
            j["load_ms"] = info.load_ms;
            j["packed_cache"] = info.packed_cache;
            fmt::print("{}\n", j.dump());
          } else {
            fmt::print("| {:<32} | {:>10} | {:>10} | {:<8} | {:>7} | {:>14} | {:>20} |\n", basename_of(info.path),
                       format_bytes(static_cast<double>(info.file_bytes)), format_count(static_cast<double>(info.n_params)),
                       backends, info.n_threads, r->name, fmt::format("{:.2f} ± {:.2f}", r->median, r->stddev));
          }
          if (!prompt && roof_tps > 0 && depth == 0) {
            roof_lines.push_back(fmt::format("  {} {} threads: {:.2f} tok/s = {:.0f}% of the roof", r->name,
                                             info.n_threads, r->median, 100.0 * r->median / roof_tps));
          }
          std::fflush(stdout);
        }
      }
    }
  }
  if (!opts.json) {
    fmt::print("\nmedian of {} repetitions after one warm-up; peak RSS {}\n", opts.repetitions,
               format_bytes(static_cast<double>(peak_rss_bytes())));
    if (!roof_lines.empty()) {
      fmt::print("\ndecode roof (read bandwidth / bytes read per token: the most a memory-bound decode can reach):\n");
      for (const std::string& line : roof_lines) fmt::print("  {}\n", line);
    }
    if (!planning_lines.empty()) {
      fmt::print("\nscheduler overhead (goal: under 1% of a decode step):\n");
      for (const std::string& line : planning_lines) fmt::print("  {}\n", line);
    }
  }
  return 0;
}

}  // namespace

Command make_bench_command(CLI::App& root) {
  auto opts = std::make_shared<BenchOptions>();
  CLI::App* app = root.add_subcommand("bench", "measure prompt (pp) and generation (tg) tokens/s, like llama-bench");
  app->footer("Example: geniex bench -p 128,512 -n 128 -r 5 -t 1,2 --json\n"
              "         geniex bench -p 512 -n 128 -d 0,4096   (also after 4096 tokens of context)\n");
  app->add_option("-m,--model", opts->model.path, "GGUF model file")->capture_default_str();
  app->add_option("-p,--n-prompt", opts->n_prompt, "prompt lengths (comma list; 0 skips)")->capture_default_str();
  app->add_option("-n,--n-gen", opts->n_gen, "generation lengths (comma list; 0 skips)")->capture_default_str();
  app->add_option("-d,--n-depth", opts->n_depth,
                  "context depths (comma list): each test runs after this many tokens already in the KV cache")
      ->capture_default_str();
  app->add_option("-t,--threads", opts->threads, "thread counts (comma list; 0: every CPU this process may use)")
      ->capture_default_str();
  app->add_option("-r,--repetitions", opts->repetitions, "measured runs per test")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("-c,--ctx-size", opts->model.ctx_size, "context (0: the largest test)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--device", opts->model.device, "target compute unit")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "gpu", "npu", "auto"}));
  CLI::Option* layers =
      app->add_option("--gpu-layers", opts->model.gpu_layers, "mixed plan: first N layers on the GPU backend (-1: cost model)")
          ->capture_default_str()
          ->check(CLI::Range(-1, 1 << 20));
  add_gpu_memory_option(*app, opts->model.gpu_memory, layers);
  app->add_flag("--split-rows", opts->model.split_rows, "split large matmuls by rows between the GPU and CPU backends");
  add_packed_cache_options(*app, opts->model);
  app->add_option("--seed", opts->seed, "seed of the random token ids")->capture_default_str();
  app->add_flag("--json", opts->json, "one JSON object per test and line instead of the table");
  return Command{app, [opts] { return run(*opts); }};
}

}  // namespace geniex::cli
