// safetensors reader: good files written here (values read back exactly), Hugging Face folders
// (single file, sharded with an index), and malformed or truncated files, each a clear error.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "common/safetensors_writer.hpp"
#include "common/test_seed.hpp"
#include "core/fp16.hpp"
#include "formats/safetensors.hpp"

namespace geniex::safetensors {
namespace {

namespace fs = std::filesystem;
using test::SafetensorsWriter;

Result<File> parse(const std::vector<uint8_t>& b) { return File::parse(MappedFile::from_bytes(b.data(), b.size())); }

// Header text `json` with a correct length prefix, followed by `data_bytes` zero bytes.
std::vector<uint8_t> raw(const std::string& json, size_t data_bytes = 0, std::optional<uint64_t> len = std::nullopt) {
  std::vector<uint8_t> out;
  const uint64_t n = len.value_or(json.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), json.begin(), json.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

void expect_error(const Result<File>& r, ErrorCode code, const std::string& needle) {
  ASSERT_FALSE(r.has_value()) << "expected an error containing '" << needle << "'";
  EXPECT_EQ(r.error().code, code) << r.error().to_string();
  EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().to_string();
}

std::vector<float> random_values(size_t n, uint32_t salt) {
  std::mt19937 rng = test_support::make_rng(salt);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(Safetensors, ReadsF32F16Bf16AndMetadata) {
  const std::vector<float> a = random_values(6, 1), b = random_values(8, 2), c = random_values(4, 3);
  SafetensorsWriter w;
  w.add("a", "F32", {2, 3}, a);
  w.add("b.weight", "F16", {8}, b);
  w.add("c", "BF16", {2, 1, 2}, c);
  w.add("scalar", "F32", {}, {1.5f});
  w.add("empty", "F32", {0, 4}, {});
  w.set_metadata("format", "pt");
  auto r = parse(w.bytes());
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_EQ(r->tensors().size(), 5u);
  ASSERT_EQ(r->metadata().count("format"), 1u);
  EXPECT_EQ(r->metadata().at("format"), "pt");

  const Tensor* ta = r->find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, "F32");
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->n_elements, 6u);
  EXPECT_EQ(ta->nbytes, 24u);
  auto va = to_f32(*ta);
  ASSERT_TRUE(va.has_value());
  EXPECT_EQ(*va, a);

  auto vb = to_f32(*r->find("b.weight"));
  ASSERT_TRUE(vb.has_value());
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ((*vb)[i], fp16_to_f32(f32_to_fp16(b[i]))) << i;
  auto vc = to_f32(*r->find("c"));
  ASSERT_TRUE(vc.has_value());
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ((*vc)[i], bf16_to_f32(f32_to_bf16(c[i]))) << i;
  EXPECT_EQ(r->find("c")->type, DType::BF16);

  const Tensor* s = r->find("scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->shape.empty());
  EXPECT_EQ(s->n_elements, 1u);
  EXPECT_EQ(r->find("empty")->n_elements, 0u);
  EXPECT_EQ(r->find("nope"), nullptr);
}

TEST(Safetensors, OtherDtypesParseButDoNotConvert) {
  SafetensorsWriter w;
  w.add_raw("ids", "I64", {3}, std::vector<uint8_t>(24, 1));
  w.add_raw("mask", "BOOL", {2}, {0, 1});
  auto r = parse(w.bytes());
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  const Tensor* t = r->find("ids");
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->type.has_value());
  auto v = to_f32(*t);
  ASSERT_FALSE(v.has_value());
  EXPECT_EQ(v.error().code, ErrorCode::Unsupported);
  EXPECT_NE(v.error().message.find("I64"), std::string::npos) << v.error().message;
  EXPECT_NE(v.error().message.find("ids"), std::string::npos) << v.error().message;
}

TEST(Safetensors, MalformedHeadersAreErrors) {
  const std::string good = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_TRUE(parse(raw(good, 8)).has_value());

  expect_error(parse({1, 2, 3}), ErrorCode::InvalidFormat, "too short");
  expect_error(parse(raw(good, 8, uint64_t{1} << 40)), ErrorCode::InvalidFormat, "header length");
  expect_error(parse(raw(good, 8, good.size() + 9)), ErrorCode::InvalidFormat, "past the end");
  expect_error(parse(raw(good, 8, 0)), ErrorCode::InvalidFormat, "header length 0");
  expect_error(parse(raw("[1,2]")), ErrorCode::InvalidFormat, "does not start with '{'");
  expect_error(parse(raw(R"({"t": )")), ErrorCode::InvalidFormat, "not valid JSON");
  expect_error(parse(raw(R"({"t":{"dtype":"F32","shape":[2]}})")), ErrorCode::InvalidFormat, "data_offsets");
  expect_error(parse(raw(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", 8)), ErrorCode::InvalidFormat, "dtype");
  expect_error(parse(raw(R"({"t":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", 8)), ErrorCode::InvalidFormat,
               "unknown dtype 'F17'");
  expect_error(parse(raw(R"({"t":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8)), ErrorCode::InvalidFormat,
               "dtype is not a string");
  expect_error(parse(raw(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)),
               ErrorCode::InvalidFormat, "non-negative");
  expect_error(parse(raw(R"({"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8)),
               ErrorCode::InvalidFormat, "non-negative");
  expect_error(parse(raw(R"({"t":{"dtype":"F32","shape":{"a":1},"data_offsets":[0,8]}})", 8)),
               ErrorCode::InvalidFormat, "shape is not an array");
  expect_error(parse(raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8)), ErrorCode::InvalidFormat,
               "[begin, end]");
  expect_error(parse(raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)),
               ErrorCode::InvalidFormat, "end before they begin");
  expect_error(parse(raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 7)),
               ErrorCode::InvalidFormat, "past the data section");
  expect_error(parse(raw(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)),
               ErrorCode::InvalidFormat, "needs 12");
  expect_error(parse(raw(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})",
                         8)),
               ErrorCode::InvalidFormat, "overflows");
  expect_error(parse(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         12)),
               ErrorCode::InvalidFormat, "overlap");
  expect_error(parse(raw(R"({"__metadata__":{"k":1}})")), ErrorCode::InvalidFormat, "__metadata__['k']");
  expect_error(parse(raw(R"({"__metadata__":[1]})")), ErrorCode::InvalidFormat, "__metadata__ is not an object");
  expect_error(parse(raw(R"({"t":5})")), ErrorCode::InvalidFormat, "is not an object");
  // Deep nesting is refused before the JSON parser sees it.
  expect_error(parse(raw("{\"t\":" + std::string(100000, '[') + std::string(100000, ']') + "}")),
               ErrorCode::InvalidFormat, "nests deeper");
}

TEST(Safetensors, EveryTruncationIsAnError) {
  SafetensorsWriter w;
  w.add("x", "F16", {3, 5}, random_values(15, 4));
  w.add("y", "F32", {7}, random_values(7, 5));
  const std::vector<uint8_t> full = w.bytes();
  ASSERT_TRUE(parse(full).has_value());
  for (size_t n = 0; n < full.size(); ++n) {
    const std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    auto r = parse(cut);
    ASSERT_FALSE(r.has_value()) << "truncated to " << n << " bytes";
    EXPECT_EQ(r.error().code, ErrorCode::InvalidFormat) << r.error().to_string();
  }
}

TEST(Safetensors, RandomByteFlipsNeverCrash) {
  SafetensorsWriter w;
  w.add("x", "BF16", {4, 4}, random_values(16, 6));
  w.add("y", "F32", {2}, random_values(2, 7));
  w.set_metadata("format", "pt");
  const std::vector<uint8_t> full = w.bytes();
  std::mt19937 rng = test_support::make_rng(8);
  int ok = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> b = full;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    auto r = parse(b);
    if (!r) continue;
    ++ok;
    for (const Tensor& t : r->tensors()) {
      auto v = to_f32(t);
      if (v) {
        EXPECT_EQ(v->size(), t.n_elements);
      }
    }
  }
  std::cout << "[ info     ] " << ok << " of 3000 mutated files still parse (flips in data bytes)\n";
}

class SafetensorsFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("geniex_st_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write_text(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  fs::path dir_;
};

TEST_F(SafetensorsFolder, SingleFile) {
  SafetensorsWriter w;
  w.add("a", "F32", {2}, {1, 2});
  w.write((dir_ / "model.safetensors").string());
  auto f = Folder::open(dir_.string());
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  ASSERT_NE(f->find("a"), nullptr);
  EXPECT_EQ(f->tensors().size(), 1u);
  EXPECT_EQ(f->shard_paths().size(), 1u);
}

TEST_F(SafetensorsFolder, ShardsFromIndex) {
  SafetensorsWriter s1, s2;
  s1.add("a", "F32", {2}, {1, 2});
  s1.add("b", "F16", {1}, {3});
  s2.add("c", "BF16", {2}, {4, 5});
  s1.write((dir_ / "model-00001-of-00002.safetensors").string());
  s2.write((dir_ / "model-00002-of-00002.safetensors").string());
  write_text("model.safetensors.index.json",
             R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
             R"("b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})");
  auto f = Folder::open(dir_.string());
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  EXPECT_EQ(f->tensors().size(), 3u);
  ASSERT_NE(f->find("c"), nullptr);
  auto v = to_f32(*f->find("c"));
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, (std::vector<float>{4, 5}));
}

