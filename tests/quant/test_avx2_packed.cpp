// The AVX2 packed 8-row layouts (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1; packed_tiles_avx2.cpp): repack and
// row read-back bit-exact with the reference, gemm near the scalar reference within a bound
// derived from float rounding, outputs outside the rows untouched, every column of a batch the
// same bits alone (decode) and in any window of columns (tile position, tails), and the
// GENIEX_AVX2_EXACT=1 kernels bit for bit the file layout's AVX2 gemm.
// Skipped with a message on CPUs without AVX2+FMA+F16C.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels.hpp"
#include "backends/cpu/packed.hpp"
#include "core/cpu_features.hpp"
#include "core/fp16.hpp"
#include "quant/quant.hpp"
#include "test_util.hpp"

namespace geniex {
namespace {

struct Case {
  int64_t k, rows, cols;
};

// The types with a min (m_w s_a term, Q8_1 activations).
bool has_min(DType t) { return t == DType::Q4_1 || t == DType::Q5_1; }

// Byte offsets of the per-row fp16 fields in the file's block: d, and Q4_1's / Q5_1's m.
int n_fields(DType t) { return has_min(t) ? 2 : 1; }

// Weight rows: quantized normal values (Q4_1 / Q5_1 rows shifted so the mins matter), raw random
// quant bytes (every code, Q8_0's -128 included) under random scales, and all-extreme codes
// (largest i16 partial sums in the kernels).
std::vector<uint8_t> make_weights(DType t, const Case& s, std::mt19937& rng) {
  const size_t wrow = static_cast<size_t>(row_bytes(t, s.k));
  const size_t bbytes = static_cast<size_t>(row_bytes(t, 32));
  std::vector<uint8_t> w(wrow * static_cast<size_t>(s.rows));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<float> f(static_cast<size_t>(s.k));
  for (int64_t r = 0; r < s.rows; ++r) {
    uint8_t* row = w.data() + static_cast<size_t>(r) * wrow;
    const int kind = static_cast<int>(rng() % 4);
    if (kind <= 1) {
      const float shift = has_min(t) ? nd(rng) : 0.0f;
      for (float& v : f) v = nd(rng) + shift;
      quant::quantize_row_ref(t, f.data(), row, s.k);
      continue;
    }
    for (int64_t b = 0; b < s.k / 32; ++b) {
      uint8_t* blk = row + static_cast<size_t>(b) * bbytes;
      for (size_t i = 2 * static_cast<size_t>(n_fields(t)); i < bbytes; ++i) {
        if (kind == 2) {
          blk[i] = static_cast<uint8_t>(byte(rng));
        } else {
          // Q8_0: -128 or 127 in turn (|w| x |a| at its largest); 4- and 5-bit: every bit set.
          blk[i] = t == DType::Q8_0 ? static_cast<uint8_t>(i % 2 ? 0x80 : 0x7f) : 0xff;
        }
      }
      for (int fi = 0; fi < n_fields(t); ++fi) {
        const uint16_t h = f32_to_fp16(nd(rng) * 0.05f);
        std::memcpy(blk + 2 * fi, &h, 2);
      }
    }
  }
  return w;
}

// Activation columns: normal values at varied scales, constant +c and -c (all codes +-127).
std::vector<uint8_t> make_acts(const cpu::TypeKernels* ref, const Case& s, std::mt19937& rng) {
  const size_t arow = static_cast<size_t>(row_bytes(ref->act_type, s.k));
  std::vector<uint8_t> a(arow * static_cast<size_t>(s.cols));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(s.k));
  for (int64_t c = 0; c < s.cols; ++c) {
    const int kind = static_cast<int>(rng() % 5);
    for (float& v : f) v = kind == 3 ? 1.5f : kind == 4 ? -0.75f : nd(rng) * (kind == 0 ? 0.01f : 3.0f);
    ref->quantize_act(f.data(), a.data() + static_cast<size_t>(c) * arow, s.k);
  }
  return a;
}

// Sum over blocks of |d_w d_a| sum_i |q_i a_i| (+ |m_w s_a| for Q4_1 / Q5_1) for weight row w and
// activation row a: what the float rounding of any evaluation order scales with (block sums
// or the 8-lane partial sums of the decode path alike).
double magnitude(DType t, const uint8_t* w, const uint8_t* a, int64_t k) {
  const size_t bbytes = static_cast<size_t>(row_bytes(t, 32));
  const size_t abytes = has_min(t) ? sizeof(quant::BlockQ8_1) : sizeof(quant::BlockQ8_0);
  const size_t aq = has_min(t) ? 4 : 2;
  double m = 0;
  std::vector<uint8_t> blk(bbytes);
  float q[32];
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* wb = w + static_cast<size_t>(b) * bbytes;
    const uint8_t* ab = a + static_cast<size_t>(b) * abytes;
    // The block's integer codes: its dequantization with d = 1 and m = 0.
    std::memcpy(blk.data(), wb, bbytes);
    const uint16_t one = f32_to_fp16(1.0f), zero = 0;
    std::memcpy(blk.data(), &one, 2);
    if (has_min(t)) std::memcpy(blk.data() + 2, &zero, 2);
    quant::dequantize_row_ref(t, blk.data(), q, 32);
    double sumi = 0;
    for (int i = 0; i < 32; ++i) sumi += std::fabs(static_cast<double>(q[i]) * static_cast<int8_t>(ab[aq + static_cast<size_t>(i)]));
    uint16_t dw, da;
    std::memcpy(&dw, wb, 2);
    std::memcpy(&da, ab, 2);
    m += std::fabs(static_cast<double>(fp16_to_f32(dw)) * static_cast<double>(fp16_to_f32(da)) * sumi);
    if (has_min(t)) {
      uint16_t mw, sa;
      std::memcpy(&mw, wb + 2, 2);
      std::memcpy(&sa, ab + 2, 2);
      m += std::fabs(static_cast<double>(fp16_to_f32(mw)) * static_cast<double>(fp16_to_f32(sa)));
    }
  }
  return m;
}

