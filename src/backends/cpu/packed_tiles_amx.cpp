// AMX-INT8 prefill gemm over the AVX2 packed 8-row layouts (packed_tiles_avx2.cpp), for CPUs
// with AMX tiles (Intel Sapphire Rapids and later). Decode (fewer than 16 columns) and the
// edges (a last group of 8 rows, a last partial tile of columns) run the AVX2 tiles of the same
// layout, whose arithmetic this file reproduces: the same bits whichever path a column takes.
//
// Why those layouts: their quant vector j holds, in i32 lane r, row r's 4 quants of one K quad,
// which is the "VNNI" order of an AMX B operand (K quads as tile rows, 4 bytes per column). Two
// 8-row groups side by side make one B tile row of 16 weight rows; the 4-bit types need only an
// and / shift (and Q4_0's / Q5_0's offset taken off) to become int8.
//
// Per 16 weight rows (a row tile) every block's B tile is unpacked once into a thread-local
// buffer (512 bytes per block) with the rows' scales as f32, then reused by every tile of 16
// columns. The activations' Q8_0 / Q8_1 / Q8_K quants are the A tiles, one token per tile row,
// copied once per call into contiguous 16-row tiles (stage_a_tiles). Per block and tile one
// TDPBSSD (16 x 16 x 32) gives the exact block sums sum_i (q_i - offset) a_i for 16 tokens x 16
// rows, which AVX-512
// turns into floats as the AVX2 tile does: acc = fma(d_w * d_a, (float)sum, acc), then Q4_1's /
// Q5_1's acc = fma(m_w, s_a, acc), blocks in order. Two C tiles alternate so the tile unit works
// on one block while the vector units finish the previous one.
#include <immintrin.h>

#include "backends/cpu/avx512_diagnostics.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>

#include "backends/cpu/kernels_internal.hpp"
#include "core/cpu_features.hpp"
#include "quant/quant.hpp"
#include "quant/quant_k.hpp"

namespace geniex::cpu::amx {
namespace {

enum class Fmt { Q4_0, Q4_1, Q8_0, Q5_0, Q5_1 };

constexpr bool has_min(Fmt f) { return f == Fmt::Q4_1 || f == Fmt::Q5_1; }
constexpr bool has_fifth(Fmt f) { return f == Fmt::Q5_0 || f == Fmt::Q5_1; }

// The AVX2 layouts' fields (packed_tiles_avx2.cpp): per 8-row group and block, the rows' fp16
// fields (d, then m), Q5's 32 bytes of rearranged fifth bits, then the quant vectors.
template <Fmt F>
struct Traits;
template <>
struct Traits<Fmt::Q4_0> {
  static constexpr DType kType = DType::Q4_0;
  static constexpr int kFields = 1, kHigh = 0, kQBytes = 16, kOffset = 8;
  static constexpr size_t kActBytes = sizeof(quant::BlockQ8_0), kActQOff = 2;
};
template <>
struct Traits<Fmt::Q4_1> {
  static constexpr DType kType = DType::Q4_1;
  static constexpr int kFields = 2, kHigh = 0, kQBytes = 16, kOffset = 0;
  static constexpr size_t kActBytes = sizeof(quant::BlockQ8_1), kActQOff = 4;
};
template <>
struct Traits<Fmt::Q8_0> {
  static constexpr DType kType = DType::Q8_0;
  static constexpr int kFields = 1, kHigh = 0, kQBytes = 32, kOffset = 0;
  static constexpr size_t kActBytes = sizeof(quant::BlockQ8_0), kActQOff = 2;
};
template <>
struct Traits<Fmt::Q5_0> {
  static constexpr DType kType = DType::Q5_0;
  static constexpr int kFields = 1, kHigh = 4, kQBytes = 16, kOffset = 16;
  static constexpr size_t kActBytes = sizeof(quant::BlockQ8_0), kActQOff = 2;
};
template <>
struct Traits<Fmt::Q5_1> {
  static constexpr DType kType = DType::Q5_1;
  static constexpr int kFields = 2, kHigh = 4, kQBytes = 16, kOffset = 0;
  static constexpr size_t kActBytes = sizeof(quant::BlockQ8_1), kActQOff = 4;
};

template <Fmt F>
struct Layout {
  using T = Traits<F>;
  static constexpr size_t kHighOff = 16 * T::kFields;
  static constexpr size_t kQOff = kHighOff + 8 * T::kHigh;
  static constexpr size_t kBlockBytes = kQOff + 8 * T::kQBytes;
  static_assert(kBlockBytes == 8 * static_cast<size_t>(T::kFields * 2 + T::kHigh + T::kQBytes));
};

constexpr int kTile = 16;              // rows and columns of a C tile
constexpr size_t kBTileBytes = 512;    // 8 K quads x 16 rows x 4 bytes: one block of a row tile

// The tile registers: 0, 1 C (16 tokens x 16 rows, i32); 2, 3 A (16 tokens x 32 bytes);
// 4, 5 B (8 K quads x 64 bytes).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// k_bytes: the K extent of one dot product (32 for 32-element blocks and Q4_K / Q5_K
// sub-blocks, 16 for Q6_K's sub-blocks): A is 16 x k_bytes, B k_bytes / 4 quads x 64 bytes.
void configure_tiles(int k_bytes) {
  TileConfig c;
  for (int t = 0; t < 2; ++t) {
    c.rows[t] = kTile;
    c.colsb[t] = kTile * 4;
    c.rows[2 + t] = kTile;
    c.colsb[2 + t] = static_cast<uint16_t>(k_bytes);
    c.rows[4 + t] = static_cast<uint8_t>(k_bytes / 4);
    c.colsb[4 + t] = 64;
  }
  _tile_loadconfig(&c);
}

// A 64-byte aligned buffer of this file's own (internal linkage: no weak std::vector member
// compiled for AVX-512 that the linker could pick for other files; see kernels_x8_tiles.hpp).
template <class T>
class AlignedBuf {
 public:
  AlignedBuf() = default;
  ~AlignedBuf() { release(); }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
  T* reserve(size_t n) {
    if (n > n_) {
      release();
      p_ = static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64}));
      n_ = n;
    }
    return p_;
  }

 private:
  void release() {
    if (p_ != nullptr) ::operator delete(p_, std::align_val_t{64});
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

inline __m512i concat(const uint8_t* lo, const uint8_t* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)), 1);
}

