// Kernel registry: the scalar tables (wrapping the quant/ references), run-time choice
// between them and the SIMD tables, and the f32 helpers' dispatch.
#include "backends/cpu/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/kernels_internal.hpp"
#include "core/cpu_features.hpp"
#include "core/exp.hpp"
#include "core/fp16.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu {
namespace {

template <DType W>
void scalar_dequantize(const void* src, float* dst, int64_t n) {
  quant::dequantize_row_ref(W, src, dst, n);
}

template <DType W>
void scalar_quantize_act(const float* src, void* dst, int64_t n) {
  quant::quantize_activations_ref(quant::vec_dot_type(W), src, dst, n);
}

template <DType W>
void scalar_gemm(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
                 size_t a_stride, int64_t n_cols, float* out, int64_t out_stride) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int64_t c = 0; c < n_cols; ++c) {
    for (int64_t r = 0; r < n_rows; ++r) {
      out[c * out_stride + r] = quant::vec_dot_ref(W, wb + static_cast<size_t>(r) * w_stride,
                                                   ab + static_cast<size_t>(c) * a_stride, n);
    }
  }
}

template <DType W>
constexpr TypeKernels scalar_entry() {
  return TypeKernels{W,
                     W == DType::Q4_0 || W == DType::Q5_0 || W == DType::Q8_0 ? DType::Q8_0
                     : W == DType::Q4_1 || W == DType::Q5_1                   ? DType::Q8_1
                     : W == DType::Q4_K || W == DType::Q5_K || W == DType::Q6_K
                         ? DType::Q8_K
                         : W,
                     "scalar",
                     &scalar_dequantize<W>,
                     &scalar_quantize_act<W>,
                     &scalar_gemm<W>};
}

constexpr TypeKernels kScalar[] = {
    scalar_entry<DType::F32>(),  scalar_entry<DType::F16>(),  scalar_entry<DType::BF16>(),
    scalar_entry<DType::Q4_0>(), scalar_entry<DType::Q4_1>(), scalar_entry<DType::Q5_0>(),
    scalar_entry<DType::Q5_1>(), scalar_entry<DType::Q8_0>(),
    scalar_entry<DType::Q4_K>(), scalar_entry<DType::Q5_K>(), scalar_entry<DType::Q6_K>(),
};

const TypeKernels* scalar_kernels(DType t) {
  for (const auto& k : kScalar) {
    if (k.type == t) return &k;
  }
  return nullptr;
}

#if defined(GENIEX_HAVE_NEON_KERNELS)
bool dotprod_usable() { return cpu_features().arm_dotprod; }
bool i8mm_usable() { return cpu_features().arm_dotprod && cpu_features().arm_i8mm; }
#endif

#if defined(GENIEX_HAVE_AVX2_KERNELS)
bool avx2_usable() {
  const CpuFeatures& f = cpu_features();
  return f.avx2 && f.fma && f.f16c;
}

bool avx512_usable() {
  const CpuFeatures& f = cpu_features();
  return avx2_usable() && f.avx512f && f.avx512bw;
}
#endif

// ---- scalar f32 helpers ----------------------------------------------------------------------

float scalar_dot_f32(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
void scalar_axpy_f32(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}
void scalar_fp16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
}
void scalar_f32_to_fp16_row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_fp16(src[i]);
}
float scalar_dot_f32_f16(const float* a, const uint16_t* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * fp16_to_f32(b[i]);
  return s;
}
void scalar_axpy_f16(float alpha, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * fp16_to_f32(x[i]);
}

