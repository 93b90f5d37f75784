// Shared pieces of the CPU ops: destination lookup and scratch sizing.
#include <algorithm>

#include "backends/cpu/backend/ops.hpp"
#include "backends/cpu/kernels.hpp"

namespace geniex::backends::cpu_ops {

void* OpArgs::dst() const {
  const auto id = static_cast<size_t>(&node - graph.nodes().data());
  return ctx.data[id];
}

size_t act_part_bytes(size_t row_bytes) { return (row_bytes + 63) / 64 * 64; }

size_t work_bytes(const graph::Graph& g, const graph::Node& n, int nth) {
  if (n.op != graph::Op::MatMul) return 0;
  const graph::Node& w = g.node(n.src[0]);
  const cpu::TypeKernels* k = cpu::kernels_for(w.type);
  if (k == nullptr || k->act_type == DType::F32) return 0;
  const auto rb = static_cast<size_t>(row_bytes(k->act_type, w.ne[0]));
  if (n.ne[1] == 1) return act_part_bytes(rb) * static_cast<size_t>(nth);
  return rb * static_cast<size_t>(n.ne[1]);
}

bool matmul_quantizes(const graph::Graph& g, const graph::Node& n, const ActCache& act) {
  const cpu::TypeKernels* k = cpu::kernels_for(g.node(n.src[0]).type);
  if (k == nullptr || k->act_type == DType::F32) return false;
  return !(act.src == n.src[1] && act.quantize == k->quantize_act);
}

}  // namespace geniex::backends::cpu_ops
