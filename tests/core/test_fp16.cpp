// fp16 / bf16 conversions against independent references: an exact decode built with ldexp,
// a double-precision round-to-nearest-even encoder, and the F16C hardware where present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "../common/x86_cpuid.hpp"
#define GX_TEST_X86 1
#endif

#include "core/fp16.hpp"
#include "core_test_seed.hpp"

namespace geniex {
namespace {

bool is_fp16_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool is_bf16_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

// Decodes a half with ldexp: nothing shared with the code under test.
double ref_fp16_value(uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(static_cast<double>(mant), -24);
  else if (exp == 31) v = mant == 0 ? HUGE_VAL : std::nan("");
  else v = std::ldexp(static_cast<double>(1024 + mant), exp - 25);
  return sign ? -v : v;
}

// Round-to-nearest-even float -> half in double arithmetic (every step exact except the
// one nearbyint, which rounds ties to even in the default rounding mode).
uint16_t ref_f32_to_fp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return static_cast<uint16_t>(sign | 0x7c00u);
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int ulp_exp = std::max(e - 1, -14) - 10;
  const double q = std::nearbyint(std::ldexp(a, -ulp_exp));
  const double r = std::ldexp(q, ulp_exp);
  if (r >= 65536.0) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (r < std::ldexp(1.0, -14)) {
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::ldexp(r, 24)));
  }
  int e2 = 0;
  std::frexp(r, &e2);
  const int field = e2 - 1 + 15;
  const auto mant = static_cast<uint16_t>(std::ldexp(r, 10 - (e2 - 1)) - 1024.0);
  return static_cast<uint16_t>(sign | (field << 10) | mant);
}

// Round-to-nearest-even float -> bfloat16, in double arithmetic.
uint16_t ref_f32_to_bf16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7fc0u);
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return static_cast<uint16_t>(sign | 0x7f80u);
  int e = 0;
  std::frexp(a, &e);
  const int ulp_exp = std::max(e - 1, -126) - 7;
  const double r = std::ldexp(std::nearbyint(std::ldexp(a, -ulp_exp)), ulp_exp);
  if (r >= std::ldexp(1.0, 128)) return static_cast<uint16_t>(sign | 0x7f80u);
  // r has at most 8 significant bits, so it is exactly a float whose low 16 bits are zero.
  const uint32_t bits = f32_to_bits(static_cast<float>(r));
  EXPECT_EQ(bits & 0xffffu, 0u);
  return static_cast<uint16_t>(sign | (bits >> 16));
}

#ifdef GX_TEST_X86
bool have_f16c() { return geniex::test::x86_f16c_usable(); }
__attribute__((target("f16c"))) uint16_t hw_f32_to_fp16(float f) {
  const __m128i h = _mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT);
  return static_cast<uint16_t>(_mm_extract_epi16(h, 0));
}
__attribute__((target("f16c"))) float hw_fp16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
#else
bool have_f16c() { return false; }
uint16_t hw_f32_to_fp16(float) { return 0; }
float hw_fp16_to_f32(uint16_t) { return 0.0f; }
#endif

// Compares the encoder with the references; NaN payloads may differ, NaN-ness and sign not.
struct Fp16Checker {
  bool hw = have_f16c();
  int64_t failures = 0;
  void check(float f) {
    const uint16_t got = f32_to_fp16(f);
    const uint16_t want = ref_f32_to_fp16(f);
    if (!match(got, want)) report(f, got, want, "reference");
    if (hw) {
      const uint16_t h = hw_f32_to_fp16(f);
      if (!match(got, h)) report(f, got, h, "F16C");
    }
  }
  static bool match(uint16_t a, uint16_t b) {
    if (is_fp16_nan(a) || is_fp16_nan(b)) return is_fp16_nan(a) && is_fp16_nan(b) && (a & 0x8000u) == (b & 0x8000u);
    return a == b;
  }
  void report(float f, uint16_t got, uint16_t want, const char* what) {
    if (++failures <= 10) {
      ADD_FAILURE() << "f32_to_fp16(bits 0x" << std::hex << f32_to_bits(f) << ") = 0x" << got
                    << ", " << what << " says 0x" << want << std::dec;
    }
  }
};

TEST(Fp16, DecodeAllValuesMatchesLdexpAndHardware) {
  const bool hw = have_f16c();
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float got = fp16_to_f32(h);
    const double want = ref_fp16_value(h);
    if (is_fp16_nan(h)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << i;
      ASSERT_EQ(std::signbit(got), (h & 0x8000u) != 0) << std::hex << i;
      // The payload moves to the top of the float mantissa.
      ASSERT_EQ((f32_to_bits(got) >> 13) & 0x3ffu, h & 0x3ffu) << std::hex << i;
      continue;
    }
    ASSERT_EQ(static_cast<double>(got), want) << std::hex << i;
    ASSERT_EQ(std::signbit(got), (h & 0x8000u) != 0) << std::hex << i;  // -0 stays -0
    if (hw) {
      ASSERT_EQ(f32_to_bits(got), f32_to_bits(hw_fp16_to_f32(h))) << std::hex << i;
    }
  }
}