void scalar_attn_scores_f16(const float* q, const uint8_t* k, size_t row_bytes, int n_keys, int64_t hd,
                            float scale, float* scores) {
  for (int j = 0; j < n_keys; ++j) {
    scores[j] = scalar_dot_f32_f16(q, reinterpret_cast<const uint16_t*>(k + static_cast<size_t>(j) * row_bytes), hd) * scale;
  }
}
void scalar_attn_accum_f16(const float* p, const uint8_t* v, size_t row_bytes, int n_keys, int64_t hd, float* acc) {
  for (int j = 0; j < n_keys; ++j) {
    scalar_axpy_f16(p[j], reinterpret_cast<const uint16_t*>(v + static_cast<size_t>(j) * row_bytes), acc, hd);
  }
}
// Multi-query attention from the single-query helpers (ISAs without their own): a query's
// probabilities are gathered into a contiguous run of keys, so the bits are the helpers'.
void generic_attn_scores_f16_multi(const float* q, int64_t q_stride, int nq, const KvRun* runs, int n_runs,
                                   size_t row_bytes, int64_t hd, float scale, float* scores, int64_t ld) {
  float tmp[64];
  for (int r = 0; r < n_runs; ++r) {
    const uint8_t* k = runs[r].rows;
    const int n_keys = runs[r].n;
    for (int j0 = 0; j0 < n_keys; j0 += 64) {
      const int n = n_keys - j0 < 64 ? n_keys - j0 : 64;
      for (int i = 0; i < nq; ++i) {
        cpu::attn_scores_f16(q + i * q_stride, k + static_cast<size_t>(j0) * row_bytes, row_bytes, n, hd, scale, tmp);
        for (int j = 0; j < n; ++j) scores[(j0 + j) * ld + i] = tmp[j];
      }
    }
    scores += static_cast<int64_t>(n_keys) * ld;
  }
}
void generic_attn_accum_f16_multi(const float* p, int64_t ld, int nq, const uint8_t* v, size_t row_bytes,
                                  int n_keys, int64_t hd, float* acc, int64_t acc_stride) {
  float tmp[64];
  for (int j0 = 0; j0 < n_keys; j0 += 64) {
    const int n = n_keys - j0 < 64 ? n_keys - j0 : 64;
    for (int i = 0; i < nq; ++i) {
      for (int j = 0; j < n; ++j) tmp[j] = p[(j0 + j) * ld + i];
      cpu::attn_accum_f16(tmp, v + static_cast<size_t>(j0) * row_bytes, row_bytes, n, hd, acc + i * acc_stride);
    }
  }
}
void scalar_rope_rotate(const float* x, float* y, const float* cs, const float* sn, int half, bool interleaved) {
  const int64_t step = interleaved ? 1 : half;  // offset of a pair's second element
  for (int i = 0; i < half; ++i) {
    const int64_t e = interleaved ? 2 * i : i;
    const float x0 = x[e], x1 = x[e + step];
    y[e] = std::fma(x0, cs[i], -(x1 * sn[i]));
    y[e + step] = std::fma(x0, sn[i], x1 * cs[i]);
  }
}
void scalar_exp_f32_row(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_f32(x[i]);
}

// The softmax of a unit (kernels.hpp), one query after another in loops the compiler may
// vectorize; keys every query has are done for all queries at once.
void generic_attn_softmax_multi(float* s, int64_t ld, int nq, int32_t jlo, int n_keys, const int32_t* kv0,
                                const int32_t* n_kv) {
  thread_local std::vector<float> m, inv;
  thread_local std::vector<double> sum;
  thread_local std::vector<uint16_t> p16;
  const auto n = static_cast<size_t>(nq);
  m.assign(n, -std::numeric_limits<float>::infinity());
  sum.assign(n, 0.0);
  inv.resize(n);
  int32_t clo = 0, chi = std::numeric_limits<int32_t>::max();  // keys every query has
  for (int i = 0; i < nq; ++i) {
    clo = std::max(clo, kv0[i]);
    chi = std::min(chi, n_kv[i]);
  }
  if (chi < clo) chi = clo;
  const int32_t jhi = jlo + n_keys;
  auto active = [&](int i, int32_t j) { return j >= kv0[i] && j < n_kv[i]; };
  float* const mq = m.data();
  double* const sq = sum.data();
  for (int32_t j = jlo; j < jhi; ++j) {
    const float* row = s + static_cast<int64_t>(j - jlo) * ld;
    if (j >= clo && j < chi) {
      for (int i = 0; i < nq; ++i) mq[i] = row[i] > mq[i] ? row[i] : mq[i];  // std::max(m, s)
    } else {
      for (int i = 0; i < nq; ++i) {
        if (active(i, j)) mq[i] = std::max(mq[i], row[i]);
      }
    }
  }
  for (int32_t j = 0; j < n_keys; ++j) {  // through the table's exp_f32_row (vector on NEON)
    float* row = s + static_cast<int64_t>(j) * ld;
    for (int i = 0; i < nq; ++i) row[i] -= mq[i];
    cpu::exp_f32_row(row, row, nq);
  }
  for (int32_t j = jlo; j < jhi; ++j) {
    const float* row = s + static_cast<int64_t>(j - jlo) * ld;
    if (j >= clo && j < chi) {
      for (int i = 0; i < nq; ++i) sq[i] += static_cast<double>(row[i]);
    } else {
      for (int i = 0; i < nq; ++i) {
        if (active(i, j)) sq[i] += static_cast<double>(row[i]);
      }
    }
  }
  float* const iq = inv.data();
  for (int i = 0; i < nq; ++i) iq[i] = static_cast<float>(1.0 / sq[i]);
  p16.resize(n);
  for (int32_t j = 0; j < n_keys; ++j) {
    float* row = s + static_cast<int64_t>(j) * ld;
    for (int i = 0; i < nq; ++i) row[i] *= iq[i];
    cpu::f32_to_fp16_row(row, p16.data(), nq);
    cpu::fp16_to_f32_row(p16.data(), row, nq);
  }
}

