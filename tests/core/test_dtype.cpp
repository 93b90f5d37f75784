// DType table against an independent copy of ggml's type geometry; id and name lookups;
// overflow- and divisibility-checked sizes.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core_test_seed.hpp"

namespace geniex {
namespace {

struct Expected {
  uint32_t id;
  const char* name;
  int64_t block_size;
  int64_t block_bytes;
  bool quantized;
};

// ggml's ggml_type ids and block geometry (ggml-common.h): written out by hand, not derived.
const std::vector<Expected>& expected_types() {
  static const std::vector<Expected> v = {
      {0, "f32", 1, 4, false},      {1, "f16", 1, 2, false},       {2, "q4_0", 32, 18, true},
      {3, "q4_1", 32, 20, true},    {6, "q5_0", 32, 22, true},     {7, "q5_1", 32, 24, true},
      {8, "q8_0", 32, 34, true},    {9, "q8_1", 32, 36, true},
      {12, "q4_k", 256, 144, true}, {13, "q5_k", 256, 176, true},  {14, "q6_k", 256, 210, true},
      {15, "q8_k", 256, 292, true}, {24, "i8", 1, 1, false},       {25, "i16", 1, 2, false},
      {26, "i32", 1, 4, false},     {30, "bf16", 1, 2, false},
  };
  return v;
}

const Expected* find_expected(uint32_t id) {
  for (const auto& e : expected_types()) {
    if (e.id == id) return &e;
  }
  return nullptr;
}

TEST(DType, TableMatchesGgmlGeometry) {
  for (const auto& e : expected_types()) {
    SCOPED_TRACE(e.name);
    const auto t = dtype_from_id(e.id);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(static_cast<uint32_t>(*t), e.id);
    const DTypeInfo& info = dtype_info(*t);
    EXPECT_EQ(info.type, *t);
    EXPECT_EQ(info.name, e.name);
    EXPECT_EQ(dtype_name(*t), e.name);
    EXPECT_EQ(info.block_size, e.block_size);
    EXPECT_EQ(info.block_bytes, e.block_bytes);
    EXPECT_EQ(info.quantized, e.quantized);
    EXPECT_EQ(info.quantized, info.block_size > 1);
  }
}

TEST(DType, BlockConstants) {
  EXPECT_EQ(kQK4_0, 32);
  EXPECT_EQ(kQK4_1, 32);
  EXPECT_EQ(kQK5_0, 32);
  EXPECT_EQ(kQK5_1, 32);
  EXPECT_EQ(kQK8_0, 32);
  EXPECT_EQ(kQK8_1, 32);
  EXPECT_EQ(kQK_K, 256);
  EXPECT_EQ(kKScaleSize, 12);
  EXPECT_EQ(dtype_info(DType::Q4_0).block_size, kQK4_0);
  EXPECT_EQ(dtype_info(DType::Q4_K).block_size, kQK_K);
}

TEST(DType, FromIdKnowsExactlyTheTable) {
  int known = 0;
  for (uint32_t id = 0; id < 4096; ++id) {
    const auto t = dtype_from_id(id);
    const Expected* e = find_expected(id);
    ASSERT_EQ(t.has_value(), e != nullptr) << "id " << id;
    if (t) {
      ++known;
      EXPECT_EQ(static_cast<uint32_t>(*t), id);
    }
  }
  EXPECT_EQ(known, static_cast<int>(expected_types().size()));
  // Ids GGUF defines but GenieX does not support, and garbage.
  for (const uint32_t id : {4u, 5u, 10u, 11u, 16u, 23u, 27u, 28u, 29u, 31u, 39u, 0x80000000u,
                            0xffffffffu, 0xfffffffeu}) {
    EXPECT_FALSE(dtype_from_id(id).has_value()) << "id " << id;
  }
}

std::string with_case(const std::string& s, uint32_t mask) {
  std::string out = s;
  for (size_t i = 0; i < out.size(); ++i) {
    if ((mask >> i) & 1u) out[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[i])));
  }
  return out;
}

TEST(DType, NamesRoundTripCaseInsensitively) {
  for (const auto& e : expected_types()) {
    const DType t = *dtype_from_id(e.id);
    const std::string name(dtype_name(t));
    // Every upper/lower mix of the name.
    for (uint32_t mask = 0; mask < (1u << name.size()); ++mask) {
      const std::string n = with_case(name, mask);
      const auto back = dtype_from_name(n);
      ASSERT_TRUE(back.has_value()) << n;
      EXPECT_EQ(*back, t) << n;
    }
  }
}

