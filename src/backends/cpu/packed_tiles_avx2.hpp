// The AVX2 packed 8-row layouts and their register tiles, included inside an anonymous namespace
// by packed_tiles_avx2.cpp (AVX2 + FMA + F16C: maddubs, i16 sums, madd) and by
// packed_tiles_avxvnni.cpp (the same with AVX-VNNI: one vpdpbusd per quant vector and column, in
// place of maddubs + add, and the block's madd), so each file has its own copy compiled for its
// instruction set. The includer defines GENIEX_TILES_VNNI to 0 or 1 first.
//
// Both give every output the same bits: the integer block sums are exact either way (no i16
// saturation for the operands below, no overflow in i32), and the float work after them is the
// same instructions in the same order.
//
// Expects <immintrin.h>, <algorithm>, <cstring>, <vector>, kernels_internal.hpp and
// quant/quant.hpp to be included. The AVX-512 x8 layouts (packed.hpp) are separate and not
// shared with these.
//
// Layouts: rows in groups of 8; per group and 32-element block (the size of the file's 8 blocks,
// so row r, a multiple of 8, still starts at r * row_bytes):
//   q4_0x8_avx2: 8 fp16 d, then 4 x 32 quant bytes                           (144 bytes)
//   q4_1x8_avx2: 8 fp16 d, 8 fp16 m, then 4 x 32 quant bytes                 (160 bytes)
//   q8_0x8_avx2: 8 fp16 d, then 8 x 32 quant bytes                           (272 bytes)
//   q5_0x8_avx2: 8 fp16 d, 32 bytes of high bits, then 4 x 32 quant bytes   (176 bytes)
//   q5_1x8_avx2: 8 fp16 d, 8 fp16 m, 32 bytes of high bits, 4 x 32 quant bytes (192 bytes)
// Quant vector j (32 bytes) holds, in its i32 lane r, row r's file bytes 4j..4j+3: one ymm load
// gives 8 rows x 4 bytes, and the matching 4 activation bytes are one vpbroadcastd. For the 4-bit
// types vector j's low nibbles are elements 4j..4j+3 and its high nibbles 16+4j..16+4j+3. Q5_0's
// and Q5_1's high bits are rearranged so that bit s of byte i is the fifth bit of the element in byte i of
// nibble vector s (s = 0..3: low nibbles of vector s; 4..7: high nibbles of vector s - 4): one
// shift and one and per nibble vector.
//
// Tile: 8 rows x C columns (C <= 4). Per block each quant vector is decoded once and multiplied
// (maddubs, or dpbusd with VNNI) with every column's broadcast activation dword. Without VNNI,
// the 4-bit products are summed in i16 over the whole block (at most 8 x 2 x 15 x 128 = 30720 for Q4; Q5 in two halves of at most
// 4 x 2 x 31 x 128 = 31744: no saturation), then one madd gives each row's exact block sum in its
// i32 lane. Q8_0 uses maddubs(|w|, a * sign(w)), whose pairs already fill i16: one madd per
// vector. The offsets of Q4_0 / Q5_0 (8, 16) come off as an exact -offset * sum(a) per column and
// block. Float work per block and column: one convert, one scale product, one fma (and Q4_1's
// or Q5_1's min term). Each column's arithmetic is the same whatever C is, so decode (one column) and
// prefill give the same bits.
//
// Rounding: a block's exact integer sum is converted once and fma'd into one float per row,
// where the file layout's AVX2 kernel (as llama.cpp's vec_dot) keeps 8 float lanes per row, so
// results differ from the unpacked path by float rounding (fewer roundings here). The real
// SmolLM2 amplifies such differences in long greedy runs (LlamaCppParity's teacher-forced
// near-ties). GENIEX_AVX2_EXACT=1 selects tile_exact for every column instead: the file layout's
// arithmetic bit for bit, at about half the tiles' prefill speed.

#if GENIEX_TILES_VNNI
#include "backends/cpu/vnni256.hpp"  // geniex_dpbusd256
#endif

enum class Fmt { Q4_0, Q4_1, Q8_0, Q5_0, Q5_1 };

