// The scheduler: turns a Graph and the backends (in the declared preference order) into a
// Plan -- a backend for every node with the reason, copies between backends, splits, and
// activation offsets planned by liveness -- and executes plans. Plans are cached by the
// graph's structural signature.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/backend.hpp"
#include "graph/graph.hpp"
#include "sched/place.hpp"
#include "sched/trace.hpp"

namespace geniex::sched {

struct SchedulerOptions {
  // Passes 1-2: the device profile for cost-based placement and forced GPU layers (place.hpp);
  // the default places by capability only.
  PlaceOptions placement;
  // Pass 5: a MatMul with at least min_rows output rows is split by output rows between its
  // backend and a second one that can run it, in proportion to their speed; both parts write
  // their rows of the one output tensor (sched/row_split.hpp).
  bool row_split = false;
  int64_t min_rows = 1024;
  // Share of the rows the second backend takes; 0: from the backends' estimate_us.
  double split_share = 0;
  // Each backend runs its splits on its own queue (a worker thread), a split waiting only for
  // the splits it reads from (and whose memory it reuses); false: one split after another.
  bool async = true;
  // Pass 3: element-wise ops on the CPU write over a first input that dies at them (SwiGLU
  // over the gate projection, residual adds); false: every tensor gets its own storage.
  bool in_place = true;
  // Records every execute() as Chrome trace events (null: off, at no cost).
  std::shared_ptr<TraceRecorder> trace;
};

struct Split {
  int32_t backend = 0;
  std::vector<int32_t> nodes;  // ids in Plan::graph, in execution order
  std::vector<int32_t> waits;  // earlier splits on other backends that must finish first
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
  // Row splits: per node, the output rows it computes (full for all but row-split parts) and
  // the node whose storage it writes (itself; for a part, the node it is a part of, whose
  // tensor the readers read and which lives in its backend's arena; for an op in place, the
  // storage of its first input).
  std::vector<backends::RowRange> rows;
  std::vector<int32_t> store_of;
  int32_t n_row_splits = 0;
  // Splits may run at the same time (more than one backend, all allowing concurrent access).
  bool concurrent = false;
};

class Scheduler {
 public:
  // backends: in preference order (the declared target first); not owned.
  explicit Scheduler(std::vector<backends::Backend*> backends, SchedulerOptions options = {});
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const std::vector<backends::Backend*>& backends() const { return backends_; }

  // The plan for g (from the cache when a graph of the same signature was planned before).
  Result<std::shared_ptr<const Plan>> plan(const graph::Graph& g);
  // The plan for a step whose graph is fully determined by shape_key (e.g. the token count and
  // output rows): after the first call for a key, neither the graph is built nor its signature
  // hashed, so a cached step costs one small map lookup. build() makes the graph on a miss.
  Result<std::shared_ptr<const Plan>> plan_for_shape(uint64_t shape_key,
                                                     const std::function<graph::Graph()>& build);

  // Runs a plan; returns a host pointer to the output node's tensor (valid until the next
  // execute). Inputs are validated against their nodes' sizes. With options.async and a
  // concurrent plan, splits run on per-backend queues; it returns when all have finished, with
  // the error of the first split that failed (later splits are skipped).
  Result<const float*> execute(const Plan& plan, const backends::StepData& step);

  const SchedulerOptions& options() const { return options_; }

  size_t cached_plans() const { return cache_.size(); }
  void clear_cache() {
    cache_.clear();
    shape_cache_.clear();
  }

 private:
  Result<std::shared_ptr<const Plan>> make_plan(const graph::Graph& g) const;

  struct Queues;  // worker threads, one per backend (scheduler.cpp)
  Status run_split(const Plan& plan, size_t index);
  Status run_sequential(const Plan& plan);
  Status run_queued(const Plan& plan);

  std::vector<backends::Backend*> backends_;
  SchedulerOptions options_;
  std::unique_ptr<Queues> queues_;
  int32_t trace_pid_ = -1;
  size_t trace_tokens_ = 0;
  std::unordered_map<uint64_t, std::shared_ptr<const Plan>> cache_;
  std::unordered_map<uint64_t, std::shared_ptr<const Plan>> shape_cache_;
  std::vector<std::unique_ptr<backends::Buffer>> arenas_;  // per backend
  backends::ExecContext ctx_;
};

}  // namespace geniex::sched
