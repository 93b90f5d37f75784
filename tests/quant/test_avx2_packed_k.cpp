// AVX2 packed K-quant layouts (Q4_Kx8, Q5_Kx8, Q6_Kx8; packed_k.cpp, packed_k_tiles_avx2.cpp):
// repacking keeps the 8-row group offsets, rows read back bit-exact, gemm matches a double
// reference and the scalar kernels on random and extreme blocks, writes every output and
// nothing else, and a column's result does not depend on the call's other columns or rows.
// Skipped with a message on CPUs without AVX2+FMA+F16C.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels.hpp"
#include "backends/cpu/kernels_internal.hpp"
#include "backends/cpu/packed.hpp"
#include "core/cpu_features.hpp"
#include "core/fp16.hpp"
#include "quant/quant.hpp"
#include "quant/test_util.hpp"

namespace geniex {
namespace {

enum class Fill { Quantized, RandomBytes, Extreme };

// n_rows rows of k elements of type t (Q4_K, Q5_K or Q6_K).
std::vector<uint8_t> make_weights(DType t, int64_t k, int64_t n_rows, Fill fill, std::mt19937& rng) {
  const size_t wrow = static_cast<size_t>(row_bytes(t, k));
  std::vector<uint8_t> w(wrow * static_cast<size_t>(n_rows));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> ud(0.001f, 0.05f);
  std::vector<float> f(static_cast<size_t>(k));
  for (int64_t r = 0; r < n_rows; ++r) {
    uint8_t* row = w.data() + static_cast<size_t>(r) * wrow;
    if (fill == Fill::Quantized) {
      const float shift = nd(rng);  // asymmetric rows exercise Q4_K's mins
      for (float& v : f) v = nd(rng) * 0.5f + shift;
      quant::quantize_row_ref(t, f.data(), row, k);
      continue;
    }
    for (size_t i = 0; i < wrow; ++i) row[i] = static_cast<uint8_t>(byte(rng));
    const bool extreme = fill == Fill::Extreme;
    for (int64_t b = 0; b < k / 256; ++b) {
      if (t == DType::Q5_K) {
        auto* blk = reinterpret_cast<quant::BlockQ5_K*>(row) + b;
        blk->d = f32_to_fp16(extreme ? 65504.0f : ud(rng));
        blk->dmin = f32_to_fp16(extreme ? 65504.0f : ud(rng));
        if (extreme) {
          // Every 6-bit scale and min 63; quants all 31 (or all 0 on odd rows).
          std::memset(blk->scales, 0xff, sizeof(blk->scales));
          std::memset(blk->qs, r % 2 == 0 ? 0xff : 0x00, sizeof(blk->qs));
          std::memset(blk->qh, r % 2 == 0 ? 0xff : 0x00, sizeof(blk->qh));
        }
      } else if (t == DType::Q4_K) {
        auto* blk = reinterpret_cast<quant::BlockQ4_K*>(row) + b;
        blk->d = f32_to_fp16(extreme ? 65504.0f : ud(rng));
        blk->dmin = f32_to_fp16(extreme ? 65504.0f : ud(rng));
        if (extreme) {
          // Every 6-bit scale and min 63; quants all 15 (or all 0 on odd rows).
          std::memset(blk->scales, 0xff, sizeof(blk->scales));
          std::memset(blk->qs, r % 2 == 0 ? 0xff : 0x00, sizeof(blk->qs));
        }
      } else {
        auto* blk = reinterpret_cast<quant::BlockQ6_K*>(row) + b;
        blk->d = f32_to_fp16(extreme ? 65504.0f : ud(rng));
        if (extreme) {
          // Scales -128 / 127, quants all 63 or all 0 (q - 32 = 31 or -32).
          for (int j = 0; j < 16; ++j) blk->scales[j] = static_cast<int8_t>(j % 2 == 0 ? -128 : 127);
          std::memset(blk->ql, r % 2 == 0 ? 0xff : 0x00, sizeof(blk->ql));
          std::memset(blk->qh, r % 2 == 0 ? 0xff : 0x00, sizeof(blk->qh));
        }
      }
    }
  }
  return w;
}

// n_cols Q8_K activation rows; Extreme: every quant +-127 (one sign per 16, bsums at +-2032).
std::vector<uint8_t> make_acts(int64_t k, int64_t n_cols, Fill fill, std::mt19937& rng) {
  const size_t arow = static_cast<size_t>(row_bytes(DType::Q8_K, k));
  std::vector<uint8_t> a(arow * static_cast<size_t>(n_cols));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(k));
  for (int64_t c = 0; c < n_cols; ++c) {
    uint8_t* row = a.data() + static_cast<size_t>(c) * arow;
    if (fill != Fill::Extreme) {
      for (float& v : f) v = nd(rng) * 2.0f;
      if (c == 1) std::fill(f.begin(), f.begin() + 256, 0.0f);  // an all-zero block (d = 0)
      quant::quantize_row_ref(DType::Q8_K, f.data(), row, k);
      continue;
    }
    for (int64_t b = 0; b < k / 256; ++b) {
      auto* blk = reinterpret_cast<quant::BlockQ8_K*>(row) + b;
      blk->d = 1.0f / 127.0f;
      for (int g = 0; g < 16; ++g) {
        const int8_t v = (rng() & 1) ? 127 : -127;
        for (int i = 0; i < 16; ++i) blk->qs[16 * g + i] = v;
        blk->bsums[g] = static_cast<int16_t>(16 * v);
      }
    }
  }
  return a;
}

void check_packed_k(DType t, Fill fill) {
  const cpu::PackedKernels* pk = cpu::packed_kernels_for_isa(t, "avx2");
  if (pk == nullptr) GTEST_SKIP() << "no AVX2 packed kernels for " << dtype_name(t) << " on this CPU";
  const cpu::TypeKernels* ref = cpu::kernels_for_isa(t, "scalar");
  ASSERT_NE(ref, nullptr);
  ASSERT_EQ(ref->act_type, DType::Q8_K);
  std::mt19937 rng = test::make_rng(static_cast<uint32_t>(t) * 16 + static_cast<uint32_t>(fill));
  struct Shape { int64_t k, rows, cols; };
  const Shape shapes[] = {{256, 8, 1},    {512, 16, 5},  {1536, 136, 13}, {2304, 24, 7}, {256, 136, 4},
                          {2304, 8, 13},  {512, 64, 2},  {1536, 8, 3},    {256, 40, 9},  {2304, 16, 1}};
  for (const Shape s : shapes) {
    SCOPED_TRACE(testing::Message() << dtype_name(t) << " k=" << s.k << " rows=" << s.rows << " cols=" << s.cols
                                    << " fill=" << static_cast<int>(fill));
    const size_t wrow = static_cast<size_t>(row_bytes(t, s.k));
    const size_t arow = static_cast<size_t>(row_bytes(DType::Q8_K, s.k));
    const std::vector<uint8_t> w = make_weights(t, s.k, s.rows, fill, rng);
    const std::vector<uint8_t> a = make_acts(s.k, s.cols, fill, rng);
    std::vector<uint8_t> packed(w.size());
    pk->repack(w.data(), packed.data(), s.k, s.rows);

    // Groups of 8 rows keep their offsets: repacking rows 8g.. alone gives the same bytes at 8g * wrow.
    for (int64_t g = 0; g < s.rows / 8; ++g) {
      std::vector<uint8_t> one(8 * wrow);
      pk->repack(w.data() + static_cast<size_t>(g) * 8 * wrow, one.data(), s.k, 8);
      ASSERT_EQ(std::memcmp(one.data(), packed.data() + static_cast<size_t>(g) * 8 * wrow, one.size()), 0) << "group " << g;
    }
    // Rows read back bit-exact.
    std::vector<float> want_row(static_cast<size_t>(s.k)), got_row(want_row);
    std::vector<std::vector<float>> wf(static_cast<size_t>(s.rows));
    for (int64_t r = 0; r < s.rows; ++r) {
      quant::dequantize_row_ref(t, w.data() + static_cast<size_t>(r) * wrow, want_row.data(), s.k);
      pk->dequantize_row(packed.data(), r, got_row.data(), s.k);
      ASSERT_EQ(std::memcmp(want_row.data(), got_row.data(), want_row.size() * 4), 0) << "row " << r;
      wf[static_cast<size_t>(r)] = want_row;
    }
    std::vector<std::vector<float>> af(static_cast<size_t>(s.cols), std::vector<float>(static_cast<size_t>(s.k)));
    for (int64_t c = 0; c < s.cols; ++c) {
      quant::dequantize_row_ref(DType::Q8_K, a.data() + static_cast<size_t>(c) * arow, af[static_cast<size_t>(c)].data(), s.k);
    }

    // Batched gemm, rows split in two calls like threads do, into a NaN-poisoned output with
    // padding between columns that must stay untouched.
    const float poison = std::numeric_limits<float>::quiet_NaN();
    const int64_t os = s.rows + 3;
    std::vector<float> got(static_cast<size_t>(os * s.cols), poison);
    const int64_t half = s.rows / 16 * 8;
    if (half > 0) pk->gemm(s.k, packed.data(), wrow, half, a.data(), arow, s.cols, got.data(), os);
    pk->gemm(s.k, packed.data() + static_cast<size_t>(half) * wrow, wrow, s.rows - half, a.data(), arow, s.cols,
             got.data() + half, os);
    std::vector<float> scal(static_cast<size_t>(s.rows * s.cols), poison);
    ref->gemm(s.k, w.data(), wrow, s.rows, a.data(), arow, s.cols, scal.data(), s.rows);
    for (int64_t c = 0; c < s.cols; ++c) {
      for (int64_t r = 0; r < os; ++r) {
        const float g = got[static_cast<size_t>(c * os + r)];
        if (r >= s.rows) {
          ASSERT_TRUE(std::isnan(g)) << "write outside the rows at c=" << c << " r=" << r;
          continue;
        }
        ASSERT_FALSE(std::isnan(g)) << "unwritten output c=" << c << " r=" << r;
        double want = 0.0, mag = 0.0;
        for (int64_t i = 0; i < s.k; ++i) {
          const double p = static_cast<double>(wf[static_cast<size_t>(r)][static_cast<size_t>(i)]) *
                           static_cast<double>(af[static_cast<size_t>(c)][static_cast<size_t>(i)]);
          want += p;
          mag += std::fabs(p);
        }
        // Exact integer sums per super-block; float rounding only in the per-block scaling
        // and the accumulation over blocks.
        const double tol = 2e-6 * mag + 1e-30;
        ASSERT_LE(std::fabs(static_cast<double>(g) - want), tol) << "c=" << c << " r=" << r << " got " << g << " want " << want;
        const float sv = scal[static_cast<size_t>(c * s.rows + r)];
        ASSERT_LE(std::fabs(static_cast<double>(g) - static_cast<double>(sv)), 2.0 * tol)
            << "vs scalar c=" << c << " r=" << r << " got " << g << " scalar " << sv;
      }
    }
    // Each column alone (decode) gives the batch's result bit for bit.
    for (int64_t c = 0; c < s.cols; ++c) {
      std::vector<float> one(static_cast<size_t>(s.rows), poison);
      pk->gemm(s.k, packed.data(), wrow, s.rows, a.data() + static_cast<size_t>(c) * arow, arow, 1, one.data(), s.rows);
      for (int64_t r = 0; r < s.rows; ++r) {
        ASSERT_EQ(std::memcmp(&one[static_cast<size_t>(r)], &got[static_cast<size_t>(c * os + r)], 4), 0)
            << "1-column call differs at c=" << c << " r=" << r << ": " << one[static_cast<size_t>(r)] << " vs "
            << got[static_cast<size_t>(c * os + r)];
      }
    }
  }
}

TEST(Avx2PackedK, Q4_KQuantized) { check_packed_k(DType::Q4_K, Fill::Quantized); }
TEST(Avx2PackedK, Q4_KRandomBytes) { check_packed_k(DType::Q4_K, Fill::RandomBytes); }
TEST(Avx2PackedK, Q4_KExtreme) { check_packed_k(DType::Q4_K, Fill::Extreme); }
TEST(Avx2PackedK, Q5_KQuantized) { check_packed_k(DType::Q5_K, Fill::Quantized); }
TEST(Avx2PackedK, Q5_KRandomBytes) { check_packed_k(DType::Q5_K, Fill::RandomBytes); }
TEST(Avx2PackedK, Q5_KExtreme) { check_packed_k(DType::Q5_K, Fill::Extreme); }
TEST(Avx2PackedK, Q6_KQuantized) { check_packed_k(DType::Q6_K, Fill::Quantized); }
TEST(Avx2PackedK, Q6_KRandomBytes) { check_packed_k(DType::Q6_K, Fill::RandomBytes); }
TEST(Avx2PackedK, Q6_KExtreme) { check_packed_k(DType::Q6_K, Fill::Extreme); }

// K kernels over the AVX2 K layouts that must give the AVX2 K tiles' bits: the AMX-INT8 gemm
// (packed_tiles_amx.cpp), the AVX-VNNI tiles (packed_k_tiles_avxvnni.cpp) and the 16-row
// AVX-512 VNNI tiles (packed_k_tiles16_avx512vnni.cpp). The same repack and read-back, and a
// gemm whose every output is the AVX2 K tiles' bits, including a last group of 8 rows, partial
// column tiles (the edges, 1 to 3 columns), one-column calls (decode) and windows of columns
// starting mid-tile.
void check_k_same_bits(DType t, Fill fill, const char* isa) {
  const cpu::PackedKernels* amx = cpu::packed_kernels_for_isa(t, isa);
  const cpu::PackedKernels* avx2 = cpu::packed_kernels_for_isa(t, "avx2");
  ASSERT_NE(amx, nullptr);
  ASSERT_NE(avx2, nullptr);
  EXPECT_EQ(amx->repack, avx2->repack);
  EXPECT_EQ(amx->dequantize_row, avx2->dequantize_row);
  std::mt19937 rng = test::make_rng(0x4b00u + static_cast<uint32_t>(t) * 16 + static_cast<uint32_t>(fill));
  struct Shape { int64_t k, rows, cols; };
  const Shape shapes[] = {{256, 16, 16},  {512, 24, 33}, {2304, 32, 17}, {1536, 40, 48},
                          {256, 136, 20}, {768, 16, 64}, {512, 8, 40},   {1024, 48, 15},
                          {2048, 48, 1},  {512, 40, 1}};  // one column (decode): pairs and an odd group
  for (const Shape s : shapes) {
    SCOPED_TRACE(testing::Message() << dtype_name(t) << " k=" << s.k << " rows=" << s.rows << " cols=" << s.cols
                                    << " fill=" << static_cast<int>(fill));
    const size_t wrow = static_cast<size_t>(row_bytes(t, s.k));
    const size_t arow = static_cast<size_t>(row_bytes(DType::Q8_K, s.k));
    const std::vector<uint8_t> w = make_weights(t, s.k, s.rows, fill, rng);
    const std::vector<uint8_t> a = make_acts(s.k, s.cols, fill, rng);
    std::vector<uint8_t> packed(w.size());
    amx->repack(w.data(), packed.data(), s.k, s.rows);
    const float poison = std::numeric_limits<float>::quiet_NaN();
    const int64_t os = s.rows + 3;
    std::vector<float> want(static_cast<size_t>(os * s.cols), poison), got(want);
    avx2->gemm(s.k, packed.data(), wrow, s.rows, a.data(), arow, s.cols, want.data(), os);
    amx->gemm(s.k, packed.data(), wrow, s.rows, a.data(), arow, s.cols, got.data(), os);
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(got[i])) << "write outside the rows at " << i;
        continue;
      }
      ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "c=" << i / static_cast<size_t>(os) << " r="
                                                      << i % static_cast<size_t>(os) << ": " << got[i] << " vs " << want[i];
    }
    // Each column alone (decode: one-column calls take their own path in some kernels).
    for (int64_t c = 0; c < s.cols; c += std::max<int64_t>(1, s.cols / 3)) {
      std::vector<float> col(static_cast<size_t>(s.rows + 1), poison);
      amx->gemm(s.k, packed.data(), wrow, s.rows, a.data() + static_cast<size_t>(c) * arow, arow, 1, col.data(), s.rows);
      ASSERT_TRUE(std::isnan(col[static_cast<size_t>(s.rows)])) << "one column wrote past the rows";
      ASSERT_EQ(std::memcmp(col.data(), want.data() + c * os, static_cast<size_t>(s.rows) * 4), 0) << "column " << c << " alone";
    }
    if (s.cols > 18 && s.rows >= 32) {
      const int64_t c0 = 3, r0 = 16;
      std::vector<float> sub(static_cast<size_t>(os * (s.cols - c0)), poison);
      amx->gemm(s.k, packed.data() + static_cast<size_t>(r0) * wrow, wrow, s.rows - r0,
                a.data() + static_cast<size_t>(c0) * arow, arow, s.cols - c0, sub.data() + r0, os);
      for (int64_t c = c0; c < s.cols; ++c) {
        ASSERT_EQ(std::memcmp(sub.data() + (c - c0) * os + r0, want.data() + c * os + r0,
                              static_cast<size_t>(s.rows - r0) * 4),
                  0)
            << "column " << c << " in the window";
      }
    }
  }
}