// Formats with a per-row min (m_w s_a term) and with a fifth bit per quant.
constexpr bool has_min(Fmt f) { return f == Fmt::Q4_1 || f == Fmt::Q5_1; }
constexpr bool has_fifth(Fmt f) { return f == Fmt::Q5_0 || f == Fmt::Q5_1; }

template <Fmt F>
struct Traits;
template <>
struct Traits<Fmt::Q4_0> {
  using Block = quant::BlockQ4_0;
  static constexpr DType kType = DType::Q4_0;
  static constexpr int kFields = 1;       // fp16 per-row fields in the file block (d)
  static constexpr size_t kHigh = 0;      // high-bit bytes per row in the file block
  static constexpr size_t kQBytes = 16;   // quant bytes per row
  static constexpr size_t kActBytes = sizeof(quant::BlockQ8_0);
  static constexpr size_t kActQOff = 2;
};
template <>
struct Traits<Fmt::Q4_1> {
  using Block = quant::BlockQ4_1;
  static constexpr DType kType = DType::Q4_1;
  static constexpr int kFields = 2;
  static constexpr size_t kHigh = 0;
  static constexpr size_t kQBytes = 16;
  static constexpr size_t kActBytes = sizeof(quant::BlockQ8_1);
  static constexpr size_t kActQOff = 4;
};
template <>
struct Traits<Fmt::Q8_0> {
  using Block = quant::BlockQ8_0;
  static constexpr DType kType = DType::Q8_0;
  static constexpr int kFields = 1;
  static constexpr size_t kHigh = 0;
  static constexpr size_t kQBytes = 32;
  static constexpr size_t kActBytes = sizeof(quant::BlockQ8_0);
  static constexpr size_t kActQOff = 2;
};
template <>
struct Traits<Fmt::Q5_0> {
  using Block = quant::BlockQ5_0;
  static constexpr DType kType = DType::Q5_0;
  static constexpr int kFields = 1;
  static constexpr size_t kHigh = 4;
  static constexpr size_t kQBytes = 16;
  static constexpr size_t kActBytes = sizeof(quant::BlockQ8_0);
  static constexpr size_t kActQOff = 2;
};

template <>
struct Traits<Fmt::Q5_1> {
  using Block = quant::BlockQ5_1;
  static constexpr DType kType = DType::Q5_1;
  static constexpr int kFields = 2;
  static constexpr size_t kHigh = 4;
  static constexpr size_t kQBytes = 16;
  static constexpr size_t kActBytes = sizeof(quant::BlockQ8_1);
  static constexpr size_t kActQOff = 4;
};

template <Fmt F>
struct Layout {
  using T = Traits<F>;
  static constexpr size_t kHead = 16 * T::kFields;      // the 8 rows' fp16 fields, field-major
  static constexpr size_t kHighOff = kHead;             // Q5_0, Q5_1: 32 bytes of rearranged high bits
  static constexpr size_t kQOff = kHead + 8 * T::kHigh;
  static constexpr size_t kBlockBytes = kQOff + 8 * T::kQBytes;
  static_assert(kBlockBytes == 8 * sizeof(typename T::Block));
};

// The fifth bit (Q5_0, Q5_1) of element e (0..31) in rearranged form: nibble vector s and the byte
// within it (lane r = row, byte k of the lane).
constexpr void q5_bit_place(int e, int* s, int* k) {
  if (e < 16) {
    *s = e / 4;
  } else {
    *s = 4 + (e - 16) / 4;
  }
  *k = e % 4;
}
// So element e = 4 s + k: byte k of a row's 4 high-bit bytes holds at bit s the fifth bit of
// element 4 s + k, which is how repack and dequantize_row below move them (a fixed shift per bit,
// no branch on the data: a branch per random bit mispredicted half the time and made Q5_0's repack
// most of a SmolLM2 Q4_K_M load).
constexpr bool q5_place_is_4s_plus_k() {
  for (int e = 0; e < 32; ++e) {
    int s = 0, k = 0;
    q5_bit_place(e, &s, &k);
    if (4 * s + k != e) return false;
  }
  return true;
}
static_assert(q5_place_is_4s_plus_k());

