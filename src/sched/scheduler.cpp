// Scheduler passes: (1) placement (place.cpp); (5) row splits of large MatMuls
// (row_split.cpp); (2) insert Copy nodes where a node reads a tensor that lives on another
// backend; (3) plan activation offsets per backend by liveness so tensors reuse memory, with
// the extra waits that make reuse safe when queues run at once; (4) cut the graph into splits
// and give each split the splits it waits for. Then execution: one split after another, or on
// one queue (worker thread) per backend, ordered by those waits.
#include "sched/scheduler.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <thread>

#include "sched/cost_model.hpp"
#include "sched/place.hpp"
#include "sched/row_split.hpp"

namespace geniex::sched {

using graph::Graph;
using graph::Node;
using graph::Op;

namespace {

constexpr int64_t kAlign = 64;

int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

bool is_compute(const Node& n) { return n.op != Op::Weight && n.op != Op::Input; }

}  // namespace

// ---- queues ------------------------------------------------------------------------------------

// One worker thread per backend, each taking its backend's splits in plan order. A split
// starts when every split in its waits has finished; a failed split makes every later one
// skip (so nothing waits forever), and execute() returns the first failure.
struct Scheduler::Queues {
  // Every queue exists before the first thread starts: a worker reads `tasks` under the mutex,
  // and growing the vector while one ran would move the deque it is reading (a use after free
  // ASan caught on a two-backend plan).
  explicit Queues(Scheduler& s) : sched(s), tasks(s.backends_.size()) {
    threads.reserve(tasks.size());
    try {
      for (size_t b = 0; b < tasks.size(); ++b) threads.emplace_back([this, b] { loop(b); });
    } catch (...) {  // a thread that could not start: stop and join the ones that did
      shutdown();
      throw;
    }
  }
  ~Queues() { shutdown(); }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    cv.notify_all();
    for (std::thread& t : threads) t.join();
    threads.clear();
  }

  Status run(const Plan& p) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      plan = &p;
      state.assign(p.splits.size(), kPending);
      errors.assign(p.splits.size(), ok_status());
      remaining = p.splits.size();
      failed = false;
      for (size_t s = 0; s < p.splits.size(); ++s) tasks[static_cast<size_t>(p.splits[s].backend)].push_back(s);
    }
    cv.notify_all();
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return remaining == 0; });
    plan = nullptr;
    for (size_t s = 0; s < errors.size(); ++s) {
      if (state[s] == kFailed) return std::move(errors[s]);
    }
    return ok_status();
  }

  void loop(size_t b) {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      cv.wait(lock, [&] { return stop || !tasks[b].empty(); });
      if (tasks[b].empty()) return;  // stop
      const size_t s = tasks[b].front();
      tasks[b].pop_front();
      const Split& split = plan->splits[s];
      cv.wait(lock, [&] {
        return std::all_of(split.waits.begin(), split.waits.end(),
                           [&](int32_t w) { return state[static_cast<size_t>(w)] != kPending; });
      });
      bool skip = failed;
      for (const int32_t w : split.waits) skip = skip || state[static_cast<size_t>(w)] != kDone;
      Status st = ok_status();
      if (!skip) {
        lock.unlock();
        try {
          st = sched.run_split(*plan, s);
        } catch (const std::exception& e) {  // trace bookkeeping; compute() is guarded
          st = make_error(ErrorCode::Internal, std::string("unexpected exception in a split: ") + e.what());
        }
        lock.lock();
      }
      if (skip) {
        state[s] = kSkipped;
      } else if (st) {
        state[s] = kDone;
      } else {
        state[s] = kFailed;
        errors[s] = std::move(st);
        failed = true;
      }
      --remaining;
      cv.notify_all();
    }
  }

  static constexpr uint8_t kPending = 0, kDone = 1, kFailed = 2, kSkipped = 3;
  Scheduler& sched;
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::deque<size_t>> tasks;  // per backend
  std::vector<std::thread> threads;
  const Plan* plan = nullptr;
  std::vector<uint8_t> state;  // per split
  std::vector<Status> errors;  // per split
  size_t remaining = 0;
  bool failed = false;
  bool stop = false;
};

// ---- planning ----------------------------------------------------------------------------------

