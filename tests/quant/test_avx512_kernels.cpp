// AVX-512 kernels against the scalar reference (skipped with a message on CPUs without
// AVX-512 F+BW).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/kernels.hpp"
#include "quant/quant.hpp"

namespace geniex {
namespace {

TEST(Avx512Kernels, Q4_0GemmMatchesScalar) {
  const cpu::TypeKernels* fast = cpu::kernels_for_isa(DType::Q4_0, "avx512");
  if (fast == nullptr) GTEST_SKIP() << "this CPU has no AVX-512 F+BW (or it is disabled)";
  const cpu::TypeKernels* ref = cpu::kernels_for_isa(DType::Q4_0, "scalar");
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Shape { int64_t k, rows, cols; };
  for (const Shape s : {Shape{576, 37, 1}, Shape{64, 4, 1}, Shape{32, 5, 1}, Shape{2048, 130, 1},
                        Shape{96, 9, 1}, Shape{576, 13, 3}}) {
    const size_t wrow = static_cast<size_t>(row_bytes(DType::Q4_0, s.k));
    const size_t arow = static_cast<size_t>(row_bytes(DType::Q8_0, s.k));
    std::vector<float> wf(static_cast<size_t>(s.k)), af(static_cast<size_t>(s.k));
    std::vector<uint8_t> w(wrow * static_cast<size_t>(s.rows)), a(arow * static_cast<size_t>(s.cols));
    for (int64_t r = 0; r < s.rows; ++r) {
      for (float& v : wf) v = nd(rng);
      quant::quantize_row_ref(DType::Q4_0, wf.data(), w.data() + static_cast<size_t>(r) * wrow, s.k);
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
      ASSERT_FALSE(std::isnan(got[i])) << "unwritten output " << i << " k=" << s.k;
      EXPECT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << "k=" << s.k << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace geniex
