// NEON kernel bodies shared by the three AArch64 kernel files: kernels_neon.cpp (Armv8.0
// NEON), kernels_neon_dotprod.cpp (+dotprod: SDOT) and kernels_neon_i8mm.cpp (+dotprod+i8mm:
// SDOT for single tokens, SMMLA 2x2 tiles for several). Each file compiles this header with its
// own -march flags and GENIEX_NEON_SDOT setting; everything here sits in an anonymous namespace
// so that no function compiled with a newer instruction set can be picked by the linker for an
// older one (the ODR merging of inline functions across translation units).
// Integer dot products: 4/8-bit weights against int8 activations, exact in int32; dequantizers
// and activation quantizers are bit-exact with the scalar references in quant/.
#pragma once

#if !defined(__aarch64__)
#error "kernels_neon_impl.hpp is for AArch64 builds only"
#endif
#if !defined(GENIEX_NEON_SDOT)
#error "define GENIEX_NEON_SDOT (0 or 1) before including kernels_neon_impl.hpp"
#endif

#include <arm_neon.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels.hpp"
#include "backends/cpu/kernels_internal.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu {
namespace {

using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_1;
using quant::BlockQ8_K;

// ---- small helpers ---------------------------------------------------------------------------

inline uint16_t load_u16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

inline float h2f(uint16_t h) {
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}
inline uint16_t f2h(float f) {
  return vget_lane_u16(vreinterpret_u16_f16(vcvt_f16_f32(vdupq_n_f32(f))), 0);
}

// acc + the dot products of a and b; lane contents differ between the two forms (SDOT sums
// groups of 4 bytes, the widening form pairs of products), only the lane total is defined.
inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if GENIEX_NEON_SDOT
  return vdotq_s32(acc, a, b);
#else
  // |a_i * b_i| <= 16384 fits int16; vpadalq widens before adding pairs.
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

// 32 quants of one block: elements 0..15 in lo, 16..31 in hi.
struct Q32 {
  int8x16_t lo, hi;
};

// 16 packed nibbles -> low nibbles (elements 0..15) and high nibbles (16..31).
inline Q32 unpack_nibbles(const uint8_t* p) {
  const uint8x16_t q = vld1q_u8(p);
  return {vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), vreinterpretq_s8_u8(vshrq_n_u8(q, 4))};
}

// Bit j of the little-endian uint32 at qh -> byte j of the result is 0x10 when set, else 0.
inline void expand_bit5(const uint8_t* qh, uint8x16_t* lo, uint8x16_t* hi) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const uint8x8_t b = vcreate_u8(static_cast<uint64_t>(bits));
  static const uint8_t kIdxLo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  static const uint8_t kIdxHi[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t bb = vcombine_u8(b, b);
  const uint8x16_t bit = vld1q_u8(kBit);
  const uint8x16_t v16 = vdupq_n_u8(0x10);
  *lo = vandq_u8(vtstq_u8(vqtbl1q_u8(bb, vld1q_u8(kIdxLo)), bit), v16);
  *hi = vandq_u8(vtstq_u8(vqtbl1q_u8(bb, vld1q_u8(kIdxHi)), bit), v16);
}

inline Q32 unpack_q5(const uint8_t* qh, const uint8_t* qs, int offset) {
  const uint8x16_t q = vld1q_u8(qs);
  uint8x16_t blo, bhi;
  expand_bit5(qh, &blo, &bhi);
  const uint8x16_t lo = vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0f)), blo);
  const uint8x16_t hi = vorrq_u8(vshrq_n_u8(q, 4), bhi);
  const int8x16_t off = vdupq_n_s8(static_cast<int8_t>(offset));
  return {vsubq_s8(vreinterpretq_s8_u8(lo), off), vsubq_s8(vreinterpretq_s8_u8(hi), off)};
}

// ---- 32-element block formats ----------------------------------------------------------------
// Each trait decodes a weight block to 32 signed quants (offsets already applied) with its
// scale (and min), and an activation block with its scale (and d * sum).

struct TraitQ8_0 {
  static constexpr size_t kWBytes = sizeof(BlockQ8_0);
  static constexpr size_t kABytes = sizeof(BlockQ8_0);
  static constexpr bool kHasMin = false;
  static Q32 load_w(const uint8_t* p) {
    const auto* q = reinterpret_cast<const int8_t*>(p + 2);
    return {vld1q_s8(q), vld1q_s8(q + 16)};
  }
  static float w_d(const uint8_t* p) { return h2f(load_u16(p)); }
  static float w_m(const uint8_t*) { return 0.0f; }
};

