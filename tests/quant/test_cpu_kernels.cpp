// CPU kernel tables: the scalar table against the references, every AVX2 kernel against the
// scalar one (dequantize and quantize_act bit-exact, gemm within 1e-5 of the dot's magnitude,
// unwritten outputs caught by NaN poison), and the f32 helpers against plain loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels.hpp"
#include "backends/cpu/kernels_internal.hpp"
#include "core/cpu_features.hpp"
#include "core/fp16.hpp"
#include "quant/quant.hpp"
#include "test_util.hpp"

namespace geniex {
namespace {

using cpu::TypeKernels;
using test::make_rng;
using test::random_normal;

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

const TypeKernels* avx2_or_skip(DType t) {
  const TypeKernels* k = cpu::kernels_for_isa(t, "avx2");
  return k;
}

#define REQUIRE_AVX2(k)                                                                      \
  if ((k) == nullptr) {                                                                      \
    GTEST_SKIP() << "AVX2 kernels unavailable: CPU lacks AVX2/FMA/F16C, not an x86 build, " \
                    "or disabled by GENIEX_CPU_DISABLE ("                                    \
                 << cpu_features().to_string() << ")";                                       \
  }

int64_t block_of(DType t) { return dtype_info(t).block_size; }

class CpuKernels : public testing::TestWithParam<DType> {};

TEST_P(CpuKernels, ScalarTableIsConsistent) {
  const DType t = GetParam();
  const TypeKernels* k = cpu::kernels_for_isa(t, "scalar");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->type, t);
  EXPECT_EQ(k->act_type, quant::vec_dot_type(t));
  EXPECT_STREQ(k->isa, "scalar");
  ASSERT_NE(cpu::kernels_for(t), nullptr);
  EXPECT_EQ(cpu::kernels_for(t)->act_type, k->act_type);
}

TEST_P(CpuKernels, Avx2DequantizeBitExact) {
  const DType t = GetParam();
  const TypeKernels* k = avx2_or_skip(t);
  REQUIRE_AVX2(k);
  const TypeKernels* s = cpu::kernels_for_isa(t, "scalar");
  auto rng = make_rng(static_cast<uint32_t>(t) + 300);
  for (int64_t blocks : {1, 3, 8}) {
    const int64_t n = std::max<int64_t>(block_of(t), 1) * blocks * (block_of(t) == 1 ? 37 : 1);
    const auto x = random_normal(rng, static_cast<size_t>(n));
    std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, n)));
    quant::quantize_row_ref(t, x.data(), q.data(), n);
    std::vector<float> ya(static_cast<size_t>(n), kPoison), ys(static_cast<size_t>(n), kPoison);
    k->dequantize_row(q.data(), ya.data(), n);
    s->dequantize_row(q.data(), ys.data(), n);
    ASSERT_EQ(std::memcmp(ya.data(), ys.data(), ya.size() * sizeof(float)), 0)
        << dtype_name(t) << " n=" << n;
  }
}

TEST_P(CpuKernels, Avx2QuantizeActBitExact) {
  const DType t = GetParam();
  const TypeKernels* k = avx2_or_skip(t);
  REQUIRE_AVX2(k);
  const TypeKernels* s = cpu::kernels_for_isa(t, "scalar");
  auto rng = make_rng(static_cast<uint32_t>(t) + 400);
  const int64_t ab = block_of(k->act_type);
  for (int64_t blocks : {1, 2, 5, 16}) {
    const int64_t n = ab == 1 ? blocks * 13 : ab * blocks;
    auto x = random_normal(rng, static_cast<size_t>(n), 4.0f);
    ASSERT_EQ(x.size(), static_cast<size_t>(n));
    if (blocks == 2 && n >= 64) {
      // Exact halves after scaling exercise the rounding rule; a zero block the d = 0 path.
      const int64_t half = n / 2;
      for (int64_t i = 0; i < half; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 32) - 15.5f;
      x.front() = 127.0f;
      for (int64_t i = half; i < n; ++i) x[static_cast<size_t>(i)] = 0.0f;
    }
    const size_t bytes = static_cast<size_t>(row_bytes(k->act_type, n));
    std::vector<uint8_t> qa(bytes, 0x5A), qs(bytes, 0xA5);
    k->quantize_act(x.data(), qa.data(), n);
    s->quantize_act(x.data(), qs.data(), n);
    ASSERT_EQ(std::memcmp(qa.data(), qs.data(), bytes), 0) << dtype_name(t) << " n=" << n;
  }
}

struct Shape {
  int64_t rows, cols, blocks;
};