inline __m512 fields16(const uint8_t* lo, const uint8_t* hi) {
  const __m256i h = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1);
  return _mm512_cvtph_ps(h);
}

// Rows of groups g0 (rows 0..7 of the tile) and g1 (8..15), nb blocks each: every block's B tile
// as int8 (q - offset) to bq + 512 b, the rows' d to bd + 16 b and m to bm + 16 b.
template <Fmt F>
void unpack_row_tile(const uint8_t* g0, const uint8_t* g1, int64_t nb, int8_t* bq, float* bd, float* bm) {
  using T = Traits<F>;
  using L = Layout<F>;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i fifth = _mm512_set1_epi8(0x10);
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(T::kOffset));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* b0 = g0 + static_cast<size_t>(b) * L::kBlockBytes;
    const uint8_t* b1 = g1 + static_cast<size_t>(b) * L::kBlockBytes;
    _mm512_store_ps(bd + 16 * b, fields16(b0, b1));
    if constexpr (has_min(F)) _mm512_store_ps(bm + 16 * b, fields16(b0 + 16, b1 + 16));
    int8_t* o = bq + static_cast<size_t>(b) * kBTileBytes;
    if constexpr (F == Fmt::Q8_0) {
      for (int j = 0; j < 8; ++j) {
        _mm512_store_si512(o + 64 * j, concat(b0 + L::kQOff + 32 * j, b1 + L::kQOff + 32 * j));
      }
    } else {
      __m512i hb = _mm512_setzero_si512();
      if constexpr (has_fifth(F)) hb = concat(b0 + L::kHighOff, b1 + L::kHighOff);
      for (int j = 0; j < 4; ++j) {
        const __m512i q = concat(b0 + L::kQOff + 32 * j, b1 + L::kQOff + 32 * j);
        for (int h = 0; h < 2; ++h) {
          // Nibble vector (j, h) holds the elements 16 h + 4 j .. + 3 of each row: K quad 4 h + j.
          __m512i u = h == 0 ? _mm512_and_si512(q, low4) : _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
          if constexpr (has_fifth(F)) {
            const int s = 4 * h + j;  // bit s of the high-bit bytes goes to bit 4
            __m512i bit = hb;
            if (s < 4) bit = _mm512_slli_epi16(hb, static_cast<unsigned>(4 - s));
            if (s > 4) bit = _mm512_srli_epi16(hb, static_cast<unsigned>(s - 4));
            u = _mm512_or_si512(u, _mm512_and_si512(bit, fifth));
          }
          if constexpr (T::kOffset != 0) u = _mm512_sub_epi8(u, offset);
          _mm512_store_si512(o + 64 * (4 * h + j), u);
        }
      }
    }
  }
}

