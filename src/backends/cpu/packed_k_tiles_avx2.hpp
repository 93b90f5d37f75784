// The AVX2 register tiles over the packed K-quant layouts Q4_Kx8, Q5_Kx8 and Q6_Kx8 (packed_k.cpp)
// with Q8_K activations, included inside an anonymous namespace by packed_k_tiles_avx2.cpp
// (AVX2 + FMA + F16C: maddubs, i16 sums, madd), by packed_k_tiles_avxvnni.cpp (AVX-VNNI: a
// vpdpbusd chain per sub-block and column in i32, then one vpmulld by the sub-block's scale;
// vpdpwssd for the min and offset terms) and by packed_k_tiles8_avx512vnni.cpp (the same VNNI
// tiles EVEX-encoded on ymm, with 32 registers). The includer defines GENIEX_TILES_VNNI to 0 or 1.
//
// Tiles: 8 weight rows (one i32 lane each) x C activation columns. Each 256-bit load of quants
// holds 4 consecutive quant bytes of each of the 8 rows; the matching 4 activation bytes are
// broadcast (vpbroadcastd), so maddubs + madd (or dpbusd) give every row's dot product in its own
// lane with no horizontal sums. Each weight super-block is decoded once per column tile, each
// activation super-block once per column.
//
// Integer sums are exact (bounds at each step below), so both instruction sets give the same
// i32 per row and super-block; per super-block and column the float work is (d_w * d_a) * sum
// [- (dmin_w * d_a) * min_sum], accumulated over super-blocks in order. Every column goes through
// the same instructions whatever the tile width, so results do not depend on how many columns a
// call has (1-column decode == prefill, bit for bit), nor on which of the two files ran.
//
// Expects <immintrin.h>, <algorithm>, <cstdint>, <cstring>, <vector>, kernels_internal.hpp,
// packed.hpp and quant/quant.hpp to be included. Defines the file-local gemm_kx8 driver, the
// tiles and k_kernels(), the includer's PackedKernels over them.
#ifndef GENIEX_TILES_VNNI
#error "define GENIEX_TILES_VNNI to 0 or 1 before including packed_k_tiles_avx2.hpp"
#endif

#if GENIEX_TILES_VNNI
#include "backends/cpu/vnni256.hpp"  // geniex_dpbusd256 / geniex_dpwssd256
#endif

constexpr size_t kActBytes = sizeof(quant::BlockQ8_K);  // float d, 256 qs, 16 bsums
constexpr size_t kActQs = 4;
constexpr size_t kActBsums = 4 + 256;
constexpr size_t kQ4KBlock = 1152;  // group block: 8 rows x one super-block
constexpr size_t kQ6KBlock = 1680;
constexpr int kColTile = 4;

// Per activation column and super-block: the 8 sub-block sums bsums[2j] + bsums[2j+1] as i16
// (|sum| <= 32 * 128), for Q4_K's min term two sub-blocks per madd. A struct of this file's own,
// so its std::vector is an internal-linkage instantiation (see packed_tiles_avx2.cpp).
struct SubSums {
  int16_t v[8];
};

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The 4 bytes at p in every i32 lane.
inline __m256i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

inline float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// Shuffle patterns over registers that hold 4 bytes per row (row r in i32 lane r).
#if !GENIEX_TILES_VNNI
// dup_u8(i): lane r = (byte i of lane r, zero-extended) in both i16 halves.
inline __m256i dup_u8(int i) {
  const __m256i base = _mm256_set1_epi32(static_cast<int32_t>(0x80008000u | static_cast<uint32_t>(i) << 16 |
                                                              static_cast<uint32_t>(i)));
  const __m256i lane = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404, 0x08080808, 0x0c0c0c0c);
  return _mm256_add_epi8(base, lane);  // 0x80 + offset keeps bit 7: still a zeroing index
}
#endif
// pair_u8(i, k): lane r = (byte i, byte k of lane r), each zero-extended to an i16.
inline __m256i pair_u8(int i, int k) {
  const __m256i base = _mm256_set1_epi32(static_cast<int32_t>(0x80008000u | static_cast<uint32_t>(k) << 16 |
                                                              static_cast<uint32_t>(i)));
  const __m256i lane = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404, 0x08080808, 0x0c0c0c0c);
  return _mm256_add_epi8(base, lane);
}
// hi_u8(i, k): lane r = (byte i << 8, byte k << 8) as i16; srai by 8 sign-extends them.
inline __m256i hi_u8(int i, int k) {
  const __m256i base = _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(k) << 24 | 0x00800000u |
                                                              static_cast<uint32_t>(i) << 8 | 0x80u));
  const __m256i lane = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404, 0x08080808, 0x0c0c0c0c);
  return _mm256_add_epi8(base, lane);
}

