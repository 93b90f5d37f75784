// AVX-512 one-column (decode) tile for the packed Q6_Kx8 layout (packed_k.cpp), chosen at run
// time where the CPU has AVX-512 F + BW. The AVX2 tile (packed_k_tiles_avx2.cpp) spends about
// 19 instructions per two chunks of 8 rows on decoding 6-bit quants and on maddubs / madd, so a
// decode step over a Q6_K output head ran at about half the memory's bandwidth. Here two 8-row
// groups sit side by side in one 512-bit register (row r of the pair in i32 lane r): the same
// instructions per chunk now serve 16 rows.
//
// Arithmetic per row: the AVX2 tile's integers (the offset term -32 sum_j sc_j bsums_j, then per
// sub-block the i16 pair sums of two chunks madd'ed with the row's scale, summed in i32, here in
// another order of exact i32 adds) and its one fma per super-block: the same bits, so decode
// still equals prefill.
#include <immintrin.h>

#include "backends/cpu/avx512_diagnostics.hpp"

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels_internal.hpp"
#include "core/cpu_features.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu::avx512 {
namespace {

constexpr size_t kActBytes = sizeof(quant::BlockQ8_K);  // f32 d, 256 qs, 16 bsums
constexpr size_t kActQs = 4;
constexpr size_t kActBsums = 4 + 256;
constexpr size_t kQ6KBlock = 1680;  // group block: 8 rows x one super-block

#include "backends/cpu/zmm_pairs.hpp"

// Decode prefetch distance in bytes, as the AVX2 K tiles' kPrefetchBytes (bench/LOG.md, twelfth
// session: two super-blocks ahead, ~3.4 KB, was 20-30% slower on the 1B Q4_K_M decode).
constexpr size_t kPrefetchBytes = 512;

// Rows of groups g0 (0..7) and g1 (8..15), nb super-blocks, times one Q8_K column a -> out[0..15].
void q6_k_col16(int64_t nb, const uint8_t* g0, const uint8_t* g1, const uint8_t* a, float* out) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* b0 = g0 + static_cast<size_t>(b) * kQ6KBlock;
    const uint8_t* b1 = g1 + static_cast<size_t>(b) * kQ6KBlock;
    // Decode streams the weights: in both groups, the lines from kPrefetchBytes into this
    // super-block to kPrefetchBytes into the next.
    for (size_t o = 0; o < kQ6KBlock; o += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(b0 + kPrefetchBytes + o), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b1 + kPrefetchBytes + o), _MM_HINT_T0);
    }
    const uint8_t* ab = a + static_cast<size_t>(b) * kActBytes;
    __m512i isum = _mm512_setzero_si512();
    for (int jp = 0; jp < 8; ++jp) {
      const int i = 2 * (jp % 2);
      const __m512i pair =
          _mm512_srai_epi16(_mm512_shuffle_epi8(pair_chunk(b0, b1, 16 + 32 * static_cast<size_t>(jp / 2)), hi_u8(i, i + 1)), 8);
      const __m512i neg32 = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(pair, 5));
      const __m512i t = _mm512_madd_epi16(neg32, bcast4(ab + kActBsums + 4 * static_cast<size_t>(jp)));
      isum = jp == 0 ? t : _mm512_add_epi32(isum, t);
      keep(isum);
    }
    // Per half n and chunk pair (t, t + 1): the two ql chunks and the qh chunk of each t are
    // loaded once and give the quants of all four Q (elements 32Q + 4t..); lo | (hb & 0x30) is one
    // ternary-logic op. Sub-block 8n + 2Q + u (u = t / 4) takes its scale from chunk 2n (Q < 2)
    // or 2n + 1.
    for (int n = 0; n < 2; ++n) {
      const __m512i sch[2] = {pair_chunk(b0, b1, 16 + 32 * static_cast<size_t>(2 * n)),
                              pair_chunk(b0, b1, 16 + 32 * static_cast<size_t>(2 * n + 1))};
      for (int tp = 0; tp < 4; ++tp) {
        __m512i l0[2], l1[2], h[2];
        for (int k = 0; k < 2; ++k) {
          const int t = 2 * tp + k;
          l0[k] = pair_chunk(b0, b1, 144 + 32 * static_cast<size_t>(16 * n + t));
          l1[k] = pair_chunk(b0, b1, 144 + 32 * static_cast<size_t>(16 * n + 8 + t));
          h[k] = pair_chunk(b0, b1, 1168 + 32 * static_cast<size_t>(8 * n + t));
        }
        const int u = tp / 2;
        for (int Q = 0; Q < 4; ++Q) {
          __m512i w[2];
          for (int k = 0; k < 2; ++k) {
            const __m512i l = (Q & 1) ? l1[k] : l0[k];
            const __m512i lo = Q < 2 ? _mm512_and_si512(l, low4) : _mm512_and_si512(_mm512_srli_epi16(l, 4), low4);
            __m512i hs;
            if (Q == 0) {
              hs = _mm512_slli_epi16(h[k], 4);
            } else if (Q == 1) {
              hs = _mm512_slli_epi16(h[k], 2);
            } else if (Q == 2) {
              hs = h[k];
            } else {
              hs = _mm512_srli_epi16(h[k], 2);
            }
            w[k] = _mm512_ternarylogic_epi32(lo, hs, m30, 0xf8);  // lo | (hs & 0x30)
          }
          const int sb = 2 * Q + u;  // within the half
          const __m512i sc = _mm512_srai_epi16(_mm512_shuffle_epi8(sch[sb / 4], hi_u8(sb % 4, sb % 4)), 8);
          const uint8_t* ac = ab + kActQs + static_cast<size_t>(128 * n + 32 * Q + 8 * tp);
          const __m512i p =
              _mm512_add_epi16(_mm512_maddubs_epi16(w[0], bcast4(ac)), _mm512_maddubs_epi16(w[1], bcast4(ac + 4)));
          isum = _mm512_add_epi32(isum, _mm512_madd_epi16(p, sc));
          keep(isum);
        }
      }
    }
    const __m256i dh = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1)), 1);
    const __m512 dw = _mm512_cvtph_ps(dh);
    float daf;
    std::memcpy(&daf, ab, 4);
    acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(daf)), _mm512_cvtepi32_ps(isum), acc);
  }
  _mm512_storeu_ps(out, acc);
}