// The A operands of tiled_cols tokens (a multiple of 16), staged contiguously. A row's block b
// (block_bytes apart, quants from q_off) holds dots_per_block dot products of k_bytes each
// (one for the 32-element types; a K super-block's sub-blocks); for token tile ct and dot
// product p = b * dots_per_block + j the tile's 16 rows of k_bytes are at
// out + (ct * n_blocks * dots_per_block + p) * 16 * k_bytes. Loaded from there a tile is 4 or 8
// whole cache lines; from the quantized rows (34-, 36- or 292-byte blocks) it would be 16
// scattered, often line-split pieces.
void stage_a_tiles(const uint8_t* a, size_t a_stride, int64_t tiled_cols, int64_t n_blocks, size_t block_bytes,
                   size_t q_off, int dots_per_block, int k_bytes, int8_t* out) {
  const size_t tile_bytes = static_cast<size_t>(kTile * k_bytes);
  const int64_t n_dots = n_blocks * dots_per_block;
  for (int64_t ct = 0; ct < tiled_cols / kTile; ++ct) {
    for (int t = 0; t < kTile; ++t) {
      const uint8_t* row = a + static_cast<size_t>(ct * kTile + t) * a_stride + q_off;
      int8_t* o = out + static_cast<size_t>(ct * n_dots) * tile_bytes + static_cast<size_t>(t * k_bytes);
      for (int64_t b = 0; b < n_blocks; ++b) {
        for (int j = 0; j < dots_per_block; ++j) {
          std::memcpy(o + static_cast<size_t>(b * dots_per_block + j) * tile_bytes,
                      row + static_cast<size_t>(b) * block_bytes + static_cast<size_t>(j * k_bytes),
                      static_cast<size_t>(k_bytes));
        }
      }
    }
  }
}

// What the AMX tiles leave, through the edge kernels of the same layout (the same arithmetic
// per column and row): a last group of 8 rows for every column, and the columns past the last
// whole tile of 16 for the other rows.
void run_edges(const PackedKernels& edge, int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
               size_t a_stride, int64_t n_cols, float* out, int64_t out_stride) {
  const int64_t rows = n_rows / kTile * kTile;
  const int64_t cols = n_cols / kTile * kTile;
  const auto* wb = static_cast<const uint8_t*>(w);
  if (n_rows > rows) {
    edge.gemm(n, wb + static_cast<size_t>(rows) * w_stride, w_stride, n_rows - rows, a, a_stride, n_cols, out + rows,
              out_stride);
  }
  if (n_cols > cols) {
    edge.gemm(n, w, w_stride, rows, static_cast<const uint8_t*>(a) + static_cast<size_t>(cols) * a_stride, a_stride,
              n_cols - cols, out + cols * out_stride, out_stride);
  }
}

// C tile (16 tokens x 16 rows of exact block sums, at cb) into the accumulators, as the AVX2
// tile: acc = fma(d_w * d_a, (float)sum, acc), then acc = fma(m_w, s_a, acc). Token t's d_a is
// da[t * ld], its s_a sa[t * ld].
template <Fmt F>
inline void finish_block(const int32_t* cb, __m512 dw, __m512 mw, const float* da, const float* sa, int64_t ld,
                         __m512* acc) {
#pragma GCC unroll 16
  for (int t = 0; t < kTile; ++t) {
    const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(cb + kTile * t));
    acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(da[t * ld])), s, acc[t]);
    if constexpr (has_min(F)) acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sa[t * ld]), acc[t]);
  }
}

// The 32-element layouts' tiles for decode and edges: the 16-row AVX-512 VNNI tiles where the
// CPU has them (every AMX CPU so far does, unless GENIEX_CPU_DISABLE=avx512vnni), else the 8-row
// AVX-VNNI ones, else AVX2; the same bits either way.
const PackedKernels* edge_kernels(DType t) {
  static const bool zmm = cpu_features().avx512vnni;
  static const bool vnni = cpu_features().avxvnni;
  return zmm ? avx512vnni::packed_kernels_16(t) : vnni ? avxvnni::packed_kernels(t) : avx2::packed_kernels(t, false);
}

