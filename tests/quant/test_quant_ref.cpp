// Scalar reference quantization: format definitions checked on hand-built blocks, round-trip
// error bounds on random data, and vec_dot_ref against the f32 dot of the decoded rows.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "core/fp16.hpp"
#include "quant/quant.hpp"
#include "test_util.hpp"

namespace geniex {
namespace {

using namespace quant;
using test::make_rng;
using test::random_normal;

std::vector<float> dequant(DType t, const void* src, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), std::nanf(""));
  dequantize_row_ref(t, src, out.data(), n);
  return out;
}

// ---- known values: the block layouts as the GGUF format defines them --------------------------

TEST(QuantFormat, Q4_0Block) {
  BlockQ4_0 b{};
  b.d = f32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = dequant(DType::Q4_0, &b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], static_cast<float>(j - 8) * 0.5f) << j;
    EXPECT_EQ(y[j + 16], static_cast<float>(15 - j - 8) * 0.5f) << j;
  }
}

TEST(QuantFormat, Q4_1Block) {
  BlockQ4_1 b{};
  b.d = f32_to_fp16(0.25f);
  b.m = f32_to_fp16(-1.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(((j * 3) % 16) | (j << 4));
  const auto y = dequant(DType::Q4_1, &b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], static_cast<float>((j * 3) % 16) * 0.25f - 1.0f) << j;
    EXPECT_EQ(y[j + 16], static_cast<float>(j) * 0.25f - 1.0f) << j;
  }
}

// Q5_0 / Q5_1: low 4 bits as Q4_0 / Q4_1, fifth bit of element j = bit j of qh (little-endian).
void set_q5(uint8_t* qs, uint8_t* qh, int j, int q) {
  if (j < 16) {
    qs[j] = static_cast<uint8_t>((qs[j] & 0xf0) | (q & 15));
  } else {
    qs[j - 16] = static_cast<uint8_t>((qs[j - 16] & 0x0f) | ((q & 15) << 4));
  }
  if (q & 16) qh[j / 8] = static_cast<uint8_t>(qh[j / 8] | (1 << (j % 8)));
}

TEST(QuantFormat, Q5_0Block) {
  BlockQ5_0 b{};
  b.d = f32_to_fp16(0.5f);
  auto q = [](int j) { return (j * 13 + 7) % 32; };
  for (int j = 0; j < 32; ++j) set_q5(b.qs, b.qh, j, q(j));
  const auto y = dequant(DType::Q5_0, &b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], static_cast<float>(q(j) - 16) * 0.5f) << j;
  // The GGUF bytes: d, then qh, then qs.
  uint8_t raw[22];
  std::memcpy(raw, &b, sizeof(raw));
  EXPECT_EQ(raw[2], b.qh[0]);
  EXPECT_EQ(raw[6], b.qs[0]);
  EXPECT_EQ(offsetof(BlockQ5_0, qh), 2u);
  EXPECT_EQ(offsetof(BlockQ5_0, qs), 6u);
}

TEST(QuantFormat, Q5_1Block) {
  BlockQ5_1 b{};
  b.d = f32_to_fp16(0.25f);
  b.m = f32_to_fp16(-3.0f);
  auto q = [](int j) { return (j * 5 + 31) % 32; };
  for (int j = 0; j < 32; ++j) set_q5(b.qs, b.qh, j, q(j));
  const auto y = dequant(DType::Q5_1, &b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], static_cast<float>(q(j)) * 0.25f - 3.0f) << j;
  EXPECT_EQ(offsetof(BlockQ5_1, qh), 4u);
  EXPECT_EQ(offsetof(BlockQ5_1, qs), 8u);
}

