// Scheduler passes 1 and 2: placement. Each node goes to a backend of the scheduler's list --
// the first capable one, or the one of least estimated time counting copies (cost model), or
// the one its layer is forced to -- and the reason is recorded for `geniex plan`.
#include "sched/place.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "sched/cost_model.hpp"

namespace geniex::sched {

using graph::Graph;
using graph::Node;
using graph::Op;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Capability {
  std::vector<int32_t> capable;  // backends that can run the node, in preference order
  std::string refusals;          // "opencl: no Q5_1 matmul; ..." from those before the first capable
};

Result<Capability> capability(const Graph& g, const Node& node, const std::vector<backends::Backend*>& backends) {
  Capability c;
  std::string all_refusals;
  for (size_t b = 0; b < backends.size(); ++b) {
    const backends::Support s = backends[b]->supports(g, node);
    if (s.ok) {
      c.capable.push_back(static_cast<int32_t>(b));
      continue;
    }
    std::string r = std::string(backends[b]->name()) + ": " + s.reason;
    if (c.capable.empty()) c.refusals += (c.refusals.empty() ? "" : "; ") + r;
    all_refusals += (all_refusals.empty() ? "" : "; ") + r;
  }
  if (c.capable.empty()) {
    return make_error(ErrorCode::Unsupported, "no backend can run node '" + node.name + "' (" +
                                                  std::string(graph::op_name(node.op)) + "): " + all_refusals);
  }
  return c;
}

// Inputs are written where their first reader runs (elsewhere they are copied).
void place_inputs(const Graph& g, std::vector<int32_t>& where, std::vector<std::string>& why) {
  const auto n = static_cast<size_t>(g.size());
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
}

std::string us_string(double us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), us < 100 ? "%.1fus" : "%.0fus", us);
  return buf;
}

}  // namespace

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
    GX_ASSIGN_OR_RETURN(Capability c, capability(g, node, backends));
    where[i] = c.capable.front();
    why[i] = c.refusals.empty() ? "preferred" : "fallback: " + c.refusals;
  }
  place_inputs(g, where, why);
  return ok_status();
}

