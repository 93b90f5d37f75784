// Device profile: built-in defaults, JSON reading with validation, saving, and the default
// location (GENIEX_PROFILE, XDG_CACHE_HOME, ~/.cache).
#include "sched/profile.hpp"

#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace geniex::sched {

namespace {

using Rates = std::map<DType, double>;

constexpr int kProfileVersion = 1;

// The weight types every profile names (those with kernels on the CPU and OpenCL backends).
constexpr DType kCalibratedTypes[] = {DType::F32,  DType::F16,  DType::Q4_0, DType::Q4_1,
                                      DType::Q8_0, DType::Q4_K, DType::Q6_K};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

Rates rates(const double (&values)[7]) {
  Rates r;
  for (size_t i = 0; i < 7; ++i) r[kCalibratedTypes[i]] = values[i];
  return r;
}

nlohmann::json rates_json(const Rates& r) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [type, gflops] : r) j[lower(dtype_name(type))] = gflops;
  return j;
}

Error bad(const std::string& where, const std::string& what) {
  return make_error(ErrorCode::InvalidFormat, "device profile: " + where + ": " + what);
}

// A positive finite number at j[key] into out; absent keys keep out.
Status read_positive(const nlohmann::json& j, const char* key, const std::string& where, double& out,
                     bool zero_ok = false) {
  if (!j.contains(key)) return ok_status();
  const nlohmann::json& v = j.at(key);
  if (!v.is_number()) return bad(where + "." + key, "expected a number, got " + std::string(v.type_name()));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0 || (x == 0 && !zero_ok)) {
    return bad(where + "." + key, "expected a positive number, got " + v.dump());
  }
  out = x;
  return ok_status();
}

Status read_rates(const nlohmann::json& j, const std::string& where, Rates& out) {
  if (!j.is_object()) return bad(where, "expected an object of weight type -> GFLOP/s");
  for (const auto& [key, value] : j.items()) {
    const std::optional<DType> type = dtype_from_name(key);
    if (!type) return bad(where, "unknown weight type '" + key + "'");
    double rate = 0;
    nlohmann::json one = {{key, value}};
    GX_TRY(read_positive(one, key.c_str(), where, rate));
    out[*type] = rate;
  }
  return ok_status();
}

Result<BackendProfile> read_backend(const std::string& name, const nlohmann::json& j) {
  const std::string where = "backends." + name;
  if (!j.is_object()) return bad(where, "expected an object");
  BackendProfile p = default_backend_profile(name);
  if (j.contains("device")) {
    if (!j["device"].is_string()) return bad(where + ".device", "expected a string");
    p.device = j["device"].get<std::string>();
  }
  if (j.contains("measured")) {
    if (!j["measured"].is_boolean()) return bad(where + ".measured", "expected true or false");
    p.measured = j["measured"].get<bool>();
  }
  if (j.contains("threads")) {
    if (!j["threads"].is_number_integer() || j["threads"].get<int64_t>() < 0 || j["threads"].get<int64_t>() > 4096) {
      return bad(where + ".threads", "expected a thread count, got " + j["threads"].dump());
    }
    p.threads = static_cast<int32_t>(j["threads"].get<int64_t>());
  }
  GX_TRY(read_positive(j, "launch_us", where, p.launch_us, true));
  GX_TRY(read_positive(j, "split_us", where, p.split_us, true));
  GX_TRY(read_positive(j, "memory_gbps", where, p.memory_gbps));
  GX_TRY(read_positive(j, "transfer_latency_us", where, p.transfer_latency_us, true));
  GX_TRY(read_positive(j, "upload_gbps", where, p.upload_gbps));
  GX_TRY(read_positive(j, "download_gbps", where, p.download_gbps));
  if (j.contains("host_shared")) {
    if (!j["host_shared"].is_boolean()) return bad(where + ".host_shared", "expected true or false");
    p.host_shared = j["host_shared"].get<bool>();
  }
  if (j.contains("matmul_gflops")) {
    const nlohmann::json& m = j["matmul_gflops"];
    if (!m.is_object()) return bad(where + ".matmul_gflops", "expected {\"decode\": {...}, \"prefill\": {...}}");
    for (const auto& [phase, rates_j] : m.items()) {
      if (phase == "decode") {
        GX_TRY(read_rates(rates_j, where + ".matmul_gflops.decode", p.matmul_decode_gflops));
      } else if (phase == "prefill") {
        GX_TRY(read_rates(rates_j, where + ".matmul_gflops.prefill", p.matmul_prefill_gflops));
      } else {
        return bad(where + ".matmul_gflops", "unknown phase '" + phase + "' (expected decode or prefill)");
      }
    }
  }
  return p;
}

}  // namespace

std::string_view phase_name(Phase p) { return p == Phase::Decode ? "decode" : "prefill"; }

double BackendProfile::matmul_gflops(DType weight, Phase phase) const {
  const Rates& r = phase == Phase::Decode ? matmul_decode_gflops : matmul_prefill_gflops;
  auto it = r.find(weight);
  if (it == r.end()) it = r.find(DType::F32);
  return it != r.end() ? it->second : 10.0;
}

const BackendProfile* DeviceProfile::find(std::string_view backend) const {
  for (const BackendProfile& b : backends) {
    if (b.name == backend) return &b;
  }
  return nullptr;
}

void DeviceProfile::set(BackendProfile p) {
  for (BackendProfile& b : backends) {
    if (b.name == p.name) {
      b = std::move(p);
      return;
    }
  }
  backends.push_back(std::move(p));
}