// AMX: skipped where the CPU (or the OS) has no usable AMX-INT8.
void check_amx_k(DType t, Fill fill) {
  if (!cpu_features().amx_int8) GTEST_SKIP() << "no usable AMX-INT8 on this CPU";
  check_k_same_bits(t, fill, "amx");
}

// AVX-VNNI: skipped where CPUID does not report it (or GENIEX_CPU_DISABLE=avxvnni).
void check_avxvnni_k(DType t, Fill fill) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avxvnni && f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX-VNNI on this CPU";
  check_k_same_bits(t, fill, "avxvnni");
}

// The 16-row AVX-512 VNNI K tiles (Q4_K, Q5_K, Q6_K): skipped without AVX-512 VNNI.
void check_avx512vnni16_k(DType t, Fill fill) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx512f && f.avx512bw && f.avx512vnni && f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  check_k_same_bits(t, fill, "avx512vnni16");
  // Both decode choices (kernels_internal.hpp's DecodeRows), whichever this CPU takes.
  check_k_same_bits(t, fill, "avx512vnni16-d8");
  check_k_same_bits(t, fill, "avx512vnni16-d16");
}

// The 8-row K tiles with EVEX-encoded VNNI on ymm (packed_k_tiles8_avx512vnni.cpp): skipped
// without AVX-512 VNNI.
void check_avx512vnni8_k(DType t, Fill fill) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx512f && f.avx512bw && f.avx512vnni && f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  check_k_same_bits(t, fill, "avx512vnni8");
}