#if GENIEX_TILES_VNNI
// u8_i32(i): lane r = byte i of lane r, zero-extended to an i32.
inline __m256i u8_i32(int i) {
  const __m256i base = _mm256_set1_epi32(static_cast<int32_t>(0x80808000u | static_cast<uint32_t>(i)));
  const __m256i lane = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404, 0x08080808, 0x0c0c0c0c);
  return _mm256_add_epi8(base, lane);
}
// top_u8(i): lane r = byte i of lane r << 24; srai by 24 sign-extends it to an i32.
inline __m256i top_u8(int i) {
  const __m256i base = _mm256_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(i) << 24 | 0x00808080u));
  const __m256i lane = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404, 0x08080808, 0x0c0c0c0c);
  return _mm256_add_epi8(base, lane);
}
#endif

// An empty asm that makes v's current value opaque: keeps GCC from regrouping the running
// sums below into trees of temporaries (which spills the column tiles to the stack).
// With AVX-512 VL the constraint is "v" (any of ymm0-31): "x" would confine the running sums to
// the 16 registers of VEX encoding.
#if defined(__AVX512VL__)
inline void keep(__m256i& v) { __asm__("" : "+v"(v)); }
#else
inline void keep(__m256i& v) { __asm__("" : "+x"(v)); }
#endif

// How far ahead 1-column (decode) tiles prefetch, in bytes: each group block prefetches the
// lines of [blk + kPrefetchBytes, blk + kPrefetchBytes + block). At 0 that is the block's own
// lines, all requested as the tile starts it, before its loads reach them (a Q6_K block's 27
// lines span ~600 instructions, more than the out-of-order window sees). Measured on a Zen 4
// VM (bench/LOG.md, twenty-ninth session), one column from DRAM, 8 alternating rounds, GB/s
// medians at 0 against 512 bytes ahead: one thread Q4_K 20.3 / 18.0, Q5_K 20.4 / 16.2, Q6_K
// 20.7 / 19.1; two threads Q4_K 28.4 / 26.7, Q6_K 27.5 / 19.7 (better in 8 of 8 rounds); with no
// prefetch at all Q6_K fell to 6-10 (its two streams, ql and qh, 1 KB apart, are not followed
// by the hardware prefetchers). End to end (1B tg64, 2 threads) Q4_K_M +11%, Q6_K +20%. On an
// Intel Xeon VM (twelfth session, tg128) 0 and 512 were within noise: 25.8 / 27.6 / 28.6 against
// 23.5 / 29.9 / 30.1 t/s. GENIEX_K_PREFETCH_BYTES overrides it for A/B builds.
#ifdef GENIEX_K_PREFETCH_BYTES
constexpr size_t kPrefetchBytes = GENIEX_K_PREFETCH_BYTES;
#else
constexpr size_t kPrefetchBytes = 0;
#endif

inline void prefetch_block(const uint8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
}

// ---- Q4_K x 8 ------------------------------------------------------------------------------
// Group block: d[8], dmin[8] (fp16), the 12 scale bytes as 3 chunks P0 (bytes 0-3), P1 (4-7),
// P2 (8-11), then 32 quant chunks (chunk k = bytes 4k..4k+3 of each row's qs). Chunk 8*j2 + s
// holds elements 64*j2 + 4s.. in its low nibbles (sub-block 2*j2) and 64*j2 + 32 + 4s.. in its
// high nibbles (sub-block 2*j2 + 1).
//
// Bounds: maddubs pair <= 2 * 15 * 128 = 3840, 8 chunks per sub-block in i16 <= 30720;
// x scale (<= 63) via madd <= 3.9e6 per sub-block, <= 3.1e7 per super-block. Mins:
// 63 * 2 * 16 * 128 per sub-block, <= 2.1e6 per super-block.
//
// Q5_Kx8 (kFifth) is this layout plus, at 1152, the 32 qh bytes of each row as 8 chunks (chunk
// s = bytes 4s..4s+3): bit j of qh byte l is the fifth bit of sub-block j's element l, so the
// quant chunk's nibbles take (qh chunk >> j) & 1 as bit 4. Quants up to 31: maddubs pair
// <= 2 * 31 * 128 = 7936, so 4 chunks per i16 sum (<= 31744) and two scale madds per sub-block.
constexpr size_t kQ5KBlock = 1408;

