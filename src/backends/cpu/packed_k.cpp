// Portable parts of the packed K-quant layouts (Q4_Kx8, Q5_Kx8, Q6_Kx8, and AArch64's Q4_Kx8z, Q5_Kx8z,
// Q6_Kx8z; see packed.hpp): repacking and row dequantization. The kernels are per ISA
// (packed_k_tiles_avx2.cpp, kernels_neon_i8mm.cpp).
//
// Each layout rearranges the bits of 8 rows' super-blocks (the x8 layouts move whole bytes, the
// x8z ones split and regroup fields): one "group block" per 8 rows and 256-element super-block,
// group blocks of a group in super-block order, groups in row order, so the packed matrix has
// the original's size and row r (r % 8 == 0) starts at r * row_bytes. Reading a row back
// rebuilds the file's block and runs the reference dequantization, so it is bit-exact.
#include <cstdint>
#include <cstring>

#include "backends/cpu/packed.hpp"
#include "quant/quant.hpp"
#include "quant/quant_k.hpp"

namespace geniex::cpu {

namespace {

constexpr int64_t kQK = 256;

// Byte `i` of row r's 4-byte chunk k in a "chunked" region: chunks of 4 bytes, 8 rows per
// chunk index (32 bytes), so one 256-bit load holds chunk k of all 8 rows, row r in lane r.
constexpr size_t chunk_off(size_t k, int r) { return 32 * k + 4 * static_cast<size_t>(r); }

// Q4_Kx8 group block (1152 bytes = 8 x 144):
//   0     d[8]     fp16, row r at 2r
//   16    dmin[8]  fp16
//   32    scales   the 12 scale bytes of each row as 3 chunks (bytes 0-3, 4-7, 8-11)
//   128   quants   the 128 quant bytes of each row as 32 chunks (chunk k = bytes 4k..4k+3)
constexpr size_t kQ4KGroupBlock = 8 * sizeof(quant::BlockQ4_K);
static_assert(kQ4KGroupBlock == 1152);

template <class Block>
void q4_k_to_group(const Block& b, int r, uint8_t* o) {
  std::memcpy(o + 2 * r, &b.d, 2);
  std::memcpy(o + 16 + 2 * r, &b.dmin, 2);
  for (size_t k = 0; k < 3; ++k) std::memcpy(o + 32 + chunk_off(k, r), b.scales + 4 * k, 4);
  for (size_t k = 0; k < 32; ++k) std::memcpy(o + 128 + chunk_off(k, r), b.qs + 4 * k, 4);
}

template <class Block>
void q4_k_from_group(const uint8_t* o, int r, Block* b) {
  std::memcpy(&b->d, o + 2 * r, 2);
  std::memcpy(&b->dmin, o + 16 + 2 * r, 2);
  for (size_t k = 0; k < 3; ++k) std::memcpy(b->scales + 4 * k, o + 32 + chunk_off(k, r), 4);
  for (size_t k = 0; k < 32; ++k) std::memcpy(b->qs + 4 * k, o + 128 + chunk_off(k, r), 4);
}

// Q5_Kx8 group block (1408 bytes = 8 x 176): Q4_Kx8's fields of the block's d, dmin, scales and
// qs (the low nibbles), then
//   1152  qh       the 32 fifth-bit bytes of each row as 8 chunks
constexpr size_t kQ5KGroupBlock = 8 * sizeof(quant::BlockQ5_K);
static_assert(kQ5KGroupBlock == 1408);

void q5_k_to_group(const quant::BlockQ5_K& b, int r, uint8_t* o) {
  q4_k_to_group(b, r, o);
  for (size_t k = 0; k < 8; ++k) std::memcpy(o + 1152 + chunk_off(k, r), b.qh + 4 * k, 4);
}

void q5_k_from_group(const uint8_t* o, int r, quant::BlockQ5_K* b) {
  q4_k_from_group(o, r, b);
  for (size_t k = 0; k < 8; ++k) std::memcpy(b->qh + 4 * k, o + 1152 + chunk_off(k, r), 4);
}

// Q6_Kx8 group block (1680 bytes = 8 x 210):
//   0     d[8]     fp16
//   16    scales   the 16 int8 scales of each row as 4 chunks
//   144   ql       the 128 low-nibble bytes of each row as 32 chunks
//   1168  qh       the 64 high-bit bytes of each row as 16 chunks
constexpr size_t kQ6KGroupBlock = 8 * sizeof(quant::BlockQ6_K);
static_assert(kQ6KGroupBlock == 1680);

void q6_k_to_group(const quant::BlockQ6_K& b, int r, uint8_t* o) {
  std::memcpy(o + 2 * r, &b.d, 2);
  for (size_t k = 0; k < 4; ++k) std::memcpy(o + 16 + chunk_off(k, r), b.scales + 4 * k, 4);
  for (size_t k = 0; k < 32; ++k) std::memcpy(o + 144 + chunk_off(k, r), b.ql + 4 * k, 4);
  for (size_t k = 0; k < 16; ++k) std::memcpy(o + 1168 + chunk_off(k, r), b.qh + 4 * k, 4);
}

void q6_k_from_group(const uint8_t* o, int r, quant::BlockQ6_K* b) {
  std::memcpy(&b->d, o + 2 * r, 2);
  for (size_t k = 0; k < 4; ++k) std::memcpy(b->scales + 4 * k, o + 16 + chunk_off(k, r), 4);
  for (size_t k = 0; k < 32; ++k) std::memcpy(b->ql + 4 * k, o + 144 + chunk_off(k, r), 4);
  for (size_t k = 0; k < 16; ++k) std::memcpy(b->qh + 4 * k, o + 1168 + chunk_off(k, r), 4);
}

// Q4_Kx8z group block (1152 bytes), the AArch64 SMMLA / USDOT operands (kernels_neon_i8mm.cpp).
// S[16p + 8h + j] and M[16p + 8h + j] are the 6-bit scale and min of sub-block j of row 2p + h
// (row pair p, h = 0 or 1):
//   0     d[8]     fp16
//   16    dmin[8]  fp16
//   32    byte i (0..31): S[i] & 15 in the low nibble, S[i + 32] & 15 in the high one
//   64    the same for M
//   96    byte i: S[i] >> 4 in bits 0-1, S[i + 32] >> 4 in 2-3, M[i] >> 4 in 4-5, M[i + 32] >> 4 in 6-7
//   128   quants, 32 bytes per row pair p and sub-block j at 128 + 256 p + 32 j: the USMMLA
//         operands z_k (row 2p's elements 32j + 8k .. 32j + 8k + 7, then row 2p+1's) as nibbles,
//         byte i of the first 16 holding z0[i] (low) and z1[i] (high), of the second z2 and z3.
// So 16 bytes of S (or M) are one row pair's fields as an SMMLA operand (row 2p's 8 sub-blocks,
// then row 2p+1's), and each 16 quant bytes give two operands by `v & 15` and `v >> 4`.
// Q5_Kx8z group block (1408 bytes): the Q4_Kx8z fields above of the block's d, dmin, scales
// and low nibbles, then
//   1152  fifth bits, 8 bytes per row pair p and sub-block j at 1152 + 64 p + 8 j: byte m holds
//         the fifth bit of operand z_k's lane m (row 2p's element 32j + 8k + m) at bit 2k and of
//         its lane 8 + m (row 2p+1's) at bit 2k + 1.
// Those 8 bytes duplicated to 16, shifted by lane and selected into bit 4 of the nibbles give
// the four unsigned operands.
constexpr size_t kQ5KZGroupBlock = 8 * sizeof(quant::BlockQ5_K);
static_assert(kQ5KZGroupBlock == 1408);

template <class Block>
void q4_kz_to_group(const Block& b, int r, uint8_t* o) {
  const int p = r / 2, h = r % 2;
  // The rows OR their scale and min bits into bytes they share; repack_k calls rows 0..7 in order.
  if (r == 0) std::memset(o + 32, 0, 96);
  std::memcpy(o + 2 * r, &b.d, 2);
  std::memcpy(o + 16 + 2 * r, &b.dmin, 2);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc = 0, mn = 0;
    quant::get_scale_min_k4(j, b.scales, &sc, &mn);
    const int s = 16 * p + 8 * h + j, i = s % 32, upper = s / 32;  // upper: the high nibble / bit pair
    o[32 + i] |= static_cast<uint8_t>((sc & 15) << (4 * upper));
    o[64 + i] |= static_cast<uint8_t>((mn & 15) << (4 * upper));
    o[96 + i] |= static_cast<uint8_t>(((sc >> 4) << (2 * upper)) | ((mn >> 4) << (4 + 2 * upper)));
  }
  // Sub-block j is the low (even j) or high nibbles of the file's bytes 32 (j / 2) ..; 8 bytes
  // (16 quants of this row) at a time.
  constexpr uint64_t kLow = 0x0F0F0F0F0F0F0F0FULL, kHigh = 0xF0F0F0F0F0F0F0F0ULL;
  for (int j = 0; j < 8; ++j) {
    const uint8_t* src = b.qs + 32 * (j / 2);
    uint8_t* dst = o + 128 + 256 * p + 32 * j + 8 * h;
    for (int half = 0; half < 2; ++half) {  // operands z0, z1 then z2, z3
      uint64_t lo = 0, hi = 0;
      std::memcpy(&lo, src + 16 * half, 8);
      std::memcpy(&hi, src + 16 * half + 8, 8);
      const uint64_t v = j % 2 == 0 ? (lo & kLow) | ((hi & kLow) << 4) : ((lo >> 4) & kLow) | (hi & kHigh);
      std::memcpy(dst + 16 * half, &v, 8);
    }
  }
}

template <class Block>
void q4_kz_from_group(const uint8_t* o, int r, Block* b) {
  const int p = r / 2, h = r % 2;
  std::memcpy(&b->d, o + 2 * r, 2);
  std::memcpy(&b->dmin, o + 16 + 2 * r, 2);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    const int s = 16 * p + 8 * h + j, i = s % 32, upper = s / 32;
    sc[j] = static_cast<uint8_t>(((o[32 + i] >> (4 * upper)) & 15) | (((o[96 + i] >> (2 * upper)) & 3) << 4));
    mn[j] = static_cast<uint8_t>(((o[64 + i] >> (4 * upper)) & 15) | (((o[96 + i] >> (4 + 2 * upper)) & 3) << 4));
  }
  // The file's 12 bytes (the inverse of get_scale_min_k4).
  for (int j = 0; j < 4; ++j) {
    b->scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b->scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    b->scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  for (int j = 0; j < 8; ++j) {
    const uint8_t* src = o + 128 + 256 * p + 32 * j + 8 * h;
    uint8_t* dst = b->qs + 32 * (j / 2);
    for (int half = 0; half < 2; ++half) {
      for (int i = 0; i < 8; ++i) {
        const uint8_t v = src[16 * half + i];
        uint8_t& lo = dst[16 * half + i];
        uint8_t& hi = dst[16 * half + 8 + i];
        if (j % 2 == 0) {
          lo = static_cast<uint8_t>(v & 15);
          hi = static_cast<uint8_t>(v >> 4);
        } else {
          lo = static_cast<uint8_t>(lo | (v << 4));
          hi = static_cast<uint8_t>(hi | (v & 0xF0));
        }
      }
    }
  }
}

// Element e = 32 j + l's fifth bit is bit j of qh[l] in the file.
void q5_kz_to_group(const quant::BlockQ5_K& b, int r, uint8_t* o) {
  q4_kz_to_group(b, r, o);
  const int p = r / 2, h = r % 2;
  if (r == 0) std::memset(o + 1152, 0, 256);
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  uint64_t bits[8] = {};
  for (int k = 0; k < 4; ++k) {  // qh bytes 8k .. 8k + 7: operand k's lanes m, bit j per sub-block
    uint64_t x = 0;
    std::memcpy(&x, b.qh + 8 * k, 8);
    for (int j = 0; j < 8; ++j) bits[j] |= ((x >> j) & kOnes) << (2 * k + h);
  }
  for (int j = 0; j < 8; ++j) {
    uint8_t* dst = o + 1152 + 64 * p + 8 * j;
    uint64_t d = 0;
    std::memcpy(&d, dst, 8);
    d |= bits[j];
    std::memcpy(dst, &d, 8);
  }
}

void q5_kz_from_group(const uint8_t* o, int r, quant::BlockQ5_K* b) {
  q4_kz_from_group(o, r, b);
  const int p = r / 2, h = r % 2;
  std::memset(b->qh, 0, sizeof(b->qh));
  for (int j = 0; j < 8; ++j) {
    const uint8_t* src = o + 1152 + 64 * p + 8 * j;
    for (int k = 0; k < 4; ++k) {
      for (int m = 0; m < 8; ++m) {
        b->qh[8 * k + m] = static_cast<uint8_t>(b->qh[8 * k + m] | ((src[m] >> (2 * k + h)) & 1) << j);
      }
    }
  }
}

// The 256 6-bit quants of a Q6_K block (element order) into its ql and qh.
void q6_k_store(const uint8_t* q, quant::BlockQ6_K* b) {
  std::memset(b->ql, 0, sizeof(b->ql));
  std::memset(b->qh, 0, sizeof(b->qh));
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    b->ql[64 * half + 32 * (k % 2) + l] |= static_cast<uint8_t>((q[e] & 15) << (4 * (k / 2)));
    b->qh[32 * half + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * k));
  }
}

