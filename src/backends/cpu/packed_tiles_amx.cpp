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
// bsums). The AVX2 K tiles compute, per row, token and super-block, two exact integers,
// isum = sum_j sc_j * sum_{k in sub-block j} q_k a_k and (Q4_K / Q5_K) imin = sum_j min_j *
// sum_{k in j} a_k, then acc = fma(d_w d_a, (float)isum, acc) and acc = fnmadd(dmin_w d_a,
// (float)imin, acc). This file computes the same two integers, so the same bits, with every
// tile operation a full 16 x 16 x 64 one (the tile unit takes as long for K = 16 or 32 as for
// 64: bench/LOG.md), and no per-sub-block work on the vector units:
//
// - The sub-block scales go into the B tiles as base-8 digits, sc = d0 + 8 d1 (+ 64 d2), one B
//   pass per digit with bytes q * d_p: Q4_K / Q5_K unsigned (q <= 31, d in 0..7, so <= 217,
//   TDPBSUD), Q6_K signed (q - 32 in -32..31, d in -3..4, so -128..124, TDPBSSD). The passes'
//   C tiles sum over the whole super-block, and isum = C0 + 8 C1 (+ 64 C2), exact in i32.
// - Q4_K / Q5_K's third pass is the mins: B bytes min_j over sub-block j's 32 K, so its C tile
//   is imin itself (the bsums are the sums of the same quants).
//
// Per row tile and super-block the unpacked B is 3 passes x 4 K steps of 1 KiB, reused by every
// tile of 16 tokens; the tokens' quants are staged as 16 x 64-byte A tiles.

enum class KFmt { Q4_K, Q5_K, Q6_K };

template <KFmt F>
struct KTraits;
template <>
struct KTraits<KFmt::Q4_K> {
  static constexpr DType kType = DType::Q4_K;
  static constexpr size_t kBlock = 1152;
  static constexpr bool kMin = true, kFifth = false;
};
template <>
struct KTraits<KFmt::Q5_K> {
  static constexpr DType kType = DType::Q5_K;
  static constexpr size_t kBlock = 1408;
  static constexpr bool kMin = true, kFifth = true;
};
template <>
struct KTraits<KFmt::Q6_K> {
  static constexpr DType kType = DType::Q6_K;
  static constexpr size_t kBlock = 1680;
  static constexpr bool kMin = false;  // and no fifth bits: unpack_k_row_tile has its own branch
};

constexpr size_t kQ8KBytes = sizeof(quant::BlockQ8_K);  // f32 d, then qs at 4, bsums at 260
constexpr size_t kQ8KQs = 4;
constexpr int kKPasses = 3;            // Q4_K / Q5_K: 2 scale digits + the mins; Q6_K: 3 digits
constexpr int kKSteps = 4;             // 64-byte K steps per super-block
constexpr size_t kKTile = 1024;        // a 16 x 64-byte A or B tile
constexpr size_t kKSuperB = kKPasses * kKSteps * kKTile;  // B bytes per row tile and super-block

// Every tile 16 rows of 64 bytes: C 16 tokens x 16 rows (i32), A 16 tokens x 64 K bytes, B 16 K
// quads x 16 rows x 4 bytes.
void configure_k_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = kTile;
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
}

