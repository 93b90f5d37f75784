// RmsNorm: one 128-thread block per group. The sum of squares is accumulated in double as the
// CPU op does (only the order of the double additions differs, which practically never changes
// the float mean); the scale is 1 / sqrtf(mean + eps) with IEEE division and square root, and
// y = x * scale * w in that order, so results equal the CPU's.
#include "backends/cuda/launch.cuh"
#include "backends/cuda/rms_norm.cuh"

namespace geniex::backends::cuda::kern {

namespace {

constexpr int kThreads = 128;

__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                int64_t group, float eps) {
  __shared__ double partial[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * group;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * group;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < group; i += kThreads) sum += static_cast<double>(xr[i]) * static_cast<double>(xr[i]);
  sum = block_sum(sum, partial);
  const auto mean = static_cast<float>(sum / static_cast<double>(group));
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < group; i += kThreads) yr[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
}

}  // namespace

cudaError_t rms_norm(const float* x, const float* w, float* y, int64_t group, int64_t n_groups, float eps,
                     cudaStream_t s) {
  if (n_groups == 0) return cudaSuccess;
  rms_norm_kernel<<<static_cast<unsigned>(n_groups), kThreads, 0, s>>>(x, w, y, group, eps);
  return cudaGetLastError();
}

}  // namespace geniex::backends::cuda::kern
