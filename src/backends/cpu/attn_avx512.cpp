// AVX-512 (F) attention helpers and exponential, chosen at run time where the CPU has AVX-512
// F + BW (kernels.cpp, attn_helpers). With the matrix products on AMX, attention and the
// exponential were over a third of a SmolLM2-size prefill on an Intel Xeon (Sapphire Rapids
// class), all of it in the AVX2 code.
//
// - exp: the AVX2 file's exp4_f32_via_f64, operation for operation per lane, on 8 doubles in one
//   zmm where AVX2 takes two 4-lane ymm halves (0.65 against 1.02 ns per element, one core).
// - scores: dot_f32_f16's two chains (s0 over the even 8-element steps, s1 over the odd ones)
//   are the low and high halves of one zmm chain over 16-element steps, so a key and query take
//   half the fmas; then s0 + s1 and the same eight-query horizontal sums (hsum8x8).
// - accumulation: axpy_f16's per-element fma chain in key order, 16 dimensions per zmm and 12
//   queries per block.
//
// Every IEEE operation here is the AVX2 one on the same inputs in the same order per lane, so
// the results are the AVX2 functions' bits (tests compare both).
#include <immintrin.h>

#include "backends/cpu/avx512_diagnostics.hpp"

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels_internal.hpp"

namespace geniex::cpu::avx512 {
namespace {

#include "backends/cpu/attn_x86.hpp"

// exp_f32 of 8 floats (core/exp.hpp), the steps of kernels_avx2.cpp's exp4_f32_via_f64 (see its
// comments for the range reduction, the clamp and the polynomial's error) on 8 lanes at once.
inline __m256 exp8_f32_via_f64(__m256 x_in) {
  const __m512d inv = _mm512_set1_pd(0x1.71547652b82fep+6);  // 64 / ln2
  const __m512d c_hi = _mm512_set1_pd(0x1.62e42fefc0000p-7);
  const __m512d c_lo = _mm512_set1_pd(-0x1.c610ca86c3899p-43);
  const __m256 xf = _mm256_max_ps(_mm256_min_ps(x_in, _mm256_set1_ps(700.0f)), _mm256_set1_ps(-700.0f));
  const __m512d xd = _mm512_cvtps_pd(xf);
  const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(xd, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512d r = _mm512_fnmadd_pd(k, c_lo, _mm512_fnmadd_pd(k, c_hi, xd));
  __m512d poly = _mm512_set1_pd(1.0 / 720);
  poly = _mm512_fmadd_pd(poly, r, _mm512_set1_pd(1.0 / 120));
  poly = _mm512_fmadd_pd(poly, r, _mm512_set1_pd(1.0 / 24));
  poly = _mm512_fmadd_pd(poly, r, _mm512_set1_pd(1.0 / 6));
  poly = _mm512_fmadd_pd(poly, r, _mm512_set1_pd(0.5));
  poly = _mm512_fmadd_pd(poly, r, _mm512_set1_pd(1.0));
  poly = _mm512_fmadd_pd(poly, r, _mm512_set1_pd(1.0));
  const __m256i ki = _mm512_cvtpd_epi32(k);
  const __m512d frac = _mm512_i32gather_pd(_mm256_and_si256(ki, _mm256_set1_epi32(63)), kExp2Frac64, 8);
  const __m512i bits =
      _mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm256_add_epi32(_mm256_srai_epi32(ki, 6), _mm256_set1_epi32(1023))), 52);
  const __m512d e = _mm512_mul_pd(_mm512_mul_pd(poly, frac), _mm512_castsi512_pd(bits));
  const __m256 nan = _mm256_cmp_ps(x_in, x_in, _CMP_UNORD_Q);
  return _mm256_blendv_ps(_mm512_cvtpd_ps(e), _mm256_add_ps(x_in, x_in), nan);
}

inline __m512 load16_f16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Scores of keys with NC full 64-dimension chunks (head size 64 * NC): one chunk of the key
// converted into 4 zmm, every query's chain over it; the chains of all queries wait in `part`
// between chunks (NC > 1).
template <int NC>
void scores_chunks(const float* q, int64_t q_stride, int nq, const uint8_t* k, size_t row_bytes, int n_keys,
                   float scale, float* scores, int64_t ld, __m512* part) {
  alignas(32) __m256 red[8];
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int j = 0; j < n_keys; ++j) {
    const auto* kr = reinterpret_cast<const uint16_t*>(k + static_cast<size_t>(j) * row_bytes);
    float* srow = scores + j * ld;
    for (int c = 0; c < NC; ++c) {
      __m512 kv[4];
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) kv[s] = load16_f16(kr + 64 * c + 16 * s);
      for (int i0 = 0; i0 < nq; i0 += 8) {
        const int ni = nq - i0 < 8 ? nq - i0 : 8;
        for (int ii = 0; ii < ni; ++ii) {
          const float* qr = q + (i0 + ii) * q_stride + 64 * c;
          __m512 sv = c == 0 ? _mm512_setzero_ps() : part[i0 + ii];
          sv = _mm512_fmadd_ps(_mm512_loadu_ps(qr), kv[0], sv);
          sv = _mm512_fmadd_ps(_mm512_loadu_ps(qr + 16), kv[1], sv);
          sv = _mm512_fmadd_ps(_mm512_loadu_ps(qr + 32), kv[2], sv);
          sv = _mm512_fmadd_ps(_mm512_loadu_ps(qr + 48), kv[3], sv);
          if (c == NC - 1) {
            red[ii] = _mm256_add_ps(_mm512_castps512_ps256(sv),
                                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sv), 1)));
          } else {
            part[i0 + ii] = sv;
          }
        }
        if (c == NC - 1) store_scores8(red, ni, vscale, srow + i0);
      }
    }
  }
}