TEST_P(CpuKernels, Avx2GemmMatchesScalar) {
  const DType t = GetParam();
  const TypeKernels* k = avx2_or_skip(t);
  REQUIRE_AVX2(k);
  const TypeKernels* s = cpu::kernels_for_isa(t, "scalar");
  auto rng = make_rng(static_cast<uint32_t>(t) + 500);
  const Shape shapes[] = {{1, 1, 1}, {3, 1, 2}, {4, 2, 1}, {5, 2, 3}, {7, 3, 2},
                          {9, 5, 1}, {13, 1, 4}, {33, 7, 2}, {64, 4, 3}};
  for (const Shape& sh : shapes) {
    const int64_t n = block_of(t) == 1 ? 8 * sh.blocks + 5 : block_of(t) * sh.blocks;
    const size_t wrow = static_cast<size_t>(row_bytes(t, n));
    const size_t arow = static_cast<size_t>(row_bytes(k->act_type, n));
    // Padded strides, so kernels that assume dense rows fail.
    const size_t w_stride = wrow + 16;
    const size_t a_stride = arow + 8;
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
            << dtype_name(t) << " rows=" << sh.rows << " cols=" << sh.cols << " n=" << n
            << " r=" << r << " c=" << c;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, CpuKernels, testing::ValuesIn(test::weight_types()),
                         test::type_name);

// Q5_0 / Q5_1 blocks of random bytes (every fifth-bit pattern, quants 0 and 31 next to
// activations of -128 and 127) through every SIMD table against the scalar one.
void check_q5_random_blocks(DType t, int64_t cols, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.01f, 2.0f);
  const TypeKernels* s = cpu::kernels_for_isa(t, "scalar");
  ASSERT_NE(s, nullptr);
  const bool has_min = t == DType::Q5_1;
  const int64_t rows = 7, n = 32 * 5;  // 5 blocks: an odd tail after AVX-512's block pairs
  const size_t wrow = static_cast<size_t>(row_bytes(t, n));
  const size_t arow = static_cast<size_t>(row_bytes(s->act_type, n));
  const size_t wblk = static_cast<size_t>(dtype_info(t).block_bytes);
  const size_t ablk = static_cast<size_t>(dtype_info(s->act_type).block_bytes);
  std::vector<uint8_t> w(wrow * rows), a(arow * static_cast<size_t>(cols));
  for (auto& v : w) v = static_cast<uint8_t>(byte(rng));
  for (auto& v : a) v = static_cast<uint8_t>(byte(rng));
  // Finite scales (and mins / activation sums) in place of the random header bytes.
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
  // Tolerance per output: 1e-5 of the largest possible block sums, |d_w d_a| * 32 * 31 * 128
  // plus |m s|; one wrong fifth bit changes a block by at least 16 * |d_w d_a| * |a_j|.
  auto bound = [&](int64_t r, int64_t c) {
    double sum = 0.0;
    for (int64_t blk = 0; blk < n / 32; ++blk) {
      const uint8_t* wb = w.data() + static_cast<size_t>(r) * wrow + static_cast<size_t>(blk) * wblk;
      const uint8_t* ab = a.data() + static_cast<size_t>(c) * arow + static_cast<size_t>(blk) * ablk;
      uint16_t h[4];
      std::memcpy(&h[0], wb, 2);
      std::memcpy(&h[1], wb + 2, 2);
      std::memcpy(&h[2], ab, 2);
      std::memcpy(&h[3], ab + 2, 2);
      const auto f = [&](int k) { return static_cast<double>(fp16_to_f32(h[k])); };
      sum += std::fabs(f(0) * f(2)) * 32 * 31 * 128;
      if (has_min) sum += std::fabs(f(1) * f(3));
    }
    return 1e-5 * sum;
  };
  std::vector<float> ref_deq(static_cast<size_t>(n));
  for (const char* isa : {"avx2", "avx512"}) {
    const TypeKernels* k = cpu::kernels_for_isa(t, isa);
    if (k == nullptr) continue;
    std::vector<float> got(ref.size(), kPoison);
    k->gemm(n, w.data(), wrow, rows, a.data(), arow, cols, got.data(), rows);
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << isa << " unwritten output " << i;
      const auto r = static_cast<int64_t>(i) % rows, c = static_cast<int64_t>(i) / rows;
      EXPECT_NEAR(got[i], ref[i], bound(r, c))
          << dtype_name(t) << " " << isa << " cols=" << cols << " r=" << r << " c=" << c;
    }
    std::vector<float> deq(static_cast<size_t>(n), kPoison);
    for (int64_t r = 0; r < rows; ++r) {
      k->dequantize_row(w.data() + r * wrow, deq.data(), n);
      s->dequantize_row(w.data() + r * wrow, ref_deq.data(), n);
      ASSERT_EQ(std::memcmp(deq.data(), ref_deq.data(), deq.size() * sizeof(float)), 0)
          << dtype_name(t) << " " << isa << " row " << r;
    }
  }
}

TEST(CpuKernels, Q5RandomBlocksMatchScalar) {
  auto rng = make_rng(700);
  for (DType t : {DType::Q5_0, DType::Q5_1}) {
    // 3 columns: the register tiles; 1 column: the decode paths (AVX-512's for Q5_0).
    for (int64_t cols : {3, 1}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " cols=" + std::to_string(cols));
      check_q5_random_blocks(t, cols, rng);
    }
  }
}

TEST(CpuKernels, DispatchPicksAvx2WhenSupported) {
#if defined(__aarch64__)
  GTEST_SKIP() << "x86 dispatch; the AArch64 one is NeonKernels.DispatchFollowsCpuFeatures";
#endif
  const CpuFeatures& f = cpu_features();
  const TypeKernels* k = cpu::kernels_for(DType::Q4_1);
  ASSERT_NE(k, nullptr);
  if (f.avx2 && f.fma && f.f16c && cpu::kernels_for_isa(DType::Q4_1, "avx2") != nullptr) {
    EXPECT_STREQ(k->isa, "avx2");
  } else {
    EXPECT_STREQ(k->isa, "scalar");
  }
  EXPECT_EQ(cpu::kernels_for(DType::I32), nullptr);
  EXPECT_EQ(cpu::kernels_for_isa(DType::Q4_1, "avx512"), nullptr);
}

