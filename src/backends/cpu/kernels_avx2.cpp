// AVX2 + FMA + F16C kernels: integer dot products of 4/8-bit weights with int8 activations
// (maddubs/madd), register-tiled gemm, vectorized activation quantizers and f32 helpers.
// Compiled with -mavx2 -mfma -mf16c and only called after a run-time CPU check, so this file
// uses no inline functions or templates shared with other files (the linker could otherwise
// keep this file's AVX2 copy of them for the whole program).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/exp_table.hpp"
#include "backends/cpu/kernels_internal.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu::avx2 {
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

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int hsum8_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
// (vcvtps2ph on one lane: clang's _cvtss_sh macro is a C99 compound literal, an error in C++
// with -Werror.)
inline uint16_t f2h(float f) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}

inline uint16_t load_u16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// One fp16 (lane 0) or two consecutive fp16 values (lanes 0, 1) as floats.
inline __m128 load_h1(const void* p) { return _mm_cvtph_ps(_mm_cvtsi32_si128(load_u16(p))); }
inline __m128 load_h2(const void* p) {
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(p))));
}

// 16 packed nibbles -> 32 bytes: low nibbles in bytes 0..15, high nibbles in bytes 16..31.
inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// The 32 fifth bits of a Q5_0/Q5_1 block (a little-endian uint32 at p) -> 32 bytes: byte j is
// 0x10 where bit j is set, else 0, so OR-ing it into unpack_nibbles' output gives the quants.
inline __m256i expand_bit5(const uint8_t* p) {
  // Byte j gets byte j / 8 of the word (the shuffle is per 128-bit lane; every lane holds the
  // whole word), then keeps only bit j % 8.
  const __m256i word = _mm256_set1_epi32(static_cast<int>(load_u32(p)));
  const __m256i spread = _mm256_shuffle_epi8(
      word, _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                             2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Q5_0 / Q5_1 quants 0..31 in element order.
inline __m256i unpack_q5(const uint8_t* qh, const uint8_t* qs) {
  return _mm256_or_si256(unpack_nibbles(qs), expand_bit5(qh));
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Sum of adjacent pairs of i16 -> i32.
inline __m256i sum_pairs(__m256i v) { return _mm256_madd_epi16(v, _mm256_set1_epi16(1)); }

// ---- 32-element block formats: traits for the register-tiled gemm ----------------------------
// Each trait decodes a weight block (W) and an activation block (A) and returns their integer
// dot product as 8 partial i32 sums; `scale` gives lane 0 = d_w * d_a and, for Q4_1,
// lane 1 = m_w * s_a (the min term).

struct TraitQ8_0 {
  static constexpr size_t kWBytes = sizeof(BlockQ8_0);
  static constexpr size_t kABytes = sizeof(BlockQ8_0);
  static constexpr bool kHasMin = false;
  struct W { __m256i absq, q; __m128 d; };
  struct A { __m256i q; __m128 d; };
  static W load_w(const uint8_t* p) {
    const __m256i q = load256(p + 2);
    return {_mm256_sign_epi8(q, q), q, load_h1(p)};
  }
  static A load_a(const uint8_t* p) { return {load256(p + 2), load_h1(p)}; }
  static __m256i dot(const W& w, const A& a) {
    // |w| * (a * sign(w)) keeps maddubs' unsigned-by-signed form.
    return sum_pairs(_mm256_maddubs_epi16(w.absq, _mm256_sign_epi8(a.q, w.q)));
  }
};

struct TraitQ4_0 {
  static constexpr size_t kWBytes = sizeof(BlockQ4_0);
  static constexpr size_t kABytes = sizeof(BlockQ8_0);
  static constexpr bool kHasMin = false;
  struct W { __m256i q; __m128 d; };
  struct A { __m256i q, sum8; __m128 d; };
  static W load_w(const uint8_t* p) { return {unpack_nibbles(p + 2), load_h1(p)}; }
  static A load_a(const uint8_t* p) {
    const __m256i q = load256(p + 2);
    // (w - 8) . a = w . a - 8 * sum(a): the correction is computed once per activation block.
    return {q, sum_pairs(_mm256_maddubs_epi16(_mm256_set1_epi8(8), q)), load_h1(p)};
  }
  static __m256i dot(const W& w, const A& a) {
    return _mm256_sub_epi32(sum_pairs(_mm256_maddubs_epi16(w.q, a.q)), a.sum8);
  }
};

struct TraitQ4_1 {
  static constexpr size_t kWBytes = sizeof(BlockQ4_1);
  static constexpr size_t kABytes = sizeof(BlockQ8_1);
  static constexpr bool kHasMin = true;
  struct W { __m256i q; __m128 d; };  // d = (d, m)
  struct A { __m256i q; __m128 d; };  // d = (d, s)
  static W load_w(const uint8_t* p) { return {unpack_nibbles(p + 4), load_h2(p)}; }
  static A load_a(const uint8_t* p) { return {load256(p + 4), load_h2(p)}; }
  static __m256i dot(const W& w, const A& a) { return sum_pairs(_mm256_maddubs_epi16(w.q, a.q)); }
};

struct TraitQ5_0 {
  static constexpr size_t kWBytes = sizeof(BlockQ5_0);
  static constexpr size_t kABytes = sizeof(BlockQ8_0);
  static constexpr bool kHasMin = false;
  struct W { __m256i q; __m128 d; };
  struct A { __m256i q, sum16; __m128 d; };
  static W load_w(const uint8_t* p) { return {unpack_q5(p + 2, p + 6), load_h1(p)}; }
  static A load_a(const uint8_t* p) {
    const __m256i q = load256(p + 2);
    // (w - 16) . a = w . a - 16 * sum(a); maddubs pairs stay below 2 * 31 * 128 (no saturation).
    return {q, sum_pairs(_mm256_maddubs_epi16(_mm256_set1_epi8(16), q)), load_h1(p)};
  }
  static __m256i dot(const W& w, const A& a) {
    return _mm256_sub_epi32(sum_pairs(_mm256_maddubs_epi16(w.q, a.q)), a.sum16);
  }
};

struct TraitQ5_1 {
  static constexpr size_t kWBytes = sizeof(BlockQ5_1);
  static constexpr size_t kABytes = sizeof(BlockQ8_1);
  static constexpr bool kHasMin = true;
  struct W { __m256i q; __m128 d; };  // d = (d, m)
  struct A { __m256i q; __m128 d; };  // d = (d, s)
  static W load_w(const uint8_t* p) { return {unpack_q5(p + 4, p + 8), load_h2(p)}; }
  static A load_a(const uint8_t* p) { return {load256(p + 4), load_h2(p)}; }
  static __m256i dot(const W& w, const A& a) { return sum_pairs(_mm256_maddubs_epi16(w.q, a.q)); }
};

// R weight rows x C activation columns over nb blocks; each weight block is decoded once per
// column tile and each activation block once per row tile.
template <class T, int R, int C>
void tile_q(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out,
            int64_t os) {
  __m256 acc[R][C];
  __m128 macc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      acc[r][c] = _mm256_setzero_ps();
      macc[r][c] = _mm_setzero_ps();
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    typename T::A av[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) av[c] = T::load_a(a + c * as + static_cast<size_t>(b) * T::kABytes);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint8_t* wp = w + r * ws + static_cast<size_t>(b) * T::kWBytes;
      // Decode streams weights from DRAM: fetch the same block four row tiles ahead (reads
      // past the matrix end are harmless, prefetches do not fault).
      if (C == 1) _mm_prefetch(reinterpret_cast<const char*>(wp + 16 * ws), _MM_HINT_T0);
      const typename T::W wv = T::load_w(wp);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const __m256 sumi = _mm256_cvtepi32_ps(T::dot(wv, av[c]));
        const __m128 scale = _mm_mul_ps(wv.d, av[c].d);
        acc[r][c] = _mm256_fmadd_ps(_mm256_broadcastss_ps(scale), sumi, acc[r][c]);
        if constexpr (T::kHasMin) macc[r][c] = _mm_add_ps(macc[r][c], scale);
      }
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float v = hsum8(acc[r][c]);
      if constexpr (T::kHasMin) v += _mm_cvtss_f32(_mm_movehdup_ps(macc[r][c]));
      out[c * os + r] = v;
    }
  }
}