template <Fmt F>
void repack(const void* src, void* dst, int64_t n, int64_t n_rows) {
  using T = Traits<F>;
  using L = Layout<F>;
  const int64_t nb = n / 32;
  const auto* in = static_cast<const typename T::Block*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < n_rows / 8; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + static_cast<size_t>(g * nb + b) * L::kBlockBytes;
      for (int r = 0; r < 8; ++r) {
        const auto* blk = reinterpret_cast<const uint8_t*>(&in[(g * 8 + r) * nb + b]);
        for (int f = 0; f < T::kFields; ++f) std::memcpy(o + 16 * f + 2 * r, blk + 2 * f, 2);
        const uint8_t* qs = blk + 2 * T::kFields + T::kHigh;
        for (size_t j = 0; j < T::kQBytes / 4; ++j) std::memcpy(o + L::kQOff + 32 * j + 4 * r, qs + 4 * j, 4);
        if constexpr (T::kHigh != 0) {
          uint32_t qh;
          std::memcpy(&qh, blk + 2 * T::kFields, 4);
          for (int k = 0; k < 4; ++k) {
            uint32_t v = 0;
            for (int s = 0; s < 8; ++s) v |= ((qh >> (4 * s + k)) & 1u) << s;
            o[L::kHighOff + 4 * r + k] = static_cast<uint8_t>(v);
          }
        }
      }
    }
  }
}

template <Fmt F>
void dequantize_row(const void* base, int64_t row, float* dst, int64_t n) {
  using T = Traits<F>;
  using L = Layout<F>;
  const int64_t nb = n / 32;
  const int64_t g = row / 8;
  const int r = static_cast<int>(row % 8);
  const auto* in = static_cast<const uint8_t*>(base);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = in + static_cast<size_t>(g * nb + b) * L::kBlockBytes;
    typename T::Block blk;
    auto* o = reinterpret_cast<uint8_t*>(&blk);
    for (int f = 0; f < T::kFields; ++f) std::memcpy(o + 2 * f, gb + 16 * f + 2 * r, 2);
    uint8_t* qs = o + 2 * T::kFields + T::kHigh;
    for (size_t j = 0; j < T::kQBytes / 4; ++j) std::memcpy(qs + 4 * j, gb + L::kQOff + 32 * j + 4 * r, 4);
    if constexpr (T::kHigh != 0) {
      uint32_t qh = 0;
      for (int k = 0; k < 4; ++k) {
        const uint32_t v = gb[L::kHighOff + 4 * r + k];
        for (int s = 0; s < 8; ++s) qh |= ((v >> s) & 1u) << (4 * s + k);
      }
      std::memcpy(o + 2 * T::kFields, &qh, 4);
    }
    quant::dequantize_row_ref(T::kType, &blk, dst + b * 32, 32);
  }
}

// Per activation column and block, for the exact tiles: -offset * the sum of each lane's 4
// bytes. A struct of this file's own, so that its std::vector is an internal-linkage
// instantiation: a vector<int32_t> compiled here with -mavx2 would be a weak symbol the linker
// may keep for every other file's vector<int32_t> (SIGILL on an x86 CPU without AVX2; the
// AVX-512 case of that was seen, see kernels_x8_tiles.hpp).
struct LaneCorr {
  int32_t v[8];
};

// Per activation column and block: d_a, Q4_1's / Q5_1's s_a, and for the offset formats (Q4_0: 8,
// Q5_0: 16) the exact correction -offset * sum(a).
struct ActTerm {
  float d, s;
  int32_t corr, pad;
};

template <Fmt F>
void prepare(const uint8_t* a, size_t a_stride, int64_t n_cols, int64_t nb, std::vector<ActTerm>* out) {
  using T = Traits<F>;
  const size_t n = static_cast<size_t>(n_cols * nb);
  if (out->size() < n) out->resize(n);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t c = 0; c < n_cols; ++c) {
    const uint8_t* row = a + static_cast<size_t>(c) * a_stride;
    ActTerm* t = out->data() + c * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + static_cast<size_t>(b) * T::kActBytes;
      uint16_t h[2];
      std::memcpy(h, blk, 4);
      t[b].d = _cvtsh_ss(h[0]);
      t[b].s = has_min(F) ? _cvtsh_ss(h[1]) : 0.0f;
      t[b].corr = 0;
      t[b].pad = 0;
      if constexpr (F == Fmt::Q4_0 || F == Fmt::Q5_0) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + T::kActQOff));
        const __m256i s32 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
        t[b].corr = -(F == Fmt::Q4_0 ? 8 : 16) * _mm_cvtsi128_si32(s);
      }
