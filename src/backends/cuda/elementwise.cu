// Element-wise ops, one thread per value. SwiGLU uses GenieX's exponential (double exp, one
// rounding) and the CPU's operation order, so it equals the CPU op; GeGLU's tanhf may differ
// from glibc's tanh in the last bit.
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/launch.cuh"

namespace geniex::backends::cuda::kern {

namespace {

constexpr int kThreads = 256;

__global__ void add_kernel(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
                           int64_t n, int64_t y_len) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[y_len == n ? i : i % y_len];
}

__global__ void swiglu_kernel(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ out,
                              int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __fmul_rn(__fdiv_rn(g[i], __fadd_rn(1.0f, cuda_math::exp_f32(-g[i]))), u[i]);
}

__global__ void geglu_kernel(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ out,
                             int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  const float x = g[i];
  const float inner = __fmul_rn(__fmul_rn(kSqrt2OverPi, x), __fadd_rn(1.0f, __fmul_rn(__fmul_rn(0.044715f, x), x)));
  const float gelu = __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner)));
  out[i] = __fmul_rn(gelu, u[i]);
}

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n, float s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * s;
}

}  // namespace

cudaError_t add(const float* x, const float* y, float* out, int64_t n, int64_t y_len, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  add_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(x, y, out, n, y_len);
  return cudaGetLastError();
}
cudaError_t swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  swiglu_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(gate, up, out, n);
  return cudaGetLastError();
}
cudaError_t geglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  geglu_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(gate, up, out, n);
  return cudaGetLastError();
}
cudaError_t scale(const float* x, float* out, int64_t n, float scalar, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  scale_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(x, out, n, scalar);
  return cudaGetLastError();
}

}  // namespace geniex::backends::cuda::kern
