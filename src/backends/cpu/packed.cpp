// Portable parts of the packed layouts: repacking and row dequantization; the matching
// kernels are per ISA (kernels_avx512.cpp).
#include "backends/cpu/packed.hpp"

#include <array>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backends/cpu/kernels_internal.hpp"
#include "core/cpu_features.hpp"
#include "core/fp16.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu {

namespace {

// Group block g, b of a layout with 8 rows per group: `head` bytes of per-row fields
// (fp16 each, `fields` of them per row, stored field-major) then 8 x `qbytes` quant bytes.
template <class Block, int kFields, size_t kQBytes>
void repack_x8(const void* src, void* dst, int64_t n, int64_t n_rows) {
  constexpr size_t kHead = 16 * kFields;
  constexpr size_t kGroupBlock = kHead + 8 * kQBytes;
  static_assert(kGroupBlock == 8 * sizeof(Block));
  const int64_t nb = n / 32;
  const auto* in = static_cast<const Block*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < n_rows / 8; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + static_cast<size_t>(g * nb + b) * kGroupBlock;
      for (int r = 0; r < 8; ++r) {
        const auto* blk = reinterpret_cast<const uint8_t*>(&in[(g * 8 + r) * nb + b]);
        for (int f = 0; f < kFields; ++f) std::memcpy(o + 16 * f + 2 * r, blk + 2 * f, 2);
        std::memcpy(o + kHead + kQBytes * r, blk + 2 * kFields, kQBytes);
      }
    }
  }
}

// Row `row` gathered back into the file's block layout, then the reference dequantization.
template <class Block, int kFields, size_t kQBytes>
void dequantize_x8_row(DType t, const void* base, int64_t row, float* dst, int64_t n) {
  constexpr size_t kHead = 16 * kFields;
  constexpr size_t kGroupBlock = kHead + 8 * kQBytes;
  const int64_t nb = n / 32;
  const int64_t g = row / 8;
  const int r = static_cast<int>(row % 8);
  const auto* in = static_cast<const uint8_t*>(base);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = in + static_cast<size_t>(g * nb + b) * kGroupBlock;
    Block blk;
    auto* o = reinterpret_cast<uint8_t*>(&blk);
    for (int f = 0; f < kFields; ++f) std::memcpy(o + 2 * f, gb + 16 * f + 2 * r, 2);
    std::memcpy(o + 2 * kFields, gb + kHead + kQBytes * r, kQBytes);
    quant::dequantize_row_ref(t, &blk, dst + b * 32, 32);
  }
}

// The x8z layouts (packed.hpp): group block (g, b) is kFields x 16 bytes of per-row fp16
// fields (d, then m for Q4_1 / Q5_1), then 4 row pairs of kPair bytes.
inline size_t zgroup_block_offset(int64_t g, int64_t nb, int64_t b, size_t group_block) {
  return static_cast<size_t>(g * nb + b) * group_block;
}

// Row pair (qs0, qs1) of a Q4_0 / Q4_1 block into the two nibble vectors: byte j < 8 takes row
// 0's quants j (low) and 8 + j (high) for the first vector, 16 + j and 24 + j for the second;
// bytes 8 + j the same of row 1. The file keeps element i < 16 in qs[i]'s low nibble and
// element 16 + i in its high one. kXor = 0x88 stores Q4_0's q ^ 8.
// (8 bytes at a time: the byte-wise shifts are masked so no nibble crosses a byte.)
template <uint8_t kXor>
void zip_q4_pair(const uint8_t* qs0, const uint8_t* qs1, uint8_t* v) {
  constexpr uint64_t kLow = 0x0F0F0F0F0F0F0F0FULL, kHigh = 0xF0F0F0F0F0F0F0F0ULL;
  constexpr uint64_t kX = 0x0101010101010101ULL * kXor;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* qs = half == 0 ? qs0 : qs1;
    uint64_t a = 0, b = 0;  // qs[0..7], qs[8..15]
    std::memcpy(&a, qs, 8);
    std::memcpy(&b, qs + 8, 8);
    const uint64_t v0 = ((a & kLow) | ((b << 4) & kHigh)) ^ kX;
    const uint64_t v1 = (((a >> 4) & kLow) | (b & kHigh)) ^ kX;
    std::memcpy(v + 8 * half, &v0, 8);
    std::memcpy(v + 16 + 8 * half, &v1, 8);
  }
}

