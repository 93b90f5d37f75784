// MatMul kernels: activation quantization (one warp per 32-block, or per 256-block for Q8_K),
// the decode matrix-vector product (one warp per output row, lanes over 32-value units) and
// the dequantization to fp16 for the prefill GEMM.
//
// Not verified on a GPU in the session that wrote it (no device there): the arithmetic per
// unit is device_math.cuh's, checked against src/quant on the host; the parallel structure is
// checked by the op-consistency harness on the lent GPU (scripts/cuda_device_check.sh).
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/matmul.cuh"

namespace geniex::backends::cuda::kern {

using namespace geniex::cuda_math;
using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_1;
using quant::BlockQ8_K;

bool has_weight_kernels(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::Q4_0: case DType::Q4_1: case DType::Q8_0: case DType::Q4_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

namespace {

// ---- activation quantization ------------------------------------------------------------------

// One warp per 32-block; lane j quantizes element j. Q8_1 also stores d * sum(q).
template <bool kQ8_1>
__global__ void quantize_q8_32(const float* __restrict__ x, uint8_t* __restrict__ out, int64_t n_blocks) {
  const int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (b >= n_blocks) return;
  const float v = x[b * 32 + lane];
  float amax = fabsf(v);
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = q8_scale(amax);
  const int8_t q = q8_quant(v, q8_inv_scale(amax));
  const int sum = warp_sum(static_cast<int>(q));
  if constexpr (kQ8_1) {
    auto* y = reinterpret_cast<BlockQ8_1*>(out) + b;
    y->qs[lane] = q;
    if (lane == 0) {
      y->d = float_to_half(d);
      y->s = float_to_half(static_cast<float>(sum) * d);
    }
  } else {
    auto* y = reinterpret_cast<BlockQ8_0*>(out) + b;
    y->qs[lane] = q;
    if (lane == 0) y->d = float_to_half(d);
  }
}

// One warp per 256-block; lane l quantizes elements l, l + 32, ... The scale comes from the
// signed element of largest magnitude, the first one on ties (smallest index).
__global__ void quantize_q8_k(const float* __restrict__ x, BlockQ8_K* __restrict__ out, int64_t n_blocks) {
  const int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (b >= n_blocks) return;
  const float* xb = x + b * 256;
  float amax = 0.0f;
  int idx = 256;  // none yet
  for (int i = lane; i < 256; i += kWarp) {
    const float a = fabsf(xb[i]);
    if (a > amax) {  // strictly greater: the first index wins within the lane
      amax = a;
      idx = i;
    }
  }
  for (int o = 16; o > 0; o /= 2) {
    const float oa = __shfl_xor_sync(0xffffffffu, amax, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (oa > amax || (oa == amax && oi < idx)) {
      amax = oa;
      idx = oi;
    }
  }
  BlockQ8_K* y = out + b;
  if (amax == 0.0f) {
    for (int i = lane; i < 256; i += kWarp) y->qs[i] = 0;
    if (lane < 16) y->bsums[lane] = 0;
    if (lane == 0) y->d = 0.0f;
    return;
  }
  const float iscale = q8k_iscale(xb[idx]);
  for (int i = lane; i < 256; i += kWarp) y->qs[i] = q8k_quant(xb[i], iscale);
  __syncwarp();
  if (lane < 16) {
    int s = 0;
    for (int i = 0; i < 16; ++i) s += y->qs[lane * 16 + i];
    y->bsums[lane] = static_cast<int16_t>(s);
  }
  if (lane == 0) y->d = 1.0f / iscale;
}

__global__ void quantize_f16(const float* __restrict__ x, uint16_t* __restrict__ out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = float_to_half(x[i]);
}

// ---- matrix-vector ----------------------------------------------------------------------------

constexpr int kRowsPerBlock = 4;  // warps per block, one output row each

// Per-type unit: units per row, and the float value of unit u of row w against activations a.
template <DType T>
struct Unit;
template <>
struct Unit<DType::Q4_0> {
  static constexpr int kPerBlock = 1;
  __device__ static float value(const uint8_t* w, const uint8_t* a, int64_t u) {
    return dot_unit_q4_0(reinterpret_cast<const BlockQ4_0*>(w)[u], reinterpret_cast<const BlockQ8_0*>(a)[u]);
  }
};
template <>
struct Unit<DType::Q4_1> {
  static constexpr int kPerBlock = 1;
  __device__ static float value(const uint8_t* w, const uint8_t* a, int64_t u) {
    return dot_unit_q4_1(reinterpret_cast<const BlockQ4_1*>(w)[u], reinterpret_cast<const BlockQ8_1*>(a)[u]);
  }
};
template <>
struct Unit<DType::Q8_0> {
  static constexpr int kPerBlock = 1;
  __device__ static float value(const uint8_t* w, const uint8_t* a, int64_t u) {
    return dot_unit_q8_0(reinterpret_cast<const BlockQ8_0*>(w)[u], reinterpret_cast<const BlockQ8_0*>(a)[u]);
  }
};
template <>
struct Unit<DType::Q4_K> {
  static constexpr int kPerBlock = 8;
  __device__ static float value(const uint8_t* w, const uint8_t* a, int64_t u) {
    const BlockQ4_K& wb = reinterpret_cast<const BlockQ4_K*>(w)[u / 8];
    const BlockQ8_K& ab = reinterpret_cast<const BlockQ8_K*>(a)[u / 8];
    return q4_k_block_value(wb, ab, dot_unit_q4_k(wb, ab, static_cast<int>(u % 8)));
  }
};
template <>
struct Unit<DType::Q6_K> {
  static constexpr int kPerBlock = 8;
  __device__ static float value(const uint8_t* w, const uint8_t* a, int64_t u) {
    const BlockQ6_K& wb = reinterpret_cast<const BlockQ6_K*>(w)[u / 8];
    const BlockQ8_K& ab = reinterpret_cast<const BlockQ8_K*>(a)[u / 8];
    return q6_k_block_value(wb, ab, dot_unit_q6_k(wb, ab, static_cast<int>(u % 8)));
  }
};
// Plain types: a unit is one element.
template <>
struct Unit<DType::F32> {
  static constexpr int kPerBlock = 1;
  __device__ static float value(const uint8_t* w, const uint8_t* a, int64_t u) {
    return reinterpret_cast<const float*>(w)[u] * reinterpret_cast<const float*>(a)[u];
  }
};
template <>
struct Unit<DType::F16> {
  static constexpr int kPerBlock = 1;
  __device__ static float value(const uint8_t* w, const uint8_t* a, int64_t u) {
    return half_to_float(reinterpret_cast<const uint16_t*>(w)[u]) *
           half_to_float(reinterpret_cast<const uint16_t*>(a)[u]);
  }
};

template <DType T>
__global__ void mul_mv_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ act, float* __restrict__ out,
                              int64_t n_units, size_t w_row_bytes, size_t a_row_bytes, int64_t n) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int64_t t = blockIdx.y;
  const int lane = threadIdx.x % kWarp;
  if (row >= n) return;
  const uint8_t* wr = w + static_cast<size_t>(row) * w_row_bytes;
  const uint8_t* ar = act + static_cast<size_t>(t) * a_row_bytes;
  float sum = 0.0f;
  for (int64_t u = lane; u < n_units; u += kWarp) sum += Unit<T>::value(wr, ar, u);
  sum = warp_sum(sum);
  if (lane == 0) out[t * n + row] = sum;
}

template <DType T>
cudaError_t launch_mv(DType act_type, const void* w, const void* act, float* out, int64_t k, int64_t n,
                      int64_t n_tok, cudaStream_t s) {
  const DTypeInfo& wi = dtype_info(T);
  const int64_t n_units = k / wi.block_size * Unit<T>::kPerBlock;
  const auto w_row = static_cast<size_t>(row_bytes(T, k));
  const auto a_row = static_cast<size_t>(row_bytes(act_type, k));
  const dim3 grid(blocks_for(n, kRowsPerBlock), static_cast<unsigned>(n_tok));
  mul_mv_kernel<T><<<grid, kRowsPerBlock * kWarp, 0, s>>>(static_cast<const uint8_t*>(w),
                                                          static_cast<const uint8_t*>(act), out, n_units, w_row,
                                                          a_row, n);
  return cudaGetLastError();
}

// ---- dequantization to fp16 -------------------------------------------------------------------

__global__ void dequant_f16_kernel(DType t, const uint8_t* __restrict__ w, uint16_t* __restrict__ out, int64_t k,
                                   size_t w_row_bytes, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / k, c = i % k;
  out[i] = float_to_half(dequant_row_at(t, w + static_cast<size_t>(r) * w_row_bytes, c));
}

}  // namespace

cudaError_t quantize_act(DType act_type, const float* x, void* out, int64_t k, int64_t n_tok, cudaStream_t s) {
  const int64_t n = k * n_tok;
  constexpr int kThreads = 256;
  switch (act_type) {
    case DType::Q8_0:
      quantize_q8_32<false><<<blocks_for(n / 32 * kWarp, kThreads), kThreads, 0, s>>>(x, static_cast<uint8_t*>(out), n / 32);
      break;
    case DType::Q8_1:
      quantize_q8_32<true><<<blocks_for(n / 32 * kWarp, kThreads), kThreads, 0, s>>>(x, static_cast<uint8_t*>(out), n / 32);
      break;
    case DType::Q8_K:
      quantize_q8_k<<<blocks_for(n / 256 * kWarp, kThreads), kThreads, 0, s>>>(x, static_cast<BlockQ8_K*>(out), n / 256);
      break;
    case DType::F16:
      quantize_f16<<<blocks_for(n, kThreads), kThreads, 0, s>>>(x, static_cast<uint16_t*>(out), n);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t mul_mv(DType w_type, const void* w, const void* act, float* out, int64_t k, int64_t n, int64_t n_tok,
                   cudaStream_t s) {
  const DType act_type = quant::vec_dot_type(w_type);
  switch (w_type) {
    case DType::Q4_0: return launch_mv<DType::Q4_0>(act_type, w, act, out, k, n, n_tok, s);
    case DType::Q4_1: return launch_mv<DType::Q4_1>(act_type, w, act, out, k, n, n_tok, s);
    case DType::Q8_0: return launch_mv<DType::Q8_0>(act_type, w, act, out, k, n, n_tok, s);
    case DType::Q4_K: return launch_mv<DType::Q4_K>(act_type, w, act, out, k, n, n_tok, s);
    case DType::Q6_K: return launch_mv<DType::Q6_K>(act_type, w, act, out, k, n, n_tok, s);
    case DType::F32: return launch_mv<DType::F32>(act_type, w, act, out, k, n, n_tok, s);
    case DType::F16: return launch_mv<DType::F16>(act_type, w, act, out, k, n, n_tok, s);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t dequant_to_f16(DType t, const void* src, uint16_t* out, int64_t k, int64_t n, cudaStream_t s) {
  if (!has_weight_kernels(t) && t != DType::Q8_1 && t != DType::Q8_K) return cudaErrorInvalidValue;
  const int64_t total = k * n;
  constexpr int kThreads = 256;
  if (total == 0) return cudaSuccess;
  dequant_f16_kernel<<<blocks_for(total, kThreads), kThreads, 0, s>>>(
      t, static_cast<const uint8_t*>(src), out, k, static_cast<size_t>(row_bytes(t, k)), total);
  return cudaGetLastError();
}

}  // namespace geniex::backends::cuda::kern
