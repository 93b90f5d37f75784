// Attention: one 128-thread block per (head, token). It follows the CPU op's arithmetic:
// with an f16 cache the query and the probabilities are rounded to f16 (llama.cpp's default
// attention); scores are q.k * scale with an f32 accumulation in key-dimension order; the
// softmax uses GenieX's exponential and a double sum; the output accumulates p * v with
// fused multiply-adds in key order. Only the score dot product's summation order differs from
// the CPU's vectorized one, so results agree to the last bits (harness bound 1e-9).
#include "backends/cuda/attention.cuh"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/launch.cuh"

namespace geniex::backends::cuda::kern {

namespace {

using cuda_math::float_to_half;
using cuda_math::half_to_float;

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 512;

__device__ __forceinline__ float kv_at(const void* rows, bool f16, int64_t index) {
  return f16 ? half_to_float(static_cast<const uint16_t*>(rows)[index]) : static_cast<const float*>(rows)[index];
}

__global__ void attention_kernel(AttentionArgs a) {
  __shared__ float q_sh[kMaxHeadDim];
  __shared__ float red_f[32];
  __shared__ double red_d[32];
  const int h = blockIdx.x;
  const int64_t tl = blockIdx.y;  // token within this launch
  const int64_t t = a.t0 + tl;
  const int group = a.n_head / a.n_head_kv;
  const int g = h / group;
  const int64_t q_width = static_cast<int64_t>(a.n_head) * a.head_dim;
  const int64_t kv_width = static_cast<int64_t>(a.n_head_kv) * a.head_dim;
  const AttnTokenInfo info = a.info[t];
  const float* qh = a.q + t * q_width + static_cast<int64_t>(h) * a.head_dim;
  for (int d = threadIdx.x; d < a.head_dim; d += kThreads) {
    q_sh[d] = a.f16 ? half_to_float(float_to_half(qh[d])) : qh[d];
  }
  __syncthreads();

  float* scores = a.scores + (tl * a.n_head + h) * static_cast<int64_t>(a.max_kv);
  const int64_t head_off = static_cast<int64_t>(g) * a.head_dim;
  float m = -INFINITY;
  for (int j = info.kv0 + threadIdx.x; j < info.n_kv; j += kThreads) {
    const int64_t base = static_cast<int64_t>(info.row0 + j) * kv_width + head_off;
    float s = 0.0f;
    for (int d = 0; d < a.head_dim; ++d) s = fmaf(q_sh[d], kv_at(a.k_rows, a.f16, base + d), s);
    s = __fmul_rn(s, a.scale);
    scores[j] = s;
    m = fmaxf(m, s);
  }
  m = block_max(m, red_f);

  double sum = 0.0;
  for (int j = info.kv0 + threadIdx.x; j < info.n_kv; j += kThreads) {
    const float e = cuda_math::exp_f32(__fsub_rn(scores[j], m));
    scores[j] = e;
    sum += static_cast<double>(e);
  }
  sum = block_sum(sum, red_d);
  const auto inv = static_cast<float>(1.0 / sum);
  for (int j = info.kv0 + threadIdx.x; j < info.n_kv; j += kThreads) {
    const float p = __fmul_rn(scores[j], inv);
    scores[j] = a.f16 ? half_to_float(float_to_half(p)) : p;
  }
  __syncthreads();  // every probability is written before any thread reads them all

  float* oh = a.out + t * q_width + static_cast<int64_t>(h) * a.head_dim;
  for (int d = threadIdx.x; d < a.head_dim; d += kThreads) {
    float acc = 0.0f;
    for (int j = info.kv0; j < info.n_kv; ++j) {
      acc = fmaf(scores[j], kv_at(a.v_rows, a.f16, static_cast<int64_t>(info.row0 + j) * kv_width + head_off + d), acc);
    }
    oh[d] = acc;
  }
}

}  // namespace

cudaError_t attention(const AttentionArgs& a, cudaStream_t s) {
  if (a.head_dim > kMaxHeadDim || a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0) return cudaErrorInvalidValue;
  if (a.n_tok == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(a.n_head), static_cast<unsigned>(a.n_tok));
  attention_kernel<<<grid, kThreads, 0, s>>>(a);
  return cudaGetLastError();
}

}  // namespace geniex::backends::cuda::kern
