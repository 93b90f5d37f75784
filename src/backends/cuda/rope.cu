// Rope: one thread per (pair or pass-through element, head, token).
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/rope.cuh"

namespace geniex::backends::cuda::kern {

namespace {

__global__ void rope_kernel(const float* __restrict__ x, const float* __restrict__ cs, float* __restrict__ y,
                            int head_dim, int64_t n_heads, int n_rot, bool neox, int64_t total) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  // idx enumerates (token, head, slot) with head_dim - n_rot / 2 slots per head: the first
  // n_rot / 2 rotate a pair, the rest copy one element past n_rot.
  const int half = n_rot / 2;
  const int slots = head_dim - half;
  const int slot = static_cast<int>(idx % slots);
  const int64_t th = idx / slots;  // token * n_heads + head
  const int64_t t = th / n_heads;
  const float* xh = x + th * head_dim;
  float* yh = y + th * head_dim;
  if (slot >= half) {
    const int i = n_rot + (slot - half);
    yh[i] = xh[i];
    return;
  }
  int i0, i1;
  cuda_math::rope_pair(neox, slot, half, &i0, &i1);
  const float c = cs[(t * half + slot) * 2];
  const float s = cs[(t * half + slot) * 2 + 1];
  const float x0 = xh[i0], x1 = xh[i1];
  yh[i0] = fmaf(x0, c, -__fmul_rn(x1, s));
  yh[i1] = fmaf(x0, s, __fmul_rn(x1, c));
}

}  // namespace

cudaError_t rope(const float* x, const float* cs, float* y, int head_dim, int64_t n_heads, int64_t n_tok, int n_rot,
                 bool neox, cudaStream_t s) {
  const int64_t total = n_tok * n_heads * (head_dim - n_rot / 2);
  constexpr int kThreads = 256;
  if (total == 0) return cudaSuccess;
  rope_kernel<<<blocks_for(total, kThreads), kThreads, 0, s>>>(x, cs, y, head_dim, n_heads, n_rot, neox, total);
  return cudaGetLastError();
}

}  // namespace geniex::backends::cuda::kern