// Dispatches the edge tiles (fewer than 4 rows or 2 columns left) to smaller instantiations.
template <class T, int C>
void tile_q_rows(int rows, int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as,
                 float* out, int64_t os) {
  switch (rows) {
    case 4: tile_q<T, 4, C>(nb, w, ws, a, as, out, os); break;
    case 3: tile_q<T, 3, C>(nb, w, ws, a, as, out, os); break;
    case 2: tile_q<T, 2, C>(nb, w, ws, a, as, out, os); break;
    default: tile_q<T, 1, C>(nb, w, ws, a, as, out, os); break;
  }
}

// Row tiles outside, column tiles inside: a 4-row weight tile (a few KiB) is read from memory
// once and then served from L1 for every column tile.
template <class T, int kBlock>
void gemm_q(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
            size_t a_stride, int64_t n_cols, float* out, int64_t out_stride) {
  const int64_t nb = n / kBlock;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int64_t r0 = 0; r0 < n_rows; r0 += 4) {
    const int rows = static_cast<int>(n_rows - r0 < 4 ? n_rows - r0 : 4);
    const uint8_t* wr = wb + static_cast<size_t>(r0) * w_stride;
    int64_t c0 = 0;
    for (; c0 + 2 <= n_cols; c0 += 2) {
      tile_q_rows<T, 2>(rows, nb, wr, w_stride, ab + static_cast<size_t>(c0) * a_stride, a_stride,
                        out + c0 * out_stride + r0, out_stride);
    }
    if (c0 < n_cols) {
      tile_q_rows<T, 1>(rows, nb, wr, w_stride, ab + static_cast<size_t>(c0) * a_stride, a_stride,
                        out + c0 * out_stride + r0, out_stride);
    }
  }
}

// ---- K-quants: one row . one column, called per output element -------------------------------

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
  const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums));
  const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums + 8));
  const __m128i pair_sums = _mm_hadd_epi16(b0, b1);
  const __m128i m = _mm_setr_epi16(static_cast<int16_t>(mins[0]), static_cast<int16_t>(mins[1]),
                                   static_cast<int16_t>(mins[2]), static_cast<int16_t>(mins[3]),
                                   static_cast<int16_t>(mins[4]), static_cast<int16_t>(mins[5]),
                                   static_cast<int16_t>(mins[6]), static_cast<int16_t>(mins[7]));
  __m128i p = _mm_madd_epi16(pair_sums, m);
  p = _mm_add_epi32(p, _mm_unpackhi_epi64(p, p));
  p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 0xb1));
  return _mm_cvtsi128_si32(p);
}

// Q4_K and Q5_K times Q8_K: the same sub-block scales and mins; Q5_K adds a fifth bit to each
// quant from qh (bit 2j of a qh byte for the low-nibble quants of chunk j, bit 2j+1 for the high).
template <class Block>
float dot_q45_k(const void* wv, const void* av, int64_t n) {
  constexpr bool kFifth = std::is_same_v<Block, BlockQ5_K>;
  const auto* x = static_cast<const Block*>(wv);
  const auto* y = static_cast<const BlockQ8_K*>(av);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  [[maybe_unused]] const __m256i bit4 = _mm256_set1_epi8(0x10);
  __m256 acc = _mm256_setzero_ps();
  float acc_min = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    int sc[8], mn[8];
    for (int j = 0; j < 8; ++j) scale_min_k4(j, x[i].scales, &sc[j], &mn[j]);
    const uint8_t* ql = x[i].qs;
    const int8_t* q8 = y[i].qs;
    [[maybe_unused]] __m256i hbits = _mm256_setzero_si256();
    if constexpr (kFifth) hbits = load256(x[i].qh);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j, ql += 32, q8 += 64) {
      const __m256i q = load256(ql);
      __m256i lo = _mm256_and_si256(q, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kFifth) {
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hbits, 4), bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hbits, 3), bit4));
        hbits = _mm256_srli_epi16(hbits, 2);
      }
      const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load256(q8)),
                                             _mm256_set1_epi16(static_cast<int16_t>(sc[2 * j])));
      const __m256i p_hi =
          _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load256(q8 + 32)),
                            _mm256_set1_epi16(static_cast<int16_t>(sc[2 * j + 1])));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
    }
    const float d = h2f(x[i].d) * y[i].d;
    const float dmin = h2f(x[i].dmin) * y[i].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    acc_min += dmin * static_cast<float>(mins_dot_bsums(mn, y[i].bsums));
  }
  return hsum8(acc) - acc_min;
}