#if GENIEX_TILES_VNNI
      if constexpr (F == Fmt::Q8_0) {
        // The VNNI tiles take Q8_0's weights as w + 128 (w ^ 0x80, unsigned): -128 sum(a) comes
        // off. sad over a ^ 0x80 sums a + 128 per byte.
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + T::kActQOff));
        const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80))),
                                            _mm256_setzero_si256());
        const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
        const int64_t biased = _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1);
        t[b].corr = -128 * static_cast<int32_t>(biased - 32 * 128);
      }
#endif
    }
  }
}

// How many blocks ahead 1-column (decode) tiles prefetch: each block fetches the lines of
// the block kDecodePrefetchBlocks after it. At 0 those are its own lines, requested as the tile
// starts it. Zen 4 VM (bench/LOG.md, twenty-ninth session), one column from DRAM, 8 alternating
// rounds, GB/s medians at 0 against 6 blocks ahead: one thread Q4_0 27.1 / 21.9 and 23.2 / 19.9
// (two runs, better in 16 of 16 rounds), Q8_0 26.8 / 24.8; two threads Q4_0 40.7 / 34.2 in a
// fast phase, 30.6 / 29.5 in a slow one. End to end (1B Q4_0 tg64, 2 threads, 14 pairs) within
// the noise. GENIEX_X8_PREFETCH_BLOCKS overrides it for A/B builds.
#ifdef GENIEX_X8_PREFETCH_BLOCKS
constexpr size_t kDecodePrefetchBlocks = GENIEX_X8_PREFETCH_BLOCKS;
#else
constexpr size_t kDecodePrefetchBlocks = 0;
#endif

// Keeps v in a register at this point: stops GCC from reassociating the i16/i32 add chains
// into trees that hold every product of a block live at once (and spill).
inline void pin(__m256i& v) { __asm__("" : "+x"(v)); }

inline __m256i bcast32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// A block's float work for one column: the exact i32 row sums s (+ the offset correction of
// Q4_0 / Q5_0) times d_w d_a into acc, then Q4_1's / Q5_1's m_w s_a. Every tile ends a block so.
template <Fmt F>
__attribute__((always_inline)) inline __m256 finish_block(__m256i s, __m256 dw, __m256 mw, const ActTerm& t, __m256 acc) {
  if constexpr (F == Fmt::Q4_0 || F == Fmt::Q5_0) s = _mm256_add_epi32(s, _mm256_set1_epi32(t.corr));
  acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(t.d)), _mm256_cvtepi32_ps(s), acc);
  if constexpr (has_min(F)) acc = _mm256_fmadd_ps(mw, _mm256_set1_ps(t.s), acc);
  return acc;
}

// 8 rows (nb blocks from grp) x C columns (activation rows ap[c], terms tm[c]) -> out[c * os + 0..7].
template <Fmt F, int C>
void tile(int64_t nb, const uint8_t* grp, const uint8_t* a, size_t a_stride, const ActTerm* tm, int64_t tm_stride,
          float* out, int64_t os) {
  using T = Traits<F>;
  using L = Layout<F>;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  [[maybe_unused]] const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = grp + static_cast<size_t>(b) * L::kBlockBytes;
    if constexpr (C == 1) {
      // Decode streams the weights: prefetch (kDecodePrefetchBlocks; past the end does not fault).
      for (size_t off = 0; off < L::kBlockBytes; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(blk + kDecodePrefetchBlocks * L::kBlockBytes + off), _MM_HINT_T0);
      }
    }
    const uint8_t* qs = blk + L::kQOff;
    const uint8_t* ap[C];
    for (int c = 0; c < C; ++c) ap[c] = a + static_cast<size_t>(c) * a_stride + static_cast<size_t>(b) * T::kActBytes + T::kActQOff;
    __m256i sum[C];