template <Fmt F>
void gemm(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a, size_t a_stride, int64_t n_cols,
          float* out, int64_t out_stride) {
  using T = Traits<F>;
  using L = Layout<F>;
  const PackedKernels* edge = edge_kernels(T::kType);
  const int64_t row_tiles = n_rows / kTile;
  const int64_t col_tiles = n_cols / kTile;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  if (row_tiles == 0 || col_tiles == 0) {
    edge->gemm(n, w, w_stride, n_rows, a, a_stride, n_cols, out, out_stride);
    return;
  }
  const int64_t nb = n / 32;
  const int64_t tiled_cols = col_tiles * kTile;

  // Activation scales (and Q8_1's s) as f32, token-major: token c's block b at c * nb + b.
  thread_local AlignedBuf<float> act_d, act_s;
  float* ad = act_d.reserve(static_cast<size_t>(tiled_cols * nb));
  float* as = act_s.reserve(has_min(F) ? static_cast<size_t>(tiled_cols * nb) : 1);
  for (int64_t c = 0; c < tiled_cols; ++c) {
    const uint8_t* row = ab + static_cast<size_t>(c) * a_stride;
    for (int64_t b = 0; b < nb; ++b) {
      uint16_t h[2];
      std::memcpy(h, row + static_cast<size_t>(b) * T::kActBytes, 4);
      ad[c * nb + b] = _cvtsh_ss(h[0]);
      if constexpr (has_min(F)) as[c * nb + b] = _cvtsh_ss(h[1]);
    }
  }

  thread_local AlignedBuf<int8_t> a_tiles;
  int8_t* aq = a_tiles.reserve(static_cast<size_t>(tiled_cols * nb * 32));
  stage_a_tiles(ab, a_stride, tiled_cols, nb, T::kActBytes, T::kActQOff, 1, 32, aq);

  thread_local AlignedBuf<int8_t> b_tiles;
  thread_local AlignedBuf<float> b_d, b_m;
  int8_t* bq = b_tiles.reserve(static_cast<size_t>(nb) * kBTileBytes);
  float* bd = b_d.reserve(static_cast<size_t>(nb) * kTile);
  float* bm = b_m.reserve(has_min(F) ? static_cast<size_t>(nb) * kTile : 1);
  alignas(64) int32_t cbuf[2][kTile * kTile];

  configure_tiles(32);
  // Columns in chunks whose activations stay in L2 while every row tile passes over them.
  const int64_t chunk = std::max<int64_t>(kTile, static_cast<int64_t>((1u << 20) / static_cast<size_t>(nb * 32)) / kTile * kTile);
  for (int64_t c0 = 0; c0 < tiled_cols; c0 += chunk) {
    const int64_t c1 = std::min(tiled_cols, c0 + chunk);
    for (int64_t rt = 0; rt < row_tiles; ++rt) {
      const uint8_t* g0 = wb + static_cast<size_t>(2 * rt * nb) * L::kBlockBytes;
      unpack_row_tile<F>(g0, g0 + static_cast<size_t>(nb) * L::kBlockBytes, nb, bq, bd, bm);
      for (int64_t c = c0; c < c1; c += kTile) {
        __m512 acc[kTile];
        for (__m512& v : acc) v = _mm512_setzero_ps();
        const int8_t* at = aq + static_cast<size_t>(c * nb * 32);
        const float* dat = ad + c * nb;
        const float* sat = has_min(F) ? as + c * nb : as;
        const __m512 zero = _mm512_setzero_ps();
        // Two C tiles alternate: the tile unit computes block b + 1 while the vector units
        // finish block b. (Running a chunk of blocks through the tile unit first and finishing
        // them afterwards measured 0.86x: bench/LOG.md.)
        int64_t b = 0;
        for (; b + 1 < nb; b += 2) {
          const size_t bo = static_cast<size_t>(b) * kBTileBytes;
          _tile_zero(0);
          _tile_loadd(2, at + bo, 32);
          _tile_loadd(4, bq + bo, 64);
          _tile_dpbssd(0, 2, 4);
          _tile_zero(1);
          _tile_loadd(3, at + bo + kBTileBytes, 32);
          _tile_loadd(5, bq + bo + kBTileBytes, 64);
          _tile_dpbssd(1, 3, 5);
          _tile_stored(0, cbuf[0], 64);
          finish_block<F>(cbuf[0], _mm512_load_ps(bd + 16 * b), has_min(F) ? _mm512_load_ps(bm + 16 * b) : zero,
                          dat + b, has_min(F) ? sat + b : sat, nb, acc);
          _tile_stored(1, cbuf[1], 64);
          finish_block<F>(cbuf[1], _mm512_load_ps(bd + 16 * (b + 1)),
                          has_min(F) ? _mm512_load_ps(bm + 16 * (b + 1)) : zero, dat + b + 1,
                          has_min(F) ? sat + b + 1 : sat, nb, acc);
        }
        if (b < nb) {
          const size_t bo = static_cast<size_t>(b) * kBTileBytes;
          _tile_zero(0);
          _tile_loadd(2, at + bo, 32);
          _tile_loadd(4, bq + bo, 64);
          _tile_dpbssd(0, 2, 4);
          _tile_stored(0, cbuf[0], 64);
          finish_block<F>(cbuf[0], _mm512_load_ps(bd + 16 * b), has_min(F) ? _mm512_load_ps(bm + 16 * b) : zero,
                          dat + b, has_min(F) ? sat + b : sat, nb, acc);
        }
        float* o = out + c * out_stride + rt * kTile;
        for (int t = 0; t < kTile; ++t) _mm512_storeu_ps(o + t * out_stride, acc[t]);
      }
    }
  }
  _tile_release();
  run_edges(*edge, n, w, w_stride, n_rows, a, a_stride, n_cols, out, out_stride);
}