// One column through the 16-row tile (pairs of groups), a last odd group and any other column
// count through the 8-row tiles of the same layout (packed_kernels_k8_edge: AVX-VNNI's where the
// CPU has it, else AVX2's here, as this file serves CPUs without AVX-512 VNNI); the same bits.
void gemm_q6_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a, size_t a_stride, int64_t n_cols,
               float* out, int64_t out_stride) {
  static const PackedKernels* base = packed_kernels_k8_edge(DType::Q6_K);
  if (n_cols != 1) {
    base->gemm(n, w, w_stride, n_rows, a, a_stride, n_cols, out, out_stride);
    return;
  }
  const int64_t nb = n / 256;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  const int64_t pairs = n_rows / 16;
  for (int64_t p = 0; p < pairs; ++p) {
    const uint8_t* g0 = wb + static_cast<size_t>(2 * p * nb) * kQ6KBlock;
    q6_k_col16(nb, g0, g0 + static_cast<size_t>(nb) * kQ6KBlock, ab, out + 16 * p);
  }
  if (n_rows > 16 * pairs) {
    base->gemm(n, wb + static_cast<size_t>(16 * pairs) * w_stride, w_stride, n_rows - 16 * pairs, a, a_stride, 1,
               out + 16 * pairs, out_stride);
  }
}

}  // namespace

const PackedKernels* packed_kernels_k(DType t) {
  if (t != DType::Q6_K) return nullptr;
  static const PackedKernels q6_k = [] {
    const PackedKernels* base = avx2::packed_kernels_k(DType::Q6_K);
    return PackedKernels{"q6_kx8_avx512", &gemm_q6_k, base->dequantize_row, base->repack};
  }();
  return &q6_k;
}

}  // namespace geniex::cpu::avx512