TEST(QuantFormat, Q8_0AndQ8_1Block) {
  BlockQ8_0 b{};
  BlockQ8_1 c{};
  b.d = c.d = f32_to_fp16(0.125f);
  for (int j = 0; j < 32; ++j) b.qs[j] = c.qs[j] = static_cast<int8_t>(j * 8 - 128);
  const auto y0 = dequant(DType::Q8_0, &b, 32);
  const auto y1 = dequant(DType::Q8_1, &c, 32);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y0[j], static_cast<float>(j * 8 - 128) * 0.125f);
    EXPECT_EQ(y1[j], y0[j]);
  }
}

TEST(QuantFormat, Q4_KBlock) {
  const int sc[8] = {1, 2, 3, 63, 17, 33, 48, 62};
  const int mn[8] = {0, 5, 10, 20, 40, 50, 60, 63};
  BlockQ4_K b{};
  b.d = f32_to_fp16(1.0f);
  b.dmin = f32_to_fp16(0.5f);
  // 6-bit scales/mins: j < 4 in the low 6 bits of bytes j and j+4; j >= 4 split into a low
  // nibble in byte j+4 and two high bits in the top of bytes j-4 (scale) and j (min).
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b.scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    b.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  auto q = [](int e) { return (e * 7 + 3) % 16; };
  // Sub-block 2k is the low nibbles of qs[32k..32k+31], sub-block 2k+1 the high nibbles.
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l) {
      b.qs[32 * k + l] = static_cast<uint8_t>(q(64 * k + l) | (q(64 * k + 32 + l) << 4));
    }
  }
  const auto y = dequant(DType::Q4_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    EXPECT_FLOAT_EQ(y[e], static_cast<float>(sc[s] * q(e)) - 0.5f * static_cast<float>(mn[s]))
        << e;
  }
}

TEST(QuantFormat, Q5_KBlock) {
  const int sc[8] = {4, 63, 1, 9, 32, 16, 8, 47};
  const int mn[8] = {63, 0, 31, 32, 1, 2, 3, 4};
  BlockQ5_K b{};
  b.d = f32_to_fp16(0.25f);
  b.dmin = f32_to_fp16(2.0f);
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b.scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    b.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  auto q = [](int e) { return (e * 11 + 5) % 32; };
  // Low 4 bits as in Q4_K; the fifth bit of element l of sub-block s is bit s of qh[l].
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l) {
      b.qs[32 * k + l] = static_cast<uint8_t>((q(64 * k + l) & 15) | ((q(64 * k + 32 + l) & 15) << 4));
    }
  }
  for (int e = 0; e < 256; ++e) {
    if (q(e) & 16) b.qh[e % 32] = static_cast<uint8_t>(b.qh[e % 32] | (1 << (e / 32)));
  }
  const auto y = dequant(DType::Q5_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    EXPECT_FLOAT_EQ(y[e], 0.25f * static_cast<float>(sc[s] * q(e)) - 2.0f * static_cast<float>(mn[s]))
        << e;
  }
}

TEST(QuantFormat, Q6_KBlock) {
  BlockQ6_K b{};
  b.d = f32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j % 2 ? -(j * 8) : j * 8 - 1);
  b.scales[15] = -128;
  auto q = [](int e) { return (e * 5 + 1) % 64; };  // stored unsigned, value q - 32
  // Per 128 elements (half h): element 32g + l (g = 0..3) has its low 4 bits in ql[64h + l]
  // (g = 0: low nibble, g = 2: high nibble) or ql[64h + 32 + l] (g = 1, 3) and its top 2 bits
  // in bits 2g..2g+1 of qh[32h + l].
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int e = 128 * h + l;
      b.ql[64 * h + l] = static_cast<uint8_t>((q(e) & 15) | ((q(e + 64) & 15) << 4));
      b.ql[64 * h + 32 + l] = static_cast<uint8_t>((q(e + 32) & 15) | ((q(e + 96) & 15) << 4));
      b.qh[32 * h + l] = static_cast<uint8_t>((q(e) >> 4) | ((q(e + 32) >> 4) << 2) |
                                              ((q(e + 64) >> 4) << 4) | ((q(e + 96) >> 4) << 6));
    }
  }
  const auto y = dequant(DType::Q6_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_FLOAT_EQ(y[e], 0.5f * static_cast<float>(b.scales[e / 16] * (q(e) - 32))) << e;
  }
}