Scheduler::Scheduler(std::vector<backends::Backend*> backends, SchedulerOptions options)
    : backends_(std::move(backends)), options_(std::move(options)) {
  arenas_.resize(backends_.size());
  // GENIEX_SCHED_SEQUENTIAL=1: one split after another whatever the options (for debugging).
  if (const char* seq = std::getenv("GENIEX_SCHED_SEQUENTIAL"); seq != nullptr && std::strcmp(seq, "1") == 0) {
    options_.async = false;
  }
  if (options_.trace) {
    static std::atomic<int> counter{0};
    trace_pid_ = options_.trace->add_process("geniex scheduler " + std::to_string(++counter));
    for (size_t b = 0; b < backends_.size(); ++b) {
      std::string row = std::string(backends_[b]->name()) + " queue";
      for (size_t c = 0; c < backends_.size(); ++c) {
        if (c != b && backends_[c]->name() == backends_[b]->name()) {
          row += " " + std::to_string(b);
          break;
        }
      }
      options_.trace->name_row(trace_pid_, static_cast<int32_t>(b) + 1, row);
    }
    options_.trace->name_row(trace_pid_, 0, "host (steps)");
  }
}

Scheduler::~Scheduler() = default;

Result<std::shared_ptr<const Plan>> Scheduler::plan(const Graph& g) {
  const uint64_t sig = g.signature();
  auto it = cache_.find(sig);
  if (it != cache_.end()) return it->second;
  GX_ASSIGN_OR_RETURN(auto made, make_plan(g));
  cache_.emplace(sig, made);
  return made;
}

Result<std::shared_ptr<const Plan>> Scheduler::plan_for_shape(uint64_t shape_key,
                                                              const std::function<graph::Graph()>& build) {
  auto it = shape_cache_.find(shape_key);
  if (it != shape_cache_.end()) return it->second;
  const graph::Graph g = build();
  GX_ASSIGN_OR_RETURN(auto made, plan(g));
  shape_cache_.emplace(shape_key, made);
  return made;
}

