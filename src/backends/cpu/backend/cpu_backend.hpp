// The CPU backend: runs every op of the Llama family on a persistent thread pool, with
// kernels chosen at run time for the CPU's features (see backends/cpu/kernels.hpp).
#pragma once

#include <memory>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cpu/backend/ops.hpp"
#include "backends/cpu/backend/weight_store.hpp"
#include "core/thread_pool.hpp"

namespace geniex::backends {

class CpuBackend final : public Backend {
 public:
  // weights: packed layouts shared by the Model's sessions (may be null: file layout only).
  explicit CpuBackend(int n_threads, std::shared_ptr<const CpuWeightStore> weights = nullptr);

  std::string_view name() const override { return "cpu"; }
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  Support supports(const graph::Graph& g, const graph::Node& n) const override;
  double estimate_us(const graph::Graph& g, const graph::Node& n) const override;
  Result<std::unique_ptr<Buffer>> allocate(size_t bytes) override;
  bool host_visible() const override { return true; }
  Status compute(std::span<const int32_t> nodes, ExecContext& ctx) override;
  bool computes_row_ranges() const override { return true; }
  bool uses_any_host_memory() const override { return true; }
  uint64_t scratch_bytes() const override { return work_.capacity(); }

  int n_threads() const { return pool_.size(); }
  // A barrier after every node, as before barriers followed memory dependencies (tests compare
  // the two; also GENIEX_CPU_BARRIERS=all).
  void set_barrier_every_node(bool on) { barrier_every_node_ = on; }
  // One-token attention over at least this many keys runs in phases split across the threads
  // where the KV heads are fewer than 4 per thread (op_attention.cpp; the same bits). Default
  // 128, or GENIEX_ATTN_SPLIT_MIN_KEYS.
  void set_attention_split_min_keys(int32_t n) { attn_split_min_keys_ = n; }

 private:
  ThreadPool pool_;
  std::shared_ptr<const CpuWeightStore> weights_;
  std::vector<uint8_t> work_;  // scratch for quantized activations; grows, never shrinks
  bool barrier_every_node_ = false;
  int32_t attn_split_min_keys_ = 128;
  // Per graph node, the next piece of its rows a thread may take (matmul): reset before each
  // run, so no barrier is needed between the ops that use them.
  std::unique_ptr<cpu_ops::RowTicket[]> tickets_;
  size_t n_tickets_ = 0;
};

// Host memory aligned for SIMD, used by host-visible backends.
class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(size_t bytes);
  ~HostBuffer() override;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() override { return data_; }
  size_t size() const override { return size_; }
  bool ok() const { return data_ != nullptr; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace geniex::backends
