// Arithmetic shared by the CUDA kernels and testable on the host: fp16 conversion, the
// exponential, activation quantization and block decoding/dot products for Q4_0, Q4_1, Q8_0,
// Q4_K and Q6_K. Every function is __host__ __device__ and follows src/quant's reference
// step for step (same operations, same order), so tests/cuda/test_cuda_host.cpp can compare
// them with the reference on the CPU without a GPU. Only the kernels' parallel reduction
// order (float sums across blocks) is left unchecked there; the op harness checks it on a GPU.
//
// Plain C++ when compiled by the host compiler (GX_HD expands to nothing), so host code and
// tests include it too.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/quant.hpp"

#if defined(__CUDACC__)
#define GX_HD __host__ __device__ __forceinline__
#else
#define GX_HD inline
#endif

namespace geniex::cuda_math {

GX_HD float bits_to_float(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
#endif
}
GX_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
#endif
}

// Round to the nearest integer, ties to even (rintf on the device, the default rounding mode
// of nearbyint on the host: both are what ggml's x86 activation quantizer does).
GX_HD float round_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}

// Products and sums that the device compiler must not fuse into an FMA: the reference
// dequantizers round after each operation, and GetRows is compared bit for bit.
GX_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
GX_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

GX_HD float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // subnormal: mant * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Round to nearest even (F16C's _cvtss_sh(x, 0), core/fp16.hpp's f32_to_fp16).
GX_HD uint16_t float_to_half(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {
    // Below 2^-14: a subnormal half (or zero); a * 2^24 is exact, then one rounding.
    const auto m = static_cast<uint32_t>(round_even(bits_to_float(ax) * 16777216.0f));
    return static_cast<uint16_t>(sign | m);  // m == 0x400 encodes the smallest normal, correctly
  }
  const uint32_t odd = (ax >> 13) & 1u;
  return static_cast<uint16_t>(sign | ((ax + 0xfffu + odd - 0x38000000u) >> 13));
}

// GenieX's exponential (src/core/exp.hpp): exp in double, rounded once to float.
GX_HD float exp_f32(float x) { return static_cast<float>(exp(static_cast<double>(x))); }

// ---- activation quantization (quant::quantize_activations_ref) -------------------------------

// Q8_0 / Q8_1 scale of a 32-block from its largest magnitude: d stored, id used to quantize.
GX_HD float q8_scale(float amax) { return amax / 127.0f; }
GX_HD float q8_inv_scale(float amax) { return amax != 0.0f ? 127.0f / amax : 0.0f; }
GX_HD int8_t q8_quant(float x, float id) { return static_cast<int8_t>(round_even(x * id)); }

// Q8_K: from the signed element of largest magnitude (first one on ties).
GX_HD float q8k_iscale(float max) { return -127.0f / max; }
GX_HD int8_t q8k_quant(float x, float iscale) {
  const float r = round_even(iscale * x);
  return static_cast<int8_t>(r < 127.0f ? r : 127.0f);
}

// ---- weight decoding: element i (0 .. block size - 1) of one block ---------------------------