// A digit d per i32 lane as the 16-bit multiplier of both halves.
inline __m512i digit_mul(__m512i d) {
  return _mm512_or_si512(_mm512_and_si512(d, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(d, 16));
}

// Bytes v times m's 16-bit digit, mod 256 (the products fit a byte: see above).
inline __m512i mul_bytes(__m512i v, __m512i m) {
  const __m512i lo8 = _mm512_set1_epi16(0x00ff);
  const __m512i lo = _mm512_and_si512(_mm512_mullo_epi16(_mm512_and_si512(v, lo8), m), lo8);
  return _mm512_or_si512(lo, _mm512_mullo_epi16(_mm512_andnot_si512(lo8, v), m));
}

// B of pass p, K step s, for super-block b at bq + ((b * kKPasses + p) * kKSteps + s) * kKTile.
inline int8_t* k_tile(int8_t* bq, int64_t b, int p, int s) {
  return bq + (static_cast<size_t>(b) * kKPasses + static_cast<size_t>(p)) * kKSteps * kKTile +
         static_cast<size_t>(s) * kKTile;
}

// Per super-block of a row tile: the B passes (above) and d, dmin as f32.
template <KFmt F>
void unpack_k_row_tile(const uint8_t* g0, const uint8_t* g1, int64_t nb, int8_t* bq, float* bd, float* bm) {
  using T = KTraits<F>;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i m10 = _mm512_set1_epi8(0x10);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  const __m512i off32 = _mm512_set1_epi8(32);
  const __m512i seven = _mm512_set1_epi32(7);
  const __m512i byte = _mm512_set1_epi32(0xff);
  // Byte i of each i32 lane, zero-extended.
  const auto lane_byte = [&](__m512i v, int i) {
    return _mm512_and_si512(_mm512_srli_epi32(v, static_cast<unsigned>(8 * i)), byte);
  };
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* b0 = g0 + static_cast<size_t>(b) * T::kBlock;
    const uint8_t* b1 = g1 + static_cast<size_t>(b) * T::kBlock;
    _mm512_store_ps(bd + 16 * b, fields16(b0, b1));
    if constexpr (F == KFmt::Q6_K) {
      // The int8 scales: sub-block j's is byte j % 4 of each row's chunk j / 4 (at 16).
      // Digits in -3..4: d0 = ((sc + 3) & 7) - 3, then the same on (sc - d0) / 8.
      __m512i dm[3][16];
      const __m512i three = _mm512_set1_epi32(3);
      for (int j = 0; j < 16; ++j) {
        const __m512i chunk = concat(b0 + 16 + 32 * (j / 4), b1 + 16 + 32 * (j / 4));
        __m512i rest = _mm512_srai_epi32(_mm512_slli_epi32(chunk, static_cast<unsigned>(24 - 8 * (j % 4))), 24);
        for (int p = 0; p < 2; ++p) {
          const __m512i d = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(rest, three), seven), three);
          dm[p][j] = digit_mul(d);
          rest = _mm512_srai_epi32(_mm512_sub_epi32(rest, d), 3);
        }
        dm[2][j] = digit_mul(rest);
      }
      // Sub-block sb = 8n + 2Q + u: elements 128n + 32Q + 16u.. of each row; its quad t' (K
      // elements 4t'..) is chunk t = 4u + t' of the half's ql (low / high nibbles) and qh. In a
      // K step of 64 it is sub-block sb % 4, 4 quads of 64 bytes.
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
            const __m512i v = _mm512_sub_epi8(_mm512_or_si512(lo, hb), off32);
            const size_t at = static_cast<size_t>(sb % 4) * 256 + 64 * static_cast<size_t>(t % 4);
            for (int p = 0; p < 3; ++p) _mm512_store_si512(k_tile(bq, b, p, sb / 4) + at, mul_bytes(v, dm[p][sb]));
          }
        }
      }
    } else {
      _mm512_store_ps(bm + 16 * b, fields16(b0 + 16, b1 + 16));
      // Each row's 12 scale bytes are its chunks 0-2 (at 32): quant::get_scale_min_k4 on 16 rows,
      // sub-blocks 0-3 in the low bytes' 6 bits, 4-7 as 4 + 2 bits.
      const __m512i p0 = concat(b0 + 32, b1 + 32), p1 = concat(b0 + 64, b1 + 64), p2 = concat(b0 + 96, b1 + 96);
      const __m512i m3f = _mm512_set1_epi8(0x3f);
      const __m512i sc_lo = _mm512_and_si512(p0, m3f);
      const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(p2, low4), _mm512_and_si512(_mm512_srli_epi16(p0, 2), m30));
      const __m512i mn_lo = _mm512_and_si512(p1, m3f);
      const __m512i mn_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(p2, 4), low4),
                                            _mm512_and_si512(_mm512_srli_epi16(p1, 2), m30));
      for (int j = 0; j < 8; ++j) {
        const __m512i s = lane_byte(j < 4 ? sc_lo : sc_hi, j % 4);
        const __m512i mnj = lane_byte(j < 4 ? mn_lo : mn_hi, j % 4);
        const __m512i dm0 = digit_mul(_mm512_and_si512(s, seven));
        const __m512i dm1 = digit_mul(_mm512_srli_epi32(s, 3));
        const __m512i mins = _mm512_mullo_epi32(mnj, _mm512_set1_epi32(0x01010101));
        const size_t half = static_cast<size_t>(j % 2) * 512;
        int8_t* t0 = k_tile(bq, b, 0, j / 2) + half;
        int8_t* t1 = k_tile(bq, b, 1, j / 2) + half;
        int8_t* t2 = k_tile(bq, b, 2, j / 2) + half;
        for (int q = 0; q < 8; ++q) {
          // Sub-block j's quad q (K elements 32 j + 4 q..) is chunk 8 (j / 2) + q's low (j even)
          // or high nibbles, and Q5_K's fifth bit j of qh chunk q.
          const size_t k = static_cast<size_t>(8 * (j / 2) + q);
          const __m512i raw = concat(b0 + 128 + 32 * k, b1 + 128 + 32 * k);
          __m512i v = (j & 1) ? _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4) : _mm512_and_si512(raw, low4);
          if constexpr (T::kFifth) {
            const __m512i hb = concat(b0 + 1152 + 32 * static_cast<size_t>(q), b1 + 1152 + 32 * static_cast<size_t>(q));
            const __m512i hs = j <= 4 ? _mm512_slli_epi16(hb, static_cast<unsigned>(4 - j))
                                      : _mm512_srli_epi16(hb, static_cast<unsigned>(j - 4));
            v = _mm512_or_si512(v, _mm512_and_si512(hs, m10));
          }
          _mm512_store_si512(t0 + 64 * q, mul_bytes(v, dm0));
          _mm512_store_si512(t1 + 64 * q, mul_bytes(v, dm1));
          _mm512_store_si512(t2 + 64 * q, mins);
        }
      }
    }
  }
}

