// GetRows on the CPU: embedding lookup (dequantizing rows) or row selection of activations.
#include "backends/cpu/backend/ops.hpp"
#include "backends/cpu/kernels.hpp"

namespace geniex::backends::cpu_ops {

void get_rows(const OpArgs& a) {
  const graph::Node& table = a.src_node(0);
  const auto* ids = static_cast<const int32_t*>(a.src(1));
  const int64_t n_cols = table.ne[0];
  const int64_t n_ids = a.node.ne[1];
  const size_t stride = static_cast<size_t>(row_bytes(table.type, n_cols));
  const auto* base = static_cast<const uint8_t*>(a.src(0));
  auto* out = static_cast<float*>(a.dst());
  const cpu::TypeKernels* k = cpu::kernels_for(table.type);
  int64_t t0, t1;
  ThreadPool::split_range(n_ids, a.ith, a.nth, &t0, &t1);
  if (const CpuWeightStore::Packed* packed = a.weights ? a.weights->find(base) : nullptr) {
    for (int64_t t = t0; t < t1; ++t) packed->kernels->dequantize_row(packed->data, ids[t], out + t * n_cols, n_cols);
    return;
  }
  for (int64_t t = t0; t < t1; ++t) {
    // Ids were validated against the table by the runtime before the step started.
    k->dequantize_row(base + static_cast<size_t>(ids[t]) * stride, out + t * n_cols, n_cols);
  }
}

}  // namespace geniex::backends::cpu_ops
