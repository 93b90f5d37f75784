// 16-row AVX-512 VNNI tiles over the packed Q4_Kx8, Q5_Kx8 and Q6_Kx8 layouts (packed_k.cpp): two
// consecutive 8-row groups side by side in one zmm (rows 0-7 of the pair in i32 lanes 0-7, rows
// 8-15 in lanes 8-15), so each vpdpbusd, each decode step and each float operation serves 16 rows
// where the 8-row tiles of packed_k_tiles_avx2.hpp serve 8.
//
// Same bits as those tiles: per row, super-block and column the same exact i32 sums (each
// sub-block's dpbusd sum times its scale, the min term of scale pairs against the activation's
// sub-block sums), then the same float operations in the same order (d_w * d_a times the sum,
// minus dmin_w * d_a times the min sum, per super-block). A last odd group of 8 rows runs the
// 8-row kernels of the layout (AVX-VNNI's or AVX2's, the same bits).
//
// Compiled with AVX-512 F/BW/VL/VNNI and only called where cpu_features() reports them.
#include <immintrin.h>

#include "backends/cpu/avx512_diagnostics.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels_internal.hpp"
#include "backends/cpu/packed.hpp"
#include "core/cpu_features.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu::avx512vnni {
namespace {

constexpr size_t kActBytes = sizeof(quant::BlockQ8_K);  // f32 d, 256 qs, 16 bsums
constexpr size_t kActQs = 4;
constexpr size_t kActBsums = 4 + 256;
constexpr size_t kQ4KBlock = 1152;  // group block: 8 rows x one super-block
constexpr size_t kQ5KBlock = 1408;  // Q4_Kx8 plus 8 chunks of qh
constexpr size_t kQ6KBlock = 1680;  // d, 4 scale chunks, 32 ql chunks, 16 qh chunks
// Q4_K's tile takes 6 columns per weight load (its registers fit: no column's min sum is live
// through the main loop): 6-7% more GOP/s than 4 on a Zen 4 (bench/LOG.md, twenty-sixth
// session).
constexpr int kQ4KCols = 6;
// Q5_K's and Q6_K's take 6 too, with their f32 running sums kept in `out` (one load and store
// per super-block and column) and their qh chunks loaded where each sub-block uses them: with
// those in registers they spilled (Q5_K had measured no gain at 6 that way). On a Zen 4, 8-10%
// (Q5_K) and 4-6% (Q6_K) more GOP/s than 4 (bench/LOG.md, twenty-eighth session).
constexpr int kQ5KCols = 6;
constexpr int kQ6KCols = 6;

// How far ahead the one-column 16-row tiles prefetch each of their two streams, in bytes. On an
// Intel Xeon (AMX) VM, 65536 x 2048 from DRAM, one thread, three rounds, GB/s with none / 0 /
// 512: Q5_K 8.2-9.1 / 10.1-11.7 / 12.5-12.7, Q4_K 10.5-15.7 / 13.8-18.3 / 16.2-16.4; two threads
// Q5_K 26.5-29.2 / 27.0-34.5 / 30.2-33.3, Q4_K even (bench/LOG.md, thirty-first session). Q6_K's
// takes the same: 1B Q4_K_M tg64 (its Q6_K matrices, the tied output among them, are 41% of the
// bytes) alternating, 4 rounds, 32.1-33.0 t/s at 512 and 32.5-33.1 at 1024, against 30.9-31.4
// through the 8-row tiles before (bench/LOG.md, thirty-third session).
constexpr size_t kPairPrefetchBytes = 512;

// Per activation column and super-block: bsums[2j] + bsums[2j+1] as i16, j = 0..7. This file's
// own type, so its std::vector is an internal-linkage instantiation.
struct SubSums16 {
  int16_t v[8];
};

#include "backends/cpu/zmm_pairs.hpp"

inline float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}