// ---- K-quants ------------------------------------------------------------------------------
// Over the AVX2 K layouts (packed_k.cpp: per 8-row group and super-block each row's fields in
// 4-byte chunks, chunk k of the 8 rows together), with Q8_K activations (f32 d, 256 qs, 16
// bsums). A sub-block is one dot product: Q4_K's / Q5_K's 8 of 32 elements (the A tile 16 x 32,
// B 8 quads), Q6_K's 16 of 16 (A 16 x 16, B 4 quads). Per super-block the C tiles' exact sums
// are multiplied by the rows' integer sub-block scales and added in i32, as the AVX2 K tiles'
// madds do (bounds there), then rounded once: acc = fma(d_w d_a, (float)isum, acc) and for
// Q4_K / Q5_K acc = fnmadd(dmin_w d_a, (float)imin, acc), imin = sum_j min_j (bsums[2j] +
// bsums[2j+1]). Same integers, same float operations: the AVX2 K tiles' bits.

enum class KFmt { Q4_K, Q5_K, Q6_K };

template <KFmt F>
struct KTraits;
template <>
struct KTraits<KFmt::Q4_K> {
  static constexpr DType kType = DType::Q4_K;
  static constexpr size_t kBlock = 1152;
  static constexpr int kSubs = 8, kSubK = 32;
  static constexpr bool kMin = true, kFifth = false;
};
template <>
struct KTraits<KFmt::Q5_K> {
  static constexpr DType kType = DType::Q5_K;
  static constexpr size_t kBlock = 1408;
  static constexpr int kSubs = 8, kSubK = 32;
  static constexpr bool kMin = true, kFifth = true;
};
template <>
struct KTraits<KFmt::Q6_K> {
  static constexpr DType kType = DType::Q6_K;
  static constexpr size_t kBlock = 1680;
  static constexpr int kSubs = 16, kSubK = 16;
  static constexpr bool kMin = false;  // and no fifth bits: unpack_k_row_tile has its own branch
};

constexpr size_t kQ8KBytes = sizeof(quant::BlockQ8_K);  // f32 d, then qs at 4, bsums at 260
constexpr size_t kQ8KQs = 4, kQ8KBsums = 260;

// Row r (0..15) of a row tile: byte `i` of its chunk k in the group block pair (b0: rows 0-7).
inline uint8_t chunk_byte(const uint8_t* b0, const uint8_t* b1, size_t region, size_t k, int r, int i) {
  const uint8_t* g = r < 8 ? b0 : b1;
  return g[region + 32 * k + 4 * static_cast<size_t>(r % 8) + static_cast<size_t>(i)];
}

