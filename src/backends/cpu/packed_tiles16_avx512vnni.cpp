// 16-row AVX-512 VNNI tiles over the AVX2 packed 8-row layouts (packed_tiles_avx2.hpp) of Q4_0,
// Q4_1, Q8_0, Q5_0 and Q5_1: two consecutive 8-row groups side by side in one zmm (rows 0-7 of
// the pair in i32 lanes 0-7, rows 8-15 in lanes 8-15), so each vpdpbusd, each nibble decode
// and each float operation serves 16 rows where the 256-bit tiles serve 8. On the Intel Xeon
// this was written on, a zmm vpdpbusd issues at the rate of a ymm one (a register-only loop:
// 0.56 ns per instruction either way), so the tile's multiplies take half the time.
//
// Same bits as the AVX2 and AVX-VNNI 8-row tiles: per row, block and column the same exact i32
// block sum (the same two dpbusd chains, or maddubs sums, give one exact integer), then the same
// float operations in the same order (convert, d_w * d_a, one fma; Q4_1 / Q5_1's min fma). The
// layouts are the AVX2 ones (their repack and row read-back), so a model repacks the same way
// whichever of these tiles runs, and a last odd group of 8 rows runs the 8-row VNNI tile.
//
// Compiled with AVX-512 F/BW/VL/VNNI (and AVX2/FMA/F16C) and only called where cpu_features()
// reports them: everything here is file-local.
#include <immintrin.h>

#include "backends/cpu/avx512_diagnostics.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels_internal.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu::avx512vnni {
namespace {

// The 8-row layouts, their ActTerm preparation and the 8-row tiles (with dpbusd: the VNNI
// instruction set is enabled in this file) for a last odd group.
#define GENIEX_TILES_VNNI 1
#include "backends/cpu/packed_tiles_avx2.hpp"
#undef GENIEX_TILES_VNNI

// Formats whose integer sums start at a per-column correction (prepare's ActTerm::corr): Q4_0
// (-8 sum a), Q5_0 (-16 sum a) and, with VNNI, Q8_0 (-128 sum a: its weights enter dpbusd as
// w + 128).
constexpr bool has_corr(Fmt f) { return f == Fmt::Q4_0 || f == Fmt::Q5_0 || f == Fmt::Q8_0; }

#include "backends/cpu/zmm_pairs.hpp"

// How far ahead the one-column 16-row tile prefetches each of its two streams, in blocks. On an
// Intel Xeon (AMX) VM, 65536 x 2048 from DRAM, three rounds, GB/s with none / 0 (the block's own
// lines) / 6 blocks ahead: Q4_0 one thread 10.3-11.8 / 10.9-14.2 / 14.8-15.7, two threads
// 29.0-33.4 / 30.0-33.9 / 36.7-40.3; Q8_0 two threads 24.5-25.7 / 24.4-26.5 / 29.0-32.1. tg64
// with 6 against none, 3 alternating pairs: SmolLM2-135M-Instruct Q4_1 +19%, 1B Q4_0 +12%, Q8_0
// +6% (bench/LOG.md, thirty-first session). The 4-bit formats then gained again from 24 blocks
// (3.4-3.8 KiB) ahead, tg64 alternating against 6: 1B Q4_0 +4% (20: +4%, 28: +4%, 40: +3%),
// SmolLM2 Q4_1 +8-27%, SmolLM2-shape Q4_0 +3-14%; Q8_0 lost 5% at 15 blocks and 6% at 20, so it
// keeps 6 (bench/LOG.md, thirty-second session); Q5_0/Q5_1 keep 6 too: 12, 18 and 24 measured no
// better on the 1B files (thirty-third session).
// (The 8-row tiles' own-block choice is a Zen 4's.)
constexpr size_t pair_prefetch_blocks(Fmt f) { return f == Fmt::Q4_0 || f == Fmt::Q4_1 ? 24 : 6; }

// 16 rows (groups at g0 and g1, nb blocks each) x C columns -> out[c * os + 0..15]. One column
// runs tile16_pairs (below), which does these operations per pair and prefetches.
template <Fmt F, int C>
void tile16(int64_t nb, const uint8_t* g0, const uint8_t* g1, const uint8_t* a, size_t a_stride, const ActTerm* tm,
            int64_t tm_stride, float* out, int64_t os) {
  static_assert(C >= 2, "one column: tile16_pairs");
  using T = Traits<F>;
  using L = Layout<F>;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i zero = _mm512_setzero_si512();
  [[maybe_unused]] const __m512i x80 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* b0 = g0 + static_cast<size_t>(b) * L::kBlockBytes;
    const uint8_t* b1 = g1 + static_cast<size_t>(b) * L::kBlockBytes;
    const uint8_t* ap[C];
    for (int c = 0; c < C; ++c) ap[c] = a + static_cast<size_t>(c) * a_stride + static_cast<size_t>(b) * T::kActBytes + T::kActQOff;
    // One dpbusd chain per column for the 4- and 5-bit formats (a block's chain starts afresh, so
    // consecutive blocks overlap), started at the exact offset correction (Q4_0, Q5_0, and Q8_0
    // here: see below); Q8_0 (8 vectors a block) in two chains, even and odd vectors.
    __m512i sum[C];
    [[maybe_unused]] __m512i sum2[C];
    for (int c = 0; c < C; ++c) {
      sum[c] = has_corr(F) ? _mm512_set1_epi32(tm[c * tm_stride + b].corr) : zero;
      if constexpr (F == Fmt::Q8_0) sum2[c] = zero;
    }
    if constexpr (F == Fmt::Q8_0) {
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        // w + 128 as an unsigned byte (w ^ 0x80): dpbusd gives sum (w + 128) a, and the chain
        // started at -128 sum(a) leaves sum w a exactly (|.| <= 32 * 255 * 128 in i32).
        const __m512i wu = _mm512_xor_si512(pair_chunk(b0, b1, L::kQOff + 32 * j), x80);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          __m512i& d = j % 2 == 0 ? sum[c] : sum2[c];
          d = _mm512_dpbusd_epi32(d, wu, bcast4(ap[c] + 4 * j));
          keep(d);
        }
      }
    } else {
      __m512i hb = zero;
      if constexpr (has_fifth(F)) hb = pair_chunk(b0, b1, L::kHighOff);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m512i q = pair_chunk(b0, b1, L::kQOff + 32 * j);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          __m512i u = h == 0 ? _mm512_and_si512(q, low4) : _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
          if constexpr (has_fifth(F)) {
            const int s = 4 * h + j;  // bit s of each high-bit byte goes to bit 4
            __m512i bit;
            if (s < 4) {
              bit = _mm512_slli_epi16(hb, static_cast<unsigned>(4 - s));
            } else if (s > 4) {
              bit = _mm512_srli_epi16(hb, static_cast<unsigned>(s - 4));
            } else {
              bit = hb;
            }
            u = _mm512_or_si512(u, _mm512_and_si512(bit, _mm512_set1_epi8(0x10)));
          }
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
            sum[c] = _mm512_dpbusd_epi32(sum[c], u, bcast4(ap[c] + 16 * h + 4 * j));
            keep(sum[c]);
          }
        }
      }
    }
    const __m512 dw = pair_ph(b0, b1, 0);
    __m512 mw = _mm512_setzero_ps();
    if constexpr (has_min(F)) mw = pair_ph(b0, b1, 16);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const ActTerm& t = tm[c * tm_stride + b];
      __m512i si = sum[c];
      if constexpr (F == Fmt::Q8_0) si = _mm512_add_epi32(si, sum2[c]);
      acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(t.d)), _mm512_cvtepi32_ps(si), acc[c]);
      if constexpr (has_min(F)) acc[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(t.s), acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + c * os, acc[c]);
}

