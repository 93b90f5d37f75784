// The AArch64 x8z layouts (packed.hpp) and their SMMLA/SDOT kernels (kernels_neon_i8mm.cpp).
// The layout tests are portable and run everywhere; the kernel tests need i8mm (qemu -cpu max
// in scripts/test_aarch64.sh) and skip elsewhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels.hpp"
#include "backends/cpu/packed.hpp"
#include "quant/quant.hpp"
#include "quant/quant_k.hpp"

namespace geniex {
namespace {

struct Rows {
  std::vector<uint8_t> w;
  size_t row_bytes = 0;
};

Rows random_rows(DType t, int64_t k, int64_t rows, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Rows r;
  r.row_bytes = static_cast<size_t>(row_bytes(t, k));
  r.w.resize(r.row_bytes * static_cast<size_t>(rows));
  std::vector<float> f(static_cast<size_t>(k));
  for (int64_t i = 0; i < rows; ++i) {
    const float shift = t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q4_K || t == DType::Q5_K ? nd(rng) : 0.0f;  // asymmetric rows exercise the mins
    for (float& v : f) v = nd(rng) + shift;
    if (t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K) {  // sub-blocks of different spread and offset exercise the scales and mins
      for (size_t e = 0; e < f.size(); ++e) f[e] = f[e] * (0.25f + static_cast<float>((e / 32) % 5)) + static_cast<float>((e / 32) % 3);
    }
    quant::quantize_row_ref(t, f.data(), r.w.data() + static_cast<size_t>(i) * r.row_bytes, k);
  }
  return r;
}

size_t block_bytes(DType t) {
  if (t == DType::Q5_0) return sizeof(quant::BlockQ5_0);
  if (t == DType::Q5_1) return sizeof(quant::BlockQ5_1);
  return t == DType::Q8_0 ? sizeof(quant::BlockQ8_0) : t == DType::Q4_1 ? sizeof(quant::BlockQ4_1) : sizeof(quant::BlockQ4_0);
}

// Element i of block b of row `row`, as the integer the block stores (q - 8 for Q4_0, q - 16
// for Q5_0, q for Q4_1 and Q5_1).
int quant_of(DType t, const Rows& r, int64_t row, int64_t b, int i) {
  const uint8_t* p = r.w.data() + static_cast<size_t>(row) * r.row_bytes + static_cast<size_t>(b) * block_bytes(t);
  if (t == DType::Q8_0) return reinterpret_cast<const quant::BlockQ8_0*>(p)->qs[i];
  if (t == DType::Q5_0 || t == DType::Q5_1) {  // GGUF: element i's fifth bit is bit i of qh (little endian)
    const uint8_t* qh = t == DType::Q5_0 ? reinterpret_cast<const quant::BlockQ5_0*>(p)->qh
                                         : reinterpret_cast<const quant::BlockQ5_1*>(p)->qh;
    const uint8_t* qs = t == DType::Q5_0 ? reinterpret_cast<const quant::BlockQ5_0*>(p)->qs
                                         : reinterpret_cast<const quant::BlockQ5_1*>(p)->qs;
    const int lo = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
    return (lo | (qh[i / 8] >> (i % 8) & 1) << 4) - (t == DType::Q5_0 ? 16 : 0);
  }
  const uint8_t* qs = t == DType::Q4_1 ? reinterpret_cast<const quant::BlockQ4_1*>(p)->qs
                                       : reinterpret_cast<const quant::BlockQ4_0*>(p)->qs;
  const int q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
  return t == DType::Q4_1 ? q : q - 8;
}

bool is_k_quant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

using RepackFn = void (*)(const void*, void*, int64_t, int64_t);
using RowFn = void (*)(const void*, int64_t, float*, int64_t);
RepackFn repack_of(DType t) {
  if (t == DType::Q4_K) return cpu::repack_q4_kx8z;
  if (t == DType::Q6_K) return cpu::repack_q6_kx8z;
  if (t == DType::Q5_K) return cpu::repack_q5_kx8z;
  if (t == DType::Q5_0) return cpu::repack_q5_0x8z;
  if (t == DType::Q5_1) return cpu::repack_q5_1x8z;
  return t == DType::Q4_0 ? cpu::repack_q4_0x8z : t == DType::Q4_1 ? cpu::repack_q4_1x8z : cpu::repack_q8_0x8z;
}
RowFn row_of(DType t) {
  if (t == DType::Q4_K) return cpu::dequantize_q4_kx8z_row;
  if (t == DType::Q6_K) return cpu::dequantize_q6_kx8z_row;
  if (t == DType::Q5_K) return cpu::dequantize_q5_kx8z_row;
  if (t == DType::Q5_0) return cpu::dequantize_q5_0x8z_row;
  if (t == DType::Q5_1) return cpu::dequantize_q5_1x8z_row;
  return t == DType::Q4_0   ? cpu::dequantize_q4_0x8z_row
         : t == DType::Q4_1 ? cpu::dequantize_q4_1x8z_row
                            : cpu::dequantize_q8_0x8z_row;
}

// The bytes the kernels read: per group block, 8 fp16 scales (then Q4_1's 8 mins), then per
// row pair the SMMLA operands z_k (row 2p's elements 8k..8k+7, then row 2p+1's); Q4_1 as
// nibbles that `v & 15` / `v >> 4` decode, Q4_0 as nibbles that `v << 4` / `v & 0xF0` turn
// into 16 (q - 8); Q5_0 and Q5_1 as A, B (bits 3-7: z0, z1's t = q ^ 16 (Q5_0) or q (Q5_1);
// bits 0-2: the top bits of z2, z3's t) and H (their low two bits), decoded as the kernels do.
TEST(PackedX8z, LayoutIsTheDocumentedSmmlaOperands) {
  std::mt19937 rng(7);
  const int64_t k = 96, n_rows = 16, nb = k / 32;
  for (const DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q5_0, DType::Q5_1}) {
    const Rows r = random_rows(t, k, n_rows, rng);
    std::vector<uint8_t> z(r.w.size());
    repack_of(t)(r.w.data(), z.data(), k, n_rows);
    const int fields = t == DType::Q4_1 || t == DType::Q5_1 ? 2 : 1;
    const size_t head = 16 * static_cast<size_t>(fields), pair = t == DType::Q8_0 ? 64 : t == DType::Q5_0 || t == DType::Q5_1 ? 40 : 32,
                 group_block = head + 4 * pair;
    ASSERT_EQ(group_block, 8 * block_bytes(t));
    for (int64_t g = 0; g < n_rows / 8; ++g) {
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* gb = z.data() + static_cast<size_t>(g * nb + b) * group_block;
        for (int row = 0; row < 8; ++row) {
          const uint8_t* src = r.w.data() + static_cast<size_t>(g * 8 + row) * r.row_bytes + static_cast<size_t>(b) * block_bytes(t);
          for (int f = 0; f < fields; ++f) {
            ASSERT_EQ(std::memcmp(gb + 16 * f + 2 * row, src + 2 * f, 2), 0) << "field " << f << " of row " << row;
          }
        }
        for (int p = 0; p < 4; ++p) {
          const uint8_t* v = gb + head + pair * static_cast<size_t>(p);
          for (int kk = 0; kk < 4; ++kk) {
            for (int j = 0; j < 16; ++j) {
              const int64_t row = g * 8 + 2 * p + (j < 8 ? 0 : 1);
              const int want = quant_of(t, r, row, b, 8 * kk + j % 8);
              int got = 0;
              const uint8_t byte = t == DType::Q8_0 ? v[16 * kk + j] : v[16 * (kk / 2) + j];
              if (t == DType::Q5_0 || t == DType::Q5_1) {
                const uint8_t ab = v[16 * (kk % 2) + j], hb = v[32 + j % 8];
                const int sh = (j < 8 ? 0 : 2) + (kk == 3 ? 4 : 0);  // z2: bits 0-1 / 2-3, z3: 4-5 / 6-7
                if (t == DType::Q5_0) {  // top-aligned: 8 (q - 16)
                  const auto op = static_cast<uint8_t>(kk < 2 ? ab & 0xF8 : (ab & 7) << 5 | (hb >> sh & 3) << 3);
                  got = static_cast<int8_t>(op) / 8;
                } else {
                  got = kk < 2 ? ab >> 3 : (ab & 7) << 2 | (hb >> sh & 3);
                }
              } else if (t == DType::Q8_0) {
                got = static_cast<int8_t>(byte);
              } else if (t == DType::Q4_1) {
                got = kk % 2 == 0 ? byte & 15 : byte >> 4;
              } else {
                got = static_cast<int8_t>(kk % 2 == 0 ? static_cast<uint8_t>(byte << 4) : static_cast<uint8_t>(byte & 0xF0)) / 16;
              }
              ASSERT_EQ(got, want) << dtype_name(t) << " g=" << g << " b=" << b << " pair " << p << " z" << kk << "[" << j << "]";
            }
          }
        }
      }
    }
  }
}

