// AVX-512 kernels (Q4_0 and Q5_0 decode, the packed Q4_0x8 layout) against the scalar
// reference (skipped with a message on CPUs without AVX-512 F+BW).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/kernels.hpp"
#include "backends/cpu/packed.hpp"
#include "quant/quant.hpp"

namespace geniex {
namespace {

// Weight type t (Q4_0 or Q5_0, both paired with Q8_0 activations).
void check_gemm_matches_scalar(DType t) {
  const cpu::TypeKernels* fast = cpu::kernels_for_isa(t, "avx512");
  if (fast == nullptr) GTEST_SKIP() << "this CPU has no AVX-512 F+BW (or it is disabled)";
  const cpu::TypeKernels* ref = cpu::kernels_for_isa(t, "scalar");
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Shape { int64_t k, rows, cols; };
  for (const Shape s : {Shape{576, 37, 1}, Shape{64, 4, 1}, Shape{32, 5, 1}, Shape{2048, 130, 1},
                        Shape{96, 9, 1}, Shape{576, 13, 3}}) {
    const size_t wrow = static_cast<size_t>(row_bytes(t, s.k));
    const size_t arow = static_cast<size_t>(row_bytes(DType::Q8_0, s.k));
    std::vector<float> wf(static_cast<size_t>(s.k)), af(static_cast<size_t>(s.k));
    std::vector<uint8_t> w(wrow * static_cast<size_t>(s.rows)), a(arow * static_cast<size_t>(s.cols));
    for (int64_t r = 0; r < s.rows; ++r) {
      for (float& v : wf) v = nd(rng);
      quant::quantize_row_ref(t, wf.data(), w.data() + static_cast<size_t>(r) * wrow, s.k);
    }
    for (int64_t c = 0; c < s.cols; ++c) {
      for (float& v : af) v = nd(rng) * 3.0f;
      ref->quantize_act(af.data(), a.data() + static_cast<size_t>(c) * arow, s.k);
    }
    const float poison = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> want(static_cast<size_t>(s.rows * s.cols), poison), got(want);
    ref->gemm(s.k, w.data(), wrow, s.rows, a.data(), arow, s.cols, want.data(), s.rows);
    fast->gemm(s.k, w.data(), wrow, s.rows, a.data(), arow, s.cols, got.data(), s.rows);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << dtype_name(t) << " unwritten output " << i << " k=" << s.k;
      EXPECT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << dtype_name(t) << " k=" << s.k << " i=" << i;
    }
  }
}

TEST(Avx512Kernels, Q4_0GemmMatchesScalar) { check_gemm_matches_scalar(DType::Q4_0); }
TEST(Avx512Kernels, Q5_0GemmMatchesScalar) { check_gemm_matches_scalar(DType::Q5_0); }

}  // namespace
}  // namespace geniex