struct TraitQ4_0 {
  static constexpr size_t kWBytes = sizeof(BlockQ4_0);
  static constexpr size_t kABytes = sizeof(BlockQ8_0);
  static constexpr bool kHasMin = false;
  static Q32 load_w(const uint8_t* p) {
    const Q32 q = unpack_nibbles(p + 2);
    const int8x16_t eight = vdupq_n_s8(8);
    return {vsubq_s8(q.lo, eight), vsubq_s8(q.hi, eight)};
  }
  static float w_d(const uint8_t* p) { return h2f(load_u16(p)); }
  static float w_m(const uint8_t*) { return 0.0f; }
};

struct TraitQ4_1 {
  static constexpr size_t kWBytes = sizeof(BlockQ4_1);
  static constexpr size_t kABytes = sizeof(BlockQ8_1);
  static constexpr bool kHasMin = true;
  static Q32 load_w(const uint8_t* p) { return unpack_nibbles(p + 4); }
  static float w_d(const uint8_t* p) { return h2f(load_u16(p)); }
  static float w_m(const uint8_t* p) { return h2f(load_u16(p + 2)); }
};

struct TraitQ5_0 {
  static constexpr size_t kWBytes = sizeof(BlockQ5_0);
  static constexpr size_t kABytes = sizeof(BlockQ8_0);
  static constexpr bool kHasMin = false;
  static Q32 load_w(const uint8_t* p) { return unpack_q5(p + 2, p + 6, 16); }
  static float w_d(const uint8_t* p) { return h2f(load_u16(p)); }
  static float w_m(const uint8_t*) { return 0.0f; }
};

struct TraitQ5_1 {
  static constexpr size_t kWBytes = sizeof(BlockQ5_1);
  static constexpr size_t kABytes = sizeof(BlockQ8_1);
  static constexpr bool kHasMin = true;
  static Q32 load_w(const uint8_t* p) { return unpack_q5(p + 4, p + 8, 0); }
  static float w_d(const uint8_t* p) { return h2f(load_u16(p)); }
  static float w_m(const uint8_t* p) { return h2f(load_u16(p + 2)); }
};

// Activation blocks: Q8_0 (d, qs) or Q8_1 (d, s, qs).
template <class T>
inline Q32 load_a(const uint8_t* p) {
  const auto* q = reinterpret_cast<const int8_t*>(p + (T::kHasMin ? 4 : 2));
  return {vld1q_s8(q), vld1q_s8(q + 16)};
}
inline float a_d(const uint8_t* p) { return h2f(load_u16(p)); }
inline float a_s(const uint8_t* p) { return h2f(load_u16(p + 2)); }

// R weight rows x C activation columns (2 <= C <= 4; one column: tile_dot_col) over nb
// blocks with integer dot products.
// Per block, row and column the exact int32 sum S is converted once and fma'd as
// acc + float(S) * (d_w * d_a) (the min term, d_w's m times the activation's s, summed apart
// and added at the end): the arithmetic of the SMMLA tiles (kernels_neon_i8mm.cpp), so a
// column's bits do not depend on C or on which of the two paths ran it. The C columns' sums
// share one vector (lane c), built by pairwise adds; lanes past C repeat columns mod C.
// (Not inlined: one call runs a whole tile, and each width's block loop stays one compact body.)
template <class T, int R, int C>
__attribute__((noinline)) void tile_dot(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as,
                                        float* out, int64_t os) {
  static_assert(C >= 2 && C <= 4);
  float32x4_t acc[R], macc[R];
  for (int r = 0; r < R; ++r) acc[r] = macc[r] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    Q32 av[C];
    // The columns' fp16 d (and s) in lanes c (mod C), converted together.
    uint16x4_t adh = vdup_n_u16(0), ash = vdup_n_u16(0);
    for (int c = 0; c < C; ++c) {
      const uint8_t* ap = a + c * as + static_cast<size_t>(b) * T::kABytes;
      av[c] = load_a<T>(ap);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const uint8_t* ap = a + (c % C) * as + static_cast<size_t>(b) * T::kABytes;
      adh = vld1_lane_u16(reinterpret_cast<const uint16_t*>(ap), adh, c);
      if constexpr (T::kHasMin) ash = vld1_lane_u16(reinterpret_cast<const uint16_t*>(ap + 2), ash, c);
    }
    const float32x4_t adv = vcvt_f32_f16(vreinterpret_f16_u16(adh));
    const float32x4_t asv = vcvt_f32_f16(vreinterpret_f16_u16(ash));
    for (int r = 0; r < R; ++r) {
      const uint8_t* wp = w + r * ws + static_cast<size_t>(b) * T::kWBytes;
      const Q32 wv = T::load_w(wp);
      int32x4_t si[4];
      for (int c = 0; c < C; ++c) si[c] = dot16(dot16(vdupq_n_s32(0), wv.lo, av[c].lo), wv.hi, av[c].hi);
      for (int c = C; c < 4; ++c) si[c] = si[c % C];
      const int32x4_t sum = vpaddq_s32(vpaddq_s32(si[0], si[1]), vpaddq_s32(si[2], si[3]));
      acc[r] = vfmaq_f32(acc[r], vcvtq_f32_s32(sum), vmulq_n_f32(adv, T::w_d(wp)));
      if constexpr (T::kHasMin) macc[r] = vaddq_f32(macc[r], vmulq_n_f32(asv, T::w_m(wp)));
    }
  }
  for (int r = 0; r < R; ++r) {
    float v[4];
    vst1q_f32(v, vaddq_f32(acc[r], macc[r]));
    for (int c = 0; c < C; ++c) out[c * os + r] = v[c];
  }
}