// Per super-block of a row tile: the B tiles (kSubs x kSubK * 16 bytes), the sub-block scales as
// i32 (kSubs x 16), Q4_K / Q5_K's mins as i16 pairs (min_2p, min_2p+1) per row (4 x 16 i32),
// d and dmin as f32.
template <KFmt F>
void unpack_k_row_tile(const uint8_t* g0, const uint8_t* g1, int64_t nb, int8_t* bq, int32_t* sc, int32_t* mnp,
                       float* bd, float* bm) {
  using T = KTraits<F>;
  constexpr size_t kTileBytes = static_cast<size_t>(T::kSubK) * kTile;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i m10 = _mm512_set1_epi8(0x10);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  const __m512i off32 = _mm512_set1_epi8(32);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* b0 = g0 + static_cast<size_t>(b) * T::kBlock;
    const uint8_t* b1 = g1 + static_cast<size_t>(b) * T::kBlock;
    _mm512_store_ps(bd + 16 * b, fields16(b0, b1));
    int8_t* o = bq + static_cast<size_t>(b * T::kSubs) * kTileBytes;
    int32_t* s = sc + b * T::kSubs * kTile;
    if constexpr (F == KFmt::Q6_K) {
      for (int r = 0; r < kTile; ++r) {
        for (int j = 0; j < 16; ++j) {
          s[j * kTile + r] = static_cast<int8_t>(chunk_byte(b0, b1, 16, static_cast<size_t>(j / 4), r, j % 4));
        }
      }
      // Sub-block sb = 8n + 2Q + u: elements 128n + 32Q + 16u.. of each row; its quad t' (K
      // elements 4t'..) is chunk t = 4u + t' of the half's ql (low / high nibbles) and qh.
      for (int n = 0; n < 2; ++n) {
        for (int t = 0; t < 8; ++t) {
          const __m512i h = concat(b0 + 1168 + 32 * (8 * n + t), b1 + 1168 + 32 * (8 * n + t));
          for (int Q = 0; Q < 4; ++Q) {
            const size_t lc = static_cast<size_t>(16 * n + 8 * (Q & 1) + t);
            const __m512i l = concat(b0 + 144 + 32 * lc, b1 + 144 + 32 * lc);
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
            const int sb = 8 * n + 2 * Q + t / 4;
            _mm512_store_si512(o + static_cast<size_t>(sb) * kTileBytes + 64 * (t % 4),
                               _mm512_sub_epi8(_mm512_or_si512(lo, hb), off32));
          }
        }
      }
    } else {
      _mm512_store_ps(bm + 16 * b, fields16(b0 + 16, b1 + 16));
      int32_t* mp = mnp + b * 4 * kTile;
      for (int r = 0; r < kTile; ++r) {
        uint8_t scales[12];
        for (int k = 0; k < 3; ++k) {
          for (int i = 0; i < 4; ++i) scales[4 * k + i] = chunk_byte(b0, b1, 32, static_cast<size_t>(k), r, i);
        }
        uint8_t d[8], m[8];
        for (int j = 0; j < 8; ++j) quant::get_scale_min_k4(j, scales, &d[j], &m[j]);
        for (int j = 0; j < 8; ++j) s[j * kTile + r] = d[j];
        for (int p = 0; p < 4; ++p) mp[p * kTile + r] = static_cast<int32_t>(m[2 * p] | static_cast<uint32_t>(m[2 * p + 1]) << 16);
      }
      for (int j = 0; j < 8; ++j) {
        for (int q = 0; q < 8; ++q) {
          const size_t k = static_cast<size_t>(8 * (j / 2) + q);
          const __m512i raw = concat(b0 + 128 + 32 * k, b1 + 128 + 32 * k);
          __m512i v = (j & 1) ? _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4) : _mm512_and_si512(raw, low4);
          if constexpr (T::kFifth) {
            // qh chunk q: bit j of each byte is the fifth bit of sub-block j's element 4q + i.
            const __m512i hb = concat(b0 + 1152 + 32 * static_cast<size_t>(q), b1 + 1152 + 32 * static_cast<size_t>(q));
            const __m512i hs = j <= 4 ? _mm512_slli_epi16(hb, static_cast<unsigned>(4 - j))
                                      : _mm512_srli_epi16(hb, static_cast<unsigned>(j - 4));
            v = _mm512_or_si512(v, _mm512_and_si512(hs, m10));
          }
          _mm512_store_si512(o + static_cast<size_t>(j) * kTileBytes + 64 * q, v);
        }
      }
    }
  }
}

// isum[t] += sc * (C tile row t), the C tile at cb.
inline void add_scaled(const int32_t* cb, __m512i scv, __m512i* isum) {
#pragma GCC unroll 16
  for (int t = 0; t < kTile; ++t) {
    isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(_mm512_load_si512(cb + kTile * t), scv));
  }
}

