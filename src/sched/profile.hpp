// Device profile: the measured rates of each backend (matmul GFLOP/s per weight type and
// phase, memory bandwidth, launch latency, host<->device transfers) that the cost model turns
// into microseconds. Written by `geniex calibrate`, read at model build; built-in defaults
// stand in for a missing profile and for any field a profile leaves out.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/result.hpp"

namespace geniex::sched {

// Decode steps run one token (bandwidth-bound); prefill steps many (compute-bound).
enum class Phase { Decode, Prefill };
std::string_view phase_name(Phase p);

struct BackendProfile {
  std::string name;           // backend name: "cpu", "opencl"
  std::string device;         // what was measured: "x86-64 avx2, 2 threads", "PoCL cpu-..."
  bool measured = false;      // false: built-in defaults
  int32_t threads = 0;        // CPU threads the rates were measured with (0: unknown)
  double launch_us = 2.0;     // fixed cost of running one node (dispatch, barrier, enqueue)
  // Fixed cost of a split on this backend, paid each time execution switches to it (waking
  // the CPU's threads; an OpenCL enqueue, finish and map/unmap).
  double split_us = 5.0;
  double memory_gbps = 20.0;  // read bandwidth from the backend's memory, GB/s
  // MatMul throughput per weight type, GFLOP/s (2*K*N*T flops), at 1 token and at a prefill
  // batch; a type without a rate uses the phase's F32 rate.
  std::map<DType, double> matmul_decode_gflops;
  std::map<DType, double> matmul_prefill_gflops;
  // Hand-over of a tensor to / from this backend: a fixed latency (enqueue, finish, map or
  // unmap) plus bytes at the transfer rate. host_shared: the backend's memory is host memory
  // (the CPU itself, unified-memory SoCs, PoCL), so a transfer is a memcpy or no copy at all.
  double transfer_latency_us = 0.0;
  double upload_gbps = 10.0;    // host -> backend
  double download_gbps = 10.0;  // backend -> host
  bool host_shared = true;

  // Rate for a weight type and phase (falls back to F32, then to a nominal 10 GFLOP/s).
  double matmul_gflops(DType weight, Phase phase) const;
};

struct DeviceProfile {
  std::string created;  // ISO 8601 time of the calibration ("" for defaults)
  std::string source;   // where it came from: a path, or "built-in defaults"
  std::vector<BackendProfile> backends;

  const BackendProfile* find(std::string_view backend) const;
  void set(BackendProfile p);  // replaces the entry of the same name
};

// Rough rates for backends without a measurement: a laptop-class CPU and an Adreno-class GPU.
BackendProfile default_backend_profile(std::string_view backend);
DeviceProfile default_profile();  // entries for "cpu" and "opencl"

// $GENIEX_PROFILE, else $XDG_CACHE_HOME/geniex/profile.json, else ~/.cache/geniex/profile.json
// ("" when none of HOME, XDG_CACHE_HOME, GENIEX_PROFILE is set).
std::string default_profile_path();

// JSON text <-> profile. Parsing validates every field (numbers finite and positive, known
// weight types) and names the first bad one; fields left out keep their defaults.
std::string profile_to_json(const DeviceProfile& profile);
Result<DeviceProfile> profile_from_json(std::string_view text);
Result<DeviceProfile> load_profile(const std::string& path);
Status save_profile(const DeviceProfile& profile, const std::string& path);  // creates folders

// What model building uses: the profile at default_profile_path() when there is one; the
// defaults when there is none (no warning) or when it is unreadable or malformed (warning says
// why, and that defaults are used).
struct LoadedProfile {
  DeviceProfile profile;
  std::string warning;
};
LoadedProfile load_profile_or_defaults();

}  // namespace geniex::sched