BackendProfile default_backend_profile(std::string_view backend) {
  BackendProfile p;
  p.name = std::string(backend);
  p.device = "built-in defaults";
  if (backend == "opencl") {
    // An Adreno 7xx-class GPU sharing DRAM with the CPU: a kernel launch costs ~15 us, and a
    // hand-over between CPU and GPU (finish, map/unmap) ~30 us.
    p.launch_us = 15.0;
    p.split_us = 30.0;
    p.memory_gbps = 40.0;
    p.matmul_decode_gflops = rates({20, 35, 60, 55, 50, 45, 40});
    p.matmul_prefill_gflops = rates({150, 250, 300, 280, 300, 250, 220});
    p.transfer_latency_us = 30.0;
    p.upload_gbps = 8.0;
    p.download_gbps = 8.0;
    p.host_shared = true;
  } else {
    // The CPU (and any unknown backend): a few cores of a laptop or phone.
    p.launch_us = 2.0;
    p.split_us = 5.0;
    p.memory_gbps = 20.0;
    p.matmul_decode_gflops = rates({10, 10, 40, 35, 30, 30, 25});
    p.matmul_prefill_gflops = rates({50, 40, 150, 130, 150, 110, 90});
    p.transfer_latency_us = 0.0;
    p.upload_gbps = 10.0;
    p.download_gbps = 10.0;
    p.host_shared = true;
  }
  return p;
}

DeviceProfile default_profile() {
  DeviceProfile d;
  d.source = "built-in defaults";
  d.backends = {default_backend_profile("cpu"), default_backend_profile("opencl")};
  return d;
}

std::string default_profile_path() {
  if (const char* p = std::getenv("GENIEX_PROFILE"); p != nullptr && *p != '\0') return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return std::string(x) + "/geniex/profile.json";
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/geniex/profile.json";
  return {};
}

std::string profile_to_json(const DeviceProfile& profile) {
  nlohmann::json j;
  j["geniex_profile"] = kProfileVersion;
  j["created"] = profile.created;
  nlohmann::json backends = nlohmann::json::object();
  for (const BackendProfile& b : profile.backends) {
    backends[b.name] = {
        {"device", b.device},
        {"measured", b.measured},
        {"threads", b.threads},
        {"launch_us", b.launch_us},
        {"split_us", b.split_us},
        {"memory_gbps", b.memory_gbps},
        {"matmul_gflops", {{"decode", rates_json(b.matmul_decode_gflops)}, {"prefill", rates_json(b.matmul_prefill_gflops)}}},
        {"transfer_latency_us", b.transfer_latency_us},
        {"upload_gbps", b.upload_gbps},
        {"download_gbps", b.download_gbps},
        {"host_shared", b.host_shared},
    };
  }
  j["backends"] = std::move(backends);
  return j.dump(2) + "\n";
}

Result<DeviceProfile> profile_from_json(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return make_error(ErrorCode::InvalidFormat, std::string("device profile: not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return bad("top level", "expected an object");
  if (!j.contains("geniex_profile") || !j["geniex_profile"].is_number_integer()) {
    return bad("geniex_profile", "missing version number (not a GenieX device profile?)");
  }
  if (j["geniex_profile"].get<int64_t>() != kProfileVersion) {
    return bad("geniex_profile", "version " + j["geniex_profile"].dump() + " is not supported (expected " +
                                     std::to_string(kProfileVersion) + "; run geniex calibrate again)");
  }
  DeviceProfile d = default_profile();
  d.source.clear();
  if (j.contains("created")) {
    if (!j["created"].is_string()) return bad("created", "expected a string");
    d.created = j["created"].get<std::string>();
  }
  if (j.contains("backends")) {
    const nlohmann::json& b = j["backends"];
    if (!b.is_object()) return bad("backends", "expected an object of backend name -> rates");
    for (const auto& [name, entry] : b.items()) {
      if (name.empty() || name.size() > 64) return bad("backends", "bad backend name '" + name + "'");
      GX_ASSIGN_OR_RETURN(BackendProfile p, read_backend(name, entry));
      d.set(std::move(p));
    }
  }
  return d;
}

Result<DeviceProfile> load_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::NotFound, "device profile '" + path + "': cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (1u << 20)) {
    return make_error(ErrorCode::InvalidFormat, "device profile '" + path + "': larger than 1 MiB");
  }
  auto d = profile_from_json(ss.str());
  if (!d) return make_error(d.error().code, "'" + path + "': " + d.error().message);
  d->source = path;
  return d;
}

Status save_profile(const DeviceProfile& profile, const std::string& path) {
  if (path.empty()) return make_error(ErrorCode::InvalidArgument, "device profile: no path (set HOME or use -o)");
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return make_error(ErrorCode::IoError, "device profile: cannot create '" + parent.string() + "': " + ec.message());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(ErrorCode::IoError, "device profile: cannot write '" + tmp + "'");
    out << profile_to_json(profile);
    if (!out) return make_error(ErrorCode::IoError, "device profile: write to '" + tmp + "' failed");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_error(ErrorCode::IoError, "device profile: cannot rename to '" + path + "': " + ec.message());
  return ok_status();
}

LoadedProfile load_profile_or_defaults() {
  LoadedProfile out;
  out.profile = default_profile();
  const std::string path = default_profile_path();
  if (path.empty()) return out;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    // A path named explicitly that does not exist deserves a word; the default location not.
    const char* env = std::getenv("GENIEX_PROFILE");
    if (env != nullptr && *env != '\0') out.warning = "device profile '" + path + "' not found; using built-in defaults";
    return out;
  }
  auto loaded = load_profile(path);
  if (!loaded) {
    out.warning = loaded.error().message + "; using built-in defaults (run geniex calibrate to rewrite it)";
    return out;
  }
  out.profile = std::move(loaded).value();
  return out;
}

}  // namespace geniex::sched