GX_HD float dequant_q4_0(const quant::BlockQ4_0& b, int i) {
  const int q = i < 16 ? (b.qs[i] & 0x0f) : (b.qs[i - 16] >> 4);
  return mul_rn(static_cast<float>(q - 8), half_to_float(b.d));
}
GX_HD float dequant_q4_1(const quant::BlockQ4_1& b, int i) {
  const int q = i < 16 ? (b.qs[i] & 0x0f) : (b.qs[i - 16] >> 4);
  return add_rn(mul_rn(static_cast<float>(q), half_to_float(b.d)), half_to_float(b.m));
}
GX_HD float dequant_q8_0(const quant::BlockQ8_0& b, int i) {
  return mul_rn(static_cast<float>(b.qs[i]), half_to_float(b.d));
}
// Q4_K: sub-block s = i / 32 has its own 6-bit scale and min; quants of sub-blocks 2j and
// 2j+1 share 32 bytes (low, then high nibbles).
GX_HD void scale_min_k4(int j, const uint8_t* q, int* d, int* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
GX_HD float dequant_q4_k(const quant::BlockQ4_K& b, int i) {
  const int s = i / 32, l = i % 32;
  int sc, m;
  scale_min_k4(s, b.scales, &sc, &m);
  const float d1 = mul_rn(half_to_float(b.d), static_cast<float>(sc));
  const float m1 = mul_rn(half_to_float(b.dmin), static_cast<float>(m));
  const uint8_t byte = b.qs[(s / 2) * 32 + l];
  const int q = (s % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
  return add_rn(mul_rn(d1, static_cast<float>(q)), -m1);
}
// Q6_K: element i lies in half h (128 values), quarter k (32 values) of it, lane l.
GX_HD int q6_k_quant(const quant::BlockQ6_K& b, int h, int k, int l) {
  const uint8_t* ql = b.ql + h * 64;
  const uint8_t* qh = b.qh + h * 32;
  const int low = (k & 1) ? ql[l + 32] : ql[l];
  const int nib = (k & 2) ? (low >> 4) : (low & 0x0f);
  return (nib | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
}
GX_HD float dequant_q6_k(const quant::BlockQ6_K& b, int i) {
  const int h = i / 128, k = (i % 128) / 32, l = i % 32;
  const int sc = b.scales[h * 8 + 2 * k + l / 16];
  return mul_rn(mul_rn(half_to_float(b.d), static_cast<float>(sc)), static_cast<float>(q6_k_quant(b, h, k, l)));
}

// Element i of a row of type t: weights (F32, F16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) or int8
// activations (Q8_0, Q8_1, Q8_K).
GX_HD float dequant_row_at(DType t, const uint8_t* row, int64_t i) {
  switch (t) {
    case DType::F32: {
      float v;
      memcpy(&v, row + i * 4, sizeof(v));
      return v;
    }
    case DType::F16: {
      uint16_t h;
      memcpy(&h, row + i * 2, sizeof(h));
      return half_to_float(h);
    }
    case DType::Q4_0: return dequant_q4_0(reinterpret_cast<const quant::BlockQ4_0*>(row)[i / 32], static_cast<int>(i % 32));
    case DType::Q4_1: return dequant_q4_1(reinterpret_cast<const quant::BlockQ4_1*>(row)[i / 32], static_cast<int>(i % 32));
    case DType::Q8_0: return dequant_q8_0(reinterpret_cast<const quant::BlockQ8_0*>(row)[i / 32], static_cast<int>(i % 32));
    case DType::Q4_K: return dequant_q4_k(reinterpret_cast<const quant::BlockQ4_K*>(row)[i / 256], static_cast<int>(i % 256));
    case DType::Q6_K: return dequant_q6_k(reinterpret_cast<const quant::BlockQ6_K*>(row)[i / 256], static_cast<int>(i % 256));
    // Activation formats (the prefill GEMM decodes int8 activations to fp16).
    case DType::Q8_1: {
      const quant::BlockQ8_1& b = reinterpret_cast<const quant::BlockQ8_1*>(row)[i / 32];
      return mul_rn(static_cast<float>(b.qs[i % 32]), half_to_float(b.d));
    }
    case DType::Q8_K: {
      const quant::BlockQ8_K& b = reinterpret_cast<const quant::BlockQ8_K*>(row)[i / 256];
      float d;
      memcpy(&d, &b.d, sizeof(d));
      return mul_rn(d, static_cast<float>(b.qs[i % 256]));
    }
    default: return 0.0f;  // never reached: callers admit only the types above
  }
}

// ---- dot products of one 32-value unit with int8 activations ---------------------------------
// A unit is a whole block for the 32-element types and one of the 8 sub-blocks of 32 for the
// K-quants; matrix-vector kernels give each lane units in turn. Results are the reference's
// per-block float expression (32-element types) or its integer parts (K-quants), so summing a
// block's units reproduces quant::vec_dot_ref exactly.

GX_HD float dot_unit_q4_0(const quant::BlockQ4_0& w, const quant::BlockQ8_0& a) {
  int sumi = 0;
  for (int j = 0; j < 16; ++j) {
    sumi += ((w.qs[j] & 0x0f) - 8) * a.qs[j];
    sumi += ((w.qs[j] >> 4) - 8) * a.qs[j + 16];
  }
  return static_cast<float>(sumi) * (half_to_float(w.d) * half_to_float(a.d));
}
GX_HD float dot_unit_q4_1(const quant::BlockQ4_1& w, const quant::BlockQ8_1& a) {
  int sumi = 0;
  for (int j = 0; j < 16; ++j) {
    sumi += (w.qs[j] & 0x0f) * a.qs[j];
    sumi += (w.qs[j] >> 4) * a.qs[j + 16];
  }
  return add_rn(mul_rn(static_cast<float>(sumi), half_to_float(w.d) * half_to_float(a.d)),
                mul_rn(half_to_float(w.m), half_to_float(a.s)));
}
GX_HD float dot_unit_q8_0(const quant::BlockQ8_0& w, const quant::BlockQ8_0& a) {
  int sumi = 0;
  for (int j = 0; j < 32; ++j) sumi += w.qs[j] * a.qs[j];
  return static_cast<float>(sumi) * (half_to_float(w.d) * half_to_float(a.d));
}

struct KParts {
  int sumi = 0;   // sum of scale * (quant . q8)
  int summs = 0;  // Q4_K: sum of min * (sum of q8), subtracted with dmin
};
// Q4_K sub-block s (0..7).
GX_HD KParts dot_unit_q4_k(const quant::BlockQ4_K& w, const quant::BlockQ8_K& a, int s) {
  int sc, m;
  scale_min_k4(s, w.scales, &sc, &m);
  const uint8_t* q4 = w.qs + (s / 2) * 32;
  const int8_t* q8 = a.qs + s * 32;
  const int shift = (s % 2) * 4;
  int acc = 0;
  for (int l = 0; l < 32; ++l) acc += ((q4[l] >> shift) & 0x0f) * q8[l];
  KParts p;
  p.sumi = sc * acc;
  p.summs = m * (a.bsums[2 * s] + a.bsums[2 * s + 1]);
  return p;
}
GX_HD float q4_k_block_value(const quant::BlockQ4_K& w, const quant::BlockQ8_K& a, KParts p) {
  const float d = half_to_float(w.d) * a.d;
  const float dmin = half_to_float(w.dmin) * a.d;
  return add_rn(mul_rn(d, static_cast<float>(p.sumi)), -mul_rn(dmin, static_cast<float>(p.summs)));
}
// Q6_K unit u (0..7): half u / 4, quarter u % 4; two 16-value scales.
GX_HD KParts dot_unit_q6_k(const quant::BlockQ6_K& w, const quant::BlockQ8_K& a, int u) {
  const int h = u / 4, k = u % 4;
  const int8_t* q8 = a.qs + h * 128 + k * 32;
  int s0 = 0, s1 = 0;
  for (int l = 0; l < 16; ++l) s0 += q6_k_quant(w, h, k, l) * q8[l];
  for (int l = 16; l < 32; ++l) s1 += q6_k_quant(w, h, k, l) * q8[l];
  KParts p;
  p.sumi = w.scales[h * 8 + 2 * k] * s0 + w.scales[h * 8 + 2 * k + 1] * s1;
  return p;
}
GX_HD float q6_k_block_value(const quant::BlockQ6_K& w, const quant::BlockQ8_K& a, KParts p) {
  return mul_rn(half_to_float(w.d) * a.d, static_cast<float>(p.sumi));
}

// ---- attention / rope index helpers ----------------------------------------------------------

// First key position a query at position pos sees (sliding window; 0 = unlimited).
GX_HD int32_t first_visible(int32_t pos, int32_t window) {
  const int32_t n_kv = pos + 1;
  return window > 0 ? (n_kv - window > 0 ? n_kv - window : 0) : 0;
}
// Rope: the two elements that pair i of a head rotates (normal: adjacent; NeoX: halves).
GX_HD void rope_pair(bool neox, int i, int half, int* i0, int* i1) {
  *i0 = neox ? i : 2 * i;
  *i1 = neox ? i + half : 2 * i + 1;
}

}  // namespace geniex::cuda_math
