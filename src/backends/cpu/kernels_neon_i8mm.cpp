// Int8 matrix-multiply kernels (SMMLA, FEAT_I8MM: Cortex-A510/A710/X2 and later, Snapdragon
// 8 Gen 1+ and Oryon). SMMLA multiplies a 2x8 by an 8x2 int8 matrix into a 2x2 int32 tile, so
// two weight rows meet two activation columns per instruction. The prefill path (several
// tokens) decodes and zips each weight block once per tile of 4 rows (32-element blocks) or 2
// rows (K-quants) and runs it against 4 column pairs (2 for the types with a min term), whose
// zipped activation blocks are prepared once per call; single tokens and the odd row or column
// left over use the SDOT bodies of kernels_neon_impl.hpp. Each 2x2 tile's arithmetic does not
// depend on the tiling (exact int32 sums, then one fma per block in block order). Q4_0, Q4_1,
// Q5_0, Q5_1 and Q8_0 weights repacked at load (the x8z layouts) run the kernels of the section
// below, Q4_K, Q5_K and Q6_K ones (Q4_Kx8z, Q5_Kx8z, Q6_Kx8z) those of the section after it,
// all with these bits.
// Compiled with -march=armv8.2-a+dotprod+i8mm; called only after a run-time HWCAP2 check.
#define GENIEX_NEON_SDOT 1
#include "backends/cpu/kernels_neon_impl.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

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

// (x, x, y, y) and (x, y, x, y).
inline float32x4_t lanes_xxyy(float x, float y) { return vcombine_f32(vdup_n_f32(x), vdup_n_f32(y)); }
inline float32x4_t lanes_xyxy(float x, float y) {
  const float32x2_t v = vset_lane_f32(y, vdup_n_f32(x), 1);
  return vcombine_f32(v, v);
}

// One activation column pair's block, prepared once per gemm call for every row tile: the
// four SMMLA operands (the two columns' quants zipped 8 bytes at a time) and the scale lanes
// (d0, d1, d0, d1), (s0, s1, s0, s1). A struct of this file's own (anonymous namespace), so
// its std::vector is an internal instantiation: this file is compiled with +i8mm and must
// define no symbol the linker could pick for other files (scripts/test_aarch64.sh checks).
struct PairBlock {
  int8x16_t z[4];
  float32x4_t ad, as;
};

// ad_mul: a power of two folded into the activation scales (1/16 for the Q4_0x8z quants,
// which are 16 times the value), so products keep their bits.
template <class T>
void prepare_pairs(const uint8_t* a, size_t as, int64_t n_pairs, int64_t nb, PairBlock* out, float ad_mul = 1.0f) {
  for (int64_t q = 0; q < n_pairs; ++q) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* ap0 = a + static_cast<size_t>(2 * q) * as + static_cast<size_t>(b) * T::kABytes;
      const uint8_t* ap1 = ap0 + as;
      const Q32 a0 = load_a<T>(ap0), a1 = load_a<T>(ap1);
      PairBlock& o = out[q * nb + b];
      o.z[0] = zip_lo(a0.lo, a1.lo);
      o.z[1] = zip_hi(a0.lo, a1.lo);
      o.z[2] = zip_lo(a0.hi, a1.hi);
      o.z[3] = zip_hi(a0.hi, a1.hi);
      o.ad = lanes_xyxy(a_d(ap0) * ad_mul, a_d(ap1) * ad_mul);
      o.as = T::kHasMin ? lanes_xyxy(a_s(ap0), a_s(ap1)) : vdupq_n_f32(0.0f);
    }
  }
}

// Column pairs are prepared in chunks whose blocks stay in L2 (~256 KiB), a multiple of the
// tile's k_pairs: sets *chunk and returns this thread's buffer for one chunk of nb blocks.
template <class B = PairBlock>
B* pair_chunks(int64_t nb, int k_pairs, int64_t n_pairs, int64_t* chunk) {
  const int64_t per_pair = nb * static_cast<int64_t>(sizeof(B));
  *chunk = l2_column_chunk(per_pair, k_pairs);
  thread_local std::vector<B> pairs;
  const auto need = static_cast<size_t>(std::min(*chunk, n_pairs) * nb);
  if (pairs.size() < need) pairs.resize(need);
  return pairs.data();
}

// 2*RP weight rows x CP prepared column pairs (pb[q * nb + b]) over nb 32-element blocks. Each
// weight block is decoded and zipped once for all CP pairs; every 2x2 tile's arithmetic is
// the same whatever RP and CP are (four SMMLA in block order, one fma per block).
// (Not inlined: one call runs a whole tile, and each width's block loop stays one compact body.)
template <class T, int RP, int CP>
__attribute__((noinline)) void tile_mm(int64_t nb, const uint8_t* w, size_t ws, const PairBlock* pb, float* out,
                                       int64_t os) {
  float32x4_t acc[RP][CP], macc[RP][CP];
  for (int p = 0; p < RP; ++p) {
    for (int q = 0; q < CP; ++q) acc[p][q] = macc[p][q] = vdupq_n_f32(0.0f);
  }
  for (int64_t b = 0; b < nb; ++b) {
    int8x16_t wz[RP][4];
    float32x4_t wd[RP], wm[RP];
    for (int p = 0; p < RP; ++p) {
      const uint8_t* wp0 = w + static_cast<size_t>(2 * p) * ws + static_cast<size_t>(b) * T::kWBytes;
      const uint8_t* wp1 = wp0 + ws;
      const Q32 w0 = T::load_w(wp0), w1 = T::load_w(wp1);
      wz[p][0] = zip_lo(w0.lo, w1.lo);
      wz[p][1] = zip_hi(w0.lo, w1.lo);
      wz[p][2] = zip_lo(w0.hi, w1.hi);
      wz[p][3] = zip_hi(w0.hi, w1.hi);
      wd[p] = lanes_xxyy(T::w_d(wp0), T::w_d(wp1));
      wm[p] = T::kHasMin ? lanes_xxyy(T::w_m(wp0), T::w_m(wp1)) : vdupq_n_f32(0.0f);
    }
    for (int q = 0; q < CP; ++q) {
      const PairBlock& y = pb[q * nb + b];
      for (int p = 0; p < RP; ++p) {
        int32x4_t s = vmmlaq_s32(vdupq_n_s32(0), wz[p][0], y.z[0]);
        s = vmmlaq_s32(s, wz[p][1], y.z[1]);
        s = vmmlaq_s32(s, wz[p][2], y.z[2]);
        s = vmmlaq_s32(s, wz[p][3], y.z[3]);
        acc[p][q] = vfmaq_f32(acc[p][q], vcvtq_f32_s32(s), vmulq_f32(wd[p], y.ad));
        if constexpr (T::kHasMin) macc[p][q] = vaddq_f32(macc[p][q], vmulq_f32(wm[p], y.as));
      }
    }
  }
  for (int q = 0; q < CP; ++q) {
    for (int p = 0; p < RP; ++p) store_tile(vaddq_f32(acc[p][q], macc[p][q]), out + 2 * q * os + 2 * p, os);
  }
}

template <class T, int RP, int CP>
void tile_mm_tail(int cp, int64_t nb, const uint8_t* w, size_t ws, const PairBlock* pb, float* out, int64_t os) {
  if constexpr (CP > 0) {
    if (cp == CP) {
      tile_mm<T, RP, CP>(nb, w, ws, pb, out, os);
    } else {
      tile_mm_tail<T, RP, CP - 1>(cp, nb, w, ws, pb, out, os);
    }
  }
}