TEST(Fp16, AllHalvesRoundTripExactly) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const uint16_t back = f32_to_fp16(fp16_to_f32(h));
    if (is_fp16_nan(h)) {
      ASSERT_TRUE(is_fp16_nan(back)) << std::hex << i << " -> " << back;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << i;
    } else {
      ASSERT_EQ(back, h) << std::hex << i;
    }
  }
}

TEST(Fp16, ReferenceEncoderSanity) {
  // The reference itself on values whose answer is known by heart.
  EXPECT_EQ(ref_f32_to_fp16(1.0f), 0x3c00u);
  EXPECT_EQ(ref_f32_to_fp16(-2.0f), 0xc000u);
  EXPECT_EQ(ref_f32_to_fp16(65504.0f), 0x7bffu);
  EXPECT_EQ(ref_f32_to_fp16(65519.0f), 0x7bffu);
  EXPECT_EQ(ref_f32_to_fp16(65520.0f), 0x7c00u);
  EXPECT_EQ(ref_f32_to_fp16(std::ldexp(1.0f, -24)), 0x0001u);
  EXPECT_EQ(ref_f32_to_fp16(std::ldexp(1.0f, -25)), 0x0000u);  // tie to even (0)
  EXPECT_EQ(ref_f32_to_fp16(std::ldexp(3.0f, -25)), 0x0002u);  // 1.5 ulp -> 2
  EXPECT_EQ(ref_f32_to_fp16(-0.0f), 0x8000u);
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(f32_to_fp16(0.0f), 0x0000u);
  EXPECT_EQ(f32_to_fp16(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_fp16(1.0f), 0x3c00u);
  EXPECT_EQ(f32_to_fp16(-1.5f), 0xbe00u);
  EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bffu);
  EXPECT_EQ(f32_to_fp16(65519.996f), 0x7bffu);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00u);  // halfway to 65536 ties to even: inf
  EXPECT_EQ(f32_to_fp16(-1e9f), 0xfc00u);
  EXPECT_EQ(f32_to_fp16(HUGE_VALF), 0x7c00u);
  EXPECT_EQ(f32_to_fp16(-HUGE_VALF), 0xfc00u);
  EXPECT_TRUE(is_fp16_nan(f32_to_fp16(std::nanf(""))));
  EXPECT_TRUE(is_fp16_nan(f32_to_fp16(bits_to_f32(0x7f800001u))));  // payload only in low bits
  EXPECT_TRUE(is_fp16_nan(f32_to_fp16(bits_to_f32(0xff800001u))));
  EXPECT_EQ(f32_to_fp16(bits_to_f32(0xff800001u)) & 0x8000u, 0x8000u);
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -14)), 0x0400u);           // smallest normal
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -24)), 0x0001u);           // smallest subnormal
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -25)), 0x0000u);           // tie -> even (0)
  EXPECT_EQ(f32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001u);
  EXPECT_EQ(f32_to_fp16(std::ldexp(3.0f, -25)), 0x0002u);           // 1.5 -> 2
  EXPECT_EQ(f32_to_fp16(std::ldexp(5.0f, -25)), 0x0002u);           // 2.5 -> 2
  EXPECT_EQ(f32_to_fp16(std::ldexp(2047.0f, -25)), 0x0400u);        // 1023.5 -> 1024: normal
  EXPECT_EQ(f32_to_fp16(bits_to_f32(0x00000001u)), 0x0000u);        // float subnormal -> 0
  EXPECT_EQ(f32_to_fp16(bits_to_f32(0x80000001u)), 0x8000u);
  EXPECT_EQ(f32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00u);    // tie, even stays
  EXPECT_EQ(f32_to_fp16(1.0f + std::ldexp(3.0f, -11)), 0x3c02u);    // tie, odd rounds up
  EXPECT_EQ(f32_to_fp16(2047.5f), 0x6800u);                         // mantissa carry into exp
}

// Every (sign, exponent, top-10-mantissa) prefix of a float with the rounding-relevant low
// 13 bits set to the interesting patterns: exact, below/at/above the tie, just below next.
TEST(Fp16, EncodeStructuredSweepMatchesReferenceAndHardware) {
  Fp16Checker c;
  static constexpr uint32_t kLow[] = {0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu};
  for (uint32_t hi = 0; hi < (1u << 19); ++hi) {
    for (const uint32_t lo : kLow) c.check(bits_to_f32((hi << 13) | lo));
  }
  EXPECT_EQ(c.failures, 0);
  if (!c.hw) GTEST_SKIP() << "no F16C: compared with the software reference only";
}