// The AVX-512 Q6_K decode tile (packed_k_tiles_avx512.cpp): one column at a time, pairs of 8-row
// groups and a last odd group, the AVX2 K tile's bits. Skipped without AVX-512 F + BW.
void check_avx512_q6_k(Fill fill) {
  const cpu::PackedKernels* z = cpu::packed_kernels_for_isa(DType::Q6_K, "avx512");
  if (z == nullptr) GTEST_SKIP() << "no AVX-512 on this CPU";
  const cpu::PackedKernels* avx2 = cpu::packed_kernels_for_isa(DType::Q6_K, "avx2");
  ASSERT_NE(avx2, nullptr);
  EXPECT_EQ(z->repack, avx2->repack);
  std::mt19937 rng = test::make_rng(0x5e00u + static_cast<uint32_t>(fill));
  struct Shape { int64_t k, rows, cols; };
  const Shape shapes[] = {{256, 16, 3}, {512, 24, 2}, {2304, 8, 2}, {1536, 40, 3}, {256, 136, 2}, {768, 32, 1}};
  for (const Shape s : shapes) {
    SCOPED_TRACE(testing::Message() << "k=" << s.k << " rows=" << s.rows << " fill=" << static_cast<int>(fill));
    const size_t wrow = static_cast<size_t>(row_bytes(DType::Q6_K, s.k));
    const size_t arow = static_cast<size_t>(row_bytes(DType::Q8_K, s.k));
    const std::vector<uint8_t> w = make_weights(DType::Q6_K, s.k, s.rows, fill, rng);
    const std::vector<uint8_t> a = make_acts(s.k, s.cols, fill, rng);
    std::vector<uint8_t> packed(w.size());
    z->repack(w.data(), packed.data(), s.k, s.rows);
    const float poison = std::numeric_limits<float>::quiet_NaN();
    for (int64_t c = 0; c < s.cols; ++c) {
      std::vector<float> want(static_cast<size_t>(s.rows + 2), poison), got(want);
      avx2->gemm(s.k, packed.data(), wrow, s.rows, a.data() + static_cast<size_t>(c) * arow, arow, 1, want.data(), s.rows);
      z->gemm(s.k, packed.data(), wrow, s.rows, a.data() + static_cast<size_t>(c) * arow, arow, 1, got.data(), s.rows);
      ASSERT_TRUE(std::isnan(got[static_cast<size_t>(s.rows)])) << "wrote past the rows";
      ASSERT_EQ(std::memcmp(got.data(), want.data(), static_cast<size_t>(s.rows) * 4), 0) << "column " << c;
    }
    // Several columns: the AVX2 tiles' result as such.
    std::vector<float> want(static_cast<size_t>(s.rows * s.cols)), got(want);
    avx2->gemm(s.k, packed.data(), wrow, s.rows, a.data(), arow, s.cols, want.data(), s.rows);
    z->gemm(s.k, packed.data(), wrow, s.rows, a.data(), arow, s.cols, got.data(), s.rows);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
  }
}