// R <= 4 weight rows x one activation column (single tokens, and the odd last column): the
// rows' block sums share one vector (lane r; lanes past R repeat rows mod R), with tile_dot's
// per-element arithmetic, so every output has the bits tile_dot gives it.
template <class T, int R>
__attribute__((noinline)) void tile_dot_col(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, float* out) {
  static_assert(R >= 1 && R <= 4);
  float32x4_t acc = vdupq_n_f32(0.0f), macc = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* ap = a + static_cast<size_t>(b) * T::kABytes;
    const Q32 av = load_a<T>(ap);
    int32x4_t si[4];
    float32x4_t wd = vdupq_n_f32(0.0f), wm = vdupq_n_f32(0.0f);
    for (int r = 0; r < R; ++r) {
      const uint8_t* wp = w + r * ws + static_cast<size_t>(b) * T::kWBytes;
      __builtin_prefetch(wp + 16 * ws);
      const Q32 wv = T::load_w(wp);
      si[r] = dot16(dot16(vdupq_n_s32(0), wv.lo, av.lo), wv.hi, av.hi);
      wd = vsetq_lane_f32(T::w_d(wp), wd, r);
      if constexpr (T::kHasMin) wm = vsetq_lane_f32(T::w_m(wp), wm, r);
    }
    for (int r = R; r < 4; ++r) si[r] = si[r % R];
    const int32x4_t sum = vpaddq_s32(vpaddq_s32(si[0], si[1]), vpaddq_s32(si[2], si[3]));
    acc = vfmaq_f32(acc, vcvtq_f32_s32(sum), vmulq_n_f32(wd, a_d(ap)));
    if constexpr (T::kHasMin) macc = vaddq_f32(macc, vmulq_n_f32(wm, a_s(ap)));
  }
  float v[4];
  vst1q_f32(v, vaddq_f32(acc, macc));
  for (int r = 0; r < R; ++r) out[r] = v[r];
}

template <class T, int C>
void tile_dot_rows(int rows, int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as,
                   float* out, int64_t os) {
  if constexpr (C == 1) {
    switch (rows) {
      case 4: tile_dot_col<T, 4>(nb, w, ws, a, out); break;
      case 3: tile_dot_col<T, 3>(nb, w, ws, a, out); break;
      case 2: tile_dot_col<T, 2>(nb, w, ws, a, out); break;
      default: tile_dot_col<T, 1>(nb, w, ws, a, out); break;
    }
  } else {
    switch (rows) {
      case 4: tile_dot<T, 4, C>(nb, w, ws, a, as, out, os); break;
      case 3: tile_dot<T, 3, C>(nb, w, ws, a, as, out, os); break;
      case 2: tile_dot<T, 2, C>(nb, w, ws, a, as, out, os); break;
      default: tile_dot<T, 1, C>(nb, w, ws, a, as, out, os); break;
    }
  }
}

// Row tiles of 4 outside, column tiles of 4 (then 2, 1) inside: each weight block is decoded
// once per 4 columns, and the weight tile stays in L1. Every output element's arithmetic is
// the same whatever the tile (tile_dot), so the tiling does not change any bits.
template <class T>
void gemm_dot(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
              size_t a_stride, int64_t n_cols, float* out, int64_t out_stride) {
  const int64_t nb = n / 32;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int64_t r0 = 0; r0 < n_rows; r0 += 4) {
    const int rows = static_cast<int>(n_rows - r0 < 4 ? n_rows - r0 : 4);
    const uint8_t* wr = wb + static_cast<size_t>(r0) * w_stride;
    int64_t c0 = 0;
    for (; c0 + 4 <= n_cols; c0 += 4) {
      tile_dot_rows<T, 4>(rows, nb, wr, w_stride, ab + static_cast<size_t>(c0) * a_stride,
                          a_stride, out + c0 * out_stride + r0, out_stride);
    }
    if (c0 + 2 <= n_cols) {
      tile_dot_rows<T, 2>(rows, nb, wr, w_stride, ab + static_cast<size_t>(c0) * a_stride,
                          a_stride, out + c0 * out_stride + r0, out_stride);
      c0 += 2;
    }
    if (c0 < n_cols) {
      tile_dot_rows<T, 1>(rows, nb, wr, w_stride, ab + static_cast<size_t>(c0) * a_stride,
                          a_stride, out + c0 * out_stride + r0, out_stride);
    }
  }
}