TEST(Fp16, EncodeRandomFloatsMatchesReferenceAndHardware) {
  auto rng = core_test::make_rng(0xf16u);
  std::uniform_int_distribution<uint32_t> u32;
  std::uniform_int_distribution<uint32_t> mant(0, 0x7fffffu);
  std::uniform_int_distribution<uint32_t> near_half_exp(90, 145);  // fp16 subnormals .. overflow
  std::uniform_int_distribution<uint32_t> half_bits(0, 0x7bfeu);   // finite, with a successor
  std::uniform_int_distribution<uint32_t> tiny_exp(95, 113);       // 2^-32 .. 2^-14
  Fp16Checker c;
  constexpr int kN = 2'000'000;
  for (int i = 0; i < kN; ++i) {
    const uint32_t sign = (u32(rng) & 1u) << 31;
    float f = 0.0f;
    switch (i % 6) {
      case 0: f = bits_to_f32(u32(rng)); break;  // anything, NaNs and float subnormals included
      case 1: f = bits_to_f32(sign | (near_half_exp(rng) << 23) | mant(rng)); break;
      case 2: {  // exact halfway between two adjacent halves, possibly nudged by one float ulp
        const auto h = static_cast<uint16_t>(half_bits(rng));
        const double mid = (ref_fp16_value(h) + ref_fp16_value(static_cast<uint16_t>(h + 1))) / 2;
        uint32_t b = f32_to_bits(static_cast<float>(mid));
        if (static_cast<double>(bits_to_f32(b)) != mid) ADD_FAILURE() << "midpoint not exact";
        b += static_cast<uint32_t>(static_cast<int>(u32(rng) % 3) - 1);
        f = bits_to_f32(sign | b);
        break;
      }
      case 3: f = bits_to_f32(sign | (tiny_exp(rng) << 23) | mant(rng)); break;  // subnormal halves
      case 4: {  // around the overflow threshold 65504 .. 65536
        f = bits_to_f32(sign | (0x477fe000u + (u32(rng) % 0x4000u)));
        break;
      }
      case 5: f = bits_to_f32(sign | 0x7f800000u | (u32(rng) & 0x7fffffu)); break;  // inf / NaN
    }
    c.check(f);
  }
  EXPECT_EQ(c.failures, 0);
}

TEST(Bf16, KnownValuesAndTies) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80u);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000u);
  // Exactly halfway: ties to even.
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000u)), 0x3f80u);  // even stays
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000u)), 0x3f82u);  // odd rounds up
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0xbf818000u)), 0xbf82u);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f807fffu)), 0x3f80u);  // just below the tie
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808001u)), 0x3f81u);  // just above the tie
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f80ffffu)), 0x3f81u);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3fffffffu)), 0x4000u);  // carry into the exponent
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x7f7fffffu)), 0x7f80u);  // FLT_MAX rounds to inf
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x7f7f7fffu)), 0x7f7fu);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x7f7f8000u)), 0x7f80u);  // tie, odd -> inf
  EXPECT_EQ(f32_to_bf16(HUGE_VALF), 0x7f80u);
  EXPECT_EQ(f32_to_bf16(-HUGE_VALF), 0xff80u);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x00008000u)), 0x0000u);  // subnormal tie, even
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x00018000u)), 0x0002u);  // subnormal tie, odd
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x007fffffu)), 0x0080u);  // subnormal up to min normal
  // NaNs stay NaN even when the payload is only in the dropped bits; sign kept.
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(bits_to_f32(0x7f800001u))));
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(bits_to_f32(0xff800001u))));
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0xff800001u)) & 0x8000u, 0x8000u);
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(bits_to_f32(0x7fffffffu))));
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(std::nanf(""))));
}

TEST(Bf16, AllValuesRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = bf16_to_f32(h);
    ASSERT_EQ(f32_to_bits(f), i << 16) << std::hex << i;
    const uint16_t back = f32_to_bf16(f);
    if (is_bf16_nan(h)) {
      ASSERT_TRUE(is_bf16_nan(back)) << std::hex << i;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << i;
    } else {
      ASSERT_EQ(back, h) << std::hex << i;
    }
  }
}

TEST(Bf16, RandomFloatsMatchReference) {
  auto rng = core_test::make_rng(0xbf16u);
  std::uniform_int_distribution<uint32_t> u32;
  int64_t failures = 0;
  for (int i = 0; i < 1'000'000; ++i) {
    uint32_t b = u32(rng);
    if (i % 4 == 1) b = (b & 0xffff0000u) | 0x8000u;                 // exact tie
    if (i % 4 == 2) b = (b & 0xffff0000u) | 0x7fffu | ((b & 1u) << 15);  // tie +- 1
    const float f = bits_to_f32(b);
    const uint16_t got = f32_to_bf16(f);
    const uint16_t want = ref_f32_to_bf16(f);
    const bool ok = is_bf16_nan(want) ? (is_bf16_nan(got) && (got & 0x8000u) == (want & 0x8000u))
                                      : got == want;
    if (!ok && ++failures <= 10) {
      ADD_FAILURE() << "f32_to_bf16(0x" << std::hex << b << ") = 0x" << got << ", want 0x" << want;
    }
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace geniex
