// Scheduler passes 1 and 2: placement. Each node goes to a backend of the scheduler's list --
// the first capable one, or the one of least estimated time counting copies (cost model), or
// the one its layer is forced to -- and the reason is recorded for `geniex plan`.
#include "sched/place.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <set>

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

namespace {

// With a GPU memory budget: per node, whether the budget withholds the GPU backend, and the
// budget's note for its reason.
struct GpuLimits {
  int32_t gpu = -1;
  std::vector<uint8_t> blocked;
  std::vector<std::string> note;
};

// Pass 2: placement by estimated cost. The compute nodes form a chain in topological order;
// state k,b = "node k runs on backend b", and the cost of reaching it is the best predecessor's
// plus the node's time plus a copy for every source that lives elsewhere on that predecessor's
// path (walked back through the back-pointers, which also tells whether an earlier reader on b
// already paid for the same copy). Residual and attention edges reach a dozen nodes back, so
// the walk stays short; inputs are tiny and written where they are read, so they cost nothing.
Status place_cost(const Graph& g, const std::vector<backends::Backend*>& backends, const PlaceOptions& options,
                  const GpuLimits* limits, Placement& out) {
  const auto n = static_cast<size_t>(g.size());
  const size_t n_backends = backends.size();
  out.where.assign(n, -1);
  out.why.assign(n, {});
  out.cost_us.assign(n, 0.0);
  out.copies_us = 0;
  const CostModel cost(options.profile, backends);

  if (!options.profile && options.gpu_layers < 0 && limits == nullptr) {
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
    if (limits != nullptr && limits->blocked[i] && c.capable.size() > 1) {
      const auto it = std::find(c.capable.begin(), c.capable.end(), limits->gpu);
      if (it != c.capable.end()) {
        c.capable.erase(it);
        why = limits->note[i];
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
  if (limits != nullptr) {
    for (size_t k = 0; k < m; ++k) {
      const auto i = static_cast<size_t>(chain[k]);
      const std::string& prefix = limits->note[i];
      if (!prefix.empty() && out.why[i].rfind(prefix, 0) != 0) out.why[i] = prefix + "; " + out.why[i];
    }
  }
  out.copies_us = best - node_sum;  // copies and backend switches
  place_inputs(g, out.where, out.why);
  return ok_status();
}

// Which unit (GpuUnit::key) each node belongs to: its layer; before the first layer the
// embedding, after it the output head. Inputs and weights: no unit (INT32_MIN).
std::vector<int32_t> units_of(const Graph& g) {
  std::vector<int32_t> unit(static_cast<size_t>(g.size()), std::numeric_limits<int32_t>::min());
  bool seen_layer = false;
  for (size_t i = 0; i < unit.size(); ++i) {
    const Node& node = g.nodes()[i];
    if (node.op == Op::Weight || node.op == Op::Input) continue;
    if (node.layer >= 0) seen_layer = true;
    unit[i] = node.layer >= 0 ? node.layer : seen_layer ? kOutputUnit : kEmbeddingUnit;
  }
  return unit;
}

int64_t weight_bytes(const Node& w) { return row_bytes(w.type, w.ne[0]) * w.ne[1] * w.ne[2] * w.ne[3]; }

std::string unit_name(int32_t key) {
  return key == kEmbeddingUnit ? "embedding" : key == kOutputUnit ? "output head" : "layer " + std::to_string(key);
}

// Chooses the units the GPU may run under the budget, from the unconstrained cost-model
// placement `free`: each unit's weights read by its GPU nodes there, and the time those nodes
// save against the CPU less the copies in and out of the unit were it alone on the GPU. When
// everything fits, all units; else greedily by time saved per byte (units saving nothing stay
// on the CPU), each taken when its weights not already held fit what is left.
std::shared_ptr<const GpuBudgetChoice> choose_units(const Graph& g, const std::vector<backends::Backend*>& backends,
                                                    const PlaceOptions& options, const Placement& free, int32_t gpu,
                                                    int32_t cpu) {
  const CostModel cost(options.profile, backends);
  const auto n = static_cast<size_t>(g.size());
  const std::vector<int32_t> unit_of = units_of(g);
  auto choice = std::make_shared<GpuBudgetChoice>();
  choice->budget = options.gpu_memory_bytes;
  choice->overhead = options.gpu_overhead_bytes >= 0 ? options.gpu_overhead_bytes
                                                     : estimate_gpu_overhead_bytes(g, kAssumedKvTokens, 2);
  std::vector<size_t> index_of_key;  // unit index by key + 2
  std::vector<std::vector<std::pair<std::string, int64_t>>> unit_weights;
  std::vector<uint8_t> has_gpu;
  std::vector<std::vector<int32_t>> copied_in;
  for (size_t i = 0; i < n; ++i) {
    const int32_t key = unit_of[i];
    if (key == std::numeric_limits<int32_t>::min()) continue;
    const auto slot = static_cast<size_t>(key + 2);
    if (index_of_key.size() <= slot) index_of_key.resize(slot + 1, SIZE_MAX);
    if (index_of_key[slot] == SIZE_MAX) {
      index_of_key[slot] = choice->units.size();
      GpuUnit u;
      u.key = key;
      u.name = unit_name(key);
      choice->units.push_back(u);
      unit_weights.emplace_back();
      has_gpu.push_back(0);
      copied_in.emplace_back();
      if (key >= 0) ++choice->n_layers;
    }
    if (free.where[i] != gpu) continue;
    const size_t ui = index_of_key[slot];
    GpuUnit& u = choice->units[ui];
    has_gpu[ui] = 1;
    const Node& node = g.nodes()[i];
    if (backends[static_cast<size_t>(cpu)]->supports(g, node).ok) {
      u.saved_us += cost.node_us(static_cast<size_t>(cpu), g, node) - free.cost_us[i];
    }
    std::vector<int32_t>& seen = copied_in[ui];  // a tensor read twice by the unit comes in once
    for (const int32_t s : node.src) {
      if (s == graph::kNoInput || std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
      seen.push_back(s);
      const Node& src = g.node(s);
      if (src.op == Op::Weight) {
        auto& ws = unit_weights[ui];
        if (std::none_of(ws.begin(), ws.end(), [&](const auto& w) { return w.first == src.weight->name; })) {
          ws.emplace_back(src.weight->name, weight_bytes(src));
        }
      } else if (src.op != Op::Input && (free.where[static_cast<size_t>(s)] != gpu || unit_of[static_cast<size_t>(s)] != u.key)) {
        u.saved_us -= cost.copy_us(static_cast<size_t>(cpu), static_cast<size_t>(gpu), src.nbytes());
      }
    }
  }
  // Results read outside the unit (or the graph's output) go back to the CPU; and two switches.
  for (size_t ui = 0; ui < choice->units.size(); ++ui) {
    if (has_gpu[ui]) choice->units[ui].saved_us -= cost.switch_us(static_cast<size_t>(gpu)) + cost.switch_us(static_cast<size_t>(cpu));
  }
  std::vector<uint8_t> sent_back(n, 0);
  for (size_t j = 0; j < n; ++j) {
    const Node& reader = g.nodes()[j];
    if (reader.op == Op::Weight || reader.op == Op::Input) continue;
    for (const int32_t s : reader.src) {
      if (s == graph::kNoInput) continue;
      const auto si = static_cast<size_t>(s);
      if (free.where[si] != gpu || sent_back[si] || g.node(s).op == Op::Input) continue;
      if (free.where[j] == gpu && unit_of[j] == unit_of[si]) continue;
      sent_back[si] = 1;
      choice->units[index_of_key[static_cast<size_t>(unit_of[si] + 2)]].saved_us -=
          cost.copy_us(static_cast<size_t>(gpu), static_cast<size_t>(cpu), g.node(s).nbytes());
    }
  }
  if (const int32_t o = g.output(); o >= 0) {
    const auto oi = static_cast<size_t>(o);
    if (free.where[oi] == gpu && !sent_back[oi]) {
      sent_back[oi] = 1;
      choice->units[index_of_key[static_cast<size_t>(unit_of[oi] + 2)]].saved_us -=
          cost.copy_us(static_cast<size_t>(gpu), static_cast<size_t>(cpu), g.node(o).nbytes());
    }
  }

  const auto need_of = [&](size_t ui) {
    int64_t need = 0;
    for (const auto& [name, bytes] : unit_weights[ui]) {
      if (choice->weights.count(name) == 0) need += bytes;
    }
    return need;
  };
  const auto take = [&](size_t ui) {
    const int64_t need = need_of(ui);
    for (const auto& w : unit_weights[ui]) choice->weights.insert(w.first);
    choice->weight_bytes += need;
    choice->units[ui].on_gpu = true;
    return need;
  };
  // Everything the cost model puts on the GPU, if it fits: then the plan is the unconstrained one.
  int64_t all = 0;
  {
    std::set<std::string> names;
    for (size_t ui = 0; ui < choice->units.size(); ++ui) {
      for (const auto& [name, bytes] : unit_weights[ui]) {
        if (has_gpu[ui] && names.insert(name).second) all += bytes;
      }
    }
  }
  const bool any_gpu = std::any_of(has_gpu.begin(), has_gpu.end(), [](uint8_t h) { return h != 0; });
  const int64_t budget = choice->budget;
  if (budget > 0 && (!any_gpu || all + choice->overhead <= budget)) {
    choice->everything_fits = true;
    for (size_t ui = 0; ui < choice->units.size(); ++ui) {
      if (!has_gpu[ui]) {
        choice->units[ui].why = choice->units[ui].name + ": the cost model keeps it off the gpu";
        continue;
      }
      const int64_t need = take(ui);
      choice->units[ui].why = choice->units[ui].name + " fits (" + bytes_string(need) + "; the whole gpu plan needs " +
                              bytes_string(all + choice->overhead) + ")";
    }
  } else {
    std::vector<size_t> order;
    for (size_t ui = 0; ui < choice->units.size(); ++ui) {
      if (has_gpu[ui]) order.push_back(ui);
    }
    const auto ratio = [&](size_t ui) {
      const double bytes = static_cast<double>(need_of(ui));
      return bytes > 0 ? choice->units[ui].saved_us / bytes : choice->units[ui].saved_us * 1e30;
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ratio(a) > ratio(b); });
    for (size_t ui = 0; ui < choice->units.size(); ++ui) {
      if (!has_gpu[ui]) choice->units[ui].why = choice->units[ui].name + ": the cost model keeps it off the gpu";
    }
    for (const size_t ui : order) {
      GpuUnit& u = choice->units[ui];
      const int64_t need = need_of(ui);
      const int64_t left = budget - choice->overhead - choice->weight_bytes;
      const int64_t shown_left = std::max<int64_t>(left, 0);
      const bool same = bytes_string(need) == bytes_string(shown_left);  // then in bytes
      const std::string amounts =
          "needs " + (same ? std::to_string(need) + " B" : bytes_string(need)) + ", " +
          (same ? std::to_string(shown_left) + " B" : bytes_string(shown_left)) + " left" +
          (choice->weight_bytes == 0 && choice->overhead > 0
               ? " after " + bytes_string(choice->overhead) + " of activations and scratch"
               : "");
      if (u.saved_us <= 0) {
        u.why = u.name + " stays on the cpu: the gpu saves no time (" + us_string(u.saved_us) + " with its copies)";
      } else if (budget > 0 && need <= left) {
        take(ui);
        u.why = u.name + " fits (" + amounts + ", saves " + us_string(u.saved_us) + ")";
      } else {
        u.why = u.name + " does not fit (" + amounts + ")";
      }
    }
  }
  for (const GpuUnit& u : choice->units) {
    if (u.on_gpu && u.key >= 0) ++choice->n_layers_gpu;
  }
  const bool any_chosen = std::any_of(choice->units.begin(), choice->units.end(), [](const GpuUnit& u) { return u.on_gpu; });
  choice->used = any_chosen ? choice->weight_bytes + choice->overhead : 0;
  return choice;
}

}  // namespace

std::string bytes_string(int64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (std::abs(v) >= 1024 && u + 1 < std::size(units)) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 || std::abs(v) >= 10 ? "%.0f" : "%.1f", v);
  std::string s = buf;
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s + " " + units[u];
}

std::string GpuBudgetChoice::summary() const {
  std::string s = std::to_string(n_layers_gpu) + " of " + std::to_string(n_layers) + " layers";
  for (const GpuUnit& u : units) {
    if (u.on_gpu && u.key < 0) s += " + " + u.name;
  }
  return s + ", " + bytes_string(used) + " of " + bytes_string(budget) + " budget";
}

int64_t estimate_gpu_overhead_bytes(const Graph& g, int64_t kv_tokens, int64_t kv_elem_bytes) {
  int64_t working = 0, dequant = 0, kv_rows = 0;
  for (const Node& node : g.nodes()) {
    if (node.op == Op::Weight || node.op == Op::Input) continue;
    auto set = static_cast<int64_t>(node.nbytes());
    for (const int32_t s : node.src) {
      if (s != graph::kNoInput && g.node(s).op != Op::Weight) set += static_cast<int64_t>(g.node(s).nbytes());
    }
    working = std::max(working, set);
    if (node.op == Op::MatMul && node.ne[1] > 1) {
      const Node& w = g.node(node.src[0]);
      dequant = std::max(dequant, w.ne[0] * w.ne[1] * 2);
    }
    if (node.op == Op::Attention) {
      kv_rows = std::max(kv_rows, 2 * std::max(kv_tokens, node.ne[1]) * node.attn.n_head_kv * node.attn.head_dim * kv_elem_bytes);
    }
  }
  return 2 * working + dequant + kv_rows;
}

Status place(const Graph& g, const std::vector<backends::Backend*>& backends, const PlaceOptions& options,
             Placement& out) {
  out.budget.reset();
  if (options.gpu_memory_bytes < 0) return place_cost(g, backends, options, nullptr, out);
  if (options.gpu_layers >= 0) {
    return make_error(ErrorCode::InvalidArgument, "a gpu memory budget and forced gpu layers exclude each other");
  }
  int32_t gpu = -1, cpu = -1;
  for (size_t b = 0; b < backends.size(); ++b) {
    const bool is_cpu = backends[b]->kind() == backends::DeviceKind::Cpu;
    if (!is_cpu && gpu < 0) gpu = static_cast<int32_t>(b);
    if (is_cpu && cpu < 0) cpu = static_cast<int32_t>(b);
  }
  GX_TRY(place_cost(g, backends, options, nullptr, out));
  if (gpu < 0 || cpu < 0) return ok_status();

  std::shared_ptr<const GpuBudgetChoice> choice;
  if (options.budget_memo) {
    const std::lock_guard<std::mutex> lock(options.budget_memo->mutex);
    if (!options.budget_memo->choice) options.budget_memo->choice = choose_units(g, backends, options, out, gpu, cpu);
    choice = options.budget_memo->choice;
  } else {
    choice = choose_units(g, backends, options, out, gpu, cpu);
  }

  // The GPU may run a node of a chosen unit whose weights were counted; nothing else.
  const auto n = static_cast<size_t>(g.size());
  const std::vector<int32_t> unit_of = units_of(g);
  GpuLimits limits;
  limits.gpu = gpu;
  limits.blocked.assign(n, 0);
  limits.note.assign(n, {});
  bool unchanged = true;
  const std::string prefix = "gpu memory budget " + bytes_string(choice->budget) + ": ";
  for (size_t i = 0; i < n; ++i) {
    if (unit_of[i] == std::numeric_limits<int32_t>::min()) continue;
    const auto u = std::find_if(choice->units.begin(), choice->units.end(),
                                [&](const GpuUnit& x) { return x.key == unit_of[i]; });
    bool allowed = u != choice->units.end() && u->on_gpu;
    for (const int32_t s : g.nodes()[i].src) {
      if (s != graph::kNoInput && g.node(s).op == Op::Weight && choice->weights.count(g.node(s).weight->name) == 0) {
        allowed = false;
      }
    }
    limits.blocked[i] = allowed ? 0 : 1;
    if (u != choice->units.end()) limits.note[i] = prefix + u->why;
    if (!allowed && out.where[i] == gpu) unchanged = false;
  }
  if (!unchanged) GX_TRY(place_cost(g, backends, options, &limits, out));
  // Reasons name the budget's verdict on the node's unit (the unconstrained plan's nodes too).
  for (size_t i = 0; i < n; ++i) {
    const std::string& note = limits.note[i];
    if (!note.empty() && out.why[i].rfind(note, 0) != 0) out.why[i] = note + "; " + out.why[i];
  }
  out.budget = choice;
  return ok_status();
}

}  // namespace geniex::sched
