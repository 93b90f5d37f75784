// Launch helpers shared by the kernel files: grid sizing and warp/block reductions.
// Device-only (included by *.cu files).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace geniex::backends::cuda::kern {

constexpr int kWarp = 32;

inline unsigned blocks_for(int64_t n, int per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
template <typename T>
__device__ T block_sum(T v, T* shared /* [32] */) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int n_warps = static_cast<int>(blockDim.x) / kWarp;
  v = lane < n_warps ? shared[lane] : T(0);
  return warp_sum(v);
}
__device__ inline float block_max(float v, float* shared /* [32] */) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int n_warps = static_cast<int>(blockDim.x) / kWarp;
  v = lane < n_warps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace geniex::backends::cuda::kern