// Q4_Kx8z: per group block the 8 rows' d and dmin, the 6-bit scales S and mins M of row pair p
// as 16-byte SMMLA operands after `nibbles | (high bits << 4)`, and per row pair and sub-block j
// the operands z_k (row 2p's elements 32j + 8k .., then row 2p+1's) as nibbles. Q5_Kx8z: the
// same, then per row pair and sub-block 8 bytes whose bit 2k + h of byte m is the fifth bit of
// z_k's lane 8h + m, which the kernels select into bit 4.
template <class Block>
void check_q45_kz_layout(DType t, RepackFn repack) {
  constexpr bool kFifth = std::is_same_v<Block, quant::BlockQ5_K>;
  std::mt19937 rng(5);
  const int64_t k = 512, n_rows = 16, nsb = k / 256;
  const Rows r = random_rows(t, k, n_rows, rng);
  std::vector<uint8_t> z(r.w.size());
  repack(r.w.data(), z.data(), k, n_rows);
  const size_t group_block = 8 * sizeof(Block);
  for (int64_t g = 0; g < n_rows / 8; ++g) {
    for (int64_t b = 0; b < nsb; ++b) {
      const uint8_t* gb = z.data() + static_cast<size_t>(g * nsb + b) * group_block;
      for (int row = 0; row < 8; ++row) {
        const auto& src = reinterpret_cast<const Block*>(r.w.data() + static_cast<size_t>(g * 8 + row) * r.row_bytes)[b];
        ASSERT_EQ(std::memcmp(gb + 2 * row, &src.d, 2), 0);
        ASSERT_EQ(std::memcmp(gb + 16 + 2 * row, &src.dmin, 2), 0);
        const int p = row / 2, h = row % 2;
        for (int j = 0; j < 8; ++j) {
          uint8_t sc = 0, mn = 0;
          quant::get_scale_min_k4(j, src.scales, &sc, &mn);
          // The kernels' decode of pair p's 16-byte field vectors: pairs 2 and 3 use the high
          // nibbles and the next bit pairs.
          const int s = 16 * p + 8 * h + j, i = s % 32, up = s / 32;
          const int got_sc = ((gb[32 + i] >> (4 * up)) & 15) | (((gb[96 + i] >> (2 * up)) & 3) << 4);
          const int got_mn = ((gb[64 + i] >> (4 * up)) & 15) | (((gb[96 + i] >> (4 + 2 * up)) & 3) << 4);
          ASSERT_EQ(got_sc, sc) << "row " << row << " sub-block " << j;
          ASSERT_EQ(got_mn, mn) << "row " << row << " sub-block " << j;
          for (int kk = 0; kk < 4; ++kk) {
            for (int e = 0; e < 8; ++e) {
              const int el = 32 * j + 8 * kk + e;  // element of the super-block
              const uint8_t fb = src.qs[32 * (el / 64) + el % 32];
              int want = (el / 32) % 2 == 0 ? fb & 15 : fb >> 4;
              const uint8_t byte = gb[128 + 256 * p + 32 * j + 16 * (kk / 2) + 8 * h + e];
              int got = kk % 2 == 0 ? byte & 15 : byte >> 4;
              if constexpr (kFifth) {  // GGUF: element 32 j + l's fifth bit is bit j of qh[l]
                want |= ((src.qh[el % 32] >> j) & 1) << 4;
                got |= ((gb[1152 + 64 * p + 8 * j + e] >> (2 * kk + h)) & 1) << 4;
              }
              ASSERT_EQ(got, want) << dtype_name(t) << " row " << row << " element " << el;
            }
          }
        }
      }
    }
  }
}