Result<std::shared_ptr<const Plan>> Scheduler::make_plan(const Graph& g) const {
  const auto t_start = std::chrono::steady_clock::now();
  if (backends_.empty()) return make_error(ErrorCode::InvalidArgument, "scheduler: no backends");
  if (g.output() < 0) return make_error(ErrorCode::Internal, "scheduler: graph has no output");

  Placement placed;
  GX_TRY(place(g, backends_, options_.placement, placed));
  const std::vector<int32_t>& where = placed.where;
  const std::vector<std::string>& why = placed.why;

  std::vector<RowSplitChoice> row_splits(static_cast<size_t>(g.size()));
  if (options_.row_split) {
    RowSplitOptions ro;
    ro.min_rows = options_.min_rows;
    ro.share = options_.split_share;
    // Speeds from the cost model: the device profile's measured rates where it has them.
    const CostModel cost(options_.placement.profile, backends_);
    ro.estimate_us = [&cost](size_t b, const Graph& graph, const Node& node) {
      return cost.node_us(b, graph, node);
    };
    row_splits = choose_row_splits(g, backends_, where, ro);
  }

  // Pass 2: rebuild the graph with Copy nodes; one copy per (tensor, destination backend). A
  // row-split node is preceded by its part (so the part's queue can start before the
  // primary's backend reaches the node).
  auto plan = std::make_shared<Plan>();
  Graph& out = plan->graph;
  std::vector<int32_t> new_id(static_cast<size_t>(g.size()), -1);
  std::map<std::pair<int32_t, int32_t>, int32_t> copies;  // (new src id, backend) -> copy id
  auto push = [&](Node node, int32_t origin, int32_t backend, std::string reason) {
    const int32_t id = out.add(std::move(node));
    plan->origin.push_back(origin);
    plan->backend_of.push_back(backend);
    plan->reason.push_back(std::move(reason));
    plan->rows.push_back({});
    plan->store_of.push_back(id);
    return id;
  };
  auto map_sources = [&](Node& node, int32_t b) {
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
  };
  // Parts are emitted as early as their inputs allow (looking a few nodes ahead), so the
  // parts of neighbouring splits (ffn_gate and ffn_up read the same input) form one split
  // on their backend and the primaries another, and the two run at once.
  constexpr int32_t kLookahead = 8;
  std::vector<int32_t> part_of(static_cast<size_t>(g.size()), -1);  // original id -> part id
  auto emit_part = [&](int32_t j) {
    const RowSplitChoice& rs = row_splits[static_cast<size_t>(j)];
    Node part = g.node(j);
    map_sources(part, rs.part);
    part.name += ".rows";
    const int32_t id = push(std::move(part), j, rs.part, rs.reason);
    plan->rows[static_cast<size_t>(id)] = {rs.split_row, g.node(j).ne[0]};
    part_of[static_cast<size_t>(j)] = id;
    ++plan->n_row_splits;
  };
  for (int32_t i = 0; i < g.size(); ++i) {
    const RowSplitChoice& rs = row_splits[static_cast<size_t>(i)];
    int32_t b = where[static_cast<size_t>(i)];
    std::string reason = why[static_cast<size_t>(i)];
    if (rs.part >= 0) {
      if (part_of[static_cast<size_t>(i)] < 0) emit_part(i);
      for (int32_t j = i + 1; j < std::min(g.size(), i + 1 + kLookahead); ++j) {
        if (row_splits[static_cast<size_t>(j)].part < 0 || part_of[static_cast<size_t>(j)] >= 0) continue;
        bool ready = true;
        for (int32_t src : g.node(j).src) {
          ready = ready && (src == graph::kNoInput || new_id[static_cast<size_t>(src)] >= 0);
        }
        if (ready) emit_part(j);
      }
      if (rs.primary != b) reason = "moved for the row split (" + reason + ")";
      b = rs.primary;
      reason += "; " + rs.reason;
    }
    Node node = g.node(i);
    map_sources(node, b);
    const int32_t id = push(std::move(node), i, b, std::move(reason));
    if (rs.part >= 0) {
      plan->rows[static_cast<size_t>(id)] = {0, rs.split_row};
      plan->store_of[static_cast<size_t>(part_of[static_cast<size_t>(i)])] = id;
    }
    new_id[static_cast<size_t>(i)] = id;
  }
  out.set_output(new_id[static_cast<size_t>(g.output())]);
  const auto n = static_cast<size_t>(out.size());

  // Who touches each tensor (by storage owner): its writers (the node and its row-split
  // parts) and its readers. Readers always name the owner, never a part.
  std::vector<std::vector<int32_t>> writers(n), readers(n);
  for (int32_t i = 0; i < out.size(); ++i) {
    if (is_compute(out.node(i))) writers[static_cast<size_t>(plan->store_of[static_cast<size_t>(i)])].push_back(i);
    for (int32_t s : out.node(i).src) {
      if (s != graph::kNoInput) readers[static_cast<size_t>(s)].push_back(i);
    }
  }

  // Pass 3: liveness-based offsets. A tensor lives from its first writer to its last reader
  // (the output lives to the end); freed ranges are reused first-fit, neighbours merged.
  // Under concurrent queues a reused range must also wait for every access to the tensors
  // that lived there before: those on another queue become waits of the new tensor's writers.
  std::vector<int32_t> last_use(n, -1);
  for (size_t i = 0; i < n; ++i) {
    for (const int32_t r : readers[i]) last_use[i] = std::max(last_use[i], r);
  }
  last_use[static_cast<size_t>(out.output())] = out.size();

  // In place: an element-wise op on the CPU whose first input dies at it (same size and type,
  // every tenant and reader of that storage on the CPU too) writes over it: the FFN's SwiGLU
  // over the gate projection, the residual adds over the stream, one activation tensor fewer
  // alive at the FFN's peak. The CPU compute loop orders the input's earlier readers before
  // the op (its memory hazards), and these kernels read each element before writing it.
  for (int32_t i = 0; i < out.size() && options_.in_place; ++i) {
    const auto si = static_cast<size_t>(i);
    const Node& node = out.node(i);
    if (node.op != Op::SwiGlu && node.op != Op::GeGlu && node.op != Op::Add && node.op != Op::Scale) continue;
    const int32_t b = plan->backend_of[si];
    if (b < 0 || backends_[static_cast<size_t>(b)]->kind() != backends::DeviceKind::Cpu) continue;
    if (plan->store_of[si] != i || !plan->rows[si].full()) continue;
    const int32_t s = node.src[0];
    if (s == graph::kNoInput || !is_compute(out.node(s)) || s == out.output()) continue;
    const Node& src = out.node(s);
    if (src.nbytes() != node.nbytes() || src.type != node.type || last_use[static_cast<size_t>(s)] != i) continue;
    const int32_t root = plan->store_of[static_cast<size_t>(s)];
    bool ok = true;
    for (const int32_t k : {node.src[1], node.src[2]}) {
      if (k != graph::kNoInput && plan->store_of[static_cast<size_t>(k)] == root) ok = false;  // Add(x, x)
    }
    for (int32_t t = 0; t < out.size() && ok; ++t) {
      if (plan->store_of[static_cast<size_t>(t)] != root) continue;
      if (plan->backend_of[static_cast<size_t>(t)] != b || !plan->rows[static_cast<size_t>(t)].full()) ok = false;
      if (t != s && last_use[static_cast<size_t>(t)] > i) ok = false;
      for (const int32_t r : readers[static_cast<size_t>(t)]) ok = ok && plan->backend_of[static_cast<size_t>(r)] == b;
    }
    for (const int32_t r : readers[si]) ok = ok && plan->backend_of[static_cast<size_t>(r)] == b;
    if (!ok) continue;
    plan->store_of[si] = root;
    auto& lu = last_use[static_cast<size_t>(root)];
    lu = std::max({lu, last_use[si], i});
  }
  plan->offset.assign(n, -1);
  plan->arena_bytes.assign(backends_.size(), 0);
  struct Range {
    int64_t offset, size;
  };
  struct Dead {
    int64_t offset, size;
    int32_t tensor;  // whose accessors a new tensor over this range must wait for
  };
  std::vector<std::vector<Range>> free_lists(backends_.size());
  std::vector<std::vector<Dead>> dead(backends_.size());
  std::vector<std::vector<int32_t>> mem_waits(n);  // per owner: tensors whose accessors come first
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
  auto allocate = [&](int32_t owner) {
    const int32_t b = plan->backend_of[static_cast<size_t>(owner)];
    const int64_t size = align_up(static_cast<int64_t>(out.node(owner).nbytes()));
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
    plan->offset[static_cast<size_t>(owner)] = off;
    auto& dl = dead[static_cast<size_t>(b)];
    for (auto d = dl.begin(); d != dl.end();) {
      if (d->offset < off + size && off < d->offset + d->size) {
        mem_waits[static_cast<size_t>(owner)].push_back(d->tensor);
        // Fully covered: later tenants wait for this one's accessors, which come after.
        if (d->offset >= off && d->offset + d->size <= off + size) {
          d = dl.erase(d);
          continue;
        }
      }
      ++d;
    }
    const int32_t end = std::max(last_use[static_cast<size_t>(owner)], owner);
    dying[static_cast<size_t>(end)].push_back(owner);
  };
  // Inputs are written before the first node runs, so they are placed first and live from
  // the start; everything else from its first writer on.
  std::vector<int32_t> order;
  for (int32_t i = 0; i < out.size(); ++i) if (out.node(i).op == Op::Input) order.push_back(i);
  for (int32_t i = 0; i < out.size(); ++i) if (out.node(i).op != Op::Input) order.push_back(i);
  for (const int32_t i : order) {
    const Node& node = out.node(i);
    const int32_t owner = plan->store_of[static_cast<size_t>(i)];
    if (node.op != Op::Weight && plan->backend_of[static_cast<size_t>(i)] >= 0 &&
        plan->offset[static_cast<size_t>(owner)] < 0) {
      allocate(owner);
    }
    // Free what dies at this node only after its own output is placed: an op may not write
    // over its inputs. Inputs free nothing (they are placed before any node runs).
    if (node.op == Op::Input) continue;
    for (int32_t d : dying[static_cast<size_t>(i)]) {
      const auto b = static_cast<size_t>(plan->backend_of[static_cast<size_t>(d)]);
      const Range r{plan->offset[static_cast<size_t>(d)], align_up(static_cast<int64_t>(out.node(d).nbytes()))};
      release(b, r);
      dead[b].push_back({r.offset, r.size, d});
    }
  }

  // Pass 4: waits per node (on other backends only: a queue runs its own nodes in order),
  // then splits: runs of nodes on one backend, cut where a node needs a split of another
  // backend that the current split does not already wait for, so work that needs nothing
  // new starts early.
  auto queue_of = [&](int32_t id) { return plan->backend_of[static_cast<size_t>(id)]; };
  std::vector<int32_t> split_of(n, -1);
  std::vector<int32_t> need(backends_.size(), -1);  // current split's waits per backend
  for (int32_t i = 0; i < out.size(); ++i) {
    const Node& node = out.node(i);
    if (!is_compute(node)) continue;
    const int32_t b = queue_of(i);
    std::vector<int32_t> req(backends_.size(), -1);
    auto require = [&](int32_t a) {
      if (!is_compute(out.node(a)) || queue_of(a) == b) return;
      const int32_t s = split_of[static_cast<size_t>(a)];
      req[static_cast<size_t>(queue_of(a))] = std::max(req[static_cast<size_t>(queue_of(a))], s);
    };
    for (int32_t s : node.src) {
      if (s == graph::kNoInput) continue;
      for (const int32_t w : writers[static_cast<size_t>(s)]) require(w);
    }
    for (const int32_t t : mem_waits[static_cast<size_t>(plan->store_of[static_cast<size_t>(i)])]) {
      for (const int32_t w : writers[static_cast<size_t>(t)]) require(w);
      for (const int32_t r : readers[static_cast<size_t>(t)]) require(r);
    }
    bool cut = plan->splits.empty() || plan->splits.back().backend != b;
    for (size_t q = 0; q < req.size() && !cut; ++q) cut = req[q] > need[q];
    if (cut) {
      plan->splits.push_back({b, {}, {}});
      std::fill(need.begin(), need.end(), -1);
    }
    for (size_t q = 0; q < req.size(); ++q) need[q] = std::max(need[q], req[q]);
    Split& split = plan->splits.back();
    split.nodes.push_back(i);
    split_of[static_cast<size_t>(i)] = static_cast<int32_t>(plan->splits.size()) - 1;
    split.waits.clear();
    for (const int32_t w : need) {
      if (w >= 0) split.waits.push_back(w);
    }
  }

  std::set<int32_t> used;
  bool concurrent_ok = true;
  for (const Split& s : plan->splits) {
    used.insert(s.backend);
    concurrent_ok = concurrent_ok && backends_[static_cast<size_t>(s.backend)]->concurrent_host_access();
  }
  plan->concurrent = used.size() > 1 && concurrent_ok;

  plan->planning_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
  return std::shared_ptr<const Plan>(std::move(plan));
}