// ---- K-quants: one weight row . one activation row --------------------------------------------

inline void scale_min_k4(int j, const uint8_t* q, int* d, int* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Sum over the 8 sub-blocks of mins[j] * (bsums[2j] + bsums[2j+1]).
inline int mins_dot_bsums(const int* mins, const int16_t* bsums) {
  const int16x8_t b0 = vld1q_s16(bsums);
  const int16x8_t b1 = vld1q_s16(bsums + 8);
  const int16x8_t pairs = vpaddq_s16(b0, b1);  // bsums[2j] + bsums[2j+1], j = 0..7
  int32x4_t s = vdupq_n_s32(0);
  const int32_t m0[4] = {mins[0], mins[1], mins[2], mins[3]};
  const int32_t m1[4] = {mins[4], mins[5], mins[6], mins[7]};
  s = vmlaq_s32(s, vmovl_s16(vget_low_s16(pairs)), vld1q_s32(m0));
  s = vmlaq_s32(s, vmovl_s16(vget_high_s16(pairs)), vld1q_s32(m1));
  return vaddvq_s32(s);
}

// Quants of one Q4_K / Q5_K super-block in element order: 8 sub-blocks of 32 as Q32 pairs.
inline void unpack_q4_k(const BlockQ4_K& x, Q32* q) {
  const uint8x16_t low4 = vdupq_n_u8(0x0f);
  for (int j = 0; j < 4; ++j) {
    const uint8x16_t v0 = vld1q_u8(x.qs + 32 * j);
    const uint8x16_t v1 = vld1q_u8(x.qs + 32 * j + 16);
    q[2 * j] = {vreinterpretq_s8_u8(vandq_u8(v0, low4)), vreinterpretq_s8_u8(vandq_u8(v1, low4))};
    q[2 * j + 1] = {vreinterpretq_s8_u8(vshrq_n_u8(v0, 4)), vreinterpretq_s8_u8(vshrq_n_u8(v1, 4))};
  }
}

inline void unpack_q5_k(const BlockQ5_K& x, Q32* q) {
  const uint8x16_t low4 = vdupq_n_u8(0x0f);
  const uint8x16_t one = vdupq_n_u8(1);
  uint8x16_t h0 = vld1q_u8(x.qh), h1 = vld1q_u8(x.qh + 16);
  for (int j = 0; j < 4; ++j) {
    // Bit 2j of each qh byte is the fifth bit of the low-nibble quant, bit 2j+1 of the high.
    const uint8x16_t v0 = vld1q_u8(x.qs + 32 * j);
    const uint8x16_t v1 = vld1q_u8(x.qs + 32 * j + 16);
    const uint8x16_t lo0 = vorrq_u8(vandq_u8(v0, low4), vshlq_n_u8(vandq_u8(h0, one), 4));
    const uint8x16_t lo1 = vorrq_u8(vandq_u8(v1, low4), vshlq_n_u8(vandq_u8(h1, one), 4));
    const uint8x16_t hi0 = vorrq_u8(vshrq_n_u8(v0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h0, 1), one), 4));
    const uint8x16_t hi1 = vorrq_u8(vshrq_n_u8(v1, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h1, 1), one), 4));
    h0 = vshrq_n_u8(h0, 2);
    h1 = vshrq_n_u8(h1, 2);
    q[2 * j] = {vreinterpretq_s8_u8(lo0), vreinterpretq_s8_u8(lo1)};
    q[2 * j + 1] = {vreinterpretq_s8_u8(hi0), vreinterpretq_s8_u8(hi1)};
  }
}