// Column pairs in chunks whose prepared blocks stay in L2 (~256 KiB); per chunk, row tiles of
// 4 (their weights stay in L1) against tiles of kPairs column pairs. An odd last row goes
// through the SDOT tile, an odd last column through the SDOT row tiles, as before.
template <class T>
void gemm_mm(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
             size_t a_stride, int64_t n_cols, float* out, int64_t out_stride) {
  if (n_cols < 2) {
    gemm_dot<T>(n, w, w_stride, n_rows, a, a_stride, n_cols, out, out_stride);
    return;
  }
  // Column pairs per tile: 2x4 tiles of accumulators (plus the min sums' for Q4_1 / Q5_1 in
  // 2x2) with 8 zipped weight vectors fit the 32 registers.
  constexpr int kPairs = T::kHasMin ? 2 : 4;
  const int64_t nb = n / 32;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  const int64_t n_pairs = n_cols / 2;
  int64_t chunk = 0;
  PairBlock* pairs = pair_chunks(nb, kPairs, n_pairs, &chunk);
  for (int64_t q0 = 0; q0 < n_pairs; q0 += chunk) {
    const int64_t q1 = std::min(n_pairs, q0 + chunk);
    prepare_pairs<T>(ab + static_cast<size_t>(2 * q0) * a_stride, a_stride, q1 - q0, nb, pairs);
    for (int64_t r0 = 0; r0 < n_rows; r0 += 4) {
      const int rows = static_cast<int>(n_rows - r0 < 4 ? n_rows - r0 : 4);
      const uint8_t* wr = wb + static_cast<size_t>(r0) * w_stride;
      for (int64_t q = q0; q < q1; q += kPairs) {
        const int cp = static_cast<int>(std::min<int64_t>(kPairs, q1 - q));
        const PairBlock* pb = pairs + (q - q0) * nb;
        float* o = out + 2 * q * out_stride + r0;
        if (rows >= 4) {
          tile_mm_tail<T, 2, kPairs>(cp, nb, wr, w_stride, pb, o, out_stride);
        } else if (rows >= 2) {
          tile_mm_tail<T, 1, kPairs>(cp, nb, wr, w_stride, pb, o, out_stride);
        }
        if (rows % 2 == 1) {  // the last row of an odd tile
          for (int k = 0; k < cp; ++k) {
            tile_dot<T, 1, 2>(nb, wr + static_cast<size_t>(rows - 1) * w_stride, w_stride,
                              ab + static_cast<size_t>(2 * (q + k)) * a_stride, a_stride,
                              o + 2 * k * out_stride + rows - 1, out_stride);
          }
        }
      }
    }
  }
  if (n_cols % 2 == 1) {
    const int64_t c = n_cols - 1;
    for (int64_t r0 = 0; r0 < n_rows; r0 += 4) {
      const int rows = static_cast<int>(n_rows - r0 < 4 ? n_rows - r0 : 4);
      tile_dot_rows<T, 1>(rows, nb, wb + static_cast<size_t>(r0) * w_stride, w_stride,
                          ab + static_cast<size_t>(c) * a_stride, a_stride, out + c * out_stride + r0, out_stride);
    }
  }
}

// ---- the x8z layouts (packed.hpp): weights repacked at load as SMMLA operands ------------------
// The file-layout tiles above spend most of their instructions per block on decoding and
// zipping each weight block (and SDOT on gathering one column's rows); here the operands come
// zipped from memory: Q8_0 loads them, Q4_0 and Q4_1 take two instructions per 32 weights
// (Q4_0's quants come out 16 times the value; the activation scales carry the 1/16). Every
// output is acc + float(S) * (d_w * d_a) per block in block order (plus the min term apart),
// as in tile_mm and tile_dot_col, so the bits are those of the file layout's kernels.

// kHead: bytes of per-row fields per group block; TA: the activation blocks' trait (Q8_0, or
// Q8_1 with its d * sum for the min term); kPairs: column pairs per SMMLA tile (2 where the
// min sums need the registers).
struct ZQ8_0 {
  using TA = TraitQ8_0;
  static constexpr size_t kHead = 16, kPair = 64;
  static constexpr int kPairs = 4;
  static constexpr float kAMul = 1.0f;
  static void load(const uint8_t* v, int8x16_t* z) {
    const auto* q = reinterpret_cast<const int8_t*>(v);
    z[0] = vld1q_s8(q);
    z[1] = vld1q_s8(q + 16);
    z[2] = vld1q_s8(q + 32);
    z[3] = vld1q_s8(q + 48);
  }
};

struct ZQ4_0 {
  using TA = TraitQ8_0;
  static constexpr size_t kHead = 16, kPair = 32;
  static constexpr int kPairs = 4;
  static constexpr float kAMul = 1.0f / 16.0f;
  static void load(const uint8_t* v, int8x16_t* z) {
    const int8x16_t v0 = vld1q_s8(reinterpret_cast<const int8_t*>(v));
    const int8x16_t v1 = vld1q_s8(reinterpret_cast<const int8_t*>(v + 16));
    const int8x16_t high = vdupq_n_s8(static_cast<int8_t>(0xF0));
    z[0] = vshlq_n_s8(v0, 4);
    z[1] = vandq_s8(v0, high);
    z[2] = vshlq_n_s8(v1, 4);
    z[3] = vandq_s8(v1, high);
  }
};

struct ZQ4_1 {
  using TA = TraitQ4_1;
  static constexpr size_t kHead = 32, kPair = 32;
  static constexpr int kPairs = 2;
  static constexpr float kAMul = 1.0f;
  static void load(const uint8_t* v, int8x16_t* z) {
    const uint8x16_t v0 = vld1q_u8(v), v1 = vld1q_u8(v + 16);
    const uint8x16_t low = vdupq_n_u8(0x0F);
    z[0] = vreinterpretq_s8_u8(vandq_u8(v0, low));
    z[1] = vreinterpretq_s8_u8(vshrq_n_u8(v0, 4));
    z[2] = vreinterpretq_s8_u8(vandq_u8(v1, low));
    z[3] = vreinterpretq_s8_u8(vshrq_n_u8(v1, 4));
  }
};

