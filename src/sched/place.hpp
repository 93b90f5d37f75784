// Scheduler pass 1: which backend runs each node of a graph, and why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "core/result.hpp"
#include "graph/graph.hpp"

namespace geniex::sched {

// where[i]: index into backends (-1 for weights, which stay in the model's memory); why[i]: the
// reason shown by `geniex plan`. Inputs go where their first reader runs.
Status place(const graph::Graph& g, const std::vector<backends::Backend*>& backends,
             std::vector<int32_t>& where, std::vector<std::string>& why);

}  // namespace geniex::sched