TEST(DType, UnknownNamesAreRejected) {
  for (const char* n : {"", "f", "f64", "q4", "q4_", "q4_0 ", " q4_0", "q4-0", "q4_00", "q4_k_m",
                        "fp16", "float", "bf", "q8", "q8_k\n", "i64", "q5_2", "q3_k", "q2_k"}) {
    EXPECT_FALSE(dtype_from_name(n).has_value()) << '"' << n << '"';
  }
  // A name with an embedded NUL is not its prefix.
  EXPECT_FALSE(dtype_from_name(std::string_view("f32\0", 4)).has_value());
  EXPECT_FALSE(dtype_from_name(std::string_view("f\0" "32", 4)).has_value());
}

TEST(DType, RowBytes) {
  EXPECT_EQ(row_bytes(DType::F32, 10), 40);
  EXPECT_EQ(row_bytes(DType::F16, 10), 20);
  EXPECT_EQ(row_bytes(DType::BF16, 3), 6);
  EXPECT_EQ(row_bytes(DType::Q4_0, 64), 36);
  EXPECT_EQ(row_bytes(DType::Q8_0, 4096), 4096 / 32 * 34);
  EXPECT_EQ(row_bytes(DType::Q4_K, 4096), 16 * 144);
  EXPECT_EQ(row_bytes(DType::Q6_K, 256), 210);
  EXPECT_EQ(row_bytes(DType::Q8_K, 0), 0);
}

// Independent checked computation with the compiler's overflow builtin.
std::optional<uint64_t> ref_bytes(const Expected& e, uint64_t n) {
  const auto bs = static_cast<uint64_t>(e.block_size);
  if (n % bs != 0) return std::nullopt;
  uint64_t out = 0;
  if (__builtin_mul_overflow(n / bs, static_cast<uint64_t>(e.block_bytes), &out)) return std::nullopt;
  return out;
}

TEST(DType, BytesForElementsDivisibilityAndOverflow) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  auto rng = core_test::make_rng(0xd7e);
  std::uniform_int_distribution<uint64_t> any;
  std::uniform_int_distribution<int> shift(0, 63);
  for (const auto& e : expected_types()) {
    SCOPED_TRACE(e.name);
    const DType t = *dtype_from_id(e.id);
    const auto bs = static_cast<uint64_t>(e.block_size);
    const auto bb = static_cast<uint64_t>(e.block_bytes);
    EXPECT_EQ(bytes_for_elements(t, 0), std::optional<uint64_t>(0));
    EXPECT_EQ(bytes_for_elements(t, bs), std::optional<uint64_t>(bb));
    EXPECT_EQ(bytes_for_elements(t, 7 * bs), std::optional<uint64_t>(7 * bb));
    if (bs > 1) {
      EXPECT_FALSE(bytes_for_elements(t, 1).has_value());
      EXPECT_FALSE(bytes_for_elements(t, bs - 1).has_value());
      EXPECT_FALSE(bytes_for_elements(t, bs + 1).has_value());
      EXPECT_FALSE(bytes_for_elements(t, 3 * bs + bs / 2).has_value());
    }
    // The largest block count that fits, and one more.
    const uint64_t max_blocks = kMax / bb;
    if (max_blocks <= kMax / bs) {
      EXPECT_EQ(bytes_for_elements(t, max_blocks * bs), std::optional<uint64_t>(max_blocks * bb));
      if (max_blocks < kMax / bs) {
        EXPECT_FALSE(bytes_for_elements(t, (max_blocks + 1) * bs).has_value());
      }
    }
    EXPECT_EQ(bytes_for_elements(t, kMax), ref_bytes(e, kMax));
    EXPECT_EQ(bytes_for_elements(t, kMax - kMax % bs), ref_bytes(e, kMax - kMax % bs));
    for (int i = 0; i < 20000; ++i) {
      uint64_t n = any(rng) >> shift(rng);
      if (i % 2 == 0) n -= n % bs;  // half of them divisible
      ASSERT_EQ(bytes_for_elements(t, n), ref_bytes(e, n)) << "n=" << n;
      if (n % bs == 0 && n <= (uint64_t{1} << 40)) {
        ASSERT_EQ(static_cast<uint64_t>(row_bytes(t, static_cast<int64_t>(n))), *ref_bytes(e, n));
      }
    }
  }
}

}  // namespace
}  // namespace geniex
