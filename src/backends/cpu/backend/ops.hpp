// CPU op implementations. Each runs on thread ith of nth over its share of the work; ops
// with internal phases call pool.barrier() the same number of times on every thread.
#pragma once

#include <atomic>

#include <cstdint>

#include "backends/backend.hpp"
#include "backends/cpu/backend/weight_store.hpp"
#include "core/thread_pool.hpp"

namespace geniex::backends::cpu_ops {

// What the work buffer holds from the last matmul that quantized its activations, per thread
// (every thread tracks the same sequence): consecutive matmuls of one input (q, k, v; gate, up)
// quantize it once. With one token each thread quantizes into its own part (no barrier).
struct ActCache {
  int32_t src = -1;  // node id of the quantized input, -1: nothing
  void (*quantize)(const float*, void*, int64_t) = nullptr;  // the quantizer that made it (the format)
};

// Bytes per thread part for one quantized token row (parts start 64-byte aligned).
size_t act_part_bytes(size_t row_bytes);

// A counter of the pieces of one node's rows handed out so far (cache-line sized: one per node).
struct alignas(64) RowTicket {
  std::atomic<int64_t> next{0};
};

struct OpArgs {
  const graph::Graph& graph;
  const graph::Node& node;
  ExecContext& ctx;
  ThreadPool& pool;
  uint8_t* work;  // scratch of at least work_bytes(node)
  size_t work_part;  // one-token matmuls: bytes per thread part of work (the same for all of a run)
  const CpuWeightStore* weights;  // packed layouts, or null
  int ith;
  int nth;
  ActCache* act;  // this thread's record of the work buffer's activations
  RowTicket* rows;  // this node's row pieces (matmul), zero at the start of the run
  int32_t attn_split_min_keys;  // attention: the split one-token path from this many keys on

  const void* src(int i) const { return ctx.data[static_cast<size_t>(node.src[static_cast<size_t>(i)])]; }
  const graph::Node& src_node(int i) const { return graph.node(node.src[static_cast<size_t>(i)]); }
  void* dst() const;
};

size_t work_bytes(const graph::Graph& g, const graph::Node& n, int nth);
// Work bytes an attention node needs in this step (its one-token split path's scores, taken from
// min_keys keys on), else 0.
size_t attention_work_bytes(const graph::Node& n, const StepData& step, int32_t min_keys);
// How many attention nodes took the split one-token path in this process (tests).
uint64_t attention_split_runs();
// True when matmul node n will quantize its input into the work buffer given the record
// (false: no quantization for its type, or the record already holds that input).
bool matmul_quantizes(const graph::Graph& g, const graph::Node& n, const ActCache& act);

void get_rows(const OpArgs& a);
void rms_norm(const OpArgs& a);
void matmul(const OpArgs& a);
void add(const OpArgs& a);
void rope(const OpArgs& a);
void attention(const OpArgs& a);
void swiglu(const OpArgs& a);
void geglu(const OpArgs& a);
void scale(const OpArgs& a);
void copy(const OpArgs& a);

}  // namespace geniex::backends::cpu_ops
