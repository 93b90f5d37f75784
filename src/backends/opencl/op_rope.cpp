// Rope on OpenCL: normal (adjacent pairs) and NeoX (halves), optional frequency factors.
// The angles' cos/sin are computed here, exactly as the CPU op does (float recurrence
// theta_base *= base^(-2/n_rot), libm cos/sin), and uploaded as a small table: it costs
// T * n_rot / 2 pairs per call and keeps q and k bit-identical to the CPU's.
#include <cmath>
#include <vector>

#include "backends/opencl/ops.hpp"

namespace geniex::backends::opencl::ops {

Status rope(const OpArgs& a) {
  const graph::RopeParams& p = a.node.rope;
  const int64_t n_heads = a.node.ne[0] / p.head_dim;
  const int64_t n_tok = a.node.ne[1];
  const int half = p.n_rot / 2;
  GX_ASSIGN_OR_RETURN(Mem xm, a.src(0));
  GX_ASSIGN_OR_RETURN(Mem pm, a.src(1));
  GX_ASSIGN_OR_RETURN(Mem ym, a.dst());
  cl_command_queue q = a.be.queue();
  std::vector<int32_t> pos(static_cast<size_t>(n_tok));
  cl_int err = clEnqueueReadBuffer(q, pm.mem, CL_TRUE, pm.offset, pos.size() * sizeof(int32_t), pos.data(), 0,
                                   nullptr, nullptr);
  std::vector<float> factors;
  if (err == CL_SUCCESS && a.node.src[2] != graph::kNoInput) {
    GX_ASSIGN_OR_RETURN(Mem fm, a.src(2));
    factors.resize(static_cast<size_t>(half));
    err = clEnqueueReadBuffer(q, fm.mem, CL_TRUE, fm.offset, factors.size() * sizeof(float), factors.data(), 0,
                              nullptr, nullptr);
  }
  if (err != CL_SUCCESS) return make_error(ErrorCode::BackendError, "opencl: rope: reading positions: " + cl_error_name(err));
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  std::vector<cl_float2> cs(static_cast<size_t>(n_tok * half));
  for (int64_t t = 0; t < n_tok; ++t) {
    float theta_base = static_cast<float>(pos[static_cast<size_t>(t)]);
    for (int i = 0; i < half; ++i) {
      const float theta = p.freq_scale * (factors.empty() ? theta_base : theta_base / factors[static_cast<size_t>(i)]);
      cs[static_cast<size_t>(t * half + i)] = cl_float2{{std::cos(theta), std::sin(theta)}};
      theta_base *= theta_scale;
    }
  }
  GX_ASSIGN_OR_RETURN(cl_mem cs_mem, a.be.scratch(OpenClBackend::Scratch::Rope, cs.size() * sizeof(cl_float2)));
  err = clEnqueueWriteBuffer(q, cs_mem, CL_TRUE, 0, cs.size() * sizeof(cl_float2), cs.data(), 0, nullptr, nullptr);
  if (err != CL_SUCCESS) return make_error(ErrorCode::BackendError, "opencl: rope: angle table: " + cl_error_name(err));
  GX_ASSIGN_OR_RETURN(cl_kernel k, a.be.kernel("rope_f32"));
  GX_TRY(set_args(k, "rope_f32", xm.mem, cl_ulong{xm.offset}, cs_mem, ym.mem, cl_ulong{ym.offset}, cl_int{p.head_dim},
                  static_cast<cl_int>(n_heads), cl_int{p.n_rot}, cl_int{p.mode == graph::RopeMode::Normal ? 0 : 1}));
  const size_t global[3] = {static_cast<size_t>(p.head_dim), static_cast<size_t>(n_heads),
                            static_cast<size_t>(n_tok)};
  return a.be.launch(k, "rope_f32", 3, global, nullptr);
}

}  // namespace geniex::backends::opencl::ops
