// GGUF reader/writer: round trips, typed getters, the real model file, seed corpus.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include <unistd.h>

#include "formats/gguf.hpp"
#include "formats/gguf_test_util.hpp"
#include "fuzz/gguf_seeds.hpp"

namespace geniex::gguf {
namespace {

using testing::parse_bytes;

Value nested_value() {
  // array<array<array<string>>> plus an empty inner array, three levels deep.
  return Value::of_array(
      ValueType::Array,
      {Value::of_array(ValueType::Array,
                       {Value::of_array(ValueType::String,
                                        {Value::of_string("a"), Value::of_string("")}),
                        Value::of_array(ValueType::U8, {})}),
       Value::of_array(ValueType::Array, {})});
}

std::vector<std::pair<std::string, Value>> every_value_type() {
  return {
      {"t.u8", Value::of_u8(255)},
      {"t.i8", Value::of_i8(-128)},
      {"t.u16", Value::of_u16(65535)},
      {"t.i16", Value::of_i16(-32768)},
      {"t.u32", Value::of_u32(4294967295u)},
      {"t.i32", Value::of_i32(std::numeric_limits<int32_t>::min())},
      {"t.f32", Value::of_f32(3.25f)},
      {"t.bool.true", Value::of_bool(true)},
      {"t.bool.false", Value::of_bool(false)},
      {"t.string", Value::of_string("héllo \"wörld\"\n")},
      {"t.string.empty", Value::of_string("")},
      {"t.u64", Value::of_u64(std::numeric_limits<uint64_t>::max())},
      {"t.i64", Value::of_i64(std::numeric_limits<int64_t>::min())},
      {"t.f64", Value::of_f64(-1.0e300)},
      {"t.arr.u8", Value::of_array(ValueType::U8, {Value::of_u8(1), Value::of_u8(2)})},
      {"t.arr.i8", Value::of_array(ValueType::I8, {Value::of_i8(-1)})},
      {"t.arr.u16", Value::of_array(ValueType::U16, {Value::of_u16(7)})},
      {"t.arr.i16", Value::of_array(ValueType::I16, {Value::of_i16(-7)})},
      {"t.arr.u32", Value::of_array(ValueType::U32, {Value::of_u32(9), Value::of_u32(10)})},
      {"t.arr.i32", Value::of_array(ValueType::I32, {Value::of_i32(-9)})},
      {"t.arr.f32", Value::of_array(ValueType::F32, {Value::of_f32(0.1f), Value::of_f32(-2.f)})},
      {"t.arr.bool", Value::of_array(ValueType::Bool, {Value::of_bool(true), Value::of_bool(false)})},
      {"t.arr.string", Value::of_array(ValueType::String, {Value::of_string("x"), Value::of_string("yz")})},
      {"t.arr.u64", Value::of_array(ValueType::U64, {Value::of_u64(1ull << 63)})},
      {"t.arr.i64", Value::of_array(ValueType::I64, {Value::of_i64(-(1ll << 62))})},
      {"t.arr.f64", Value::of_array(ValueType::F64, {Value::of_f64(2.5), Value::of_f64(1e-300)})},
      {"t.arr.empty", Value::of_array(ValueType::F32, {})},
      {"t.arr.nested", nested_value()},
  };
}

TEST(GgufRoundTrip, EveryMetadataValueType) {
  Writer w;
  const auto values = every_value_type();
  for (const auto& [k, v] : values) w.set_value(k, v);
  const auto bytes = w.to_bytes();
  auto r = parse_bytes(bytes);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  const File& f = *r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_TRUE(f.tensors().empty());
  ASSERT_EQ(f.metadata().size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(f.metadata()[i].first, values[i].first) << "order must be insertion order";
    EXPECT_TRUE(f.metadata()[i].second == values[i].second) << values[i].first << ": "
        << f.metadata()[i].second.to_display() << " vs " << values[i].second.to_display();
    const Value* found = f.find(values[i].first);
    ASSERT_NE(found, nullptr);
    EXPECT_TRUE(*found == values[i].second);
  }
  EXPECT_EQ(f.find("missing"), nullptr);
}

TEST(GgufRoundTrip, EveryTensorType) {
  Writer w;
  std::vector<std::pair<DType, std::vector<uint8_t>>> expected;
  std::mt19937 rng(1234);
  for (uint32_t id = 0; id < 64; ++id) {
    const auto t = dtype_from_id(id);
    if (!t) continue;
    const DTypeInfo& info = dtype_info(*t);
    const std::vector<int64_t> ne = {info.block_size * 2, 3};
    const auto nbytes = bytes_for_elements(*t, static_cast<uint64_t>(ne[0] * ne[1]));
    ASSERT_TRUE(nbytes.has_value());
    std::vector<uint8_t> data(*nbytes);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    const Status s = w.add_tensor("t." + std::string(info.name), *t, ne, data.data(), data.size());
    ASSERT_TRUE(s.has_value()) << s.error().to_string();
    expected.emplace_back(*t, std::move(data));
  }
  ASSERT_GE(expected.size(), 14u);
  const auto bytes = w.to_bytes();
  auto r = parse_bytes(bytes);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  const File& f = *r;
  ASSERT_EQ(f.tensors().size(), expected.size());
  EXPECT_EQ(f.data_offset() % 32, 0u);
  for (size_t i = 0; i < expected.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    const DTypeInfo& info = dtype_info(expected[i].first);
    EXPECT_EQ(t.name, "t." + std::string(info.name));
    EXPECT_EQ(t.type, expected[i].first);
    EXPECT_EQ(t.n_dims, 2);
    EXPECT_EQ(t.ne[0], info.block_size * 2);
    EXPECT_EQ(t.ne[1], 3);
    EXPECT_EQ(t.ne[2], 1);
    EXPECT_EQ(t.ne[3], 1);
    EXPECT_EQ(t.n_elements(), info.block_size * 6);
    EXPECT_EQ(t.offset % 32, 0u) << t.name;
    ASSERT_EQ(t.nbytes, expected[i].second.size());
    EXPECT_EQ(t.data, f.mapping()->data() + f.data_offset() + t.offset);
    EXPECT_EQ(std::memcmp(t.data, expected[i].second.data(), t.nbytes), 0) << t.name;
    EXPECT_EQ(f.find_tensor(t.name), &t);
  }
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  // The writer leaves no padding after the last tensor.
  const TensorInfo& last = f.tensors().back();
  EXPECT_EQ(f.data_offset() + last.offset + last.nbytes, bytes.size());
}

TEST(GgufRoundTrip, ShapesOfEveryRank) {
  Writer w;
  const std::vector<std::vector<int64_t>> shapes = {{5}, {4, 3}, {2, 3, 4}, {1, 2, 1, 3}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    int64_t n = 1;
    for (const int64_t d : shapes[i]) n *= d;
    std::vector<float> data(static_cast<size_t>(n), static_cast<float>(i));
    ASSERT_TRUE(w.add_tensor("r" + std::to_string(i), DType::F32, shapes[i], data.data(),
                             data.size() * 4).has_value());
  }
  auto r = parse_bytes(w.to_bytes());
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  for (size_t i = 0; i < shapes.size(); ++i) {
    const TensorInfo& t = r->tensors()[i];
    EXPECT_EQ(t.n_dims, static_cast<int>(shapes[i].size()));
    for (size_t k = 0; k < 4; ++k) {
      EXPECT_EQ(t.ne[k], k < shapes[i].size() ? shapes[i][k] : 1);
    }
  }
}

TEST(GgufWriter, NonDefaultAlignmentIsWrittenAndUsed) {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_alignment(128);
  const std::vector<uint8_t> a(4 * 3, 1), b(4 * 5, 2);
  ASSERT_TRUE(w.add_tensor("a", DType::F32, {3}, a.data(), a.size()).has_value());
  ASSERT_TRUE(w.add_tensor("b", DType::F32, {5}, b.data(), b.size()).has_value());
  auto r = parse_bytes(w.to_bytes());
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_EQ(r->alignment(), 128u);
  EXPECT_EQ(r->get_u64("general.alignment").value(), 128u);
  EXPECT_EQ(r->data_offset() % 128, 0u);
  EXPECT_EQ(r->tensors()[1].offset, 128u);

  Writer d;
  d.set_alignment(32);
  d.set_alignment(0);  // invalid: ignored
  d.set_alignment(3);  // invalid: ignored
  auto rd = parse_bytes(d.to_bytes());
  ASSERT_TRUE(rd.has_value()) << rd.error().to_string();
  EXPECT_EQ(rd->find("general.alignment"), nullptr) << "default alignment is not written";
}

TEST(GgufWriter, SetReplacesInPlace) {
  Writer w;
  w.set_u32("a", 1);
  w.set_string("b", "x");
  w.set_u32("c", 3);
  w.set_string("a", "replaced");
  auto r = parse_bytes(w.to_bytes());
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  ASSERT_EQ(r->metadata().size(), 3u);
  EXPECT_EQ(r->metadata()[0].first, "a");
  EXPECT_EQ(r->get_string("a").value(), "replaced");
  EXPECT_EQ(r->metadata()[1].first, "b");
  EXPECT_EQ(r->metadata()[2].first, "c");
}

TEST(GgufWriter, RejectsBadTensors) {
  Writer w;
  const std::vector<uint8_t> buf(1024, 0);
  EXPECT_EQ(w.add_tensor("", DType::F32, {1}, buf.data(), 4).error().code,
            ErrorCode::InvalidArgument);
  EXPECT_TRUE(w.add_tensor("x", DType::F32, {2}, buf.data(), 8).has_value());
  EXPECT_EQ(w.add_tensor("x", DType::F32, {2}, buf.data(), 8).error().code,
            ErrorCode::InvalidArgument);
  EXPECT_FALSE(w.add_tensor("y", DType::F32, {}, buf.data(), 0).has_value());
  EXPECT_FALSE(w.add_tensor("y", DType::F32, {1, 1, 1, 1, 1}, buf.data(), 4).has_value());
  EXPECT_FALSE(w.add_tensor("y", DType::F32, {0}, buf.data(), 0).has_value());
  EXPECT_FALSE(w.add_tensor("y", DType::F32, {-4}, buf.data(), 0).has_value());
  EXPECT_FALSE(w.add_tensor("y", DType::F32, {3}, buf.data(), 8).has_value());
  const Status q = w.add_tensor("y", DType::Q4_0, {16}, buf.data(), 9);
  ASSERT_FALSE(q.has_value());
  EXPECT_NE(q.error().message.find("block size 32"), std::string::npos) << q.error().message;
  EXPECT_FALSE(w.add_tensor("y", DType::F32, {1ll << 62, 1ll << 62}, buf.data(), 0).has_value());
  EXPECT_FALSE(w.add_tensor("y", DType::F32, {4}, nullptr, 16).has_value());
  auto r = parse_bytes(w.to_bytes());
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_EQ(r->tensors().size(), 1u);
}

TEST(GgufWriter, WriteFileAndOpen) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / ("geniex_gguf_test_" + std::to_string(::getpid()) + ".gguf")).string();
  Writer w;
  w.set_string("general.name", "tiny");
  const std::vector<float> x = {1, 2, 3, 4};
  ASSERT_TRUE(w.add_tensor("x", DType::F32, {4}, x.data(), 16).has_value());
  ASSERT_TRUE(w.write_file(path).has_value());
  auto r = File::open(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_EQ(r->mapping()->path(), path);
  EXPECT_EQ(r->get_string("general.name").value(), "tiny");
  float got[4];
  std::memcpy(got, r->find_tensor("x")->data, 16);
  EXPECT_EQ(got[3], 4.0f);

  auto missing = File::open(path);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::NotFound);
  EXPECT_NE(missing.error().message.find(path), std::string::npos);

