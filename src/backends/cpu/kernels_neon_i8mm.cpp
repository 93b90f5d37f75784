// Int8 matrix-multiply kernels (SMMLA, FEAT_I8MM: Cortex-A510/A710/X2 and later, Snapdragon
// 8 Gen 1+ and Oryon). SMMLA multiplies a 2x8 by an 8x2 int8 matrix into a 2x2 int32 tile, so
// two weight rows meet two activation columns per instruction: the prefill path (several
// tokens) runs 2x2 tiles (two of them per 4-row tile for 32-element blocks); single tokens and
// the odd row or column left over use the SDOT bodies of kernels_neon_impl.hpp.
// Compiled with -march=armv8.2-a+dotprod+i8mm; called only after a run-time HWCAP2 check.
#define GENIEX_NEON_SDOT 1
#include "backends/cpu/kernels_neon_impl.hpp"

#include "backends/cpu/kernels_internal.hpp"

namespace geniex::cpu {
namespace {

// (a bytes 0..7, b bytes 0..7) and (a bytes 8..15, b bytes 8..15): the 2x8 operands of SMMLA.
inline int8x16_t zip_lo(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
inline int8x16_t zip_hi(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

// acc + (w0.a0, w0.a1, w1.a0, w1.a1) over 16 elements.
inline int32x4_t mm16(int32x4_t acc, int8x16_t w0, int8x16_t w1, int8x16_t a0, int8x16_t a1) {
  acc = vmmlaq_s32(acc, zip_lo(w0, w1), zip_lo(a0, a1));
  return vmmlaq_s32(acc, zip_hi(w0, w1), zip_hi(a0, a1));
}

inline float32x4_t lanes(float a, float b, float c, float d) {
  const float v[4] = {a, b, c, d};
  return vld1q_f32(v);
}

// Stores a 2x2 tile (r0c0, r0c1, r1c0, r1c1).
inline void store_tile(float32x4_t v, float* out, int64_t os) {
  out[0] = vgetq_lane_f32(v, 0);
  out[os] = vgetq_lane_f32(v, 1);
  out[1] = vgetq_lane_f32(v, 2);
  out[os + 1] = vgetq_lane_f32(v, 3);
}

// 2*RP weight rows x 2 activation columns over nb 32-element blocks.
template <class T, int RP>
void tile_mm(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
             int64_t os) {
  float32x4_t acc[RP], macc[RP];
  for (int p = 0; p < RP; ++p) acc[p] = macc[p] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* ap0 = a + static_cast<size_t>(b) * T::kABytes;
    const uint8_t* ap1 = ap0 + as;
    const Q32 a0 = load_a<T>(ap0), a1 = load_a<T>(ap1);
    const int8x16_t az0 = zip_lo(a0.lo, a1.lo), az1 = zip_hi(a0.lo, a1.lo);
    const int8x16_t az2 = zip_lo(a0.hi, a1.hi), az3 = zip_hi(a0.hi, a1.hi);
    const float ad0 = a_d(ap0), ad1 = a_d(ap1);
    const float32x4_t ad = lanes(ad0, ad1, ad0, ad1);
    float32x4_t asum = vdupq_n_f32(0.0f);
    if constexpr (T::kHasMin) {
      const float s0 = a_s(ap0), s1 = a_s(ap1);
      asum = lanes(s0, s1, s0, s1);
    }
    for (int p = 0; p < RP; ++p) {
      const uint8_t* wp0 = w + static_cast<size_t>(2 * p) * ws + static_cast<size_t>(b) * T::kWBytes;
      const uint8_t* wp1 = wp0 + ws;
      const Q32 w0 = T::load_w(wp0), w1 = T::load_w(wp1);
      int32x4_t s = vmmlaq_s32(vdupq_n_s32(0), zip_lo(w0.lo, w1.lo), az0);
      s = vmmlaq_s32(s, zip_hi(w0.lo, w1.lo), az1);
      s = vmmlaq_s32(s, zip_lo(w0.hi, w1.hi), az2);
      s = vmmlaq_s32(s, zip_hi(w0.hi, w1.hi), az3);
      const float wd0 = T::w_d(wp0), wd1 = T::w_d(wp1);
      acc[p] = vfmaq_f32(acc[p], vcvtq_f32_s32(s), vmulq_f32(lanes(wd0, wd0, wd1, wd1), ad));
      if constexpr (T::kHasMin) {
        const float m0 = T::w_m(wp0), m1 = T::w_m(wp1);
        macc[p] = vaddq_f32(macc[p], vmulq_f32(lanes(m0, m0, m1, m1), asum));
      }
    }
  }
  for (int p = 0; p < RP; ++p) store_tile(vaddq_f32(acc[p], macc[p]), out + 2 * p, os);
}

template <class T>
void gemm_mm(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
             size_t a_stride, int64_t n_cols, float* out, int64_t out_stride) {
  if (n_cols < 2) {
    gemm_dot<T>(n, w, w_stride, n_rows, a, a_stride, n_cols, out, out_stride);
    return;
  }
  const int64_t nb = n / 32;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int64_t r0 = 0; r0 < n_rows; r0 += 4) {
    const int rows = static_cast<int>(n_rows - r0 < 4 ? n_rows - r0 : 4);
    const uint8_t* wr = wb + static_cast<size_t>(r0) * w_stride;
    int64_t c0 = 0;
    for (; c0 + 2 <= n_cols; c0 += 2) {
      const uint8_t* ac = ab + static_cast<size_t>(c0) * a_stride;
      float* o = out + c0 * out_stride + r0;
      if (rows >= 4) {
        tile_mm<T, 2>(nb, wr, w_stride, ac, a_stride, o, out_stride);
      } else if (rows >= 2) {
        tile_mm<T, 1>(nb, wr, w_stride, ac, a_stride, o, out_stride);
      }
      if (rows % 2 == 1) {  // the last row of an odd tile
        tile_dot<T, 1, 2>(nb, wr + static_cast<size_t>(rows - 1) * w_stride, w_stride, ac,
                          a_stride, o + rows - 1, out_stride);
      }
    }
    if (c0 < n_cols) {
      tile_dot_rows<T, 1>(rows, nb, wr, w_stride, ab + static_cast<size_t>(c0) * a_stride,
                          a_stride, out + c0 * out_stride + r0, out_stride);
    }
  }
}

// ---- K-quants: 2 rows x 2 columns per SMMLA tile ----------------------------------------------
// A super-block of 256 as 16 groups of 16 signed quants with one integer scale each, plus the
// min term of Q4_K / Q5_K (dmin * mins . bsums).

struct KQ45 {
  int8x16_t g[16];
  int32_t sc[16];
  int mn[8];
};

template <bool kFifthBit>
inline void unpack_k45(const void* blk, KQ45* k, float* d, float* dmin) {
  using BlockW = std::conditional_t<kFifthBit, BlockQ5_K, BlockQ4_K>;
  const auto& x = *static_cast<const BlockW*>(blk);
  Q32 q[8];
  if constexpr (kFifthBit) {
    unpack_q5_k(x, q);
  } else {
    unpack_q4_k(x, q);
  }
  for (int j = 0; j < 8; ++j) {
    int sc;
    scale_min_k4(j, x.scales, &sc, &k->mn[j]);
    k->g[2 * j] = q[j].lo;
    k->g[2 * j + 1] = q[j].hi;
    k->sc[2 * j] = k->sc[2 * j + 1] = sc;
  }
  *d = h2f(x.d);
  *dmin = h2f(x.dmin);
}

template <bool kFifthBit>
void tile_k45_mm(int64_t nsb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as,
                 float* out, int64_t os) {
  using BlockW = std::conditional_t<kFifthBit, BlockQ5_K, BlockQ4_K>;
  float32x4_t acc = vdupq_n_f32(0.0f), macc = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < nsb; ++i) {
    KQ45 k0, k1;
    float d0, d1, m0, m1;
    unpack_k45<kFifthBit>(w + static_cast<size_t>(i) * sizeof(BlockW), &k0, &d0, &m0);
    unpack_k45<kFifthBit>(w + ws + static_cast<size_t>(i) * sizeof(BlockW), &k1, &d1, &m1);
    const auto* y0 = reinterpret_cast<const BlockQ8_K*>(a) + i;
    const auto* y1 = reinterpret_cast<const BlockQ8_K*>(a + as) + i;
    int32x4_t sumi = vdupq_n_s32(0);
    for (int g = 0; g < 16; ++g) {
      const int32x4_t p = mm16(vdupq_n_s32(0), k0.g[g], k1.g[g], vld1q_s8(y0->qs + 16 * g),
                               vld1q_s8(y1->qs + 16 * g));
      const int32_t s[4] = {k0.sc[g], k0.sc[g], k1.sc[g], k1.sc[g]};
      sumi = vmlaq_s32(sumi, p, vld1q_s32(s));
    }
    const float32x4_t ya = lanes(y0->d, y1->d, y0->d, y1->d);
    acc = vfmaq_f32(acc, vcvtq_f32_s32(sumi), vmulq_f32(lanes(d0, d0, d1, d1), ya));
    const float32x4_t mins = lanes(static_cast<float>(mins_dot_bsums(k0.mn, y0->bsums)),
                                   static_cast<float>(mins_dot_bsums(k0.mn, y1->bsums)),
                                   static_cast<float>(mins_dot_bsums(k1.mn, y0->bsums)),
                                   static_cast<float>(mins_dot_bsums(k1.mn, y1->bsums)));
    macc = vfmaq_f32(macc, mins, vmulq_f32(lanes(m0, m0, m1, m1), ya));
  }
  store_tile(vsubq_f32(acc, macc), out, os);
}

void tile_q6_k_mm(int64_t nsb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as,
                  float* out, int64_t os) {
  float32x4_t acc = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < nsb; ++i) {
    const auto* x0 = reinterpret_cast<const BlockQ6_K*>(w) + i;
    const auto* x1 = reinterpret_cast<const BlockQ6_K*>(w + ws) + i;
    const auto* y0 = reinterpret_cast<const BlockQ8_K*>(a) + i;
    const auto* y1 = reinterpret_cast<const BlockQ8_K*>(a + as) + i;
    int8x16_t q0[16], q1[16];
    unpack_q6_k(*x0, q0);
    unpack_q6_k(*x1, q1);
    int32x4_t sumi = vdupq_n_s32(0);
    for (int g = 0; g < 16; ++g) {
      const int32x4_t p = mm16(vdupq_n_s32(0), q0[g], q1[g], vld1q_s8(y0->qs + 16 * g),
                               vld1q_s8(y1->qs + 16 * g));
      const int32_t s[4] = {x0->scales[g], x0->scales[g], x1->scales[g], x1->scales[g]};
      sumi = vmlaq_s32(sumi, p, vld1q_s32(s));
    }
    const float d0 = h2f(x0->d), d1 = h2f(x1->d);
    acc = vfmaq_f32(acc, vcvtq_f32_s32(sumi),
                    vmulq_f32(lanes(d0, d0, d1, d1), lanes(y0->d, y1->d, y0->d, y1->d)));
  }
  store_tile(acc, out, os);
}

