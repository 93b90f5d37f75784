// Scheduler passes 1 and 2: which backend runs each node of a graph, and why -- by capability,
// then by estimated cost including the copies between backends, or by layer when forced.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "core/result.hpp"
#include "graph/graph.hpp"
#include "sched/profile.hpp"

namespace geniex::sched {

struct PlaceOptions {
  // Rates for the cost model. Null: capability only (each node on the first backend in
  // preference order that supports it).
  std::shared_ptr<const DeviceProfile> profile;
  // >= 0: layers [0, gpu_layers) run on the first non-CPU backend, the rest on the CPU (a node
  // outside any layer -- embedding, output -- goes with its neighbouring layer); a backend
  // that cannot run a node still falls back. < 0: the cost model decides.
  int32_t gpu_layers = -1;
};

// Per node of the input graph.
struct Placement {
  std::vector<int32_t> where;      // index into backends; -1 for weights (they stay in the model's memory)
  std::vector<std::string> why;    // the reason shown by `geniex plan`
  std::vector<double> cost_us;     // estimated time on that backend (0 for inputs and weights)
  double copies_us = 0;            // estimated time of the copies and backend switches it implies
};

// Capability-only placement (the first capable backend in order). Inputs go where their first
// reader runs.
Status place(const graph::Graph& g, const std::vector<backends::Backend*>& backends,
             std::vector<int32_t>& where, std::vector<std::string>& why);

// Placement with options: among the backends that can run each node, the assignment of least
// total estimated time, node costs plus one copy per (tensor, destination backend), found by
// dynamic programming over the topological order; ties go to the earlier backend.
Status place(const graph::Graph& g, const std::vector<backends::Backend*>& backends,
             const PlaceOptions& options, Placement& out);

}  // namespace geniex::sched
