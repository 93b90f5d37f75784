// GetRows on OpenCL: embedding lookup from any weight type with a decoder, or selection of
// output rows from f32 activations; one work-item per output value.
#include "backends/opencl/ops.hpp"

namespace geniex::backends::opencl::ops {

Status get_rows(const OpArgs& a) {
  const graph::Node& table = a.src_node(0);
  const int64_t n_cols = table.ne[0];
  const int64_t n_ids = a.node.ne[1];
  const std::string name = std::string("get_rows_") + weight_kernel_suffix(table.type);
  GX_ASSIGN_OR_RETURN(Mem tm, a.src(0));
  GX_ASSIGN_OR_RETURN(Mem im, a.src(1));
  GX_ASSIGN_OR_RETURN(Mem dm, a.dst());
  GX_ASSIGN_OR_RETURN(cl_kernel k, a.be.kernel(name));
  const auto stride = static_cast<cl_ulong>(row_bytes(table.type, n_cols));
  GX_TRY(set_args(k, name, tm.mem, cl_ulong{tm.offset}, stride, im.mem, cl_ulong{im.offset}, dm.mem,
                  cl_ulong{dm.offset}, static_cast<cl_int>(n_cols)));
  const size_t global[2] = {static_cast<size_t>(n_cols), static_cast<size_t>(n_ids)};
  return a.be.launch(k, name, 2, global, nullptr);
}

}  // namespace geniex::backends::opencl::ops