// Pass 2: placement by estimated cost. The compute nodes form a chain in topological order;
// state k,b = "node k runs on backend b", and the cost of reaching it is the best predecessor's
// plus the node's time plus a copy for every source that lives elsewhere on that predecessor's
// path (walked back through the back-pointers, which also tells whether an earlier reader on b
// already paid for the same copy). Residual and attention edges reach a dozen nodes back, so
// the walk stays short; inputs are tiny and written where they are read, so they cost nothing.
Status place(const Graph& g, const std::vector<backends::Backend*>& backends, const PlaceOptions& options,
             Placement& out) {
  const auto n = static_cast<size_t>(g.size());
  const size_t n_backends = backends.size();
  out.where.assign(n, -1);
  out.why.assign(n, {});
  out.cost_us.assign(n, 0.0);
  out.copies_us = 0;
  const CostModel cost(options.profile, backends);

  if (!options.profile && options.gpu_layers < 0) {
    GX_TRY(place(g, backends, out.where, out.why));
    for (size_t i = 0; i < n; ++i) {
      if (out.where[i] >= 0) out.cost_us[i] = cost.node_us(static_cast<size_t>(out.where[i]), g, g.nodes()[i]);
    }
    return ok_status();
  }

  // Forced layers: the first non-CPU backend and the first CPU one.
  int32_t gpu = -1, cpu = -1;
  for (size_t b = 0; b < n_backends; ++b) {
    const bool is_cpu = backends[b]->kind() == backends::DeviceKind::Cpu;
    if (!is_cpu && gpu < 0) gpu = static_cast<int32_t>(b);
    if (is_cpu && cpu < 0) cpu = static_cast<int32_t>(b);
  }
  const bool forced = options.gpu_layers >= 0 && gpu >= 0 && cpu >= 0;

  // The chain of compute nodes with their candidates and prefixed reasons.
  std::vector<int32_t> chain;
  std::vector<int32_t> pos(n, -1);
  std::vector<std::vector<int32_t>> cand;
  std::vector<std::string> note;  // reason when a single candidate is left
  std::vector<std::vector<double>> node_cost;
  int32_t last_layer = -1;
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes()[i];
    if (node.op == Op::Weight) {
      out.why[i] = "weights stay in the model's memory";
      continue;
    }
    if (node.op == Op::Input) continue;
    GX_ASSIGN_OR_RETURN(Capability c, capability(g, node, backends));
    std::string why = c.refusals.empty() ? "preferred" : "fallback: " + c.refusals;
    if (forced) {
      if (node.layer >= 0) last_layer = node.layer;
      const int32_t layer = node.layer >= 0 ? node.layer : std::max(last_layer, 0);
      const bool on_gpu = layer < options.gpu_layers;
      const int32_t target = on_gpu ? gpu : cpu;
      const std::string rule = "layer " + std::to_string(layer) + (on_gpu ? " < " : " >= ") + "gpu layers " +
                               std::to_string(options.gpu_layers);
      if (std::find(c.capable.begin(), c.capable.end(), target) != c.capable.end()) {
        c.capable = {target};
        why = "forced: " + rule;
      } else {
        const backends::Support s = backends[static_cast<size_t>(target)]->supports(g, node);
        why = "fallback: " + std::string(backends[static_cast<size_t>(target)]->name()) + ": " + s.reason + " (forced: " + rule + ")";
      }
    }
    pos[i] = static_cast<int32_t>(chain.size());
    chain.push_back(static_cast<int32_t>(i));
    std::vector<double> costs(n_backends, kInf);
    for (int32_t b : c.capable) costs[static_cast<size_t>(b)] = cost.node_us(static_cast<size_t>(b), g, node);
    node_cost.push_back(std::move(costs));
    cand.push_back(std::move(c.capable));
    note.push_back(std::move(why));
  }
  if (chain.empty()) {
    place_inputs(g, out.where, out.why);
    return ok_status();
  }

  const size_t m = chain.size();
  std::vector<std::vector<double>> total(m, std::vector<double>(n_backends, kInf));
  std::vector<std::vector<int8_t>> back(m, std::vector<int8_t>(n_backends, -1));

  // Copies node k needs on backend b when node k-1 ran on p (and everything before on p's best path).
  auto copies_in = [&](size_t k, int32_t b, int32_t p) {
    const Node& node = g.node(chain[k]);
    double sum = 0;
    for (size_t si = 0; si < node.src.size(); ++si) {
      const int32_t s = node.src[si];
      if (s == graph::kNoInput) continue;
      if (std::find(node.src.begin(), node.src.begin() + static_cast<std::ptrdiff_t>(si), s) !=
          node.src.begin() + static_cast<std::ptrdiff_t>(si)) {
        continue;  // the same tensor read twice is copied once
      }
      const Op sop = g.node(s).op;
      if (sop == Op::Weight || sop == Op::Input) continue;
      const auto ks = static_cast<size_t>(pos[static_cast<size_t>(s)]);
      int32_t state = p;
      bool have = false;
      for (size_t kk = k - 1; kk > ks; --kk) {
        if (state == b) {
          const auto& rs = g.node(chain[kk]).src;
          have = have || std::find(rs.begin(), rs.end(), s) != rs.end();
        }
        state = back[kk][static_cast<size_t>(state)];
      }
      if (state != b && !have) {
        sum += cost.copy_us(static_cast<size_t>(state), static_cast<size_t>(b), g.node(s).nbytes());
      }
    }
    return sum;
  };

  for (int32_t b : cand[0]) total[0][static_cast<size_t>(b)] = node_cost[0][static_cast<size_t>(b)];
  for (size_t k = 1; k < m; ++k) {
    for (int32_t b : cand[k]) {
      double best = kInf;
      int32_t arg = -1;
      for (int32_t p : cand[k - 1]) {
        const double before = total[k - 1][static_cast<size_t>(p)];
        if (before == kInf) continue;
        const double c = before + node_cost[k][static_cast<size_t>(b)] + copies_in(k, b, p) +
                         (p != b ? cost.switch_us(static_cast<size_t>(b)) : 0.0);
        if (c < best) {
          best = c;
          arg = p;
        }
      }
      total[k][static_cast<size_t>(b)] = best;
      back[k][static_cast<size_t>(b)] = static_cast<int8_t>(arg);
    }
  }
  int32_t state = -1;
  double best = kInf;
  for (int32_t b : cand[m - 1]) {
    if (total[m - 1][static_cast<size_t>(b)] < best) {
      best = total[m - 1][static_cast<size_t>(b)];
      state = b;
    }
  }
  std::vector<int32_t> chosen(m, -1);
  for (size_t k = m; k-- > 0;) {
    chosen[k] = state;
    if (k > 0) state = back[k][static_cast<size_t>(state)];
  }

  double node_sum = 0;
  for (size_t k = 0; k < m; ++k) {
    const auto i = static_cast<size_t>(chain[k]);
    const int32_t b = chosen[k];
    out.where[i] = b;
    out.cost_us[i] = node_cost[k][static_cast<size_t>(b)];
    node_sum += out.cost_us[i];
    if (cand[k].size() == 1) {
      out.why[i] = std::move(note[k]);
      continue;
    }
    // Against the best alternative, both with the copies they need after the chosen prefix.
    // (a switch of backend counts with the copies: both are the price of moving)
    const auto local = [&](int32_t x) {
      const double moving = k > 0 ? copies_in(k, x, chosen[k - 1]) +
                                        (x != chosen[k - 1] ? cost.switch_us(static_cast<size_t>(x)) : 0.0)
                                  : 0.0;
      return std::make_pair(node_cost[k][static_cast<size_t>(x)], moving);
    };
    const auto [own, own_copy] = local(b);
    int32_t alt = -1;
    std::pair<double, double> alt_cost{kInf, 0};
    for (int32_t x : cand[k]) {
      if (x == b) continue;
      const auto c = local(x);
      if (c.first + c.second < alt_cost.first + alt_cost.second) {
        alt_cost = c;
        alt = x;
      }
    }
    const auto part = [&](int32_t x, double us, double copy) {
      return std::string(backends[static_cast<size_t>(x)]->name()) + " " + us_string(us) +
             (copy > 0 ? " (+copy " + us_string(copy) + ")" : "");
    };
    const double mine = own + own_copy, theirs = alt_cost.first + alt_cost.second;
    const char* rel = mine < theirs ? " < " : mine > theirs ? " > " : " = ";
    std::string why = "cost: " + part(b, own, own_copy) + rel + part(alt, alt_cost.first, alt_cost.second);
    if (mine > theirs) why += ", fewer copies later";
    if (mine == theirs) why += ", preferred";
    if (note[k].rfind("fallback: ", 0) == 0) why += "; " + note[k];
    out.why[i] = std::move(why);
  }
  out.copies_us = best - node_sum;  // copies and backend switches
  place_inputs(g, out.where, out.why);
  return ok_status();
}

}  // namespace geniex::sched