// Min term: sum_j min_j * (bsums[2j] + bsums[2j+1]), sub-blocks j and j + 1 in one madd of
// (min_j, min_j+1) with their precomputed sums.
template <int C>
__attribute__((always_inline)) inline void q4_k_min_term(__m256i mn_lo, __m256i mn_hi, const SubSums* ss,
                                                         int64_t ss_stride, int64_t b, __m256i* imin) {
#pragma GCC unroll 4
  for (int jp = 0; jp < 4; ++jp) {
    const __m256i mn = _mm256_shuffle_epi8(jp < 2 ? mn_lo : mn_hi, pair_u8(2 * (jp % 2), 2 * (jp % 2) + 1));
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const __m256i sp = bcast4(reinterpret_cast<const uint8_t*>(ss[c * ss_stride + b].v + 2 * jp));
#if GENIEX_TILES_VNNI
      imin[c] = geniex_dpwssd256(jp == 0 ? _mm256_setzero_si256() : imin[c], mn, sp);
#else
      const __m256i t = _mm256_madd_epi16(mn, sp);
      imin[c] = jp == 0 ? t : _mm256_add_epi32(imin[c], t);
#endif
      keep(imin[c]);
    }
  }
}

template <int C, bool kFifth = false>
void q4_k_tile(int64_t nb, const uint8_t* grp, const uint8_t* a, size_t as, const SubSums* ss, int64_t ss_stride,
               float* out, int64_t os) {
  constexpr size_t kBlock = kFifth ? kQ5KBlock : kQ4KBlock;
  [[maybe_unused]] constexpr int kChunksPerSum = kFifth ? 4 : 8;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i m3f = _mm256_set1_epi8(0x3f);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  const __m256i m10 = _mm256_set1_epi8(0x10);
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = grp + static_cast<size_t>(b) * kBlock;
    if constexpr (C == 1) prefetch_block(blk + kPrefetchBytes, kBlock);
    const uint8_t* ab = a + static_cast<size_t>(b) * kActBytes;
    // Scales and mins of the 8 sub-blocks, one byte per row and sub-block (4 per register).
    const __m256i p0 = load256(blk + 32), p1 = load256(blk + 64), p2 = load256(blk + 96);
    const __m256i sc_lo = _mm256_and_si256(p0, m3f);
    const __m256i sc_hi = _mm256_or_si256(_mm256_and_si256(p2, low4), _mm256_and_si256(_mm256_srli_epi16(p0, 2), m30));
    const __m256i mn_lo = _mm256_and_si256(p1, m3f);
    const __m256i mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(p2, 4), low4),
                                          _mm256_and_si256(_mm256_srli_epi16(p1, 2), m30));
    __m256i imin[C];
    if constexpr (!kFifth) q4_k_min_term<C>(mn_lo, mn_hi, ss, ss_stride, b, imin);
    __m256i isum[C];
    const uint8_t* q = blk + 128;
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
#if GENIEX_TILES_VNNI
      // The sub-block's scale as an i32 per row: the exact i32 sub-block sum is multiplied by it.
      const __m256i sc = _mm256_shuffle_epi8(j < 4 ? sc_lo : sc_hi, u8_i32(j % 4));
      __m256i s32[C];
#else
      const __m256i sc = _mm256_shuffle_epi8(j < 4 ? sc_lo : sc_hi, dup_u8(j % 4));
      __m256i s16[C];
#endif
      // The qh chunks through a pointer GCC cannot see is the same for every j: it would keep all
      // 8 in registers and spill the running sums instead.
      const uint8_t* qh = blk + 1152;
      if constexpr (kFifth) __asm__("" : "+r"(qh));
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        const __m256i raw = load256(q + static_cast<size_t>((j / 2) * 8 + s) * 32);
        __m256i w = (j & 1) ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4) : _mm256_and_si256(raw, low4);
        if constexpr (kFifth) {
          // Bit j of each qh byte to bit 4 (16-bit shifts: what crosses a byte lands outside bit 4).
          const __m256i hb = load256(qh + static_cast<size_t>(s) * 32);
          const __m256i h = j <= 4 ? _mm256_slli_epi16(hb, 4 - j) : _mm256_srli_epi16(hb, j - 4);
          w = _mm256_or_si256(w, _mm256_and_si256(h, m10));
        }
