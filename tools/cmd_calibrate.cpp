// geniex calibrate: measures each backend of this build (cpu; opencl when a device is present)
// -- matmul GFLOP/s per weight type at a decode (1 token) and a prefill (128 tokens) shape,
// weight-streaming bandwidth, per-node dispatch latency, host<->device transfers -- and saves
// the device profile the scheduler's cost model reads at model build (sched/profile.hpp).
// It runs the backends through the scheduler on small synthetic graphs, so what it times is
// the path a model step takes. Like `info`, it reaches past the public API into the runtime.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <thread>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "backends/cpu/backend/cpu_backend.hpp"
#include "backends/cpu/backend/weight_store.hpp"
#include "common.hpp"
#include "core/cpu_features.hpp"
#include "quant/quant.hpp"
#include "runtime/impl.hpp"
#include "sched/profile.hpp"
#include "sched/scheduler.hpp"
#ifdef GENIEX_HAVE_OPENCL
#include "backends/opencl/opencl_backend.hpp"
#endif

namespace geniex::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr DType kTypes[] = {DType::F32, DType::F16, DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K};
// Matmul shapes, smallest first: a measurement moves to the next shape while one run takes
// under kEnoughMs, so fast devices are timed on shapes large enough to reach their peak and
// slow ones (PoCL on a small CPU) stay within seconds. The decode rate is the arithmetic
// ceiling at one token; streaming weights from memory is the separate bandwidth figure.
// A shape is a chain of `chain` matmuls by one square [K, K] weight (the weight stays in the
// caches, and the chain makes a decode measurement long enough to time).
struct Shape {
  int64_t K, T;
  int chain;
};
constexpr Shape kDecodeShapes[] = {{1024, 1, 16}, {2048, 1, 16}};
constexpr Shape kPrefillShapes[] = {{512, 128, 1}, {1024, 128, 1}, {2048, 128, 1}};
constexpr int64_t kPrefillT = 128;
constexpr double kEnoughMs = 4;
constexpr int64_t kTableRows = 16;  // embedding rows the activations are gathered from
constexpr double kBudgetMs = 40;    // per measurement, after one warm-up run
// Bandwidth: Scale nodes over a [4096, 4096] f32 tensor (64 MiB read and 64 MiB written each,
// beyond the last-level caches of laptops and servers alike).
constexpr int64_t kBandwidthK = 4096, kBandwidthT = 4096;
constexpr int kBandwidthNodes = 4;

struct CalibrateOptions {
  std::string output;
  int32_t threads = 0;
  std::string backends = "cpu,opencl";
};

// Deterministic pseudo-random floats in [-1, 1).
struct Lcg {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  float next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<double>(s >> 40) / static_cast<double>(1ull << 24) * 2.0 - 1.0);
  }
};

// A weight of type t, [K, N]: 32 quantized random rows repeated (timing does not depend on
// the values, and the reference quantizers are slow).
struct SyntheticWeight {
  std::vector<uint8_t> bytes;
  graph::WeightRef ref;
};

std::unique_ptr<SyntheticWeight> make_weight(DType t, int64_t K, int64_t N, const std::string& name) {
  auto w = std::make_unique<SyntheticWeight>();
  const auto row = static_cast<size_t>(row_bytes(t, K));
  w->bytes.resize(row * static_cast<size_t>(N));
  Lcg rng;
  std::vector<float> src(static_cast<size_t>(K));
  const int64_t distinct = std::min<int64_t>(N, 32);
  for (int64_t r = 0; r < distinct; ++r) {
    for (float& x : src) x = rng.next();
    quant::quantize_row_ref(t, src.data(), w->bytes.data() + static_cast<size_t>(r) * row, K);
  }
  for (int64_t r = distinct; r < N; ++r) {
    std::memcpy(w->bytes.data() + static_cast<size_t>(r) * row, w->bytes.data() + static_cast<size_t>(r % distinct) * row, row);
  }
  w->ref.name = name;
  w->ref.type = t;
  w->ref.ne[0] = K;
  w->ref.ne[1] = N;
  w->ref.data = w->bytes.data();
  w->ref.nbytes = w->bytes.size();
  return w;
}