// ---- f32 helpers ------------------------------------------------------------------------------

TEST(CpuHelpers, MatchScalarLoops) {
  auto rng = make_rng(600);
  for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 33, 1000}) {
    const auto a = random_normal(rng, static_cast<size_t>(n));
    const auto b = random_normal(rng, static_cast<size_t>(n));
    std::vector<uint16_t> bh(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) bh[i] = f32_to_fp16(b[i]);

    double dot = 0.0, dot_h = 0.0, absdot = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double ai = static_cast<double>(a[i]), bi = static_cast<double>(b[i]),
                   bhi = static_cast<double>(fp16_to_f32(bh[i]));
      dot += ai * bi;
      dot_h += ai * bhi;
      absdot += std::fabs(ai * bi);
    }
    EXPECT_NEAR(cpu::dot_f32(a.data(), b.data(), n), dot, 1e-6 * absdot + 1e-30) << n;
    EXPECT_NEAR(cpu::dot_f32_f16(a.data(), bh.data(), n), dot_h, 1e-6 * absdot + 1e-30) << n;

    std::vector<float> y = b, y_ref = b;
    cpu::axpy_f32(0.75f, a.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      y_ref[i] += 0.75f * a[i];
      EXPECT_NEAR(y[i], y_ref[i], 1e-6f * (std::fabs(y_ref[i]) + 1.0f)) << i;
    }
    std::vector<float> z = a, z_ref = a;
    cpu::axpy_f16(-1.25f, bh.data(), z.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      z_ref[i] += -1.25f * fp16_to_f32(bh[i]);
      EXPECT_NEAR(z[i], z_ref[i], 1e-6f * (std::fabs(z_ref[i]) + 1.0f)) << i;
    }

    std::vector<float> f(static_cast<size_t>(n) + 1, kPoison);
    cpu::fp16_to_f32_row(bh.data(), f.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(f32_to_bits(f[i]), f32_to_bits(fp16_to_f32(bh[i])));
    EXPECT_TRUE(std::isnan(f[static_cast<size_t>(n)]));
    std::vector<uint16_t> h(static_cast<size_t>(n) + 1, 0xBEEF);
    cpu::f32_to_fp16_row(a.data(), h.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(h[i], f32_to_fp16(a[i])) << a[i];
    EXPECT_EQ(h[static_cast<size_t>(n)], 0xBEEF);
  }
}

TEST(CpuHelpers, Fp16ConversionEdgeValues) {
  const float vals[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65520.0f, 1e-8f, 6.0e-8f,
                        5.96e-8f, 3.0e-5f, -6.1e-5f, 1e9f, std::numeric_limits<float>::infinity(),
                        0.333333f, 2049.0f, 4097.0f};
  const int64_t n = sizeof(vals) / sizeof(vals[0]);
  std::vector<uint16_t> h(static_cast<size_t>(n));
  cpu::f32_to_fp16_row(vals, h.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(h[i], f32_to_fp16(vals[i])) << vals[i];
}

}  // namespace
}  // namespace geniex

