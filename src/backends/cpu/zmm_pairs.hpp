// Helpers for the 16-row AVX-512 tiles that hold two consecutive 8-row groups of an 8-row layout
// side by side in one zmm (rows 0-7 of the pair in i32 lanes 0-7, rows 8-15 in lanes 8-15):
// packed_k_tiles_avx512.cpp, packed_tiles16_avx512vnni.cpp, packed_k_tiles16_avx512vnni.cpp.
//
// Included inside an anonymous namespace by files compiled with AVX-512 F/BW (so each has its
// own copies, compiled for its instruction set: no inline function is shared with files built
// for other CPUs). Expects <immintrin.h>, <cstdint> and <cstring>.

// 32 bytes at g0 + off (lanes 0-7) and at g1 + off (lanes 8-15).
inline __m512i pair_chunk(const uint8_t* g0, const uint8_t* g1, size_t off) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g0 + off))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g1 + off)), 1);
}

// 8 fp16 at g0 + off and 8 at g1 + off as 16 floats.
inline __m512 pair_ph(const uint8_t* g0, const uint8_t* g1, size_t off) {
  const __m256i h =
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g0 + off))),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(g1 + off)), 1);
  return _mm512_cvtph_ps(h);
}

// The 4 bytes at p in every i32 lane.
inline __m512i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Byte-shuffle patterns over registers with 4 bytes per row (row r in i32 lane r), the same in
// every 128-bit lane: `base` names the bytes of lane 0 (0x80: zero).
inline __m512i lane_pattern(uint32_t base) {
  const __m512i lane = _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c));
  return _mm512_add_epi8(_mm512_set1_epi32(static_cast<int32_t>(base)), lane);
}
// Byte i of each lane zero-extended to an i32.
inline __m512i u8_i32(int i) { return lane_pattern(0x80808000u | static_cast<uint32_t>(i)); }
// Bytes i and k of each lane zero-extended to the two i16 halves.
inline __m512i pair_u8(int i, int k) {
  return lane_pattern(0x80008000u | static_cast<uint32_t>(k) << 16 | static_cast<uint32_t>(i));
}
// Bytes i and k of each lane as (byte << 8) i16 halves: srai by 8 sign-extends them.
inline __m512i hi_u8(int i, int k) {
  return lane_pattern(static_cast<uint32_t>(k) << 24 | 0x00800000u | static_cast<uint32_t>(i) << 8 | 0x80u);
}
// Byte i of each lane in the top byte of the i32: srai by 24 sign-extends it.
inline __m512i top_u8(int i) { return lane_pattern(static_cast<uint32_t>(i) << 24 | 0x00808080u); }

// An empty asm that makes v's current value opaque: keeps GCC from regrouping running sums into
// trees of temporaries.
inline void keep(__m512i& v) { __asm__("" : "+v"(v)); }
