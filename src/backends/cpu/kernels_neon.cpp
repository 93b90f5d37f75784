// Armv8.0 NEON kernels (every AArch64 CPU): integer dot products through widening multiplies
// (SMULL + SADALP), the activation quantizers, dequantizers and the f32 helpers. The dotprod
// and i8mm files reuse the same bodies (kernels_neon_impl.hpp) with newer instructions.
#define GENIEX_NEON_SDOT 0
#include "backends/cpu/kernels_neon_impl.hpp"

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

}  // namespace geniex::cpu::neon