template <int C, bool kFifth>
void q4_k_tile16(int64_t nb, const uint8_t* g0, const uint8_t* g1, const uint8_t* a, size_t as,
                 const SubSums16* ss, int64_t ss_stride, float* out, int64_t os) {
  constexpr size_t kBlock = kFifth ? kQ5KBlock : kQ4KBlock;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i m3f = _mm512_set1_epi8(0x3f);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  [[maybe_unused]] const __m512i m10 = _mm512_set1_epi8(0x10);
  const __m512i zero = _mm512_setzero_si512();
  // Q5_K with more than 4 columns keeps its f32 running sums in `out`, their registers going to
  // the fifth bits' decode.
  constexpr bool kAccInOut = kFifth && C > 4;
  __m512 acc[kAccInOut ? 1 : C];
  if constexpr (!kAccInOut) {
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* b0 = g0 + static_cast<size_t>(b) * kBlock;
    const uint8_t* b1 = g1 + static_cast<size_t>(b) * kBlock;
    if constexpr (C == 1) {
      // Decode (DecodeRows::kRows16) streams two groups: kPairPrefetchBytes ahead on each.
      for (size_t o = 0; o < kBlock; o += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(b0 + kPairPrefetchBytes + o), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b1 + kPairPrefetchBytes + o), _MM_HINT_T0);
      }
    }
    const uint8_t* ab = a + static_cast<size_t>(b) * kActBytes;
    const __m512i p0 = pair_chunk(b0, b1, 32), p1 = pair_chunk(b0, b1, 64), p2 = pair_chunk(b0, b1, 96);
    const __m512i sc_lo = _mm512_and_si512(p0, m3f);
    const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(p2, low4), _mm512_and_si512(_mm512_srli_epi16(p0, 2), m30));
    __m512i isum[C];
    const uint8_t* q0 = b0 + 128;
    const uint8_t* q1 = b1 + 128;
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m512i sc = _mm512_shuffle_epi8(j < 4 ? sc_lo : sc_hi, u8_i32(j % 4));
      __m512i s32[C];
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        const size_t off = static_cast<size_t>((j / 2) * 8 + s) * 32;
        const __m512i raw = pair_chunk(q0, q1, off);
        __m512i w = (j & 1) ? _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4) : _mm512_and_si512(raw, low4);
        if constexpr (kFifth) {
          // The block pointers through an empty asm: each qh chunk is loaded for the sub-block
          // that uses it, not kept in a register (spilled) across all eight.
          const uint8_t* r0 = b0;
          const uint8_t* r1 = b1;
          __asm__("" : "+r"(r0), "+r"(r1));
          // Bit j of each qh byte to bit 4 (16-bit shifts: what crosses a byte lands outside bit 4).
          const __m512i hb = pair_chunk(r0, r1, 1152 + static_cast<size_t>(s) * 32);
          const __m512i h = j <= 4 ? _mm512_slli_epi16(hb, static_cast<unsigned>(4 - j))
                                   : _mm512_srli_epi16(hb, static_cast<unsigned>(j - 4));
          w = _mm512_or_si512(w, _mm512_and_si512(h, m10));
        }
#pragma GCC unroll 6
        for (int c = 0; c < C; ++c) {
          s32[c] = _mm512_dpbusd_epi32(s == 0 ? zero : s32[c], w, bcast4(ab + c * as + kActQs + 32 * j + 4 * s));
          keep(s32[c]);
        }
      }
#pragma GCC unroll 6
      for (int c = 0; c < C; ++c) {
        const __m512i t = _mm512_mullo_epi32(s32[c], sc);
        isum[c] = j == 0 ? t : _mm512_add_epi32(isum[c], t);
        keep(isum[c]);
      }
    }
    // Min term: sum_j min_j * (bsums[2j] + bsums[2j+1]), two sub-blocks per vpdpwssd, one
    // column at a time after the sub-block sums (integers, exact in any order), so no column's
    // min sum is live through the main loop: with 6 columns the tile's registers fit in 32.
    const __m512i mn_lo = _mm512_and_si512(p1, m3f);
    const __m512i mn_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(p2, 4), low4),
                                          _mm512_and_si512(_mm512_srli_epi16(p1, 2), m30));
    const __m512i mn[4] = {_mm512_shuffle_epi8(mn_lo, pair_u8(0, 1)), _mm512_shuffle_epi8(mn_lo, pair_u8(2, 3)),
                           _mm512_shuffle_epi8(mn_hi, pair_u8(0, 1)), _mm512_shuffle_epi8(mn_hi, pair_u8(2, 3))};
    const __m512 dw = pair_ph(b0, b1, 0);
    const __m512 mw = pair_ph(b0, b1, 16);