TEST(PackedX8z, Q4_KLayoutIsTheDocumentedOperands) {
  check_q45_kz_layout<quant::BlockQ4_K>(DType::Q4_K, cpu::repack_q4_kx8z);
}
TEST(PackedX8z, Q5_KLayoutIsTheDocumentedOperands) {
  check_q45_kz_layout<quant::BlockQ5_K>(DType::Q5_K, cpu::repack_q5_kx8z);
}

// Q6_Kx8z: the 8 rows' d, each row pair's int8 scales (groups 0-7 of both rows, then 8-15), and per row pair and 32 elements the
// operands z_k of v = q ^ 32 as low nibbles (z0 | z1 << 4, z2 | z3 << 4) and top bit pairs.
TEST(PackedX8z, Q6_KLayoutIsTheDocumentedOperands) {
  std::mt19937 rng(6);
  const int64_t k = 512, n_rows = 16, nsb = k / 256;
  const Rows r = random_rows(DType::Q6_K, k, n_rows, rng);
  std::vector<uint8_t> z(r.w.size());
  cpu::repack_q6_kx8z(r.w.data(), z.data(), k, n_rows);
  const size_t group_block = 8 * sizeof(quant::BlockQ6_K);
  for (int64_t g = 0; g < n_rows / 8; ++g) {
    for (int64_t b = 0; b < nsb; ++b) {
      const uint8_t* gb = z.data() + static_cast<size_t>(g * nsb + b) * group_block;
      for (int row = 0; row < 8; ++row) {
        const auto& src = reinterpret_cast<const quant::BlockQ6_K*>(r.w.data() + static_cast<size_t>(g * 8 + row) * r.row_bytes)[b];
        const int p = row / 2, h = row % 2;
        ASSERT_EQ(std::memcmp(gb + 2 * row, &src.d, 2), 0);
        ASSERT_EQ(std::memcmp(gb + 16 + 32 * p + 8 * h, src.scales, 8), 0) << "scales 0-7 of row " << row;
        ASSERT_EQ(std::memcmp(gb + 32 + 32 * p + 8 * h, src.scales + 8, 8), 0) << "scales 8-15 of row " << row;
        for (int t = 0; t < 256; ++t) {
          // GGUF's Q6_K: element t of a half (128) is ql's nibble and qh's bit pair below.
          const int half = t / 128, quarter = (t % 128) / 32, l = t % 32;
          const int want = ((src.ql[64 * half + 32 * (quarter % 2) + l] >> (4 * (quarter / 2))) & 15) |
                           (((src.qh[32 * half + l] >> (2 * quarter)) & 3) << 4);
          const int j = t / 32, kk = (t % 32) / 8, e = t % 8;
          const uint8_t* v = gb + 144 + 384 * p + 48 * j;
          const int nib = (v[16 * (kk / 2) + 8 * h + e] >> (4 * (kk % 2))) & 15;
          const int top = (v[32 + 8 * h + e] >> (2 * kk)) & 3;
          ASSERT_EQ((nib | (top << 4)) ^ 32, want) << "row " << row << " element " << t;
        }
      }
    }
  }
}