// Its inverse for one row of the pair (half 0 or 1).
template <uint8_t kXor>
void unzip_q4_row(const uint8_t* v, int half, uint8_t* qs) {
  for (int j = 0; j < 8; ++j) {
    const auto a = static_cast<uint8_t>(v[8 * half + j] ^ kXor);       // q[j] | q[8 + j] << 4
    const auto b = static_cast<uint8_t>(v[16 + 8 * half + j] ^ kXor);  // q[16 + j] | q[24 + j] << 4
    qs[j] = static_cast<uint8_t>((a & 0x0F) | (b << 4));
    qs[8 + j] = static_cast<uint8_t>((a >> 4) | (b & 0xF0));
  }
}

// Q5_0x8z / Q5_1x8z (packed.hpp): per row pair, t[k][i] = q ^ kXor (Q5_0: q ^ 16, the 5-bit
// two's complement of q - 16; Q5_1: q) of operand k's lane i (i < 8: row 0's element 8k + i,
// else row 1's element 8k + i - 8), kept as A[i] = t0 << 3 | t2 >> 2, B[i] = t1 << 3 | t3 >> 2
// and, per m < 8, the low two bits of t2[m], t2[m + 8], t3[m], t3[m + 8] in byte H[m] (bits
// 0-1, 2-3, 4-5, 6-7). Both blocks keep element e's fifth bit at bit e of qh (little endian).
constexpr size_t kQ5Pair = 40;

// Byte b's 8 bits spread to the 8 bytes of a uint64 (bit m -> bit 0 of byte m).
constexpr uint64_t spread_bits(unsigned b) {
  uint64_t v = 0;
  for (int m = 0; m < 8; ++m) v |= static_cast<uint64_t>((b >> m) & 1u) << (8 * m);
  return v;
}
template <size_t... I>
constexpr std::array<uint64_t, 256> spread_table(std::index_sequence<I...>) {
  return {spread_bits(static_cast<unsigned>(I))...};
}
constexpr std::array<uint64_t, 256> kSpread = spread_table(std::make_index_sequence<256>{});

// 8 bytes at a time: per row, t_k (operand k's 8 lanes of this row: elements 8k .. 8k + 7) is
// the nibbles (qs[0..7] or qs[8..15], low or high) with the fifth bits spread into bit 4.
template <class Block, uint8_t kXor>
void q5_pair_pack(const Block& b0, const Block& b1, uint8_t* v) {
  constexpr uint64_t kLow4 = 0x0F0F0F0F0F0F0F0FULL, kLow3 = 0x0707070707070707ULL, kLow2 = 0x0303030303030303ULL;
  constexpr uint64_t kX = 0x0101010101010101ULL * kXor;
  uint64_t t[2][4];
  for (int h = 0; h < 2; ++h) {
    const Block& blk = h == 0 ? b0 : b1;
    uint64_t lo = 0, hi = 0;
    uint32_t qh = 0;
    std::memcpy(&lo, blk.qs, 8);
    std::memcpy(&hi, blk.qs + 8, 8);
    std::memcpy(&qh, blk.qh, 4);
    const uint64_t n[4] = {lo & kLow4, hi & kLow4, (lo >> 4) & kLow4, (hi >> 4) & kLow4};
    for (int k = 0; k < 4; ++k) t[h][k] = (n[k] | kSpread[(qh >> (8 * k)) & 0xFFu] << 4) ^ kX;
  }
  for (int h = 0; h < 2; ++h) {
    const uint64_t a = t[h][0] << 3 | ((t[h][2] >> 2) & kLow3);  // t < 32: << 3 stays in its byte
    const uint64_t bb = t[h][1] << 3 | ((t[h][3] >> 2) & kLow3);
    std::memcpy(v + 8 * h, &a, 8);
    std::memcpy(v + 16 + 8 * h, &bb, 8);
  }
  const uint64_t hv = (t[0][2] & kLow2) | (t[1][2] & kLow2) << 2 | (t[0][3] & kLow2) << 4 | (t[1][3] & kLow2) << 6;
  std::memcpy(v + 32, &hv, 8);
}

