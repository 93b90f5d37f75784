// AVX-512 (F + BW) kernels, chosen at run time where the CPU has them. Today: the Q4_0 x Q8_0
// and Q5_0 x Q8_0 decode matrix-vector products, the hot loops of Q4_0 models and of the
// Q5_0 tensors in llama.cpp's K-quant mixes; everything else (prefill tiles, quantizers) is
// the AVX2 table's.
//
// The packed 8-row layouts (Q4_0x8, Q4_1x8, Q8_0x8) use the register tiles of
// kernels_x8_tiles.hpp, for prefill and decode alike.
//
// Two weight blocks per 512-bit register: the 16 quant bytes of blocks b and b+1 and their
// high nibbles give lanes [b 0..15 | b+1 0..15 | b 16..31 | b+1 16..31]. The activation row is
// permuted to that order once per call, with its "-8" correction and scales, so the inner
// loop per row and block pair is: 2 loads, shift, and, maddubs, madd, sub, convert, scale, fma.
// Q5_0 adds one masked byte add: the 64 fifth bits of the pair, reordered to the same lane
// order with a few scalar shifts, become a mask register that adds 16 to the selected bytes.
#include <immintrin.h>

#include "backends/cpu/avx512_diagnostics.hpp"

#include <cstring>
#include <vector>

#include "backends/cpu/kernels_internal.hpp"
#include "quant/quant.hpp"



namespace geniex::cpu::avx512 {
namespace {

using quant::BlockQ4_0;
using quant::BlockQ5_0;
using quant::BlockQ8_0;

struct ActPair {
  int8_t q[64];       // [b 0..15 | b+1 0..15 | b 16..31 | b+1 16..31]
  int32_t corr[16];   // bias * (sum of the activations feeding each i32 lane)
  float d[4];         // (d_b, d_b+1, 0, 0)
};

// bias: the weight format's zero point (8 for Q4_0, 16 for Q5_0).
void prepare(const BlockQ8_0* a, int64_t n_pairs, int bias, ActPair* out) {
  const __m512i ones16 = _mm512_set1_epi16(1);
  const __m512i biases = _mm512_set1_epi8(static_cast<char>(bias));
  for (int64_t p = 0; p < n_pairs; ++p) {
    const BlockQ8_0& b0 = a[2 * p];
    const BlockQ8_0& b1 = a[2 * p + 1];
    ActPair& o = out[p];
    std::memcpy(o.q, b0.qs, 16);
    std::memcpy(o.q + 16, b1.qs, 16);
    std::memcpy(o.q + 32, b0.qs + 16, 16);
    std::memcpy(o.q + 48, b1.qs + 16, 16);
    const __m512i q = _mm512_loadu_si512(o.q);
    _mm512_storeu_si512(o.corr, _mm512_madd_epi16(_mm512_maddubs_epi16(biases, q), ones16));
    o.d[0] = _cvtsh_ss(b0.d);
    o.d[1] = _cvtsh_ss(b1.d);
    o.d[2] = o.d[3] = 0.0f;
  }
}

// One Q4_0 block (the odd last one) times one Q8_0 block, exactly.
float dot_block(const BlockQ4_0& w, const BlockQ8_0& a) {
  int sum = 0;
  for (int j = 0; j < 16; ++j) {
    sum += ((w.qs[j] & 0x0f) - 8) * a.qs[j] + ((w.qs[j] >> 4) - 8) * a.qs[j + 16];
  }
  return static_cast<float>(sum) * _cvtsh_ss(w.d) * _cvtsh_ss(a.d);
}

template <int R>
void rows_q4_0(int64_t nb, const uint8_t* w, size_t ws, const ActPair* act, const BlockQ8_0* a,
               float* out) {
  const __m512i ones16 = _mm512_set1_epi16(1);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i lane_block = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const int64_t n_pairs = nb / 2;
  for (int64_t p = 0; p < n_pairs; ++p) {
    const __m512i aq = _mm512_loadu_si512(act[p].q);
    const __m512i corr = _mm512_loadu_si512(act[p].corr);
    const __m128 ad = _mm_loadu_ps(act[p].d);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint8_t* p0 = w + r * ws + static_cast<size_t>(2 * p) * sizeof(BlockQ4_0);
      const uint8_t* p1 = p0 + sizeof(BlockQ4_0);
      _mm_prefetch(reinterpret_cast<const char*>(p0 + 16 * ws), _MM_HINT_T0);
      const __m256i y = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1 + 2),
                                            reinterpret_cast<const __m128i*>(p0 + 2));
      const __m512i z = _mm512_and_si512(
          _mm512_inserti64x4(_mm512_zextsi256_si512(y), _mm256_srli_epi16(y, 4), 1), low4);
      const __m512i dot = _mm512_sub_epi32(_mm512_madd_epi16(_mm512_maddubs_epi16(z, aq), ones16), corr);
      uint16_t d0, d1;
      std::memcpy(&d0, p0, 2);
      std::memcpy(&d1, p1, 2);
      const __m128 wd = _mm_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(d0), d1, 1));
      const __m512 scale = _mm512_permutexvar_ps(lane_block, _mm512_zextps128_ps512(_mm_mul_ps(wd, ad)));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float v = _mm512_reduce_add_ps(acc[r]);
    if (nb % 2 != 0) {
      const auto* wb = reinterpret_cast<const BlockQ4_0*>(w + r * ws);
      v += dot_block(wb[nb - 1], a[nb - 1]);
    }
    out[r] = v;
  }
}