// 2x2 tiles over the matrix; the last odd row and column go through the SDOT row dot.
template <void (*Tile)(int64_t, const uint8_t*, size_t, const uint8_t*, size_t, float*, int64_t),
          float (*Dot)(const void*, const void*, int64_t)>
void gemm_k_mm(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
               size_t a_stride, int64_t n_cols, float* out, int64_t out_stride) {
  const int64_t nsb = n / kQK_K;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  const int64_t rows2 = n_rows - n_rows % 2, cols2 = n_cols - n_cols % 2;
  for (int64_t r = 0; r < rows2; r += 2) {
    for (int64_t c = 0; c < cols2; c += 2) {
      Tile(nsb, wb + static_cast<size_t>(r) * w_stride, w_stride,
           ab + static_cast<size_t>(c) * a_stride, a_stride, out + c * out_stride + r, out_stride);
    }
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t c = (r < rows2 ? cols2 : 0); c < n_cols; ++c) {
      out[c * out_stride + r] = Dot(wb + static_cast<size_t>(r) * w_stride,
                                    ab + static_cast<size_t>(c) * a_stride, n);
    }
  }
}

using MmTable = Table<&gemm_mm<TraitQ4_0>, &gemm_mm<TraitQ4_1>, &gemm_mm<TraitQ5_0>,
                      &gemm_mm<TraitQ5_1>, &gemm_mm<TraitQ8_0>,
                      &gemm_k_mm<&tile_k45_mm<false>, &dot_q45_k<false>>,
                      &gemm_k_mm<&tile_k45_mm<true>, &dot_q45_k<true>>,
                      &gemm_k_mm<&tile_q6_k_mm, &dot_q6_k>>;

}  // namespace

namespace neon_i8mm {
const TypeKernels* kernels(DType t) { return MmTable::find(t, "i8mm"); }
}  // namespace neon_i8mm

}  // namespace geniex::cpu