float dot_q6_k(const void* wv, const void* av, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(wv);
  const auto* y = static_cast<const BlockQ8_K*>(av);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i mask3 = _mm256_set1_epi8(3);
  const __m256i m32 = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    const int8_t* q8 = y[i].qs;
    __m256i sumi = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, q8 += 128) {
      const __m256i l0 = load256(ql);
      const __m256i l1 = load256(ql + 32);
      const __m256i h = load256(qh);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(l0, low4),
                             _mm256_slli_epi16(_mm256_and_si256(h, mask3), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(l1, low4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), mask3), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), mask3), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), mask3), 4));
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i a = load256(q8 + 32 * k);
        // (q - 32) . a = q . a - 32 * sum(a), both in i16 without saturation (|q.a| <= 16002).
        const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], a),
                                             _mm256_maddubs_epi16(m32, a));
        // Elements 0..15 of this group use scale 2k, elements 16..31 scale 2k+1.
        const __m256i s = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_set1_epi16(sc[2 * k])), _mm_set1_epi16(sc[2 * k + 1]), 1);
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, s));
      }
    }
    const float d = h2f(x[i].d) * y[i].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum8(acc);
}

template <float (*Dot)(const void*, const void*, int64_t)>
void gemm_rowdot(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
                 size_t a_stride, int64_t n_cols, float* out, int64_t out_stride) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  // Rows outside so a weight row is reused from cache by every column.
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t c = 0; c < n_cols; ++c) {
      out[c * out_stride + r] = Dot(wb + static_cast<size_t>(r) * w_stride,
                                    ab + static_cast<size_t>(c) * a_stride, n);
    }
  }
}

// ---- plain types: f32 / f16 / bf16 weights ----------------------------------------------------

struct LoadF32 {
  using E = float;
  static __m256 load8(const E* p) { return _mm256_loadu_ps(p); }
  static float load1(const E* p) { return *p; }
};
struct LoadF16 {
  using E = uint16_t;
  static __m256 load8(const E* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float load1(const E* p) { return h2f(*p); }
};
struct LoadBF16 {
  using E = uint16_t;
  static __m256 load8(const E* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
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
  __m256 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const auto* av = reinterpret_cast<const E*>(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 y = L::load8(av + i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(L::load8(reinterpret_cast<const E*>(w + r * ws) + i), y, acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float s = hsum8(acc[r]);
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

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Four vectors of 8 i32 (elements 0..31 in order) -> 32 i8 in order.
inline __m256i pack_i32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);  // a0-3 b0-3 | a4-7 b4-7
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i abcd = _mm256_packs_epi16(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Shared by Q8_0 and Q8_1: quantizes 32 floats to qs with d = amax / 127 and scale 127/amax,
// ties to even (as quant::quantize_activations_ref); returns d and the sum of the quants.
inline float quantize_block32(const float* x, int8_t* qs, int* sum) {
  const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  const __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
  const __m256 m = _mm256_max_ps(_mm256_max_ps(abs_ps(v0), abs_ps(v1)),
                                 _mm256_max_ps(abs_ps(v2), abs_ps(v3)));
  const float amax = hmax8(m);
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  const __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), pack_i32_to_i8(i0, i1, i2, i3));
  *sum = hsum8_i32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
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
  for (int64_t i = 0; i < n / 256; ++i, x += 256) {
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < 256; j += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + j)));
    const float amax = hmax8(m);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The reference keeps the first element of largest magnitude, with its sign.
    float max = 0.0f;
    const __m256 vamax = _mm256_set1_ps(amax);
    for (int j = 0; j < 256; j += 8) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + j)), vamax, _CMP_EQ_OQ));
      if (hit != 0) {
        max = x[j + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 vis = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int j = 0; j < 256; j += 32) {
      __m256i q[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), vis),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(v), cap);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j), pack_i32_to_i8(q[0], q[1], q[2], q[3]));
      // bsums for elements j..j+15 and j+16..j+31.
      const __m256i s01 = _mm256_add_epi32(q[0], q[1]);
      const __m256i s23 = _mm256_add_epi32(q[2], q[3]);
      y[i].bsums[j / 16] = static_cast<int16_t>(hsum8_i32(s01));
      y[i].bsums[j / 16 + 1] = static_cast<int16_t>(hsum8_i32(s23));
    }
    y[i].d = 1.0f / iscale;
  }
}

void quantize_f16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = f2h(x[i]);
}

inline uint16_t f2bf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

void quantize_bf16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  for (; i + 8 <= n; i += 8) {
    const __m256i b = _mm256_castps_si256(_mm256_loadu_ps(x + i));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                             _mm256_and_si256(_mm256_srli_epi32(b, 16),
                                                              _mm256_set1_epi32(1)))),
        16);
    const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs_mask), inf);
    const __m256i r = _mm256_and_si256(_mm256_blendv_epi8(rounded, nan, is_nan),
                                       _mm256_set1_epi32(0xffff));
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), packed);
  }
  for (; i < n; ++i) y[i] = f2bf(x[i]);
}

void quantize_f32(const float* x, void* dst, int64_t n) {
  std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}

// ---- dequantizers (bit-exact with the references: no fused multiply-add) ---------------------

void dequantize_q8_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const __m256 d = _mm256_set1_ps(h2f(x[i].d));
    for (int k = 0; k < 4; ++k) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[i].qs + 8 * k));
      _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
}

