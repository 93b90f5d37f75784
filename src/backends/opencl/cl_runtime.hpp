// The OpenCL device, context and compiled program shared by every OpenCL backend of the
// process (PoCL compiles with LLVM on first use: the program is built once per context, not
// per session or call), plus the device facts the backend's choices depend on, and the
// fault injection used by tests (GENIEX_OPENCL_FAULT).
#pragma once

#include <CL/cl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "core/result.hpp"

namespace geniex::backends::opencl {

// "CL_OUT_OF_RESOURCES (-5)"
std::string cl_error_name(cl_int err);

// Simulated failures, parsed from GENIEX_OPENCL_FAULT (comma-separated):
//   build         the program fails to build (every op falls back)
//   build:NAME    kernel NAME is missing from the program (ops needing it fall back)
//   alloc         every device allocation fails
//   probe-crash   the child process of probe_device_in_child dies by a signal (a broken driver)
//   probe-hang    that child never answers (a hung driver)
struct Fault {
  bool build = false;
  std::set<std::string> missing_kernels;
  bool alloc = false;
  bool probe_crash = false;
  bool probe_hang = false;
  std::string spec;  // as given, for messages and the runtime registry key

  static Result<Fault> parse(std::string_view spec);
  static Result<Fault> from_env();  // GENIEX_OPENCL_FAULT, empty when unset
};

struct DeviceInfo {
  std::string platform;
  std::string name;
  std::string version;
  bool unified_memory = false;       // CL_DEVICE_HOST_UNIFIED_MEMORY: weights used in place
  bool fp16 = false;                 // cl_khr_fp16 (not required; noted for Adreno)
  bool subgroups = false;            // cl_khr_subgroups (not required)
  bool correct_div_sqrt = false;     // CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT
  size_t max_work_group = 0;
  uint64_t local_mem = 0;
  uint64_t global_mem = 0;
  uint64_t max_alloc = 0;
  uint32_t base_align_bytes = 0;     // CL_DEVICE_MEM_BASE_ADDR_ALIGN / 8
};

// The device the backend would use: a GPU or accelerator when one exists, else a CPU device
// (PoCL in CI); an error saying why there is none. Cheap: enumerates, builds nothing.
struct ProbedDevice {
  std::string name;
  bool is_gpu = false;  // GPU or accelerator (not a CPU device such as PoCL's)
};
Result<ProbedDevice> probe_device();

// probe_device() run in a forked child process, for callers that will not use a device that
// is not a GPU (`--device auto`): enumerating devices loads every installed OpenCL driver into
// the process (PoCL brings LLVM: ~60 MiB resident, never unloaded), and a broken driver can
// crash or hang the process that asks. The child's answer comes back through a pipe; a crash
// or a child still running after `timeout_ms` is an error (the child is killed). The result
// is computed once per process and cached. GENIEX_OPENCL_PROBE=inprocess probes in this
// process instead; so does a process that already holds an OpenCL runtime.
Result<ProbedDevice> probe_device_isolated(int timeout_ms = 20000);
// The child-process probe itself, uncached (for tests).
Result<ProbedDevice> probe_device_in_child(int timeout_ms);

class ClRuntime {
 public:
  // The shared runtime for the first usable device under the given fault (faulted runtimes
  // are kept apart from the real one). Fails only when there is no device at all; a
  // program that does not build is reported by build_error(), not as a failure.
  static Result<std::shared_ptr<ClRuntime>> get(const Fault& fault);
  ~ClRuntime();
  ClRuntime(const ClRuntime&) = delete;
  ClRuntime& operator=(const ClRuntime&) = delete;

  cl_context context() const { return context_; }
  cl_device_id device() const { return device_; }
  const DeviceInfo& info() const { return info_; }
  const Fault& fault() const { return fault_; }

  // The program, or null with build_error() saying why.
  cl_program program() const { return program_; }
  const std::string& build_error() const { return build_error_; }
  double build_ms() const { return build_ms_; }
  // Kernel objects are per backend (their arguments are state); this says whether the
  // program has the kernel (false under build faults).
  bool has_kernel(const std::string& name) const;

  // clCreateBuffer honouring the alloc fault; errors name what was being allocated.
  Result<cl_mem> create_buffer(cl_mem_flags flags, size_t bytes, void* host_ptr,
                               std::string_view what) const;

 private:
  ClRuntime() = default;
  Status init(const Fault& fault);

  Fault fault_;
  cl_platform_id platform_ = nullptr;
  cl_device_id device_ = nullptr;
  cl_context context_ = nullptr;
  cl_program program_ = nullptr;
  std::string build_error_;
  double build_ms_ = 0;
  DeviceInfo info_;
  std::set<std::string> kernels_;
};

}  // namespace geniex::backends::opencl
