// AVX-512 (F) attention helpers and exponential, chosen at run time where the CPU has AVX-512
// F + BW (kernels.cpp, attn_helpers). With the matrix products on AMX, attention and the
// exponential were over a third of a SmolLM2-size prefill on an Intel Xeon (Sapphire Rapids
// class), all of it in the AVX2 code.
//
// - exp: exp in double rounded once, as the AVX2 file's exp4_f32_via_f64, on 8 doubles in one zmm,
//   without its gather (a 16-entry table in two registers, vpermi2pd, vscalefpd); the same float
//   on every input (checked on all 2^32).
// - scores: dot_f32_f16's two chains (s0 over the even 8-element steps, s1 over the odd ones)
//   are the low and high halves of one zmm chain over 16-element steps, so a key and query take
//   half the fmas; then s0 + s1 and the same eight-query horizontal sums (hsum8x8).
// - accumulation: axpy_f16's per-element fma chain in key order, 16 dimensions per zmm and 12
//   queries per block.
//
// The scores and the accumulation do the AVX2 functions' IEEE operations on the same inputs in
// the same order per lane, and the exponential gives the same floats, so the results are the
// AVX2 functions' bits (tests compare both).
#include <immintrin.h>

#include "backends/cpu/avx512_diagnostics.hpp"

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/exp_table.hpp"
#include "backends/cpu/kernels_internal.hpp"

namespace geniex::cpu::avx512 {
namespace {

#include "backends/cpu/attn_x86.hpp"

// 2^(j/16), j = 0..15: every fourth entry of the 64-entry table, two zmm for vpermi2pd.
alignas(64) constexpr double kExp2Frac16[16] = {
    kExp2Frac64[0],  kExp2Frac64[4],  kExp2Frac64[8],  kExp2Frac64[12], kExp2Frac64[16], kExp2Frac64[20],
    kExp2Frac64[24], kExp2Frac64[28], kExp2Frac64[32], kExp2Frac64[36], kExp2Frac64[40], kExp2Frac64[44],
    kExp2Frac64[48], kExp2Frac64[52], kExp2Frac64[56], kExp2Frac64[60]};

// exp_f32 of 8 floats (core/exp.hpp: exp in double, rounded once), without a gather: x = (16 m +
// j) ln2/16 + r with k = 16 m + j the nearest integer to x 16/ln2 (rounded by adding 1.5 * 2^52,
// whose low mantissa bits are then k, so j = k mod 16 indexes a two-register table by
// vpermi2pd), ln2/16 as hi + lo with hi of 35 significant bits (k hi exact for |k| < 2^17; |k|
// <= 700 * 23.1 here), |r| <= ln2/32 + tiny; exp(r) - 1 by its Taylor polynomial of degree 7
// (truncation below 2^-59 relative), then 2^(j/16) + 2^(j/16) (exp(r) - 1) in one fma and
// vscalefpd by m. Clamped into [-700, 700] as in the AVX2 exp (2^m a normal double; the float
// results of the clamped values are the true ones, infinities included); NaN lanes passed
// through at the end. Checked on every one of the 2^32 float inputs (see
// CpuHelpers.DISABLED_ExpRowMatchesDoubleExpOnEveryFloat): the float of glibc's double exp
// (and so the AVX2 exp's bits) on every non-NaN input, NaN for NaN. 1.4x the rate of the
// 64-entry table's gather.
inline __m256 exp8_f32_via_f64(__m256 x_in) {
  const __m512d inv = _mm512_set1_pd(0x1.71547652b82fep+4);  // 16 / ln2
  const __m512d c_hi = _mm512_set1_pd(0x1.62e42fefc0000p-5);
  const __m512d c_lo = _mm512_set1_pd(-0x1.c610ca86c3899p-41);
  const __m512d magic = _mm512_set1_pd(0x1.8p52);
  const __m256 xf = _mm256_max_ps(_mm256_min_ps(x_in, _mm256_set1_ps(700.0f)), _mm256_set1_ps(-700.0f));
  const __m512d xd = _mm512_cvtps_pd(xf);
  const __m512d kd = _mm512_add_pd(_mm512_mul_pd(xd, inv), magic);  // round to nearest even, as roundscale
  const __m512d k = _mm512_sub_pd(kd, magic);
  const __m512d r = _mm512_fnmadd_pd(k, c_lo, _mm512_fnmadd_pd(k, c_hi, xd));
  __m512d p = _mm512_set1_pd(1.0 / 5040);
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 720));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 120));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 24));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 6));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(0.5));
  p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0));
  p = _mm512_mul_pd(p, r);  // exp(r) - 1
  const __m512d frac =
      _mm512_permutex2var_pd(_mm512_load_pd(kExp2Frac16), _mm512_castpd_si512(kd), _mm512_load_pd(kExp2Frac16 + 8));
  const __m512d e = _mm512_scalef_pd(_mm512_fmadd_pd(frac, p, frac), _mm512_mul_pd(k, _mm512_set1_pd(1.0 / 16)));
  const __m256 nan = _mm256_cmp_ps(x_in, x_in, _CMP_UNORD_Q);
  return _mm256_blendv_ps(_mm512_cvtpd_ps(e), _mm256_add_ps(x_in, x_in), nan);
}

