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

// Everything a backend needs to run its nodes: where each node's tensor lives.
struct ExecContext {
  const graph::Graph* graph = nullptr;
  std::vector<void*> data;  // per node id: output storage (weights: the mapped bytes)
  const StepData* step = nullptr;
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

  // Runs nodes (ids of ctx.graph, in order); inputs are ready in ctx.data.
  virtual Status compute(std::span<const int32_t> nodes, ExecContext& ctx) = 0;
};

}  // namespace geniex::backends