namespace geniex {
namespace {

// n_keys key and value rows of hd random f16 elements (normal), row_bytes apart, the bytes
// between rows zero; a key's and a value's element drawn in turn.
template <class Rng>
void random_kv_rows(Rng& rng, int n_keys, int64_t hd, size_t row_bytes, std::vector<uint8_t>* k,
                    std::vector<uint8_t>* v) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  k->assign(row_bytes * static_cast<size_t>(n_keys), 0);
  v->assign(k->size(), 0);
  for (int j = 0; j < n_keys; ++j) {
    for (int64_t d = 0; d < hd; ++d) {
      const uint16_t kh = f32_to_fp16(nd(rng)), vh = f32_to_fp16(nd(rng));
      std::memcpy(k->data() + static_cast<size_t>(j) * row_bytes + 2 * d, &kh, 2);
      std::memcpy(v->data() + static_cast<size_t>(j) * row_bytes + 2 * d, &vh, 2);
    }
  }
}

// Key ranges of a unit of nq queries over the keys [jlo, jlo + n_keys): causal (later queries
// see more keys, the last one the whole span), and with window_step > 0 each query's first key
// moved to jlo + (i * window_step) % n_keys (a sliding window starting inside the span).
void unit_key_ranges(int nq, int n_keys, int32_t jlo, int window_step, std::vector<int32_t>* kv0,
                     std::vector<int32_t>* n_kv) {
  kv0->resize(static_cast<size_t>(nq));
  n_kv->resize(static_cast<size_t>(nq));
  for (int i = 0; i < nq; ++i) {
    const auto at = static_cast<size_t>(i);
    (*n_kv)[at] = jlo + std::max(1, n_keys - (nq - 1 - i) % (n_keys + 1));
    (*kv0)[at] = window_step > 0 ? std::min((*n_kv)[at] - 1, jlo + (i * window_step) % n_keys) : jlo;
  }
}

// The block-of-keys attention helpers give the same bits as one dot_f32_f16 / axpy_f16 per
// key (the arithmetic the OpenCL backend reproduces), on odd key counts and head sizes
// (including sizes that take the fallback paths), and exp_f32_row equals exp_f32 bit for bit.
TEST(CpuHelpers, AttentionHelpersBitIdenticalToPerKeyCalls) {
  auto rng = test::make_rng(20261201);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const int64_t hd : {64, 128, 80, 40, 24, 256}) {
    for (const int n_keys : {1, 7, 32, 33}) {
      const size_t row_bytes = static_cast<size_t>(hd) * 2 * 3 + 6;  // rows of a wider KV row, odd gap
      std::vector<uint8_t> k, v;
      random_kv_rows(rng, n_keys, hd, row_bytes, &k, &v);
      std::vector<float> q(static_cast<size_t>(hd)), p(static_cast<size_t>(n_keys));
      for (float& x : q) x = nd(rng);
      for (float& x : p) x = std::fabs(nd(rng)) * 0.1f;
      const float scale = 0.125f;
      std::vector<float> want(static_cast<size_t>(n_keys), kPoison), got(want);
      for (int j = 0; j < n_keys; ++j) {
        want[static_cast<size_t>(j)] =
            cpu::dot_f32_f16(q.data(), reinterpret_cast<const uint16_t*>(k.data() + static_cast<size_t>(j) * row_bytes), hd) *
            scale;
      }
      cpu::attn_scores_f16(q.data(), k.data(), row_bytes, n_keys, hd, scale, got.data());
      for (int j = 0; j < n_keys; ++j) {
        EXPECT_EQ(std::memcmp(&want[static_cast<size_t>(j)], &got[static_cast<size_t>(j)], 4), 0)
            << "scores hd=" << hd << " keys=" << n_keys << " j=" << j << ": " << want[static_cast<size_t>(j)]
            << " vs " << got[static_cast<size_t>(j)];
      }
      std::vector<float> acc_want(static_cast<size_t>(hd)), acc_got(acc_want);
      for (size_t d = 0; d < acc_want.size(); ++d) acc_want[d] = acc_got[d] = nd(rng);
      for (int j = 0; j < n_keys; ++j) {
        cpu::axpy_f16(p[static_cast<size_t>(j)], reinterpret_cast<const uint16_t*>(v.data() + static_cast<size_t>(j) * row_bytes),
                      acc_want.data(), hd);
      }
      cpu::attn_accum_f16(p.data(), v.data(), row_bytes, n_keys, hd, acc_got.data());
      EXPECT_EQ(std::memcmp(acc_want.data(), acc_got.data(), acc_want.size() * 4), 0) << "accum hd=" << hd << " keys=" << n_keys;
    }
  }
  // exp over softmax-like inputs, the range edges, and beyond them.
  std::vector<float> x;
  for (int i = 0; i < 4099; ++i) x.push_back(-std::fabs(nd(rng)) * 12.0f);
  for (float e : {0.0f, -0.0f, -103.9f, -104.0f, -104.1f, -150.0f, 88.0f, 88.5f, 88.72f, 88.73f, 89.0f, 1.0f, 20.5f,
                  -1e-8f, -699.0f, -700.0f, -701.0f, -1e30f, 699.0f, 701.0f, 1e30f, -87.33f, -87.34f, -103.28f,
                  -103.279f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min()}) {
    x.push_back(e);
  }
  // Denormal results: every float step across the subnormal range's edge.
  for (float e = -103.0f; e > -104.5f; e -= 0.0137f) x.push_back(e);
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(std::numeric_limits<float>::infinity());
  std::vector<float> y(x.size(), kPoison);
  cpu::exp_f32_row(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(std::exp(static_cast<double>(x[i])));
    EXPECT_EQ(std::memcmp(&want, &y[i], 4), 0) << "exp(" << x[i] << ") = " << want << " vs " << y[i];
  }
  // NaN in, NaN out, wherever it falls in a vector.
  for (size_t at = 0; at < 5; ++at) {
    std::vector<float> xn(5, -1.0f), yn(5, 0.0f);
    xn[at] = std::numeric_limits<float>::quiet_NaN();
    cpu::exp_f32_row(xn.data(), yn.data(), 5);
    for (size_t i = 0; i < 5; ++i) {
      if (i == at) {
        EXPECT_TRUE(std::isnan(yn[i])) << "NaN at " << at;
      } else {
        EXPECT_EQ(yn[i], static_cast<float>(std::exp(-1.0))) << "NaN at " << at << " leaked into " << i;
      }
    }
  }
}

// exp_f32_row against exp in double rounded to float on every float bit pattern (NaN: NaN), 2^20
// at a time. About a minute on one core, so not in the suite; run it after changing an exp:
//   test_quant --gtest_also_run_disabled_tests --gtest_filter='*EveryFloat*'
TEST(CpuHelpers, DISABLED_ExpRowMatchesDoubleExpOnEveryFloat) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  std::vector<float> x(kChunk), y(kChunk);
  uint64_t bad = 0;
  for (uint64_t b0 = 0; b0 < (uint64_t{1} << 32); b0 += kChunk) {
    for (uint64_t i = 0; i < kChunk; ++i) {
      const auto u = static_cast<uint32_t>(b0 + i);
      std::memcpy(&x[i], &u, 4);
    }
    cpu::exp_f32_row(x.data(), y.data(), static_cast<int64_t>(kChunk));
    for (uint64_t i = 0; i < kChunk; ++i) {
      const float want = static_cast<float>(std::exp(static_cast<double>(x[i])));
      const bool ok = std::isnan(x[i]) ? std::isnan(y[i]) : std::memcmp(&want, &y[i], 4) == 0;
      if (!ok && ++bad <= 5) ADD_FAILURE() << "exp(" << x[i] << ") = " << want << " vs " << y[i];
    }
  }
  EXPECT_EQ(bad, 0u);
}