inline __m512 load16_f16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Fewer than 8 queries (decode, a GQA group's heads): 8 keys per horizontal sum instead of 8
// queries. hsum8x8's lane i is a function of its input i alone, so each score is still the chain
// of the AVX2 attn_scores_chunks (dimensions in order from +0, 4 fmas per 64-dimension chunk, the
// two halves, the tree, the scale), now with 8 keys of one query in the lanes. Each 8-key block is
// converted once into kf for all the queries; the query stays in registers.
template <int NC>
void scores_keys8(const float* q, int64_t q_stride, int nq, const uint8_t* k, size_t row_bytes, int n_keys,
                  float scale, float* scores, int64_t ld) {
  constexpr int D = 64 * NC, S = 4 * NC;
  alignas(64) float kf[8 * D];
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int j0 = 0; j0 < n_keys; j0 += 8) {
    const int nk = n_keys - j0 < 8 ? n_keys - j0 : 8;
    for (int kk = 0; kk < nk; ++kk) {
      const auto* kr = reinterpret_cast<const uint16_t*>(k + static_cast<size_t>(j0 + kk) * row_bytes);
#pragma GCC unroll 16
      for (int s = 0; s < S; ++s) _mm512_store_ps(kf + kk * D + 16 * s, load16_f16(kr + 16 * s));
    }
    for (int i = 0; i < nq; ++i) {
      const float* qr = q + i * q_stride;
      __m512 qv[S];
#pragma GCC unroll 16
      for (int s = 0; s < S; ++s) qv[s] = _mm512_loadu_ps(qr + 16 * s);
      __m256 red[8];
#pragma GCC unroll 8
      for (int kk = 0; kk < 8; ++kk) {
        __m512 sv = _mm512_setzero_ps();
        if (kk < nk) {
#pragma GCC unroll 16
          for (int s = 0; s < S; ++s) sv = _mm512_fmadd_ps(qv[s], _mm512_load_ps(kf + kk * D + 16 * s), sv);
        }
        red[kk] = kk < nk ? _mm256_add_ps(_mm512_castps512_ps256(sv),
                                          _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sv), 1)))
                          : _mm256_setzero_ps();
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

// Queries as lanes (batches of 8 or more queries): 16 queries per zmm, so each fma serves 16
// scores and no horizontal sums are needed. A score's arithmetic is still the AVX2
// attn_scores_chunks's: lane l of its 16-lane chain (dimensions l, l + 16, ..., in order, from +0) is here a chain of its
// own, c_l, over zmm of 16 queries' dimension d against key dimension d broadcast; then
// r_l = c_l + c_(l+8) (the two halves), ((r0 + r4) + (r2 + r6)) + ((r1 + r5) + (r3 + r7))
// (hsum8x8's order) and the scale, each an IEEE operation on the same operands.

// 16 x 16 floats transposed in registers: r[i] lane c becomes r[c] lane i.
inline void transpose16(__m512* r) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  auto lo = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  auto hi = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  for (int i = 0; i < 4; ++i) {  // r[4i + c], 128-bit lane L: column 4L + c of rows 4i..4i+3
    r[4 * i] = lo(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = hi(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = lo(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = hi(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xdd);
    t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
    r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
    r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xdd);
  }
}

// qt[d * 16 + i] = q[i][d] for the (at most 16) queries of a group, zeros past nq.
inline void transpose_queries(const float* q, int64_t q_stride, int nq, int64_t hd, float* qt) {
  for (int64_t d0 = 0; d0 < hd; d0 += 16) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) r[i] = i < nq ? _mm512_loadu_ps(q + i * q_stride + d0) : _mm512_setzero_ps();
    transpose16(r);
    for (int c = 0; c < 16; ++c) _mm512_store_ps(qt + (d0 + c) * 16, r[c]);
  }
}