// Q5_0x8z (packed.hpp): z0 = A & 0xF8 and z1 = B & 0xF8 are 8 (q - 16); z2 and z3 take A's and
// B's low three bits as their top ones (a shift-and-insert) over two bits of H moved to bits
// 3-4 by a per-lane shift (lanes 8-15 read other bits of the same byte). The activation scales
// carry the 1/8.
struct ZQ5_0 {
  using TA = TraitQ8_0;
  static constexpr size_t kHead = 16, kPair = 40;
  static constexpr int kPairs = 4;
  static constexpr float kAMul = 1.0f / 8.0f;
  static void load(const uint8_t* v, int8x16_t* z) {
    alignas(16) static constexpr int8_t kShift2[16] = {3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
    alignas(16) static constexpr int8_t kShift3[16] = {-1, -1, -1, -1, -1, -1, -1, -1, -3, -3, -3, -3, -3, -3, -3, -3};
    const uint8x16_t a = vld1q_u8(v), b = vld1q_u8(v + 16);
    uint64_t h64 = 0;
    std::memcpy(&h64, v + 32, 8);
    const uint8x16_t h = vreinterpretq_u8_u64(vdupq_n_u64(h64));
    const uint8x16_t top = vdupq_n_u8(0xF8), mid = vdupq_n_u8(0x18);
    z[0] = vreinterpretq_s8_u8(vandq_u8(a, top));
    z[1] = vreinterpretq_s8_u8(vandq_u8(b, top));
    z[2] = vreinterpretq_s8_u8(vsliq_n_u8(vandq_u8(vshlq_u8(h, vld1q_s8(kShift2)), mid), a, 5));
    z[3] = vreinterpretq_s8_u8(vsliq_n_u8(vandq_u8(vshlq_u8(h, vld1q_s8(kShift3)), mid), b, 5));
  }
};

// Q5_1x8z: z0 = A >> 3, z1 = B >> 3 are q; z2 and z3 put A's or B's low three bits above two
// bits of H that a per-lane shift moved to bits 0-1.
struct ZQ5_1 {
  using TA = TraitQ5_1;
  static constexpr size_t kHead = 32, kPair = 40;
  static constexpr int kPairs = 2;
  static constexpr float kAMul = 1.0f;
  static void load(const uint8_t* v, int8x16_t* z) {
    alignas(16) static constexpr int8_t kShift2[16] = {0, 0, 0, 0, 0, 0, 0, 0, -2, -2, -2, -2, -2, -2, -2, -2};
    alignas(16) static constexpr int8_t kShift3[16] = {-4, -4, -4, -4, -4, -4, -4, -4, -6, -6, -6, -6, -6, -6, -6, -6};
    const uint8x16_t a = vld1q_u8(v), b = vld1q_u8(v + 16);
    uint64_t h64 = 0;
    std::memcpy(&h64, v + 32, 8);
    const uint8x16_t h = vreinterpretq_u8_u64(vdupq_n_u64(h64));
    const uint8x16_t low3 = vdupq_n_u8(7);
    z[0] = vreinterpretq_s8_u8(vshrq_n_u8(a, 3));
    z[1] = vreinterpretq_s8_u8(vshrq_n_u8(b, 3));
    z[2] = vreinterpretq_s8_u8(vsliq_n_u8(vshlq_u8(h, vld1q_s8(kShift2)), vandq_u8(a, low3), 2));
    z[3] = vreinterpretq_s8_u8(vsliq_n_u8(vshlq_u8(h, vld1q_s8(kShift3)), vandq_u8(b, low3), 2));
  }
};

template <class Z>
constexpr size_t kZGroupBlock = Z::kHead + 4 * Z::kPair;

// (x0, x1, x2, x3): the fp16 fields of rows 2 p0 .. 2 p0 + 3 (field 0: d, 1: m).
template <int kField>
inline float32x4_t group_field4(const uint8_t* gb, int p0) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(gb + 16 * kField) + 2 * p0)));
}

// Rows 2 p0 .. 2 p0 + 3 of one 8-row group (p0 = 0 or 2) x CP prepared column pairs.
template <class Z, int CP>
__attribute__((noinline)) void ztile_mm(int64_t nb, const uint8_t* g, int p0, const PairBlock* pb, float* out,
                                        int64_t os) {
  constexpr bool kMin = Z::TA::kHasMin;
  float32x4_t acc[2][CP], macc[2][CP];
  for (int p = 0; p < 2; ++p) {
    for (int q = 0; q < CP; ++q) acc[p][q] = macc[p][q] = vdupq_n_f32(0.0f);
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = g + static_cast<size_t>(b) * kZGroupBlock<Z>;
    __builtin_prefetch(gb + 4 * kZGroupBlock<Z>);
    // (d0, d1, d2, d3) of the 4 rows -> (d0, d0, d1, d1) and (d2, d2, d3, d3); the same for m.
    const float32x4_t d = group_field4<0>(gb, p0);
    const float32x4_t wd[2] = {vzip1q_f32(d, d), vzip2q_f32(d, d)};
    float32x4_t wm[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    if constexpr (kMin) {
      const float32x4_t m = group_field4<1>(gb, p0);
      wm[0] = vzip1q_f32(m, m);
      wm[1] = vzip2q_f32(m, m);
    }
    int8x16_t wz[2][4];
    Z::load(gb + Z::kHead + Z::kPair * static_cast<size_t>(p0), wz[0]);
    Z::load(gb + Z::kHead + Z::kPair * static_cast<size_t>(p0 + 1), wz[1]);
    for (int q = 0; q < CP; ++q) {
      const PairBlock& y = pb[q * nb + b];
      for (int p = 0; p < 2; ++p) {
        int32x4_t s = vmmlaq_s32(vdupq_n_s32(0), wz[p][0], y.z[0]);
        s = vmmlaq_s32(s, wz[p][1], y.z[1]);
        s = vmmlaq_s32(s, wz[p][2], y.z[2]);
        s = vmmlaq_s32(s, wz[p][3], y.z[3]);
        acc[p][q] = vfmaq_f32(acc[p][q], vcvtq_f32_s32(s), vmulq_f32(wd[p], y.ad));
        if constexpr (kMin) macc[p][q] = vaddq_f32(macc[p][q], vmulq_f32(wm[p], y.as));
      }
    }
  }
  for (int q = 0; q < CP; ++q) {
    for (int p = 0; p < 2; ++p) store_tile(vaddq_f32(acc[p][q], macc[p][q]), out + 2 * q * os + 2 * p, os);
  }
}

// A column's 32 activations (lo: 0..15, hi: 16..31) as four vectors, each one 8-byte piece in
// both halves: the SDOT / USDOT partner of a row pair's zipped operand.
inline void dup_pieces(int8x16_t lo, int8x16_t hi, int8x16_t* u) {
  const int64x2_t l = vreinterpretq_s64_s8(lo), h = vreinterpretq_s64_s8(hi);
  u[0] = vreinterpretq_s8_s64(vdupq_laneq_s64(l, 0));
  u[1] = vreinterpretq_s8_s64(vdupq_laneq_s64(l, 1));
  u[2] = vreinterpretq_s8_s64(vdupq_laneq_s64(h, 0));
  u[3] = vreinterpretq_s8_s64(vdupq_laneq_s64(h, 1));
}

// The 8 rows of one group x one activation column (a single token, or the odd last column),
// with SDOT: the column's 8-byte pieces duplicated in both halves meet a row pair's zipped
// operand, lanes (row 0, row 0, row 1, row 1); pairwise adds give the 4 rows of two pairs in
// one vector, as tile_dot_col's lanes.
template <class Z>
__attribute__((noinline)) void zcol(int64_t nb, const uint8_t* g, const uint8_t* a, float* out) {
  constexpr bool kMin = Z::TA::kHasMin;
  float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  float32x4_t macc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = g + static_cast<size_t>(b) * kZGroupBlock<Z>;
    __builtin_prefetch(gb + 8 * kZGroupBlock<Z>);
    const uint8_t* ap = a + static_cast<size_t>(b) * Z::TA::kABytes;
    const Q32 av = load_a<typename Z::TA>(ap);
    int8x16_t u[4];
    dup_pieces(av.lo, av.hi, u);
    int32x4_t s[4];
    for (int p = 0; p < 4; ++p) {
      int8x16_t z[4];
      Z::load(gb + Z::kHead + Z::kPair * static_cast<size_t>(p), z);
      s[p] = dot16(dot16(dot16(dot16(vdupq_n_s32(0), z[0], u[0]), z[1], u[1]), z[2], u[2]), z[3], u[3]);
    }
    const float16x8_t dh = vreinterpretq_f16_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(gb)));
    const float ad = a_d(ap) * Z::kAMul;
    acc[0] = vfmaq_f32(acc[0], vcvtq_f32_s32(vpaddq_s32(s[0], s[1])), vmulq_n_f32(vcvt_f32_f16(vget_low_f16(dh)), ad));
    acc[1] = vfmaq_f32(acc[1], vcvtq_f32_s32(vpaddq_s32(s[2], s[3])), vmulq_n_f32(vcvt_high_f32_f16(dh), ad));
    if constexpr (kMin) {
      const float16x8_t mh = vreinterpretq_f16_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(gb + 16)));
      const float as = a_s(ap);
      macc[0] = vaddq_f32(macc[0], vmulq_n_f32(vcvt_f32_f16(vget_low_f16(mh)), as));
      macc[1] = vaddq_f32(macc[1], vmulq_n_f32(vcvt_high_f32_f16(mh), as));
    }
  }
  vst1q_f32(out, vaddq_f32(acc[0], macc[0]));
  vst1q_f32(out + 4, vaddq_f32(acc[1], macc[1]));
}


