// RmsNorm kernel: y = x / sqrt(mean(x^2) + eps) * w over groups of G values (rows or heads).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace geniex::backends::cuda::kern {

cudaError_t rms_norm(const float* x, const float* w, float* y, int64_t group, int64_t n_groups, float eps,
                     cudaStream_t s);

}  // namespace geniex::backends::cuda::kern