// Its inverse for one row of the pair (half 0 or 1): the block's qh and qs.
template <class Block, uint8_t kXor>
void q5_pair_unpack(const uint8_t* v, int half, Block* blk) {
  uint32_t qh = 0;
  std::memset(blk->qs, 0, sizeof(blk->qs));
  for (int i = 8 * half; i < 8 * half + 8; ++i) {
    const int m = i % 8, sh = 2 * half;
    const int t[4] = {v[i] >> 3, v[16 + i] >> 3, (v[i] & 7) << 2 | (v[32 + m] >> sh & 3),
                      (v[16 + i] & 7) << 2 | (v[32 + m] >> (4 + sh) & 3)};
    for (int k = 0; k < 4; ++k) {
      const int e = 8 * k + m, q = t[k] ^ kXor;
      blk->qs[e % 16] = static_cast<uint8_t>(blk->qs[e % 16] | (q & 15) << (e < 16 ? 0 : 4));
      qh |= static_cast<uint32_t>(q >> 4) << e;
    }
  }
  std::memcpy(blk->qh, &qh, 4);
}

template <class Block, int kFields, size_t kPair, uint8_t kXor>
void repack_x8z(const void* src, void* dst, int64_t n, int64_t n_rows) {
  constexpr size_t kHead = 16 * kFields;
  constexpr size_t kGroupBlock = kHead + 4 * kPair;
  static_assert(kGroupBlock == 8 * sizeof(Block));
  const int64_t nb = n / 32;
  const auto* in = static_cast<const Block*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < n_rows / 8; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + zgroup_block_offset(g, nb, b, kGroupBlock);
      for (int r = 0; r < 8; ++r) {
        const auto* blk = reinterpret_cast<const uint8_t*>(&in[(g * 8 + r) * nb + b]);
        for (int f = 0; f < kFields; ++f) std::memcpy(o + 16 * f + 2 * r, blk + 2 * f, 2);
      }
      for (int p = 0; p < 4; ++p) {
        const Block& b0 = in[(g * 8 + 2 * p) * nb + b];
        const Block& b1 = in[(g * 8 + 2 * p + 1) * nb + b];
        uint8_t* v = o + kHead + kPair * static_cast<size_t>(p);
        if constexpr (kPair == 64) {  // Q8_0: z_k = row 0's quants 8k.., then row 1's
          for (int k = 0; k < 4; ++k) {
            std::memcpy(v + 16 * k, b0.qs + 8 * k, 8);
            std::memcpy(v + 16 * k + 8, b1.qs + 8 * k, 8);
          }
        } else if constexpr (kPair == kQ5Pair) {  // Q5_0, Q5_1: kXor is 16 or 0 per quant
          q5_pair_pack<Block, kXor>(b0, b1, v);
        } else {
          zip_q4_pair<kXor>(b0.qs, b1.qs, v);
        }
      }
    }
  }
}

