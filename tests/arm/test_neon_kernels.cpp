// AArch64 kernel tables ("neon", "dotprod", "i8mm") against the scalar one: dequantize and
// quantize_act bit-exact, gemm within 1e-5 of the dot's magnitude on random shapes (odd row
// and column counts, padded strides, NaN poison for unwritten outputs), random-byte blocks, and
// the run-time choice. Built only into the aarch64 test_quant (tests/arm/CMakeLists.txt); run
// by scripts/test_aarch64.sh under qemu CPUs with and without dotprod / i8mm, where
// GENIEX_EXPECT_ISA names the table the dispatcher must pick on that CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels.hpp"
#include "core/cpu_features.hpp"
#include "core/fp16.hpp"
#include "quant/quant.hpp"
#include "quant/test_util.hpp"

namespace geniex {
namespace {

using cpu::TypeKernels;
using test::make_rng;
using test::random_normal;

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

int64_t block_of(DType t) { return dtype_info(t).block_size; }

struct Case {
  const char* isa;
  DType type;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.isa << " " << dtype_name(c.type); }

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const char* isa : {"neon", "dotprod", "i8mm"}) {
    for (DType t : test::weight_types()) cases.push_back({isa, t});
  }
  return cases;
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return std::string(info.param.isa) + "_" + std::string(dtype_name(info.param.type));
}

class NeonKernels : public testing::TestWithParam<Case> {
 protected:
  // The table under test, or nullptr (then the test skips, naming the CPU's features).
  const TypeKernels* table() const {
    return cpu::kernels_for_isa(GetParam().type, GetParam().isa);
  }
};

#define REQUIRE_TABLE(k)                                                                    \
  if ((k) == nullptr) {                                                                     \
    GTEST_SKIP() << GetParam().isa << " kernels unavailable on this CPU (features: "        \
                 << cpu_features().to_string() << ")";                                      \
  }

TEST_P(NeonKernels, TableIsConsistent) {
  const TypeKernels* k = table();
  REQUIRE_TABLE(k);
  EXPECT_EQ(k->type, GetParam().type);
  EXPECT_EQ(k->act_type, quant::vec_dot_type(GetParam().type));
  EXPECT_STREQ(k->isa, GetParam().isa);
}

TEST_P(NeonKernels, DequantizeBitExact) {
  const DType t = GetParam().type;
  const TypeKernels* k = table();
  REQUIRE_TABLE(k);
  const TypeKernels* s = cpu::kernels_for_isa(t, "scalar");
  auto rng = make_rng(static_cast<uint32_t>(t) + 1300);
  for (int64_t blocks : {1, 3, 8}) {
    const int64_t n = block_of(t) * blocks * (block_of(t) == 1 ? 37 : 1);
    const auto x = random_normal(rng, static_cast<size_t>(n));
    std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, n)));
    quant::quantize_row_ref(t, x.data(), q.data(), n);
    std::vector<float> ya(static_cast<size_t>(n) + 1, kPoison), ys(static_cast<size_t>(n) + 1, kPoison);
    k->dequantize_row(q.data(), ya.data(), n);
    s->dequantize_row(q.data(), ys.data(), n);
    ASSERT_EQ(std::memcmp(ya.data(), ys.data(), static_cast<size_t>(n) * sizeof(float)), 0)
        << dtype_name(t) << " n=" << n;
    EXPECT_TRUE(std::isnan(ya.back())) << "wrote past the row";
  }
}

TEST_P(NeonKernels, QuantizeActBitExact) {
  const DType t = GetParam().type;
  const TypeKernels* k = table();
  REQUIRE_TABLE(k);
  const TypeKernels* s = cpu::kernels_for_isa(t, "scalar");
  auto rng = make_rng(static_cast<uint32_t>(t) + 1400);
  const int64_t ab = block_of(k->act_type);
  for (int64_t blocks : {1, 2, 5, 16}) {
    const int64_t n = ab == 1 ? blocks * 13 : ab * blocks;
    auto x = random_normal(rng, static_cast<size_t>(n), 4.0f);
    if (blocks == 2 && n >= 64) {
      // Exact halves after scaling exercise the rounding rule; a zero block the d = 0 path;
      // a repeated largest magnitude of both signs the first-maximum rule of Q8_K.
      const int64_t half = n / 2;
      for (int64_t i = 0; i < half; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 32) - 15.5f;
      x[0] = 127.0f;
      x[1] = -127.0f;
      for (int64_t i = half; i < n; ++i) x[static_cast<size_t>(i)] = 0.0f;
    }
    if (blocks == 5) x[static_cast<size_t>(n / 3)] = -40.0f;  // a negative maximum
    const size_t bytes = static_cast<size_t>(row_bytes(k->act_type, n));
    std::vector<uint8_t> qa(bytes + 1, 0x5A), qs(bytes + 1, 0xA5);
    k->quantize_act(x.data(), qa.data(), n);
    s->quantize_act(x.data(), qs.data(), n);
    ASSERT_EQ(std::memcmp(qa.data(), qs.data(), bytes), 0) << dtype_name(t) << " n=" << n;
    EXPECT_EQ(qa[bytes], 0x5A) << "wrote past the row";
  }
}