// Q6_K's signed B bytes against Q4_K's / Q5_K's unsigned ones. A macro: GCC's tile intrinsics
// paste their register numbers into the assembly text, so they take literals only.
#define GENIEX_K_DP(C, A, B) \
  do {                       \
    if constexpr (F == KFmt::Q6_K) { \
      _tile_dpbssd(C, A, B); \
    } else {                 \
      _tile_dpbsud(C, A, B); \
    }                        \
  } while (0)

// One super-block of a row tile and a token tile (A at `at`, B passes at `bt`) into C tiles 0-2
// (A in tile 6, B in 7).
template <KFmt F>
inline void k_issue(const int8_t* at, const int8_t* bt) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  for (int s = 0; s < kKSteps; ++s) {
    _tile_loadd(6, at + static_cast<size_t>(s) * kKTile, 64);
    _tile_loadd(7, bt + static_cast<size_t>(s) * kKTile, 64);
    GENIEX_K_DP(0, 6, 7);
    _tile_loadd(7, bt + static_cast<size_t>(kKSteps + s) * kKTile, 64);
    GENIEX_K_DP(1, 6, 7);
    _tile_loadd(7, bt + static_cast<size_t>(2 * kKSteps + s) * kKTile, 64);
    GENIEX_K_DP(2, 6, 7);
  }
}
#undef GENIEX_K_DP

// C tiles 0-2 of one super-block into the accumulators (token t's d_a at da[t * ld]).
template <KFmt F>
inline void k_finish(int32_t (*cbuf)[kTile * kTile], __m512 dw, __m512 mw, const float* da, int64_t ld, __m512* acc) {
  _tile_stored(0, cbuf[0], 64);
  _tile_stored(1, cbuf[1], 64);
  _tile_stored(2, cbuf[2], 64);
#pragma GCC unroll 16
  for (int t = 0; t < kTile; ++t) {
    __m512i isum = _mm512_add_epi32(_mm512_load_si512(cbuf[0] + kTile * t),
                                    _mm512_slli_epi32(_mm512_load_si512(cbuf[1] + kTile * t), 3));
    if constexpr (F == KFmt::Q6_K) {
      isum = _mm512_add_epi32(isum, _mm512_slli_epi32(_mm512_load_si512(cbuf[2] + kTile * t), 6));
    }
    const __m512 d = _mm512_set1_ps(da[t * ld]);
    acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, d), _mm512_cvtepi32_ps(isum), acc[t]);
    if constexpr (F != KFmt::Q6_K) {
      const __m512 imin = _mm512_cvtepi32_ps(_mm512_load_si512(cbuf[2] + kTile * t));
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(mw, d), imin, acc[t]);
    }
  }
}