// acc + a * (*p broadcast), with the broadcast as the fma's memory operand. Written as one
// instruction: with _mm512_set1_ps GCC hoists every broadcast of an unrolled block into its own
// register and spills them to the stack.
inline __m512 fmadd_bcast(__m512 a, const float* p, __m512 acc) {
  asm("vfmadd231ps %[p]%{1to16%}, %[a], %[acc]" : [acc] "+v"(acc) : [a] "v"(a), [p] "m"(*p));
  return acc;
}

// The scores of n keys (f32 rows kf, D = 64 NC apart) for one group's 16 queries (qt), stored
// under mask m at out + key * ld. First every r_l of every key, into rs (the pair's 2 x 4 NC
// query vectors loaded once for all keys), then the tree per key.
template <int NC>
inline void qlane_keys(const float* qt, const float* kf, int n, __m512 vscale, float* out, int64_t ld, __mmask16 m,
                       float* rs) {
  constexpr int D = 64 * NC, S = 4 * NC;
  for (int l = 0; l < 8; ++l) {
    __m512 qa[S], qb[S];
#pragma GCC unroll 16
    for (int s = 0; s < S; ++s) {
      qa[s] = _mm512_load_ps(qt + (l + 16 * s) * 16);
      qb[s] = _mm512_load_ps(qt + (l + 8 + 16 * s) * 16);
    }
    int j = 0;
    for (; j + 2 <= n; j += 2) {
      const float* kj = kf + j * D + l;
      __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps(), c2 = _mm512_setzero_ps(), c3 = _mm512_setzero_ps();
#pragma GCC unroll 16
      for (int s = 0; s < S; ++s) {
        c0 = fmadd_bcast(qa[s], kj + 16 * s, c0);
        c1 = fmadd_bcast(qb[s], kj + 8 + 16 * s, c1);
        c2 = fmadd_bcast(qa[s], kj + D + 16 * s, c2);
        c3 = fmadd_bcast(qb[s], kj + D + 8 + 16 * s, c3);
      }
      _mm512_store_ps(rs + (j * 8 + l) * 16, _mm512_add_ps(c0, c1));
      _mm512_store_ps(rs + ((j + 1) * 8 + l) * 16, _mm512_add_ps(c2, c3));
    }
    for (; j < n; ++j) {
      const float* kj = kf + j * D + l;
      __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
#pragma GCC unroll 16
      for (int s = 0; s < S; ++s) {
        c0 = fmadd_bcast(qa[s], kj + 16 * s, c0);
        c1 = fmadd_bcast(qb[s], kj + 8 + 16 * s, c1);
      }
      _mm512_store_ps(rs + (j * 8 + l) * 16, _mm512_add_ps(c0, c1));
    }
  }
  for (int j = 0; j < n; ++j) {
    const float* r = rs + j * 8 * 16;
    auto at = [&](int l) { return _mm512_load_ps(r + l * 16); };
    const __m512 ab = _mm512_add_ps(_mm512_add_ps(at(0), at(4)), _mm512_add_ps(at(2), at(6)));
    const __m512 cd = _mm512_add_ps(_mm512_add_ps(at(1), at(5)), _mm512_add_ps(at(3), at(7)));
    _mm512_mask_storeu_ps(out + j * ld, m, _mm512_mul_ps(_mm512_add_ps(ab, cd), vscale));
  }
}

