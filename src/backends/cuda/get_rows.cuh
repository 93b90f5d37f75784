// GetRows kernel: embedding lookup from any weight type with a decoder, or row selection from
// f32 activations; decoding is the reference's, so results equal the CPU's bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.hpp"

namespace geniex::backends::cuda::kern {

// out[i * k + c] = element c of row ids[i] of table (n_rows rows, row_stride bytes apart);
// an id outside [0, n_rows) gives a row of NaN instead of reading out of bounds.
cudaError_t get_rows(DType t, const void* table, size_t row_stride, int64_t n_rows, const int32_t* ids, float* out,
                     int64_t k, int64_t n_ids, cudaStream_t s);

}  // namespace geniex::backends::cuda::kern