TEST(Avx512PackedK, Q6_KQuantized) { check_avx512_q6_k(Fill::Quantized); }
TEST(Avx512PackedK, Q6_KRandomBytes) { check_avx512_q6_k(Fill::RandomBytes); }
TEST(Avx512PackedK, Q6_KExtreme) { check_avx512_q6_k(Fill::Extreme); }

TEST(AmxPackedK, Q4_KQuantized) { check_amx_k(DType::Q4_K, Fill::Quantized); }
TEST(AmxPackedK, Q4_KExtreme) { check_amx_k(DType::Q4_K, Fill::Extreme); }
TEST(AmxPackedK, Q4_KRandomBytes) { check_amx_k(DType::Q4_K, Fill::RandomBytes); }
TEST(AmxPackedK, Q5_KQuantized) { check_amx_k(DType::Q5_K, Fill::Quantized); }
TEST(AmxPackedK, Q5_KExtreme) { check_amx_k(DType::Q5_K, Fill::Extreme); }
TEST(AmxPackedK, Q5_KRandomBytes) { check_amx_k(DType::Q5_K, Fill::RandomBytes); }
TEST(AmxPackedK, Q6_KQuantized) { check_amx_k(DType::Q6_K, Fill::Quantized); }
TEST(AmxPackedK, Q6_KExtreme) { check_amx_k(DType::Q6_K, Fill::Extreme); }
TEST(AmxPackedK, Q6_KRandomBytes) { check_amx_k(DType::Q6_K, Fill::RandomBytes); }