#if GENIEX_TILES_VNNI
    __m256i sum2[C];
#endif
    if constexpr (F == Fmt::Q8_0) {
#if GENIEX_TILES_VNNI
      // w + 128 as an unsigned byte (w ^ 0x80) into dpbusd, the even chain started at the
      // column's -128 sum(a) (prepare): the same exact sum w a, no per-column sign step.
      const __m256i x80 = _mm256_set1_epi8(static_cast<char>(0x80));
#endif
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
#if GENIEX_TILES_VNNI
        const __m256i wu = _mm256_xor_si256(w, x80);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          // Two chains per column (even and odd j): dpbusd's latency, not its rate, would
          // otherwise bound a block.
          __m256i& d = j % 2 == 0 ? sum[c] : sum2[c];
          const __m256i start = j == 0 ? _mm256_set1_epi32(tm[c * tm_stride + b].corr) : _mm256_setzero_si256();
          d = geniex_dpbusd256(j < 2 ? start : d, wu, bcast32(ap[c] + 4 * j));
          pin(d);
        }
#else
        const __m256i aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          // |w| * (a * sign(w)): the unsigned-by-signed form; maddubs' pairs stay within i16
          // (|w| <= 128, |a| <= 127), so each vector needs its own madd.
          const __m256i as = _mm256_sign_epi8(bcast32(ap[c] + 4 * j), w);
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, as), ones16);
          sum[c] = j == 0 ? p : _mm256_add_epi32(sum[c], p);
          pin(sum[c]);
        }
#endif
      }
    } else {
      __m256i hb = _mm256_setzero_si256();
      if constexpr (has_fifth(F)) hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + L::kHighOff));
      [[maybe_unused]] __m256i s16[C];
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          __m256i u = h == 0 ? _mm256_and_si256(q, low4) : _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
          if constexpr (has_fifth(F)) {
            // Bit s = 4h + j of each high-bit byte goes to bit 4.
            const int s = 4 * h + j;
            __m256i bit;
            if (s < 4) {
              bit = _mm256_slli_epi16(hb, 4 - s);
            } else if (s > 4) {
              bit = _mm256_srli_epi16(hb, s - 4);
            } else {
              bit = hb;
            }
            u = _mm256_or_si256(u, _mm256_and_si256(bit, _mm256_set1_epi8(0x10)));
          }
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
#if GENIEX_TILES_VNNI
            // Two chains per column (low and high nibbles), as for Q8_0 above.
            __m256i& d = h == 0 ? sum[c] : sum2[c];
            d = geniex_dpbusd256(j == 0 ? _mm256_setzero_si256() : d, u, bcast32(ap[c] + 16 * h + 4 * j));
            pin(d);
#else
            const __m256i p = _mm256_maddubs_epi16(u, bcast32(ap[c] + 16 * h + 4 * j));
            if constexpr (has_fifth(F)) {
              // Two i16 halves (4 products of up to 2 x 31 x 128 each), summed in i32.
              if (j == 0 && h == 0) {
                s16[c] = p;
              } else if (j == 2 && h == 0) {
                sum[c] = _mm256_madd_epi16(s16[c], ones16);
                s16[c] = p;
              } else {
                s16[c] = _mm256_add_epi16(s16[c], p);
              }
            } else {
              s16[c] = j == 0 && h == 0 ? p : _mm256_add_epi16(s16[c], p);
            }
            pin(s16[c]);
#endif
          }
        }
      }
#if !GENIEX_TILES_VNNI
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const __m256i s = _mm256_madd_epi16(s16[c], ones16);
        sum[c] = has_fifth(F) ? _mm256_add_epi32(sum[c], s) : s;
      }
#endif
    }
#if GENIEX_TILES_VNNI
    for (int c = 0; c < C; ++c) sum[c] = _mm256_add_epi32(sum[c], sum2[c]);
#endif
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    __m256 mw = _mm256_setzero_ps();
    if constexpr (has_min(F)) mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      acc[c] = finish_block<F>(sum[c], dw, mw, tm[c * tm_stride + b], acc[c]);
    }
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + c * os, acc[c]);
}