template <class Block, int kFields, size_t kPair, uint8_t kXor>
void dequantize_x8z_row(DType t, const void* base, int64_t row, float* dst, int64_t n) {
  constexpr size_t kHead = 16 * kFields;
  constexpr size_t kGroupBlock = kHead + 4 * kPair;
  const int64_t nb = n / 32;
  const int64_t g = row / 8;
  const int r = static_cast<int>(row % 8);
  const int p = r / 2, half = r % 2;
  const auto* in = static_cast<const uint8_t*>(base);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = in + zgroup_block_offset(g, nb, b, kGroupBlock);
    const uint8_t* v = gb + kHead + kPair * static_cast<size_t>(p);
    Block blk;
    auto* o = reinterpret_cast<uint8_t*>(&blk);
    for (int f = 0; f < kFields; ++f) std::memcpy(o + 2 * f, gb + 16 * f + 2 * r, 2);
    if constexpr (kPair == 64) {
      for (int k = 0; k < 4; ++k) std::memcpy(blk.qs + 8 * k, v + 16 * k + 8 * half, 8);
    } else if constexpr (kPair == kQ5Pair) {
      q5_pair_unpack<Block, kXor>(v, half, &blk);
    } else {
      unzip_q4_row<kXor>(v, half, blk.qs);
    }
    quant::dequantize_row_ref(t, &blk, dst + b * 32, 32);
  }
}

bool repack_disabled() {
  const char* env = std::getenv("GENIEX_REPACK");
  return env != nullptr && std::strcmp(env, "0") == 0;
}

}  // namespace

void repack_q4_0x8(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_x8<quant::BlockQ4_0, 1, 16>(src, dst, n, n_rows);
}
void repack_q4_1x8(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_x8<quant::BlockQ4_1, 2, 16>(src, dst, n, n_rows);
}
void repack_q8_0x8(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_x8<quant::BlockQ8_0, 1, 32>(src, dst, n, n_rows);
}
void repack_q4_0x8z(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_x8z<quant::BlockQ4_0, 1, 32, 0x88>(src, dst, n, n_rows);
}
void repack_q4_1x8z(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_x8z<quant::BlockQ4_1, 2, 32, 0>(src, dst, n, n_rows);
}
void repack_q8_0x8z(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_x8z<quant::BlockQ8_0, 1, 64, 0>(src, dst, n, n_rows);
}
void dequantize_q4_0x8z_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_x8z_row<quant::BlockQ4_0, 1, 32, 0x88>(DType::Q4_0, base, row, dst, n);
}
void dequantize_q4_1x8z_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_x8z_row<quant::BlockQ4_1, 2, 32, 0>(DType::Q4_1, base, row, dst, n);
}
void dequantize_q8_0x8z_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_x8z_row<quant::BlockQ8_0, 1, 64, 0>(DType::Q8_0, base, row, dst, n);
}
void repack_q5_0x8z(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_x8z<quant::BlockQ5_0, 1, kQ5Pair, 16>(src, dst, n, n_rows);
}
void repack_q5_1x8z(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_x8z<quant::BlockQ5_1, 2, kQ5Pair, 0>(src, dst, n, n_rows);
}
void dequantize_q5_0x8z_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_x8z_row<quant::BlockQ5_0, 1, kQ5Pair, 16>(DType::Q5_0, base, row, dst, n);
}
void dequantize_q5_1x8z_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_x8z_row<quant::BlockQ5_1, 2, kQ5Pair, 0>(DType::Q5_1, base, row, dst, n);
}

void dequantize_q4_0x8_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_x8_row<quant::BlockQ4_0, 1, 16>(DType::Q4_0, base, row, dst, n);
}
void dequantize_q4_1x8_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_x8_row<quant::BlockQ4_1, 2, 16>(DType::Q4_1, base, row, dst, n);
}
void dequantize_q8_0x8_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_x8_row<quant::BlockQ8_0, 1, 32>(DType::Q8_0, base, row, dst, n);
}

#if defined(GENIEX_HAVE_AVX2_KERNELS)
// GENIEX_AVX2_EXACT=1 (read once per weight at load): the file-layout kernels' summation order.
static bool avx2_exact() {
  const char* env = std::getenv("GENIEX_AVX2_EXACT");
  return env != nullptr && std::strcmp(env, "1") == 0;
}
#endif