// exp_f32_row against exp in double rounded to float on a dense sweep of the whole range where
// the result is neither 0 nor inf (every 1021st float bit pattern of both signs, ~2.3M inputs,
// through the 8-wide, 4-wide and scalar paths), in place and out of place.
TEST(CpuHelpers, ExpRowMatchesDoubleExpOnADenseSweep) {
  std::vector<float> x;
  for (uint32_t b = 0; b < 0x42b20000u; b += 1021) {  // 0 .. 89
    float f;
    std::memcpy(&f, &b, 4);
    x.push_back(f);
    x.push_back(-f * 1.1719f);  // -0 .. -104.3
  }
  x.resize(x.size() / 8 * 8 - 1);  // after the 8-wide steps, one 4-wide step and a scalar tail of 3
  std::vector<float> y(x.size(), kPoison), z(x);
  cpu::exp_f32_row(x.data(), y.data(), static_cast<int64_t>(x.size()));
  cpu::exp_f32_row(z.data(), z.data(), static_cast<int64_t>(z.size()));
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(std::exp(static_cast<double>(x[i])));
    if (std::memcmp(&want, &y[i], 4) != 0 || std::memcmp(&want, &z[i], 4) != 0) {
      if (++bad <= 5) ADD_FAILURE() << "exp(" << x[i] << ") = " << want << " vs " << y[i] << " / " << z[i];
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << x.size();
}

// The multi-query helpers give every query the bits of the single-query helpers (and so of
// one dot / axpy per key): query counts that fill, miss and span the 8-query sums, the 16-query
// lanes and their 64-query passes, and the 6-query accumulator blocks, head sizes that take the
// 64-dimension chunks, a short last chunk and the fallbacks, keys in two runs (the second longer
// than a 32-key chunk for some counts), and strided queries, scores and accumulators.
TEST(CpuHelpers, MultiQueryAttentionBitIdenticalToSingleQuery) {
  auto rng = test::make_rng(20261202);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const int64_t hd : {64, 128, 192, 96, 80, 40, 256, 320}) {
    for (const int nq : {1, 3, 6, 7, 8, 9, 13, 16, 24, 30, 48, 70}) {
      const int n_keys = 1 + static_cast<int>((hd + 5 * nq) % 71);
      const size_t row_bytes = static_cast<size_t>(hd) * 2 * 3 + 10;
      std::vector<uint8_t> k, v;
      random_kv_rows(rng, n_keys, hd, row_bytes, &k, &v);
      // ld 1 for one query (decode's layout: contiguous scores), else a gap between rows.
      const int64_t q_stride = hd + 5, ld = nq == 1 ? 1 : nq + 2, acc_stride = hd + 3;
      std::vector<float> q(static_cast<size_t>(q_stride * nq));
      for (float& x : q) x = nd(rng);
      std::vector<float> p(static_cast<size_t>(ld * n_keys));
      for (float& x : p) x = std::fabs(nd(rng)) * 0.1f;
      const float scale = 0.125f;

      std::vector<float> got(static_cast<size_t>(ld * n_keys), kPoison);
      // The keys as two runs (a split inside a 32-key chunk when there are enough), the second
      // one read from a copy elsewhere.
      const int split = n_keys > 21 ? 21 : n_keys / 2;
      const std::vector<uint8_t> k2(k.begin() + static_cast<std::ptrdiff_t>(split * row_bytes), k.end());
      const cpu::KvRun runs[2] = {{k.data(), split}, {k2.data(), n_keys - split}};
      cpu::attn_scores_f16_multi(q.data(), q_stride, nq, runs, 2, row_bytes, hd, scale, got.data(), ld);
      std::vector<float> acc0(static_cast<size_t>(acc_stride * nq));
      for (float& x : acc0) x = nd(rng);
      std::vector<float> acc_got(acc0);
      cpu::attn_accum_f16_multi(p.data(), ld, nq, v.data(), row_bytes, n_keys, hd, acc_got.data(), acc_stride);
      for (int i = 0; i < nq; ++i) {
        std::vector<float> want(static_cast<size_t>(n_keys));
        cpu::attn_scores_f16(q.data() + i * q_stride, k.data(), row_bytes, n_keys, hd, scale, want.data());
        for (int j = 0; j < n_keys; ++j) {
          const float g = got[static_cast<size_t>(j * ld + i)];
          ASSERT_EQ(std::memcmp(&want[static_cast<size_t>(j)], &g, 4), 0)
              << "scores hd=" << hd << " nq=" << nq << " i=" << i << " j=" << j << ": " << want[static_cast<size_t>(j)]
              << " vs " << g;
        }
        for (int j = nq; j < ld; ++j) {  // the gap between rows of scores stays untouched
          ASSERT_EQ(std::memcmp(&got[static_cast<size_t>(j)], &kPoison, 4), 0) << "scores wrote past nq";
        }
        std::vector<float> pi(static_cast<size_t>(n_keys));
        for (int j = 0; j < n_keys; ++j) pi[static_cast<size_t>(j)] = p[static_cast<size_t>(j * ld + i)];
        std::vector<float> acc_want(acc0.begin() + i * acc_stride, acc0.begin() + i * acc_stride + hd);
        cpu::attn_accum_f16(pi.data(), v.data(), row_bytes, n_keys, hd, acc_want.data());
        ASSERT_EQ(std::memcmp(acc_want.data(), acc_got.data() + i * acc_stride, static_cast<size_t>(hd) * 4), 0)
            << "accum hd=" << hd << " nq=" << nq << " i=" << i;
        ASSERT_EQ(std::memcmp(acc0.data() + i * acc_stride + hd, acc_got.data() + i * acc_stride + hd, 3 * 4), 0)
            << "accum wrote past hd";
      }
    }
  }
}

