// GetRows: one thread per output value, decoding through device_math.cuh.
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/get_rows.cuh"
#include "backends/cuda/launch.cuh"

namespace geniex::backends::cuda::kern {

namespace {

__global__ void get_rows_kernel(DType t, const uint8_t* __restrict__ table, size_t row_stride, int64_t n_rows,
                                const int32_t* __restrict__ ids, float* __restrict__ out, int64_t k, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / k, c = i % k;
  const int32_t id = ids[r];
  if (id < 0 || id >= n_rows) {
    out[i] = __int_as_float(0x7fc00000);
    return;
  }
  out[i] = cuda_math::dequant_row_at(t, table + static_cast<size_t>(id) * row_stride, c);
}

}  // namespace

cudaError_t get_rows(DType t, const void* table, size_t row_stride, int64_t n_rows, const int32_t* ids, float* out,
                     int64_t k, int64_t n_ids, cudaStream_t s) {
  const int64_t total = k * n_ids;
  constexpr int kThreads = 256;
  if (total == 0) return cudaSuccess;
  get_rows_kernel<<<blocks_for(total, kThreads), kThreads, 0, s>>>(t, static_cast<const uint8_t*>(table), row_stride,
                                                                   n_rows, ids, out, k, total);
  return cudaGetLastError();
}

}  // namespace geniex::backends::cuda::kern