namespace geniex {
namespace {

TEST(PackedQ4_0x8, RepackDequantizeAndGemmMatchReference) {
  const cpu::PackedKernels* pk = cpu::packed_kernels_for_isa(DType::Q4_0, "avx512");
  if (pk == nullptr) GTEST_SKIP() << "no packed Q4_0x8 layout on this CPU (needs AVX-512 F+BW)";
  const cpu::TypeKernels* ref = cpu::kernels_for_isa(DType::Q4_0, "scalar");
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Shape { int64_t k, rows, cols; };
  for (const Shape s : {Shape{256, 64, 1}, Shape{32, 8, 1}, Shape{576, 24, 3}, Shape{2048, 16, 1}, Shape{96, 40, 5}}) {
    const size_t wrow = static_cast<size_t>(row_bytes(DType::Q4_0, s.k));
    const size_t arow = static_cast<size_t>(row_bytes(DType::Q8_0, s.k));
    std::vector<float> f(static_cast<size_t>(s.k));
    std::vector<uint8_t> w(wrow * static_cast<size_t>(s.rows)), packed(w.size()), a(arow * static_cast<size_t>(s.cols));
    for (int64_t r = 0; r < s.rows; ++r) {
      for (float& v : f) v = nd(rng);
      quant::quantize_row_ref(DType::Q4_0, f.data(), w.data() + static_cast<size_t>(r) * wrow, s.k);
    }
    for (int64_t c = 0; c < s.cols; ++c) {
      for (float& v : f) v = nd(rng) * 2.0f;
      ref->quantize_act(f.data(), a.data() + static_cast<size_t>(c) * arow, s.k);
    }
    cpu::repack_q4_0x8(w.data(), packed.data(), s.k, s.rows);
    // Rows read back from the packed layout equal the original's, bit for bit.
    std::vector<float> want_row(static_cast<size_t>(s.k)), got_row(want_row);
    for (int64_t r = 0; r < s.rows; ++r) {
      quant::dequantize_row_ref(DType::Q4_0, w.data() + static_cast<size_t>(r) * wrow, want_row.data(), s.k);
      pk->dequantize_row(packed.data(), r, got_row.data(), s.k);
      ASSERT_EQ(want_row, got_row) << "row " << r;
    }
    const float poison = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> want(static_cast<size_t>(s.rows * s.cols), poison), got(want);
    ref->gemm(s.k, w.data(), wrow, s.rows, a.data(), arow, s.cols, want.data(), s.rows);
    // Split the rows in two like the CPU backend's threads do (at a multiple of 8).
    const int64_t half = s.rows / 16 * 8;
    if (half > 0) pk->gemm(s.k, packed.data(), wrow, half, a.data(), arow, s.cols, got.data(), s.rows);
    pk->gemm(s.k, packed.data() + static_cast<size_t>(half) * wrow, wrow, s.rows - half, a.data(), arow, s.cols,
             got.data() + half, s.rows);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << "unwritten output " << i;
      EXPECT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << "k=" << s.k << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace geniex

namespace geniex {
namespace {

// Every packed 8-row layout (Q4_0x8, Q4_1x8, Q8_0x8) with the maddubs and the VNNI tiles:
// repack + row read-back bit-exact, gemm bit-exact with the AVX2 tiles and near the scalar
// reference on odd shapes
// (column counts that leave every tail of the 4-column tiles, rows split like the threads).
void check_packed(DType t, const char* isa) {
  const cpu::PackedKernels* pk = cpu::packed_kernels_for_isa(t, isa);
  if (pk == nullptr) GTEST_SKIP() << "no " << isa << " packed kernels for " << dtype_name(t) << " on this CPU";
  const cpu::TypeKernels* ref = cpu::kernels_for_isa(t, "scalar");
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Shape { int64_t k, rows, cols; };
  for (const Shape s : {Shape{256, 64, 1}, Shape{32, 8, 1}, Shape{576, 24, 3}, Shape{2048, 16, 1},
                        Shape{96, 40, 5}, Shape{160, 8, 7}, Shape{576, 48, 13}, Shape{64, 16, 4}, Shape{1536, 32, 9}}) {
    const size_t wrow = static_cast<size_t>(row_bytes(t, s.k));
    const size_t arow = static_cast<size_t>(row_bytes(ref->act_type, s.k));
    std::vector<float> f(static_cast<size_t>(s.k));
    std::vector<uint8_t> w(wrow * static_cast<size_t>(s.rows)), packed(w.size()), a(arow * static_cast<size_t>(s.cols));
    for (int64_t r = 0; r < s.rows; ++r) {
      const float shift = t == DType::Q4_1 ? nd(rng) : 0.0f;  // asymmetric rows exercise the mins
      for (float& v : f) v = nd(rng) + shift;
      quant::quantize_row_ref(t, f.data(), w.data() + static_cast<size_t>(r) * wrow, s.k);
    }
    for (int64_t c = 0; c < s.cols; ++c) {
      for (float& v : f) v = nd(rng) * 2.0f;
      ref->quantize_act(f.data(), a.data() + static_cast<size_t>(c) * arow, s.k);
    }
    pk->repack(w.data(), packed.data(), s.k, s.rows);
    std::vector<float> want_row(static_cast<size_t>(s.k)), got_row(want_row);
    for (int64_t r = 0; r < s.rows; ++r) {
      quant::dequantize_row_ref(t, w.data() + static_cast<size_t>(r) * wrow, want_row.data(), s.k);
      pk->dequantize_row(packed.data(), r, got_row.data(), s.k);
      ASSERT_EQ(want_row, got_row) << dtype_name(t) << " row " << r;
    }
    const float poison = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> want(static_cast<size_t>(s.rows * s.cols), poison), got(want);
    ref->gemm(s.k, w.data(), wrow, s.rows, a.data(), arow, s.cols, want.data(), s.rows);
    const int64_t half = s.rows / 16 * 8;
    if (half > 0) pk->gemm(s.k, packed.data(), wrow, half, a.data(), arow, s.cols, got.data(), s.rows);
    pk->gemm(s.k, packed.data() + static_cast<size_t>(half) * wrow, wrow, s.rows - half, a.data(), arow, s.cols,
             got.data() + half, s.rows);
    // Bit for bit the AVX2 tiles' sums (the ones the unpacked path uses), so repacking changes
    // no result.
    if (const cpu::TypeKernels* avx2 = cpu::kernels_for_isa(t, "avx2")) {
      std::vector<float> same(want.size(), poison);
      avx2->gemm(s.k, w.data(), wrow, s.rows, a.data(), arow, s.cols, same.data(), s.rows);
      for (size_t i = 0; i < same.size(); ++i) {
        ASSERT_EQ(std::memcmp(&same[i], &got[i], 4), 0) << dtype_name(t) << " " << isa << " k=" << s.k << " rows=" << s.rows
                                                        << " cols=" << s.cols << " i=" << i << ": " << same[i] << " vs " << got[i];
      }
    }
    double scale = 0.0;
    for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << dtype_name(t) << " " << isa << " unwritten output " << i;
      EXPECT_NEAR(got[i], want[i], 1e-5 * (1.0 + scale)) << dtype_name(t) << " " << isa << " k=" << s.k
                                                         << " rows=" << s.rows << " cols=" << s.cols << " i=" << i;
    }
  }
}

TEST(PackedX8, Q4_0Avx512) { check_packed(DType::Q4_0, "avx512"); }
TEST(PackedX8, Q4_1Avx512) { check_packed(DType::Q4_1, "avx512"); }
TEST(PackedX8, Q8_0Avx512) { check_packed(DType::Q8_0, "avx512"); }
TEST(PackedX8, Q4_0Avx512Vnni) { check_packed(DType::Q4_0, "avx512vnni"); }
TEST(PackedX8, Q4_1Avx512Vnni) { check_packed(DType::Q4_1, "avx512vnni"); }
TEST(PackedX8, Q8_0Avx512Vnni) { check_packed(DType::Q8_0, "avx512vnni"); }

}  // namespace
}  // namespace geniex