struct Helpers {
  float (*dot_f32)(const float*, const float*, int64_t);
  void (*axpy_f32)(float, const float*, float*, int64_t);
  void (*fp16_to_f32_row)(const uint16_t*, float*, int64_t);
  void (*f32_to_fp16_row)(const float*, uint16_t*, int64_t);
  float (*dot_f32_f16)(const float*, const uint16_t*, int64_t);
  void (*axpy_f16)(float, const uint16_t*, float*, int64_t);
};

// Attention helpers: SIMD where compiled for this ISA, else the scalar loops.
struct AttnHelpers {
  void (*attn_scores_f16)(const float*, const uint8_t*, size_t, int, int64_t, float, float*);
  void (*attn_accum_f16)(const float*, const uint8_t*, size_t, int, int64_t, float*);
  void (*exp_f32_row)(const float*, float*, int64_t);
  void (*attn_scores_f16_multi)(const float*, int64_t, int, const KvRun*, int, size_t, int64_t, float, float*,
                                int64_t);
  void (*attn_accum_f16_multi)(const float*, int64_t, int, const uint8_t*, size_t, int, int64_t, float*, int64_t);
  void (*rope_rotate)(const float*, float*, const float*, const float*, int, bool);
  void (*attn_softmax_multi)(float*, int64_t, int, int32_t, int, const int32_t*, const int32_t*);
  int unit_queries;
};

const AttnHelpers& attn_helpers() {
  static const AttnHelpers h = [] {
#if defined(GENIEX_HAVE_AVX2_KERNELS)
    if (avx512_usable()) {
      // The exponential and the multi-query helpers in zmm; the AVX2 helpers' bits.
      return AttnHelpers{&avx2::attn_scores_f16, &avx2::attn_accum_f16, &avx512::exp_f32_row,
                         &avx512::attn_scores_f16_multi, &avx512::attn_accum_f16_multi, &avx2::rope_rotate,
                         &avx512::attn_softmax_multi, 48};
    }
    if (avx2_usable()) {
      return AttnHelpers{&avx2::attn_scores_f16, &avx2::attn_accum_f16, &avx2::exp_f32_row,
                         &avx2::attn_scores_f16_multi, &avx2::attn_accum_f16_multi, &avx2::rope_rotate,
                         &avx2::attn_softmax_multi, 24};
    }
#endif
#if defined(GENIEX_HAVE_NEON_KERNELS)
    return AttnHelpers{&neon::attn_scores_f16, &neon::attn_accum_f16, &neon::exp_f32_row,
                       &generic_attn_scores_f16_multi, &generic_attn_accum_f16_multi, &scalar_rope_rotate,
                       &generic_attn_softmax_multi, 24};
#endif
    return AttnHelpers{&scalar_attn_scores_f16, &scalar_attn_accum_f16, &scalar_exp_f32_row,
                       &generic_attn_scores_f16_multi, &generic_attn_accum_f16_multi, &scalar_rope_rotate,
                       &generic_attn_softmax_multi, 24};
  }();
  return h;
}

const Helpers& helpers() {
  static const Helpers h = [] {
#if defined(GENIEX_HAVE_AVX2_KERNELS)
    if (avx2_usable()) {
      return Helpers{&avx2::dot_f32,         &avx2::axpy_f32,    &avx2::fp16_to_f32_row,
                     &avx2::f32_to_fp16_row, &avx2::dot_f32_f16, &avx2::axpy_f16};
    }
#endif
#if defined(GENIEX_HAVE_NEON_KERNELS)
    return Helpers{&neon::dot_f32,         &neon::axpy_f32,    &neon::fp16_to_f32_row,
                   &neon::f32_to_fp16_row, &neon::dot_f32_f16, &neon::axpy_f16};
#endif
    return Helpers{&scalar_dot_f32,         &scalar_axpy_f32,    &scalar_fp16_to_f32_row,
                   &scalar_f32_to_fp16_row, &scalar_dot_f32_f16, &scalar_axpy_f16};
  }();
  return h;
}

}  // namespace

