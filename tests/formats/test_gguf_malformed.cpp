// GGUF reader on crafted malformed files: every one must return a clear error, never crash.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <random>

#include "formats/gguf.hpp"
#include "formats/gguf_test_util.hpp"
#include "fuzz/gguf_seeds.hpp"

namespace geniex::gguf {
namespace {

using testing::Bytes;
using testing::expect_error;
using testing::parse_bytes;

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ4_0 = 2;
constexpr uint64_t kHuge = 1ull << 62;

// A valid file with one f32 {4} tensor; tests change one thing at a time.
std::vector<uint8_t> one_tensor(uint32_t type = kF32, std::initializer_list<uint64_t> ne = {4},
                                uint64_t offset = 0, size_t data_bytes = 16) {
  Bytes b;
  b.header(1, 1).kv_string("general.architecture", "llama").tensor("w", ne, type, offset);
  b.pad_to(32).zeros(data_bytes);
  return b.v;
}

TEST(GgufMalformed, ValidBaselineParses) {
  auto r = parse_bytes(one_tensor());
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_EQ(r->tensors()[0].nbytes, 16u);
}

TEST(GgufMalformed, EmptyAndTinyFiles) {
  expect_error(parse_bytes({}), ErrorCode::InvalidFormat, {"<memory>", "truncated", "magic"});
  expect_error(parse_bytes({'G', 'G', 'U'}), ErrorCode::InvalidFormat, {"truncated"});
}

TEST(GgufMalformed, BadMagic) {
  auto b = one_tensor();
  b[3] = 'X';
  expect_error(parse_bytes(b), ErrorCode::InvalidFormat, {"<memory>", "magic", "'GGUF'", "'GGUX'"});
}

TEST(GgufMalformed, Version1Rejected) {
  Bytes b;
  b.header(0, 0, 1);
  expect_error(parse_bytes(b.v), ErrorCode::InvalidFormat, {"version 1", "expected 2 or 3"});
  Bytes c;
  c.header(0, 0, 4);
  expect_error(parse_bytes(c.v), ErrorCode::InvalidFormat, {"version 4", "expected 2 or 3"});
  Bytes be;
  be.header(0, 0, 0x03000000u);
  expect_error(parse_bytes(be.v), ErrorCode::InvalidFormat, {"big-endian"});
}

TEST(GgufMalformed, Version2Accepted) {
  Bytes b;
  b.header(0, 1, 2).kv_u32("x", 1);
  auto r = parse_bytes(b.v);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_EQ(r->version(), 2u);
}

TEST(GgufMalformed, TruncatedAtEveryByte) {
  const auto full = seeds::small_tensors();
  ASSERT_TRUE(parse_bytes(full).has_value());
  for (size_t n = 0; n < full.size(); ++n) {
    const std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
    auto r = parse_bytes(prefix);
    ASSERT_FALSE(r.has_value()) << "prefix of " << n << " of " << full.size() << " bytes parsed";
    EXPECT_EQ(r.error().code, ErrorCode::InvalidFormat) << r.error().to_string();
  }
  const auto meta = seeds::metadata_only();
  for (size_t n = 0; n < meta.size(); ++n) {
    const std::vector<uint8_t> prefix(meta.begin(), meta.begin() + static_cast<ptrdiff_t>(n));
    ASSERT_FALSE(parse_bytes(prefix).has_value()) << "prefix of " << n << " bytes parsed";
  }
}

TEST(GgufMalformed, HugeStringLength) {
  Bytes key;
  key.header(0, 1).u64(kHuge).raw("abc").zeros(20);
  expect_error(parse_bytes(key.v), ErrorCode::InvalidFormat,
               {"key of metadata kv #0", std::to_string(kHuge), "remain"});
  Bytes val;
  val.header(0, 1).str("general.name").u32(8).u64(~0ull).raw("abc");
  expect_error(parse_bytes(val.v), ErrorCode::InvalidFormat,
               {"'general.name'", "string", std::to_string(~0ull)});
  Bytes name;
  name.header(1, 0).u64(kHuge).zeros(40);
  expect_error(parse_bytes(name.v), ErrorCode::InvalidFormat, {"name of tensor #0", "length"});
}

TEST(GgufMalformed, HugeCounts) {
  Bytes kv;
  kv.header(0, kHuge).kv_u32("a", 1);
  expect_error(parse_bytes(kv.v), ErrorCode::InvalidFormat, {"kv count", std::to_string(kHuge)});
  Bytes kvmax;
  kvmax.header(0, ~0ull).kv_u32("a", 1);
  expect_error(parse_bytes(kvmax.v), ErrorCode::InvalidFormat, {"kv count"});
  Bytes t;
  t.header(kHuge, 0).zeros(64);
  expect_error(parse_bytes(t.v), ErrorCode::InvalidFormat, {"tensor count", std::to_string(kHuge)});
  Bytes arr;
  arr.header(0, 1).str("a").u32(9).u32(6).u64(kHuge).zeros(16);  // array of f32
  expect_error(parse_bytes(arr.v), ErrorCode::InvalidFormat, {"'a'", "array of", "f32 items"});
  // Tensor infos counted after the metadata has consumed most of the file.
  Bytes late;
  late.header(2, 1).str("k").u32(8).str(std::string(60, 'x'));
  expect_error(parse_bytes(late.v), ErrorCode::InvalidFormat, {"tensor count 2"});
}

TEST(GgufMalformed, UnknownValueType) {
  Bytes b;
  b.header(0, 1).str("general.x").u32(13).u32(0);
  expect_error(parse_bytes(b.v), ErrorCode::InvalidFormat,
               {"'general.x'", "unknown value type 13"});
  Bytes a;
  a.header(0, 1).str("general.y").u32(9).u32(99).u64(1).u32(0);
  expect_error(parse_bytes(a.v), ErrorCode::InvalidFormat,
               {"'general.y'", "unknown array element type 99"});
}

TEST(GgufMalformed, BoolOutOfRange) {
  Bytes b;
  b.header(0, 1).str("flag").u32(7).u8(2);
  expect_error(parse_bytes(b.v), ErrorCode::InvalidFormat, {"'flag'", "0 or 1", "got 2"});
}

TEST(GgufMalformed, BadKeys) {
  Bytes empty;
  empty.header(0, 1).kv_u32("", 1);
  expect_error(parse_bytes(empty.v), ErrorCode::InvalidFormat, {"empty key"});
  Bytes utf8;
  utf8.header(0, 1).kv_u32("bad\xc3(", 1);
  expect_error(parse_bytes(utf8.v), ErrorCode::InvalidFormat, {"UTF-8"});
  Bytes overlong;
  overlong.header(0, 1).kv_u32("\xc0\xaf", 1);
  expect_error(parse_bytes(overlong.v), ErrorCode::InvalidFormat, {"UTF-8"});
  Bytes ok;
  ok.header(0, 1).kv_u32("größe.€", 1);
  EXPECT_TRUE(parse_bytes(ok.v).has_value());
}

TEST(GgufMalformed, DuplicateKeys) {
  Bytes b;
  b.header(0, 3).kv_u32("a", 1).kv_u32("b", 2).kv_string("a", "x");
  expect_error(parse_bytes(b.v), ErrorCode::InvalidFormat, {"duplicate", "'a'", "#0", "#2"});
}

TEST(GgufMalformed, UnknownTensorType) {
  expect_error(parse_bytes(one_tensor(99)), ErrorCode::Unsupported,
               {"<memory>", "tensor 'w'", "99"});
  // Ids that ggml once used but GenieX does not know (Q4_2 = 4) are unsupported too.
  expect_error(parse_bytes(one_tensor(4)), ErrorCode::Unsupported, {"tensor 'w'", "id 4"});
}

TEST(GgufMalformed, NDimsOutOfRange) {
  Bytes zero;
  zero.header(1, 0).str("w").u32(0).u32(kF32).u64(0).zeros(64);
  expect_error(parse_bytes(zero.v), ErrorCode::InvalidFormat, {"tensor 'w'", "n_dims", "got 0"});
  Bytes five;
  five.header(1, 0).tensor("w", {1, 1, 1, 1, 1}, kF32, 0).pad_to(32).zeros(4);
  expect_error(parse_bytes(five.v), ErrorCode::InvalidFormat, {"tensor 'w'", "n_dims", "got 5"});
}

TEST(GgufMalformed, NonPositiveDims) {
  expect_error(parse_bytes(one_tensor(kF32, {4, 0})), ErrorCode::InvalidFormat,
               {"tensor 'w'", "ne[1]", "positive", "got 0"});
  expect_error(parse_bytes(one_tensor(kF32, {~0ull})), ErrorCode::InvalidFormat,
               {"tensor 'w'", "ne[0]", "got -1"});
}

TEST(GgufMalformed, ElementCountOverflow) {
  expect_error(parse_bytes(one_tensor(kF32, {1ull << 32, 1ull << 32})), ErrorCode::InvalidFormat,
               {"tensor 'w'", "overflows int64"});
  // Fits int64 elements, but the byte size (x4) overflows uint64.
  expect_error(parse_bytes(one_tensor(kF32, {1ull << 31, 1ull << 31, 1ull << 0})),
               ErrorCode::InvalidFormat, {"tensor 'w'", "overflows"});
  expect_error(parse_bytes(one_tensor(kF32, {1ull << 62})), ErrorCode::InvalidFormat,
               {"tensor 'w'", "overflows"});
  // Representable, but far larger than the file.
  expect_error(parse_bytes(one_tensor(kF32, {1ull << 30, 1ull << 30})), ErrorCode::InvalidFormat,
               {"tensor 'w'", "past the end"});
}

TEST(GgufMalformed, SizeNotMultipleOfBlock) {
  expect_error(parse_bytes(one_tensor(kQ4_0, {33})), ErrorCode::InvalidFormat,
               {"tensor 'w'", "q4_0", "ne[0] = 33", "block size 32"});
  expect_error(parse_bytes(one_tensor(kQ4_0, {16, 2})), ErrorCode::InvalidFormat,
               {"tensor 'w'", "ne[0] = 16"});
}

TEST(GgufMalformed, OffsetPastEnd) {
  expect_error(parse_bytes(one_tensor(kF32, {4}, 0, 15)), ErrorCode::InvalidFormat,
               {"tensor 'w'", "past the end", "[0, 16)", "has 15 bytes"});
  expect_error(parse_bytes(one_tensor(kF32, {4}, 1024)), ErrorCode::InvalidFormat,
               {"tensor 'w'", "past the end"});
  expect_error(parse_bytes(one_tensor(kF32, {16}, ~0ull - 31, 64)), ErrorCode::InvalidFormat,
               {"tensor 'w'", "overflows"});
  // Tensor infos end inside the padding before the data section.
  Bytes b;
  b.header(1, 0).tensor("w", {4}, kF32, 0);
  expect_error(parse_bytes(b.v), ErrorCode::InvalidFormat, {"data section starts at offset 64"});
}

TEST(GgufMalformed, OffsetMisaligned) {
  Bytes b;
  b.header(1, 0).tensor("w", {4}, kF32, 16).pad_to(32).zeros(32);
  expect_error(parse_bytes(b.v), ErrorCode::InvalidFormat,
               {"tensor 'w'", "offset 16", "alignment 32"});
}

TEST(GgufMalformed, OverlappingTensors) {
  Bytes b;
  b.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {16}, kF32, 32).pad_to(32).zeros(96);
  expect_error(parse_bytes(b.v), ErrorCode::InvalidFormat,
               {"'a' [0, 64)", "'b' [32, 96)", "overlap"});
  // Listed in the other order, and the same offset twice.
  Bytes c;
  c.header(2, 0).tensor("b", {8}, kF32, 32).tensor("a", {8}, kF32, 32).pad_to(32).zeros(64);
  expect_error(parse_bytes(c.v), ErrorCode::InvalidFormat, {"overlap"});
  // Adjacent regions are fine.
  Bytes d;
  d.header(2, 0).tensor("a", {8}, kF32, 32).tensor("b", {8}, kF32, 0).pad_to(32).zeros(64);
  EXPECT_TRUE(parse_bytes(d.v).has_value());
}

TEST(GgufMalformed, DuplicateTensorNames) {
  Bytes b;
  b.header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad_to(32).zeros(64);
  expect_error(parse_bytes(b.v), ErrorCode::InvalidFormat,
               {"duplicate", "tensor 'w'", "#0", "#1"});
  Bytes e;
  e.header(1, 0).tensor("", {8}, kF32, 0).pad_to(32).zeros(32);
  expect_error(parse_bytes(e.v), ErrorCode::InvalidFormat, {"empty name"});
}

TEST(GgufMalformed, BadAlignment) {
  for (const uint32_t a : {0u, 3u, 48u}) {
    Bytes b;
    b.header(0, 1).kv_u32("general.alignment", a);
    expect_error(parse_bytes(b.v), ErrorCode::InvalidFormat,
                 {"'general.alignment'", "power of two", "got " + std::to_string(a)});
  }
  Bytes t;
  t.header(0, 1).str("general.alignment").u32(5).u32(64);
  expect_error(parse_bytes(t.v), ErrorCode::InvalidFormat,
               {"'general.alignment'", "must be u32", "got i32"});
  // A valid non-default alignment governs offsets and the data start.
  Bytes ok;
  ok.header(1, 1).kv_u32("general.alignment", 8).tensor("w", {2}, kF32, 8).pad_to(8).zeros(16);
  auto r = parse_bytes(ok.v);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_EQ(r->alignment(), 8u);
}

TEST(GgufMalformed, ArrayDepthBomb) {
  auto nested = [](int levels) {
    Bytes b;
    b.header(0, 1).str("deep").u32(9);
    for (int i = 0; i < levels - 1; ++i) b.u32(9).u64(1);
    b.u32(0).u64(1).u8(42);  // innermost: one u8
    return b.v;
  };
  auto ok = parse_bytes(nested(File::kMaxArrayDepth));
  ASSERT_TRUE(ok.has_value()) << ok.error().to_string();
  expect_error(parse_bytes(nested(File::kMaxArrayDepth + 1)), ErrorCode::InvalidFormat,
               {"'deep'[0][0]", "nested deeper than 8"});
  expect_error(parse_bytes(nested(10000)), ErrorCode::InvalidFormat, {"nested deeper"});
  // Wide: many empty inner arrays claimed, with too few bytes for them.
  Bytes wide;
  wide.header(0, 1).str("wide").u32(9).u32(9).u64(1000).zeros(12 * 10);
  expect_error(parse_bytes(wide.v), ErrorCode::InvalidFormat, {"'wide'", "array of 1000"});
}

TEST(GgufMalformed, ZeroTensorsNeedNoDataSection) {
  Bytes b;
  b.header(0, 1).kv_u32("general.alignment", 64);
  auto r = parse_bytes(b.v);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_TRUE(r->tensors().empty());
}

TEST(GgufMalformed, FileNameInMessages) {
  auto b = one_tensor(99);
  const std::string path = "/tmp/geniex_bad_" + std::to_string(std::random_device{}()) + ".gguf";
  {
    std::FILE* fp = std::fopen(path.c_str(), "wb");
    ASSERT_NE(fp, nullptr);
    ASSERT_EQ(std::fwrite(b.data(), 1, b.size(), fp), b.size());
    std::fclose(fp);
  }
  auto r = File::open(path);
  std::remove(path.c_str());
  expect_error(r, ErrorCode::Unsupported, {path, "tensor 'w'"});
}

// Seeded random mutations of small valid files: parsing must never crash or read out of
// bounds (run under ASan/UBSan), and whatever parses must be internally consistent.
TEST(GgufMalformed, RandomMutations) {
  uint64_t seed = 20240607;
  if (const char* s = std::getenv("GENIEX_MUTATION_SEED"); s && *s) {
    seed = std::strtoull(s, nullptr, 0);
  }
  std::cout << "[ mutation ] seed " << seed << " (set GENIEX_MUTATION_SEED to reproduce)\n";
  RecordProperty("mutation_seed", std::to_string(seed));
  std::mt19937_64 rng(seed);
  const auto bases = seeds::all();
  constexpr int kIterations = 4000;
  int parsed = 0;
  for (int it = 0; it < kIterations; ++it) {
    std::vector<uint8_t> b = bases[static_cast<size_t>(it) % bases.size()].bytes;
    const int n_mut = 1 + static_cast<int>(rng() % 6);
    for (int m = 0; m < n_mut && !b.empty(); ++m) {
      const size_t pos = rng() % b.size();
      switch (rng() % 6) {
        case 0: b[pos] = static_cast<uint8_t>(rng()); break;
        case 1: b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 2: {
          static constexpr uint8_t kInteresting[] = {0, 1, 0x7f, 0x80, 0xff, 9, 12, 13};
          b[pos] = kInteresting[rng() % sizeof(kInteresting)];
          break;
        }
        case 3: {  // overwrite a little-endian u64 with a boundary value
          static constexpr uint64_t kVals[] = {0, 1, ~0ull, 1ull << 63, 1ull << 32, 0x7fffffff};
          const uint64_t v = kVals[rng() % 6];
          for (size_t k = 0; k < 8 && pos + k < b.size(); ++k) {
            b[pos + k] = static_cast<uint8_t>(v >> (8 * k));
          }
          break;
        }
        case 4: b.resize(pos); break;
        default: b.insert(b.begin() + static_cast<ptrdiff_t>(pos), static_cast<uint8_t>(rng())); break;
      }
    }
    auto r = parse_bytes(b);
    if (!r.has_value()) {
      ASSERT_FALSE(r.error().message.empty());
      continue;
    }
    ++parsed;
    size_t chars = 0;
    for (const auto& [key, value] : r->metadata()) chars += key.size() + value.to_display().size();
    (void)chars;
    uint64_t sum = 0;
    for (const TensorInfo& t : r->tensors()) {
      ASSERT_LE(r->data_offset() + t.offset + t.nbytes, b.size()) << t.name;
      if (t.nbytes > 0) sum += t.data[0] + t.data[t.nbytes - 1];
    }
    (void)sum;
  }
  std::cout << "[ mutation ] " << kIterations << " mutants, " << parsed << " still parsed\n";
}

}  // namespace
}  // namespace geniex::gguf