// Q6_Kx8z group block (1680 bytes), the AArch64 SMMLA / SDOT operands:
//   0     d[8]     fp16
//   16    scales   32 bytes per row pair p at 16 + 32 p: row 2p's int8 scales of groups 0-7, row
//                  2p+1's, then the two rows' scales of groups 8-15 (one 16-byte TBL table per
//                  half super-block)
//   144   quants   48 bytes per row pair p and 32-element step j at 144 + 384 p + 48 j, for the
//                  operands z_k (row 2p's elements 32j + 8k .. 32j + 8k + 7, then row 2p+1's)
//                  of v = q ^ 32 (the 6-bit two's complement of q - 32): byte i of the first 16
//                  holds v(z0[i]) & 15 and v(z1[i]) & 15 << 4, of the next 16 the same for z2,
//                  z3, of the last 16 the top two bits of z0[i] .. z3[i] in bits 0-1 .. 6-7.
// A shift and an insert per operand give 4 v as int8, 4 (q - 32): the activation scales carry 1/4.
void q6_kz_to_group(const quant::BlockQ6_K& b, int r, uint8_t* o) {
  const int p = r / 2, h = r % 2;
  std::memcpy(o + 2 * r, &b.d, 2);
  std::memcpy(o + 16 + 32 * p + 8 * h, b.scales, 8);
  std::memcpy(o + 32 + 32 * p + 8 * h, b.scales + 8, 8);
  // Step j (elements 32j ..) is quarter j % 4 of half j / 4: ql's bytes 64 (j / 4) + 32 (j % 2) ..
  // (low nibbles for j % 4 < 2), qh's bytes 32 (j / 4) .. (bit pair j % 4). 8 bytes at a time:
  // n_k, t_k the low nibbles and top bit pairs of operand z_k's 8 quants of this row; q ^ 32
  // flips bit 1 of each bit pair (0xAA).
  constexpr uint64_t kLow = 0x0F0F0F0F0F0F0F0FULL, kPair = 0x0303030303030303ULL, kFlip = 0xAAAAAAAAAAAAAAAAULL;
  for (int j = 0; j < 8; ++j) {
    const int quarter = j % 4;
    const uint8_t* ql = b.ql + 64 * (j / 4) + 32 * (quarter % 2);
    const uint8_t* qh = b.qh + 32 * (j / 4);
    uint64_t n[4], t[4];
    for (int k = 0; k < 4; ++k) {
      uint64_t l = 0, hb = 0;
      std::memcpy(&l, ql + 8 * k, 8);
      std::memcpy(&hb, qh + 8 * k, 8);
      n[k] = (l >> (4 * (quarter / 2))) & kLow;
      t[k] = (hb >> (2 * quarter)) & kPair;
    }
    const uint64_t v0 = n[0] | (n[1] << 4), v1 = n[2] | (n[3] << 4);
    const uint64_t v2 = (t[0] | (t[1] << 2) | (t[2] << 4) | (t[3] << 6)) ^ kFlip;
    uint8_t* dst = o + 144 + 384 * p + 48 * j + 8 * h;
    std::memcpy(dst, &v0, 8);
    std::memcpy(dst + 16, &v1, 8);
    std::memcpy(dst + 32, &v2, 8);
  }
}