// One 8-row group against columns [c0, c1): 8 x 4 tiles, then one tile for the 1-3 left.
template <Fmt F>
void columns8(int64_t nb, const uint8_t* grp, const uint8_t* ab, size_t a_stride, const ActTerm* terms, int64_t c0,
              int64_t c1, float* og, int64_t out_stride) {
  int64_t c = c0;
  for (; c + 4 <= c1; c += 4) {
    tile<F, 4>(nb, grp, ab + static_cast<size_t>(c) * a_stride, a_stride, terms + c * nb, nb, og + c * out_stride,
               out_stride);
  }
  const uint8_t* ac = ab + static_cast<size_t>(c) * a_stride;
  const ActTerm* tc = terms + c * nb;
  switch (c1 - c) {
    case 3: tile<F, 3>(nb, grp, ac, a_stride, tc, nb, og + c * out_stride, out_stride); break;
    case 2: tile<F, 2>(nb, grp, ac, a_stride, tc, nb, og + c * out_stride, out_stride); break;
    case 1: tile<F, 1>(nb, grp, ac, a_stride, tc, nb, og + c * out_stride, out_stride); break;
    default: break;
  }
}

#if !GENIEX_TILES_VNNI
// 16 rows (the 8-row groups at grp and grp + gstride) x C columns (C <= 3), for the 4-bit
// formats with maddubs. Each broadcast activation dword feeds both groups' maddubs, so a block
// costs 3.7 vector operations per 32 products where the 8 x 4 tile costs 4.5 (the broadcasts
// run on the vector pipes of AMD's Zen cores, where this tile is bound by those pipes). Every
// row's integer sums and float operations are those of tile<F, C> in the same order: the same
// bits.
template <Fmt F, int C>
void tile16(int64_t nb, const uint8_t* grp, size_t gstride, const uint8_t* a, size_t a_stride, const ActTerm* tm,
            int64_t tm_stride, float* out, int64_t os) {
  static_assert(F == Fmt::Q4_0 || F == Fmt::Q4_1, "the 4-bit formats without a fifth bit");
  using T = Traits<F>;
  using L = Layout<F>;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[2][C];
  for (int g = 0; g < 2; ++g) {
    for (int c = 0; c < C; ++c) acc[g][c] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk[2] = {grp + static_cast<size_t>(b) * L::kBlockBytes,
                             grp + gstride + static_cast<size_t>(b) * L::kBlockBytes};
    const uint8_t* ap[C];
    for (int c = 0; c < C; ++c) ap[c] = a + static_cast<size_t>(c) * a_stride + static_cast<size_t>(b) * T::kActBytes + T::kActQOff;
    __m256i s16[2][C];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m256i u[2];
        for (int g = 0; g < 2; ++g) {
          const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[g] + L::kQOff + 32 * j));
          u[g] = h == 0 ? _mm256_and_si256(q, low4) : _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        }
#pragma GCC unroll 3
        for (int c = 0; c < C; ++c) {
          const __m256i av = bcast32(ap[c] + 16 * h + 4 * j);
          for (int g = 0; g < 2; ++g) {
            const __m256i p = _mm256_maddubs_epi16(u[g], av);
            s16[g][c] = j == 0 && h == 0 ? p : _mm256_add_epi16(s16[g][c], p);
            pin(s16[g][c]);
          }
        }
      }
    }
    for (int g = 0; g < 2; ++g) {
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[g])));
      __m256 mw = _mm256_setzero_ps();
      if constexpr (has_min(F)) mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[g] + 16)));
#pragma GCC unroll 3
      for (int c = 0; c < C; ++c) {
        acc[g][c] = finish_block<F>(_mm256_madd_epi16(s16[g][c], ones16), dw, mw, tm[c * tm_stride + b], acc[g][c]);
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    _mm256_storeu_ps(out + c * os, acc[0][c]);
    _mm256_storeu_ps(out + c * os + 8, acc[1][c]);
  }
}
#endif