template <KFmt F>
void gemm_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a, size_t a_stride, int64_t n_cols,
            float* out, int64_t out_stride) {
  using T = KTraits<F>;
  constexpr size_t kTileBytes = static_cast<size_t>(T::kSubK) * kTile;
  // Decode and edges: the 16-row AVX-512 VNNI K tiles (whose Q6_K decode is AVX-512's 16-row
  // decode tile), else AVX-512's Q6_K decode tile, else the K tiles with AVX-VNNI where the CPU
  // has it, else the AVX2 K tiles (the same bits).
  static const bool zmm = cpu_features().avx512vnni;
  static const bool vnni = cpu_features().avxvnni;
  const PackedKernels* edge = zmm ? avx512vnni::packed_kernels_k16(T::kType) : avx512::packed_kernels_k(T::kType);
  if (edge == nullptr) edge = vnni ? avxvnni::packed_kernels_k(T::kType) : avx2::packed_kernels_k(T::kType);
  const int64_t row_tiles = n_rows / kTile;
  const int64_t col_tiles = n_cols / kTile;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  if (row_tiles == 0 || col_tiles == 0) {
    edge->gemm(n, w, w_stride, n_rows, a, a_stride, n_cols, out, out_stride);
    return;
  }
  const int64_t nb = n / 256;
  const int64_t tiled_cols = col_tiles * kTile;

  // Per token and super-block: d_a, and the min term's bsum pairs as i16 pairs.
  thread_local AlignedBuf<float> act_d;
  thread_local AlignedBuf<int32_t> act_pairs;
  float* ad = act_d.reserve(static_cast<size_t>(tiled_cols * nb));
  int32_t* ap = act_pairs.reserve(T::kMin ? static_cast<size_t>(tiled_cols * nb * 4) : 1);
  for (int64_t c = 0; c < tiled_cols; ++c) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = ab + static_cast<size_t>(c) * a_stride + static_cast<size_t>(b) * kQ8KBytes;
      std::memcpy(&ad[c * nb + b], blk, 4);
      if constexpr (T::kMin) {
        int16_t bs[16];
        std::memcpy(bs, blk + kQ8KBsums, sizeof bs);
        for (int p = 0; p < 4; ++p) {
          const auto lo = static_cast<uint16_t>(bs[4 * p] + bs[4 * p + 1]);
          const auto hi = static_cast<uint16_t>(bs[4 * p + 2] + bs[4 * p + 3]);
          ap[(c * nb + b) * 4 + p] = static_cast<int32_t>(lo | static_cast<uint32_t>(hi) << 16);
        }
      }
    }
  }

  thread_local AlignedBuf<int8_t> a_tiles;
  int8_t* aq = a_tiles.reserve(static_cast<size_t>(tiled_cols * nb * 256));
  stage_a_tiles(ab, a_stride, tiled_cols, nb, kQ8KBytes, kQ8KQs, T::kSubs, T::kSubK, aq);

  thread_local AlignedBuf<int8_t> b_tiles;
  thread_local AlignedBuf<int32_t> b_sc, b_mn;
  thread_local AlignedBuf<float> b_d, b_m;
  int8_t* bq = b_tiles.reserve(static_cast<size_t>(nb * T::kSubs) * kTileBytes);
  int32_t* sc = b_sc.reserve(static_cast<size_t>(nb * T::kSubs * kTile));
  int32_t* mn = b_mn.reserve(T::kMin ? static_cast<size_t>(nb * 4 * kTile) : 1);
  float* bd = b_d.reserve(static_cast<size_t>(nb * kTile));
  float* bm = b_m.reserve(T::kMin ? static_cast<size_t>(nb * kTile) : 1);
  alignas(64) int32_t cbuf[2][kTile * kTile];
  alignas(64) float accbuf[kTile * kTile];

  configure_tiles(T::kSubK);
  const int64_t chunk = std::max<int64_t>(kTile, static_cast<int64_t>((1u << 20) / static_cast<size_t>(nb * 256)) / kTile * kTile);
  for (int64_t c0 = 0; c0 < tiled_cols; c0 += chunk) {
    const int64_t c1 = std::min(tiled_cols, c0 + chunk);
    for (int64_t rt = 0; rt < row_tiles; ++rt) {
      const uint8_t* g0 = wb + static_cast<size_t>(2 * rt * nb) * T::kBlock;
      unpack_k_row_tile<F>(g0, g0 + static_cast<size_t>(nb) * T::kBlock, nb, bq, sc, mn, bd, bm);
      for (int64_t c = c0; c < c1; c += kTile) {
        const int8_t* at = aq + static_cast<size_t>(c * nb * 256);
        for (int64_t b = 0; b < nb; ++b) {
          __m512i isum[kTile];
          for (__m512i& v : isum) v = _mm512_setzero_si512();
          const int8_t* ablk = at + static_cast<size_t>(b) * kTile * 256;
          const int8_t* bblk = bq + static_cast<size_t>(b * T::kSubs) * kTileBytes;
          const int32_t* sblk = sc + b * T::kSubs * kTile;
          for (int j = 0; j < T::kSubs; j += 2) {
            _tile_zero(0);
            _tile_loadd(2, ablk + static_cast<size_t>(j) * kTileBytes, T::kSubK);
            _tile_loadd(4, bblk + static_cast<size_t>(j) * kTileBytes, 64);
            _tile_dpbssd(0, 2, 4);
            _tile_zero(1);
            _tile_loadd(3, ablk + static_cast<size_t>(j + 1) * kTileBytes, T::kSubK);
            _tile_loadd(5, bblk + static_cast<size_t>(j + 1) * kTileBytes, 64);
            _tile_dpbssd(1, 3, 5);
            _tile_stored(0, cbuf[0], 64);
            add_scaled(cbuf[0], _mm512_load_si512(sblk + j * kTile), isum);
            _tile_stored(1, cbuf[1], 64);
            add_scaled(cbuf[1], _mm512_load_si512(sblk + (j + 1) * kTile), isum);
          }
          const __m512 dw = _mm512_load_ps(bd + 16 * b);
          const __m512 mw = T::kMin ? _mm512_load_ps(bm + 16 * b) : _mm512_setzero_ps();
#pragma GCC unroll 4
          for (int t = 0; t < kTile; ++t) {
            const int64_t ci = (c + t) * nb + b;
            const __m512 da = _mm512_set1_ps(ad[ci]);
            __m512 a0 = b == 0 ? _mm512_setzero_ps() : _mm512_load_ps(accbuf + kTile * t);
            a0 = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(isum[t]), a0);
            if constexpr (T::kMin) {
              const int32_t* mp = mn + b * 4 * kTile;
              __m512i imin = _mm512_madd_epi16(_mm512_load_si512(mp), _mm512_set1_epi32(ap[ci * 4]));
              for (int p = 1; p < 4; ++p) {
                imin = _mm512_add_epi32(imin, _mm512_madd_epi16(_mm512_load_si512(mp + p * kTile),
                                                                _mm512_set1_epi32(ap[ci * 4 + p])));
              }
              a0 = _mm512_fnmadd_ps(_mm512_mul_ps(mw, da), _mm512_cvtepi32_ps(imin), a0);
            }
            _mm512_store_ps(accbuf + kTile * t, a0);
          }
        }
        float* o = out + c * out_stride + rt * kTile;
        for (int t = 0; t < kTile; ++t) _mm512_storeu_ps(o + t * out_stride, _mm512_load_ps(accbuf + kTile * t));
      }
    }
  }
  _tile_release();
  run_edges(*edge, n, w, w_stride, n_rows, a, a_stride, n_cols, out, out_stride);
}