TEST(AvxVnniPackedK, Q4_KQuantized) { check_avxvnni_k(DType::Q4_K, Fill::Quantized); }
TEST(AvxVnniPackedK, Q4_KExtreme) { check_avxvnni_k(DType::Q4_K, Fill::Extreme); }
TEST(AvxVnniPackedK, Q4_KRandomBytes) { check_avxvnni_k(DType::Q4_K, Fill::RandomBytes); }
TEST(AvxVnniPackedK, Q5_KQuantized) { check_avxvnni_k(DType::Q5_K, Fill::Quantized); }
TEST(AvxVnniPackedK, Q5_KExtreme) { check_avxvnni_k(DType::Q5_K, Fill::Extreme); }
TEST(AvxVnniPackedK, Q5_KRandomBytes) { check_avxvnni_k(DType::Q5_K, Fill::RandomBytes); }
TEST(AvxVnniPackedK, Q6_KQuantized) { check_avxvnni_k(DType::Q6_K, Fill::Quantized); }
TEST(AvxVnniPackedK, Q6_KExtreme) { check_avxvnni_k(DType::Q6_K, Fill::Extreme); }
TEST(AvxVnniPackedK, Q6_KRandomBytes) { check_avxvnni_k(DType::Q6_K, Fill::RandomBytes); }