void dequantize_q4_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const __m256 d = _mm256_set1_ps(h2f(x[i].d));
    const __m256i q = _mm256_sub_epi8(unpack_nibbles(x[i].qs), _mm256_set1_epi8(8));
    alignas(32) int8_t b[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(b), q);
    for (int k = 0; k < 4; ++k) {
      const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8 * k));
      _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d));
    }
  }
}

void dequantize_q4_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const __m256 d = _mm256_set1_ps(h2f(x[i].d));
    const __m256 m = _mm256_set1_ps(h2f(x[i].m));
    alignas(32) uint8_t b[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(b), unpack_nibbles(x[i].qs));
    for (int k = 0; k < 4; ++k) {
      const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8 * k));
      const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
      _mm256_storeu_ps(y + 8 * k, _mm256_add_ps(_mm256_mul_ps(q, d), m));
    }
  }
}

// Eight bytes at a time of 32 quant bytes, widened to f32.
inline __m256 i8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
inline __m256 u8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

void dequantize_q5_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const __m256 d = _mm256_set1_ps(h2f(x[i].d));
    const __m256i q = _mm256_sub_epi8(unpack_q5(x[i].qh, x[i].qs), _mm256_set1_epi8(16));
    const __m128i lo = _mm256_castsi256_si128(q);
    const __m128i hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(y, _mm256_mul_ps(i8_to_ps(lo), d));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(i8_to_ps(_mm_srli_si128(lo, 8)), d));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(i8_to_ps(hi), d));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(i8_to_ps(_mm_srli_si128(hi, 8)), d));
  }
}

void dequantize_q5_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / 32; ++i, y += 32) {
    const __m256 d = _mm256_set1_ps(h2f(x[i].d));
    const __m256 m = _mm256_set1_ps(h2f(x[i].m));
    const __m256i q = unpack_q5(x[i].qh, x[i].qs);
    const __m128i lo = _mm256_castsi256_si128(q);
    const __m128i hi = _mm256_extracti128_si256(q, 1);
    // Multiply, then add: the reference's two roundings (no fused multiply-add).
    _mm256_storeu_ps(y, _mm256_add_ps(_mm256_mul_ps(u8_to_ps(lo), d), m));
    _mm256_storeu_ps(y + 8, _mm256_add_ps(_mm256_mul_ps(u8_to_ps(_mm_srli_si128(lo, 8)), d), m));
    _mm256_storeu_ps(y + 16, _mm256_add_ps(_mm256_mul_ps(u8_to_ps(hi), d), m));
    _mm256_storeu_ps(y + 24, _mm256_add_ps(_mm256_mul_ps(u8_to_ps(_mm_srli_si128(hi, 8)), d), m));
  }
}

void dequantize_f16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, LoadF16::load8(x + i));
  for (; i < n; ++i) y[i] = h2f(x[i]);
}

void dequantize_bf16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, LoadBF16::load8(x + i));
  for (; i < n; ++i) y[i] = LoadBF16::load1(x + i);
}

void dequantize_f32(const void* src, float* y, int64_t n) {
  std::memcpy(y, src, static_cast<size_t>(n) * sizeof(float));
}

template <DType W>
void dequantize_ref(const void* src, float* y, int64_t n) {
  quant::dequantize_row_ref(W, src, y, n);
}

const TypeKernels kTable[] = {
    {DType::F32, DType::F32, "avx2", &dequantize_f32, &quantize_f32, &gemm_f<LoadF32>},
    {DType::F16, DType::F16, "avx2", &dequantize_f16, &quantize_f16, &gemm_f<LoadF16>},
    {DType::BF16, DType::BF16, "avx2", &dequantize_bf16, &quantize_bf16, &gemm_f<LoadBF16>},
    {DType::Q4_0, DType::Q8_0, "avx2", &dequantize_q4_0, &quantize_q8_0, &gemm_q<TraitQ4_0, 32>},
    {DType::Q4_1, DType::Q8_1, "avx2", &dequantize_q4_1, &quantize_q8_1, &gemm_q<TraitQ4_1, 32>},
    {DType::Q5_0, DType::Q8_0, "avx2", &dequantize_q5_0, &quantize_q8_0, &gemm_q<TraitQ5_0, 32>},
    {DType::Q5_1, DType::Q8_1, "avx2", &dequantize_q5_1, &quantize_q8_1, &gemm_q<TraitQ5_1, 32>},
    {DType::Q8_0, DType::Q8_0, "avx2", &dequantize_q8_0, &quantize_q8_0, &gemm_q<TraitQ8_0, 32>},
    {DType::Q4_K, DType::Q8_K, "avx2", &dequantize_ref<DType::Q4_K>, &quantize_q8_k,
     &gemm_rowdot<&dot_q45_k<BlockQ4_K>>},
    {DType::Q5_K, DType::Q8_K, "avx2", &dequantize_ref<DType::Q5_K>, &quantize_q8_k,
     &gemm_rowdot<&dot_q45_k<BlockQ5_K>>},
    {DType::Q6_K, DType::Q8_K, "avx2", &dequantize_ref<DType::Q6_K>, &quantize_q8_k,
     &gemm_rowdot<&dot_q6_k>},
};

}  // namespace

const TypeKernels* kernels(DType t) {
  for (const auto& k : kTable) {
    if (k.type == t) return &k;
  }
  return nullptr;
}

// ---- f32 helpers ------------------------------------------------------------------------------