// The per-query softmax definition (kernels.hpp) over a unit's scores s, in place: each query's
// max over its own keys, exp in double rounded to float, the sum in double, 1 / sum rounded to
// float, the product rounded to f16.
void softmax_unit_reference(std::vector<float>* s, int64_t ld, int nq, int32_t jlo, int n_keys,
                            const std::vector<int32_t>& kv0, const std::vector<int32_t>& n_kv) {
  std::vector<float>& want = *s;
  for (int i = 0; i < nq; ++i) {
    const int32_t a = kv0[static_cast<size_t>(i)], b = n_kv[static_cast<size_t>(i)];
    float m = -std::numeric_limits<float>::infinity();
    for (int32_t j = a; j < b; ++j) m = std::max(m, want[static_cast<size_t>((j - jlo) * ld + i)]);
    double sum = 0.0;
    for (int j = 0; j < n_keys; ++j) {
      float& e = want[static_cast<size_t>(j * ld + i)];
      e = static_cast<float>(std::exp(static_cast<double>(e - m)));
      if (jlo + j >= a && jlo + j < b) sum += static_cast<double>(e);
    }
    const auto inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j < n_keys; ++j) {
      float& e = want[static_cast<size_t>(j * ld + i)];
      e = fp16_to_f32(f32_to_fp16(e * inv));
    }
  }
}

// The unit softmax against the per-query definition (kernels.hpp), bit for bit: causal ranges
// that end inside the span, sliding windows that start inside it, query counts that fill, miss
// and span the 8-lane groups, scores with wide ranges, and the gap between rows left untouched.
TEST(CpuHelpers, AttnSoftmaxMultiMatchesPerQueryDefinition) {
  auto rng = test::make_rng(20261203);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const int nq : {1, 2, 3, 7, 8, 9, 15, 16, 24, 30}) {
    for (const int n_keys : {1, 5, 8, 37, 130}) {
      for (const bool window : {false, true}) {
        const int32_t jlo = 3 + nq % 5;
        const int64_t ld = nq + 3;
        std::vector<int32_t> kv0, n_kv;
        unit_key_ranges(nq, n_keys, jlo, window ? 7 : 0, &kv0, &n_kv);
        std::vector<float> s(static_cast<size_t>(ld * n_keys), kPoison);
        for (int j = 0; j < n_keys; ++j) {
          for (int i = 0; i < nq; ++i) s[static_cast<size_t>(j * ld + i)] = nd(rng) * (i % 3 == 0 ? 20.0f : 2.0f);
        }
        std::vector<float> want(s);
        softmax_unit_reference(&want, ld, nq, jlo, n_keys, kv0, n_kv);
        std::vector<float> got(s);
        cpu::attn_softmax_multi(got.data(), ld, nq, jlo, n_keys, kv0.data(), n_kv.data());
        for (int i = 0; i < nq; ++i) {
          for (int j = 0; j < n_keys; ++j) {
            const int32_t key = jlo + j;
            if (key < kv0[static_cast<size_t>(i)] || key >= n_kv[static_cast<size_t>(i)]) continue;  // unread
            const auto at = static_cast<size_t>(j * ld + i);
            ASSERT_EQ(std::memcmp(&want[at], &got[at], 4), 0)
                << "nq=" << nq << " n_keys=" << n_keys << " window=" << window << " i=" << i << " j=" << j << ": "
                << want[at] << " vs " << got[at];
          }
        }
        for (int j = 0; j < n_keys; ++j) {
          for (int64_t i = nq; i < ld; ++i) {
            ASSERT_EQ(std::memcmp(&got[static_cast<size_t>(j * ld + i)], &kPoison, 4), 0) << "wrote past nq";
          }
        }
      }
    }
  }
}