// ---- Q4_Kx8z, Q5_Kx8z (packed.hpp, packed_k.cpp): K-quant weights repacked at load as operands -
// The file-layout K tile below unpacks, zips and gathers the scales of each row pair's
// super-block per tile (11 instructions per SMMLA). Here the quants come as nibbles that
// `v & 15` / `v >> 4` turn into USMMLA operands (unsigned weights, signed activations), each row
// pair's 6-bit scales and mins are one 16-byte vector after a few shifts, a TBL spreads a
// sub-block's scales to the tile's lanes, and the min term sum_j m_j * bsum_j is two SMMLA with
// the activation sums split as 64 h + l. Every output is acc + float(S) * (d * d_a) and
// macc + float(M) * (dmin * d_a) per super-block, then acc - macc, as in tile_k45_mm and
// tile_k45_dot, so the bits are those of the file layout's kernels.

constexpr size_t kQ4KZGroupBlock = 1152;
// Q5_Kx8z: the same fields, then per row pair p and sub-block j 8 bytes of fifth bits at
// kQ5KZBits + 64 p + 8 j (packed_k.cpp); the tiles and columns take kFifth to read them.
constexpr size_t kQ5KZGroupBlock = 1408, kQ5KZBits = 1152;
template <bool kFifth>
constexpr size_t kKZGroupBlock = kFifth ? kQ5KZGroupBlock : kQ4KZGroupBlock;

// One activation column pair's Q8_K super-block, prepared once per call: the 32 SMMLA operands
// (sub-block j, operand k at 4j + k), the sums of the 8 sub-blocks of 32 split as 64 h + l
// (h in [-64, 63], l in [0, 63]; column 0's 8, then column 1's) and (d0, d1, d0, d1).
struct KPairBlock {
  int8x16_t z[32];
  int8x16_t h, l;
  float32x4_t ad;
};

// The column's 8 sub-block sums (|.| <= 4064) split as 64 h + l, h in [-64, 63], l in [0, 63],
// so that SMMLA / SDOT with the 6-bit mins take them as int8.
inline void split_sub_block_sums(const BlockQ8_K& y, int8x8_t* h, int8x8_t* l) {
  const int16x8_t b = vpaddq_s16(vld1q_s16(y.bsums), vld1q_s16(y.bsums + 8));
  *h = vmovn_s16(vshrq_n_s16(b, 6));
  *l = vmovn_s16(vandq_s16(b, vdupq_n_s16(63)));
}

// ad_mul: as in prepare_pairs (1/4 for the Q6_Kx8z quants, which are 4 times the value).
void prepare_kpairs(const uint8_t* a, size_t as, int64_t n_pairs, int64_t nsb, KPairBlock* out, float ad_mul) {
  for (int64_t q = 0; q < n_pairs; ++q) {
    const auto* y0 = reinterpret_cast<const BlockQ8_K*>(a + static_cast<size_t>(2 * q) * as);
    const auto* y1 = reinterpret_cast<const BlockQ8_K*>(a + static_cast<size_t>(2 * q + 1) * as);
    for (int64_t i = 0; i < nsb; ++i) {
      KPairBlock& o = out[q * nsb + i];
      for (int m = 0; m < 16; ++m) {
        const int8x16_t a0 = vld1q_s8(y0[i].qs + 16 * m), a1 = vld1q_s8(y1[i].qs + 16 * m);
        o.z[2 * m] = zip_lo(a0, a1);
        o.z[2 * m + 1] = zip_hi(a0, a1);
      }
      int8x8_t h0, l0, h1, l1;
      split_sub_block_sums(y0[i], &h0, &l0);
      split_sub_block_sums(y1[i], &h1, &l1);
      o.h = vcombine_s8(h0, h1);
      o.l = vcombine_s8(l0, l1);
      o.ad = lanes_xyxy(y0[i].d * ad_mul, y1[i].d * ad_mul);
    }
  }
}

// Scales and mins of row pairs 2 half and 2 half + 1 of a group block (16 bytes each: the 8
// sub-blocks of the pair's first row, then of its second).
inline void k4z_fields(const uint8_t* gb, int half, uint8x16_t* sc, uint8x16_t* mn) {
  const int8x16_t nib = vdupq_n_s8(static_cast<int8_t>(-4 * half)), bits = vdupq_n_s8(static_cast<int8_t>(-2 * half));
  const uint8x16_t three = vdupq_n_u8(3);
  for (int p = 0; p < 2; ++p) {
    const uint8x16_t s = vshlq_u8(vld1q_u8(gb + 32 + 16 * p), nib);
    const uint8x16_t m = vshlq_u8(vld1q_u8(gb + 64 + 16 * p), nib);
    const uint8x16_t hb = vshlq_u8(vld1q_u8(gb + 96 + 16 * p), bits);
    sc[p] = vsliq_n_u8(s, vandq_u8(hb, three), 4);
    mn[p] = vsliq_n_u8(m, vandq_u8(vshrq_n_u8(hb, 4), three), 4);
  }
}

// TBL indices that spread sub-block j's scales of a row pair to int32 lanes (r0, r0, r1, r1):
// bytes (j, -, -, -, j, -, -, -, 8 + j, ...), '-' out of range (reads 0); +kScaleStep per j.
constexpr uint8_t kX = 0x80;
alignas(16) constexpr uint8_t kScaleIdx0[16] = {0, kX, kX, kX, 0, kX, kX, kX, 8, kX, kX, kX, 8, kX, kX, kX};
alignas(16) constexpr uint8_t kScaleStep[16] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0};

inline void k4z_operands(const uint8_t* v, uint8x16_t* z) {
  const uint8x16_t low4 = vdupq_n_u8(0x0F);
  const uint8x16_t v0 = vld1q_u8(v), v1 = vld1q_u8(v + 16);
  z[0] = vandq_u8(v0, low4);
  z[1] = vshrq_n_u8(v0, 4);
  z[2] = vandq_u8(v1, low4);
  z[3] = vshrq_n_u8(v1, 4);
}

// Q5_K: the nibbles above plus each operand's fifth bits (bits 2k, 2k + 1 of the 8 bytes at fb,
// lanes 0-7 and 8-15) shifted to bit 4 and selected in: 0..31, still unsigned.
template <bool kFifth>
inline void kz_operands(const uint8_t* v, const uint8_t* fb, uint8x16_t* z) {
  k4z_operands(v, z);
  if constexpr (kFifth) {
    alignas(16) static constexpr int8_t kShift[4][16] = {
        {4, 4, 4, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 3, 3, 3},
        {2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1},
        {0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1, -1, -1, -1, -1},
        {-2, -2, -2, -2, -2, -2, -2, -2, -3, -3, -3, -3, -3, -3, -3, -3}};
    uint64_t h64 = 0;
    std::memcpy(&h64, fb, 8);
    const uint8x16_t h = vreinterpretq_u8_u64(vdupq_n_u64(h64));
    const uint8x16_t bit4 = vdupq_n_u8(0x10);
    for (int k = 0; k < 4; ++k) z[k] = vbslq_u8(bit4, vshlq_u8(h, vld1q_s8(kShift[k])), z[k]);
  }
}