float dot_f32(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = hsum8(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_f32(float alpha, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void fp16_to_f32_row(const uint16_t* src, float* dst, int64_t n) { dequantize_f16(src, dst, n); }
void f32_to_fp16_row(const float* src, uint16_t* dst, int64_t n) { quantize_f16(src, dst, n); }

float dot_f32_f16(const float* a, const uint16_t* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), LoadF16::load8(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), LoadF16::load8(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), LoadF16::load8(b + i), s0);
  float s = hsum8(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * h2f(b[i]);
  return s;
}

void axpy_f16(float alpha, const uint16_t* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, LoadF16::load8(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * h2f(x[i]);
}

}  // namespace geniex::cpu::avx2

namespace geniex::cpu::avx2 {

// ---- attention helpers (bit-identical to the per-key dot_f32_f16 / axpy_f16 calls) -----------

namespace {
#include "backends/cpu/attn_x86.hpp"
}  // namespace

void attn_scores_f16(const float* q, const uint8_t* k, size_t row_bytes, int n_keys, int64_t hd, float scale,
                     float* scores) {
  if (hd % 16 != 0 || hd > 256) {
    for (int j = 0; j < n_keys; ++j) {
      scores[j] = dot_f32_f16(q, reinterpret_cast<const uint16_t*>(k + static_cast<size_t>(j) * row_bytes), hd) * scale;
    }
    return;
  }
  // The query stays in registers for up to 128 dimensions; the sums run as dot_f32_f16's.
  __m256 qv[32];
  for (int64_t i = 0; i < hd; i += 8) qv[i / 8] = _mm256_loadu_ps(q + i);
  for (int j = 0; j < n_keys; ++j) {
    const auto* kr = reinterpret_cast<const uint16_t*>(k + static_cast<size_t>(j) * row_bytes);
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < hd; i += 16) {
      s0 = _mm256_fmadd_ps(qv[i / 8], LoadF16::load8(kr + i), s0);
      s1 = _mm256_fmadd_ps(qv[i / 8 + 1], LoadF16::load8(kr + i + 8), s1);
    }
    scores[j] = hsum8(_mm256_add_ps(s0, s1)) * scale;
  }
}

void attn_accum_f16(const float* p, const uint8_t* v, size_t row_bytes, int n_keys, int64_t hd, float* acc) {
  if (hd % 8 != 0) {
    for (int j = 0; j < n_keys; ++j) {
      axpy_f16(p[j], reinterpret_cast<const uint16_t*>(v + static_cast<size_t>(j) * row_bytes), acc, hd);
    }
    return;
  }
  // 64 dimensions at a time in registers, keys in order: each element sees axpy_f16's fma chain.
  for (int64_t d0 = 0; d0 < hd; d0 += 64) {
    const int64_t nv = (hd - d0 < 64 ? hd - d0 : 64) / 8;
    __m256 a[8];
    for (int64_t i = 0; i < nv; ++i) a[i] = _mm256_loadu_ps(acc + d0 + 8 * i);
    for (int j = 0; j < n_keys; ++j) {
      const auto* vr = reinterpret_cast<const uint16_t*>(v + static_cast<size_t>(j) * row_bytes) + d0;
      const __m256 pj = _mm256_set1_ps(p[j]);
      if (nv == 8) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(pj, LoadF16::load8(vr + 8 * i), a[i]);
      } else {
        for (int64_t i = 0; i < nv; ++i) a[i] = _mm256_fmadd_ps(pj, LoadF16::load8(vr + 8 * i), a[i]);
      }
    }
    for (int64_t i = 0; i < nv; ++i) _mm256_storeu_ps(acc + d0 + 8 * i, a[i]);
  }
}

namespace {
// Scores of keys with NC full 64-dimension chunks (head size 64 * NC), NC known at compile time:
// one chunk of the key converted into registers, every query's two chains over it; the chains
// of all queries wait in `part` between chunks (NC > 1).
template <int NC>
void attn_scores_chunks(const float* q, int64_t q_stride, int nq, const uint8_t* k, size_t row_bytes, int n_keys,
                        float scale, float* scores, int64_t ld, __m256* part) {
  alignas(32) __m256 red[8];
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int j = 0; j < n_keys; ++j) {
    const auto* kr = reinterpret_cast<const uint16_t*>(k + static_cast<size_t>(j) * row_bytes);
    float* srow = scores + j * ld;
    for (int c = 0; c < NC; ++c) {
      __m256 kv[8];
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) kv[s] = LoadF16::load8(kr + 64 * c + 8 * s);
      for (int i0 = 0; i0 < nq; i0 += 8) {
        const int ni = nq - i0 < 8 ? nq - i0 : 8;
        for (int ii = 0; ii < ni; ++ii) {
          const float* qr = q + (i0 + ii) * q_stride + 64 * c;
          __m256 s0 = c == 0 ? _mm256_setzero_ps() : part[2 * (i0 + ii)];
          __m256 s1 = c == 0 ? _mm256_setzero_ps() : part[2 * (i0 + ii) + 1];
          s0 = _mm256_fmadd_ps(_mm256_loadu_ps(qr), kv[0], s0);
          s1 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 8), kv[1], s1);
          s0 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 16), kv[2], s0);
          s1 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 24), kv[3], s1);
          s0 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 32), kv[4], s0);
          s1 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 40), kv[5], s1);
          s0 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 48), kv[6], s0);
          s1 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 56), kv[7], s1);
          if (c == NC - 1) {
            red[ii] = _mm256_add_ps(s0, s1);
          } else {
            part[2 * (i0 + ii)] = s0;
            part[2 * (i0 + ii) + 1] = s1;
          }
        }
        if (c == NC - 1) store_scores8(red, ni, vscale, srow + i0);
      }
    }
  }
}

// The keys of one run, key by key: dot_f32_f16's order, s0 over the even 16-element steps, s1
// over the odd ones, then hsum8(s0 + s1) * scale; eight queries' sums reduced together (hsum8x8).
void scores_run(const float* q, int64_t q_stride, int nq, const uint8_t* k, size_t row_bytes, int n_keys, int64_t hd,
                float scale, float* scores, int64_t ld) {
  alignas(32) __m256 part[2 * kMaxScorePass];
  scores_by_head_size(
      hd, q, q_stride, nq, scores,
      [&](auto nc, const float* qi, int ni, float* si) {
        attn_scores_chunks<decltype(nc)::value>(qi, q_stride, ni, k, row_bytes, n_keys, scale, si, ld, part);
      },
      [&] {
        // Other sizes: key by key, query by query.
        for (int j = 0; j < n_keys; ++j) {
          const auto* kr = reinterpret_cast<const uint16_t*>(k + static_cast<size_t>(j) * row_bytes);
          for (int i = 0; i < nq; ++i) scores[j * ld + i] = dot_f32_f16(q + i * q_stride, kr, hd) * scale;
        }
      });
}