// ---- execution ---------------------------------------------------------------------------------

namespace {
// A backend's compute() with exceptions turned into errors (a queue's thread must not throw).
Status guarded_compute(backends::Backend& be, std::span<const int32_t> nodes, backends::ExecContext& ctx) {
  try {
    return be.compute(nodes, ctx);
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::OutOfMemory, std::string(be.name()) + ": out of memory");
  } catch (const std::exception& e) {
    return make_error(ErrorCode::Internal, std::string(be.name()) + ": unexpected exception: " + e.what());
  }
}
}  // namespace

Status Scheduler::run_split(const Plan& plan, size_t index) {
  const Split& split = plan.splits[index];
  backends::Backend* be = backends_[static_cast<size_t>(split.backend)];
  TraceRecorder* tr = options_.trace.get();
  if (tr == nullptr) return guarded_compute(*be, split.nodes, ctx_);
  // Traced: copies and computation are separate calls, one event each.
  const Graph& g = plan.graph;
  const std::span<const int32_t> nodes(split.nodes);
  size_t begin = 0;
  while (begin < nodes.size()) {
    const bool copy = g.node(nodes[begin]).op == Op::Copy;
    size_t end = begin + 1;
    while (end < nodes.size() && (g.node(nodes[end]).op == Op::Copy) == copy) ++end;
    const auto run = nodes.subspan(begin, end - begin);
    const double t0 = tr->now_us();
    Status st = guarded_compute(*be, run, ctx_);
    const double t1 = tr->now_us();
    TraceEvent e;
    const Node& first = g.node(run.front());
    const Node& last = g.node(run.back());
    e.name = copy ? "copy " + first.name : first.name;
    if (run.size() > 1) e.name += (copy ? " +" + std::to_string(run.size() - 1) : " .. " + last.name);
    e.cat = copy ? "copy" : "split";
    e.pid = trace_pid_;
    e.tid = split.backend + 1;
    e.ts_us = t0;
    e.dur_us = t1 - t0;
    e.args.push_back({"backend", std::string(be->name())});
    e.args.push_back({"first", first.name});
    e.args.push_back({"last", last.name});
    if (first.layer >= 0 || last.layer >= 0) {
      e.args.push_back({"layers", std::to_string(first.layer) + ".." + std::to_string(last.layer)});
    }
    for (const int32_t id : run) {
      const backends::RowRange r = plan.rows[static_cast<size_t>(id)];
      if (!r.full()) {
        e.args.push_back({"rows " + g.node(id).name, std::to_string(r.begin) + ".." + std::to_string(r.end) +
                                                        " of " + std::to_string(g.node(id).ne[0])});
      }
    }
    e.num_args.push_back({"split", static_cast<double>(index)});
    e.num_args.push_back({"nodes", static_cast<double>(run.size())});
    e.num_args.push_back({"layer", static_cast<double>(first.layer)});
    e.num_args.push_back({"n_tokens", static_cast<double>(trace_tokens_)});
    tr->add(std::move(e));
    if (!st) return st;
    begin = end;
  }
  return ok_status();
}

