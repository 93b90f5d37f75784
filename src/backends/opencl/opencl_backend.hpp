// The OpenCL backend: runs the Llama-family and Gemma 3 ops on an OpenCL device, written for
// Adreno-class mobile GPUs in portable OpenCL C 1.2 (tested on PoCL in CI).
//
// Memory model (see ARCHITECTURE.md, "Backends and the scheduler"): activations live in
// host-visible arenas -- page-aligned host memory wrapped with CL_MEM_USE_HOST_PTR, which
// is zero-copy on unified-memory SoCs (Adreno shares DRAM with the CPU) -- so the
// scheduler's Buffer::data() pointers, Input writes and cross-backend Copy nodes keep
// working. Ownership moves by map/unmap: arenas are mapped (host-owned) between compute()
// calls and unmapped while this backend's kernels run. Weights are wrapped once per
// WeightRef (in place with CL_MEM_USE_HOST_PTR when CL_DEVICE_HOST_UNIFIED_MEMORY says the
// device reads host memory, else uploaded once) and cached for the backend's lifetime.
//
// Failures never crash: no device -> create() fails and the runtime keeps the CPU; a
// program that fails to build, a kernel missing from it, or a device that cannot allocate
// makes supports() say no with the reason, so the scheduler places those ops on the CPU.
#pragma once

#include <CL/cl.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/backend.hpp"
#include "backends/opencl/cl_runtime.hpp"

namespace geniex::backends::opencl {

// A device buffer and a byte offset into it (kernels take both).
struct Mem {
  cl_mem mem = nullptr;
  uint64_t offset = 0;
};

struct ArenaRegistry;  // live arenas of one backend, shared with the buffers

class OpenClBackend final : public Backend {
 public:
  struct Options {
    std::optional<Fault> fault;  // nullopt: GENIEX_OPENCL_FAULT
  };
  static Result<std::unique_ptr<OpenClBackend>> create(const Options& options);
  static Result<std::unique_ptr<OpenClBackend>> create() { return create(Options{}); }
  ~OpenClBackend() override;
  OpenClBackend(const OpenClBackend&) = delete;
  OpenClBackend& operator=(const OpenClBackend&) = delete;

  std::string_view name() const override { return "opencl"; }
  DeviceKind kind() const override { return DeviceKind::Gpu; }
  Support supports(const graph::Graph& g, const graph::Node& n) const override;
  double estimate_us(const graph::Graph& g, const graph::Node& n) const override;
  Result<std::unique_ptr<Buffer>> allocate(size_t bytes) override;
  bool host_visible() const override { return true; }
  Status compute(std::span<const int32_t> nodes, ExecContext& ctx) override;
  bool computes_row_ranges() const override { return true; }
  // Kernels reach only this backend's arenas and weights (uses_any_host_memory stays false).
  // Other queues may use the arenas while kernels run only when they are the host's memory.
  bool concurrent_host_access() const override { return runtime_->info().unified_memory; }
  uint64_t scratch_bytes() const override;  // scratch buffers and uploaded weight copies

  const DeviceInfo& device_info() const { return runtime_->info(); }
  // Empty when every op can run; else why none can (build failure, allocation failure).
  const std::string& unusable_reason() const { return unusable_; }
  size_t cached_weights() const { return weights_.size(); }

  // ---- for the op implementations (op_*.cpp) ----
  enum class Scratch { Act, KRows, VRows, Info, Scores, Rope, RowPart, Count };
  Result<Mem> mem_of(const ExecContext& ctx, int32_t node_id);
  Result<cl_kernel> kernel(const std::string& name);
  Result<cl_mem> scratch(Scratch slot, size_t bytes);
  cl_command_queue queue() const { return queue_; }
  const ClRuntime& runtime() const { return *runtime_; }
  // Enqueues k over global (rounded up to local where local is given).
  Status launch(cl_kernel k, const std::string& what, cl_uint dims, const size_t* global,
                const size_t* local);

 private:
  OpenClBackend() = default;
  Result<Mem> weight_mem(const graph::WeightRef& w);
  Status run_node(const graph::Graph& g, int32_t id, ExecContext& ctx);

  std::shared_ptr<ClRuntime> runtime_;
  std::string unusable_;
  cl_command_queue queue_ = nullptr;
  std::unordered_map<std::string, cl_kernel> kernels_;
  std::unordered_map<const void*, cl_mem> weights_;  // by the weight's mapped bytes
  struct ScratchBuf {
    cl_mem mem = nullptr;
    size_t bytes = 0;
  };
  std::vector<ScratchBuf> scratch_ = std::vector<ScratchBuf>(static_cast<size_t>(Scratch::Count));
  std::shared_ptr<ArenaRegistry> arenas_;
};

// Kernel arguments, type-checked at the call: cl_mem, cl_ulong, cl_int, cl_float.
template <typename... A>
Status set_args(cl_kernel k, const std::string& what, const A&... args) {
  cl_uint index = 0;
  cl_int err = CL_SUCCESS;
  ((err = err == CL_SUCCESS ? clSetKernelArg(k, index++, sizeof(A), &args) : err), ...);
  if (err != CL_SUCCESS) {
    return make_error(ErrorCode::BackendError, "opencl: " + what + ": argument " + std::to_string(index - 1) +
                                                   ": " + cl_error_name(err));
  }
  return ok_status();
}

// Weight types with kernels (MatMul and GetRows), and their kernel-name suffix.
const char* weight_kernel_suffix(DType t);  // "q4_k", or nullptr

}  // namespace geniex::backends::opencl
