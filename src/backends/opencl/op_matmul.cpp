// MatMul on OpenCL: activations are quantized on the device to the weight type's partner
// format (Q8_0 for Q4_0/Q8_0, Q8_1 for Q4_1, Q8_K for the K-quants, f16 for F16 weights;
// the CPU backend does the same, so both see identical int8 activations), then a
// matrix-vector kernel (decode) or a tiled kernel (prefill) takes integer dot products.
#include "backends/opencl/ops.hpp"
#include "quant/quant.hpp"

namespace geniex::backends::opencl::ops {

namespace {
// Below this many tokens the matrix-vector kernel wins: the tiled one would leave most of
// its 16-token tile idle.
constexpr int64_t kTiledMinTokens = 8;

// The product for weight rows starting at wm (n_out of them) into dm, row stride n_out.
Status matmul_rows(const OpArgs& a, Mem wm, Mem xm, Mem dm, int64_t k_in, int64_t n_out, int64_t n_tok,
                   const char* sfx, DType act_type) {
  const graph::Node& w = a.src_node(0);

  Mem act = xm;
  if (act_type != DType::F32) {
    const auto act_bytes = static_cast<size_t>(row_bytes(act_type, k_in) * n_tok);
    GX_ASSIGN_OR_RETURN(cl_mem scratch, a.be.scratch(OpenClBackend::Scratch::Act, act_bytes));
    const char* qname = act_type == DType::F16 ? "quantize_f16"
                        : act_type == DType::Q8_1 ? "quantize_q8_1"
                        : act_type == DType::Q8_K ? "quantize_q8_k" : "quantize_q8_0";
    GX_ASSIGN_OR_RETURN(cl_kernel qk, a.be.kernel(qname));
    const int64_t n_units = k_in * n_tok / dtype_info(act_type).block_size;
    GX_TRY(set_args(qk, qname, xm.mem, cl_ulong{xm.offset}, scratch, static_cast<cl_int>(n_units)));
    const size_t global = static_cast<size_t>(n_units);
    const size_t local = 64;
    GX_TRY(a.be.launch(qk, qname, 1, &global, &local));
    act = Mem{scratch, 0};
  }

  const auto n_blocks = static_cast<cl_int>(k_in / dtype_info(w.type).block_size);
  if (n_tok < kTiledMinTokens) {
    const std::string name = std::string("mul_mv_") + sfx;
    GX_ASSIGN_OR_RETURN(cl_kernel k, a.be.kernel(name));
    GX_TRY(set_args(k, name, wm.mem, cl_ulong{wm.offset}, act.mem, cl_ulong{act.offset}, dm.mem,
                    cl_ulong{dm.offset}, n_blocks, static_cast<cl_int>(n_out)));
    // 32-element block types walk a row per work-item (CPU order, see mul_mv.cl); the others
    // give each row a 64-wide work-group.
    const bool row_per_item = w.type == DType::Q4_0 || w.type == DType::Q4_1 || w.type == DType::Q8_0;
    const size_t global[2] = {static_cast<size_t>(n_out) * (row_per_item ? 1 : 64), static_cast<size_t>(n_tok)};
    const size_t local[2] = {64, 1};
    return a.be.launch(k, name, 2, global, local);
  }
  const std::string name = std::string("mul_mm_") + sfx;
  GX_ASSIGN_OR_RETURN(cl_kernel k, a.be.kernel(name));
  GX_TRY(set_args(k, name, wm.mem, cl_ulong{wm.offset}, act.mem, cl_ulong{act.offset}, dm.mem,
                  cl_ulong{dm.offset}, n_blocks, static_cast<cl_int>(n_out), static_cast<cl_int>(n_tok)));
  const size_t global[2] = {static_cast<size_t>(n_out), static_cast<size_t>(n_tok)};
  const size_t local[2] = {16, 16};
  return a.be.launch(k, name, 2, global, local);
}
}  // namespace

Status matmul(const OpArgs& a) {
  const graph::Node& w = a.src_node(0);
  const int64_t k_in = w.ne[0];
  const int64_t n_tok = a.node.ne[1];
  const char* sfx = weight_kernel_suffix(w.type);
  const DType act_type = quant::vec_dot_type(w.type);
  GX_ASSIGN_OR_RETURN(Mem wm, a.src(0));
  GX_ASSIGN_OR_RETURN(Mem xm, a.src(1));
  GX_ASSIGN_OR_RETURN(Mem dm, a.dst());
  // A part of a row split computes weight rows [begin, end): the kernels see those rows as
  // the whole matrix. One token writes in place; more go through a compact buffer that a
  // rectangular copy spreads into the full output (row stride ld).
  const int64_t ld = w.ne[1];
  const RowRange part = a.ctx.rows_of(a.id, ld);
  const int64_t n_out = part.end - part.begin;
  if (n_out <= 0) return ok_status();
  wm.offset += static_cast<uint64_t>(part.begin) * static_cast<uint64_t>(row_bytes(w.type, k_in));
  const Mem full = dm;
  if (n_out != ld) {
    if (n_tok == 1) {
      dm.offset += static_cast<uint64_t>(part.begin) * sizeof(float);
    } else {
      GX_ASSIGN_OR_RETURN(cl_mem rows, a.be.scratch(OpenClBackend::Scratch::RowPart,
                                                    static_cast<size_t>(n_out * n_tok) * sizeof(float)));
      dm = Mem{rows, 0};
    }
  }
  GX_TRY(matmul_rows(a, wm, xm, dm, k_in, n_out, n_tok, sfx, act_type));
  if (dm.mem == full.mem) return ok_status();
  const size_t src_origin[3] = {0, 0, 0};
  const size_t dst_origin[3] = {static_cast<size_t>(full.offset) + static_cast<size_t>(part.begin) * sizeof(float), 0, 0};
  const size_t region[3] = {static_cast<size_t>(n_out) * sizeof(float), static_cast<size_t>(n_tok), 1};
  const cl_int err = clEnqueueCopyBufferRect(a.be.queue(), dm.mem, full.mem, src_origin, dst_origin, region,
                                             region[0], 0, static_cast<size_t>(ld) * sizeof(float), 0, 0,
                                             nullptr, nullptr);
  if (err != CL_SUCCESS) {
    return make_error(ErrorCode::BackendError, "opencl: row-split part of " + a.node.name +
                                                   ": rectangular copy failed: " + cl_error_name(err));
  }
  return ok_status();
}

}  // namespace geniex::backends::opencl::ops
