// Scheduler pass 5: load balancing by splitting one large MatMul by output rows between two
// backends, in proportion to their speed. The node keeps its full output tensor, in the arena
// of one backend (the primary, which computes the first rows); a second node, the part, runs
// the remaining rows on the other backend and writes them in place into that same tensor, so
// readers see one tensor and each element is computed by the same kernel code as unsplit
// (bit-identical results where the two backends' kernels agree).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "graph/graph.hpp"

namespace geniex::sched {

struct RowSplitOptions {
  int64_t min_rows = 1024;  // split only MatMuls with at least this many output rows
  double share = 0;         // rows for the second backend (0: from estimate_us)
  int64_t align = 64;       // part boundaries at multiples of this (kernels' row tiles)
  // Time of a node on backend b (the cost model's); null: Backend::estimate_us.
  std::function<double(size_t b, const graph::Graph&, const graph::Node&)> estimate_us;
};

struct RowSplitChoice {
  int32_t primary = -1;    // backend keeping the output tensor, computing rows [0, split_row)
  int32_t part = -1;       // backend computing rows [split_row, N) into it; -1: no split
  int64_t split_row = 0;
  std::string reason;      // for `geniex plan`
};

// One choice per node of g (part == -1 where the node is not split). where: pass 1/2's
// placement. A pair qualifies when both backends run the node and compute row ranges, and
// the part's backend can write into the primary's host memory (uses_any_host_memory).
std::vector<RowSplitChoice> choose_row_splits(const graph::Graph& g,
                                              const std::vector<backends::Backend*>& backends,
                                              const std::vector<int32_t>& where,
                                              const RowSplitOptions& options);

}  // namespace geniex::sched