// One column with the file layout's AVX2 arithmetic (kernels_avx2.cpp, as llama.cpp's vec_dot):
// per row 8 float lanes, lane i holding elements 4i..4i+3 of every block (our quant vector i for
// i < 4, high nibbles of vector i - 4 above; for Q8_0 vector i), each block's lane sum (offset
// taken off per lane) converted and fma'd with the rounded d_w d_a, Q4_1's m_w s_a summed apart,
// the same final horizontal sum: the very bits of the unpacked path. acc[i] holds lane i of the
// 8 rows. Used for every column with GENIEX_AVX2_EXACT=1.
template <Fmt F>
void tile_exact(int64_t nb, const uint8_t* grp, const uint8_t* a, const ActTerm* tm, const LaneCorr* lane_corr,
                float* out) {
  using T = Traits<F>;
  using L = Layout<F>;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
  __m256 macc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = grp + static_cast<size_t>(b) * L::kBlockBytes;
    // Decode streams the weights: prefetch (kDecodePrefetchBlocks; past the end does not fault).
    for (size_t off = 0; off < L::kBlockBytes; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(blk + kDecodePrefetchBlocks * L::kBlockBytes + off), _MM_HINT_T0);
    }
    const uint8_t* qs = blk + L::kQOff;
    const uint8_t* ap = a + static_cast<size_t>(b) * T::kActBytes + T::kActQOff;
    const __m256 scale = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk))),
                                       _mm256_set1_ps(tm[b].d));
    if constexpr (F == Fmt::Q4_1) {
      const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
      macc = _mm256_add_ps(macc, _mm256_mul_ps(mw, _mm256_set1_ps(tm[b].s)));
    }
    __m256i hb = _mm256_setzero_si256();
    if constexpr (F == Fmt::Q5_0) hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + L::kHighOff));
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      __m256i lane;
      if constexpr (F == Fmt::Q8_0) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * i));
        lane = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(bcast32(ap + 4 * i), w)),
                                 ones16);
      } else {
        const int j = i % 4, h = i / 4;
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
        __m256i u = h == 0 ? _mm256_and_si256(q, low4) : _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        if constexpr (F == Fmt::Q5_0) {
          __m256i bit = i < 4 ? _mm256_slli_epi16(hb, 4 - i) : i > 4 ? _mm256_srli_epi16(hb, i - 4) : hb;
          u = _mm256_or_si256(u, _mm256_and_si256(bit, _mm256_set1_epi8(0x10)));
        }
        lane = _mm256_madd_epi16(_mm256_maddubs_epi16(u, bcast32(ap + 16 * h + 4 * j)), ones16);
        if constexpr (F == Fmt::Q4_0 || F == Fmt::Q5_0) lane = _mm256_add_epi32(lane, _mm256_set1_epi32(lane_corr[b].v[i]));
      }
      acc[i] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(lane), acc[i]);
    }
  }
  __m256 r = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6])),
                           _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7])));
  if constexpr (F == Fmt::Q4_1) r = _mm256_add_ps(r, macc);
  _mm256_storeu_ps(out, r);
}

// Per block of one activation column: -offset * (sum of lane i's 4 bytes), i = 0..7.
template <Fmt F>
void prepare_lane_corr(const uint8_t* a, size_t a_stride, int64_t n_cols, int64_t nb, std::vector<LaneCorr>* out) {
  using T = Traits<F>;
  if (out->size() < static_cast<size_t>(nb * n_cols)) out->resize(static_cast<size_t>(nb * n_cols));
  const __m256i off = _mm256_set1_epi8(F == Fmt::Q5_0 ? 16 : 8);
  for (int64_t c = 0; c < n_cols; ++c) {
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + c * a_stride + static_cast<size_t>(b) * T::kActBytes + T::kActQOff));
      const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(off, q), _mm256_set1_epi16(1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>((*out)[static_cast<size_t>(c * nb + b)].v),
                          _mm256_sub_epi32(_mm256_setzero_si256(), s));
    }
  }
}

