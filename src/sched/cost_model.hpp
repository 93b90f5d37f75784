// Cost model: estimated microseconds of a node on a backend and of a copy between two
// backends, from a device profile's measured rates. Placement (place.cpp) minimises the sum
// over a graph; `geniex plan` shows the numbers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/backend.hpp"
#include "graph/graph.hpp"
#include "sched/profile.hpp"

namespace geniex::sched {

// KV positions assumed for an attention node's cost in decode (the graph does not carry the
// cache length; prefill attends over at least its own tokens).
inline constexpr int64_t kAssumedKvTokens = 256;

// One node on the backend the profile describes:
//   MatMul:    launch + max(weight bytes / memory bandwidth, 2*K*N*T / rate(type, T)), where
//              rate goes from the decode rate at T = 1 to the prefill rate at T >= 128 (log2 T)
//   Attention: launch + max(K/V bytes / bandwidth, 4*n_head*head_dim*T*n_kv / F32 rate), plus
//              the K/V rows' upload on backends that are not the host itself (the cache lives
//              in host memory)
//   others:    launch + bytes read and written / bandwidth
double node_cost_us(const BackendProfile& p, const graph::Graph& g, const graph::Node& n);

// A tensor of `bytes` moving from one backend to another: out of `from` (latency + bytes at its
// download rate) and into `to` (latency + bytes at its upload rate). The CPU has no latency
// and memcpy rates, so CPU <-> GPU costs the GPU's hand-over.
double copy_cost_us(const BackendProfile& from, const BackendProfile& to, uint64_t bytes);

// Costs for a scheduler's backends: from the profile entry of the backend's name, or, for a
// backend the profile does not name, its own estimate_us and the CPU defaults for transfers.
class CostModel {
 public:
  CostModel(std::shared_ptr<const DeviceProfile> profile, std::vector<backends::Backend*> backends);

  double node_us(size_t backend, const graph::Graph& g, const graph::Node& n) const;
  double copy_us(size_t from, size_t to, uint64_t bytes) const;
  // Switching execution to backend `to` (a new split): its profile's split cost; 0 for a
  // backend the profile does not name.
  double switch_us(size_t to) const { return named_[to] ? entries_[to].split_us : 0.0; }
  // A node of a planned graph: Copy nodes cost the copy from their source's backend.
  double planned_node_us(const graph::Graph& g, const std::vector<int32_t>& backend_of, int32_t id) const;
  const BackendProfile& profile_of(size_t backend) const { return entries_[backend]; }
  bool from_profile(size_t backend) const { return named_[backend]; }

 private:
  std::shared_ptr<const DeviceProfile> profile_;
  std::vector<backends::Backend*> backends_;
  std::vector<BackendProfile> entries_;
  std::vector<bool> named_;
};

}  // namespace geniex::sched