TEST(Avx512Vnni16PackedK, Q4_KQuantized) { check_avx512vnni16_k(DType::Q4_K, Fill::Quantized); }
TEST(Avx512Vnni16PackedK, Q4_KExtreme) { check_avx512vnni16_k(DType::Q4_K, Fill::Extreme); }
TEST(Avx512Vnni16PackedK, Q4_KRandomBytes) { check_avx512vnni16_k(DType::Q4_K, Fill::RandomBytes); }
TEST(Avx512Vnni16PackedK, Q5_KQuantized) { check_avx512vnni16_k(DType::Q5_K, Fill::Quantized); }
TEST(Avx512Vnni16PackedK, Q5_KExtreme) { check_avx512vnni16_k(DType::Q5_K, Fill::Extreme); }
TEST(Avx512Vnni16PackedK, Q5_KRandomBytes) { check_avx512vnni16_k(DType::Q5_K, Fill::RandomBytes); }
TEST(Avx512Vnni16PackedK, Q6_KQuantized) { check_avx512vnni16_k(DType::Q6_K, Fill::Quantized); }
TEST(Avx512Vnni16PackedK, Q6_KExtreme) { check_avx512vnni16_k(DType::Q6_K, Fill::Extreme); }
TEST(Avx512Vnni16PackedK, Q6_KRandomBytes) { check_avx512vnni16_k(DType::Q6_K, Fill::RandomBytes); }