// Rows 2 p0 .. 2 p0 + 3 of one 8-row group (p0 = 0 or 2) x CP prepared column pairs.
template <bool kFifth, int CP>
__attribute__((noinline)) void ktile_q4_kz(int64_t nsb, const uint8_t* g, int p0, const KPairBlock* pb, float* out,
                                           int64_t os) {
  constexpr size_t kGB = kKZGroupBlock<kFifth>;
  float32x4_t acc[2][CP], macc[2][CP];
  for (int p = 0; p < 2; ++p) {
    for (int q = 0; q < CP; ++q) acc[p][q] = macc[p][q] = vdupq_n_f32(0.0f);
  }
  const uint8x16_t step = vld1q_u8(kScaleStep);
  for (int64_t i = 0; i < nsb; ++i) {
    const uint8_t* gb = g + static_cast<size_t>(i) * kGB;
    __builtin_prefetch(gb + 2 * kGB);
    uint8x16_t sc[2], mn[2];
    k4z_fields(gb, p0 / 2, sc, mn);
    int32x4_t sumi[2][CP];
    for (int p = 0; p < 2; ++p) {
      for (int q = 0; q < CP; ++q) sumi[p][q] = vdupq_n_s32(0);
    }
    uint8x16_t idx = vld1q_u8(kScaleIdx0);
    const uint8_t* qz = gb + 128 + 256 * static_cast<size_t>(p0);
    for (int j = 0; j < 8; ++j) {
      uint8x16_t wz[2][4];
      const uint8_t* fb = gb + kQ5KZBits + 64 * static_cast<size_t>(p0) + 8 * static_cast<size_t>(j);
      kz_operands<kFifth>(qz + 32 * j, fb, wz[0]);
      kz_operands<kFifth>(qz + 256 + 32 * j, fb + 64, wz[1]);
      const int32x4_t sv[2] = {vreinterpretq_s32_u8(vqtbl1q_u8(sc[0], idx)), vreinterpretq_s32_u8(vqtbl1q_u8(sc[1], idx))};
      idx = vaddq_u8(idx, step);
      for (int q = 0; q < CP; ++q) {
        const int8x16_t* y = pb[q * nsb + i].z + 4 * j;
        for (int p = 0; p < 2; ++p) {
          int32x4_t s = vusmmlaq_s32(vdupq_n_s32(0), wz[p][0], y[0]);
          s = vusmmlaq_s32(s, wz[p][1], y[1]);
          s = vusmmlaq_s32(s, wz[p][2], y[2]);
          s = vusmmlaq_s32(s, wz[p][3], y[3]);
          sumi[p][q] = vmlaq_s32(sumi[p][q], s, sv[p]);
        }
      }
    }
    const float32x4_t d = group_field4<0>(gb, p0), dm = group_field4<1>(gb, p0);
    const float32x4_t wd[2] = {vzip1q_f32(d, d), vzip2q_f32(d, d)};
    const float32x4_t wm[2] = {vzip1q_f32(dm, dm), vzip2q_f32(dm, dm)};
    for (int q = 0; q < CP; ++q) {
      const KPairBlock& y = pb[q * nsb + i];
      for (int p = 0; p < 2; ++p) {
        const int8x16_t m = vreinterpretq_s8_u8(mn[p]);
        const int32x4_t mh = vmmlaq_s32(vdupq_n_s32(0), m, y.h);
        const int32x4_t msum = vmmlaq_s32(vshlq_n_s32(mh, 6), m, y.l);
        acc[p][q] = vfmaq_f32(acc[p][q], vcvtq_f32_s32(sumi[p][q]), vmulq_f32(wd[p], y.ad));
        macc[p][q] = vfmaq_f32(macc[p][q], vcvtq_f32_s32(msum), vmulq_f32(wm[p], y.ad));
      }
    }
  }
  for (int q = 0; q < CP; ++q) {
    for (int p = 0; p < 2; ++p) store_tile(vsubq_f32(acc[p][q], macc[p][q]), out + 2 * q * os + 2 * p, os);
  }
}

// The 8 rows of one group x one Q8_K column (a single token, or the odd last column), with
// USDOT as zcol does: lanes (row 0, row 0, row 1, row 1) of each pair, scaled per sub-block, and
// pairwise adds for the 8 rows; the min term with SDOT against the column's split sums.
template <bool kFifth>
__attribute__((noinline)) void kcol_q4_kz(int64_t nsb, const uint8_t* g, const uint8_t* a, float* out) {
  constexpr size_t kGB = kKZGroupBlock<kFifth>;
  float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  float32x4_t macc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  const uint8x16_t step = vld1q_u8(kScaleStep);
  for (int64_t i = 0; i < nsb; ++i) {
    const uint8_t* gb = g + static_cast<size_t>(i) * kGB;
    __builtin_prefetch(gb + 4 * kGB);
    const BlockQ8_K& y = reinterpret_cast<const BlockQ8_K*>(a)[i];
    uint8x16_t sc[4], mn[4];
    k4z_fields(gb, 0, sc, mn);
    k4z_fields(gb, 1, sc + 2, mn + 2);
    int32x4_t sumi[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
    uint8x16_t idx = vld1q_u8(kScaleIdx0);
    for (int j = 0; j < 8; ++j) {
      int8x16_t u[4];
      dup_pieces(vld1q_s8(y.qs + 32 * j), vld1q_s8(y.qs + 32 * j + 16), u);
      for (int p = 0; p < 4; ++p) {
        uint8x16_t z[4];
        kz_operands<kFifth>(gb + 128 + 256 * p + 32 * j, gb + kQ5KZBits + 64 * p + 8 * j, z);
        int32x4_t s = vusdotq_s32(vdupq_n_s32(0), z[0], u[0]);
        s = vusdotq_s32(s, z[1], u[1]);
        s = vusdotq_s32(s, z[2], u[2]);
        s = vusdotq_s32(s, z[3], u[3]);
        sumi[p] = vmlaq_s32(sumi[p], s, vreinterpretq_s32_u8(vqtbl1q_u8(sc[p], idx)));
      }
      idx = vaddq_u8(idx, step);
    }
    int8x8_t h8, l8;
    split_sub_block_sums(y, &h8, &l8);
    const int8x16_t h = vcombine_s8(h8, h8), l = vcombine_s8(l8, l8);
    int32x4_t ms[4];
    for (int p = 0; p < 4; ++p) {
      const int8x16_t m = vreinterpretq_s8_u8(mn[p]);
      ms[p] = vdotq_s32(vshlq_n_s32(vdotq_s32(vdupq_n_s32(0), m, h), 6), m, l);
    }
    const float16x8_t dh = vreinterpretq_f16_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(gb)));
    const float16x8_t mh = vreinterpretq_f16_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(gb + 16)));
    acc[0] = vfmaq_f32(acc[0], vcvtq_f32_s32(vpaddq_s32(sumi[0], sumi[1])), vmulq_n_f32(vcvt_f32_f16(vget_low_f16(dh)), y.d));
    acc[1] = vfmaq_f32(acc[1], vcvtq_f32_s32(vpaddq_s32(sumi[2], sumi[3])), vmulq_n_f32(vcvt_high_f32_f16(dh), y.d));
    macc[0] = vfmaq_f32(macc[0], vcvtq_f32_s32(vpaddq_s32(ms[0], ms[1])), vmulq_n_f32(vcvt_f32_f16(vget_low_f16(mh)), y.d));
    macc[1] = vfmaq_f32(macc[1], vcvtq_f32_s32(vpaddq_s32(ms[2], ms[3])), vmulq_n_f32(vcvt_high_f32_f16(mh), y.d));
  }
  vst1q_f32(out, vsubq_f32(acc[0], macc[0]));
  vst1q_f32(out + 4, vsubq_f32(acc[1], macc[1]));
}

// ---- Q6_Kx8z: 16 groups of 16 with an int8 scale each, quants 4 (q - 32) after decoding ------

constexpr size_t kQ6KZGroupBlock = 1680;
constexpr float kQ6KZAMul = 0.25f;  // the quants are 4 (q - 32): the activation scales carry 1/4