void gemm_q4_0(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
               size_t a_stride, int64_t n_cols, float* out, int64_t out_stride) {
  const TypeKernels* base = avx2::kernels(DType::Q4_0);
  if (n_cols != 1) {  // prefill: the AVX2 register tiles
    base->gemm(n, w, w_stride, n_rows, a, a_stride, n_cols, out, out_stride);
    return;
  }
  const int64_t nb = n / 32;
  thread_local std::vector<ActPair> act;
  if (act.size() < static_cast<size_t>(nb / 2)) act.resize(static_cast<size_t>(nb / 2));
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  prepare(ab, nb / 2, 8, act.data());
  const auto* wb = static_cast<const uint8_t*>(w);
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) rows_q4_0<4>(nb, wb + r * w_stride, w_stride, act.data(), ab, out + r);
  for (; r < n_rows; ++r) rows_q4_0<1>(nb, wb + r * w_stride, w_stride, act.data(), ab, out + r);
}

// ---- Q5_0: the Q4_0 loop plus the fifth bits ------------------------------------------------

uint32_t load_qh(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The fifth bits of blocks b (h0) and b+1 (h1) in ActPair's lane order.
__mmask64 q5_pair_mask(uint32_t h0, uint32_t h1) {
  const uint64_t lo = (h0 & 0xffffu) | ((h1 & 0xffffu) << 16);  // elements 0..15
  const uint64_t hi = (h0 >> 16) | (h1 & 0xffff0000u);           // elements 16..31
  return _cvtu64_mask64(lo | (hi << 32));
}

// One Q5_0 block (the odd last one) times one Q8_0 block, exactly.
float dot_block_q5_0(const BlockQ5_0& w, const BlockQ8_0& a) {
  const uint32_t qh = load_qh(w.qh);
  int sum = 0;
  for (int j = 0; j < 16; ++j) {
    const int q0 = (w.qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int q1 = (w.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    sum += (q0 - 16) * a.qs[j] + (q1 - 16) * a.qs[j + 16];
  }
  return static_cast<float>(sum) * _cvtsh_ss(w.d) * _cvtsh_ss(a.d);
}

template <int R>
void rows_q5_0(int64_t nb, const uint8_t* w, size_t ws, const ActPair* act, const BlockQ8_0* a,
               float* out) {
  const __m512i ones16 = _mm512_set1_epi16(1);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __m512i lane_block = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const int64_t n_pairs = nb / 2;
  for (int64_t p = 0; p < n_pairs; ++p) {
    const __m512i aq = _mm512_loadu_si512(act[p].q);
    const __m512i corr = _mm512_loadu_si512(act[p].corr);
    const __m128 ad = _mm_loadu_ps(act[p].d);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint8_t* p0 = w + r * ws + static_cast<size_t>(2 * p) * sizeof(BlockQ5_0);
      const uint8_t* p1 = p0 + sizeof(BlockQ5_0);
      _mm_prefetch(reinterpret_cast<const char*>(p0 + 16 * ws), _MM_HINT_T0);
      const __m256i y = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1 + 6),
                                            reinterpret_cast<const __m128i*>(p0 + 6));
      __m512i z = _mm512_and_si512(
          _mm512_inserti64x4(_mm512_zextsi256_si512(y), _mm256_srli_epi16(y, 4), 1), low4);
      z = _mm512_mask_add_epi8(z, q5_pair_mask(load_qh(p0 + 2), load_qh(p1 + 2)), z, sixteen);
      const __m512i dot = _mm512_sub_epi32(_mm512_madd_epi16(_mm512_maddubs_epi16(z, aq), ones16), corr);
      uint16_t d0, d1;
      std::memcpy(&d0, p0, 2);
      std::memcpy(&d1, p1, 2);
      const __m128 wd = _mm_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(d0), d1, 1));
      const __m512 scale = _mm512_permutexvar_ps(lane_block, _mm512_zextps128_ps512(_mm_mul_ps(wd, ad)));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float v = _mm512_reduce_add_ps(acc[r]);
    if (nb % 2 != 0) {
      const auto* wb = reinterpret_cast<const BlockQ5_0*>(w + r * ws);
      v += dot_block_q5_0(wb[nb - 1], a[nb - 1]);
    }
    out[r] = v;
  }
}