TEST(Avx512Vnni8PackedK, Q4_KQuantized) { check_avx512vnni8_k(DType::Q4_K, Fill::Quantized); }
TEST(Avx512Vnni8PackedK, Q4_KExtreme) { check_avx512vnni8_k(DType::Q4_K, Fill::Extreme); }
TEST(Avx512Vnni8PackedK, Q4_KRandomBytes) { check_avx512vnni8_k(DType::Q4_K, Fill::RandomBytes); }
TEST(Avx512Vnni8PackedK, Q5_KQuantized) { check_avx512vnni8_k(DType::Q5_K, Fill::Quantized); }
TEST(Avx512Vnni8PackedK, Q5_KExtreme) { check_avx512vnni8_k(DType::Q5_K, Fill::Extreme); }
TEST(Avx512Vnni8PackedK, Q5_KRandomBytes) { check_avx512vnni8_k(DType::Q5_K, Fill::RandomBytes); }
TEST(Avx512Vnni8PackedK, Q6_KQuantized) { check_avx512vnni8_k(DType::Q6_K, Fill::Quantized); }
TEST(Avx512Vnni8PackedK, Q6_KExtreme) { check_avx512vnni8_k(DType::Q6_K, Fill::Extreme); }
TEST(Avx512Vnni8PackedK, Q6_KRandomBytes) { check_avx512vnni8_k(DType::Q6_K, Fill::RandomBytes); }

