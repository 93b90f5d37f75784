// Rope kernel: rotates pairs by angles whose cos/sin the host computed (ops.cpp) exactly as the
// CPU op does, so the device only applies the rotation (with the CPU's fused multiply-adds).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace geniex::backends::cuda::kern {

// cs: n_tok * (n_rot / 2) pairs (cos, sin). Values past n_rot in each head are copied.
cudaError_t rope(const float* x, const float* cs, float* y, int head_dim, int64_t n_heads, int64_t n_tok, int n_rot,
                 bool neox, cudaStream_t s);

}  // namespace geniex::backends::cuda::kern