#if defined(GENIEX_HAVE_AVX2_KERNELS)
const PackedKernels* packed_kernels_k8_edge(DType t) {
  const CpuFeatures& f = cpu_features();
  if (f.avxvnni && f.avx2 && f.fma && f.f16c) return avxvnni::packed_kernels_k(t);
  // VL is not in CpuFeatures: every CPU with AVX-512 BW and VNNI has it (the 16-row files assume
  // the same).
  if (f.avx512f && f.avx512bw && f.avx512vnni && f.avx2 && f.fma && f.f16c && t != DType::Q6_K) return avx512vnni::packed_kernels_k8(t);
  return avx2::packed_kernels_k(t);
}
#endif

#if defined(GENIEX_HAVE_AVX2_KERNELS)
namespace avx512vnni {
DecodeRows decode_rows() {
  static const DecodeRows rows = [] {
    if (const char* env = std::getenv("GENIEX_DECODE_ROWS")) {
      if (std::strcmp(env, "8") == 0) return DecodeRows::kRows8;
      if (std::strcmp(env, "16") == 0) return DecodeRows::kRows16;
    }
    return cpu_features().amd ? DecodeRows::kRows8 : DecodeRows::kRows16;
  }();
  return rows;
}
}  // namespace avx512vnni
#endif

const PackedKernels* packed_kernels_for_isa(DType t, const char* isa) {
  if (isa == nullptr) return nullptr;
#if defined(GENIEX_HAVE_AVX2_KERNELS)
  const CpuFeatures& f = cpu_features();
  const bool avx512 = f.avx512f && f.avx512bw && f.avx2 && f.fma && f.f16c;
  if (std::strcmp(isa, "avx512") == 0) {
    if (!avx512) return nullptr;
    if (const PackedKernels* k = avx512::packed_kernels(t)) return k;
    return avx512::packed_kernels_k(t);  // Q6_K: the AVX2 K layout with a 16-row decode tile
  }
  if (std::strcmp(isa, "avx512vnni") == 0) return avx512 && f.avx512vnni ? avx512vnni::packed_kernels(t) : nullptr;
  // "avx512vnni16": the 16-row zmm tiles with this CPU's decode choice (decode_rows());
  // "avx512vnni16-d8" and "-d16" with one or the other, for tests and benchmarks.
  if (std::strncmp(isa, "avx512vnni16", 12) == 0) {
    avx512vnni::DecodeRows d = avx512vnni::decode_rows();
    if (std::strcmp(isa + 12, "-d8") == 0) {
      d = avx512vnni::DecodeRows::kRows8;
    } else if (std::strcmp(isa + 12, "-d16") == 0) {
      d = avx512vnni::DecodeRows::kRows16;
    } else if (isa[12] != '\0') {
      return nullptr;
    }
    // The AVX2 layouts' bits (their 16-row zmm tiles): not the file-layout order of
    // GENIEX_AVX2_EXACT=1.
    if (!(avx512 && f.avx512vnni) || avx2_exact()) return nullptr;
    if (const PackedKernels* k = avx512vnni::packed_kernels_16(t, d)) return k;
    return avx512vnni::packed_kernels_k16(t, d);  // Q4_K, Q5_K, Q6_K
  }
  if (std::strcmp(isa, "avx512vnni8") == 0) {
    // The 8-row K tiles, EVEX-encoded VNNI on ymm (what one-column K calls run on such CPUs):
    // the AVX2 layouts' bits, not GENIEX_AVX2_EXACT=1's file-layout order.
    if (!(avx512 && f.avx512vnni) || avx2_exact()) return nullptr;
    return avx512vnni::packed_kernels_k8(t);
  }
  if (std::strcmp(isa, "amx") == 0) {
    // The AVX2 layouts' bits: with GENIEX_AVX2_EXACT=1 the file-layout order is wanted instead.
    return f.amx_int8 && !avx2_exact() ? amx::packed_kernels(t) : nullptr;
  }
  if (std::strcmp(isa, "avxvnni") == 0) {
    // The AVX2 layouts' tiles with AVX-VNNI dot products: the same bits, so the file-layout
    // order of GENIEX_AVX2_EXACT=1 is not theirs to give.
    if (!(f.avxvnni && f.avx2 && f.fma && f.f16c) || avx2_exact()) return nullptr;
    if (const PackedKernels* k = avxvnni::packed_kernels(t)) return k;
    return avxvnni::packed_kernels_k(t);
  }
  if (std::strcmp(isa, "avx2x8") == 0) {
    // The AVX2 Q4_0 / Q4_1 gemm with the 8 x 4 tiles only, for comparisons and tests.
    if (!(f.avx2 && f.fma && f.f16c) || avx2_exact()) return nullptr;
    return avx2::packed_kernels_rows8(t);
  }
  if (std::strcmp(isa, "avx2") == 0) {
    if (!(f.avx2 && f.fma && f.f16c)) return nullptr;
    // GENIEX_AVX2_EXACT=1 (read here, once per weight at load): the file-layout kernels'
    // summation order. The 32-block layouts have exact tiles for it; the K-quant layouts
    // (packed_k.cpp) do not, so those weights stay in the file's layout then.
    const bool exact = avx2_exact();
    if (const PackedKernels* k = avx2::packed_kernels(t, exact)) return k;
    return exact ? nullptr : avx2::packed_kernels_k(t);
  }
#elif defined(__aarch64__)
  // SMMLA for several tokens, SDOT for one: both are in the i8mm kernel file.
  const CpuFeatures& f = cpu_features();
  if (std::strcmp(isa, "i8mm") == 0) return f.arm_i8mm && f.arm_dotprod ? neon_i8mm::packed_kernels(t) : nullptr;
#else
  (void)t;
#endif
  return nullptr;
}

