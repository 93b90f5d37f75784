// RmsNorm on OpenCL: one 64-wide work-group per group of G values (whole rows or heads).
#include "backends/opencl/ops.hpp"

namespace geniex::backends::opencl::ops {

Status rms_norm(const OpArgs& a) {
  const int64_t group = a.src_node(1).ne[0];
  const int64_t n_groups = a.node.n_elements() / group;
  GX_ASSIGN_OR_RETURN(Mem xm, a.src(0));
  GX_ASSIGN_OR_RETURN(Mem wm, a.src(1));
  GX_ASSIGN_OR_RETURN(Mem ym, a.dst());
  GX_ASSIGN_OR_RETURN(cl_kernel k, a.be.kernel("rms_norm"));
  GX_TRY(set_args(k, "rms_norm", xm.mem, cl_ulong{xm.offset}, wm.mem, cl_ulong{wm.offset}, ym.mem,
                  cl_ulong{ym.offset}, static_cast<cl_int>(group), cl_float{a.node.eps}));
  const size_t global = static_cast<size_t>(n_groups) * 64;
  const size_t local = 64;
  return a.be.launch(k, "rms_norm", 1, &global, &local);
}

}  // namespace geniex::backends::opencl::ops