Status Scheduler::run_sequential(const Plan& plan) {
  for (size_t s = 0; s < plan.splits.size(); ++s) GX_TRY(run_split(plan, s));
  return ok_status();
}

Status Scheduler::run_queued(const Plan& plan) {
  if (!queues_) queues_ = std::make_unique<Queues>(*this);
  return queues_->run(plan);
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
  ctx_.rows = plan.rows;
  for (int32_t i = 0; i < g.size(); ++i) {
    const Node& node = g.node(i);
    const auto si = static_cast<size_t>(i);
    if (node.op == Op::Weight) {
      ctx_.data[si] = const_cast<uint8_t*>(node.weight->data);
      continue;
    }
    const int32_t owner = plan.store_of[si];
    if (owner != i) continue;  // a row-split part: set below, once its owner has storage
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
  for (int32_t i = 0; i < g.size(); ++i) {
    const auto si = static_cast<size_t>(i);
    if (plan.store_of[si] != i) ctx_.data[si] = ctx_.data[static_cast<size_t>(plan.store_of[si])];
  }

  TraceRecorder* tr = options_.trace.get();
  const double t0 = tr != nullptr ? tr->now_us() : 0;
  trace_tokens_ = step.tokens.size();
  const bool queued = options_.async && plan.concurrent && plan.splits.size() > 1;
  const Status st = queued ? run_queued(plan) : run_sequential(plan);
  if (tr != nullptr) {
    TraceEvent e;
    e.name = (step.tokens.size() == 1 ? "decode step" : "prefill step");
    e.cat = "step";
    e.pid = trace_pid_;
    e.tid = 0;
    e.ts_us = t0;
    e.dur_us = tr->now_us() - t0;
    e.args.push_back({"mode", queued ? "queues" : "sequential"});
    e.num_args.push_back({"n_tokens", static_cast<double>(step.tokens.size())});
    e.num_args.push_back({"splits", static_cast<double>(plan.splits.size())});
    e.num_args.push_back({"row_splits", static_cast<double>(plan.n_row_splits)});
    for (size_t b = 0; b < backends_.size(); ++b) {
      const std::string name(backends_[b]->name());
      e.num_args.push_back({"arena_bytes " + name + " " + std::to_string(b), static_cast<double>(plan.arena_bytes[b])});
      e.num_args.push_back({"scratch_bytes " + name + " " + std::to_string(b),
                            static_cast<double>(backends_[b]->scratch_bytes())});
    }
    tr->add(std::move(e));
  }
  if (!st) return st.error();
  return static_cast<const float*>(ctx_.data[static_cast<size_t>(g.output())]);
}

}  // namespace geniex::sched
