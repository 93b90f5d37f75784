// Portable parts of the packed K-quant layouts (Q4_Kx8, Q6_Kx8; see packed.hpp): repacking
// and row dequantization. The kernels are per ISA (packed_k_tiles_avx2.cpp).
//
// Each layout is a permutation of the bytes of 8 rows' super-blocks: one "group block" per
// 8 rows and 256-element super-block, group blocks of a group in super-block order, groups in
// row order, so the packed matrix has the original's size and row r (r % 8 == 0) starts at
// r * row_bytes. Reading a row back gathers its bytes into the file's block and runs the
// reference dequantization, so it is bit-exact by construction.
#include <cstdint>
#include <cstring>

#include "backends/cpu/packed.hpp"
#include "quant/quant.hpp"

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

void q4_k_to_group(const quant::BlockQ4_K& b, int r, uint8_t* o) {
  std::memcpy(o + 2 * r, &b.d, 2);
  std::memcpy(o + 16 + 2 * r, &b.dmin, 2);
  for (size_t k = 0; k < 3; ++k) std::memcpy(o + 32 + chunk_off(k, r), b.scales + 4 * k, 4);
  for (size_t k = 0; k < 32; ++k) std::memcpy(o + 128 + chunk_off(k, r), b.qs + 4 * k, 4);
}

void q4_k_from_group(const uint8_t* o, int r, quant::BlockQ4_K* b) {
  std::memcpy(&b->d, o + 2 * r, 2);
  std::memcpy(&b->dmin, o + 16 + 2 * r, 2);
  for (size_t k = 0; k < 3; ++k) std::memcpy(b->scales + 4 * k, o + 32 + chunk_off(k, r), 4);
  for (size_t k = 0; k < 32; ++k) std::memcpy(b->qs + 4 * k, o + 128 + chunk_off(k, r), 4);
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
  repack_k<quant::BlockQ4_K, kQ4KGroupBlock, &q4_k_to_group>(src, dst, n, n_rows);
}
void repack_q6_kx8(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_k<quant::BlockQ6_K, kQ6KGroupBlock, &q6_k_to_group>(src, dst, n, n_rows);
}
void dequantize_q4_kx8_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_k_row<quant::BlockQ4_K, kQ4KGroupBlock, &q4_k_from_group>(DType::Q4_K, base, row, dst, n);
}
void dequantize_q6_kx8_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_k_row<quant::BlockQ6_K, kQ6KGroupBlock, &q6_k_from_group>(DType::Q6_K, base, row, dst, n);
}

}  // namespace geniex::cpu