// Runs graph g on one backend, one warm-up then until the budget is spent; the fastest run, ms.
Result<double> time_graph(backends::Backend& backend, const graph::Graph& g, int64_t n_tokens) {
  sched::Scheduler scheduler({&backend});
  GX_ASSIGN_OR_RETURN(auto plan, scheduler.plan(g));
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens)), positions(static_cast<size_t>(n_tokens)),
      seqs(static_cast<size_t>(n_tokens), 0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(i % static_cast<size_t>(kTableRows));
    positions[i] = static_cast<int32_t>(i);
  }
  const std::vector<int32_t> out_rows = {0};
  backends::StepData step;
  step.tokens = tokens;
  step.positions = positions;
  step.seq_ids = seqs;
  step.output_rows = out_rows;
  double best = 1e30, spent = 0;
  for (int rep = 0; rep < 41; ++rep) {
    const auto t0 = Clock::now();
    GX_ASSIGN_OR_RETURN(const float* out, scheduler.execute(*plan, step));
    (void)out;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (rep == 0) continue;  // warm-up: weight uploads, first touches
    best = std::min(best, ms);
    spent += ms;
    if (rep >= (ms > kBudgetMs / 2 ? 2 : 3) && spent >= kBudgetMs) break;
    if (rep >= 2 && ms > kBudgetMs) break;
  }
  return best;
}

// tokens -> get_rows(F32 table [K, 16]) -> x [K, T], then `extra` appended by the caller.
struct BaseGraph {
  graph::Graph g;
  int32_t x = 0;
};
BaseGraph base_graph(const graph::WeightRef& table, int64_t n_tokens) {
  BaseGraph b;
  const int32_t ids = b.g.input(graph::InputKind::Tokens, n_tokens, "tokens");
  b.x = b.g.get_rows(b.g.weight(table), ids, "x");
  b.g.set_output(b.x);
  return b;
}

struct Measured {
  sched::BackendProfile profile;
  std::vector<std::string> notes;
};