// NQ queries x 16 dimensions of the accumulators in registers, keys in order.
// G zmm of dimensions per pass (G > 1 for few queries, as in decode: each element's chain is
// one fma per key, so NQ x G independent chains hide the fma latency where NQ alone could not).
template <int NQ, int G = 1>
void accum_block(const float* p, int64_t ld, const uint8_t* v, size_t row_bytes, int n_keys, int64_t hd, float* acc,
                 int64_t acc_stride) {
  for (int64_t d0 = 0; d0 < hd; d0 += 16 * G) {
    __m512 a[NQ][G];
    for (int i = 0; i < NQ; ++i) {
      for (int c = 0; c < G; ++c) a[i][c] = _mm512_loadu_ps(acc + i * acc_stride + d0 + 16 * c);
    }
    for (int j = 0; j < n_keys; ++j) {
      const auto* vr = reinterpret_cast<const uint16_t*>(v + static_cast<size_t>(j) * row_bytes) + d0;
      __m512 x[G];
#pragma GCC unroll 4
      for (int c = 0; c < G; ++c) x[c] = load16_f16(vr + 16 * c);
      const float* pj = p + j * ld;
#pragma GCC unroll 12
      for (int i = 0; i < NQ; ++i) {
        const __m512 b = _mm512_set1_ps(pj[i]);
#pragma GCC unroll 4
        for (int c = 0; c < G; ++c) a[i][c] = _mm512_fmadd_ps(b, x[c], a[i][c]);
      }
    }
    for (int i = 0; i < NQ; ++i) {
      for (int c = 0; c < G; ++c) _mm512_storeu_ps(acc + i * acc_stride + d0 + 16 * c, a[i][c]);
    }
  }
}

// softmax_group8 (attn_x86.hpp) for 16 queries per zmm: the same operations per query in the
// same order (the max, the exponential of each half, the sums in double of each half in key
// order, 1 / sum, prob_f16's zeroing of exponentials at or below 2^-25, the product and the f16
// rounding), with the lanes' key ranges as mask registers.
inline __m512 join8(__m256 a, __m256 b) {  // a in lanes 0-7, b in 8-15 (AVX-512 F)
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(a)), _mm256_castps_pd(b), 1));
}
void softmax_group16(float* s, int64_t ld, int32_t jlo, int n_keys, const int32_t* kv0, const int32_t* n_kv) {
  const __m512i lo = _mm512_loadu_si512(kv0);
  const __m512i hi = _mm512_loadu_si512(n_kv);
  auto has = [&](int32_t j) {  // lanes whose query has key j
    const __m512i jv = _mm512_set1_epi32(j);
    return static_cast<__mmask16>(_mm512_cmple_epi32_mask(lo, jv) & _mm512_cmpgt_epi32_mask(hi, jv));
  };
  int c0 = 0, c1 = n_keys;  // keys [c0, c1) are every lane's
  for (int i = 0; i < 16; ++i) {
    c0 = kv0[i] - jlo > c0 ? kv0[i] - jlo : c0;
    c1 = n_kv[i] - jlo < c1 ? n_kv[i] - jlo : c1;
  }
  if (c1 < c0) c1 = c0;
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int j = 0; j < n_keys; ++j) {
    const __m512 mx = _mm512_max_ps(_mm512_loadu_ps(s + j * ld), m);  // r > m ? r : m
    m = j >= c0 && j < c1 ? mx : _mm512_mask_mov_ps(m, has(jlo + j), mx);
  }
  __m512d sum0 = _mm512_setzero_pd(), sum1 = _mm512_setzero_pd();
  auto key = [&](int j, __m512 e) {
    _mm512_storeu_ps(s + j * ld, e);
    const __m512 em = j >= c0 && j < c1 ? e : _mm512_maskz_mov_ps(has(jlo + j), e);
    sum0 = _mm512_add_pd(sum0, _mm512_cvtps_pd(_mm512_castps512_ps256(em)));
    sum1 = _mm512_add_pd(sum1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(em), 1))));
  };
  auto exp16 = [&](int j) {
    const __m512 x = _mm512_sub_ps(_mm512_loadu_ps(s + j * ld), m);
    const __m256 e0 = exp8_f32_via_f64(_mm512_castps512_ps256(x));
    const __m256 e1 = exp8_f32_via_f64(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    return join8(e0, e1);
  };
  int j = 0;
  for (; j + 2 <= n_keys; j += 2) {  // two keys' exponentials side by side, summed in key order
    const __m512 e0 = exp16(j), e1 = exp16(j + 1);
    key(j, e0);
    key(j + 1, e1);
  }
  if (j < n_keys) key(j, exp16(j));
  const __m512d one = _mm512_set1_pd(1.0);
  const __m512 inv = join8(_mm512_cvtpd_ps(_mm512_div_pd(one, sum0)), _mm512_cvtpd_ps(_mm512_div_pd(one, sum1)));
  const __m512i tiny = _mm512_set1_epi32(0x33000000);  // 2^-25; unsigned, so NaN of either sign is kept
  for (j = 0; j < n_keys; ++j) {
    float* row = s + j * ld;
    const __m512 e = _mm512_loadu_ps(row);
    const __m512 p = _mm512_maskz_mul_ps(_mm512_cmpgt_epu32_mask(_mm512_castps_si512(e), tiny), e, inv);
    _mm512_storeu_ps(row, _mm512_cvtph_ps(_mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT)));
  }
}

}  // namespace