// One column over P consecutive pairs of groups at once (g[2p], g[2p + 1]: 2P streams of
// weights, each prefetched pair_prefetch_blocks(F) ahead; past the end does not fault): per pair
// tile16's operations for one column in its order, so the same bits, with each activation
// broadcast shared by the pairs. decode_pairs(F) is P for the one-column calls on kRows16 CPUs
// (a pair left over, and one column left over in a batch, run P = 1). On an Intel Xeon (AMX) VM, tg64
// alternating against one pair at a time, P = 2 gave Q8_0 +3.5% (1B, 7 of 7 rounds) and +11%
// (SmolLM2-shape, 4 of 4), Q5_0 +3.8% (1B, 3 of 3) and +9% (SmolLM2-shape Q4_K_M, mostly Q5_0
// there, 4 of 4), Q5_1 +2% (1B, 3 of 3); for Q4_0 and Q4_1 it was within the noise or slower
// (1B Q4_0 +1.7%, SmolLM2-135M-Instruct Q4_1 -1% to -7%, the SmolLM2-shape Q4_0 -3%), and P = 4
// slower than 2 (bench/LOG.md, thirty-third session).
constexpr int decode_pairs(Fmt f) { return f == Fmt::Q4_0 || f == Fmt::Q4_1 ? 1 : 2; }

