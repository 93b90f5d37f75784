// Scheduler passes: (1) placement (place.cpp); (2) insert Copy nodes where a node
// reads a tensor that lives on another backend and cut the graph into splits; (3) plan
// activation offsets per backend by liveness so tensors reuse memory. Then execution.
#include "sched/scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "sched/place.hpp"

namespace geniex::sched {

using graph::Graph;
using graph::Node;
using graph::Op;

namespace {

constexpr int64_t kAlign = 64;

int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

}  // namespace

Scheduler::Scheduler(std::vector<backends::Backend*> backends) : backends_(std::move(backends)) {
  arenas_.resize(backends_.size());
}

Result<std::shared_ptr<const Plan>> Scheduler::plan(const Graph& g) {
  const uint64_t sig = g.signature();
  auto it = cache_.find(sig);
  if (it != cache_.end()) return it->second;
  GX_ASSIGN_OR_RETURN(auto made, make_plan(g));
  cache_.emplace(sig, made);
  return made;
}

Result<std::shared_ptr<const Plan>> Scheduler::make_plan(const Graph& g) const {
  const auto t_start = std::chrono::steady_clock::now();
  if (backends_.empty()) return make_error(ErrorCode::InvalidArgument, "scheduler: no backends");
  if (g.output() < 0) return make_error(ErrorCode::Internal, "scheduler: graph has no output");

  std::vector<int32_t> where;
  std::vector<std::string> why;
  GX_TRY(place(g, backends_, where, why));

  // Pass 2: rebuild the graph with Copy nodes; one copy per (tensor, destination backend).
  auto plan = std::make_shared<Plan>();
  Graph& out = plan->graph;
  std::vector<int32_t> new_id(static_cast<size_t>(g.size()), -1);
  std::map<std::pair<int32_t, int32_t>, int32_t> copies;  // (new src id, backend) -> copy id
  auto push = [&](Node node, int32_t origin, int32_t backend, std::string reason) {
    const int32_t id = out.add(std::move(node));
    plan->origin.push_back(origin);
    plan->backend_of.push_back(backend);
    plan->reason.push_back(std::move(reason));
    return id;
  };
  for (int32_t i = 0; i < g.size(); ++i) {
    Node node = g.node(i);
    const int32_t b = where[static_cast<size_t>(i)];
    for (int32_t& s : node.src) {
      if (s == graph::kNoInput) continue;
      s = new_id[static_cast<size_t>(s)];
      const int32_t sb = plan->backend_of[static_cast<size_t>(s)];
      if (sb < 0 || sb == b) continue;  // weights are read in place
      const auto key = std::make_pair(s, b);
      auto found = copies.find(key);
      if (found == copies.end()) {
        const Node& src = out.node(s);
        Node copy;
        copy.op = Op::Copy;
        copy.type = src.type;
        copy.ne = src.ne;
        copy.src = {s, graph::kNoInput, graph::kNoInput};
        copy.name = src.name + ".to_" + std::string(backends_[static_cast<size_t>(b)]->name());
        copy.layer = src.layer;
        const int32_t cid =
            push(std::move(copy), -1, b,
                 "copy from " + std::string(backends_[static_cast<size_t>(sb)]->name()));
        found = copies.emplace(key, cid).first;
        ++plan->n_copies;
      }
      s = found->second;
    }
    const int32_t id = push(std::move(node), i, b, why[static_cast<size_t>(i)]);
    new_id[static_cast<size_t>(i)] = id;
  }
  out.set_output(new_id[static_cast<size_t>(g.output())]);

  // Splits: maximal runs of compute nodes on one backend, in order.
  for (int32_t i = 0; i < out.size(); ++i) {
    const Op op = out.node(i).op;
    if (op == Op::Weight || op == Op::Input) continue;
    const int32_t b = plan->backend_of[static_cast<size_t>(i)];
    if (plan->splits.empty() || plan->splits.back().backend != b) plan->splits.push_back({b, {}});
    plan->splits.back().nodes.push_back(i);
  }

  // Pass 3: liveness-based offsets. A tensor lives from its producer to its last reader (the
  // output lives to the end); freed ranges are reused first-fit, neighbours merged.
  const auto n = static_cast<size_t>(out.size());
  std::vector<int32_t> last_use(n, -1);
  for (int32_t i = 0; i < out.size(); ++i) {
    for (int32_t s : out.node(i).src) {
      if (s != graph::kNoInput) last_use[static_cast<size_t>(s)] = i;
    }
  }
  last_use[static_cast<size_t>(out.output())] = out.size();
  plan->offset.assign(n, -1);
  plan->arena_bytes.assign(backends_.size(), 0);
  struct Range {
    int64_t offset, size;
  };
  std::vector<std::vector<Range>> free_lists(backends_.size());
  std::vector<std::vector<int32_t>> dying(n + 1);
  auto release = [&](size_t b, Range r) {
    auto& fl = free_lists[b];
    fl.push_back(r);
    std::sort(fl.begin(), fl.end(), [](const Range& x, const Range& y) { return x.offset < y.offset; });
    std::vector<Range> merged;
    for (const Range& x : fl) {
      if (!merged.empty() && merged.back().offset + merged.back().size == x.offset) merged.back().size += x.size;
      else merged.push_back(x);
    }
    fl = std::move(merged);
  };
  // Inputs are written before the first node runs, so they are placed first and live from
  // the start; everything else from its producer on.
  std::vector<int32_t> order;
  for (int32_t i = 0; i < out.size(); ++i) if (out.node(i).op == Op::Input) order.push_back(i);
  for (int32_t i = 0; i < out.size(); ++i) if (out.node(i).op != Op::Input) order.push_back(i);
  for (const int32_t i : order) {
    const Node& node = out.node(i);
    const int32_t b = plan->backend_of[static_cast<size_t>(i)];
    if (node.op != Op::Weight && b >= 0) {
      const int64_t size = align_up(static_cast<int64_t>(node.nbytes()));
      auto& fl = free_lists[static_cast<size_t>(b)];
      int64_t off = -1;
      for (auto r = fl.begin(); r != fl.end(); ++r) {
        if (r->size >= size) {
          off = r->offset;
          r->offset += size;
          r->size -= size;
          if (r->size == 0) fl.erase(r);
          break;
        }
      }
      if (off < 0) {
        off = plan->arena_bytes[static_cast<size_t>(b)];
        plan->arena_bytes[static_cast<size_t>(b)] += size;
      }
      plan->offset[static_cast<size_t>(i)] = off;
      const int32_t end = last_use[static_cast<size_t>(i)] < 0 ? i : last_use[static_cast<size_t>(i)];
      dying[static_cast<size_t>(end)].push_back(i);
    }
    // Free what dies at this node only after its own output is placed: an op may not write
    // over its inputs. Inputs free nothing (they are placed before any node runs).
    if (node.op == Op::Input) continue;
    for (int32_t d : dying[static_cast<size_t>(i)]) {
      release(static_cast<size_t>(plan->backend_of[static_cast<size_t>(d)]),
              {plan->offset[static_cast<size_t>(d)], align_up(static_cast<int64_t>(out.node(d).nbytes()))});
    }
  }

  plan->planning_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
  return std::shared_ptr<const Plan>(std::move(plan));
}

Result<const float*> Scheduler::execute(const Plan& plan, const backends::StepData& step) {
  const Graph& g = plan.graph;
  for (size_t b = 0; b < backends_.size(); ++b) {
    const auto need = static_cast<size_t>(plan.arena_bytes[b]);
    if (need == 0) continue;
    if (!arenas_[b] || arenas_[b]->size() < need) {
      arenas_[b].reset();
      GX_ASSIGN_OR_RETURN(arenas_[b], backends_[b]->allocate(need));
    }
  }
  ctx_.graph = &g;
  ctx_.step = &step;
  ctx_.data.assign(static_cast<size_t>(g.size()), nullptr);
  for (int32_t i = 0; i < g.size(); ++i) {
    const Node& node = g.node(i);
    const auto si = static_cast<size_t>(i);
    if (node.op == Op::Weight) {
      ctx_.data[si] = const_cast<uint8_t*>(node.weight->data);
      continue;
    }
    const int32_t b = plan.backend_of[si];
    ctx_.data[si] = static_cast<uint8_t*>(arenas_[static_cast<size_t>(b)]->data()) + plan.offset[si];
    if (node.op == Op::Input) {
      std::span<const int32_t> src;
      switch (node.input) {
        case graph::InputKind::Tokens: src = step.tokens; break;
        case graph::InputKind::Positions: src = step.positions; break;
        case graph::InputKind::OutputRows: src = step.output_rows; break;
        case graph::InputKind::None: break;
      }
      if (static_cast<int64_t>(src.size()) != node.ne[0]) {
        return make_error(ErrorCode::Internal, "scheduler: input '" + node.name + "' expects " +
                                                   std::to_string(node.ne[0]) + " values, got " +
                                                   std::to_string(src.size()));
      }
      if (!backends_[static_cast<size_t>(b)]->host_visible()) {
        return make_error(ErrorCode::Unsupported, "scheduler: uploads to non-host memory are not implemented");
      }
      std::memcpy(ctx_.data[si], src.data(), src.size() * sizeof(int32_t));
    }
  }
  for (const Split& split : plan.splits) {
    GX_TRY(backends_[static_cast<size_t>(split.backend)]->compute(split.nodes, ctx_));
  }
  return static_cast<const float*>(ctx_.data[static_cast<size_t>(g.output())]);
}

}  // namespace geniex::sched