// Queries as lanes (8 or more queries): 8 queries per ymm, so each fma serves 8 scores and no
// horizontal sums are needed. A score's arithmetic is still scores_run's: lane l of s0 (l < 8,
// dimensions l, l + 16, ...) and lane l of s1 (dimensions l + 8, l + 24, ...) are here chains of
// their own, c_l and c_(l+8), over ymm of 8 queries' dimension d against key dimension d
// broadcast; then r_l = c_l + c_(l+8) (s0 + s1), ((r0 + r4) + (r2 + r6)) + ((r1 + r5) + (r3 + r7))
// (hsum8x8's order) and the scale, each an IEEE operation on the same operands.

// 8 x 8 floats transposed in registers: r[i] lane c becomes r[c] lane i.
inline void transpose8(__m256* r) {
  __m256 t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 2; ++i) {  // u[4i + c], 128-bit lane L: column 4L + c of rows 4i..4i+3
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

// qt[d * 8 + i] = q[i][d] for the (at most 8) queries of a group, zeros past nq.
inline void transpose_queries8(const float* q, int64_t q_stride, int nq, int64_t hd, float* qt) {
  for (int64_t d0 = 0; d0 < hd; d0 += 8) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = i < nq ? _mm256_loadu_ps(q + i * q_stride + d0) : _mm256_setzero_ps();
    transpose8(r);
    for (int c = 0; c < 8; ++c) _mm256_store_ps(qt + (d0 + c) * 8, r[c]);
  }
}

// The scores of n keys (f32 rows kf, D = 64 NC apart) for one group's 8 queries (qt), the first
// nv of them stored at out + key * ld: every r_l of every key into rs, then the tree per key.
template <int NC>
void qlane_keys8(const float* qt, const float* kf, int n, __m256 vscale, float* out, int64_t ld, int nv, float* rs) {
  constexpr int D = 64 * NC, S = 4 * NC;
  for (int l = 0; l < 8; ++l) {
    for (int j = 0; j < n; ++j) {
      const float* kj = kf + j * D + l;
      __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps();
#pragma GCC unroll 16
      for (int s = 0; s < S; ++s) {
        c0 = _mm256_fmadd_ps(_mm256_load_ps(qt + (l + 16 * s) * 8), _mm256_broadcast_ss(kj + 16 * s), c0);
        c1 = _mm256_fmadd_ps(_mm256_load_ps(qt + (l + 8 + 16 * s) * 8), _mm256_broadcast_ss(kj + 8 + 16 * s), c1);
      }
      _mm256_store_ps(rs + (j * 8 + l) * 8, _mm256_add_ps(c0, c1));
    }
  }
  for (int j = 0; j < n; ++j) {
    const float* r = rs + j * 8 * 8;
    auto at = [&](int l) { return _mm256_load_ps(r + l * 8); };
    const __m256 ab = _mm256_add_ps(_mm256_add_ps(at(0), at(4)), _mm256_add_ps(at(2), at(6)));
    const __m256 cd = _mm256_add_ps(_mm256_add_ps(at(1), at(5)), _mm256_add_ps(at(3), at(7)));
    const __m256 v = _mm256_mul_ps(_mm256_add_ps(ab, cd), vscale);
    if (nv == 8) {
      _mm256_storeu_ps(out + j * ld, v);
    } else {
      alignas(32) float t[8];
      _mm256_store_ps(t, v);
      for (int i = 0; i < nv; ++i) out[j * ld + i] = t[i];
    }
  }
}

// Fewer than 8 queries (decode, a GQA group's heads), head size 64 NC: 8 keys per horizontal
// sum instead of 8 queries. hsum8x8's lane i depends on its input i alone, so each score keeps
// attn_scores_chunks's chains (s0 over the even 8-element steps, s1 over the odd ones, from +0
// in order), s0 + s1, the tree and the scale, with 8 keys of one query in the lanes. Each 8-key
// block is converted once into kf for all the queries.
template <int NC>
void attn_scores_keys8(const float* q, int64_t q_stride, int nq, const uint8_t* k, size_t row_bytes, int n_keys,
                       float scale, float* scores, int64_t ld) {
  constexpr int D = 64 * NC, S = 8 * NC;
  alignas(32) float kf[8 * D];
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int j0 = 0; j0 < n_keys; j0 += 8) {
    const int nk = n_keys - j0 < 8 ? n_keys - j0 : 8;
    for (int kk = 0; kk < nk; ++kk) {
      const auto* kr = reinterpret_cast<const uint16_t*>(k + static_cast<size_t>(j0 + kk) * row_bytes);
#pragma GCC unroll 8
      for (int st = 0; st < S; ++st) _mm256_store_ps(kf + kk * D + 8 * st, LoadF16::load8(kr + 8 * st));
    }
    for (int i = 0; i < nq; ++i) {
      const float* qr = q + i * q_stride;
      __m256 red[8];
#pragma GCC unroll 8
      for (int kk = 0; kk < 8; ++kk) {
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        if (kk < nk) {
          const float* kj = kf + kk * D;
#pragma GCC unroll 16
          for (int st = 0; st < S; st += 2) {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 8 * st), _mm256_load_ps(kj + 8 * st), s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(qr + 8 * st + 8), _mm256_load_ps(kj + 8 * st + 8), s1);
          }
        }
        red[kk] = kk < nk ? _mm256_add_ps(s0, s1) : _mm256_setzero_ps();
      }
      const __m256 r = _mm256_mul_ps(hsum8x8(red), vscale);
      float* out = scores + static_cast<int64_t>(j0) * ld + i;
      if (ld == 1 && nk == 8) {
        _mm256_storeu_ps(out, r);
      } else {
        alignas(32) float t[8];
        _mm256_store_ps(t, r);
        for (int kk = 0; kk < nk; ++kk) out[kk * ld] = t[kk];
      }
    }
  }
}

}  // namespace