template <Fmt F, int P>
void tile16_pairs(int64_t nb, const uint8_t* const* g, const uint8_t* a, const ActTerm* tm, float* const* out) {
  using T = Traits<F>;
  using L = Layout<F>;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i zero = _mm512_setzero_si512();
  [[maybe_unused]] const __m512i x80 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[P];
  for (int p = 0; p < P; ++p) acc[p] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* b0[P];
    const uint8_t* b1[P];
    constexpr size_t ahead = pair_prefetch_blocks(F) * L::kBlockBytes;
    for (int p = 0; p < P; ++p) {
      b0[p] = g[2 * p] + static_cast<size_t>(b) * L::kBlockBytes;
      b1[p] = g[2 * p + 1] + static_cast<size_t>(b) * L::kBlockBytes;
      for (size_t off = 0; off < L::kBlockBytes; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(b0[p] + ahead + off), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b1[p] + ahead + off), _MM_HINT_T0);
      }
    }
    const uint8_t* ap = a + static_cast<size_t>(b) * T::kActBytes + T::kActQOff;
    const ActTerm& t = tm[b];
    __m512i sum[P];
    [[maybe_unused]] __m512i sum2[P];
    for (int p = 0; p < P; ++p) {
      sum[p] = has_corr(F) ? _mm512_set1_epi32(t.corr) : zero;
      if constexpr (F == Fmt::Q8_0) sum2[p] = zero;
    }
    if constexpr (F == Fmt::Q8_0) {
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const __m512i av = bcast4(ap + 4 * j);
#pragma GCC unroll 4
        for (int p = 0; p < P; ++p) {
          const __m512i wu = _mm512_xor_si512(pair_chunk(b0[p], b1[p], L::kQOff + 32 * j), x80);
          __m512i& d = j % 2 == 0 ? sum[p] : sum2[p];
          d = _mm512_dpbusd_epi32(d, wu, av);
          keep(d);
        }
      }
    } else {
      __m512i hb[P];
      for (int p = 0; p < P; ++p) hb[p] = has_fifth(F) ? pair_chunk(b0[p], b1[p], L::kHighOff) : zero;
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        __m512i q[P];
        for (int p = 0; p < P; ++p) q[p] = pair_chunk(b0[p], b1[p], L::kQOff + 32 * j);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m512i av = bcast4(ap + 16 * h + 4 * j);
#pragma GCC unroll 4
          for (int p = 0; p < P; ++p) {
            __m512i u = h == 0 ? _mm512_and_si512(q[p], low4) : _mm512_and_si512(_mm512_srli_epi16(q[p], 4), low4);
            if constexpr (has_fifth(F)) {
              const int s = 4 * h + j;
              __m512i bit;
              if (s < 4) {
                bit = _mm512_slli_epi16(hb[p], static_cast<unsigned>(4 - s));
              } else if (s > 4) {
                bit = _mm512_srli_epi16(hb[p], static_cast<unsigned>(s - 4));
              } else {
                bit = hb[p];
              }
              u = _mm512_or_si512(u, _mm512_and_si512(bit, _mm512_set1_epi8(0x10)));
            }
            sum[p] = _mm512_dpbusd_epi32(sum[p], u, av);
            keep(sum[p]);
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const __m512 dw = pair_ph(b0[p], b1[p], 0);
      __m512i si = sum[p];
      if constexpr (F == Fmt::Q8_0) si = _mm512_add_epi32(si, sum2[p]);
      acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(t.d)), _mm512_cvtepi32_ps(si), acc[p]);
      if constexpr (has_min(F)) acc[p] = _mm512_fmadd_ps(pair_ph(b0[p], b1[p], 16), _mm512_set1_ps(t.s), acc[p]);
    }
  }
  for (int p = 0; p < P; ++p) _mm512_storeu_ps(out[p], acc[p]);
}

