// Element-wise kernels: Add (same shape or a broadcast row), SwiGLU, GeGLU (tanh GELU), Scale.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace geniex::backends::cuda::kern {

// out[i] = x[i] + y[i % y_len] (y_len == n: plain sum).
cudaError_t add(const float* x, const float* y, float* out, int64_t n, int64_t y_len, cudaStream_t s);
cudaError_t swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s);
cudaError_t geglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s);
cudaError_t scale(const float* x, float* out, int64_t n, float scalar, cudaStream_t s);

}  // namespace geniex::backends::cuda::kern