void attn_scores_f16_multi(const float* q, int64_t q_stride, int nq, const KvRun* runs, int n_runs, size_t row_bytes,
                           int64_t hd, float scale, float* scores, int64_t ld) {
  if (nq < 8 && hd % 64 == 0 && hd <= 256) {
    for (int r = 0; r < n_runs; ++r) {
      const uint8_t* k = runs[r].rows;
      const int n = runs[r].n;
      switch (hd / 64) {
        case 1: attn_scores_keys8<1>(q, q_stride, nq, k, row_bytes, n, scale, scores, ld); break;
        case 2: attn_scores_keys8<2>(q, q_stride, nq, k, row_bytes, n, scale, scores, ld); break;
        case 3: attn_scores_keys8<3>(q, q_stride, nq, k, row_bytes, n, scale, scores, ld); break;
        default: attn_scores_keys8<4>(q, q_stride, nq, k, row_bytes, n, scale, scores, ld); break;
      }
      scores += static_cast<int64_t>(n) * ld;
    }
    return;
  }
  if (nq >= 8 && hd % 64 == 0 && hd <= 256) {
    const __m256 vscale = _mm256_set1_ps(scale);
    auto lanes = [&](auto nc) {
      constexpr int D = 64 * decltype(nc)::value;
      scores_query_lanes<8, D>(
          q, q_stride, nq, runs, n_runs, row_bytes, scores, ld,
          [&](const float* qg, int n, float* qt) { transpose_queries8(qg, q_stride, n, D, qt); },
          [](const uint16_t* kr, float* kf) {
            for (int d = 0; d < D; d += 8) _mm256_store_ps(kf + d, LoadF16::load8(kr + d));
          },
          [&](const float* qt, const float* kf, int nk, float* out, int64_t ldo, int nv, float* rs) {
            qlane_keys8<decltype(nc)::value>(qt, kf, nk, vscale, out, ldo, nv, rs);
          });
    };
    switch (hd / 64) {
      case 1: lanes(std::integral_constant<int, 1>{}); return;
      case 2: lanes(std::integral_constant<int, 2>{}); return;
      case 3: lanes(std::integral_constant<int, 3>{}); return;
      default: lanes(std::integral_constant<int, 4>{}); return;
    }
  }
  for (int r = 0; r < n_runs; ++r) {
    scores_run(q, q_stride, nq, runs[r].rows, row_bytes, runs[r].n, hd, scale, scores, ld);
    scores += static_cast<int64_t>(runs[r].n) * ld;
  }
}

namespace {
// NQ queries x 16 dimensions of the accumulators in registers, keys in order.
template <int NQ>
void attn_accum_block(const float* p, int64_t ld, const uint8_t* v, size_t row_bytes, int n_keys, int64_t hd,
                      float* acc, int64_t acc_stride) {
  for (int64_t d0 = 0; d0 < hd; d0 += 16) {
    __m256 a0[NQ], a1[NQ];
    for (int i = 0; i < NQ; ++i) {
      a0[i] = _mm256_loadu_ps(acc + i * acc_stride + d0);
      a1[i] = _mm256_loadu_ps(acc + i * acc_stride + d0 + 8);
    }
    for (int j = 0; j < n_keys; ++j) {
      const auto* vr = reinterpret_cast<const uint16_t*>(v + static_cast<size_t>(j) * row_bytes) + d0;
      const __m256 x0 = LoadF16::load8(vr), x1 = LoadF16::load8(vr + 8);
      const float* pj = p + j * ld;
#pragma GCC unroll 6
      for (int i = 0; i < NQ; ++i) {
        const __m256 pb = _mm256_broadcast_ss(pj + i);
        a0[i] = _mm256_fmadd_ps(pb, x0, a0[i]);
        a1[i] = _mm256_fmadd_ps(pb, x1, a1[i]);
      }
    }
    for (int i = 0; i < NQ; ++i) {
      _mm256_storeu_ps(acc + i * acc_stride + d0, a0[i]);
      _mm256_storeu_ps(acc + i * acc_stride + d0 + 8, a1[i]);
    }
  }
}
}  // namespace

void attn_accum_f16_multi(const float* p, int64_t ld, int nq, const uint8_t* v, size_t row_bytes, int n_keys,
                          int64_t hd, float* acc, int64_t acc_stride) {
  if (hd % 16 != 0) {
    for (int i = 0; i < nq; ++i) {
      for (int j = 0; j < n_keys; ++j) {
        axpy_f16(p[j * ld + i], reinterpret_cast<const uint16_t*>(v + static_cast<size_t>(j) * row_bytes),
                 acc + i * acc_stride, hd);
      }
    }
    return;
  }
  for (int i0 = 0; i0 < nq; i0 += 6) {
    const float* pi = p + i0;
    float* ai = acc + i0 * acc_stride;
    switch (nq - i0 < 6 ? nq - i0 : 6) {
      case 1: attn_accum_block<1>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 2: attn_accum_block<2>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 3: attn_accum_block<3>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 4: attn_accum_block<4>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 5: attn_accum_block<5>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      default: attn_accum_block<6>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
    }
  }
}