// Q6_K: 16 groups of 16 signed quants (q - 32) in element order.
inline void unpack_q6_k(const BlockQ6_K& x, int8x16_t* q) {
  const uint8x16_t low4 = vdupq_n_u8(0x0f);
  const uint8x16_t mask3 = vdupq_n_u8(3);
  const int8x16_t m32 = vdupq_n_s8(32);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = x.ql + 64 * half;
    const uint8_t* qh = x.qh + 32 * half;
    int8x16_t* o = q + 8 * half;
    for (int k = 0; k < 2; ++k) {  // elements 16k..16k+15 of each group of 32
      const uint8x16_t l0 = vld1q_u8(ql + 16 * k);
      const uint8x16_t l1 = vld1q_u8(ql + 32 + 16 * k);
      const uint8x16_t h = vld1q_u8(qh + 16 * k);
      const uint8x16_t g0 = vorrq_u8(vandq_u8(l0, low4), vshlq_n_u8(vandq_u8(h, mask3), 4));
      const uint8x16_t g1 = vorrq_u8(vandq_u8(l1, low4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 2), mask3), 4));
      const uint8x16_t g2 = vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 4), mask3), 4));
      const uint8x16_t g3 = vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(h, 6), 4));
      o[0 + k] = vsubq_s8(vreinterpretq_s8_u8(g0), m32);
      o[2 + k] = vsubq_s8(vreinterpretq_s8_u8(g1), m32);
      o[4 + k] = vsubq_s8(vreinterpretq_s8_u8(g2), m32);
      o[6 + k] = vsubq_s8(vreinterpretq_s8_u8(g3), m32);
    }
  }
}

// One weight row's super-block against C <= 4 activation columns (column c at a + c * as):
// per column the exact int32 sum S and min dot M, then acc + float(S) * (d * d_a) and
// macc + float(M) * (dmin * d_a), each one fma, and acc - macc at the end: the arithmetic of the
// SMMLA tiles (kernels_neon_i8mm.cpp), so a column's bits do not depend on C or on the table.
// The C columns share one vector (lane c; lanes past C repeat columns mod C).
template <bool kFifthBit, int C>
void tile_k45_dot(int64_t nsb, const uint8_t* w, const uint8_t* a, size_t as, float* out, int64_t os) {
  using BlockW = std::conditional_t<kFifthBit, BlockQ5_K, BlockQ4_K>;
  static_assert(C >= 1 && C <= 4);
  const auto* x = reinterpret_cast<const BlockW*>(w);
  float32x4_t acc = vdupq_n_f32(0.0f), macc = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < nsb; ++i) {
    int sc[8], mn[8];
    for (int j = 0; j < 8; ++j) scale_min_k4(j, x[i].scales, &sc[j], &mn[j]);
    Q32 q[8];
    if constexpr (kFifthBit) {
      unpack_q5_k(x[i], q);
    } else {
      unpack_q4_k(x[i], q);
    }
    int32x4_t si[4];
    float yd[4], mins[4];
    for (int c = 0; c < C; ++c) {
      const auto& y = reinterpret_cast<const BlockQ8_K*>(a + static_cast<size_t>(c) * as)[i];
      int32x4_t sumi = vdupq_n_s32(0);
      for (int j = 0; j < 8; ++j) {
        const int8_t* q8 = y.qs + 32 * j;
        const int32x4_t p = dot16(dot16(vdupq_n_s32(0), q[j].lo, vld1q_s8(q8)), q[j].hi, vld1q_s8(q8 + 16));
        sumi = vmlaq_n_s32(sumi, p, sc[j]);
      }
      si[c] = sumi;
      yd[c] = y.d;
      mins[c] = static_cast<float>(mins_dot_bsums(mn, y.bsums));
    }
    for (int c = C; c < 4; ++c) {
      si[c] = si[c % C];
      yd[c] = yd[c % C];
      mins[c] = mins[c % C];
    }
    const int32x4_t sum = vpaddq_s32(vpaddq_s32(si[0], si[1]), vpaddq_s32(si[2], si[3]));
    const float32x4_t ydv = vld1q_f32(yd);
    acc = vfmaq_f32(acc, vcvtq_f32_s32(sum), vmulq_n_f32(ydv, h2f(x[i].d)));
    macc = vfmaq_f32(macc, vld1q_f32(mins), vmulq_n_f32(ydv, h2f(x[i].dmin)));
  }
  float v[4];
  vst1q_f32(v, vsubq_f32(acc, macc));
  for (int c = 0; c < C; ++c) out[c * os] = v[c];
}