void attn_scores_f16_multi(const float* q, int64_t q_stride, int nq, const KvRun* runs, int n_runs, size_t row_bytes,
                           int64_t hd, float scale, float* scores, int64_t ld) {
  if (hd % 64 != 0 || hd > 256) {
    avx2::attn_scores_f16_multi(q, q_stride, nq, runs, n_runs, row_bytes, hd, scale, scores, ld);
    return;
  }
  if (nq >= 8) {
    const __m512 vscale = _mm512_set1_ps(scale);
    auto lanes = [&](auto nc) {
      constexpr int D = 64 * decltype(nc)::value;
      scores_query_lanes<16, D>(
          q, q_stride, nq, runs, n_runs, row_bytes, scores, ld,
          [&](const float* qg, int n, float* qt) { transpose_queries(qg, q_stride, n, D, qt); },
          [](const uint16_t* kr, float* kf) {
            for (int d = 0; d < D; d += 16) _mm512_store_ps(kf + d, load16_f16(kr + d));
          },
          [&](const float* qt, const float* kf, int nk, float* out, int64_t ldo, int nv, float* rs) {
            qlane_keys<decltype(nc)::value>(qt, kf, nk, vscale, out, ldo, static_cast<__mmask16>((1u << nv) - 1), rs);
          });
    };
    switch (hd / 64) {
      case 1: lanes(std::integral_constant<int, 1>{}); return;
      case 2: lanes(std::integral_constant<int, 2>{}); return;
      case 3: lanes(std::integral_constant<int, 3>{}); return;
      default: lanes(std::integral_constant<int, 4>{}); return;
    }
  }
  // Fewer queries (decode): 8 keys at a time, each query's chains over them.
  for (int r = 0; r < n_runs; ++r) {
    const uint8_t* k = runs[r].rows;
    const int n_keys = runs[r].n;
    switch (hd / 64) {
      case 1: scores_keys8<1>(q, q_stride, nq, k, row_bytes, n_keys, scale, scores, ld); break;
      case 2: scores_keys8<2>(q, q_stride, nq, k, row_bytes, n_keys, scale, scores, ld); break;
      case 3: scores_keys8<3>(q, q_stride, nq, k, row_bytes, n_keys, scale, scores, ld); break;
      default: scores_keys8<4>(q, q_stride, nq, k, row_bytes, n_keys, scale, scores, ld); break;
    }
    scores += static_cast<int64_t>(n_keys) * ld;
  }
}