// Scores far below a query's max: exponentials in the float subnormal range, at and around 2^-25
// (where the product's f16 rounding turns to +0, and below which the kernels zero the lane before
// the product), and spreads of +-150 as random-weight models give, with some sums far above 1
// (many keys near the max) so that inv is small. Bit for bit against the definition, every
// query both in an 8-query group and alone.
TEST(CpuHelpers, AttnSoftmaxMultiTinyProbabilities) {
  auto rng = test::make_rng(20261204);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float ln_2m25 = static_cast<float>(std::log(std::ldexp(1.0, -25)));
  // Gaps below the max: around ln 2^-25 (with a sum of about 1 these products straddle 2^-25),
  // and far ones whose exponentials are float subnormals or 0 and leave the sum as it is.
  std::vector<float> near, far, mixed;
  for (int u = -6; u <= 6; ++u) near.push_back(ln_2m25 + static_cast<float>(u) * 4e-6f);
  for (float d : {-60.0f, -87.0f, -87.4f, -90.0f, -100.0f, -103.9f, -104.0f, -110.0f, -150.0f, -300.0f}) far.push_back(d);
  for (float d : {0.0f, -1e-6f, -0.5f, -8.0f, -16.0f, -17.0f, -17.7f, -18.0f, -30.0f}) mixed.push_back(d);
  for (const int nq : {9, 17}) {
    for (const int n_keys : {3, 40, 200}) {
      const int32_t jlo = 2;
      const int64_t ld = nq + 1;
      std::vector<int32_t> kv0, n_kv;
      unit_key_ranges(nq, n_keys, jlo, 0, &kv0, &n_kv);
      std::vector<float> s(static_cast<size_t>(ld * n_keys), kPoison);
      for (int i = 0; i < nq; ++i) {
        const float base = nd(rng) * 3.0f;
        for (int j = 0; j < n_keys; ++j) {
          float v;
          if (i % 3 == 0) {
            v = base + (j % 2 == 0 ? near[static_cast<size_t>(j / 2 + i) % near.size()]
                                   : far[static_cast<size_t>(j / 2 + i) % far.size()]);
          } else if (i % 3 == 1) {
            v = nd(rng) * 150.0f;  // +-150: most exponentials underflow
          } else {
            v = base - std::fabs(nd(rng)) * 0.01f;  // many keys near the max: the sum >> 1
            if (j % 5 == 0) v = base + mixed[static_cast<size_t>(j / 5) % mixed.size()];
            if (j % 5 == 1) v = base + near[static_cast<size_t>(j / 5) % near.size()];
          }
          s[static_cast<size_t>(j * ld + i)] = v;
        }
        if (i % 3 != 1) s[static_cast<size_t>(i % n_keys) * static_cast<size_t>(ld) + static_cast<size_t>(i)] = base;  // the max
      }
      std::vector<float> want(s);
      softmax_unit_reference(&want, ld, nq, jlo, n_keys, kv0, n_kv);
      std::vector<float> got(s);
      cpu::attn_softmax_multi(got.data(), ld, nq, jlo, n_keys, kv0.data(), n_kv.data());
      int zeros = 0, tiny = 0;
      for (int i = 0; i < nq; ++i) {
        for (int j = 0; j < n_keys; ++j) {
          const int32_t key = jlo + j;
          if (key < kv0[static_cast<size_t>(i)] || key >= n_kv[static_cast<size_t>(i)]) continue;
          const auto at = static_cast<size_t>(j * ld + i);
          zeros += want[at] == 0.0f;
          tiny += want[at] > 0.0f && want[at] < 1e-7f;
          ASSERT_EQ(std::memcmp(&want[at], &got[at], 4), 0)
              << "nq=" << nq << " n_keys=" << n_keys << " i=" << i << " j=" << j << " score " << s[at] << ": "
              << want[at] << " vs " << got[at];
        }
      }
      if (n_keys >= 40) {
        EXPECT_GT(zeros, 0);  // the cases reach the f16 zero and the smallest f16 values
        EXPECT_GT(tiny, 0);
      }
    }
  }
}