const PackedKernels* packed_kernels_for(DType t, int64_t n, int64_t n_rows) {
  if (repack_disabled() || n % 32 != 0 || n_rows % 8 != 0) return nullptr;
  if (const PackedKernels* k = packed_kernels_for_isa(t, "amx")) return k;
  // 16-row zmm tiles over the AVX2 layouts where AVX-512 VNNI exists (their decode as
  // avx512vnni::decode_rows() says; Q6_K's the 8-row K tile): 1.4-1.5x the 8-row AVX-VNNI tiles
  // (bench/LOG.md).
  if (const PackedKernels* k = packed_kernels_for_isa(t, "avx512vnni16")) return k;
  // Q6_K without AVX-512 VNNI: AVX-512's 16-row decode tile (its prefill runs the AVX-VNNI or
  // AVX2 8-row tiles).
  if (t == DType::Q6_K) {
    if (const PackedKernels* k = packed_kernels_for_isa(t, "avx512")) return k;
  }
  // AVX-VNNI's 256-bit tiles over the AVX2 layouts before the AVX-512 x8 layouts: on an
  // AVX-512 CPU with both, they measured faster (bench_kernels, 8192 x 2048 x 128, one thread:
  // Q4_0 208 against 172 GOP/s, Q4_1 208 against 150, Q8_0 144 against 149).
  if (const PackedKernels* k = packed_kernels_for_isa(t, "avxvnni")) return k;
  if (const PackedKernels* k = packed_kernels_for_isa(t, "avx512vnni")) return k;
  if (const PackedKernels* k = packed_kernels_for_isa(t, "avx512")) return k;
#if defined(__aarch64__)
  return packed_kernels_for_isa(t, "i8mm");
#else
  return packed_kernels_for_isa(t, "avx2");  // own layouts (packed_tiles_avx2.cpp)
#endif
}

}  // namespace geniex::cpu