void check_type(DType t) {
  const cpu::PackedKernels* pk = cpu::packed_kernels_for_isa(t, "avx2");
  if (pk == nullptr) GTEST_SKIP() << "no AVX2 packed kernels for " << dtype_name(t) << " on this CPU";
  const CpuFeatures& f = cpu_features();
  if ((!f.avx512f || !f.avx512bw) && !f.avxvnni) {
    // Without AVX-512 and AVX-VNNI the AVX2 tiles are the ones the CPU backend repacks for.
    EXPECT_EQ(cpu::packed_kernels_for(t, 256, 64), pk);
  }
  ::setenv("GENIEX_AVX2_EXACT", "1", 1);
  const cpu::PackedKernels* exact = cpu::packed_kernels_for_isa(t, "avx2");
  ::unsetenv("GENIEX_AVX2_EXACT");
  const cpu::TypeKernels* ref = cpu::kernels_for_isa(t, "scalar");
  ASSERT_NE(ref, nullptr);
  std::mt19937 rng = test::make_rng(0xa2u + static_cast<uint32_t>(t));
  std::vector<Case> cases = {{32, 8, 1},    {64, 16, 4},   {96, 40, 5},   {160, 8, 7},    {576, 48, 13},
                             {1536, 32, 9}, {2048, 16, 1}, {8192, 8, 3},  {576, 24, 17},  {128, 64, 2}};
  for (int i = 0; i < 12; ++i) {
    cases.push_back({32 * static_cast<int64_t>(1 + rng() % 80), 8 * static_cast<int64_t>(1 + rng() % 9),
                     static_cast<int64_t>(1 + rng() % 21)});
  }
  for (const Case& s : cases) {
    SCOPED_TRACE(testing::Message() << dtype_name(t) << " k=" << s.k << " rows=" << s.rows << " cols=" << s.cols);
    const size_t wrow = static_cast<size_t>(row_bytes(t, s.k));
    const size_t arow = static_cast<size_t>(row_bytes(ref->act_type, s.k));
    const std::vector<uint8_t> w = make_weights(t, s, rng);
    const std::vector<uint8_t> a = make_acts(ref, s, rng);

    // Repack: same size; repacking group ranges separately (as the loader's threads do) gives
    // the same bytes as one call.
    std::vector<uint8_t> packed(w.size()), parts(w.size(), 0xcd);
    pk->repack(w.data(), packed.data(), s.k, s.rows);
    const int64_t split = s.rows / 16 * 8;
    if (split > 0) pk->repack(w.data(), parts.data(), s.k, split);
    pk->repack(w.data() + static_cast<size_t>(split) * wrow, parts.data() + static_cast<size_t>(split) * wrow, s.k,
               s.rows - split);
    ASSERT_EQ(packed, parts);

    // Rows read back bit for bit.
    std::vector<float> want_row(static_cast<size_t>(s.k)), got_row(want_row);
    for (int64_t r = 0; r < s.rows; ++r) {
      quant::dequantize_row_ref(t, w.data() + static_cast<size_t>(r) * wrow, want_row.data(), s.k);
      pk->dequantize_row(packed.data(), r, got_row.data(), s.k);
      ASSERT_EQ(std::memcmp(want_row.data(), got_row.data(), want_row.size() * 4), 0) << "row " << r;
    }

    // gemm over all columns, rows split in two at a multiple of 8 like the backend's threads;
    // outputs have a stride past the rows, whose padding must stay NaN.
    const int64_t os = s.rows + 5;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> want(static_cast<size_t>(os * s.cols), nan), got(want);
    ref->gemm(s.k, w.data(), wrow, s.rows, a.data(), arow, s.cols, want.data(), os);
    if (split > 0) pk->gemm(s.k, packed.data(), wrow, split, a.data(), arow, s.cols, got.data(), os);
    pk->gemm(s.k, packed.data() + static_cast<size_t>(split) * wrow, wrow, s.rows - split, a.data(), arow, s.cols,
             got.data() + split, os);
    for (int64_t c = 0; c < s.cols; ++c) {
      for (int64_t r = 0; r < os; ++r) {
        const float g = got[static_cast<size_t>(c * os + r)];
        if (r >= s.rows) {
          ASSERT_TRUE(std::isnan(g)) << "wrote past the rows: c=" << c << " r=" << r;
          continue;
        }
        ASSERT_FALSE(std::isnan(g)) << "unwritten output c=" << c << " r=" << r;
        const double m = magnitude(t, w.data() + static_cast<size_t>(r) * wrow, a.data() + static_cast<size_t>(c) * arow, s.k);
        // Both sides round once per block product and once per accumulation: a few units of
        // 2^-24 per block on the sum of the blocks' magnitudes.
        const double bound = 4.0 * static_cast<double>(s.k / 32 + 2) * std::ldexp(1.0, -24) * m + 1e-30;
        const float wv = want[static_cast<size_t>(c * os + r)];
        ASSERT_LE(std::fabs(static_cast<double>(g) - static_cast<double>(wv)), bound) << "c=" << c << " r=" << r << ": " << g << " vs " << wv;
      }
    }

    // Decode vs batch: each column alone (decode) and in windows of columns that move it to
    // other tile positions and tails gives the same bits as in the full batch.
    std::vector<float> one(static_cast<size_t>(s.rows), nan);
    for (int64_t c = 0; c < s.cols; ++c) {
      pk->gemm(s.k, packed.data(), wrow, s.rows, a.data() + static_cast<size_t>(c) * arow, arow, 1, one.data(), s.rows);
      ASSERT_EQ(std::memcmp(one.data(), got.data() + c * os, one.size() * 4), 0) << "column " << c << " alone";
    }
    for (int64_t start = 1; start + 2 <= s.cols && start < 4; ++start) {
      for (int64_t end : {s.cols, std::min<int64_t>(s.cols, start + 2 + (start % 3))}) {
        std::vector<float> sub(static_cast<size_t>(os * (end - start)), nan);
        pk->gemm(s.k, packed.data(), wrow, s.rows, a.data() + static_cast<size_t>(start) * arow, arow, end - start,
                 sub.data(), os);
        for (int64_t c = start; c < end; ++c) {
          ASSERT_EQ(std::memcmp(sub.data() + (c - start) * os, got.data() + c * os, static_cast<size_t>(s.rows) * 4), 0)
              << "column " << c << " in the batch " << start << ".." << end;
        }
      }
    }

    // GENIEX_AVX2_EXACT=1: same layout, the file layout's AVX2 gemm bit for bit, in a batch
    // and one column at a time.
    if (exact != nullptr) {
      ASSERT_NE(exact, pk);
      const cpu::TypeKernels* avx2 = cpu::kernels_for_isa(t, "avx2");
      ASSERT_NE(avx2, nullptr);
      std::vector<float> file(want.size(), nan), ex(want.size(), nan);
      avx2->gemm(s.k, w.data(), wrow, s.rows, a.data(), arow, s.cols, file.data(), os);
      exact->gemm(s.k, packed.data(), wrow, s.rows, a.data(), arow, s.cols, ex.data(), os);
      ASSERT_EQ(std::memcmp(ex.data(), file.data(), ex.size() * 4), 0) << "exact batch vs the file layout";
      const int64_t c = s.cols - 1;
      exact->gemm(s.k, packed.data(), wrow, s.rows, a.data() + static_cast<size_t>(c) * arow, arow, 1, one.data(), s.rows);
      ASSERT_EQ(std::memcmp(one.data(), file.data() + c * os, one.size() * 4), 0) << "exact column alone vs the file layout";
    }
  }
}

