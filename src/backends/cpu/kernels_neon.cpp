// Armv8.0 NEON kernels (every AArch64 CPU): integer dot products through widening multiplies
// (SMULL + SADALP), the activation quantizers, dequantizers, the f32 helpers and the
// exponential. The dotprod
// and i8mm files reuse the same bodies (kernels_neon_impl.hpp) with newer instructions.
#define GENIEX_NEON_SDOT 0
#include "backends/cpu/kernels_neon_impl.hpp"

#include "backends/cpu/exp_table.hpp"
#include "backends/cpu/kernels_internal.hpp"

namespace geniex::cpu::neon {

const TypeKernels* kernels(DType t) { return DotTable::find(t, "neon"); }

float dot_f32(const float* a, const float* b, int64_t n) {
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
  }
  float s = vaddvq_f32(vaddq_f32(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_f32(float alpha, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), alpha));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void fp16_to_f32_row(const uint16_t* src, float* dst, int64_t n) { dequantize_f16(src, dst, n); }
void f32_to_fp16_row(const float* src, uint16_t* dst, int64_t n) { quantize_f16(src, dst, n); }

float dot_f32_f16(const float* a, const uint16_t* b, int64_t n) {
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s0 = vfmaq_f32(s0, vld1q_f32(a + i), LoadF16::load4(b + i));
    s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), LoadF16::load4(b + i + 4));
  }
  float s = vaddvq_f32(vaddq_f32(s0, s1));
  for (; i < n; ++i) s += a[i] * h2f(b[i]);
  return s;
}

void axpy_f16(float alpha, const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), LoadF16::load4(x + i), alpha));
  }
  for (; i < n; ++i) y[i] += alpha * h2f(x[i]);
}

// Per-key calls of the two helpers above, so the results are theirs bit for bit (the contract
// of cpu::attn_scores_f16 / attn_accum_f16).
void attn_scores_f16(const float* q, const uint8_t* k, size_t row_bytes, int n_keys, int64_t hd,
                     float scale, float* scores) {
  for (int j = 0; j < n_keys; ++j) {
    const auto* kr = reinterpret_cast<const uint16_t*>(k + static_cast<size_t>(j) * row_bytes);
    scores[j] = dot_f32_f16(q, kr, hd) * scale;
  }
}

void attn_accum_f16(const float* p, const uint8_t* v, size_t row_bytes, int n_keys, int64_t hd,
                    float* acc) {
  for (int j = 0; j < n_keys; ++j) {
    axpy_f16(p[j], reinterpret_cast<const uint16_t*>(v + static_cast<size_t>(j) * row_bytes), acc, hd);
  }
}

namespace {
// exp_f32 of 2 floats (core/exp.hpp: exp in double, rounded once), the steps of the AVX-512 exp
// (attn_avx512.cpp, which see for the reduction, the clamp and the polynomial's error) on two
// double lanes: k = round(x 16/ln2) by the 1.5 * 2^52 add, r = x - k ln2/16 (hi + lo, fused),
// exp(r) - 1 by degree 7, 2^(j/16) + 2^(j/16) (exp(r) - 1) in one fma (2^(j/16) loaded per lane:
// NEON has no double-lane table lookup), then times 2^m, m = k >> 4, built in the exponent
// field (exact: 2^m and the product are normal doubles for |x| <= 700). FMIN turns NaN into
// NaN (where x86 gives 700), so NaN lanes run harmlessly through (the table index is masked)
// and are put back at the end as x + x.
inline float32x2_t exp2_f32_via_f64(float32x2_t x_in) {
  const float64x2_t inv = vdupq_n_f64(0x1.71547652b82fep+4);  // 16 / ln2
  const float64x2_t c_hi = vdupq_n_f64(0x1.62e42fefc0000p-5);
  const float64x2_t c_lo = vdupq_n_f64(-0x1.c610ca86c3899p-41);
  const float64x2_t magic = vdupq_n_f64(0x1.8p52);
  const float32x2_t xf = vmax_f32(vmin_f32(x_in, vdup_n_f32(700.0f)), vdup_n_f32(-700.0f));
  const float64x2_t xd = vcvt_f64_f32(xf);
  const float64x2_t kd = vaddq_f64(vmulq_f64(xd, inv), magic);  // round to nearest even
  const float64x2_t k = vsubq_f64(kd, magic);
  const float64x2_t r = vfmsq_f64(vfmsq_f64(xd, k, c_hi), k, c_lo);
  float64x2_t p = vdupq_n_f64(1.0 / 5040);
  p = vfmaq_f64(vdupq_n_f64(1.0 / 720), p, r);
  p = vfmaq_f64(vdupq_n_f64(1.0 / 120), p, r);
  p = vfmaq_f64(vdupq_n_f64(1.0 / 24), p, r);
  p = vfmaq_f64(vdupq_n_f64(1.0 / 6), p, r);
  p = vfmaq_f64(vdupq_n_f64(0.5), p, r);
  p = vfmaq_f64(vdupq_n_f64(1.0), p, r);
  p = vmulq_f64(p, r);  // exp(r) - 1
  const uint64x2_t kb = vreinterpretq_u64_f64(kd);
  const float64x2_t frac = vcombine_f64(vld1_f64(&kExp2Frac64[4 * (vgetq_lane_u64(kb, 0) & 15)]),
                                        vld1_f64(&kExp2Frac64[4 * (vgetq_lane_u64(kb, 1) & 15)]));
  const int64x2_t m = vshrq_n_s64(vcvtq_s64_f64(k), 4);  // floor(k / 16)
  const float64x2_t scale = vreinterpretq_f64_s64(vshlq_n_s64(vaddq_s64(m, vdupq_n_s64(1023)), 52));
  const float64x2_t e = vmulq_f64(vfmaq_f64(frac, frac, p), scale);
  const uint32x2_t is_num = vceq_f32(x_in, x_in);
  return vbsl_f32(is_num, vcvt_f32_f64(e), vadd_f32(x_in, x_in));
}
}  // namespace

void exp_f32_row(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  // Independent pairs side by side: the polynomial is a chain of dependent fmas.
  for (; i + 8 <= n; i += 8) {
    const float32x2_t a = exp2_f32_via_f64(vld1_f32(x + i));
    const float32x2_t b = exp2_f32_via_f64(vld1_f32(x + i + 2));
    const float32x2_t c = exp2_f32_via_f64(vld1_f32(x + i + 4));
    const float32x2_t d = exp2_f32_via_f64(vld1_f32(x + i + 6));
    vst1q_f32(y + i, vcombine_f32(a, b));
    vst1q_f32(y + i + 4, vcombine_f32(c, d));
  }
  for (; i + 2 <= n; i += 2) vst1_f32(y + i, exp2_f32_via_f64(vld1_f32(x + i)));
  if (i < n) {
    const float t[2] = {x[i], 0.0f};
    y[i] = vget_lane_f32(exp2_f32_via_f64(vld1_f32(t)), 0);
  }
}

}  // namespace geniex::cpu::neon