#if GENIEX_TILES_VNNI
        // One dpbusd chain per column over the sub-block's 8 chunks (|sum| <= 32 * 31 * 128 in
        // i32), then one multiply by the scale: the same exact i32 as the maddubs / madd sums.
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          s32[c] = geniex_dpbusd256(s == 0 ? _mm256_setzero_si256() : s32[c], w,
                                           bcast4(ab + c * as + kActQs + 32 * j + 4 * s));
          keep(s32[c]);
        }
        if (s == 7) {
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
            const __m256i t = _mm256_mullo_epi32(s32[c], sc);
            isum[c] = j == 0 ? t : _mm256_add_epi32(isum[c], t);
            keep(isum[c]);
          }
        }
#else
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256i p = _mm256_maddubs_epi16(w, bcast4(ab + c * as + kActQs + 32 * j + 4 * s));
          s16[c] = s % kChunksPerSum == 0 ? p : _mm256_add_epi16(s16[c], p);
          keep(s16[c]);
        }
        if (s % kChunksPerSum == kChunksPerSum - 1) {
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
            const __m256i t = _mm256_madd_epi16(s16[c], sc);
            isum[c] = j == 0 && s == kChunksPerSum - 1 ? t : _mm256_add_epi32(isum[c], t);
            keep(isum[c]);
          }
        }
#endif
      }
    }
    // Q5_K computes the min term after the quants: its decode needs the registers.
    if constexpr (kFifth) q4_k_min_term<C>(mn_lo, mn_hi, ss, ss_stride, b, imin);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const __m256 da = _mm256_set1_ps(load_f32(ab + c * as));
      // Q5_K keeps the running f32 sums in `out` (the registers go to its decode; kept in them,
      // the integer running sums spilled instead), with the same operations.
      __m256 a0 = acc[c];
      if constexpr (kFifth) a0 = b == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(out + c * os);
      a0 = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(isum[c]), a0);
      a0 = _mm256_fnmadd_ps(_mm256_mul_ps(mw, da), _mm256_cvtepi32_ps(imin[c]), a0);
      if constexpr (kFifth) {
        _mm256_storeu_ps(out + c * os, a0);
      } else {
        acc[c] = a0;
      }
    }
  }
  if constexpr (!kFifth) {
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + c * os, acc[c]);
  }
}

// ---- Q6_K x 8 ------------------------------------------------------------------------------
// Group block: d[8] (fp16), the 16 int8 scales as 4 chunks, 32 ql chunks, 16 qh chunks.
// Within half n (128 elements), ql chunk 16n + 8h + t (t < 8) holds elements 32h + 4t.. in its
// low nibbles and 64 + 32h + 4t.. in its high nibbles; qh chunk 8n + t holds bits 4-5 of
// elements 32Q + 4t.. at bits 2Q, 2Q+1 (Q = 0..3).
//
// Quants are used unsigned (0..63) and the offset comes off per row exactly:
// sum (q - 32) a sc = sum q a sc - 32 sum_j sc_j bsums_j. The running sum starts at the offset
// term, a madd of (-32 sc_2j', -32 sc_2j'+1) (|.| <= 4096) with (bsums_2j', bsums_2j'+1).
// Bounds: maddubs pair <= 2 * 63 * 128 = 16128, two chunks in i16 <= 32256; x scale
// (|sc| <= 128) via madd, per super-block |sum| <= 16 * 16 * 63 * 128 * 128 = 2.7e8; offset
// term <= 32 * 16 * 128 * 2048 = 1.4e8.
//
// Registers: each chunk pair is decoded once and then finished column by column (two maddubs,
// an i16 add, the scale madd), so only the C running sums, the accumulators, the pair and the
// sub-block's scales stay live: with the i16 pair sums of every column live across the pair
// (and a separate offset sum per column) the 4-column tile spilled a running sum, whose chain
// of adds then went through a store and a reload for every madd.
template <int C>
__attribute__((noinline)) void q6_k_tile(int64_t nb, const uint8_t* grp, const uint8_t* a, size_t as, const SubSums* /*ss*/,
               int64_t /*ss_stride*/, float* out, int64_t os) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i m30 = _mm256_set1_epi8(0x30);
#if !GENIEX_TILES_VNNI
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
#endif
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = grp + static_cast<size_t>(b) * kQ6KBlock;
    if constexpr (C == 1) prefetch_block(blk + kPrefetchBytes, kQ6KBlock);
    const uint8_t* ab = a + static_cast<size_t>(b) * kActBytes;
    __m256i isum[C];
