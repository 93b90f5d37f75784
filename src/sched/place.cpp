// Scheduler pass 1: placement. Each node goes to a backend of the scheduler's list; the
// reason is recorded for `geniex plan`.
#include "sched/place.hpp"

namespace geniex::sched {

using graph::Graph;
using graph::Node;
using graph::Op;

// Pass 1: capability-driven placement.
Status place(const Graph& g, const std::vector<backends::Backend*>& backends,
             std::vector<int32_t>& where, std::vector<std::string>& why) {
  const auto n = static_cast<size_t>(g.size());
  where.assign(n, -1);
  why.assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes()[i];
    if (node.op == Op::Weight) {
      why[i] = "weights stay in the model's memory";
      continue;
    }
    if (node.op == Op::Input) continue;  // placed with its first consumer below
    std::string refusals;
    for (size_t b = 0; b < backends.size(); ++b) {
      const backends::Support s = backends[b]->supports(g, node);
      if (s.ok) {
        where[i] = static_cast<int32_t>(b);
        why[i] = refusals.empty() ? "preferred" : "fallback: " + refusals;
        break;
      }
      if (!refusals.empty()) refusals += "; ";
      refusals += std::string(backends[b]->name()) + ": " + s.reason;
    }
    if (where[i] < 0) {
      return make_error(ErrorCode::Unsupported, "no backend can run node '" + node.name + "' (" +
                                                    std::string(graph::op_name(node.op)) + "): " +
                                                    refusals);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (g.nodes()[i].op != Op::Input) continue;
    for (size_t j = i + 1; j < n && where[i] < 0; ++j) {
      for (int32_t s : g.nodes()[j].src) {
        if (s == static_cast<int32_t>(i) && where[j] >= 0) {
          where[i] = where[j];
          break;
        }
      }
    }
    if (where[i] < 0) where[i] = 0;
    why[i] = "input, written where its first reader runs";
  }
  return ok_status();
}

}  // namespace geniex::sched