template <int C>
void tile_q6_k_dot(int64_t nsb, const uint8_t* w, const uint8_t* a, size_t as, float* out, int64_t os) {
  static_assert(C >= 1 && C <= 4);
  const auto* x = reinterpret_cast<const BlockQ6_K*>(w);
  float32x4_t acc = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < nsb; ++i) {
    int8x16_t q[16];
    unpack_q6_k(x[i], q);
    int32x4_t si[4];
    float yd[4];
    for (int c = 0; c < C; ++c) {
      const auto& y = reinterpret_cast<const BlockQ8_K*>(a + static_cast<size_t>(c) * as)[i];
      int32x4_t sumi = vdupq_n_s32(0);
      for (int g = 0; g < 16; ++g) {
        const int32x4_t p = dot16(vdupq_n_s32(0), q[g], vld1q_s8(y.qs + 16 * g));
        sumi = vmlaq_n_s32(sumi, p, x[i].scales[g]);
      }
      si[c] = sumi;
      yd[c] = y.d;
    }
    for (int c = C; c < 4; ++c) {
      si[c] = si[c % C];
      yd[c] = yd[c % C];
    }
    const int32x4_t sum = vpaddq_s32(vpaddq_s32(si[0], si[1]), vpaddq_s32(si[2], si[3]));
    acc = vfmaq_f32(acc, vcvtq_f32_s32(sum), vmulq_n_f32(vld1q_f32(yd), h2f(x[i].d)));
  }
  float v[4];
  vst1q_f32(v, acc);
  for (int c = 0; c < C; ++c) out[c * os] = v[c];
}

// One row . one column (the i8mm tables' odd row and column, and their single tokens).
template <bool kFifthBit>
float dot_q45_k(const void* wv, const void* av, int64_t n) {
  float r;
  tile_k45_dot<kFifthBit, 1>(n / kQK_K, static_cast<const uint8_t*>(wv), static_cast<const uint8_t*>(av), 0, &r, 0);
  return r;
}

inline float dot_q6_k(const void* wv, const void* av, int64_t n) {
  float r;
  tile_q6_k_dot<1>(n / kQK_K, static_cast<const uint8_t*>(wv), static_cast<const uint8_t*>(av), 0, &r, 0);
  return r;
}

using KDotTile = void (*)(int64_t, const uint8_t*, const uint8_t*, size_t, float*, int64_t);

// Column chunks whose activations stay in L2 (~256 KiB) outside, rows inside, each row's
// super-blocks unpacked once per 4 columns.
template <KDotTile T4, KDotTile T3, KDotTile T2, KDotTile T1>
void gemm_k_dot(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
                size_t a_stride, int64_t n_cols, float* out, int64_t out_stride) {
  const int64_t nsb = n / kQK_K;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  const int64_t chunk = l2_column_chunk(static_cast<int64_t>(a_stride), 4);
  for (int64_t c0 = 0; c0 < n_cols; c0 += chunk) {
    const int64_t c1 = std::min(n_cols, c0 + chunk);
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint8_t* wr = wb + static_cast<size_t>(r) * w_stride;
      for (int64_t c = c0; c < c1; c += 4) {
        const uint8_t* ac = ab + static_cast<size_t>(c) * a_stride;
        float* o = out + c * out_stride + r;
        switch (std::min<int64_t>(4, c1 - c)) {
          case 4: T4(nsb, wr, ac, a_stride, o, out_stride); break;
          case 3: T3(nsb, wr, ac, a_stride, o, out_stride); break;
          case 2: T2(nsb, wr, ac, a_stride, o, out_stride); break;
          default: T1(nsb, wr, ac, a_stride, o, out_stride); break;
        }
      }
    }
  }
}

// ---- plain types: f32 / f16 / bf16 weights and activations ------------------------------------