template <KFmt F>
void gemm_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a, size_t a_stride, int64_t n_cols,
            float* out, int64_t out_stride) {
  using T = KTraits<F>;
  // Decode and edges: the 16-row AVX-512 VNNI K tiles (one-column calls as decode_rows() says),
  // else AVX-512's Q6_K decode tile, else the 8-row K tiles of packed_kernels_k8_edge
  // (the same bits).
  static const bool zmm = cpu_features().avx512vnni;
  const PackedKernels* edge = zmm ? avx512vnni::packed_kernels_k16(T::kType) : avx512::packed_kernels_k(T::kType);
  if (edge == nullptr) edge = packed_kernels_k8_edge(T::kType);
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

  // Per token and super-block: d_a.
  thread_local AlignedBuf<float> act_d;
  float* ad = act_d.reserve(static_cast<size_t>(tiled_cols * nb));
  for (int64_t c = 0; c < tiled_cols; ++c) {
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(&ad[c * nb + b], ab + static_cast<size_t>(c) * a_stride + static_cast<size_t>(b) * kQ8KBytes, 4);
    }
  }

  thread_local AlignedBuf<int8_t> a_tiles;
  int8_t* aq = a_tiles.reserve(static_cast<size_t>(tiled_cols * nb * 256));
  stage_a_tiles(ab, a_stride, tiled_cols, nb, kQ8KBytes, kQ8KQs, kKSteps, 64, aq);

  thread_local AlignedBuf<int8_t> b_tiles;
  thread_local AlignedBuf<float> b_d, b_m;
  int8_t* bq = b_tiles.reserve(static_cast<size_t>(nb) * kKSuperB);
  float* bd = b_d.reserve(static_cast<size_t>(nb * kTile));
  float* bm = b_m.reserve(T::kMin ? static_cast<size_t>(nb * kTile) : 1);
  alignas(64) int32_t cbuf[kKPasses][kTile * kTile];
  const __m512 zero = _mm512_setzero_ps();

  configure_k_tiles();
  const int64_t chunk = std::max<int64_t>(kTile, static_cast<int64_t>((1u << 20) / static_cast<size_t>(nb * 256)) / kTile * kTile);
  for (int64_t c0 = 0; c0 < tiled_cols; c0 += chunk) {
    const int64_t c1 = std::min(tiled_cols, c0 + chunk);
    for (int64_t rt = 0; rt < row_tiles; ++rt) {
      const uint8_t* g0 = wb + static_cast<size_t>(2 * rt * nb) * T::kBlock;
      unpack_k_row_tile<F>(g0, g0 + static_cast<size_t>(nb) * T::kBlock, nb, bq, bd, bm);
      for (int64_t c = c0; c < c1; c += kTile) {
        const int8_t* at = aq + static_cast<size_t>(c * nb * 256);
        const float* dat = ad + c * nb;
        __m512 acc[kTile];
        for (__m512& v : acc) v = zero;
        for (int64_t b = 0; b < nb; ++b) {
          k_issue<F>(at + static_cast<size_t>(b) * kKSteps * kKTile, bq + static_cast<size_t>(b) * kKSuperB);
          k_finish<F>(cbuf, _mm512_load_ps(bd + 16 * b), T::kMin ? _mm512_load_ps(bm + 16 * b) : zero, dat + b, nb, acc);
        }
        float* o = out + c * out_stride + rt * kTile;
        for (int t = 0; t < kTile; ++t) _mm512_storeu_ps(o + t * out_stride, acc[t]);
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