TEST(PackedX8z, RowsReadBackExactly) {
  std::mt19937 rng(11);
  for (const DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (const int64_t k : {256, 576, 2048}) {
      if (k % (is_k_quant(t) ? 256 : 32) != 0) continue;
      const int64_t n_rows = 24;
      const Rows r = random_rows(t, k, n_rows, rng);
      std::vector<uint8_t> z(r.w.size());
      repack_of(t)(r.w.data(), z.data(), k, n_rows);
      std::vector<float> want(static_cast<size_t>(k)), got(want);
      for (int64_t row = 0; row < n_rows; ++row) {
        quant::dequantize_row_ref(t, r.w.data() + static_cast<size_t>(row) * r.row_bytes, want.data(), k);
        row_of(t)(z.data(), row, got.data(), k);
        ASSERT_EQ(want, got) << dtype_name(t) << " k=" << k << " row " << row;
      }
    }
  }
}

// gemm on the repacked rows: bit for bit the file layout's i8mm kernels (so repacking changes
// no result, on every column count: pairs through SMMLA, an odd column through SDOT), and
// near the scalar reference; rows split in two calls as threads split them.
void check_i8mm_packed(DType t) {
  const cpu::PackedKernels* pk = cpu::packed_kernels_for_isa(t, "i8mm");
  const cpu::TypeKernels* file = cpu::kernels_for_isa(t, "i8mm");
  if (pk == nullptr || file == nullptr) GTEST_SKIP() << "no i8mm on this CPU";
  const cpu::TypeKernels* ref = cpu::kernels_for_isa(t, "scalar");
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Shape { int64_t k, rows, cols; };
  const std::vector<Shape> blocks32 = {Shape{256, 64, 1}, Shape{32, 8, 1},   Shape{576, 24, 3},  Shape{2048, 16, 2},
                                       Shape{96, 40, 5},  Shape{160, 8, 7},  Shape{576, 48, 13}, Shape{64, 16, 8},
                                       Shape{1536, 32, 9}, Shape{128, 8, 18}};
  const std::vector<Shape> blocks256 = {Shape{256, 64, 1}, Shape{256, 8, 1}, Shape{768, 24, 3}, Shape{2048, 16, 2},
                                        Shape{512, 40, 5}, Shape{256, 8, 7}, Shape{1536, 48, 13}, Shape{512, 16, 8},
                                        Shape{256, 32, 9}, Shape{256, 8, 18}};
  for (const Shape s : is_k_quant(t) ? blocks256 : blocks32) {
    const Rows r = random_rows(t, s.k, s.rows, rng);
    const size_t arow = static_cast<size_t>(row_bytes(file->act_type, s.k));
    std::vector<uint8_t> a(arow * static_cast<size_t>(s.cols)), z(r.w.size());
    std::vector<float> f(static_cast<size_t>(s.k));
    for (int64_t c = 0; c < s.cols; ++c) {
      for (float& v : f) v = nd(rng) * 2.0f;
      file->quantize_act(f.data(), a.data() + static_cast<size_t>(c) * arow, s.k);
    }
    pk->repack(r.w.data(), z.data(), s.k, s.rows);
    const float poison = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> same(static_cast<size_t>(s.rows * s.cols), poison), want(same), got(same);
    file->gemm(s.k, r.w.data(), r.row_bytes, s.rows, a.data(), arow, s.cols, same.data(), s.rows);
    ref->gemm(s.k, r.w.data(), r.row_bytes, s.rows, a.data(), arow, s.cols, want.data(), s.rows);
    const int64_t half = s.rows / 16 * 8;
    if (half > 0) pk->gemm(s.k, z.data(), r.row_bytes, half, a.data(), arow, s.cols, got.data(), s.rows);
    pk->gemm(s.k, z.data() + static_cast<size_t>(half) * r.row_bytes, r.row_bytes, s.rows - half, a.data(), arow,
             s.cols, got.data() + half, s.rows);
    double scale = 0.0;
    for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << dtype_name(t) << " unwritten output " << i;
      ASSERT_EQ(std::memcmp(&same[i], &got[i], 4), 0) << dtype_name(t) << " k=" << s.k << " rows=" << s.rows
                                                      << " cols=" << s.cols << " i=" << i << ": " << same[i] << " vs " << got[i];
      EXPECT_NEAR(got[i], want[i], 1e-5 * (1.0 + scale)) << dtype_name(t) << " k=" << s.k << " i=" << i;
    }
  }
}

TEST(PackedX8z, Q4_0I8mmMatchesTheFileLayoutKernels) { check_i8mm_packed(DType::Q4_0); }
TEST(PackedX8z, Q4_KI8mmMatchesTheFileLayoutKernels) { check_i8mm_packed(DType::Q4_K); }
TEST(PackedX8z, Q6_KI8mmMatchesTheFileLayoutKernels) { check_i8mm_packed(DType::Q6_K); }
TEST(PackedX8z, Q5_KI8mmMatchesTheFileLayoutKernels) { check_i8mm_packed(DType::Q5_K); }
TEST(PackedX8z, Q4_1I8mmMatchesTheFileLayoutKernels) { check_i8mm_packed(DType::Q4_1); }
TEST(PackedX8z, Q8_0I8mmMatchesTheFileLayoutKernels) { check_i8mm_packed(DType::Q8_0); }
TEST(PackedX8z, Q5_0I8mmMatchesTheFileLayoutKernels) { check_i8mm_packed(DType::Q5_0); }
TEST(PackedX8z, Q5_1I8mmMatchesTheFileLayoutKernels) { check_i8mm_packed(DType::Q5_1); }

}  // namespace
}  // namespace geniex
