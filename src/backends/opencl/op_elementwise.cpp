// Element-wise ops on OpenCL (Add with row broadcast, SwiGLU, GeGLU, Scale) and Copy, the
// scheduler's hand-over from another backend's host memory into this backend's arena.
#include "backends/opencl/ops.hpp"

namespace geniex::backends::opencl::ops {

namespace {

Status binary(const OpArgs& a, const char* name, bool broadcast) {
  GX_ASSIGN_OR_RETURN(Mem xm, a.src(0));
  GX_ASSIGN_OR_RETURN(Mem ym, a.src(1));
  GX_ASSIGN_OR_RETURN(Mem om, a.dst());
  GX_ASSIGN_OR_RETURN(cl_kernel k, a.be.kernel(name));
  const auto n = static_cast<cl_int>(a.node.n_elements());
  if (broadcast) {
    const auto b_len = static_cast<cl_int>(a.src_node(1).n_elements());
    GX_TRY(set_args(k, name, xm.mem, cl_ulong{xm.offset}, ym.mem, cl_ulong{ym.offset}, om.mem,
                    cl_ulong{om.offset}, n, b_len));
  } else {
    GX_TRY(set_args(k, name, xm.mem, cl_ulong{xm.offset}, ym.mem, cl_ulong{ym.offset}, om.mem,
                    cl_ulong{om.offset}, n));
  }
  const auto global = static_cast<size_t>(n);
  return a.be.launch(k, name, 1, &global, nullptr);
}

}  // namespace

Status add(const OpArgs& a) { return binary(a, "add_f32", true); }
Status swiglu(const OpArgs& a) { return binary(a, "swiglu_f32", false); }
Status geglu(const OpArgs& a) { return binary(a, "geglu_f32", false); }

Status scale(const OpArgs& a) {
  GX_ASSIGN_OR_RETURN(Mem xm, a.src(0));
  GX_ASSIGN_OR_RETURN(Mem om, a.dst());
  GX_ASSIGN_OR_RETURN(cl_kernel k, a.be.kernel("scale_f32"));
  const auto n = static_cast<cl_int>(a.node.n_elements());
  GX_TRY(set_args(k, "scale_f32", xm.mem, cl_ulong{xm.offset}, om.mem, cl_ulong{om.offset}, n,
                  cl_float{a.node.scalar}));
  const auto global = static_cast<size_t>(n);
  return a.be.launch(k, "scale_f32", 1, &global, nullptr);
}

Status copy(const OpArgs& a) {
  GX_ASSIGN_OR_RETURN(Mem om, a.dst());
  const auto bytes = static_cast<size_t>(a.node.nbytes());
  const int32_t src_id = a.node.src[0];
  if (auto own = a.be.mem_of(a.ctx, src_id)) {  // already on this device
    const cl_int err = clEnqueueCopyBuffer(a.be.queue(), own->mem, om.mem, own->offset, om.offset, bytes, 0,
                                           nullptr, nullptr);
    if (err != CL_SUCCESS) return make_error(ErrorCode::BackendError, "opencl: copy: " + cl_error_name(err));
    return ok_status();
  }
  // Host memory of another backend: one write (a DMA on discrete GPUs, a memcpy on SoCs).
  const void* src = a.ctx.data[static_cast<size_t>(src_id)];
  const cl_int err = clEnqueueWriteBuffer(a.be.queue(), om.mem, CL_TRUE, om.offset, bytes, src, 0, nullptr, nullptr);
  if (err != CL_SUCCESS) return make_error(ErrorCode::BackendError, "opencl: copy to device: " + cl_error_name(err));
  return ok_status();
}

}  // namespace geniex::backends::opencl::ops