Result<Measured> measure_backend(backends::Backend& backend, const std::string& device, int32_t threads,
                                 const std::function<Result<std::unique_ptr<backends::Backend>>(
                                     std::shared_ptr<const backends::CpuWeightStore>)>& with_weights) {
  Measured m;
  sched::BackendProfile& p = m.profile;
  p = sched::default_backend_profile(backend.name());
  p.name = std::string(backend.name());
  p.device = device;
  p.measured = true;
  p.threads = threads;

  // Dispatch latency: 64 chained Scale nodes against 1, on a tiny tensor.
  auto table_small = make_weight(DType::F32, 64, kTableRows, "table_small");
  double one = 0, many = 0;
  for (const int n_nodes : {1, 65}) {
    BaseGraph b = base_graph(table_small->ref, 1);
    int32_t x = b.x;
    for (int i = 0; i < n_nodes; ++i) x = b.g.scale(x, 1.0f, "s" + std::to_string(i), -1);
    b.g.set_output(x);
    GX_ASSIGN_OR_RETURN(double ms, time_graph(backend, b.g, 1));
    (n_nodes == 1 ? one : many) = ms;
  }
  p.launch_us = std::max(0.0, (many - one) * 1e3 / 64.0);
  // A step of two nodes (gather, scale) in one split: what is left after their launches is the
  // split's own cost.
  p.split_us = std::max(0.0, one * 1e3 - 2 * p.launch_us);

  // Bandwidth: each Scale node reads and writes one large tensor.
  {
    auto table = make_weight(DType::F32, kBandwidthK, kTableRows, "table_bw");
    double base_ms = 0, chain_ms = 0;
    for (const int n_nodes : {0, kBandwidthNodes}) {
      BaseGraph b = base_graph(table->ref, kBandwidthT);
      int32_t x = b.x;
      for (int i = 0; i < n_nodes; ++i) x = b.g.scale(x, 1.0f, "s" + std::to_string(i), -1);
      b.g.set_output(x);
      GX_ASSIGN_OR_RETURN(double ms, time_graph(backend, b.g, kBandwidthT));
      (n_nodes == 0 ? base_ms : chain_ms) = ms;
    }
    const double bytes = 2.0 * kBandwidthNodes * static_cast<double>(kBandwidthK * kBandwidthT) * sizeof(float);
    const double ms = chain_ms - base_ms - kBandwidthNodes * p.launch_us * 1e-3;
    if (ms > 0) p.memory_gbps = bytes / (ms * 1e6);
  }

  std::map<std::pair<int64_t, int64_t>, double> base_ms_of;  // (K, T) -> gather-only graph time
  for (const DType t : kTypes) {
    for (const bool prefill : {false, true}) {
      const std::span<const Shape> shapes = prefill ? std::span<const Shape>(kPrefillShapes) : std::span<const Shape>(kDecodeShapes);
      for (const Shape& shape : shapes) {
        const int64_t K = shape.K, N = shape.K, T = shape.T;
        auto table = make_weight(DType::F32, K, kTableRows, "table");
        auto w = make_weight(t, K, N, "w");
        // The CPU repacks some types at load (Q4_0 -> Q4_0x8); time the layout a model would use.
        std::unique_ptr<backends::Backend> own;
        backends::Backend* run_on = &backend;
        if (with_weights) {
          const graph::WeightRef* refs[] = {&w->ref};
          GX_ASSIGN_OR_RETURN(auto store, backends::CpuWeightStore::create(refs, threads));
          GX_ASSIGN_OR_RETURN(own, with_weights(store));
          run_on = own.get();
        }
        const auto key = std::make_pair(K, T);
        if (base_ms_of.count(key) == 0) {
          BaseGraph base = base_graph(table->ref, T);
          GX_ASSIGN_OR_RETURN(const double gather_ms, time_graph(*run_on, base.g, T));
          base_ms_of[key] = gather_ms;
        }
        const double base_ms = base_ms_of[key];
        BaseGraph mm = base_graph(table->ref, T);
        int32_t x = mm.x;
        const int32_t wid = mm.g.weight(w->ref);
        for (int i = 0; i < shape.chain; ++i) x = mm.g.matmul(wid, x, "mm" + std::to_string(i), -1);
        mm.g.set_output(x);
        auto timed = time_graph(*run_on, mm.g, T);
        if (!timed) {
          m.notes.push_back(fmt::format("{} {} matmul: {}", backend.name(), dtype_name(t), timed.error().message));
          break;
        }
        // The gather alone is subtracted, unless noise makes it most of the time.
        const double ms = *timed - base_ms > 0.5 * *timed ? *timed - base_ms : *timed;
        const double gflops =
            2.0 * shape.chain * static_cast<double>(K) * static_cast<double>(N) * static_cast<double>(T) / (ms * 1e6);
        (prefill ? p.matmul_prefill_gflops : p.matmul_decode_gflops)[t] = gflops;
        if (*timed >= kEnoughMs) break;
      }
    }
  }
  return m;
}

double memcpy_gbps() {
  std::vector<uint8_t> a(32u << 20, 1), b(32u << 20, 0);
  double best = 1e30;
  for (int i = 0; i < 6; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), a.size());
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    a[static_cast<size_t>(i)] = b[static_cast<size_t>(i) + 1];  // keep the copies observable
  }
  return static_cast<double>(a.size()) / best / 1e9;
}

