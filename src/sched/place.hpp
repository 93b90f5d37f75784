// Scheduler passes 1 and 2: which backend runs each node of a graph, and why -- by capability,
// then by estimated cost including the copies between backends, or by layer when forced.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "core/result.hpp"
#include "graph/graph.hpp"
#include "sched/profile.hpp"

namespace geniex::sched {

struct GpuBudgetMemo;

struct PlaceOptions {
  // Rates for the cost model. Null: capability only (each node on the first backend in
  // preference order that supports it).
  std::shared_ptr<const DeviceProfile> profile;
  // >= 0: layers [0, gpu_layers) run on the first non-CPU backend, the rest on the CPU (a node
  // outside any layer -- embedding, output -- goes with its neighbouring layer); a backend
  // that cannot run a node still falls back. < 0: the cost model decides.
  int32_t gpu_layers = -1;
  // >= 0: a memory budget in bytes for the first non-CPU backend (exclusive with gpu_layers).
  // The GPU may run only the units (transformer blocks; the embedding and the output head as
  // units of their own) chosen to fit: those with the most estimated time saved per byte
  // first (place_under_budget below); within them the cost model decides as without a budget,
  // and a budget that holds everything the cost-model plan puts on the GPU gives that plan
  // unchanged. -1: no budget.
  int64_t gpu_memory_bytes = -1;
  // Bytes the GPU holds besides weights once it runs anything: activations and scratch (KV rows
  // gathered for attention, dequantized weights). -1: estimated from the graph being placed
  // (estimate_gpu_overhead_bytes).
  int64_t gpu_overhead_bytes = -1;
  // The units chosen under the budget, shared by every plan that copies these options (all
  // step shapes of a model): the first placement chooses, later ones reuse its choice, so the
  // weights uploaded for one step shape are the ones every other shape uses. Null: each
  // placement chooses for its own graph.
  std::shared_ptr<GpuBudgetMemo> budget_memo;
};

// One unit of the budget: a transformer block, or the nodes before the first block
// (embedding) or after the last (output head).
struct GpuUnit {
  int32_t key = 0;           // layer, or kEmbeddingUnit / kOutputUnit
  std::string name;          // "layer 12", "embedding", "output"
  int64_t bytes = 0;         // weights the GPU would hold for it (not counting ones already held)
  double saved_us = 0;       // estimated time saved per step by its GPU nodes, copies counted
  bool on_gpu = false;       // chosen
  std::string why;           // "layer 12 does not fit (needs 60 MiB, 12 MiB left)"
};
inline constexpr int32_t kEmbeddingUnit = -1;
inline constexpr int32_t kOutputUnit = -2;

struct GpuBudgetChoice {
  int64_t budget = 0;
  int64_t overhead = 0;        // counted once any unit is on the GPU
  int64_t weight_bytes = 0;    // weights of the chosen units
  int64_t used = 0;            // weight_bytes + overhead (0 when nothing is on the GPU)
  int32_t n_layers = 0;        // transformer blocks in the graph
  int32_t n_layers_gpu = 0;    // of them chosen
  bool everything_fits = false;  // the unconstrained cost-model plan fits: it is the result
  std::vector<GpuUnit> units;  // in graph order
  std::set<std::string> weights;  // names of the weights the GPU may read
  std::string summary() const;    // "15 of 30 layers, 210 MiB of 256 MiB budget"
};

struct GpuBudgetMemo {
  std::mutex mutex;
  std::shared_ptr<const GpuBudgetChoice> choice;
};

// "1.5 GiB", "60 MiB", "512 B".
std::string bytes_string(int64_t bytes);

// What the GPU holds besides weights for a step of g: twice the largest working set of one
// node (its output and activation inputs: a rough bound on the live activations with the
// arena's reuse), the largest MatMul weight dequantized to F16 (prefill scratch), and the
// attention scratch (K and V rows of kv_tokens positions of one layer, at kv_elem_bytes).
int64_t estimate_gpu_overhead_bytes(const graph::Graph& g, int64_t kv_tokens, int64_t kv_elem_bytes);

// Per node of the input graph.
struct Placement {
  std::vector<int32_t> where;      // index into backends; -1 for weights (they stay in the model's memory)
  std::vector<std::string> why;    // the reason shown by `geniex plan`
  std::vector<double> cost_us;     // estimated time on that backend (0 for inputs and weights)
  double copies_us = 0;            // estimated time of the copies and backend switches it implies
  std::shared_ptr<const GpuBudgetChoice> budget;  // with a GPU memory budget: the units chosen
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