struct LoadF32 {
  using E = float;
  static float32x4_t load4(const E* p) { return vld1q_f32(p); }
  static float load1(const E* p) { return *p; }
};
struct LoadF16 {
  using E = uint16_t;
  static float32x4_t load4(const E* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
  static float load1(const E* p) { return h2f(*p); }
};
struct LoadBF16 {
  using E = uint16_t;
  static float32x4_t load4(const E* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
  static float load1(const E* p) {
    const uint32_t b = static_cast<uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
};

template <class L, int R>
void tile_f(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, float* out) {
  using E = typename L::E;
  float32x4_t acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = vdupq_n_f32(0.0f);
  const auto* av = reinterpret_cast<const E*>(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t y0 = L::load4(av + i), y1 = L::load4(av + i + 4);
    for (int r = 0; r < R; ++r) {
      const E* wr = reinterpret_cast<const E*>(w + r * ws) + i;
      acc0[r] = vfmaq_f32(acc0[r], L::load4(wr), y0);
      acc1[r] = vfmaq_f32(acc1[r], L::load4(wr + 4), y1);
    }
  }
  for (int r = 0; r < R; ++r) {
    float s = vaddvq_f32(vaddq_f32(acc0[r], acc1[r]));
    const auto* wr = reinterpret_cast<const E*>(w + r * ws);
    for (int64_t k = i; k < n; ++k) s += L::load1(wr + k) * L::load1(av + k);
    out[r] = s;
  }
}

template <class L>
void gemm_f(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
            size_t a_stride, int64_t n_cols, float* out, int64_t out_stride) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int64_t r0 = 0; r0 < n_rows; r0 += 4) {
    const int64_t rows = n_rows - r0 < 4 ? n_rows - r0 : 4;
    const uint8_t* wr = wb + static_cast<size_t>(r0) * w_stride;
    for (int64_t c = 0; c < n_cols; ++c) {
      const uint8_t* ac = ab + static_cast<size_t>(c) * a_stride;
      float* o = out + c * out_stride + r0;
      switch (rows) {
        case 4: tile_f<L, 4>(n, wr, w_stride, ac, o); break;
        case 3: tile_f<L, 3>(n, wr, w_stride, ac, o); break;
        case 2: tile_f<L, 2>(n, wr, w_stride, ac, o); break;
        default: tile_f<L, 1>(n, wr, w_stride, ac, o); break;
      }
    }
  }
}

// ---- activation quantizers (bit-exact with the references) ------------------------------------

// Four int32x4 (elements 0..15 in order) -> 16 int8 with saturation (values are within
// [-127, 127] already).
inline int8x16_t narrow_i32x4x4(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
  const int16x8_t ab = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
  const int16x8_t cd = vcombine_s16(vqmovn_s32(c), vqmovn_s32(d));
  return vcombine_s8(vqmovn_s16(ab), vqmovn_s16(cd));
}

// 32 floats -> qs with d = amax / 127 and scale 127 / amax, ties to even (vcvtn); returns d
// and the sum of the quants.
inline float quantize_block32(const float* x, int8_t* qs, int* sum) {
  float32x4_t v[8];
  float32x4_t m = vdupq_n_f32(0.0f);
  for (int k = 0; k < 8; ++k) {
    v[k] = vld1q_f32(x + 4 * k);
    m = vmaxq_f32(m, vabsq_f32(v[k]));
  }
  const float amax = vmaxvq_f32(m);
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int32x4_t q[8];
  int32x4_t s = vdupq_n_s32(0);
  for (int k = 0; k < 8; ++k) {
    q[k] = vcvtnq_s32_f32(vmulq_n_f32(v[k], id));
    s = vaddq_s32(s, q[k]);
  }
  vst1q_s8(qs, narrow_i32x4x4(q[0], q[1], q[2], q[3]));
  vst1q_s8(qs + 16, narrow_i32x4x4(q[4], q[5], q[6], q[7]));
  *sum = vaddvq_s32(s);
  return d;
}

void quantize_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    int sum;
    y[i].d = f2h(quantize_block32(x, y[i].qs, &sum));
  }
}

void quantize_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    int sum;
    const float d = quantize_block32(x, y[i].qs, &sum);
    y[i].d = f2h(d);
    y[i].s = f2h(static_cast<float>(sum) * d);
  }
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int j = 0; j < kQK_K; j += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + j)));
    const float amax = vmaxvq_f32(m);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The reference keeps the first element of largest magnitude, with its sign.
    float max = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      if (__builtin_fabsf(x[j]) == amax) {
        max = x[j];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const int32x4_t cap = vdupq_n_s32(127);
    for (int j = 0; j < kQK_K; j += 16) {
      int32x4_t q[4];
      for (int k = 0; k < 4; ++k) {
        q[k] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + j + 4 * k), iscale)), cap);
      }
      vst1q_s8(y[i].qs + j, narrow_i32x4x4(q[0], q[1], q[2], q[3]));
      y[i].bsums[j / 16] =
          static_cast<int16_t>(vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3]))));
    }
    y[i].d = 1.0f / iscale;
  }
}

void quantize_f16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
  for (; i < n; ++i) y[i] = f2h(x[i]);
}

void quantize_bf16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, &x[i], 4);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
      y[i] = static_cast<uint16_t>((b >> 16) | 0x40u);
    } else {
      y[i] = static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    }
  }
}

void quantize_f32(const float* x, void* dst, int64_t n) {
  std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}

// ---- dequantizers (bit-exact with the references: multiply, then add; no fused forms) ---------

// 16 int8 -> 16 floats times d.
inline void store_i8x16_scaled(int8x16_t q, float d, float* y) {
  const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
  vst1q_f32(y, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
  vst1q_f32(y + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), d));
  vst1q_f32(y + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
  vst1q_f32(y + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), d));
}

