// CpuWeightStore: every weight a packed layout serves is repacked once into one arena (tied
// weights once), reads back as the reference dequantization of the original rows, sits on a
// 64-byte boundary without overlapping another, the arena starts on a 2 MiB boundary, and the
// bytes advised for 2 MiB pages are whole 2 MiB pages of it. Weights without a packed layout
// (F32, a row count that is not a multiple of 8) are left alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/backend/weight_store.hpp"
#include "backends/cpu/packed.hpp"
#include "core/dtype.hpp"
#include "quant/quant.hpp"

namespace geniex {
namespace {

struct Source {
  graph::WeightRef ref;
  std::vector<uint8_t> bytes;  // what the store reads (its pages are dropped afterwards)
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
  std::sort(spans.begin(), spans.end());
  EXPECT_EQ(spans.front().first % (uintptr_t{2} << 20), 0u) << "the arena starts on a 2 MiB boundary";
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first) << "overlap";
  const int64_t advised = st.huge_page_bytes();
  EXPECT_EQ(advised % (int64_t{2} << 20), 0);
  EXPECT_LE(advised, static_cast<int64_t>(spans.back().second - spans.front().first));
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