struct Shape {
  int64_t rows, cols, blocks;
};

TEST_P(NeonKernels, GemmMatchesScalar) {
  const DType t = GetParam().type;
  const TypeKernels* k = table();
  REQUIRE_TABLE(k);
  const TypeKernels* s = cpu::kernels_for_isa(t, "scalar");
  auto rng = make_rng(static_cast<uint32_t>(t) + 1500);
  // Odd and even rows and columns around the 4-row / 2-column / 2x2 SMMLA tiles, and the
  // i8mm tiles of 4 (or 2) column pairs with their 1..3-pair tails.
  const Shape shapes[] = {{1, 1, 1}, {2, 2, 1}, {3, 1, 2}, {3, 3, 1}, {4, 2, 1}, {5, 2, 3},
                          {7, 3, 2}, {8, 8, 1}, {9, 5, 1}, {13, 1, 4}, {16, 6, 2}, {33, 7, 2},
                          {12, 19, 3}, {6, 37, 2}};
  for (const Shape& sh : shapes) {
    const int64_t n = block_of(t) == 1 ? 8 * sh.blocks + 5 : block_of(t) * sh.blocks;
    const size_t w_stride = static_cast<size_t>(row_bytes(t, n)) + 16;  // padded strides
    const size_t a_stride = static_cast<size_t>(row_bytes(k->act_type, n)) + 8;
    std::vector<uint8_t> w(w_stride * static_cast<size_t>(sh.rows), 0xEE);
    std::vector<uint8_t> a(a_stride * static_cast<size_t>(sh.cols), 0xEE);
    std::vector<float> wf(static_cast<size_t>(n * sh.rows)), af(static_cast<size_t>(n * sh.cols));
    for (int64_t r = 0; r < sh.rows; ++r) {
      const auto x = random_normal(rng, static_cast<size_t>(n));
      quant::quantize_row_ref(t, x.data(), w.data() + r * w_stride, n);
      quant::dequantize_row_ref(t, w.data() + r * w_stride, wf.data() + r * n, n);
    }
    for (int64_t c = 0; c < sh.cols; ++c) {
      const auto x = random_normal(rng, static_cast<size_t>(n), 2.0f);
      s->quantize_act(x.data(), a.data() + c * a_stride, n);
      quant::dequantize_row_ref(k->act_type, a.data() + c * a_stride, af.data() + c * n, n);
    }
    const int64_t out_stride = sh.rows + 3;
    const size_t out_size = static_cast<size_t>(out_stride * sh.cols);
    std::vector<float> oa(out_size, kPoison), os(out_size, kPoison);
    k->gemm(n, w.data(), w_stride, sh.rows, a.data(), a_stride, sh.cols, oa.data(), out_stride);
    s->gemm(n, w.data(), w_stride, sh.rows, a.data(), a_stride, sh.cols, os.data(), out_stride);
    for (int64_t c = 0; c < sh.cols; ++c) {
      for (int64_t r = 0; r < out_stride; ++r) {
        const size_t i = static_cast<size_t>(c * out_stride + r);
        if (r >= sh.rows) {
          EXPECT_TRUE(std::isnan(oa[i])) << "wrote outside the output at c=" << c << " r=" << r;
          continue;
        }
        double absdot = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          absdot += std::fabs(static_cast<double>(wf[static_cast<size_t>(r * n + j)]) *
                              static_cast<double>(af[static_cast<size_t>(c * n + j)]));
        }
        ASSERT_FALSE(std::isnan(oa[i])) << "unwritten output r=" << r << " c=" << c;
        EXPECT_NEAR(oa[i], os[i], 1e-5 * absdot + 1e-30)
            << dtype_name(t) << " " << GetParam().isa << " rows=" << sh.rows
            << " cols=" << sh.cols << " n=" << n << " r=" << r << " c=" << c;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsasAndTypes, NeonKernels, testing::ValuesIn(all_cases()), case_name);

// The prefill tiles' arithmetic does not depend on how the columns are tiled: a call over
// many columns (several tiles, tails, and column chunks: the rows are long enough that a chunk
// holds only a few pairs) gives the same bits as one call per column pair and as one call per
// column (the single-token path: SDOT tiles whose per-block arithmetic is the SMMLA tiles'),
// so a token's logits do not depend on the batch.
TEST_P(NeonKernels, GemmBitsDoNotDependOnColumnTiling) {
  const DType t = GetParam().type;
  const TypeKernels* k = table();
  REQUIRE_TABLE(k);
  if (block_of(t) == 1) GTEST_SKIP() << "float weights: no integer tiles";
  const TypeKernels* s = cpu::kernels_for_isa(t, "scalar");
  auto rng = make_rng(static_cast<uint32_t>(t) + 1700);
  const int64_t rows = 9, cols = 22;
  const int64_t n = block_of(t) == 256 ? 256 * 64 : 32 * 400;
  const size_t w_stride = static_cast<size_t>(row_bytes(t, n));
  const size_t a_stride = static_cast<size_t>(row_bytes(k->act_type, n));
  std::vector<uint8_t> w(w_stride * static_cast<size_t>(rows)), a(a_stride * static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const auto x = random_normal(rng, static_cast<size_t>(n));
    quant::quantize_row_ref(t, x.data(), w.data() + r * w_stride, n);
  }
  for (int64_t c = 0; c < cols; ++c) {
    const auto x = random_normal(rng, static_cast<size_t>(n), 2.0f);
    s->quantize_act(x.data(), a.data() + c * a_stride, n);
  }
  std::vector<float> all(static_cast<size_t>(rows * cols), kPoison), pair(static_cast<size_t>(rows * 2), kPoison);
  k->gemm(n, w.data(), w_stride, rows, a.data(), a_stride, cols, all.data(), rows);
  for (int64_t c = 0; c < cols; c += 2) {
    k->gemm(n, w.data(), w_stride, rows, a.data() + c * a_stride, a_stride, 2, pair.data(), rows);
    ASSERT_EQ(std::memcmp(pair.data(), all.data() + c * rows, pair.size() * sizeof(float)), 0)
        << dtype_name(t) << " " << GetParam().isa << ": columns " << c << ", " << c + 1;
  }
  std::vector<float> one(static_cast<size_t>(rows), kPoison);
  for (int64_t c = 0; c < cols; ++c) {
    k->gemm(n, w.data(), w_stride, rows, a.data() + c * a_stride, a_stride, 1, one.data(), rows);
    ASSERT_EQ(std::memcmp(one.data(), all.data() + c * rows, one.size() * sizeof(float)), 0)
        << dtype_name(t) << " " << GetParam().isa << ": column " << c << " alone";
  }
}

// Blocks of random bytes (every quant value, activations down to -128, which the quantizer
// never writes) for the 32-element formats: catches overflow in the widening and SMMLA paths.
TEST(NeonKernels, RandomBlocksMatchScalar) {
  auto rng = make_rng(1600);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.01f, 2.0f);
  int ran = 0;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0}) {
    const TypeKernels* s = cpu::kernels_for_isa(t, "scalar");
    const bool has_min = t == DType::Q4_1 || t == DType::Q5_1;
    const int64_t rows = 7, cols = 5, n = 32 * 5;
    const size_t wrow = static_cast<size_t>(row_bytes(t, n));
    const size_t arow = static_cast<size_t>(row_bytes(s->act_type, n));
    const size_t wblk = static_cast<size_t>(dtype_info(t).block_bytes);
    const size_t ablk = static_cast<size_t>(dtype_info(s->act_type).block_bytes);
    std::vector<uint8_t> w(wrow * rows), a(arow * cols);
    for (auto& v : w) v = static_cast<uint8_t>(byte(rng));
    for (auto& v : a) v = static_cast<uint8_t>(byte(rng));
    for (size_t off = 0; off < w.size(); off += wblk) {
      const uint16_t d = f32_to_fp16(byte(rng) % 2 ? scale(rng) : -scale(rng));
      std::memcpy(&w[off], &d, 2);
      if (has_min) {
        const uint16_t m = f32_to_fp16(-scale(rng) * 8.0f);
        std::memcpy(&w[off + 2], &m, 2);
      }
    }
    for (size_t off = 0; off < a.size(); off += ablk) {
      const uint16_t d = f32_to_fp16(scale(rng) * 0.01f);
      std::memcpy(&a[off], &d, 2);
      if (has_min) {
        const uint16_t sum = f32_to_fp16(scale(rng) * 3.0f);
        std::memcpy(&a[off + 2], &sum, 2);
      }
    }
    std::vector<float> ref(static_cast<size_t>(rows * cols), kPoison);
    s->gemm(n, w.data(), wrow, rows, a.data(), arow, cols, ref.data(), rows);
    for (const char* isa : {"neon", "dotprod", "i8mm"}) {
      const TypeKernels* k = cpu::kernels_for_isa(t, isa);
      if (k == nullptr) continue;
      ++ran;
      for (int64_t nc : {cols, int64_t{1}}) {  // the tiles, and the single-token path
        std::vector<float> got(ref.size(), kPoison);
        k->gemm(n, w.data(), wrow, rows, a.data(), arow, nc, got.data(), rows);
        for (int64_t i = 0; i < rows * nc; ++i) {
          const size_t u = static_cast<size_t>(i);
          ASSERT_FALSE(std::isnan(got[u])) << isa << " unwritten output " << i;
          double bound = 0.0;
          for (int64_t b = 0; b < n / 32; ++b) {
            uint16_t h[4];
            const uint8_t* wb = w.data() + static_cast<size_t>(i % rows) * wrow + static_cast<size_t>(b) * wblk;
            const uint8_t* ab = a.data() + static_cast<size_t>(i / rows) * arow + static_cast<size_t>(b) * ablk;
            std::memcpy(&h[0], wb, 2);
            std::memcpy(&h[1], wb + 2, 2);
            std::memcpy(&h[2], ab, 2);
            std::memcpy(&h[3], ab + 2, 2);
            const auto f = [&](int j) { return static_cast<double>(fp16_to_f32(h[j])); };
            bound += std::fabs(f(0) * f(2)) * 32 * 128 * 128 + (has_min ? std::fabs(f(1) * f(3)) : 0.0);
          }
          EXPECT_NEAR(got[u], ref[u], 1e-5 * bound) << dtype_name(t) << " " << isa << " i=" << i;
        }
      }
    }
  }
  EXPECT_GE(ran, 5) << "the plain NEON table runs on every AArch64 CPU";
}