inline void store_i8x16_scaled_min(int8x16_t q, float d, float m, float* y) {
  store_i8x16_scaled(q, d, y);
  const float32x4_t vm = vdupq_n_f32(m);
  for (int k = 0; k < 16; k += 4) vst1q_f32(y + k, vaddq_f32(vld1q_f32(y + k), vm));
}

template <class T>
void dequantize_q32(const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / 32; ++i, y += 32, p += T::kWBytes) {
    const Q32 q = T::load_w(p);
    if constexpr (T::kHasMin) {
      store_i8x16_scaled_min(q.lo, T::w_d(p), T::w_m(p), y);
      store_i8x16_scaled_min(q.hi, T::w_d(p), T::w_m(p), y + 16);
    } else {
      store_i8x16_scaled(q.lo, T::w_d(p), y);
      store_i8x16_scaled(q.hi, T::w_d(p), y + 16);
    }
  }
}

void dequantize_f16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, LoadF16::load4(x + i));
  for (; i < n; ++i) y[i] = h2f(x[i]);
}

void dequantize_bf16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, LoadBF16::load4(x + i));
  for (; i < n; ++i) y[i] = LoadBF16::load1(x + i);
}

void dequantize_f32(const void* src, float* y, int64_t n) {
  std::memcpy(y, src, static_cast<size_t>(n) * sizeof(float));
}

template <DType W>
void dequantize_ref(const void* src, float* y, int64_t n) {
  quant::dequantize_row_ref(W, src, y, n);
}

// The table of one ISA: the gemm of every quantized type is a template argument, so the i8mm
// file can swap in its SMMLA kernels.
using GemmFn = void (*)(int64_t, const void*, size_t, int64_t, const void*, size_t, int64_t,
                        float*, int64_t);

template <GemmFn GQ4_0, GemmFn GQ4_1, GemmFn GQ5_0, GemmFn GQ5_1, GemmFn GQ8_0, GemmFn GQ4_K,
          GemmFn GQ5_K, GemmFn GQ6_K>
struct Table {
  static const TypeKernels* find(DType t, const char* isa) {
    static const TypeKernels kTable[] = {
        {DType::F32, DType::F32, isa, &dequantize_f32, &quantize_f32, &gemm_f<LoadF32>},
        {DType::F16, DType::F16, isa, &dequantize_f16, &quantize_f16, &gemm_f<LoadF16>},
        {DType::BF16, DType::BF16, isa, &dequantize_bf16, &quantize_bf16, &gemm_f<LoadBF16>},
        {DType::Q4_0, DType::Q8_0, isa, &dequantize_q32<TraitQ4_0>, &quantize_q8_0, GQ4_0},
        {DType::Q4_1, DType::Q8_1, isa, &dequantize_q32<TraitQ4_1>, &quantize_q8_1, GQ4_1},
        {DType::Q5_0, DType::Q8_0, isa, &dequantize_q32<TraitQ5_0>, &quantize_q8_0, GQ5_0},
        {DType::Q5_1, DType::Q8_1, isa, &dequantize_q32<TraitQ5_1>, &quantize_q8_1, GQ5_1},
        {DType::Q8_0, DType::Q8_0, isa, &dequantize_q32<TraitQ8_0>, &quantize_q8_0, GQ8_0},
        {DType::Q4_K, DType::Q8_K, isa, &dequantize_ref<DType::Q4_K>, &quantize_q8_k, GQ4_K},
        {DType::Q5_K, DType::Q8_K, isa, &dequantize_ref<DType::Q5_K>, &quantize_q8_k, GQ5_K},
        {DType::Q6_K, DType::Q8_K, isa, &dequantize_ref<DType::Q6_K>, &quantize_q8_k, GQ6_K},
    };
    for (const auto& k : kTable) {
      if (k.type == t) return &k;
    }
    return nullptr;
  }
};

template <bool kFifthBit>
constexpr auto kGemmK45Dot = &gemm_k_dot<&tile_k45_dot<kFifthBit, 4>, &tile_k45_dot<kFifthBit, 3>,
                                         &tile_k45_dot<kFifthBit, 2>, &tile_k45_dot<kFifthBit, 1>>;
constexpr auto kGemmQ6KDot = &gemm_k_dot<&tile_q6_k_dot<4>, &tile_q6_k_dot<3>, &tile_q6_k_dot<2>, &tile_q6_k_dot<1>>;

using DotTable = Table<&gemm_dot<TraitQ4_0>, &gemm_dot<TraitQ4_1>, &gemm_dot<TraitQ5_0>,
                       &gemm_dot<TraitQ5_1>, &gemm_dot<TraitQ8_0>, kGemmK45Dot<false>,
                       kGemmK45Dot<true>, kGemmQ6KDot>;

}  // namespace
}  // namespace geniex::cpu