#if defined(GENIEX_HAVE_AVX2_KERNELS)
// The AVX-512 attention helpers give the AVX2 functions' bits: exp (8 doubles per zmm) over a
// sweep of the finite range, the edges, infinities and NaN, at every length 0..40 (the 16-wide,
// 8-wide and padded tail paths) and in place; the unit softmax on causal and windowed units of
// every query count up to 30, whole buffers compared (the entries nothing reads and the gap
// between rows included); the multi-query scores and accumulation on every head size the zmm
// paths take and two they hand back, query counts across the 8-query sums and 12-query blocks.
TEST(CpuHelpers, Avx512AttentionHelpersGiveTheAvx2Bits) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw)) GTEST_SKIP() << "no usable AVX-512 F + BW on this CPU";
  std::vector<float> x;
  for (uint32_t b = 0; b < 0x42b20000u; b += 40009) {
    float v;
    std::memcpy(&v, &b, 4);
    x.push_back(v);
    x.push_back(-v * 1.1719f);
  }
  for (float e : {0.0f, -0.0f, -104.0f, -150.0f, 88.72f, 88.73f, 89.0f, -700.0f, -701.0f, 701.0f, 1e30f, -1e30f,
                  std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    x.push_back(e);
  }
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  std::vector<float> want(x.size(), kPoison), got(x.size(), kPoison);
  cpu::avx2::exp_f32_row(x.data(), want.data(), static_cast<int64_t>(x.size()));
  cpu::avx512::exp_f32_row(x.data(), got.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(same(want, got)) << "whole sweep";
  for (int n = 0; n <= 40; ++n) {
    for (size_t at : {size_t{0}, x.size() - 41}) {  // the sweep's start, and the edges and NaN at its end
      std::vector<float> w(x.begin() + static_cast<std::ptrdiff_t>(at), x.begin() + static_cast<std::ptrdiff_t>(at) + 41);
      const std::vector<float> in(w);
      std::vector<float> g(w);
      cpu::avx2::exp_f32_row(w.data(), w.data(), n);
      cpu::avx512::exp_f32_row(g.data(), g.data(), n);
      EXPECT_TRUE(same(w, g)) << "n=" << n << " at=" << at;  // in place; the entries past n untouched
      std::vector<float> out(41, kPoison);
      cpu::avx512::exp_f32_row(in.data(), out.data(), n);
      const auto nn = static_cast<size_t>(n);
      EXPECT_EQ(std::memcmp(out.data(), w.data(), nn * 4), 0) << "out of place, n=" << n << " at=" << at;
      for (size_t i = nn; i < out.size(); ++i) ASSERT_TRUE(std::isnan(out[i])) << "wrote past n=" << n;
    }
  }

  auto rng = test::make_rng(20261204);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int nq = 1; nq <= 30; ++nq) {
    for (const int n_keys : {1, 6, 9, 64, 131}) {
      for (const bool window : {false, true}) {
        const int32_t jlo = nq % 4;
        const int64_t ld = nq + 1;
        std::vector<int32_t> kv0, n_kv;
        unit_key_ranges(nq, n_keys, jlo, window ? 5 : 0, &kv0, &n_kv);
        std::vector<float> s(static_cast<size_t>(ld * n_keys), kPoison);
        for (int j = 0; j < n_keys; ++j) {
          for (int i = 0; i < nq; ++i) s[static_cast<size_t>(j * ld + i)] = nd(rng) * (i % 2 == 0 ? 30.0f : 3.0f);
        }
        std::vector<float> a(s), b(s);
        cpu::avx2::attn_softmax_multi(a.data(), ld, nq, jlo, n_keys, kv0.data(), n_kv.data());
        cpu::avx512::attn_softmax_multi(b.data(), ld, nq, jlo, n_keys, kv0.data(), n_kv.data());
        ASSERT_TRUE(same(a, b)) << "nq=" << nq << " n_keys=" << n_keys << " window=" << window;
      }
    }
  }

  for (const int64_t hd : {64, 128, 192, 256, 80, 48}) {
    for (const int nq : {1, 5, 8, 11, 12, 13, 24, 25, 70}) {
      const int n_keys = 1 + static_cast<int>((hd + 3 * nq) % 29);
      const size_t row_bytes = static_cast<size_t>(hd) * 2 * 2 + 6;
      std::vector<uint8_t> k, v;
      random_kv_rows(rng, n_keys, hd, row_bytes, &k, &v);
      const int64_t q_stride = hd + 3, ld = nq == 1 ? 1 : nq + 1, acc_stride = hd + 5;
      std::vector<float> q(static_cast<size_t>(q_stride * nq)), p(static_cast<size_t>(ld * n_keys));
      for (float& e : q) e = nd(rng);
      for (float& e : p) e = std::fabs(nd(rng)) * 0.1f;
      std::vector<float> sa(p.size(), kPoison), sb(sa);
      const cpu::KvRun run{k.data(), n_keys};
      cpu::avx2::attn_scores_f16_multi(q.data(), q_stride, nq, &run, 1, row_bytes, hd, 0.125f, sa.data(), ld);
      cpu::avx512::attn_scores_f16_multi(q.data(), q_stride, nq, &run, 1, row_bytes, hd, 0.125f, sb.data(), ld);
      ASSERT_TRUE(same(sa, sb)) << "scores hd=" << hd << " nq=" << nq;
      std::vector<float> aa(static_cast<size_t>(acc_stride * nq));
      for (float& e : aa) e = nd(rng);
      std::vector<float> ab(aa);
      cpu::avx2::attn_accum_f16_multi(p.data(), ld, nq, v.data(), row_bytes, n_keys, hd, aa.data(), acc_stride);
      cpu::avx512::attn_accum_f16_multi(p.data(), ld, nq, v.data(), row_bytes, n_keys, hd, ab.data(), acc_stride);
      ASSERT_TRUE(same(aa, ab)) << "accum hd=" << hd << " nq=" << nq;
    }
  }
}
#endif

// The RoPE rotation gives the scalar formulas' bits (fma(x0, c, -(x1 s)), fma(x0, s, x1 c)) in
// both pair layouts, for pair counts with and without a vector tail, in place or not.
TEST(CpuHelpers, RopeRotateBitIdenticalToScalarFormulas) {
  auto rng = test::make_rng(20261203);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (const bool interleaved : {true, false}) {
    for (const int half : {1, 3, 4, 7, 8, 16, 32, 33, 64}) {
      std::vector<float> x(static_cast<size_t>(2 * half)), cs(static_cast<size_t>(half)), sn(cs.size());
      for (float& v : x) v = nd(rng);
      for (int i = 0; i < half; ++i) {
        const float th = nd(rng) * 10.0f;
        cs[static_cast<size_t>(i)] = std::cos(th);
        sn[static_cast<size_t>(i)] = std::sin(th);
      }
      std::vector<float> want(x.size()), got(x.size(), kPoison);
      for (int i = 0; i < half; ++i) {
        const size_t e0 = interleaved ? static_cast<size_t>(2 * i) : static_cast<size_t>(i);
        const size_t e1 = interleaved ? e0 + 1 : e0 + static_cast<size_t>(half);
        const float c = cs[static_cast<size_t>(i)], s = sn[static_cast<size_t>(i)];
        want[e0] = std::fma(x[e0], c, -(x[e1] * s));
        want[e1] = std::fma(x[e0], s, x[e1] * c);
      }
      cpu::rope_rotate(x.data(), got.data(), cs.data(), sn.data(), half, interleaved);
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0) << "half=" << half << " interleaved=" << interleaved;
      cpu::rope_rotate(x.data(), x.data(), cs.data(), sn.data(), half, interleaved);  // in place
      EXPECT_EQ(std::memcmp(want.data(), x.data(), want.size() * 4), 0) << "in place, half=" << half;
    }
  }
}

}  // namespace
}  // namespace geniex
