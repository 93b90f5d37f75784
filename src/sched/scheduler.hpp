// The scheduler: turns a Graph and the backends (in the declared preference order) into a
// Plan -- a backend for every node with the reason, copies between backends, splits, and
// activation offsets planned by liveness -- and executes plans. Plans are cached by the
// graph's structural signature.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/backend.hpp"
#include "graph/graph.hpp"

namespace geniex::sched {

struct Split {
  int32_t backend = 0;
  std::vector<int32_t> nodes;  // ids in Plan::graph, in execution order
};

struct Plan {
  graph::Graph graph;                // the input graph with Copy nodes inserted
  std::vector<int32_t> origin;       // per node: id in the input graph, -1 for copies
  std::vector<int32_t> backend_of;   // per node: index into the scheduler's backends; -1 for weights
  std::vector<std::string> reason;   // per node: why that backend
  std::vector<Split> splits;
  std::vector<int64_t> offset;       // per node: byte offset in its backend's arena, -1 if none
  std::vector<int64_t> arena_bytes;  // per backend: peak activation memory of this plan
  int32_t n_copies = 0;
  double planning_ms = 0;
};

class Scheduler {
 public:
  // backends: in preference order (the declared target first); not owned.
  explicit Scheduler(std::vector<backends::Backend*> backends);

  const std::vector<backends::Backend*>& backends() const { return backends_; }

  // The plan for g (from the cache when a graph of the same signature was planned before).
  Result<std::shared_ptr<const Plan>> plan(const graph::Graph& g);

  // Runs a plan; returns a host pointer to the output node's tensor (valid until the next
  // execute). Inputs are validated against their nodes' sizes.
  Result<const float*> execute(const Plan& plan, const backends::StepData& step);

  size_t cached_plans() const { return cache_.size(); }
  void clear_cache() { cache_.clear(); }

 private:
  Result<std::shared_ptr<const Plan>> make_plan(const graph::Graph& g) const;

  std::vector<backends::Backend*> backends_;
  std::unordered_map<uint64_t, std::shared_ptr<const Plan>> cache_;
  std::vector<std::unique_ptr<backends::Buffer>> arenas_;  // per backend
  backends::ExecContext ctx_;
};

}  // namespace geniex::sched