#if !GENIEX_TILES_VNNI
// Pairs of 8-row groups through tile16 (3 columns per tile), an odd last group and one-column
// calls (decode) through the 8-row tiles: the same bits either way.
template <Fmt F>
void gemm16(int64_t nb, const uint8_t* wb, int64_t n_rows, const uint8_t* ab, size_t a_stride, int64_t n_cols,
            const ActTerm* terms, float* out, int64_t out_stride) {
  using L = Layout<F>;
  constexpr int kCols = 3;  // 16 x 2 measured 1.05x the 8 x 4 tile, 16 x 3 1.14x (Zen 3)
  const size_t gstride = static_cast<size_t>(nb) * L::kBlockBytes;
  const int64_t groups = n_rows / 8;
  const int64_t chunk = l2_column_chunk(static_cast<int64_t>(a_stride), kCols);
  for (int64_t c0 = 0; c0 < n_cols; c0 += chunk) {
    const int64_t c1 = std::min(n_cols, c0 + chunk);
    for (int64_t g = 0; g < groups; g += 2) {
      const uint8_t* grp = wb + static_cast<size_t>(g) * gstride;
      float* og = out + g * 8;
      int64_t c = c0;
      if (g + 1 < groups) {
        for (; c + kCols <= c1; c += kCols) {
          tile16<F, kCols>(nb, grp, gstride, ab + static_cast<size_t>(c) * a_stride, a_stride, terms + c * nb, nb,
                           og + c * out_stride, out_stride);
        }
        const uint8_t* ac = ab + static_cast<size_t>(c) * a_stride;
        const ActTerm* tc = terms + c * nb;
        switch (c1 - c) {
          case 2: tile16<F, 2>(nb, grp, gstride, ac, a_stride, tc, nb, og + c * out_stride, out_stride); break;
          case 1: tile16<F, 1>(nb, grp, gstride, ac, a_stride, tc, nb, og + c * out_stride, out_stride); break;
          default: break;
        }
        continue;
      }
      columns8<F>(nb, grp, ab, a_stride, terms, c0, c1, og, out_stride);
    }
  }
}
#endif

// kRows16: the 4-bit formats (Q4_0, Q4_1) through gemm16 when a call has several columns.
template <Fmt F, bool kExact, bool kRows16 = false>
void gemm(int64_t n, const void* w, size_t /*w_stride*/, int64_t n_rows, const void* a, size_t a_stride,
          int64_t n_cols, float* out, int64_t out_stride) {
  using L = Layout<F>;
  constexpr int kCols = 4;
  const int64_t nb = n / 32;
  thread_local std::vector<ActTerm> terms;
  const auto* ab = static_cast<const uint8_t*>(a);
  prepare<F>(ab, a_stride, n_cols, nb, &terms);
  const auto* wb = static_cast<const uint8_t*>(w);
  if constexpr (kExact) {
    thread_local std::vector<LaneCorr> lane_corr;
    if constexpr (F == Fmt::Q4_0 || F == Fmt::Q5_0) prepare_lane_corr<F>(ab, a_stride, n_cols, nb, &lane_corr);
    for (int64_t g = 0; g < n_rows / 8; ++g) {
      for (int64_t c = 0; c < n_cols; ++c) {
        tile_exact<F>(nb, wb + static_cast<size_t>(g * nb) * L::kBlockBytes, ab + c * a_stride, terms.data() + c * nb,
                      lane_corr.data() + c * nb, out + c * out_stride + g * 8);
      }
    }
    return;
  }
#if !GENIEX_TILES_VNNI
  if constexpr (kRows16 && (F == Fmt::Q4_0 || F == Fmt::Q4_1)) {
    if (n_cols > 1) {
      gemm16<F>(nb, wb, n_rows, ab, a_stride, n_cols, terms.data(), out, out_stride);
      return;
    }
  }
#endif
  // Columns in chunks whose activations stay in L2 (~256 KiB) while every row group passes
  // over them; within a chunk each group (8 rows) stays in L1 across the column tiles.
  const int64_t chunk = l2_column_chunk(static_cast<int64_t>(a_stride), kCols);
  for (int64_t c0 = 0; c0 < n_cols; c0 += chunk) {
    const int64_t c1 = std::min(n_cols, c0 + chunk);
    for (int64_t g = 0; g < n_rows / 8; ++g) {
      columns8<F>(nb, wb + static_cast<size_t>(g * nb) * L::kBlockBytes, ab, a_stride, terms.data(), c0, c1,
                  out + g * 8, out_stride);
    }
  }
}

#if GENIEX_TILES_VNNI
#undef geniex_dpbusd256
#endif
