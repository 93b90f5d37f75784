// Pass 5: which MatMuls to split by rows, between which backends, and where.
#include "sched/row_split.hpp"

#include <cmath>

namespace geniex::sched {

std::vector<RowSplitChoice> choose_row_splits(const graph::Graph& g,
                                              const std::vector<backends::Backend*>& backends,
                                              const std::vector<int32_t>& where,
                                              const RowSplitOptions& options) {
  std::vector<RowSplitChoice> out(static_cast<size_t>(g.size()));
  if (backends.size() < 2) return out;
  const int64_t align = std::max<int64_t>(options.align, 16);
  for (int32_t i = 0; i < g.size(); ++i) {
    const graph::Node& n = g.node(i);
    if (n.op != graph::Op::MatMul || n.ne[0] < options.min_rows) continue;
    const int32_t p = where[static_cast<size_t>(i)];
    if (p < 0) continue;
    backends::Backend* bp = backends[static_cast<size_t>(p)];
    if (!bp->computes_row_ranges() || !bp->host_visible()) continue;
    for (size_t q = 0; q < backends.size(); ++q) {
      if (static_cast<int32_t>(q) == p) continue;
      backends::Backend* bq = backends[q];
      if (!bq->computes_row_ranges() || !bq->host_visible() || !bq->supports(g, n).ok) continue;
      // The part writes into the primary's arena: it must reach any host memory.
      int32_t primary = p, part = static_cast<int32_t>(q);
      if (!bq->uses_any_host_memory()) {
        if (!bp->uses_any_host_memory()) continue;
        primary = static_cast<int32_t>(q);
        part = p;
      }
      // Rows for backend q: its share of the speed (1 / time) of the two.
      double share_q = options.share;
      if (share_q <= 0) {
        const auto b_p = static_cast<size_t>(p);
        const double tp = options.estimate_us ? options.estimate_us(b_p, g, n) : bp->estimate_us(g, n);
        const double tq = options.estimate_us ? options.estimate_us(q, g, n) : bq->estimate_us(g, n);
        share_q = (tp > 0 && tq > 0) ? tp / (tp + tq) : 0.5;
      }
      const int64_t rows = n.ne[0];
      const int64_t rows_q =
          static_cast<int64_t>(std::llround(static_cast<double>(rows) * share_q / static_cast<double>(align))) * align;
      if (rows_q < align || rows - rows_q < align) continue;
      const int64_t part_rows = part == static_cast<int32_t>(q) ? rows_q : rows - rows_q;
      RowSplitChoice& c = out[static_cast<size_t>(i)];
      c.primary = primary;
      c.part = part;
      c.split_row = rows - part_rows;
      c.reason = "row split: rows [0, " + std::to_string(c.split_row) + ") on " +
                 std::string(backends[static_cast<size_t>(primary)]->name()) + ", [" +
                 std::to_string(c.split_row) + ", " + std::to_string(rows) + ") on " +
                 std::string(backends[static_cast<size_t>(part)]->name()) +
                 (options.share > 0 ? " (share given)" : " (by estimated speed)");
      break;
    }
  }
  return out;
}

}  // namespace geniex::sched