#pragma GCC unroll 8
    for (int jp = 0; jp < 8; ++jp) {
      const int i = 2 * (jp % 2);
      const __m256i pair = _mm256_srai_epi16(_mm256_shuffle_epi8(load256(blk + 16 + 32 * (jp / 2)), hi_u8(i, i + 1)), 8);
      const __m256i neg32 = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(pair, 5));
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const __m256i bs = bcast4(ab + c * as + kActBsums + 4 * jp);
#if GENIEX_TILES_VNNI
        isum[c] = geniex_dpwssd256(jp == 0 ? _mm256_setzero_si256() : isum[c], neg32, bs);
#else
        const __m256i t = _mm256_madd_epi16(neg32, bs);
        isum[c] = jp == 0 ? t : _mm256_add_epi32(isum[c], t);
#endif
        keep(isum[c]);
      }
    }
    // The scales again, through a pointer the compiler cannot match with the loads above, so
    // that it loads each chunk of scales where a sub-block needs it instead of keeping all four
    // in registers across the block.
    const uint8_t* scales = blk + 16;
    __asm__("" : "+r"(scales));
    const uint8_t* ql = blk + 144;
    const uint8_t* qh = blk + 1168;
#pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {
#pragma GCC unroll 4
      for (int Q = 0; Q < 4; ++Q) {
#pragma GCC unroll 2
        for (int u = 0; u < 2; ++u) {
          const int sb = 8 * n + 2 * Q + u;
#if GENIEX_TILES_VNNI
          const __m256i sc = _mm256_srai_epi32(_mm256_shuffle_epi8(load256(scales + 32 * (sb / 4)), top_u8(sb % 4)), 24);
          __m256i s32[C];
#else
          const __m256i sc = _mm256_srai_epi16(_mm256_shuffle_epi8(load256(scales + 32 * (sb / 4)), hi_u8(sb % 4, sb % 4)), 8);
#endif
#pragma GCC unroll 2
          for (int ip = 0; ip < 2; ++ip) {
            __m256i w[2];
            for (int k = 0; k < 2; ++k) {
              const int t = 4 * u + 2 * ip + k;
              const __m256i l = load256(ql + static_cast<size_t>(16 * n + 8 * (Q & 1) + t) * 32);
              const __m256i h = load256(qh + static_cast<size_t>(8 * n + t) * 32);
              const __m256i lo = Q < 2 ? _mm256_and_si256(l, low4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), low4);
              __m256i hb;
              if (Q == 0) {
                hb = _mm256_and_si256(_mm256_slli_epi16(h, 4), m30);
              } else if (Q == 1) {
                hb = _mm256_and_si256(_mm256_slli_epi16(h, 2), m30);
              } else if (Q == 2) {
                hb = _mm256_and_si256(h, m30);
              } else {
                hb = _mm256_and_si256(_mm256_srli_epi16(h, 2), m30);
              }
              w[k] = _mm256_or_si256(lo, hb);
            }
            const int t0 = 4 * u + 2 * ip;
#pragma GCC unroll 4
            for (int c = 0; c < C; ++c) {
              const uint8_t* ac = ab + c * as + kActQs + 128 * n + 32 * Q + 4 * t0;
#if GENIEX_TILES_VNNI
              // The sub-block's 4 chunks in one dpbusd chain per column (|sum| <= 16 * 63 * 128).
              s32[c] = geniex_dpbusd256(ip == 0 ? _mm256_setzero_si256() : s32[c], w[0], bcast4(ac));
              s32[c] = geniex_dpbusd256(s32[c], w[1], bcast4(ac + 4));
              keep(s32[c]);
#else
              const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(w[0], bcast4(ac)), _mm256_maddubs_epi16(w[1], bcast4(ac + 4)));
              isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, sc));
              keep(isum[c]);
#endif
            }
          }
#if GENIEX_TILES_VNNI
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
            isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(s32[c], sc));
            keep(isum[c]);
          }
#endif
        }
      }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const __m256 da = _mm256_set1_ps(load_f32(ab + c * as));
#if GENIEX_TILES_VNNI
      // With VNNI the running f32 sums live in `out` (as Q5_K's above): the i32 sub-block chains
      // need the registers. The same operations.
      const __m256 a0 = b == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(out + c * os);
      _mm256_storeu_ps(out + c * os, _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(isum[c]), a0));