#pragma GCC unroll 6
    for (int c = 0; c < C; ++c) {
      const auto* sp = reinterpret_cast<const uint8_t*>(ss[c * ss_stride + b].v);
      __m512i imin = _mm512_dpwssd_epi32(zero, mn[0], bcast4(sp));
      imin = _mm512_dpwssd_epi32(imin, mn[1], bcast4(sp + 4));
      imin = _mm512_dpwssd_epi32(imin, mn[2], bcast4(sp + 8));
      imin = _mm512_dpwssd_epi32(imin, mn[3], bcast4(sp + 12));
      const __m512 da = _mm512_set1_ps(load_f32(ab + c * as));
      __m512 a0;
      if constexpr (kAccInOut) {
        a0 = b == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(out + c * os);
      } else {
        a0 = acc[c];
      }
      a0 = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(isum[c]), a0);
      a0 = _mm512_fnmadd_ps(_mm512_mul_ps(mw, da), _mm512_cvtepi32_ps(imin), a0);
      if constexpr (kAccInOut) {
        _mm512_storeu_ps(out + c * os, a0);
      } else {
        acc[c] = a0;
      }
    }
  }
  if constexpr (!kAccInOut) {
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + c * os, acc[c]);
  }
}

// Q6_Kx8 (packed_k.cpp, the 8-row tile in packed_k_tiles_avx2.hpp): quants used unsigned, the
// offset term -32 sum_j sc_j bsums_j first (vpdpwssd of the scale pairs times -32 with the bsum
// pairs), then per 16-element sub-block one dpbusd chain over its 4 chunks and one vpmulld by
// its int8 scale; one fma per super-block and column.
template <int C>
void q6_k_tile16(int64_t nb, const uint8_t* g0, const uint8_t* g1, const uint8_t* a, size_t as,
                 const SubSums16* /*ss*/, int64_t /*ss_stride*/, float* out, int64_t os) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  const __m512i zero = _mm512_setzero_si512();
  // With more than 4 columns the running f32 sums live in `out` (one load and store per
  // super-block and column) and their registers go to the integer sums.
  constexpr bool kAccInOut = C > 4;
  __m512 acc[kAccInOut ? 1 : C];
  if constexpr (!kAccInOut) {
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* b0 = g0 + static_cast<size_t>(b) * kQ6KBlock;
    const uint8_t* b1 = g1 + static_cast<size_t>(b) * kQ6KBlock;
    if constexpr (C == 1) {
      // Decode (DecodeRows::kRows16) streams two groups: kPairPrefetchBytes ahead on each.
      for (size_t o = 0; o < kQ6KBlock; o += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(b0 + kPairPrefetchBytes + o), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b1 + kPairPrefetchBytes + o), _MM_HINT_T0);
      }
    }
    const uint8_t* ab = a + static_cast<size_t>(b) * kActBytes;
    __m512i isum[C];
#pragma GCC unroll 8
    for (int jp = 0; jp < 8; ++jp) {
      const int i = 2 * (jp % 2);
      const size_t so = 16 + 32 * static_cast<size_t>(jp / 2);
      const __m512i pair = _mm512_srai_epi16(_mm512_shuffle_epi8(pair_chunk(b0, b1, so), hi_u8(i, i + 1)), 8);
      const __m512i neg32 = _mm512_sub_epi16(zero, _mm512_slli_epi16(pair, 5));
#pragma GCC unroll 6
      for (int c = 0; c < C; ++c) {
        isum[c] = _mm512_dpwssd_epi32(jp == 0 ? zero : isum[c], neg32, bcast4(ab + c * as + kActBsums + 4 * jp));
        keep(isum[c]);
      }
    }
#pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {
#pragma GCC unroll 4
      for (int Q = 0; Q < 4; ++Q) {
#pragma GCC unroll 2
        for (int u = 0; u < 2; ++u) {
          const int sb = 8 * n + 2 * Q + u;
          // The block pointers through an empty asm for each sub-block: every chunk is loaded
          // where it is used, instead of kept (spilled) from the sub-block that used it before.
          const uint8_t* r0 = b0;
          const uint8_t* r1 = b1;
          __asm__("" : "+r"(r0), "+r"(r1));
          const size_t so = 16 + 32 * static_cast<size_t>(sb / 4);
          const __m512i sc = _mm512_srai_epi32(_mm512_shuffle_epi8(pair_chunk(r0, r1, so), top_u8(sb % 4)), 24);
          __m512i s32[C];
#pragma GCC unroll 2
          for (int ip = 0; ip < 2; ++ip) {
            __m512i w[2];
            for (int k = 0; k < 2; ++k) {
              const int t = 4 * u + 2 * ip + k;
              const size_t lo_off = 144 + static_cast<size_t>(16 * n + 8 * (Q & 1) + t) * 32;
              const size_t hi_off = 1168 + static_cast<size_t>(8 * n + t) * 32;
              const __m512i l = pair_chunk(r0, r1, lo_off);
              const __m512i h = pair_chunk(r0, r1, hi_off);
              const __m512i lo = Q < 2 ? _mm512_and_si512(l, low4) : _mm512_and_si512(_mm512_srli_epi16(l, 4), low4);
              __m512i hb;
              if (Q == 0) {
                hb = _mm512_and_si512(_mm512_slli_epi16(h, 4), m30);
              } else if (Q == 1) {
                hb = _mm512_and_si512(_mm512_slli_epi16(h, 2), m30);
              } else if (Q == 2) {
                hb = _mm512_and_si512(h, m30);
              } else {
                hb = _mm512_and_si512(_mm512_srli_epi16(h, 2), m30);
              }
              w[k] = _mm512_or_si512(lo, hb);
            }
            const int t0 = 4 * u + 2 * ip;
#pragma GCC unroll 6
            for (int c = 0; c < C; ++c) {
              const uint8_t* ac = ab + c * as + kActQs + 128 * n + 32 * Q + 4 * t0;
              s32[c] = _mm512_dpbusd_epi32(ip == 0 ? zero : s32[c], w[0], bcast4(ac));
              s32[c] = _mm512_dpbusd_epi32(s32[c], w[1], bcast4(ac + 4));
              keep(s32[c]);
            }
          }
#pragma GCC unroll 6
          for (int c = 0; c < C; ++c) {
            isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(s32[c], sc));
            keep(isum[c]);
          }
        }
      }
    }
    const __m512 dw = pair_ph(b0, b1, 0);