template <KFmt F>
PackedKernels make_k(const char* name) {
  const PackedKernels* base = avx2::packed_kernels_k(KTraits<F>::kType);
  return PackedKernels{name, &gemm_k<F>, base->dequantize_row, base->repack};
}

template <Fmt F>
PackedKernels make(const char* name) {
  const PackedKernels* base = avx2::packed_kernels(Traits<F>::kType, false);
  return PackedKernels{name, &gemm<F>, base->dequantize_row, base->repack};
}

}  // namespace

const PackedKernels* packed_kernels(DType t) {
  static const PackedKernels q4_0 = make<Fmt::Q4_0>("q4_0x8_amx");
  static const PackedKernels q4_1 = make<Fmt::Q4_1>("q4_1x8_amx");
  static const PackedKernels q8_0 = make<Fmt::Q8_0>("q8_0x8_amx");
  static const PackedKernels q5_0 = make<Fmt::Q5_0>("q5_0x8_amx");
  static const PackedKernels q5_1 = make<Fmt::Q5_1>("q5_1x8_amx");
  static const PackedKernels q4_k = make_k<KFmt::Q4_K>("q4_kx8_amx");
  static const PackedKernels q5_k = make_k<KFmt::Q5_K>("q5_kx8_amx");
  static const PackedKernels q6_k = make_k<KFmt::Q6_K>("q6_kx8_amx");
  switch (t) {
    case DType::Q4_0: return &q4_0;
    case DType::Q4_1: return &q4_1;
    case DType::Q8_0: return &q8_0;
    case DType::Q5_0: return &q5_0;
    case DType::Q5_1: return &q5_1;
    case DType::Q4_K: return &q4_k;
    case DType::Q5_K: return &q5_k;
    case DType::Q6_K: return &q6_k;
    default: return nullptr;
  }
}

}  // namespace geniex::cpu::amx