void gemm_q5_0(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
               size_t a_stride, int64_t n_cols, float* out, int64_t out_stride) {
  const TypeKernels* base = avx2::kernels(DType::Q5_0);
  if (n_cols != 1) {  // prefill: the AVX2 register tiles
    base->gemm(n, w, w_stride, n_rows, a, a_stride, n_cols, out, out_stride);
    return;
  }
  const int64_t nb = n / 32;
  thread_local std::vector<ActPair> act;
  if (act.size() < static_cast<size_t>(nb / 2)) act.resize(static_cast<size_t>(nb / 2));
  const auto* ab = static_cast<const BlockQ8_0*>(a);
  prepare(ab, nb / 2, 16, act.data());
  const auto* wb = static_cast<const uint8_t*>(w);
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) rows_q5_0<4>(nb, wb + r * w_stride, w_stride, act.data(), ab, out + r);
  for (; r < n_rows; ++r) rows_q5_0<1>(nb, wb + r * w_stride, w_stride, act.data(), ab, out + r);
}


// ---- packed 8-row layouts: the register tiles of kernels_x8_tiles.hpp with maddubs + madd ---

#include "backends/cpu/kernels_x8_tiles.hpp"

}  // namespace

const PackedKernels* packed_kernels(DType t) {
  static const PackedKernels q4_0{"q4_0x8", &x8_gemm<X8Format::Q4_0, false>, &dequantize_q4_0x8_row, &repack_q4_0x8};
  static const PackedKernels q4_1{"q4_1x8", &x8_gemm<X8Format::Q4_1, false>, &dequantize_q4_1x8_row, &repack_q4_1x8};
  static const PackedKernels q8_0{"q8_0x8", &x8_gemm<X8Format::Q8_0, false>, &dequantize_q8_0x8_row, &repack_q8_0x8};
  if (t == DType::Q4_0) return &q4_0;
  if (t == DType::Q4_1) return &q4_1;
  if (t == DType::Q8_0) return &q8_0;
  return nullptr;
}

namespace {

// The AVX2 table's entry with the AVX-512 gemm.
TypeKernels with_gemm(DType t, decltype(TypeKernels::gemm) gemm) {
  TypeKernels k = *avx2::kernels(t);
  k.isa = "avx512";
  k.gemm = gemm;
  return k;
}

}  // namespace

const TypeKernels* kernels(DType t) {
  static const TypeKernels q4_0 = with_gemm(DType::Q4_0, &gemm_q4_0);
  static const TypeKernels q5_0 = with_gemm(DType::Q5_0, &gemm_q5_0);
  if (t == DType::Q4_0) return &q4_0;
  if (t == DType::Q5_0) return &q5_0;
  return nullptr;
}

}  // namespace geniex::cpu::avx512