#pragma GCC unroll 6
    for (int c = 0; c < C; ++c) {
      const __m512 da = _mm512_set1_ps(load_f32(ab + c * as));
      if constexpr (kAccInOut) {
        const __m512 a0 = b == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(out + c * os);
        _mm512_storeu_ps(out + c * os, _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(isum[c]), a0));
      } else {
        acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(isum[c]), acc[c]);
      }
    }
  }
  if constexpr (!kAccInOut) {
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + c * os, acc[c]);
  }
}

// Pairs of 8-row groups through the 16-row tiles, columns in L2-sized blocks as in the 8-row
// driver: W columns at a time through TW, what is left through the 4- to 1-column tiles (TW is
// T4 where W is 4); a last odd group, and one-column calls as kDecode says, through the 8-row
// kernels.
using Tile16 = void (*)(int64_t, const uint8_t*, const uint8_t*, const uint8_t*, size_t, const SubSums16*, int64_t,
                        float*, int64_t);
template <DType kType, size_t kBlock, bool kSubSums, int W, Tile16 TW, Tile16 T4, Tile16 T3, Tile16 T2, Tile16 T1,
          DecodeRows kDecode>
void gemm_k16(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a, size_t a_stride, int64_t n_cols,
              float* out, int64_t out_stride) {
  static const PackedKernels* base = packed_kernels_k8_edge(kType);
  // One column (decode) with kRows8 through the 8-row tiles (the same bits): they read one group
  // after the other as one stream, where the 16-row tiles read two groups side by side. From DRAM
  // on a Zen 4 the 16-row tiles got half the bandwidth (Q4_K 10.8 against 20.6 GB/s, Q6_K, through
  // AVX-512's 16-row decode tile, 8.4 against 20.9; bench/LOG.md, twenty-fourth session); on an
  // Intel Xeon more for Q4_K (65536 x 2048, one thread, 16.1-18.2 against 12.2-12.7 GB/s), about
  // the same for Q5_K (thirty-first session), and for Q6_K once its 16-row tile prefetched
  // (kPairPrefetchBytes; before, with none, its 8-row tile was ahead in L3).
  if (n_cols == 1 && kDecode == DecodeRows::kRows8) {
    base->gemm(n, w, w_stride, n_rows, a, a_stride, n_cols, out, out_stride);
    return;
  }
  const int64_t nb = n / 256;
  const int64_t pairs = n_rows / 16;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  if (pairs > 0) {
    // Q4_K's and Q5_K's min terms: sub-block sums once per call, shared by every row pair.
    thread_local std::vector<SubSums16> sums;
    const SubSums16* ss = nullptr;
    if constexpr (kSubSums) {
      const auto total = static_cast<size_t>(n_cols * nb);
      if (sums.size() < total) sums.resize(total);
      for (int64_t c = 0; c < n_cols; ++c) {
        for (int64_t b = 0; b < nb; ++b) {
          const auto* bs = reinterpret_cast<const int16_t*>(ab + static_cast<size_t>(c) * a_stride +
                                                            static_cast<size_t>(b) * kActBytes + kActBsums);
          SubSums16& d = sums[static_cast<size_t>(c * nb + b)];
          for (int j = 0; j < 8; ++j) d.v[j] = static_cast<int16_t>(bs[2 * j] + bs[2 * j + 1]);
        }
      }
      ss = sums.data();
    }
    const size_t group_bytes = static_cast<size_t>(nb) * kBlock;
    const int64_t cb = l2_column_chunk(static_cast<int64_t>(a_stride), W);
    for (int64_t cb0 = 0; cb0 < n_cols; cb0 += cb) {
      const int64_t cb1 = std::min(n_cols, cb0 + cb);
      for (int64_t p = 0; p < pairs; ++p) {
        const uint8_t* g0 = wb + static_cast<size_t>(2 * p) * group_bytes;
        const uint8_t* g1 = g0 + group_bytes;
        float* og = out + p * 16;
        int64_t c = cb0;
        for (; c + W <= cb1; c += W) {
          TW(nb, g0, g1, ab + static_cast<size_t>(c) * a_stride, a_stride, ss ? ss + c * nb : nullptr, nb,
             og + c * out_stride, out_stride);
        }
        for (; c + 4 <= cb1; c += 4) {
          T4(nb, g0, g1, ab + static_cast<size_t>(c) * a_stride, a_stride, ss ? ss + c * nb : nullptr, nb,
             og + c * out_stride, out_stride);
        }
        const uint8_t* ac = ab + static_cast<size_t>(c) * a_stride;
        const SubSums16* sc = ss ? ss + c * nb : nullptr;
        switch (cb1 - c) {
          case 3: T3(nb, g0, g1, ac, a_stride, sc, nb, og + c * out_stride, out_stride); break;
          case 2: T2(nb, g0, g1, ac, a_stride, sc, nb, og + c * out_stride, out_stride); break;
          case 1: T1(nb, g0, g1, ac, a_stride, sc, nb, og + c * out_stride, out_stride); break;
          default: break;
        }
      }
    }
  }
  if (n_rows > 16 * pairs) {
    base->gemm(n, wb + static_cast<size_t>(16 * pairs) * w_stride, w_stride, n_rows - 16 * pairs, a, a_stride, n_cols,
               out + 16 * pairs, out_stride);
  }
}