void attn_accum_f16_multi(const float* p, int64_t ld, int nq, const uint8_t* v, size_t row_bytes, int n_keys,
                          int64_t hd, float* acc, int64_t acc_stride) {
  if (hd % 16 != 0) {
    avx2::attn_accum_f16_multi(p, ld, nq, v, row_bytes, n_keys, hd, acc, acc_stride);
    return;
  }
  for (int i0 = 0; i0 < nq; i0 += 12) {
    const float* pi = p + i0;
    float* ai = acc + i0 * acc_stride;
    const int n = nq - i0 < 12 ? nq - i0 : 12;
    if (n <= 3 && hd % 64 == 0) {  // decode: 4 zmm of dimensions per pass
      switch (n) {
        case 1: accum_block<1, 4>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
        case 2: accum_block<2, 4>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
        default: accum_block<3, 4>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      }
      continue;
    }
    if (n <= 6 && hd % 32 == 0) {
      switch (n) {
        case 1: accum_block<1, 2>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
        case 2: accum_block<2, 2>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
        case 3: accum_block<3, 2>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
        case 4: accum_block<4, 2>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
        case 5: accum_block<5, 2>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
        default: accum_block<6, 2>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      }
      continue;
    }
    switch (n) {
      case 1: accum_block<1>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 2: accum_block<2>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 3: accum_block<3>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 4: accum_block<4>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 5: accum_block<5>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 6: accum_block<6>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 7: accum_block<7>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 8: accum_block<8>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 9: accum_block<9>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 10: accum_block<10>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      case 11: accum_block<11>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
      default: accum_block<12>(pi, ld, v, row_bytes, n_keys, hd, ai, acc_stride); break;
    }
  }
}

void exp_f32_row(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  // Four independent vectors per step: the polynomial is a chain of dependent fmas.
  for (; i + 32 <= n; i += 32) {
    const __m256 a = exp8_f32_via_f64(_mm256_loadu_ps(x + i));
    const __m256 b = exp8_f32_via_f64(_mm256_loadu_ps(x + i + 8));
    const __m256 c = exp8_f32_via_f64(_mm256_loadu_ps(x + i + 16));
    const __m256 d = exp8_f32_via_f64(_mm256_loadu_ps(x + i + 24));
    _mm256_storeu_ps(y + i, a);
    _mm256_storeu_ps(y + i + 8, b);
    _mm256_storeu_ps(y + i + 16, c);
    _mm256_storeu_ps(y + i + 24, d);
  }
  for (; i + 16 <= n; i += 16) {
    const __m256 a = exp8_f32_via_f64(_mm256_loadu_ps(x + i));
    const __m256 b = exp8_f32_via_f64(_mm256_loadu_ps(x + i + 8));
    _mm256_storeu_ps(y + i, a);
    _mm256_storeu_ps(y + i + 8, b);
  }
  if (i + 8 <= n) {
    _mm256_storeu_ps(y + i, exp8_f32_via_f64(_mm256_loadu_ps(x + i)));
    i += 8;
  }
  if (i < n) {
    // The last 1-7 through the same vector exp, padded with zeros.
    float t[8] = {};
    const auto rest = static_cast<size_t>(n - i);
    std::memcpy(t, x + i, rest * sizeof(float));
    _mm256_storeu_ps(t, exp8_f32_via_f64(_mm256_loadu_ps(t)));
    std::memcpy(y + i, t, rest * sizeof(float));
  }
}

void attn_softmax_multi(float* s, int64_t ld, int nq, int32_t jlo, int n_keys, const int32_t* kv0,
                        const int32_t* n_kv) {
  int i0 = 0;
  for (; i0 + 16 <= nq; i0 += 16) softmax_group16(s + i0, ld, jlo, n_keys, kv0 + i0, n_kv + i0);
  softmax_multi(&exp8_f32_via_f64, s + i0, ld, nq - i0, jlo, n_keys, kv0 + i0, n_kv + i0);
}

}  // namespace geniex::cpu::avx512
