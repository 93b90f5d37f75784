// The packed-weights cache (ModelBuilder::with_packed_cache, runtime/packed_cache.hpp): the
// first load writes a cache file, later loads map it (status "hit"), and every way a cache file
// can be wrong (corrupted bytes, truncation, another model file, another key) leads to a rebuilt
// file and the same logits as a load without a cache, bit for bit. A directory that cannot be
// written leaves the load working (repacked in memory) with a note.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <utime.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/packed.hpp"
#include "common/scoped_env.hpp"
#include "common/tiny_model.hpp"
#include "core/mmap.hpp"
#include "geniex/geniex.hpp"
#include "runtime/packed_cache.hpp"

namespace geniex {
namespace {

namespace fs = std::filesystem;

class PackedCache : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cpu::packed_kernels_for(DType::Q4_0, 64, 64) == nullptr) {
      GTEST_SKIP() << "no packed Q4_0 layout on this CPU (or GENIEX_REPACK=0): nothing to cache";
    }
    root_ = fs::temp_directory_path() /
            ("geniex_packed_cache_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    model_ = (root_ / "tiny.gguf").string();
    cache_ = (root_ / "cache").string();
    write_model(1234);
  }
  void TearDown() override {
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
  }

  // An all-Q4_0/Q8_0 tiny model whose matrices all have packed layouts.
  void write_model(uint32_t seed) {
    test_support::TinyLlamaConfig cfg;
    cfg.embd_type = cfg.attn_type = cfg.attn_out_type = cfg.ffn_gate_type = cfg.ffn_up_type = DType::Q4_0;
    cfg.ffn_down_type = cfg.output_type = DType::Q8_0;
    cfg.seed = seed;
    const auto bytes = test_support::make_tiny_llama(cfg);
    std::ofstream(model_, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }

  std::vector<std::string> cache_files() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (fs::directory_iterator it(cache_, ec), end; !ec && it != end; it.increment(ec)) {
      out.push_back(it->path().filename().string());
    }
    return out;
  }

  struct Run {
    ModelInfo info;
    std::vector<float> logits;
  };
  // Logits of a prompt and four decode steps, with the cache in `dir` ("": none).
  Run run(const std::string& dir) const {
    Run out;
    auto m = ModelBuilder(model_).with_threads(2).with_packed_cache(dir).build();
    EXPECT_TRUE(m.has_value()) << m.error().to_string();
    if (!m) return out;
    out.info = m->info();
    auto s = m->new_session();
    EXPECT_TRUE(s.has_value());
    std::vector<int32_t> toks = {5, 17, 33, 2, 90, 61};
    for (int step = 0; step < 5; ++step) {
      auto l = s->eval(toks);
      EXPECT_TRUE(l.has_value());
      if (!l) break;
      out.logits.insert(out.logits.end(), l->begin(), l->end());
      toks = {static_cast<int32_t>(step * 7 % 96)};
    }
    return out;
  }

  fs::path root_;
  std::string model_, cache_;
};

void flip_byte(const std::string& path, uint64_t from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(f.tellg());
  const auto pos = static_cast<std::streamoff>(size - from_end);
  f.seekg(pos);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(pos);
  f.write(&c, 1);
}

TEST_F(PackedCache, WrittenOnceThenMappedWithTheSameLogits) {
  const Run plain = run("");
  EXPECT_EQ(plain.info.packed_cache, "off");
  const Run first = run(cache_);
  EXPECT_EQ(first.info.packed_cache, "written") << first.info.packed_cache_note;
  EXPECT_TRUE(first.info.packed_cache_note.empty()) << first.info.packed_cache_note;
  ASSERT_TRUE(fs::is_regular_file(first.info.packed_cache_path));
  const Run second = run(cache_);
  EXPECT_EQ(second.info.packed_cache, "hit") << second.info.packed_cache_note;
  EXPECT_EQ(second.info.packed_cache_path, first.info.packed_cache_path);
  EXPECT_EQ(cache_files().size(), 1u);
  ASSERT_FALSE(plain.logits.empty());
  EXPECT_EQ(first.logits, plain.logits);  // the same packed bytes, so the same bits
  EXPECT_EQ(second.logits, plain.logits);
}

TEST_F(PackedCache, CorruptedOrTruncatedFileIsRebuilt) {
  const Run plain = run("");
  const Run first = run(cache_);
  ASSERT_EQ(first.info.packed_cache, "written");
  const std::string path = first.info.packed_cache_path;

  flip_byte(path, 7);  // inside the last tensor's bytes
  const Run corrupted = run(cache_);
  EXPECT_EQ(corrupted.info.packed_cache, "written");
  EXPECT_NE(corrupted.info.packed_cache_note.find("checksum"), std::string::npos) << corrupted.info.packed_cache_note;
  EXPECT_EQ(corrupted.logits, plain.logits);
  EXPECT_EQ(run(cache_).info.packed_cache, "hit");

  fs::resize_file(path, fs::file_size(path) / 2);
  const Run truncated = run(cache_);
  EXPECT_EQ(truncated.info.packed_cache, "written");
  EXPECT_NE(truncated.info.packed_cache_note.find("not used"), std::string::npos) << truncated.info.packed_cache_note;
  EXPECT_EQ(truncated.logits, plain.logits);

  fs::resize_file(path, 0);
  const Run empty = run(cache_);
  EXPECT_EQ(empty.info.packed_cache, "written");
  EXPECT_EQ(empty.logits, plain.logits);
  EXPECT_EQ(run(cache_).info.packed_cache, "hit");
  EXPECT_EQ(cache_files().size(), 1u);
}