TEST_F(SafetensorsFolder, IndexErrors) {
  SafetensorsWriter s1;
  s1.add("a", "F32", {2}, {1, 2});
  s1.write((dir_ / "model-00001-of-00001.safetensors").string());
  auto expect = [&](const std::string& index, ErrorCode code, const std::string& needle) {
    write_text("model.safetensors.index.json", index);
    auto f = Folder::open(dir_.string());
    ASSERT_FALSE(f.has_value()) << index;
    EXPECT_EQ(f.error().code, code) << f.error().to_string();
    EXPECT_NE(f.error().message.find(needle), std::string::npos) << f.error().to_string();
  };
  expect(R"({"weight_map":{"a":"model-00002-of-00002.safetensors"}})", ErrorCode::NotFound,
         "model-00002-of-00002.safetensors");
  expect(R"({"weight_map":{"a":"../model-00001-of-00001.safetensors"}})", ErrorCode::InvalidFormat,
         "not a file name in the model folder");
  expect(R"({"weight_map":{"zz":"model-00001-of-00001.safetensors"}})", ErrorCode::InvalidFormat,
         "tensor 'zz' is listed");
  expect(R"({"weight_map":{}})", ErrorCode::InvalidFormat, "weight_map is empty");
  expect(R"({"weight_map":)", ErrorCode::InvalidFormat, "not valid JSON");
  expect(R"({"weight_map":{"a":3}})", ErrorCode::InvalidFormat, "is not a string");

  // The same tensor in two shards.
  s1.write((dir_ / "model-00002-of-00002.safetensors").string());
  expect(R"({"weight_map":{"a":"model-00001-of-00001.safetensors","b":"model-00002-of-00002.safetensors"}})",
         ErrorCode::InvalidFormat, "is also in");
}

TEST_F(SafetensorsFolder, TruncatedShardIsAnError) {
  SafetensorsWriter w;
  w.add("a", "F32", {64}, random_values(64, 9));
  std::vector<uint8_t> b = w.bytes();
  b.resize(b.size() - 10);
  std::ofstream(dir_ / "model.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  auto f = Folder::open(dir_.string());
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::InvalidFormat);
  EXPECT_NE(f.error().message.find("model.safetensors"), std::string::npos) << f.error().to_string();
  EXPECT_NE(f.error().message.find("truncated"), std::string::npos) << f.error().to_string();
}

TEST_F(SafetensorsFolder, MissingWeights) {
  auto f = Folder::open(dir_.string());
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::NotFound);
  write_text("pytorch_model.bin", "x");
  f = Folder::open(dir_.string());
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::Unsupported);
  EXPECT_NE(f.error().message.find(".bin"), std::string::npos) << f.error().to_string();
  f = Folder::open((dir_ / "nowhere").string());
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::NotFound);
}

}  // namespace
}  // namespace geniex::safetensors