TEST(Avx2Packed, Q4_0) { check_type(DType::Q4_0); }
TEST(Avx2Packed, Q4_1) { check_type(DType::Q4_1); }
TEST(Avx2Packed, Q8_0) { check_type(DType::Q8_0); }
TEST(Avx2Packed, Q5_0) { check_type(DType::Q5_0); }
TEST(Avx2Packed, Q5_1) { check_type(DType::Q5_1); }

// Kernels over the AVX2 layouts that must give the AVX2 tiles' bits (same repack and
// read-back): AMX-INT8 (packed_tiles_amx.cpp), AVX-VNNI (packed_tiles_avxvnni.cpp) and the
// 16-row AVX-512 VNNI tiles (packed_tiles16_avx512vnni.cpp). Cases: 16 x 16 AMX tiles, odd
// block counts (the last block outside the pairs of C tiles), a last group of 8 rows and partial
// column tiles through the edges, one-column calls (decode), windows that start mid-tile. Neither has
// GENIEX_AVX2_EXACT=1 kernels (the file-layout order).
void check_same_bits(DType t, const char* isa) {
  const cpu::PackedKernels* amx = cpu::packed_kernels_for_isa(t, isa);
  const cpu::PackedKernels* avx2 = cpu::packed_kernels_for_isa(t, "avx2");
  ASSERT_NE(amx, nullptr);
  ASSERT_NE(avx2, nullptr);
  EXPECT_EQ(amx->repack, avx2->repack);
  EXPECT_EQ(amx->dequantize_row, avx2->dequantize_row);
  ::setenv("GENIEX_AVX2_EXACT", "1", 1);
  EXPECT_EQ(cpu::packed_kernels_for_isa(t, isa), nullptr);
  ::unsetenv("GENIEX_AVX2_EXACT");
  const cpu::TypeKernels* ref = cpu::kernels_for_isa(t, "scalar");
  ASSERT_NE(ref, nullptr);
  std::mt19937 rng = test::make_rng(0x4a11u + static_cast<uint32_t>(t));
  std::vector<Case> cases = {{32, 16, 16},  {64, 32, 33},  {96, 24, 17},   {576, 48, 64},  {2048, 16, 40},
                             {160, 40, 31}, {8192, 16, 16}, {1536, 64, 48}, {288, 8, 20},   {64, 16, 15},
                             {576, 48, 1},  {2048, 40, 1}};  // one column (decode): pairs and an odd group
  for (int i = 0; i < 10; ++i) {
    cases.push_back({32 * static_cast<int64_t>(1 + rng() % 70), 8 * static_cast<int64_t>(1 + rng() % 10),
                     static_cast<int64_t>(1 + rng() % 70)});
  }
  for (const Case& s : cases) {
    SCOPED_TRACE(testing::Message() << dtype_name(t) << " k=" << s.k << " rows=" << s.rows << " cols=" << s.cols);
    const size_t wrow = static_cast<size_t>(row_bytes(t, s.k));
    const size_t arow = static_cast<size_t>(row_bytes(ref->act_type, s.k));
    const std::vector<uint8_t> w = make_weights(t, s, rng);
    const std::vector<uint8_t> a = make_acts(ref, s, rng);
    std::vector<uint8_t> packed(w.size());
    amx->repack(w.data(), packed.data(), s.k, s.rows);
    const int64_t os = s.rows + 3;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> want(static_cast<size_t>(os * s.cols), nan), got(want);
    avx2->gemm(s.k, packed.data(), wrow, s.rows, a.data(), arow, s.cols, want.data(), os);
    amx->gemm(s.k, packed.data(), wrow, s.rows, a.data(), arow, s.cols, got.data(), os);
    for (int64_t c = 0; c < s.cols; ++c) {
      for (int64_t r = 0; r < os; ++r) {
        const float g = got[static_cast<size_t>(c * os + r)];
        if (r >= s.rows) {
          ASSERT_TRUE(std::isnan(g)) << "wrote past the rows: c=" << c << " r=" << r;
          continue;
        }
        const float wv = want[static_cast<size_t>(c * os + r)];
        ASSERT_EQ(std::memcmp(&g, &wv, 4), 0) << "c=" << c << " r=" << r << ": " << g << " vs " << wv;
      }
    }
    // Each column alone (decode: one-column calls take their own path in some kernels).
    for (int64_t c = 0; c < s.cols; c += std::max<int64_t>(1, s.cols / 3)) {
      std::vector<float> col(static_cast<size_t>(s.rows + 1), nan);
      amx->gemm(s.k, packed.data(), wrow, s.rows, a.data() + static_cast<size_t>(c) * arow, arow, 1, col.data(), s.rows);
      ASSERT_TRUE(std::isnan(col[static_cast<size_t>(s.rows)])) << "one column wrote past the rows";
      ASSERT_EQ(std::memcmp(col.data(), want.data() + c * os, static_cast<size_t>(s.rows) * 4), 0) << "column " << c << " alone";
    }
    // A window of columns starting mid-tile, rows from the second row tile on.
    if (s.cols > 18 && s.rows >= 32) {
      const int64_t c0 = 3, r0 = 16;
      std::vector<float> sub(static_cast<size_t>(os * (s.cols - c0)), nan);
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

// AMX where the CPU and the OS allow it: also the layout the backend repacks into.
void check_amx(DType t) {
  if (!cpu_features().amx_int8) GTEST_SKIP() << "no usable AMX-INT8 on this CPU";
  EXPECT_EQ(cpu::packed_kernels_for(t, 256, 64), cpu::packed_kernels_for_isa(t, "amx"));
  check_same_bits(t, "amx");
}

TEST(AmxPacked, Q4_0) { check_amx(DType::Q4_0); }
TEST(AmxPacked, Q4_1) { check_amx(DType::Q4_1); }
TEST(AmxPacked, Q8_0) { check_amx(DType::Q8_0); }
TEST(AmxPacked, Q5_0) { check_amx(DType::Q5_0); }
TEST(AmxPacked, Q5_1) { check_amx(DType::Q5_1); }

// AVX-VNNI: the backend's choice where there is neither AMX nor AVX-512 VNNI (also with
// GENIEX_CPU_DISABLE=amx,avx512vnni, which this process may not have set: then only the kernels
// are checked).
void check_avxvnni(DType t) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avxvnni && f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX-VNNI on this CPU";
  if (!f.amx_int8 && !(f.avx512f && f.avx512bw && f.avx512vnni)) {
    EXPECT_EQ(cpu::packed_kernels_for(t, 256, 64), cpu::packed_kernels_for_isa(t, "avxvnni"));
  }
  check_same_bits(t, "avxvnni");
}

TEST(AvxVnniPacked, Q4_0) { check_avxvnni(DType::Q4_0); }
TEST(AvxVnniPacked, Q4_1) { check_avxvnni(DType::Q4_1); }
TEST(AvxVnniPacked, Q8_0) { check_avxvnni(DType::Q8_0); }
TEST(AvxVnniPacked, Q5_0) { check_avxvnni(DType::Q5_0); }
TEST(AvxVnniPacked, Q5_1) { check_avxvnni(DType::Q5_1); }

// The 16-row zmm tiles (packed_tiles16_avx512vnni.cpp): the backend's choice on AVX-512 VNNI
// CPUs without AMX. Pairs of 8-row groups and a last odd group (the 8-row tile), as above.
void check_avx512vnni16(DType t) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx512f && f.avx512bw && f.avx512vnni && f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  if (!f.amx_int8) {
    EXPECT_EQ(cpu::packed_kernels_for(t, 256, 64), cpu::packed_kernels_for_isa(t, "avx512vnni16"));
  }
  check_same_bits(t, "avx512vnni16");
  // Both decode choices (kernels_internal.hpp's DecodeRows), whichever this CPU takes.
  check_same_bits(t, "avx512vnni16-d8");
  check_same_bits(t, "avx512vnni16-d16");
}

TEST(Avx512Vnni16Packed, Q4_0) { check_avx512vnni16(DType::Q4_0); }
TEST(Avx512Vnni16Packed, Q4_1) { check_avx512vnni16(DType::Q4_1); }
TEST(Avx512Vnni16Packed, Q8_0) { check_avx512vnni16(DType::Q8_0); }
TEST(Avx512Vnni16Packed, Q5_0) { check_avx512vnni16(DType::Q5_0); }
TEST(Avx512Vnni16Packed, Q5_1) { check_avx512vnni16(DType::Q5_1); }

// The CPU's decode choice for these tiles: the 8-row tiles on AMD, the 16-row ones elsewhere,
// unless GENIEX_DECODE_ROWS=8 or 16 was set when the process started; one layout either way.
TEST(Avx512Vnni16Packed, DecodeRowsChoice) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx512f && f.avx512bw && f.avx512vnni && f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  const char* env = std::getenv("GENIEX_DECODE_ROWS");
  const std::string set = env != nullptr ? env : "";
  const bool rows16 = set == "16" || (set != "8" && !f.amd);
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    const cpu::PackedKernels* d8 = cpu::packed_kernels_for_isa(t, "avx512vnni16-d8");
    const cpu::PackedKernels* d16 = cpu::packed_kernels_for_isa(t, "avx512vnni16-d16");
    ASSERT_NE(d8, nullptr);
    ASSERT_NE(d16, nullptr);
    EXPECT_NE(d8->gemm, d16->gemm);
    EXPECT_STREQ(d8->name, d16->name);  // the packed-weights cache keys on the layout's name
    EXPECT_EQ(d8->repack, d16->repack);
    EXPECT_EQ(cpu::packed_kernels_for_isa(t, "avx512vnni16"), rows16 ? d16 : d8);
  }
  EXPECT_EQ(cpu::packed_kernels_for_isa(DType::Q4_0, "avx512vnni16-d4"), nullptr);
  EXPECT_EQ(cpu::packed_kernels_for_isa(DType::Q4_0, "avx512vnni16x"), nullptr);
}

// The AVX2 gemm's two tile shapes: Q4_0 / Q4_1 batches go through 16-row tiles (pairs of 8-row
// groups, 3 columns), an odd last group and decode through the 8 x 4 tiles; "avx2x8" is the
// 8 x 4 tiles alone. Both must give the same bits.
void check_rows16(DType t) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) GTEST_SKIP() << "no AVX2 on this CPU";
  check_same_bits(t, "avx2x8");
}

TEST(Avx2Packed, Q4_0Rows16SameBits) { check_rows16(DType::Q4_0); }
TEST(Avx2Packed, Q4_1Rows16SameBits) { check_rows16(DType::Q4_1); }

// The dispatcher honours GENIEX_REPACK=0 (file layout kept).
TEST(Avx2Packed, RepackCanBeDisabled) {
  ::setenv("GENIEX_REPACK", "0", 1);
  const cpu::PackedKernels* k = cpu::packed_kernels_for(DType::Q4_0, 256, 64);
  ::unsetenv("GENIEX_REPACK");
  EXPECT_EQ(k, nullptr);
}

}  // namespace
}  // namespace geniex