TEST(QuantFormat, Q8_KBlock) {
  BlockQ8_K b{};
  b.d = 0.03125f;
  for (int j = 0; j < 256; ++j) b.qs[j] = static_cast<int8_t>(j - 128);
  const auto y = dequant(DType::Q8_K, &b, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], static_cast<float>(j - 128) * 0.03125f);
}

// ---- quantizer rules (ggml's reference quantizers) ---------------------------------------------

TEST(QuantRules, Q4_0ScaleIsSignedMaxOverMinus8) {
  std::vector<float> x(32, 0.25f);
  x[5] = -4.0f;  // largest magnitude, negative: d = -4 / -8 = 0.5
  BlockQ4_0 b{};
  quantize_row_ref(DType::Q4_0, x.data(), &b, 32);
  EXPECT_EQ(fp16_to_f32(b.d), 0.5f);
  EXPECT_EQ(b.qs[5] & 15, 0);  // -4 / 0.5 + 8 = 0
  x[5] = 4.0f;                 // positive max: d = -0.5, the max maps to quant 0 again
  quantize_row_ref(DType::Q4_0, x.data(), &b, 32);
  EXPECT_EQ(fp16_to_f32(b.d), -0.5f);
  EXPECT_EQ(dequant(DType::Q4_0, &b, 32)[5], 4.0f);
}

TEST(QuantRules, Q5_0ScaleIsSignedMaxOverMinus16) {
  std::vector<float> x(32, 0.25f);
  x[3] = 8.0f;
  x[20] = -8.0f;
  BlockQ5_0 b{};
  quantize_row_ref(DType::Q5_0, x.data(), &b, 32);
  // Of two elements of largest magnitude the first one sets d: 8 / -16 = -0.5.
  EXPECT_EQ(fp16_to_f32(b.d), -0.5f);
  const auto y = dequant(DType::Q5_0, &b, 32);
  EXPECT_EQ(y[3], 8.0f);    // quant 0: (0 - 16) * -0.5
  EXPECT_EQ(y[20], -7.5f);  // -8 / -0.5 + 16.5 = 32.5 -> capped at 31: (31 - 16) * -0.5
  EXPECT_EQ(y[0], 0.0f);    // 0.25 / -0.5 + 16.5 = 16 -> 0
  x[3] = 0.5f;              // now -8 wins: d = 0.5
  quantize_row_ref(DType::Q5_0, x.data(), &b, 32);
  EXPECT_EQ(fp16_to_f32(b.d), 0.5f);
  EXPECT_EQ(dequant(DType::Q5_0, &b, 32)[20], -8.0f);
  // Halves truncate after + 16.5: 0.25 / 0.5 + 16.5 = 17 exactly -> 17 -> 0.5.
  EXPECT_EQ(dequant(DType::Q5_0, &b, 32)[0], 0.5f);
}

TEST(QuantRules, Q5_1SpansMinToMax) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j) - 10.0f;  // min -10, max 21: d = 1
  BlockQ5_1 b{};
  quantize_row_ref(DType::Q5_1, x.data(), &b, 32);
  EXPECT_EQ(fp16_to_f32(b.d), 1.0f);
  EXPECT_EQ(fp16_to_f32(b.m), -10.0f);
  const auto y = dequant(DType::Q5_1, &b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
  // A constant block: d = 0, every quant 0, decoded to m.
  std::vector<float> c(32, 1.5f);
  quantize_row_ref(DType::Q5_1, c.data(), &b, 32);
  EXPECT_EQ(fp16_to_f32(b.d), 0.0f);
  for (float v : dequant(DType::Q5_1, &b, 32)) EXPECT_EQ(v, 1.5f);
}