// NQ queries x 16 dimensions of the accumulators in registers, keys in order.
template <int NQ>
void accum_block(const float* p, int64_t ld, const uint8_t* v, size_t row_bytes, int n_keys, int64_t hd, float* acc,
                 int64_t acc_stride) {
  for (int64_t d0 = 0; d0 < hd; d0 += 16) {
    __m512 a[NQ];
    for (int i = 0; i < NQ; ++i) a[i] = _mm512_loadu_ps(acc + i * acc_stride + d0);
    for (int j = 0; j < n_keys; ++j) {
      const __m512 x = load16_f16(reinterpret_cast<const uint16_t*>(v + static_cast<size_t>(j) * row_bytes) + d0);
      const float* pj = p + j * ld;
#pragma GCC unroll 12
      for (int i = 0; i < NQ; ++i) a[i] = _mm512_fmadd_ps(_mm512_set1_ps(pj[i]), x, a[i]);
    }
    for (int i = 0; i < NQ; ++i) _mm512_storeu_ps(acc + i * acc_stride + d0, a[i]);
  }
}

}  // namespace

void attn_scores_f16_multi(const float* q, int64_t q_stride, int nq, const uint8_t* k, size_t row_bytes,
                           int n_keys, int64_t hd, float scale, float* scores, int64_t ld) {
  alignas(64) __m512 part[kMaxScorePass];
  scores_by_head_size(
      hd, q, q_stride, nq, scores,
      [&](auto nc, const float* qi, int ni, float* si) {
        scores_chunks<decltype(nc)::value>(qi, q_stride, ni, k, row_bytes, n_keys, scale, si, ld, part);
      },
      [&] { avx2::attn_scores_f16_multi(q, q_stride, nq, k, row_bytes, n_keys, hd, scale, scores, ld); });
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
  // Two independent vectors per step: the polynomial is a chain of dependent fmas.
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
  softmax_multi(&exp8_f32_via_f64, s, ld, nq, jlo, n_keys, kv0, n_kv);
}

}  // namespace geniex::cpu::avx512
