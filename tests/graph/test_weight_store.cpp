// CpuWeightStore: every weight a packed layout serves is repacked once into one arena (tied
// weights once), reads back as the reference dequantization of the original rows, sits on a
// 64-byte boundary without overlapping another, the arena starts on a 2 MiB boundary, and the
// bytes advised for 2 MiB pages are whole 2 MiB pages of it. Weights without a packed layout
// (F32, a row count that is not a multiple of 8) are left alone. The originals' pages leave the
// process where they are pages of a file mapping (and read back unchanged), never where they are
// heap bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "backends/cpu/backend/weight_store.hpp"
#include "backends/cpu/packed.hpp"
#include "core/dtype.hpp"
#include "core/mmap.hpp"
#include "quant/quant.hpp"

namespace geniex {
namespace {

struct Source {
  graph::WeightRef ref;
  std::vector<uint8_t> bytes;  // what the store reads (heap memory: its pages are not dropped)
  std::vector<uint8_t> copy;   // the same bytes, kept for the comparison
};

void make_source(Source* s, const std::string& name, DType type, int64_t n, int64_t rows, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  const auto rb = static_cast<size_t>(row_bytes(type, n));
  s->bytes.resize(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : x) v = nd(rng);
    quant::quantize_row_ref(type, x.data(), s->bytes.data() + static_cast<size_t>(r) * rb, n);
  }
  s->copy = s->bytes;
  s->ref.name = name;
  s->ref.type = type;
  s->ref.ne[0] = n;
  s->ref.ne[1] = rows;
  s->ref.data = s->bytes.data();
  s->ref.nbytes = s->bytes.size();
}

TEST(CpuWeightStore, RepacksIntoOneAlignedArena) {
  if (cpu::packed_kernels_for(DType::Q4_0, 256, 64) == nullptr) {
    GTEST_SKIP() << "no packed Q4_0 layout on this CPU (or GENIEX_REPACK=0)";
  }
  std::mt19937 rng(42);
  // Sizes below, around and above 2 MiB; one whose rows do not come in eights; one F32.
  std::vector<Source> src(5);
  make_source(&src[0], "small", DType::Q4_0, 256, 64, rng);
  make_source(&src[1], "mid", DType::Q4_0, 512, 4096, rng);      // 1.1 MiB
  make_source(&src[2], "large", DType::Q8_0, 2048, 1032, rng);   // 2.2 MiB
  make_source(&src[3], "odd_rows", DType::Q4_0, 256, 12, rng);
  make_source(&src[4], "f32", DType::F32, 64, 16, rng);
  std::vector<const graph::WeightRef*> refs;
  for (const Source& s : src) refs.push_back(&s.ref);
  refs.push_back(&src[0].ref);  // tied: the same bytes under a second use

  auto store = backends::CpuWeightStore::create(refs, 2);
  ASSERT_TRUE(store.has_value()) << store.error().message;
  const backends::CpuWeightStore& st = **store;
  EXPECT_EQ(st.size(), 3u);
  EXPECT_EQ(st.packed_bytes(), static_cast<int64_t>(src[0].bytes.size() + src[1].bytes.size() + src[2].bytes.size()));
  EXPECT_EQ(st.find(src[3].ref.data), nullptr);
  EXPECT_EQ(st.find(src[4].ref.data), nullptr);

  std::vector<std::pair<uintptr_t, uintptr_t>> spans;
  for (int i = 0; i < 3; ++i) {
    const Source& s = src[static_cast<size_t>(i)];
    const backends::CpuWeightStore::Packed* p = st.find(s.ref.data);
    ASSERT_NE(p, nullptr) << s.ref.name;
    ASSERT_NE(p->kernels, nullptr);
    const auto at = reinterpret_cast<uintptr_t>(p->data);
    EXPECT_EQ(at % 64, 0u) << s.ref.name;
    spans.emplace_back(at, at + s.bytes.size());
    const int64_t n = s.ref.ne[0];
    const auto rb = static_cast<size_t>(row_bytes(s.ref.type, n));
    std::vector<float> want(static_cast<size_t>(n)), got(want.size());
    for (const int64_t r : {int64_t{0}, int64_t{7}, int64_t{8}, s.ref.ne[1] / 2 + 3, s.ref.ne[1] - 1}) {
      quant::dequantize_row_ref(s.ref.type, s.copy.data() + static_cast<size_t>(r) * rb, want.data(), n);
      p->kernels->dequantize_row(p->data, r, got.data(), n);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << s.ref.name << " row " << r;
    }
  }
  // The originals live in the heap: dropping their pages would have zeroed them (only pages of
  // shared file mappings are dropped).
  for (const Source& s : src) EXPECT_EQ(s.bytes, s.copy) << s.ref.name << ": heap bytes changed";
  std::sort(spans.begin(), spans.end());
  EXPECT_EQ(spans.front().first % (uintptr_t{2} << 20), 0u) << "the arena starts on a 2 MiB boundary";
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first) << "overlap";
  const int64_t advised = st.huge_page_bytes();
  EXPECT_EQ(advised % (int64_t{2} << 20), 0);
  EXPECT_LE(advised, static_cast<int64_t>(spans.back().second - spans.front().first));
}