void q6_kz_from_group(const uint8_t* o, int r, quant::BlockQ6_K* b) {
  const int p = r / 2, h = r % 2;
  std::memcpy(&b->d, o + 2 * r, 2);
  std::memcpy(b->scales, o + 16 + 32 * p + 8 * h, 8);
  std::memcpy(b->scales + 8, o + 32 + 32 * p + 8 * h, 8);
  uint8_t q[256];
  for (int j = 0; j < 8; ++j) {
    const uint8_t* src = o + 144 + 384 * p + 48 * j + 8 * h;
    for (int k = 0; k < 4; ++k) {
      for (int i = 0; i < 8; ++i) {
        const int v = ((src[16 * (k / 2) + i] >> (4 * (k % 2))) & 15) | (((src[32 + i] >> (2 * k)) & 3) << 4);
        q[32 * j + 8 * k + i] = static_cast<uint8_t>(v ^ 32);
      }
    }
  }
  q6_k_store(q, b);
}

template <class Block, size_t kGroupBlock, void (*ToGroup)(const Block&, int, uint8_t*)>
void repack_k(const void* src, void* dst, int64_t n, int64_t n_rows) {
  const int64_t nb = n / kQK;
  const auto* in = static_cast<const Block*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < n_rows / 8; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + static_cast<size_t>(g * nb + b) * kGroupBlock;
      for (int r = 0; r < 8; ++r) ToGroup(in[(g * 8 + r) * nb + b], r, o);
    }
  }
}