const TypeKernels* kernels_for(DType weight_type) {
#if defined(GENIEX_HAVE_AVX2_KERNELS)
  if (avx512_usable()) {
    if (const TypeKernels* k = avx512::kernels(weight_type)) return k;
  }
  if (avx2_usable()) {
    if (const TypeKernels* k = avx2::kernels(weight_type)) return k;
  }
#endif
#if defined(GENIEX_HAVE_NEON_KERNELS)
  if (i8mm_usable()) {
    if (const TypeKernels* k = neon_i8mm::kernels(weight_type)) return k;
  }
  if (dotprod_usable()) {
    if (const TypeKernels* k = neon_dotprod::kernels(weight_type)) return k;
  }
  if (const TypeKernels* k = neon::kernels(weight_type)) return k;
#endif
  return scalar_kernels(weight_type);
}

const TypeKernels* kernels_for_isa(DType weight_type, const char* isa) {
  if (isa == nullptr) return nullptr;
  if (std::strcmp(isa, "scalar") == 0) return scalar_kernels(weight_type);
#if defined(GENIEX_HAVE_NEON_KERNELS)
  if (std::strcmp(isa, "neon") == 0) return neon::kernels(weight_type);
  if (std::strcmp(isa, "dotprod") == 0) return dotprod_usable() ? neon_dotprod::kernels(weight_type) : nullptr;
  if (std::strcmp(isa, "i8mm") == 0) return i8mm_usable() ? neon_i8mm::kernels(weight_type) : nullptr;
#endif
#if defined(GENIEX_HAVE_AVX2_KERNELS)
  if (std::strcmp(isa, "avx2") == 0) return avx2_usable() ? avx2::kernels(weight_type) : nullptr;
  if (std::strcmp(isa, "avx512") == 0) return avx512_usable() ? avx512::kernels(weight_type) : nullptr;
#endif
  return nullptr;
}

float dot_f32(const float* a, const float* b, int64_t n) { return helpers().dot_f32(a, b, n); }
void axpy_f32(float alpha, const float* x, float* y, int64_t n) {
  helpers().axpy_f32(alpha, x, y, n);
}
void fp16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  helpers().fp16_to_f32_row(src, dst, n);
}
void f32_to_fp16_row(const float* src, uint16_t* dst, int64_t n) {
  helpers().f32_to_fp16_row(src, dst, n);
}
float dot_f32_f16(const float* a, const uint16_t* b, int64_t n) {
  return helpers().dot_f32_f16(a, b, n);
}
void axpy_f16(float alpha, const uint16_t* x, float* y, int64_t n) {
  helpers().axpy_f16(alpha, x, y, n);
}
void attn_scores_f16(const float* q, const uint8_t* k, size_t row_bytes, int n_keys, int64_t hd, float scale,
                     float* scores) {
  attn_helpers().attn_scores_f16(q, k, row_bytes, n_keys, hd, scale, scores);
}
void attn_accum_f16(const float* p, const uint8_t* v, size_t row_bytes, int n_keys, int64_t hd, float* acc) {
  attn_helpers().attn_accum_f16(p, v, row_bytes, n_keys, hd, acc);
}
void exp_f32_row(const float* x, float* y, int64_t n) { attn_helpers().exp_f32_row(x, y, n); }
void rope_rotate(const float* x, float* y, const float* cs, const float* sn, int half, bool interleaved) {
  attn_helpers().rope_rotate(x, y, cs, sn, half, interleaved);
}
void attn_scores_f16_multi(const float* q, int64_t q_stride, int nq, const KvRun* runs, int n_runs, size_t row_bytes,
                           int64_t hd, float scale, float* scores, int64_t ld) {
  attn_helpers().attn_scores_f16_multi(q, q_stride, nq, runs, n_runs, row_bytes, hd, scale, scores, ld);
}
int attn_unit_queries() { return attn_helpers().unit_queries; }
void attn_accum_f16_multi(const float* p, int64_t ld, int nq, const uint8_t* v, size_t row_bytes, int n_keys,
                          int64_t hd, float* acc, int64_t acc_stride) {
  attn_helpers().attn_accum_f16_multi(p, ld, nq, v, row_bytes, n_keys, hd, acc, acc_stride);
}
void attn_softmax_multi(float* s, int64_t ld, int nq, int32_t jlo, int n_keys, const int32_t* kv0,
                        const int32_t* n_kv) {
  attn_helpers().attn_softmax_multi(s, ld, nq, jlo, n_keys, kv0, n_kv);
}

}  // namespace geniex::cpu