// The four SMMLA operands of one row pair's 32 elements (48 bytes at v): 4 (q - 32) as int8.
inline void k6z_operands(const uint8_t* v, int8x16_t* z) {
  const uint8x16_t v0 = vld1q_u8(v), v1 = vld1q_u8(v + 16), h = vld1q_u8(v + 32);
  z[0] = vreinterpretq_s8_u8(vshlq_n_u8(vsliq_n_u8(v0, h, 4), 2));
  z[1] = vreinterpretq_s8_u8(vshlq_n_u8(vsliq_n_u8(vshrq_n_u8(v0, 4), vshrq_n_u8(h, 2), 4), 2));
  z[2] = vreinterpretq_s8_u8(vshlq_n_u8(vsliq_n_u8(v1, vshrq_n_u8(h, 4), 4), 2));
  z[3] = vreinterpretq_s8_u8(vshlq_n_u8(vsliq_n_u8(vshrq_n_u8(v1, 4), vshrq_n_u8(h, 6), 4), 2));
}

// TBL indices (over a row pair's 16 scale bytes of a half super-block: the first row's groups,
// then the second's) that put group g's scales in the top byte of int32 lanes (r0, r0, r1, r1);
// an arithmetic shift by 24 then sign-extends them. +kScale6Step per group.
alignas(16) constexpr uint8_t kScale6Idx0[16] = {kX, kX, kX, 0, kX, kX, kX, 0, kX, kX, kX, 8, kX, kX, kX, 8};
alignas(16) constexpr uint8_t kScale6Step[16] = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};

inline int32x4_t k6z_scale(int8x16_t sc, uint8x16_t idx) {
  return vshrq_n_s32(vreinterpretq_s32_s8(vqtbl1q_s8(sc, idx)), 24);
}

// Row pair p's scales of groups 0-7 (half 0) or 8-15 (half 1).
inline int8x16_t k6z_scales(const uint8_t* gb, int p, int half) {
  return vld1q_s8(reinterpret_cast<const int8_t*>(gb + 16 + 32 * p + 16 * half));
}

template <int CP>
__attribute__((noinline)) void ktile_q6_kz(int64_t nsb, const uint8_t* g, int p0, const KPairBlock* pb, float* out,
                                           int64_t os) {
  float32x4_t acc[2][CP];
  for (int p = 0; p < 2; ++p) {
    for (int q = 0; q < CP; ++q) acc[p][q] = vdupq_n_f32(0.0f);
  }
  const uint8x16_t step = vld1q_u8(kScale6Step);
  for (int64_t i = 0; i < nsb; ++i) {
    const uint8_t* gb = g + static_cast<size_t>(i) * kQ6KZGroupBlock;
    __builtin_prefetch(gb + 2 * kQ6KZGroupBlock);
    int32x4_t sumi[2][CP];
    for (int p = 0; p < 2; ++p) {
      for (int q = 0; q < CP; ++q) sumi[p][q] = vdupq_n_s32(0);
    }
    const uint8_t* qz = gb + 144 + 384 * static_cast<size_t>(p0);
    int8x16_t sc[2] = {};
    uint8x16_t idx = vld1q_u8(kScale6Idx0);
    for (int j = 0; j < 8; ++j) {
      if (j % 4 == 0) {  // a new half super-block: its scales, and group 0 of the table
        sc[0] = k6z_scales(gb, p0, j / 4);
        sc[1] = k6z_scales(gb, p0 + 1, j / 4);
        idx = vld1q_u8(kScale6Idx0);
      }
      int8x16_t wz[2][4];
      k6z_operands(qz + 48 * j, wz[0]);
      k6z_operands(qz + 384 + 48 * j, wz[1]);
      const uint8x16_t idx1 = vaddq_u8(idx, step);
      const int32x4_t sv[2][2] = {{k6z_scale(sc[0], idx), k6z_scale(sc[0], idx1)},
                                  {k6z_scale(sc[1], idx), k6z_scale(sc[1], idx1)}};
      idx = vaddq_u8(idx1, step);
      for (int q = 0; q < CP; ++q) {
        const int8x16_t* y = pb[q * nsb + i].z + 4 * j;
        for (int p = 0; p < 2; ++p) {
          const int32x4_t s0 = vmmlaq_s32(vmmlaq_s32(vdupq_n_s32(0), wz[p][0], y[0]), wz[p][1], y[1]);
          const int32x4_t s1 = vmmlaq_s32(vmmlaq_s32(vdupq_n_s32(0), wz[p][2], y[2]), wz[p][3], y[3]);
          sumi[p][q] = vmlaq_s32(vmlaq_s32(sumi[p][q], s0, sv[p][0]), s1, sv[p][1]);
        }
      }
    }
    const float32x4_t d = group_field4<0>(gb, p0);
    const float32x4_t wd[2] = {vzip1q_f32(d, d), vzip2q_f32(d, d)};
    for (int q = 0; q < CP; ++q) {
      const KPairBlock& y = pb[q * nsb + i];
      for (int p = 0; p < 2; ++p) {
        acc[p][q] = vfmaq_f32(acc[p][q], vcvtq_f32_s32(sumi[p][q]), vmulq_f32(wd[p], y.ad));
      }
    }
  }
  for (int q = 0; q < CP; ++q) {
    for (int p = 0; p < 2; ++p) store_tile(acc[p][q], out + 2 * q * os + 2 * p, os);
  }
}

__attribute__((noinline)) void kcol_q6_kz(int64_t nsb, const uint8_t* g, const uint8_t* a, float* out) {
  float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  const uint8x16_t step = vld1q_u8(kScale6Step);
  for (int64_t i = 0; i < nsb; ++i) {
    const uint8_t* gb = g + static_cast<size_t>(i) * kQ6KZGroupBlock;
    __builtin_prefetch(gb + 4 * kQ6KZGroupBlock);
    const BlockQ8_K& y = reinterpret_cast<const BlockQ8_K*>(a)[i];
    int32x4_t sumi[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)};
    int8x16_t sc[4] = {};
    uint8x16_t idx = vld1q_u8(kScale6Idx0);
    for (int j = 0; j < 8; ++j) {
      if (j % 4 == 0) {
        for (int p = 0; p < 4; ++p) sc[p] = k6z_scales(gb, p, j / 4);
        idx = vld1q_u8(kScale6Idx0);
      }
      int8x16_t u[4];
      dup_pieces(vld1q_s8(y.qs + 32 * j), vld1q_s8(y.qs + 32 * j + 16), u);
      const uint8x16_t idx1 = vaddq_u8(idx, step);
      for (int p = 0; p < 4; ++p) {
        int8x16_t z[4];
        k6z_operands(gb + 144 + 384 * p + 48 * j, z);
        const int32x4_t s0 = vdotq_s32(vdotq_s32(vdupq_n_s32(0), z[0], u[0]), z[1], u[1]);
        const int32x4_t s1 = vdotq_s32(vdotq_s32(vdupq_n_s32(0), z[2], u[2]), z[3], u[3]);
        sumi[p] = vmlaq_s32(vmlaq_s32(sumi[p], s0, k6z_scale(sc[p], idx)), s1, k6z_scale(sc[p], idx1));
      }
      idx = vaddq_u8(idx1, step);
    }
    const float16x8_t dh = vreinterpretq_f16_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(gb)));
    const float ad = y.d * kQ6KZAMul;
    acc[0] = vfmaq_f32(acc[0], vcvtq_f32_s32(vpaddq_s32(sumi[0], sumi[1])), vmulq_n_f32(vcvt_f32_f16(vget_low_f16(dh)), ad));
    acc[1] = vfmaq_f32(acc[1], vcvtq_f32_s32(vpaddq_s32(sumi[2], sumi[3])), vmulq_n_f32(vcvt_high_f32_f16(dh), ad));
  }
  vst1q_f32(out, acc[0]);
  vst1q_f32(out + 4, acc[1]);
}

