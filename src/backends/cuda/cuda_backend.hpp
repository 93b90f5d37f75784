// The CUDA backend: runs the Llama-family and Gemma 3 ops on an NVIDIA GPU (sm_80 / sm_90).
//
// Memory model. The scheduler hands every backend host pointers (Buffer::data(), Input
// writes, Copy nodes), so activations live in arenas with two halves: pinned host memory
// (what data() returns) and a device mirror of the same size at the same offsets. compute()
// uploads the inputs its nodes read that were written on the host (Inputs, earlier splits'
// results), runs the kernels on the backend's stream, and downloads the results that anyone
// outside the call reads (later splits, the graph output). Weights are uploaded once per
// tensor on first use and cached for the backend's life (one copy per Session today, as in
// the OpenCL backend). The KV cache stays in host memory: attention stores the batch's K/V
// rows with KvCache::write and copies the visible rows to the device each step (see
// attention.cuh).
//
// Failures never crash: no driver or no device -> create() fails and the runtime keeps the
// CPU; a device that cannot allocate, or an injected fault (GENIEX_CUDA_FAULT), makes
// supports() say no with the reason so the scheduler places those ops on the CPU.
//
// This file is host C++ (compiled by the host compiler with the project's warnings); kernels
// live in the *.cu files, one per op family, behind the launchers their *.cuh declare.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backends/backend.hpp"

namespace geniex::backends::cuda {

// GENIEX_CUDA_FAULT: comma-separated faults for tests of the fallback paths.
//   alloc        the device's allocations fail: every op falls back to the CPU
//   op:NAME      op NAME (graph::op_name, e.g. matmul or attention) is refused
struct Fault {
  bool alloc = false;
  std::set<std::string> refused_ops;
  std::string spec;
  static Result<Fault> parse(std::string_view spec);
  static Result<Fault> from_env();
};

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  size_t total_mem = 0;
};

// The first CUDA device, or why there is none ("no CUDA device: ..."). Cheap; used by the
// device registry and by tests to skip.
Result<DeviceInfo> probe_device();

struct Arena;          // one activation buffer (host half + device half), see cuda_backend.cpp
struct ArenaRegistry;  // live arenas of one backend, shared with the buffers

class CudaBackend final : public Backend {
 public:
  struct Options {
    std::optional<Fault> fault;  // nullopt: GENIEX_CUDA_FAULT
  };
  static Result<std::unique_ptr<CudaBackend>> create(const Options& options);
  static Result<std::unique_ptr<CudaBackend>> create() { return create(Options{}); }
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  DeviceKind kind() const override { return DeviceKind::Gpu; }
  Support supports(const graph::Graph& g, const graph::Node& n) const override;
  double estimate_us(const graph::Graph& g, const graph::Node& n) const override;
  Result<std::unique_ptr<Buffer>> allocate(size_t bytes) override;
  bool host_visible() const override { return true; }
  // Uploads at the start and downloads at the end of compute() touch the host halves of its
  // arenas; the scheduler then runs splits one after another.
  bool concurrent_host_access() const override { return false; }
  Status compute(std::span<const int32_t> nodes, ExecContext& ctx) override;

  const DeviceInfo& device_info() const { return info_; }
  const std::string& unusable_reason() const { return unusable_; }
  size_t cached_weights() const { return weights_.size(); }

  // ---- for the op implementations (ops.cpp) ----
  enum class Scratch { Act, Dequant, XHalf, KRows, VRows, Info, Scores, Rope, Count };
  // Device address of a node's tensor (weights: the cached upload).
  Result<void*> dev(const ExecContext& ctx, int32_t node_id);
  // A host pointer with the node's current values (downloads it first when it was computed
  // on the device in this call).
  Result<const void*> host(const ExecContext& ctx, int32_t node_id);
  Result<void*> scratch(Scratch slot, size_t bytes);
  // Pinned host staging memory (one per slot, reused after the stream has drained).
  Result<void*> staging(Scratch slot, size_t bytes);
  cudaStream_t stream() const { return stream_; }
  void* cublas() const { return cublas_; }
  Status check(cudaError_t err, const std::string& what) const;
  Status sync(const std::string& what);
  // The (cos, sin) table of a rope call on the device, computed on the host as the CPU op
  // does and cached (see rope_tables_).
  Result<const float*> rope_table(std::span<const int32_t> positions, const graph::RopeParams& p,
                                  const float* factors);

 private:
  CudaBackend() = default;
  Result<void*> weight_dev(const graph::WeightRef& w);
  Arena* arena_of(const void* host_ptr) const;
  Status run_node(const graph::Graph& g, int32_t id, ExecContext& ctx);

  DeviceInfo info_;
  Fault fault_;
  std::string unusable_;
  cudaStream_t stream_ = nullptr;
  void* cublas_ = nullptr;  // cublasHandle_t, kept opaque so this header needs no cuBLAS
  std::unordered_map<const void*, void*> weights_;  // by the weight's mapped bytes
  struct ScratchBuf {
    void* dev = nullptr;
    size_t bytes = 0;
    void* host = nullptr;  // pinned staging
    size_t host_bytes = 0;
  };
  std::vector<ScratchBuf> scratch_ = std::vector<ScratchBuf>(static_cast<size_t>(Scratch::Count));
  std::shared_ptr<ArenaRegistry> arenas_;
  // Rope angle tables on the device, by (positions, parameters): q and k of every layer
  // share one, so it is computed and uploaded once per step and rope setting.
  struct RopeTable {
    std::vector<int32_t> positions;
    graph::RopeParams params;
    const void* factors = nullptr;
    void* dev = nullptr;
    size_t bytes = 0;
  };
  std::vector<RopeTable> rope_tables_;
  size_t rope_next_ = 0;
  // Per compute() call: nodes computed on the device whose host copy is stale.
  std::vector<uint8_t> on_device_only_;
};

}  // namespace geniex::backends::cuda