template <Fmt F, DecodeRows kDecode>
void gemm16(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a, size_t a_stride,
            int64_t n_cols, float* out, int64_t out_stride) {
  using L = Layout<F>;
  constexpr int kCols = 4;
  // One column (decode) with kRows8: the 8-row tile over the whole matrix (the same bits), one
  // group after the other as one stream. The 16-row tile reads two groups side by side: from DRAM
  // on a Zen 4 that got half the bandwidth (Q4_0, 576-element rows: 10.4 against 20.0 GB/s; the
  // prefetch distance changed nothing; bench/LOG.md, twenty-fourth session), on an Intel Xeon
  // more (Q4_0 65536 x 2048, one thread, 13.7-14.6 against 9.3-10.0 GB/s; thirty-first session).
  if (kDecode == DecodeRows::kRows8 && n_cols == 1) {
    gemm<F, false>(n, w, w_stride, n_rows, a, a_stride, n_cols, out, out_stride);
    return;
  }
  const int64_t nb = n / 32;
  const size_t group_bytes = static_cast<size_t>(nb) * L::kBlockBytes;
  thread_local std::vector<ActTerm> terms;
  const auto* ab = static_cast<const uint8_t*>(a);
  prepare<F>(ab, a_stride, n_cols, nb, &terms);  // with Q8_0's -128 sum(a) (VNNI)
  const auto* wb = static_cast<const uint8_t*>(w);
  const int64_t groups = n_rows / 8;
  // Columns in chunks whose activations stay in L2 (~256 KiB) while every pair of row groups
  // passes over them, as in the 8-row gemm.
  const int64_t chunk = l2_column_chunk(static_cast<int64_t>(a_stride), kCols);
  for (int64_t c0 = 0; c0 < n_cols; c0 += chunk) {
    const int64_t c1 = std::min(n_cols, c0 + chunk);
    // One column decode_pairs(F) pairs at a time, then what is left pair by pair.
    int64_t g_start = 0;
    if constexpr (decode_pairs(F) == 2) {
      if (n_cols == 1) {
        for (; g_start + 4 <= groups; g_start += 4) {
          const uint8_t* gp[4];
          for (int i = 0; i < 4; ++i) gp[i] = wb + static_cast<size_t>(g_start + i) * group_bytes;
          float* op[2] = {out + g_start * 8, out + g_start * 8 + 16};
          tile16_pairs<F, 2>(nb, gp, ab, terms.data(), op);
        }
      }
    }
    for (int64_t g = g_start; g + 2 <= groups; g += 2) {
      const uint8_t* g0 = wb + static_cast<size_t>(g) * group_bytes;
      const uint8_t* g1 = g0 + group_bytes;
      float* og = out + g * 8;
      int64_t c = c0;
      for (; c + kCols <= c1; c += kCols) {
        tile16<F, kCols>(nb, g0, g1, ab + static_cast<size_t>(c) * a_stride, a_stride, terms.data() + c * nb, nb,
                         og + c * out_stride, out_stride);
      }
      const uint8_t* ac = ab + static_cast<size_t>(c) * a_stride;
      const ActTerm* tc = terms.data() + c * nb;
      switch (c1 - c) {
        case 3: tile16<F, 3>(nb, g0, g1, ac, a_stride, tc, nb, og + c * out_stride, out_stride); break;
        case 2: tile16<F, 2>(nb, g0, g1, ac, a_stride, tc, nb, og + c * out_stride, out_stride); break;
        case 1: {
          const uint8_t* gp[2] = {g0, g1};
          float* op[1] = {og + c * out_stride};
          tile16_pairs<F, 1>(nb, gp, ac, tc, op);
          break;
        }
        default: break;
      }
    }
  }
  // A last odd group of 8 rows: the 8-row gemm of this file's header (the same bits).
  if (groups % 2 != 0) {
    const int64_t g = groups - 1;
    gemm<F, false>(n, wb + static_cast<size_t>(g) * group_bytes, w_stride, 8, a, a_stride, n_cols, out + g * 8,
                   out_stride);
  }
}

// The AVX2 file's repack and read-back (the layout is theirs), this file's gemm.
// (Both decode choices carry the layout's one name: the packed-weights cache keys on it.)
template <Fmt F, DecodeRows kDecode>
PackedKernels make16(const char* name) {
  const PackedKernels* base = avx2::packed_kernels(Traits<F>::kType, false);
  return PackedKernels{name, &gemm16<F, kDecode>, base->dequantize_row, base->repack};
}

template <DecodeRows kDecode>
const PackedKernels* table16(DType t) {
  static const PackedKernels q4_0 = make16<Fmt::Q4_0, kDecode>("q4_0x8_avx2_z16");
  static const PackedKernels q4_1 = make16<Fmt::Q4_1, kDecode>("q4_1x8_avx2_z16");
  static const PackedKernels q8_0 = make16<Fmt::Q8_0, kDecode>("q8_0x8_avx2_z16");
  static const PackedKernels q5_0 = make16<Fmt::Q5_0, kDecode>("q5_0x8_avx2_z16");
  static const PackedKernels q5_1 = make16<Fmt::Q5_1, kDecode>("q5_1x8_avx2_z16");
  switch (t) {
    case DType::Q4_0: return &q4_0;
    case DType::Q4_1: return &q4_1;
    case DType::Q8_0: return &q8_0;
    case DType::Q5_0: return &q5_0;
    case DType::Q5_1: return &q5_1;
    default: return nullptr;
  }
}

}  // namespace

const PackedKernels* packed_kernels_16(DType t, DecodeRows d) {
  return d == DecodeRows::kRows8 ? table16<DecodeRows::kRows8>(t) : table16<DecodeRows::kRows16>(t);
}

}  // namespace geniex::cpu::avx512vnni