TEST(QuantRules, Q8_0RoundsHalfAwayFromZero) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j) - 15.5f;  // halves
  x[31] = 127.0f;  // d = 1 exactly
  BlockQ8_0 b{};
  quantize_row_ref(DType::Q8_0, x.data(), &b, 32);
  EXPECT_EQ(fp16_to_f32(b.d), 1.0f);
  for (int j = 0; j < 31; ++j) {
    const float v = x[j];
    EXPECT_EQ(b.qs[j], static_cast<int>(v > 0 ? v + 0.5f : v - 0.5f)) << v;
  }
}

TEST(QuantRules, Q8_1StoresScaledSum) {
  auto rng = make_rng(11);
  const auto x = random_normal(rng, 64);
  BlockQ8_1 b[2];
  quantize_row_ref(DType::Q8_1, x.data(), b, 64);
  for (int i = 0; i < 2; ++i) {
    const BlockQ8_1& blk = b[i];
    int sum = 0;
    for (int8_t q : blk.qs) sum += q;
    // As ggml: s = sum * d with d = amax / 127 before d is rounded to fp16.
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[static_cast<size_t>(i * 32 + j)]));
    EXPECT_EQ(blk.s, f32_to_fp16(static_cast<float>(sum) * (amax / 127.0f)));
  }
}

TEST(QuantRules, Q8_KScaleIsSignedMaxOverMinus127AndBsums) {
  auto rng = make_rng(12);
  auto x = random_normal(rng, 256, 0.5f);
  x[77] = 6.35f;
  BlockQ8_K b{};
  quantize_row_ref(DType::Q8_K, x.data(), &b, 256);
  EXPECT_FLOAT_EQ(b.d, -6.35f / 127.0f);
  EXPECT_EQ(b.qs[77], -127);
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += b.qs[16 * g + j];
    EXPECT_EQ(b.bsums[g], sum);
  }
}

TEST(QuantRules, AllZeroBlocksDecodeToZero) {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q8_1,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K}) {
    std::vector<float> x(256, 0.0f);
    std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, 256)), 0xAB);
    quantize_row_ref(t, x.data(), q.data(), 256);
    for (float v : dequant(t, q.data(), 256)) EXPECT_EQ(v, 0.0f) << dtype_name(t);
  }
}

// ---- round trip on random data -----------------------------------------------------------------

struct RoundTripBound {
  DType type;
  double max_rel_rmse;  // RMSE of the round trip / RMS of the data
};

class QuantRoundTrip : public testing::TestWithParam<RoundTripBound> {};

