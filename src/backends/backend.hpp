// Backend interface: a compute unit says what it can run (capability), what that costs,
// owns memory for activations, and runs a split of a graph. CPU is the real one today;
// OpenCL, CUDA and NPU delegates implement the same interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"
#include "graph/graph.hpp"

namespace geniex::kv {
class KvCache;
}

namespace geniex::backends {

enum class DeviceKind : uint8_t { Cpu, Gpu, Npu };
std::string_view device_kind_name(DeviceKind kind);

// A capability answer: yes, or no with the reason shown by `geniex plan`.
struct Support {
  bool ok = false;
  std::string reason;
  static Support yes() { return {true, {}}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
};

// Per-step data the graph's Input nodes and the Attention op need.
struct StepData {
  std::span<const int32_t> tokens;       // [n_tokens]
  std::span<const int32_t> positions;    // [n_tokens]
  std::span<const int32_t> seq_ids;      // [n_tokens]
  std::span<const int32_t> output_rows;  // batch indices whose outputs are wanted
  kv::KvCache* kv = nullptr;
};

// Output rows [begin, end) of a MatMul that one part of a row split computes; the part
// writes its slice in place in the full [N, T] output (row stride N). end < 0: all rows.
struct RowRange {
  int64_t begin = 0;
  int64_t end = -1;
  bool full() const { return end < 0; }
};

// Everything a backend needs to run its nodes: where each node's tensor lives.
struct ExecContext {
  const graph::Graph* graph = nullptr;
  std::vector<void*> data;  // per node id: output storage (weights: the mapped bytes)
  const StepData* step = nullptr;
  std::span<const RowRange> rows;  // per node id (the plan's, not copied), or empty: all rows

  // The rows node id computes, clamped to [0, n) (n: the node's output rows, ne[0]).
  RowRange rows_of(int32_t id, int64_t n) const {
    if (rows.empty() || rows[static_cast<size_t>(id)].full()) return {0, n};
    const RowRange r = rows[static_cast<size_t>(id)];
    return {r.begin < 0 ? 0 : r.begin, r.end > n ? n : r.end};
  }
};

// A block of memory owned by a backend (host memory for host-visible backends).
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;  // host-addressable pointer, or a device handle
  virtual size_t size() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  virtual DeviceKind kind() const = 0;

  // Static shapes: 0 when the backend runs steps of any size; T when it runs only steps of
  // exactly T tokens (units with graphs compiled ahead for one shape). A Session then cuts
  // prefill into T-token steps and pads the last one (runtime/chunking.hpp).
  virtual int32_t static_tokens() const { return 0; }

  // Capability: can this backend run node n of g (op, dtypes, shapes)? Input and Weight
  // nodes are not asked: they are data, and the scheduler places them.
  virtual Support supports(const graph::Graph& g, const graph::Node& n) const = 0;

  // Cost estimate in microseconds for running n (used to improve placement; defaults come
  // from rough rates until a calibration profile exists).
  virtual double estimate_us(const graph::Graph& g, const graph::Node& n) const = 0;

  // Memory for activations placed on this backend.
  virtual Result<std::unique_ptr<Buffer>> allocate(size_t bytes) = 0;
  // True when buffers are plain host memory (copies are memcpy; zero-copy reads possible).
  virtual bool host_visible() const = 0;

  // Runs nodes (ids of ctx.graph, in order); inputs are ready in ctx.data. The scheduler
  // calls it from one thread per backend (the backend's queue), so a backend's compute()
  // never runs twice at once, but two backends' may run at the same time.
  virtual Status compute(std::span<const int32_t> nodes, ExecContext& ctx) = 0;

  // True when compute() honours ExecContext::rows for MatMul (computes only those output
  // rows, writing them in place in the full output): such a backend can take a part of a
  // row-split MatMul.
  virtual bool computes_row_ranges() const { return false; }
  // True when compute() reads and writes any host memory, not only this backend's own
  // buffers: it can then write its part of a row split into another backend's arena.
  virtual bool uses_any_host_memory() const { return false; }
  // True when the host (and other backends' queues) may touch regions of this backend's
  // buffers that its running work does not use while that work runs (zero-copy memory).
  // When any backend of a plan says no, the scheduler runs the plan's splits one by one.
  virtual bool concurrent_host_access() const { return true; }
  // Memory this backend holds beside the scheduler's arenas, now: scratch (quantized
  // activations, gathered KV rows) and device copies of weights. For memory reports.
  virtual uint64_t scratch_bytes() const { return 0; }
};

}  // namespace geniex::backends