// The dispatcher picks the best table the CPU has: i8mm (with dotprod), then dotprod, then
// plain NEON; GENIEX_EXPECT_ISA (set by scripts/test_aarch64.sh per qemu CPU model) pins it.
TEST(NeonKernels, DispatchFollowsCpuFeatures) {
  const CpuFeatures& f = cpu_features();
  EXPECT_TRUE(f.neon);
  const char* want = f.arm_dotprod && f.arm_i8mm ? "i8mm" : f.arm_dotprod ? "dotprod" : "neon";
  for (DType t : test::weight_types()) {
    const TypeKernels* k = cpu::kernels_for(t);
    ASSERT_NE(k, nullptr) << dtype_name(t);
    EXPECT_STREQ(k->isa, want) << dtype_name(t) << " on a CPU with " << f.to_string();
  }
  EXPECT_EQ(cpu::kernels_for_isa(DType::Q4_0, "dotprod") != nullptr, f.arm_dotprod);
  EXPECT_EQ(cpu::kernels_for_isa(DType::Q4_0, "i8mm") != nullptr, f.arm_dotprod && f.arm_i8mm);
  if (const char* expect = std::getenv("GENIEX_EXPECT_ISA")) {
    EXPECT_STREQ(cpu::kernels_for(DType::Q4_1)->isa, expect)
        << "features: " << f.to_string() << " (GENIEX_CPU_DISABLE="
        << (std::getenv("GENIEX_CPU_DISABLE") ? std::getenv("GENIEX_CPU_DISABLE") : "") << ")";
  }
}

}  // namespace
}  // namespace geniex