TEST_P(QuantRoundTrip, ErrorWithinBound) {
  const RoundTripBound p = GetParam();
  auto rng = make_rng(static_cast<uint32_t>(p.type) + 100);
  const int64_t bs = dtype_info(p.type).block_size == 1 ? 1 : dtype_info(p.type).block_size;
  for (int64_t rows : {1, 3, 7}) {
    const int64_t n = std::max<int64_t>(bs, 256) * (rows == 1 ? 1 : 3);
    const size_t rb = static_cast<size_t>(row_bytes(p.type, n));
    const auto x = random_normal(rng, static_cast<size_t>(rows * n), 2.0f);
    std::vector<uint8_t> q(rb * static_cast<size_t>(rows), 0xCD);
    std::vector<float> y(x.size(), std::nanf(""));
    for (int64_t r = 0; r < rows; ++r) quantize_row_ref(p.type, x.data() + r * n, q.data() + r * rb, n);
    for (int64_t r = 0; r < rows; ++r) dequantize_row_ref(p.type, q.data() + r * rb, y.data() + r * n, n);
    double err2 = 0.0, sig2 = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << i;
      const double xi = static_cast<double>(x[i]), yi = static_cast<double>(y[i]);
      err2 += (xi - yi) * (xi - yi);
      sig2 += xi * xi;
    }
    const double rel = std::sqrt(err2 / sig2);
    EXPECT_LE(rel, p.max_rel_rmse) << dtype_name(p.type) << " rows=" << rows << " n=" << n;
    if (p.type == DType::F32) {
      EXPECT_EQ(rel, 0.0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, QuantRoundTrip,
    testing::Values(RoundTripBound{DType::F32, 0.0}, RoundTripBound{DType::F16, 3e-4},
                    RoundTripBound{DType::BF16, 2.5e-3}, RoundTripBound{DType::Q8_0, 0.01},
                    RoundTripBound{DType::Q8_1, 0.01}, RoundTripBound{DType::Q8_K, 0.012},
                    RoundTripBound{DType::Q4_0, 0.15}, RoundTripBound{DType::Q4_1, 0.13},
                    RoundTripBound{DType::Q5_0, 0.065}, RoundTripBound{DType::Q5_1, 0.055},
                    RoundTripBound{DType::Q4_K, 0.12}, RoundTripBound{DType::Q5_K, 0.06},
                    RoundTripBound{DType::Q6_K, 0.035}),
    [](const testing::TestParamInfo<RoundTripBound>& param_info) {
      return std::string(dtype_name(param_info.param.type));
    });

// ---- vec_dot_ref against the dot of the decoded rows -------------------------------------------

class QuantVecDot : public testing::TestWithParam<DType> {};

TEST_P(QuantVecDot, MatchesDequantizedDot) {
  const DType wt = GetParam();
  const DType at = vec_dot_type(wt);
  auto rng = make_rng(static_cast<uint32_t>(wt) + 200);
  for (int64_t n : {256, 768, 2048}) {
    for (int rep = 0; rep < 4; ++rep) {
      const auto w = random_normal(rng, static_cast<size_t>(n));
      const auto a = random_normal(rng, static_cast<size_t>(n), 3.0f);
      std::vector<uint8_t> wq(static_cast<size_t>(row_bytes(wt, n)));
      std::vector<uint8_t> aq(static_cast<size_t>(row_bytes(at, n)));
      quantize_row_ref(wt, w.data(), wq.data(), n);
      quantize_row_ref(at, a.data(), aq.data(), n);
      const auto wd = dequant(wt, wq.data(), n);
      const auto ad = dequant(at, aq.data(), n);
      double exact = 0.0, absdot = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const double prod = static_cast<double>(wd[i]) * static_cast<double>(ad[i]);
        exact += prod;
        absdot += std::fabs(prod);
      }
      const float got = vec_dot_ref(wt, wq.data(), aq.data(), n);
      // Q4_1's and Q5_1's min term uses the activation's stored s = fp16(d * sum(q)), rounded
      // to 11 bits.
      const bool min_term = wt == DType::Q4_1 || wt == DType::Q5_1;
      const double tol = (min_term ? 2e-3 : 2e-6) * absdot;
      EXPECT_NEAR(got, exact, tol) << dtype_name(wt) << " n=" << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, QuantVecDot, testing::ValuesIn(test::weight_types()),
                         test::type_name);

TEST(QuantVecDot, ActivationTypes) {
  EXPECT_EQ(vec_dot_type(DType::Q4_0), DType::Q8_0);
  EXPECT_EQ(vec_dot_type(DType::Q8_0), DType::Q8_0);
  EXPECT_EQ(vec_dot_type(DType::Q4_1), DType::Q8_1);
  EXPECT_EQ(vec_dot_type(DType::Q5_0), DType::Q8_0);
  EXPECT_EQ(vec_dot_type(DType::Q5_1), DType::Q8_1);
  EXPECT_EQ(vec_dot_type(DType::Q4_K), DType::Q8_K);
  EXPECT_EQ(vec_dot_type(DType::Q5_K), DType::Q8_K);
  EXPECT_EQ(vec_dot_type(DType::Q6_K), DType::Q8_K);
  EXPECT_EQ(vec_dot_type(DType::F16), DType::F16);
  EXPECT_EQ(vec_dot_type(DType::BF16), DType::BF16);
  EXPECT_EQ(vec_dot_type(DType::F32), DType::F32);
}

}  // namespace
}  // namespace geniex