template <DecodeRows kDecode>
const PackedKernels* table_k16(DType t) {
  static const PackedKernels q4_k = [] {
    const PackedKernels* b = avx2::packed_kernels_k(DType::Q4_K);
    return PackedKernels{"q4_kx8_z16",
                         &gemm_k16<DType::Q4_K, kQ4KBlock, true, kQ4KCols, &q4_k_tile16<kQ4KCols, false>,
                                   &q4_k_tile16<4, false>, &q4_k_tile16<3, false>, &q4_k_tile16<2, false>,
                                   &q4_k_tile16<1, false>, kDecode>,
                         b->dequantize_row, b->repack};
  }();
  static const PackedKernels q5_k = [] {
    const PackedKernels* b = avx2::packed_kernels_k(DType::Q5_K);
    return PackedKernels{"q5_kx8_z16",
                         &gemm_k16<DType::Q5_K, kQ5KBlock, true, kQ5KCols, &q4_k_tile16<kQ5KCols, true>,
                                   &q4_k_tile16<4, true>, &q4_k_tile16<3, true>, &q4_k_tile16<2, true>,
                                   &q4_k_tile16<1, true>, kDecode>,
                         b->dequantize_row, b->repack};
  }();
  static const PackedKernels q6_k = [] {
    const PackedKernels* b = avx2::packed_kernels_k(DType::Q6_K);
    return PackedKernels{"q6_kx8_z16",
                         &gemm_k16<DType::Q6_K, kQ6KBlock, false, kQ6KCols, &q6_k_tile16<kQ6KCols>, &q6_k_tile16<4>,
                                   &q6_k_tile16<3>, &q6_k_tile16<2>, &q6_k_tile16<1>, kDecode>,
                         b->dequantize_row, b->repack};
  }();
  switch (t) {
    case DType::Q4_K: return &q4_k;
    case DType::Q5_K: return &q5_k;
    case DType::Q6_K: return &q6_k;
    default: return nullptr;
  }
}

}  // namespace

// (Both decode choices carry the layout's one name: the packed-weights cache keys on it.)
const PackedKernels* packed_kernels_k16(DType t, DecodeRows d) {
  return d == DecodeRows::kRows8 ? table_k16<DecodeRows::kRows8>(t) : table_k16<DecodeRows::kRows16>(t);
}

}  // namespace geniex::cpu::avx512vnni