TEST_F(PackedCache, AChangedModelFileGetsANewCacheAndTheOldOneGoes) {
  const Run first = run(cache_);
  ASSERT_EQ(first.info.packed_cache, "written");
  write_model(99);  // same shapes and size, other weights
  // A modification time of its own, whatever the file system's timestamp granularity.
  struct stat st {};
  ASSERT_EQ(::stat(model_.c_str(), &st), 0);
  struct utimbuf times {};
  times.actime = st.st_atime;
  times.modtime = st.st_mtime + 10;
  ASSERT_EQ(::utime(model_.c_str(), &times), 0);
  const Run plain = run("");
  const Run second = run(cache_);
  EXPECT_EQ(second.info.packed_cache, "written");
  EXPECT_NE(second.info.packed_cache_path, first.info.packed_cache_path);
  EXPECT_FALSE(fs::exists(first.info.packed_cache_path));
  EXPECT_EQ(cache_files().size(), 1u);
  EXPECT_EQ(second.logits, plain.logits);
}

TEST_F(PackedCache, AnUnwritableDirectoryStillLoads) {
  const Run plain = run("");
  // A path below a regular file cannot become a directory, even for root.
  const std::string dir = model_ + "/cache";
  const Run r = run(dir);
  EXPECT_EQ(r.info.packed_cache, "unavailable");
  EXPECT_NE(r.info.packed_cache_note.find("no cache file written"), std::string::npos) << r.info.packed_cache_note;
  EXPECT_EQ(r.logits, plain.logits);
}

TEST_F(PackedCache, NothingToPackIsUnavailableWithAReason) {
  test_support::ScopedEnv no_repack("GENIEX_REPACK", "0");
  const Run r = run(cache_);
  EXPECT_EQ(r.info.packed_cache, "unavailable");
  EXPECT_NE(r.info.packed_cache_note.find("no weight"), std::string::npos) << r.info.packed_cache_note;
  EXPECT_TRUE(cache_files().empty());
}

TEST_F(PackedCache, TheCheckRefusesAnotherKeyAndAPlainModel) {
  const Run first = run(cache_);
  ASSERT_EQ(first.info.packed_cache, "written");
  // The plan of this model, as the loader makes it.
  auto file = gguf::File::open(model_);
  ASSERT_TRUE(file.has_value());
  std::vector<graph::WeightRef> refs;
  for (const gguf::TensorInfo& t : file->tensors()) {
    graph::WeightRef w;
    w.name = t.name;
    w.type = t.type;
    for (int d = 0; d < 4; ++d) w.ne[d] = t.ne[d];
    w.data = t.data;
    w.nbytes = t.nbytes;
    refs.push_back(w);
  }
  std::vector<const graph::WeightRef*> ptrs;
  for (const auto& w : refs) ptrs.push_back(&w);
  const auto plan = backends::CpuWeightStore::plan(ptrs);
  auto id = runtime::identify_source(model_);
  ASSERT_TRUE(id.has_value());
  const std::string key = runtime::packed_cache_key(plan, *id);
  auto mapped = MappedFile::open(first.info.packed_cache_path);
  ASSERT_TRUE(mapped.has_value());
  // (This plan follows the file's tensor order, the loader's the model's weights: the key is
  // checked before the tensors, so a wrong key is refused as such either way.)
  auto other = runtime::check_packed_cache(*mapped, plan, key + "x", 2);
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error().code, ErrorCode::InvalidFormat);
  EXPECT_NE(other.error().message.find("key differs"), std::string::npos) << other.error().message;
  auto model_file = MappedFile::open(model_);
  ASSERT_TRUE(model_file.has_value());
  auto plain = runtime::check_packed_cache(*model_file, plan, key, 2);
  ASSERT_FALSE(plain.has_value());
  EXPECT_NE(plain.error().message.find("not a packed-weights file"), std::string::npos) << plain.error().message;
}

TEST(PackedChecksum, SameForAnyThreadCountAndSensitiveToEveryChunk) {
  std::vector<uint8_t> data((size_t{21} << 20) + 12345);
  std::mt19937_64 rng(7);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const uint64_t one = runtime::packed_checksum(data.data(), data.size(), 1);
  EXPECT_EQ(runtime::packed_checksum(data.data(), data.size(), 2), one);
  EXPECT_EQ(runtime::packed_checksum(data.data(), data.size(), 5), one);
  EXPECT_NE(runtime::packed_checksum(data.data(), data.size() - 1, 2), one);
  for (const size_t pos : {size_t{0}, (size_t{8} << 20) + 3, data.size() - 1}) {
    data[pos] ^= 1;
    EXPECT_NE(runtime::packed_checksum(data.data(), data.size(), 3), one) << pos;
    data[pos] ^= 1;
  }
}

}  // namespace
}  // namespace geniex