#else
      acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(isum[c]), acc[c]);
#endif
    }
  }
#if !GENIEX_TILES_VNNI
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + c * os, acc[c]);
#endif
}

// ---- drivers -------------------------------------------------------------------------------

using TileFn = void (*)(int64_t, const uint8_t*, const uint8_t*, size_t, const SubSums*, int64_t, float*, int64_t);

// Columns in blocks that fit in L2 (~256 KiB of activations); per block, each group of 8 rows
// (a few KiB of weights, kept in L1) against every column tile of the block.
template <size_t kGroupBlock, bool kSubSums, TileFn T4, TileFn T3, TileFn T2, TileFn T1>
void gemm_kx8(int64_t n, const void* w, size_t /*w_stride*/, int64_t n_rows, const void* a, size_t a_stride,
              int64_t n_cols, float* out, int64_t out_stride) {
  const int64_t nb = n / 256;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  // Sub-block sums once per call, shared by every row group.
  thread_local std::vector<SubSums> sums;
  const SubSums* ss = nullptr;
  if constexpr (kSubSums) {
    const auto total = static_cast<size_t>(n_cols * nb);
    if (sums.size() < total) sums.resize(total);
    for (int64_t c = 0; c < n_cols; ++c) {
      for (int64_t b = 0; b < nb; ++b) {
        const auto* bs = reinterpret_cast<const int16_t*>(ab + static_cast<size_t>(c) * a_stride +
                                                          static_cast<size_t>(b) * kActBytes + kActBsums);
        SubSums& d = sums[static_cast<size_t>(c * nb + b)];
        for (int j = 0; j < 8; ++j) d.v[j] = static_cast<int16_t>(bs[2 * j] + bs[2 * j + 1]);
      }
    }
    ss = sums.data();
  }
  const int64_t groups = n_rows / 8;
  const int64_t cb = l2_column_chunk(static_cast<int64_t>(a_stride), kColTile);
  for (int64_t cb0 = 0; cb0 < n_cols; cb0 += cb) {
    const int64_t cb1 = std::min(n_cols, cb0 + cb);
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* grp = wb + static_cast<size_t>(g * nb) * kGroupBlock;
      float* og = out + g * 8;
      int64_t c = cb0;
      for (; c + kColTile <= cb1; c += kColTile) {
        T4(nb, grp, ab + static_cast<size_t>(c) * a_stride, a_stride, ss ? ss + c * nb : nullptr, nb,
           og + c * out_stride, out_stride);
      }
      const uint8_t* ac = ab + static_cast<size_t>(c) * a_stride;
      const SubSums* sc = ss ? ss + c * nb : nullptr;
      switch (cb1 - c) {
        case 3: T3(nb, grp, ac, a_stride, sc, nb, og + c * out_stride, out_stride); break;
        case 2: T2(nb, grp, ac, a_stride, sc, nb, og + c * out_stride, out_stride); break;
        case 1: T1(nb, grp, ac, a_stride, sc, nb, og + c * out_stride, out_stride); break;
        default: break;
      }
    }
  }
}

// The includer's kernels for the three K layouts: its gemm, packed_k.cpp's repack and row
// read-back. Names are fixed by the first call (each includer calls with its own constants).
inline const PackedKernels* k_kernels(DType t, const char* q4_name, const char* q5_name, const char* q6_name) {
  static const PackedKernels q4_k{
      q4_name, &gemm_kx8<kQ4KBlock, true, &q4_k_tile<4>, &q4_k_tile<3>, &q4_k_tile<2>, &q4_k_tile<1>>,
      &dequantize_q4_kx8_row, &repack_q4_kx8};
  static const PackedKernels q5_k{
      q5_name, &gemm_kx8<kQ5KBlock, true, &q4_k_tile<4, true>, &q4_k_tile<3, true>, &q4_k_tile<2, true>, &q4_k_tile<1, true>>,
      &dequantize_q5_kx8_row, &repack_q5_kx8};
  static const PackedKernels q6_k{
      q6_name, &gemm_kx8<kQ6KBlock, false, &q6_k_tile<4>, &q6_k_tile<3>, &q6_k_tile<2>, &q6_k_tile<1>>,
      &dequantize_q6_kx8_row, &repack_q6_kx8};
  switch (t) {
    case DType::Q4_K: return &q4_k;
    case DType::Q5_K: return &q5_k;
    case DType::Q6_K: return &q6_k;
    default: return nullptr;
  }
}
