// Shared pieces of the CPU ops: destination lookup and scratch sizing.
#include <algorithm>

#include "backends/cpu/backend/ops.hpp"
#include "backends/cpu/kernels.hpp"

namespace geniex::backends::cpu_ops {

void* OpArgs::dst() const {
  const auto id = static_cast<size_t>(&node - graph.nodes().data());
  return ctx.data[id];
}

size_t work_bytes(const graph::Graph& g, const graph::Node& n) {
  if (n.op != graph::Op::MatMul) return 0;
  const graph::Node& w = g.node(n.src[0]);
  const cpu::TypeKernels* k = cpu::kernels_for(w.type);
  if (k == nullptr || k->act_type == DType::F32) return 0;
  return static_cast<size_t>(row_bytes(k->act_type, w.ne[0]) * n.ne[1]);
}

}  // namespace geniex::backends::cpu_ops