  const Status bad = w.write_file((dir / "no_such_dir_geniex" / "x.gguf").string());
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::IoError);
}

TEST(GgufGetters, TypedLookups) {
  Writer w;
  for (const auto& [k, v] : every_value_type()) w.set_value(k, v);
  w.set_value("neg.i32", Value::of_i32(-3));
  w.set_value("pos.i8", Value::of_i8(7));
  auto r = parse_bytes(w.to_bytes());
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  const File& f = *r;

  EXPECT_EQ(f.get_u64("t.u8").value(), 255u);
  EXPECT_EQ(f.get_u64("t.u16").value(), 65535u);
  EXPECT_EQ(f.get_u64("t.u32").value(), 4294967295u);
  EXPECT_EQ(f.get_u64("t.u64").value(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f.get_u64("pos.i8").value(), 7u);
  EXPECT_DOUBLE_EQ(f.get_f64("t.f32").value(), 3.25);
  EXPECT_DOUBLE_EQ(f.get_f64("t.f64").value(), -1.0e300);
  EXPECT_DOUBLE_EQ(f.get_f64("t.i16").value(), -32768.0);
  EXPECT_DOUBLE_EQ(f.get_f64("t.u32").value(), 4294967295.0);
  EXPECT_EQ(f.get_string("t.string.empty").value(), "");
  EXPECT_TRUE(f.get_bool("t.bool.true").value());
  EXPECT_FALSE(f.get_bool("t.bool.false").value());
  EXPECT_EQ(f.get_string_array("t.arr.string").value(), (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(f.get_i64_array("t.arr.i32").value(), (std::vector<int64_t>{-9}));
  EXPECT_EQ(f.get_i64_array("t.arr.u8").value(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(f.get_i64_array("t.arr.i64").value(), (std::vector<int64_t>{-(1ll << 62)}));
  EXPECT_EQ(f.get_f64_array("t.arr.f32").value(),
            (std::vector<double>{static_cast<double>(0.1f), -2.0}));
  EXPECT_EQ(f.get_f64_array("t.arr.u32").value(), (std::vector<double>{9.0, 10.0}));
  EXPECT_TRUE(f.get_f64_array("t.arr.empty").value().empty());

  auto expect = [](const auto& res, ErrorCode code, std::initializer_list<std::string_view> parts) {
    ASSERT_FALSE(res.has_value());
    EXPECT_EQ(res.error().code, code) << res.error().to_string();
    for (const auto p : parts) {
      EXPECT_NE(res.error().message.find(p), std::string::npos)
          << res.error().message << " lacks " << p;
    }
  };
  expect(f.get_u64("nope"), ErrorCode::NotFound, {"'nope'", "not found", "<memory>"});
  expect(f.get_string("nope"), ErrorCode::NotFound, {"'nope'"});
  expect(f.get_u64("t.f32"), ErrorCode::InvalidFormat, {"'t.f32'", "f32"});
  expect(f.get_u64("neg.i32"), ErrorCode::InvalidFormat, {"'neg.i32'", "-3", "non-negative"});
  expect(f.get_u64("t.string"), ErrorCode::InvalidFormat, {"'t.string'", "string"});
  expect(f.get_f64("t.bool.true"), ErrorCode::InvalidFormat, {"'t.bool.true'", "bool"});
  expect(f.get_string("t.u32"), ErrorCode::InvalidFormat, {"'t.u32'", "u32", "expected string"});
  expect(f.get_bool("t.u8"), ErrorCode::InvalidFormat, {"'t.u8'", "u8"});
  expect(f.get_string_array("t.arr.i32"), ErrorCode::InvalidFormat,
         {"'t.arr.i32'", "array of i32", "array of string"});
  expect(f.get_string_array("t.string"), ErrorCode::InvalidFormat, {"'t.string'", "string"});
  expect(f.get_f64_array("t.arr.string"), ErrorCode::InvalidFormat, {"array of string"});
  expect(f.get_f64_array("t.arr.nested"), ErrorCode::InvalidFormat, {"array of array"});
  expect(f.get_i64_array("t.arr.f32"), ErrorCode::InvalidFormat, {"array of f32"});
  expect(f.get_i64_array("t.arr.u64"), ErrorCode::InvalidFormat, {"'t.arr.u64'", "int64"});
  expect(f.get_i64_array("t.u32"), ErrorCode::InvalidFormat, {"u32"});
}

TEST(GgufValue, AccessorsAndDisplay) {
  EXPECT_EQ(Value::of_i32(-1).as_u64(), std::nullopt);
  EXPECT_EQ(Value::of_u64(1ull << 63).as_i64(), std::nullopt);
  EXPECT_EQ(Value::of_u8(3).as_i64(), 3);
  EXPECT_EQ(Value::of_f32(1.0f).as_u64(), std::nullopt);
  EXPECT_EQ(Value::of_string("x").as_f64(), std::nullopt);
  EXPECT_EQ(Value::of_u8(1).as_bool(), std::nullopt);
  EXPECT_EQ(Value::of_u8(1).as_string(), nullptr);
  EXPECT_EQ(Value::of_u8(1).as_array(), nullptr);

  EXPECT_EQ(Value::of_u32(7).to_display(), "7");
  EXPECT_EQ(Value::of_i8(-7).to_display(), "-7");
  EXPECT_EQ(Value::of_f32(0.1f).to_display(), "0.1");
  EXPECT_EQ(Value::of_f64(2.5).to_display(), "2.5");
  EXPECT_EQ(Value::of_f64(std::nan("")).to_display(), "nan");
  EXPECT_EQ(Value::of_bool(true).to_display(), "true");
  EXPECT_EQ(Value::of_string("a\"b\n\x01").to_display(), "\"a\\\"b\\n\\x01\"");
  std::vector<Value> items;
  for (int i = 0; i < 10; ++i) items.push_back(Value::of_i32(i));
  const Value arr = Value::of_array(ValueType::I32, items);
  EXPECT_EQ(arr.to_display(3), "[0, 1, 2, ... (10 i32 items)]");
  EXPECT_EQ(arr.to_display(0), "[... (10 i32 items)]");
  EXPECT_EQ(arr.to_display(100), "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]");
  EXPECT_EQ(nested_value().to_display(), "[[[\"a\", \"\"], []], []]");
  EXPECT_EQ(value_type_name(ValueType::Array), "array");
  EXPECT_EQ(value_type_name(ValueType::F64), "f64");
}

TEST(GgufCorpus, CommittedSeedsMatchGeneratorAndParse) {
  const std::filesystem::path dir = std::filesystem::path(GENIEX_TEST_DATA) / "gguf" / "corpus";
  for (const auto& seed : seeds::all()) {
    SCOPED_TRACE(seed.name);
    EXPECT_LT(seed.bytes.size(), 4096u);
    auto r = parse_bytes(seed.bytes);
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    std::ifstream in(dir / seed.name, std::ios::binary);
    ASSERT_TRUE(in.good()) << "missing " << (dir / seed.name)
                           << "; regenerate with make_gguf_corpus";
    const std::vector<uint8_t> committed((std::istreambuf_iterator<char>(in)),
                                         std::istreambuf_iterator<char>());
    EXPECT_EQ(committed, seed.bytes) << "stale seed; regenerate with make_gguf_corpus";
  }
}

std::string model_path() {
  if (const char* p = std::getenv("GENIEX_MODEL"); p && *p) return p;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/geniex/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(GgufRealModel, SmolLM2) {
  const std::string path = model_path();
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << "model file " << path
                 << " not found (set GENIEX_MODEL or download SmolLM2-135M-Instruct.Q4_1.gguf)";
  }
  auto r = File::open(path);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  const File& f = *r;
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(f.get_u64("llama.block_count").value(), 30u);
  const TensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, DType::Q8_0);
  EXPECT_EQ(emb->n_dims, 2);
  EXPECT_EQ(emb->ne[0], 576);
  EXPECT_EQ(emb->ne[1], 49152);
  EXPECT_EQ(emb->nbytes, 576u / 32 * 34 * 49152);
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.has_value()) << tokens.error().to_string();
  EXPECT_EQ(tokens->size(), 49152u);
  for (const auto& [key, value] : f.metadata()) EXPECT_FALSE(value.to_display().empty()) << key;
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    EXPECT_LE(f.data_offset() + t.offset + t.nbytes, f.mapping()->size()) << t.name;
  }
}

}  // namespace
}  // namespace geniex::gguf