template <class Block, size_t kGroupBlock, void (*FromGroup)(const uint8_t*, int, Block*)>
void dequantize_k_row(DType t, const void* base, int64_t row, float* dst, int64_t n) {
  const int64_t nb = n / kQK;
  const int64_t g = row / 8;
  const int r = static_cast<int>(row % 8);
  const auto* in = static_cast<const uint8_t*>(base);
  for (int64_t b = 0; b < nb; ++b) {
    Block blk;
    FromGroup(in + static_cast<size_t>(g * nb + b) * kGroupBlock, r, &blk);
    quant::dequantize_row_ref(t, &blk, dst + b * kQK, kQK);
  }
}

}  // namespace

void repack_q4_kx8(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_k<quant::BlockQ4_K, kQ4KGroupBlock, &q4_k_to_group<quant::BlockQ4_K>>(src, dst, n, n_rows);
}
void repack_q5_kx8(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_k<quant::BlockQ5_K, kQ5KGroupBlock, &q5_k_to_group>(src, dst, n, n_rows);
}
void dequantize_q5_kx8_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_k_row<quant::BlockQ5_K, kQ5KGroupBlock, &q5_k_from_group>(DType::Q5_K, base, row, dst, n);
}
void repack_q6_kx8(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_k<quant::BlockQ6_K, kQ6KGroupBlock, &q6_k_to_group>(src, dst, n, n_rows);
}
void repack_q4_kx8z(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_k<quant::BlockQ4_K, kQ4KGroupBlock, &q4_kz_to_group<quant::BlockQ4_K>>(src, dst, n, n_rows);
}
void dequantize_q4_kx8z_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_k_row<quant::BlockQ4_K, kQ4KGroupBlock, &q4_kz_from_group<quant::BlockQ4_K>>(DType::Q4_K, base, row, dst,
                                                                                          n);
}
void repack_q5_kx8z(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_k<quant::BlockQ5_K, kQ5KZGroupBlock, &q5_kz_to_group>(src, dst, n, n_rows);
}
void dequantize_q5_kx8z_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_k_row<quant::BlockQ5_K, kQ5KZGroupBlock, &q5_kz_from_group>(DType::Q5_K, base, row, dst, n);
}
void repack_q6_kx8z(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_k<quant::BlockQ6_K, kQ6KGroupBlock, &q6_kz_to_group>(src, dst, n, n_rows);
}
void dequantize_q6_kx8z_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_k_row<quant::BlockQ6_K, kQ6KGroupBlock, &q6_kz_from_group>(DType::Q6_K, base, row, dst, n);
}
void dequantize_q4_kx8_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_k_row<quant::BlockQ4_K, kQ4KGroupBlock, &q4_k_from_group<quant::BlockQ4_K>>(DType::Q4_K, base, row, dst, n);
}
void dequantize_q6_kx8_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_k_row<quant::BlockQ6_K, kQ6KGroupBlock, &q6_k_from_group>(DType::Q6_K, base, row, dst, n);
}

}  // namespace geniex::cpu