// ---- one driver for the repacked layouts ------------------------------------------------------
// A layout L names its block (kBlock elements), its prepared column pair block (Pair) and how
// many pairs a tile takes (kPairs), and provides prepare (column pairs -> Pair blocks, scaled
// activation scales included), tile<CP> (rows 2 p0 .. 2 p0 + 3 of an 8-row group x CP prepared
// pairs) and col (the 8 rows of a group x one column).
template <class Z>
struct ZLayout {
  static constexpr int64_t kBlock = 32;
  using Pair = PairBlock;
  static constexpr int kPairs = Z::kPairs;
  static void prepare(const uint8_t* a, size_t as, int64_t n_pairs, int64_t nb, Pair* out) {
    prepare_pairs<typename Z::TA>(a, as, n_pairs, nb, out, Z::kAMul);
  }
  template <int CP>
  static void tile(int64_t nb, const uint8_t* g, int p0, const Pair* pb, float* out, int64_t os) {
    ztile_mm<Z, CP>(nb, g, p0, pb, out, os);
  }
  static void col(int64_t nb, const uint8_t* g, const uint8_t* a, float* out) { zcol<Z>(nb, g, a, out); }
};

// The K layouts: the activation scales carry 1 (Q4_K) or 1/4 (Q6_K's quants are 4 (q - 32)).
struct KLayoutBase {
  static constexpr int64_t kBlock = kQK_K;
  using Pair = KPairBlock;
  static constexpr int kPairs = 4;
};
template <bool kFifth>  // Q5_K: Q4_K's layout plus the fifth bits
struct KZQ4_K : KLayoutBase {
  static void prepare(const uint8_t* a, size_t as, int64_t n_pairs, int64_t nsb, Pair* out) {
    prepare_kpairs(a, as, n_pairs, nsb, out, 1.0f);
  }
  template <int CP>
  static void tile(int64_t nsb, const uint8_t* g, int p0, const Pair* pb, float* out, int64_t os) {
    ktile_q4_kz<kFifth, CP>(nsb, g, p0, pb, out, os);
  }
  static void col(int64_t nsb, const uint8_t* g, const uint8_t* a, float* out) { kcol_q4_kz<kFifth>(nsb, g, a, out); }
};
struct KZQ6_K : KLayoutBase {
  static void prepare(const uint8_t* a, size_t as, int64_t n_pairs, int64_t nsb, Pair* out) {
    prepare_kpairs(a, as, n_pairs, nsb, out, kQ6KZAMul);
  }
  template <int CP>
  static void tile(int64_t nsb, const uint8_t* g, int p0, const Pair* pb, float* out, int64_t os) {
    ktile_q6_kz<CP>(nsb, g, p0, pb, out, os);
  }
  static void col(int64_t nsb, const uint8_t* g, const uint8_t* a, float* out) { kcol_q6_kz(nsb, g, a, out); }
};

template <class L, int CP>
void tile_tail(int cp, int64_t nb, const uint8_t* g, int p0, const typename L::Pair* pb, float* out, int64_t os) {
  if constexpr (CP > 0) {
    if (cp == CP) {
      L::template tile<CP>(nb, g, p0, pb, out, os);
    } else {
      tile_tail<L, CP - 1>(cp, nb, g, p0, pb, out, os);
    }
  }
}

// n_rows (a multiple of 8) packed rows x n_cols activation columns: column pairs through the
// SMMLA tiles, prepared in L2-sized chunks as in gemm_mm (per chunk, each group's two 4-row
// halves against tiles of kPairs pairs), an odd last column through col.
template <class L>
void gemm_packed(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a, size_t a_stride,
                 int64_t n_cols, float* out, int64_t out_stride) {
  const int64_t nb = n / L::kBlock;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  const size_t group_stride = 8 * w_stride;
  const int64_t n_groups = n_rows / 8;
  const int64_t n_pairs = n_cols / 2;
  if (n_pairs > 0) {
    constexpr int kPairs = L::kPairs;
    int64_t chunk = 0;
    typename L::Pair* pairs = pair_chunks<typename L::Pair>(nb, kPairs, n_pairs, &chunk);
    for (int64_t q0 = 0; q0 < n_pairs; q0 += chunk) {
      const int64_t q1 = std::min(n_pairs, q0 + chunk);
      L::prepare(ab + static_cast<size_t>(2 * q0) * a_stride, a_stride, q1 - q0, nb, pairs);
      for (int64_t g = 0; g < n_groups; ++g) {
        const uint8_t* wg = wb + static_cast<size_t>(g) * group_stride;
        for (int p0 = 0; p0 < 4; p0 += 2) {
          for (int64_t q = q0; q < q1; q += kPairs) {
            const int cp = static_cast<int>(std::min<int64_t>(kPairs, q1 - q));
            tile_tail<L, kPairs>(cp, nb, wg, p0, pairs + (q - q0) * nb, out + 2 * q * out_stride + 8 * g + 2 * p0,
                                 out_stride);
          }
        }
      }
    }
  }
  if (n_cols % 2 == 1) {
    const int64_t c = n_cols - 1;
    for (int64_t g = 0; g < n_groups; ++g) {
      L::col(nb, wb + static_cast<size_t>(g) * group_stride, ab + static_cast<size_t>(c) * a_stride,
             out + c * out_stride + 8 * g);
    }
  }
}

const PackedKernels kZQ4_0{"q4_0x8z", &gemm_packed<ZLayout<ZQ4_0>>, &dequantize_q4_0x8z_row, &repack_q4_0x8z};
const PackedKernels kZQ4_1{"q4_1x8z", &gemm_packed<ZLayout<ZQ4_1>>, &dequantize_q4_1x8z_row, &repack_q4_1x8z};
const PackedKernels kZQ5_0{"q5_0x8z", &gemm_packed<ZLayout<ZQ5_0>>, &dequantize_q5_0x8z_row, &repack_q5_0x8z};
const PackedKernels kZQ5_1{"q5_1x8z", &gemm_packed<ZLayout<ZQ5_1>>, &dequantize_q5_1x8z_row, &repack_q5_1x8z};
const PackedKernels kZQ8_0{"q8_0x8z", &gemm_packed<ZLayout<ZQ8_0>>, &dequantize_q8_0x8z_row, &repack_q8_0x8z};
const PackedKernels kZQ4_K{"q4_kx8z", &gemm_packed<KZQ4_K<false>>, &dequantize_q4_kx8z_row, &repack_q4_kx8z};
const PackedKernels kZQ5_K{"q5_kx8z", &gemm_packed<KZQ4_K<true>>, &dequantize_q5_kx8z_row, &repack_q5_kx8z};
const PackedKernels kZQ6_K{"q6_kx8z", &gemm_packed<KZQ6_K>, &dequantize_q6_kx8z_row, &repack_q6_kx8z};

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

// Two weight rows x CP activation column pairs per super-block: the rows are unpacked and
// zipped once for all pairs; each 2x2 tile's arithmetic is the same whatever CP is.
struct KZip {
  int8x16_t z[16][2];  // group g: zip_lo, zip_hi of the two rows' 16 quants
  int32x4_t sc[16];    // (sc0, sc0, sc1, sc1)
};

inline void zip_rows(const int8x16_t* g0, const int8x16_t* g1, const int32_t* sc0, const int32_t* sc1, KZip* k) {
  for (int g = 0; g < 16; ++g) {
    k->z[g][0] = zip_lo(g0[g], g1[g]);
    k->z[g][1] = zip_hi(g0[g], g1[g]);
    const int32_t s[4] = {sc0[g], sc0[g], sc1[g], sc1[g]};
    k->sc[g] = vld1q_s32(s);
  }
}