#ifdef GENIEX_HAVE_OPENCL
// Host <-> device: a 4 KiB write and read for the latency, 16 MiB for the rates.
Status measure_transfers(sched::BackendProfile& p, bool unified) {
  GX_ASSIGN_OR_RETURN(auto rt, backends::opencl::ClRuntime::get(backends::opencl::Fault{}));
  cl_int err = CL_SUCCESS;
  cl_command_queue q = clCreateCommandQueue(rt->context(), rt->device(), 0, &err);
  if (err != CL_SUCCESS) return make_error(ErrorCode::BackendError, "opencl: cannot create a queue for calibration");
  const size_t big = 16u << 20, small = 4096;
  std::vector<uint8_t> host(big, 7);
  cl_mem mem = clCreateBuffer(rt->context(), CL_MEM_READ_WRITE, big, nullptr, &err);
  if (err != CL_SUCCESS) {
    clReleaseCommandQueue(q);
    return make_error(ErrorCode::BackendError, "opencl: cannot allocate 16 MiB for calibration");
  }
  auto timed = [&](bool write, size_t bytes) {
    double best = 1e30;
    for (int i = 0; i < 8 && err == CL_SUCCESS; ++i) {
      const auto t0 = Clock::now();
      err = write ? clEnqueueWriteBuffer(q, mem, CL_TRUE, 0, bytes, host.data(), 0, nullptr, nullptr)
                  : clEnqueueReadBuffer(q, mem, CL_TRUE, 0, bytes, host.data(), 0, nullptr, nullptr);
      if (i > 0) best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    return best;
  };
  const double w_small = timed(true, small), r_small = timed(false, small);
  const double w_big = timed(true, big), r_big = timed(false, big);
  clReleaseMemObject(mem);
  clReleaseCommandQueue(q);
  if (err != CL_SUCCESS) return make_error(ErrorCode::BackendError, std::string("opencl: transfer failed: ") + backends::opencl::cl_error_name(err));
  p.transfer_latency_us = 0.5 * (w_small + r_small);
  p.upload_gbps = static_cast<double>(big) / std::max(w_big - w_small, 1.0) / 1e3;
  p.download_gbps = static_cast<double>(big) / std::max(r_big - r_small, 1.0) / 1e3;
  p.host_shared = unified;
  return ok_status();
}
#endif

// As the runtime's default: the CPUs this process may run on.
int32_t usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string iso_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void print_backend(const sched::BackendProfile& p) {
  fmt::print("{} ({}{}):\n", p.name, p.device, p.threads > 0 ? fmt::format(", {} threads", p.threads) : "");
  fmt::print("  launch {:.1f} us/node, weight streaming {:.1f} GB/s\n", p.launch_us, p.memory_gbps);
  if (p.transfer_latency_us > 0) {
    fmt::print("  host->device {:.2f} GB/s, device->host {:.2f} GB/s, latency {:.1f} us, {}\n", p.upload_gbps,
               p.download_gbps, p.transfer_latency_us,
               p.host_shared ? "host-visible memory shared with the CPU (zero-copy)" : "separate device memory");
  } else {
    fmt::print("  memcpy {:.2f} GB/s\n", p.upload_gbps);
  }
  std::string head = fmt::format("  {:<18}", "matmul GFLOP/s");
  std::string dec = fmt::format("  {:<18}", "decode (1 token)");
  std::string pre = fmt::format("  {:<18}", fmt::format("prefill ({} tok)", kPrefillT));
  for (const DType t : kTypes) {
    head += fmt::format(" {:>7}", dtype_name(t));
    const auto d = p.matmul_decode_gflops.find(t);
    const auto q = p.matmul_prefill_gflops.find(t);
    dec += d != p.matmul_decode_gflops.end() ? fmt::format(" {:>7.1f}", d->second) : fmt::format(" {:>7}", "-");
    pre += q != p.matmul_prefill_gflops.end() ? fmt::format(" {:>7.1f}", q->second) : fmt::format(" {:>7}", "-");
  }
  fmt::print("{}\n{}\n{}\n", head, dec, pre);
}

int run(const CalibrateOptions& opts) {
  const auto t0 = Clock::now();
  const std::string path = opts.output.empty() ? sched::default_profile_path() : opts.output;
  if (path.empty()) return report_error("no place for the profile: set HOME or GENIEX_PROFILE, or pass -o");
  {
    // Fail before measuring when the profile cannot be written there.
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec || ::access(parent.empty() ? "." : parent.c_str(), W_OK) != 0) {
      return report_error(make_error(ErrorCode::IoError, "cannot write the profile into '" + parent.string() + "'" +
                                                             (ec ? ": " + ec.message() : std::string())));
    }
  }
  const int32_t threads = opts.threads > 0 ? opts.threads : usable_cpus();
  const bool want_cpu = opts.backends.find("cpu") != std::string::npos;
  const bool want_cl = opts.backends.find("opencl") != std::string::npos;

  sched::DeviceProfile profile = sched::default_profile();
  profile.created = iso_now();
  profile.source = path;
  std::vector<std::string> notes;

  if (want_cpu) {
    fmt::print(stderr, "geniex calibrate: cpu with {} threads...\n", threads);
    backends::CpuBackend cpu(threads);
    auto factory = [threads](std::shared_ptr<const backends::CpuWeightStore> store)
        -> Result<std::unique_ptr<backends::Backend>> {
      return std::unique_ptr<backends::Backend>(std::make_unique<backends::CpuBackend>(threads, std::move(store)));
    };
    auto m = measure_backend(cpu, "host cpu, " + cpu_features().to_string(), threads, factory);
    if (!m) return report_error(m.error());
    m->profile.transfer_latency_us = 0;
    m->profile.upload_gbps = m->profile.download_gbps = memcpy_gbps();
    m->profile.host_shared = true;
    notes.insert(notes.end(), m->notes.begin(), m->notes.end());
    profile.set(m->profile);
  }
#ifdef GENIEX_HAVE_OPENCL
  if (want_cl) {
    auto probe = backends::opencl::probe_device();
    if (!probe) {
      notes.push_back("opencl: no device (" + probe.error().message + "); its entry keeps the defaults");
    } else {
      fmt::print(stderr, "geniex calibrate: opencl on {}...\n", probe->name);
      auto cl = backends::opencl::OpenClBackend::create();
      if (!cl) return report_error(cl.error());
      if (!(*cl)->unusable_reason().empty()) {
        notes.push_back("opencl: unusable (" + (*cl)->unusable_reason() + "); its entry keeps the defaults");
      } else {
        const backends::opencl::DeviceInfo info = (*cl)->device_info();
        auto m = measure_backend(**cl, info.platform + " " + info.name, 0, nullptr);
        if (!m) return report_error(m.error());
        if (auto st = measure_transfers(m->profile, info.unified_memory); !st) return report_error(st.error());
        notes.insert(notes.end(), m->notes.begin(), m->notes.end());
        profile.set(m->profile);
      }
    }
  }
#else
  if (want_cl) notes.push_back("opencl: not in this build; its entry keeps the defaults");
#endif

  for (const sched::BackendProfile& p : profile.backends) {
    if (p.measured) print_backend(p);
  }
  for (const std::string& n : notes) fmt::print("note: {}\n", n);
  if (Status st = sched::save_profile(profile, path); !st) return report_error(st.error());
  fmt::print("profile saved to {} ({:.1f} s)\n", path,
             std::chrono::duration<double>(Clock::now() - t0).count());
  return 0;
}

}  // namespace

Command make_calibrate_command(CLI::App& root) {
  auto opts = std::make_shared<CalibrateOptions>();
  CLI::App* app = root.add_subcommand("calibrate", "measure this machine's backends and save the device profile the scheduler uses");
  app->footer("The profile goes to $GENIEX_PROFILE, else $XDG_CACHE_HOME/geniex/profile.json or\n"
              "~/.cache/geniex/profile.json; models built afterwards place nodes with its rates.\n"
              "Example: geniex calibrate -t 4 -o profile.json\n");
  app->add_option("-o,--output", opts->output, "where to save the profile (default: the path the scheduler reads)");
  app->add_option("-t,--threads", opts->threads, "CPU threads (0: every CPU)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app->add_option("--backends", opts->backends, "backends to measure (comma list)")->capture_default_str();
  return Command{app, [opts] { return run(*opts); }};
}

}  // namespace geniex::cli