// RoPE rotation of half pairs: the scalar formulas' fmas and products, 8 lanes at a time.
void rope_rotate(const float* x, float* y, const float* cs, const float* sn, int half, bool interleaved) {
  const __m256 neg = _mm256_set1_ps(-0.0f);
  int i = 0;
  if (interleaved) {
    // Lanes hold pairs (x0, x1); cos / sin of pair k are duplicated into both of its lanes.
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    for (; i + 4 <= half; i += 4) {
      const __m256 xv = _mm256_loadu_ps(x + 2 * i);
      const __m256 xs = _mm256_permute_ps(xv, _MM_SHUFFLE(2, 3, 0, 1));  // (x1, x0)
      const __m256 c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cs + i)), dup);
      const __m256 sv = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sn + i)), dup);
      const __m256 even = _mm256_fmadd_ps(xv, c, _mm256_xor_ps(_mm256_mul_ps(xs, sv), neg));  // x0 c - x1 s
      const __m256 odd = _mm256_fmadd_ps(xs, sv, _mm256_mul_ps(xv, c));                       // x0 s + x1 c
      _mm256_storeu_ps(y + 2 * i, _mm256_blend_ps(even, odd, 0xaa));
    }
    for (; i < half; ++i) {
      const float x0 = x[2 * i], x1 = x[2 * i + 1];
      y[2 * i] = std::fma(x0, cs[i], -(x1 * sn[i]));
      y[2 * i + 1] = std::fma(x0, sn[i], x1 * cs[i]);
    }
    return;
  }
  for (; i + 8 <= half; i += 8) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + half);
    const __m256 c = _mm256_loadu_ps(cs + i), sv = _mm256_loadu_ps(sn + i);
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(x0, c, _mm256_xor_ps(_mm256_mul_ps(x1, sv), neg)));
    _mm256_storeu_ps(y + i + half, _mm256_fmadd_ps(x0, sv, _mm256_mul_ps(x1, c)));
  }
  for (; i < half; ++i) {
    const float x0 = x[i], x1 = x[i + half];
    y[i] = std::fma(x0, cs[i], -(x1 * sn[i]));
    y[i + half] = std::fma(x0, sn[i], x1 * cs[i]);
  }
}

namespace {

// exp of 4 floats in double, rounded once to float (GenieX's exponential, core/exp.hpp).
// x = (64 m + j) ln2/64 + r with |r| <= ln2/128: exp(x) = 2^m * 2^(j/64) * exp(r), exp(r) by
// its Taylor polynomial of degree 6 (truncation below 2^-65 relative), so the double result is
// within a few ulps of the true value and rounds to the same float as the library's exp (same
// floats on every one of 3.2e8 inputs across [-105, 89] against glibc's).
inline __m128 exp4_f32_via_f64(__m128 x_in) {
  const __m256d inv = _mm256_set1_pd(0x1.71547652b82fep+6);  // 64 / ln2
  // ln2/64 as hi + lo, hi with 35 significant bits: k * hi is exact for |k| < 2^17
  // (|k| <= 700 * 92.4 here).
  const __m256d c_hi = _mm256_set1_pd(0x1.62e42fefc0000p-7);
  const __m256d c_lo = _mm256_set1_pd(-0x1.c610ca86c3899p-43);
  // Clamped into [-700, 700], where 2^m is a normal double and the float result of the
  // clamped value is still the true one (0 below -104, inf above 89, infinities included);
  // NaN lanes are passed through at the end.
  const __m128 xf = _mm_max_ps(_mm_min_ps(x_in, _mm_set1_ps(700.0f)), _mm_set1_ps(-700.0f));
  const __m256d xd = _mm256_cvtps_pd(xf);
  const __m256d k = _mm256_round_pd(_mm256_mul_pd(xd, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256d r = _mm256_fnmadd_pd(k, c_lo, _mm256_fnmadd_pd(k, c_hi, xd));
  __m256d poly = _mm256_set1_pd(1.0 / 720);
  poly = _mm256_fmadd_pd(poly, r, _mm256_set1_pd(1.0 / 120));
  poly = _mm256_fmadd_pd(poly, r, _mm256_set1_pd(1.0 / 24));
  poly = _mm256_fmadd_pd(poly, r, _mm256_set1_pd(1.0 / 6));
  poly = _mm256_fmadd_pd(poly, r, _mm256_set1_pd(0.5));
  poly = _mm256_fmadd_pd(poly, r, _mm256_set1_pd(1.0));
  poly = _mm256_fmadd_pd(poly, r, _mm256_set1_pd(1.0));
  const __m128i ki = _mm256_cvtpd_epi32(k);
  // The masked form with an explicit source (the plain one leaves GCC 12 warning that its
  // internal source register is uninitialized).
  const __m256d frac = _mm256_mask_i32gather_pd(_mm256_setzero_pd(), kExp2Frac64, _mm_and_si128(ki, _mm_set1_epi32(63)),
                                                _mm256_castsi256_pd(_mm256_set1_epi64x(-1)), 8);
  // 2^m (m = k >> 6, in [-1010, 1010]) into the exponent field.
  const __m256i bits =
      _mm256_slli_epi64(_mm256_cvtepi32_epi64(_mm_add_epi32(_mm_srai_epi32(ki, 6), _mm_set1_epi32(1023))), 52);
  const __m256d e = _mm256_mul_pd(_mm256_mul_pd(poly, frac), _mm256_castsi256_pd(bits));
  const __m128 nan = _mm_cmpunord_ps(x_in, x_in);
  return _mm_blendv_ps(_mm256_cvtpd_ps(e), _mm_add_ps(x_in, x_in), nan);
}

}  // namespace

void exp_f32_row(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  // Two independent vectors per step: the polynomial is a chain of dependent fmas.
  for (; i + 8 <= n; i += 8) {
    const __m128 a = exp4_f32_via_f64(_mm_loadu_ps(x + i));
    const __m128 b = exp4_f32_via_f64(_mm_loadu_ps(x + i + 4));
    _mm_storeu_ps(y + i, a);
    _mm_storeu_ps(y + i + 4, b);
  }
  if (i + 4 <= n) {
    _mm_storeu_ps(y + i, exp4_f32_via_f64(_mm_loadu_ps(x + i)));
    i += 4;
  }
  for (; i < n; ++i) y[i] = static_cast<float>(std::exp(static_cast<double>(x[i])));
}

namespace {
// exp_f32 of 8 floats: two 4-lane halves.
inline __m256 exp8_f32_avx2(__m256 x) {
  return _mm256_set_m128(exp4_f32_via_f64(_mm256_extractf128_ps(x, 1)), exp4_f32_via_f64(_mm256_castps256_ps128(x)));
}
}  // namespace

void attn_softmax_multi(float* s, int64_t ld, int nq, int32_t jlo, int n_keys, const int32_t* kv0,
                        const int32_t* n_kv) {
  softmax_multi(&exp8_f32_avx2, s, ld, nq, jlo, n_keys, kv0, n_kv);
}

}  // namespace geniex::cpu::avx2