// Resident kB of the mapping that contains addr (/proc/self/smaps), or -1.
long resident_kb(const void* addr) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  const auto a = reinterpret_cast<uintptr_t>(addr);
  bool in = false;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 && line.find(' ') > line.find('-')) {
      in = a >= lo && a < hi;
      continue;
    }
    long kb = 0;
    if (in && std::sscanf(line.c_str(), "Rss: %ld kB", &kb) == 1) return kb;
  }
  return -1;
}

TEST(CpuWeightStore, DropsTheFilePagesOfWhatItRepacks) {
  if (cpu::packed_kernels_for(DType::Q8_0, 1024, 512) == nullptr) {
    GTEST_SKIP() << "no packed Q8_0 layout on this CPU (or GENIEX_REPACK=0)";
  }
  std::mt19937 rng(11);
  Source s;
  make_source(&s, "w", DType::Q8_0, 1024, 512, rng);  // 544 KiB
  const std::string path = testing::TempDir() + "geniex_weight_store_" + std::to_string(::getpid()) + ".bin";
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(s.bytes.data()), static_cast<std::streamsize>(s.bytes.size()));
  }
  auto file = MappedFile::open(path);
  ::unlink(path.c_str());
  ASSERT_TRUE(file.has_value()) << file.error().message;
  s.ref.data = (*file)->data();
  uint64_t sum = 0;
  for (size_t i = 0; i < s.bytes.size(); i += 4096) sum += s.ref.data[i];  // every page mapped in
  const long before = resident_kb(s.ref.data);
  const graph::WeightRef* refs[] = {&s.ref};
  auto store = backends::CpuWeightStore::create(refs, 1);
  ASSERT_TRUE(store.has_value()) << store.error().message;
  ASSERT_NE((*store)->find(s.ref.data), nullptr);
  const long after = resident_kb(s.ref.data);
  if (before < 0) GTEST_SKIP() << "no /proc/self/smaps";
  EXPECT_GE(before, 500) << "the file's pages were mapped in (" << sum << ")";
  EXPECT_LE(after, 8) << "the repacked weight's file pages left the process";
  EXPECT_EQ(std::memcmp(s.ref.data, s.copy.data(), s.copy.size()), 0) << "and read back unchanged";
}

TEST(CpuWeightStore, NothingToRepackGivesAnEmptyStore) {
  std::mt19937 rng(7);
  Source s;
  make_source(&s, "f32", DType::F32, 64, 16, rng);
  const graph::WeightRef* refs[] = {&s.ref};
  auto store = backends::CpuWeightStore::create(refs, 1);
  ASSERT_TRUE(store.has_value()) << store.error().message;
  EXPECT_EQ((*store)->size(), 0u);
  EXPECT_EQ((*store)->packed_bytes(), 0);
  EXPECT_EQ((*store)->huge_page_bytes(), 0);
  EXPECT_EQ((*store)->find(s.ref.data), nullptr);
  EXPECT_EQ(s.bytes, s.copy) << "an F32 weight is not touched";
}

}  // namespace
}  // namespace geniex