// sum_g sc_g * (the 2x2 products of group g) for activation rows y0, y1.
inline int32x4_t kzip_sum(const KZip& k, const BlockQ8_K* y0, const BlockQ8_K* y1) {
  int32x4_t sumi = vdupq_n_s32(0);
  for (int g = 0; g < 16; ++g) {
    const int8x16_t a0 = vld1q_s8(y0->qs + 16 * g), a1 = vld1q_s8(y1->qs + 16 * g);
    int32x4_t p = vmmlaq_s32(vdupq_n_s32(0), k.z[g][0], zip_lo(a0, a1));
    p = vmmlaq_s32(p, k.z[g][1], zip_hi(a0, a1));
    sumi = vmlaq_s32(sumi, p, k.sc[g]);
  }
  return sumi;
}

template <bool kFifthBit, int CP>
void tile_k45_mm(int64_t nsb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as,
                 float* out, int64_t os) {
  using BlockW = std::conditional_t<kFifthBit, BlockQ5_K, BlockQ4_K>;
  float32x4_t acc[CP], macc[CP];
  for (int q = 0; q < CP; ++q) acc[q] = macc[q] = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < nsb; ++i) {
    KQ45 k0, k1;
    float d0, d1, m0, m1;
    unpack_k45<kFifthBit>(w + static_cast<size_t>(i) * sizeof(BlockW), &k0, &d0, &m0);
    unpack_k45<kFifthBit>(w + ws + static_cast<size_t>(i) * sizeof(BlockW), &k1, &d1, &m1);
    KZip kz;
    zip_rows(k0.g, k1.g, k0.sc, k1.sc, &kz);
    const float32x4_t dd = lanes_xxyy(d0, d1), mm = lanes_xxyy(m0, m1);
    for (int q = 0; q < CP; ++q) {
      const auto* y0 = reinterpret_cast<const BlockQ8_K*>(a + static_cast<size_t>(2 * q) * as) + i;
      const auto* y1 = reinterpret_cast<const BlockQ8_K*>(a + static_cast<size_t>(2 * q + 1) * as) + i;
      const int32x4_t sumi = kzip_sum(kz, y0, y1);
      const float32x4_t ya = lanes_xyxy(y0->d, y1->d);
      acc[q] = vfmaq_f32(acc[q], vcvtq_f32_s32(sumi), vmulq_f32(dd, ya));
      const float32x4_t mins = lanes(static_cast<float>(mins_dot_bsums(k0.mn, y0->bsums)),
                                     static_cast<float>(mins_dot_bsums(k0.mn, y1->bsums)),
                                     static_cast<float>(mins_dot_bsums(k1.mn, y0->bsums)),
                                     static_cast<float>(mins_dot_bsums(k1.mn, y1->bsums)));
      macc[q] = vfmaq_f32(macc[q], mins, vmulq_f32(mm, ya));
    }
  }
  for (int q = 0; q < CP; ++q) store_tile(vsubq_f32(acc[q], macc[q]), out + 2 * q * os, os);
}

template <int CP>
void tile_q6_k_mm(int64_t nsb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as,
                  float* out, int64_t os) {
  float32x4_t acc[CP];
  for (int q = 0; q < CP; ++q) acc[q] = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < nsb; ++i) {
    const auto* x0 = reinterpret_cast<const BlockQ6_K*>(w) + i;
    const auto* x1 = reinterpret_cast<const BlockQ6_K*>(w + ws) + i;
    int8x16_t q0[16], q1[16];
    unpack_q6_k(*x0, q0);
    unpack_q6_k(*x1, q1);
    int32_t sc0[16], sc1[16];
    for (int g = 0; g < 16; ++g) {
      sc0[g] = x0->scales[g];
      sc1[g] = x1->scales[g];
    }
    KZip kz;
    zip_rows(q0, q1, sc0, sc1, &kz);
    const float32x4_t dd = lanes_xxyy(h2f(x0->d), h2f(x1->d));
    for (int q = 0; q < CP; ++q) {
      const auto* y0 = reinterpret_cast<const BlockQ8_K*>(a + static_cast<size_t>(2 * q) * as) + i;
      const auto* y1 = reinterpret_cast<const BlockQ8_K*>(a + static_cast<size_t>(2 * q + 1) * as) + i;
      const int32x4_t sumi = kzip_sum(kz, y0, y1);
      acc[q] = vfmaq_f32(acc[q], vcvtq_f32_s32(sumi), vmulq_f32(dd, lanes_xyxy(y0->d, y1->d)));
    }
  }
  for (int q = 0; q < CP; ++q) store_tile(acc[q], out + 2 * q * os, os);
}

using KTileFn = void (*)(int64_t, const uint8_t*, size_t, const uint8_t*, size_t, float*, int64_t);

// 2-row x 2*kKPairs-column tiles over the matrix, column pairs in chunks whose activations stay
// in L2; the last odd row and column go through the SDOT row dot.
constexpr int kKPairs = 4;
template <KTileFn T4, KTileFn T3, KTileFn T2, KTileFn T1, float (*Dot)(const void*, const void*, int64_t)>
void gemm_k_mm(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
               size_t a_stride, int64_t n_cols, float* out, int64_t out_stride) {
  const int64_t nsb = n / kQK_K;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  const int64_t rows2 = n_rows - n_rows % 2, n_pairs = n_cols / 2, cols2 = 2 * n_pairs;
  const int64_t chunk = l2_column_chunk(static_cast<int64_t>(2 * a_stride), kKPairs);
  for (int64_t q0 = 0; q0 < n_pairs; q0 += chunk) {
    const int64_t q1 = std::min(n_pairs, q0 + chunk);
    for (int64_t r = 0; r < rows2; r += 2) {
      const uint8_t* wr = wb + static_cast<size_t>(r) * w_stride;
      for (int64_t q = q0; q < q1; q += kKPairs) {
        const uint8_t* ac = ab + static_cast<size_t>(2 * q) * a_stride;
        float* o = out + 2 * q * out_stride + r;
        switch (std::min<int64_t>(kKPairs, q1 - q)) {
          case 4: T4(nsb, wr, w_stride, ac, a_stride, o, out_stride); break;
          case 3: T3(nsb, wr, w_stride, ac, a_stride, o, out_stride); break;
          case 2: T2(nsb, wr, w_stride, ac, a_stride, o, out_stride); break;
          default: T1(nsb, wr, w_stride, ac, a_stride, o, out_stride); break;
        }
      }
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
                      &gemm_k_mm<&tile_k45_mm<false, 4>, &tile_k45_mm<false, 3>, &tile_k45_mm<false, 2>,
                                 &tile_k45_mm<false, 1>, &dot_q45_k<false>>,
                      &gemm_k_mm<&tile_k45_mm<true, 4>, &tile_k45_mm<true, 3>, &tile_k45_mm<true, 2>,
                                 &tile_k45_mm<true, 1>, &dot_q45_k<true>>,
                      &gemm_k_mm<&tile_q6_k_mm<4>, &tile_q6_k_mm<3>, &tile_q6_k_mm<2>, &tile_q6_k_mm<1>,
                                 &dot_q6_k>>;

}  // namespace

namespace neon_i8mm {
const TypeKernels* kernels(DType t) { return MmTable::find(t, "i8mm"); }
const PackedKernels* packed_kernels(DType t) {
  if (t == DType::Q4_0) return &kZQ4_0;
  if (t == DType::Q4_1) return &kZQ4_1;
  if (t == DType::Q5_0) return &kZQ5_0;
  if (t == DType::Q5_1) return &kZQ5_1;
  if (t == DType::Q8_0) return &kZQ8_0;
  if (t == DType::Q4_K) return &kZQ4_K;
  if (t == DType::Q5_K) return &kZQ5_K;
  if (t == DType::Q6_K) return &kZQ6_K;
  return nullptr;
}
}  // namespace neon_i8mm

}  // namespace geniex::cpu