#if defined(__x86_64__) || defined(_M_X64)
// The one-column (decode) K tiles behind the wider ones: AVX-VNNI's where the CPU has it, else
// the EVEX ones for Q4_K and Q5_K where it has AVX-512 VNNI (Q6_K's measured slower there and
// stays on AVX2's), else AVX2's.
TEST(Avx2PackedK, EdgeSelection) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX2 on this CPU";
  const bool evex = f.avx512f && f.avx512bw && f.avx512vnni;
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const cpu::PackedKernels* e = cpu::packed_kernels_k8_edge(t);
    ASSERT_NE(e, nullptr);
    const std::string base = t == DType::Q4_K ? "q4_kx8" : t == DType::Q5_K ? "q5_kx8" : "q6_kx8";
    const std::string want = f.avxvnni ? base + "_vnni" : evex && t != DType::Q6_K ? base + "_evex_vnni" : base;
    EXPECT_EQ(e->name, want) << dtype_name(t);
  }
}
#endif

// The CPU backend picks these layouts for K-quant matrices (rows a multiple of 8), and not
// with GENIEX_REPACK=0.
TEST(Avx2PackedK, Selection) {
  if (cpu::packed_kernels_for_isa(DType::Q4_K, "avx2") == nullptr) GTEST_SKIP() << "no AVX2 on this CPU";
  const char* old = std::getenv("GENIEX_REPACK");
  const std::string saved = old ? old : "";
  ::unsetenv("GENIEX_REPACK");
  const cpu::PackedKernels* q4 = cpu::packed_kernels_for(DType::Q4_K, 2048, 64);
  const cpu::PackedKernels* q6 = cpu::packed_kernels_for(DType::Q6_K, 2048, 64);
  const cpu::PackedKernels* q5 = cpu::packed_kernels_for(DType::Q5_K, 2048, 64);
  const cpu::PackedKernels* odd = cpu::packed_kernels_for(DType::Q4_K, 2048, 60);
  ::setenv("GENIEX_REPACK", "0", 1);
  const cpu::PackedKernels* off = cpu::packed_kernels_for(DType::Q4_K, 2048, 64);
  if (old) {
    ::setenv("GENIEX_REPACK", saved.c_str(), 1);
  } else {
    ::unsetenv("GENIEX_REPACK");
  }
  ASSERT_NE(q4, nullptr);
  ASSERT_NE(q6, nullptr);
  // Where AMX-INT8 is usable the same layouts come with the AMX prefill gemm, else with the
  // 16-row AVX-512 VNNI tiles where the CPU has AVX-512 VNNI; on other AVX-512 CPUs Q6_K's comes
  // with the 16-row decode tile; else with the AVX-VNNI tiles where the CPU has them.
  const CpuFeatures& f = cpu_features();
  const bool z16 = f.avx512f && f.avx512bw && f.avx512vnni;
  const std::string sfx = f.amx_int8 ? "_amx" : z16 ? "_z16" : f.avxvnni ? "_vnni" : "";
  EXPECT_EQ(q4->name, "q4_kx8" + sfx);
  EXPECT_EQ(q6->name, "q6_kx8" + (f.amx_int8 || z16 ? sfx : f.avx512f && f.avx512bw ? std::string("_avx512") : sfx));
  ASSERT_NE(q5, nullptr);
  EXPECT_EQ(q5->name, "q5_kx8" + sfx);
  EXPECT_EQ(odd, nullptr);
  EXPECT_EQ(off, nullptr);
}

}  // namespace
}  // namespace geniex
