// PagedKvCache against a shadow model: every token's K and V rows of every layer are kept on
// the side and compared with what block_table / k_block / v_block expose after each step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/fp16.hpp"
#include "kv/kv_cache.hpp"

namespace geniex::kv {
namespace {

uint32_t test_seed() {
  static const uint32_t seed = [] {
    uint32_t s = std::random_device{}();
    if (const char* e = std::getenv("GENIEX_TEST_SEED")) s = static_cast<uint32_t>(std::strtoul(e, nullptr, 10));
    std::cout << "[ seed     ] GENIEX_TEST_SEED=" << s << "\n";
    return s;
  }();
  return seed;
}

std::mt19937 make_rng(uint32_t salt) { return std::mt19937(test_seed() ^ (salt * 0x9e3779b9u)); }

KvConfig small_config(DType type = DType::F16) {
  KvConfig c;
  c.n_layer = 3;
  c.n_head_kv = 2;
  c.head_dim = 3;
  c.n_ctx = 23;
  c.n_seq_max = 3;
  c.block_size = 4;
  c.type = type;
  return c;
}

// Independent size of one block: all layers, K and V.
int64_t block_bytes_of(const KvConfig& c) {
  const int64_t elem = c.type == DType::F16 ? 2 : 4;
  return int64_t{c.n_head_kv} * c.head_dim * elem * c.block_size * 2 * c.n_layer;
}

struct TokenRows {
  std::vector<std::vector<float>> k, v;  // [layer][n_head_kv * head_dim]
};

// The cache plus what it should contain.
class Harness {
 public:
  explicit Harness(const KvConfig& config, uint32_t salt = 1) : rng_(make_rng(salt)) {
    auto r = PagedKvCache::create(config);
    if (!r) {
      ADD_FAILURE() << r.error().to_string();
      return;
    }
    kv = std::move(r).value();
    cfg = config;
    shadow.resize(static_cast<size_t>(config.n_seq_max));
  }

  size_t row_elems() const { return static_cast<size_t>(cfg.n_head_kv) * static_cast<size_t>(cfg.head_dim); }
  int64_t bb() const { return block_bytes_of(cfg); }

  // Appends `count` tokens to each listed sequence (interleaved round-robin); returns the
  // begin_batch status. On success writes fresh random rows for every layer and records them.
  Status append(const std::vector<std::pair<int32_t, int32_t>>& seq_counts) {
    std::vector<int32_t> ids, pos;
    std::map<int32_t, int32_t> next;
    for (const auto& [s, n] : seq_counts) next[s] = static_cast<int32_t>(shadow[static_cast<size_t>(s)].size());
    bool more = true;
    std::vector<int32_t> left;
    for (const auto& sc : seq_counts) left.push_back(sc.second);
    while (more) {
      more = false;
      for (size_t i = 0; i < seq_counts.size(); ++i) {
        if (left[i] == 0) continue;
        --left[i];
        more = true;
        ids.push_back(seq_counts[i].first);
        pos.push_back(next[seq_counts[i].first]++);
      }
    }
    return append_explicit(ids, pos);
  }

  Status append_explicit(const std::vector<int32_t>& ids, const std::vector<int32_t>& pos) {
    Status st = kv->begin_batch(ids, pos);
    if (!st) return st;
    std::normal_distribution<float> dist(0.0f, 2.0f);
    // Write layers in a scrambled order so that no layer relies on another's write.
    std::vector<int32_t> layers(static_cast<size_t>(cfg.n_layer));
    for (int32_t l = 0; l < cfg.n_layer; ++l) layers[static_cast<size_t>(l)] = l;
    std::shuffle(layers.begin(), layers.end(), rng_);
    std::vector<TokenRows> rows(ids.size());
    for (auto& t : rows) {
      t.k.assign(static_cast<size_t>(cfg.n_layer), std::vector<float>(row_elems()));
      t.v.assign(static_cast<size_t>(cfg.n_layer), std::vector<float>(row_elems()));
      for (auto& layer : t.k) for (auto& x : layer) x = dist(rng_);
      for (auto& layer : t.v) for (auto& x : layer) x = dist(rng_);
    }
    for (const int32_t l : layers) {
      for (size_t i = 0; i < ids.size(); ++i) {
        kv->write(l, static_cast<int32_t>(i), rows[i].k[static_cast<size_t>(l)].data(),
                  rows[i].v[static_cast<size_t>(l)].data());
      }
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      auto& seq = shadow[static_cast<size_t>(ids[i])];
      EXPECT_EQ(static_cast<int32_t>(seq.size()), pos[i]);
      seq.push_back(std::move(rows[i]));
    }
    return st;
  }

  void truncate(int32_t s, int32_t p0) {
    kv->truncate(s, p0);
    if (s < 0 || s >= cfg.n_seq_max) return;
    auto& seq = shadow[static_cast<size_t>(s)];
    const auto keep = static_cast<size_t>(std::clamp<int64_t>(p0, 0, static_cast<int64_t>(seq.size())));
    seq.resize(keep);
  }

  Status copy_prefix(int32_t src, int32_t dst, int32_t n) {
    Status st = kv->copy_prefix(src, dst, n);
    if (!st) return st;
    const auto& from = shadow[static_cast<size_t>(src)];
    const auto keep = static_cast<size_t>(std::clamp<int64_t>(n, 0, static_cast<int64_t>(from.size())));
    std::vector<TokenRows> copy(from.begin(), from.begin() + static_cast<std::ptrdiff_t>(keep));
    shadow[static_cast<size_t>(dst)] = std::move(copy);
    return st;
  }

  void clear() {
    kv->clear();
    for (auto& s : shadow) s.clear();
  }

  // What the cache exposes for (seq, pos, layer), decoded to float and as raw element bits.
  std::vector<uint32_t> read_bits(int32_t seq, int32_t pos, int32_t layer, bool want_v) const {
    const auto table = kv->block_table(seq);
    const int32_t block = table[static_cast<size_t>(pos / cfg.block_size)];
    const auto* base = static_cast<const uint8_t*>(want_v ? kv->v_block(layer, block) : kv->k_block(layer, block));
    const size_t elem = cfg.type == DType::F16 ? 2 : 4;
    const uint8_t* row = base + static_cast<size_t>(pos % cfg.block_size) * row_elems() * elem;
    std::vector<uint32_t> out(row_elems());
    for (size_t j = 0; j < row_elems(); ++j) {
      if (elem == 2) {
        uint16_t h;
        std::memcpy(&h, row + j * 2, 2);
        out[j] = h;
      } else {
        std::memcpy(&out[j], row + j * 4, 4);
      }
    }
    return out;
  }

  uint32_t expected_bits(float x) const {
    return cfg.type == DType::F16 ? static_cast<uint32_t>(f32_to_fp16(x)) : f32_to_bits(x);
  }

  // Full comparison with the shadow; returns the number of mismatching elements.
  int64_t verify(const std::string& where) const {
    int64_t bad = 0;
    const int64_t n_alloc_blocks = kv->allocated_bytes() / bb();
    for (int32_t s = 0; s < cfg.n_seq_max; ++s) {
      const auto& seq = shadow[static_cast<size_t>(s)];
      EXPECT_EQ(kv->seq_length(s), static_cast<int32_t>(seq.size())) << where << " seq " << s;
      const auto table = kv->block_table(s);
      const size_t want_blocks = (seq.size() + static_cast<size_t>(cfg.block_size) - 1) / static_cast<size_t>(cfg.block_size);
      EXPECT_EQ(table.size(), want_blocks) << where << " seq " << s;
      if (table.size() != want_blocks) return 1;
      for (const int32_t b : table) {
        EXPECT_GE(b, 0) << where;
        EXPECT_LT(b, n_alloc_blocks) << where;
        if (b < 0 || b >= n_alloc_blocks) return 1;
      }
      for (size_t p = 0; p < seq.size(); ++p) {
        for (int32_t l = 0; l < cfg.n_layer; ++l) {
          for (const bool is_v : {false, true}) {
            const auto got = read_bits(s, static_cast<int32_t>(p), l, is_v);
            const auto& want = is_v ? seq[p].v[static_cast<size_t>(l)] : seq[p].k[static_cast<size_t>(l)];
            for (size_t j = 0; j < got.size(); ++j) {
              if (got[j] != expected_bits(want[j]) && ++bad <= 5) {
                ADD_FAILURE() << where << ": seq " << s << " pos " << p << " layer " << l
                              << (is_v ? " V" : " K") << "[" << j << "] = 0x" << std::hex << got[j]
                              << ", want 0x" << expected_bits(want[j]) << std::dec;
              }
            }
          }
        }
      }
    }
    return bad;
  }

  KvConfig cfg;
  std::unique_ptr<PagedKvCache> kv;
  std::vector<std::vector<TokenRows>> shadow;

 private:
  std::mt19937 rng_;
};

// ------------------------------------------------------------------------------------------

TEST(PagedKvCache, CreateRejectsBadConfigs) {
  const KvConfig good = small_config();
  auto expect_code = [](const KvConfig& c, ErrorCode code, const char* what) {
    auto r = PagedKvCache::create(c);
    ASSERT_FALSE(r.has_value()) << what;
    EXPECT_EQ(r.error().code, code) << what << ": " << r.error().to_string();
  };
  for (const int32_t bad : {0, -1, -1000}) {
    KvConfig c = good;
    c.n_layer = bad;
    expect_code(c, ErrorCode::InvalidArgument, "n_layer");
    c = good;
    c.n_head_kv = bad;
    expect_code(c, ErrorCode::InvalidArgument, "n_head_kv");
    c = good;
    c.head_dim = bad;
    expect_code(c, ErrorCode::InvalidArgument, "head_dim");
    c = good;
    c.n_ctx = bad;
    expect_code(c, ErrorCode::InvalidArgument, "n_ctx");
    c = good;
    c.n_seq_max = bad;
    expect_code(c, ErrorCode::InvalidArgument, "n_seq_max");
    c = good;
    c.block_size = bad;
    expect_code(c, ErrorCode::InvalidArgument, "block_size");
  }
  for (const DType t : {DType::BF16, DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::I32}) {
    KvConfig c = good;
    c.type = t;
    expect_code(c, ErrorCode::Unsupported, "type");
  }
  for (const DType t : {DType::F16, DType::F32}) {
    KvConfig c = good;
    c.type = t;
    auto r = PagedKvCache::create(c);
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    const auto& kv = *r;
    EXPECT_EQ(kv->config().type, t);
    EXPECT_EQ(kv->config().n_ctx, good.n_ctx);
    EXPECT_EQ(kv->allocated_bytes(), 0);
    // Default budget: n_ctx tokens for each sequence, in whole blocks.
    const int64_t blocks_per_seq = (good.n_ctx + good.block_size - 1) / good.block_size;
    EXPECT_EQ(kv->budget_bytes(), blocks_per_seq * good.n_seq_max * block_bytes_of(c));
    for (int32_t s = 0; s < c.n_seq_max; ++s) {
      EXPECT_EQ(kv->seq_length(s), 0);
      EXPECT_TRUE(kv->block_table(s).empty());
    }
    EXPECT_EQ(kv->seq_length(-1), 0);
    EXPECT_EQ(kv->seq_length(c.n_seq_max), 0);
  }
  KvConfig c = good;
  c.max_bytes = 5 * block_bytes_of(c);
  auto r = PagedKvCache::create(c);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ((*r)->budget_bytes(), 5 * block_bytes_of(c));
}

// Sizes near the int32 / int64 limits: create() must either refuse them or work, never
// overflow (UBSan aborts on signed overflow; the check runs in a child process so that an
// abort fails this test only).
void create_and_use(const KvConfig& c) {
  auto r = PagedKvCache::create(c);
  if (!r) std::_Exit(r.error().code == ErrorCode::InvalidArgument || r.error().code == ErrorCode::OutOfRange ? 0 : 3);
  auto& kv = **r;
  if (kv.budget_bytes() < 0) std::_Exit(4);
  // One token, if its block fits in memory at all (a huge block may fail with OutOfMemory).
  const std::vector<int32_t> ids = {0}, pos = {0};
  Status st = kv.begin_batch(ids, pos);
  if (!st && st.error().code != ErrorCode::OutOfMemory) std::_Exit(5);
  std::_Exit(0);
}

TEST(PagedKvCache, HugeContextDoesNotOverflow) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  KvConfig c = small_config();
  c.n_ctx = std::numeric_limits<int32_t>::max();  // n_ctx + block_size - 1 overflows int32
  c.block_size = 32;
  c.max_bytes = 4 * block_bytes_of(c);
  EXPECT_EXIT(create_and_use(c), testing::ExitedWithCode(0), "");
}

TEST(PagedKvCache, HugeBlockSizeDoesNotOverflow) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  KvConfig c = small_config(DType::F32);
  c.n_layer = 1 << 20;
  c.n_head_kv = 1 << 16;
  c.head_dim = 1 << 16;
  c.block_size = 1 << 10;  // one block: 2^64 bytes, overflows int64
  EXPECT_EXIT(create_and_use(c), testing::ExitedWithCode(0), "");
}

TEST(PagedKvCache, BeginBatchValidatesAndFailureChangesNothing) {
  Harness h(small_config());
  ASSERT_TRUE(h.kv);
  auto& kv = *h.kv;
  auto expect_fail = [&](std::vector<int32_t> ids, std::vector<int32_t> pos, ErrorCode code, const char* what) {
    const int64_t alloc = kv.allocated_bytes();
    Status st = kv.begin_batch(ids, pos);
    ASSERT_FALSE(st.has_value()) << what;
    EXPECT_EQ(st.error().code, code) << what << ": " << st.error().to_string();
    EXPECT_EQ(kv.allocated_bytes(), alloc) << what;
    EXPECT_EQ(h.verify(what), 0);
  };
  EXPECT_TRUE(kv.begin_batch({}, {}).has_value());  // empty batch is fine
  expect_fail({0, 0}, {0}, ErrorCode::InvalidArgument, "length mismatch");
  expect_fail({-1}, {0}, ErrorCode::InvalidArgument, "negative seq");
  expect_fail({3}, {0}, ErrorCode::InvalidArgument, "seq == n_seq_max");
  expect_fail({0, 1, 7}, {0, 0, 0}, ErrorCode::InvalidArgument, "bad seq after good ones");
  expect_fail({0}, {1}, ErrorCode::InvalidArgument, "must start at 0");
  expect_fail({0}, {-1}, ErrorCode::InvalidArgument, "negative position");
  expect_fail({0, 0, 0}, {0, 1, 3}, ErrorCode::InvalidArgument, "gap inside batch");
  expect_fail({0, 0}, {0, 0}, ErrorCode::InvalidArgument, "repeat inside batch");
  expect_fail({0, 0}, {1, 0}, ErrorCode::InvalidArgument, "out of order");
  EXPECT_EQ(kv.allocated_bytes(), 0);

  ASSERT_TRUE(h.append({{0, 5}, {1, 2}}).has_value());
  EXPECT_EQ(h.verify("after first batch"), 0);
  expect_fail({0}, {4}, ErrorCode::InvalidArgument, "rewrite of last position");
  expect_fail({0}, {6}, ErrorCode::InvalidArgument, "gap after existing");
  expect_fail({1, 0}, {2, 4}, ErrorCode::InvalidArgument, "one good, one stale");
  expect_fail({2, 1, 1}, {0, 2, 2}, ErrorCode::InvalidArgument, "new seq, then repeat");
  // After every failure the sequences continue normally.
  ASSERT_TRUE(h.append({{0, 3}, {1, 1}, {2, 4}}).has_value());
  EXPECT_EQ(h.verify("continued"), 0);
}

TEST(PagedKvCache, ContextLimit) {
  KvConfig c = small_config();
  c.n_ctx = 6;
  Harness h(c);
  ASSERT_TRUE(h.kv);
  ASSERT_TRUE(h.append({{0, 4}}).has_value());
  const int64_t alloc = h.kv->allocated_bytes();
  // A batch that would cross the limit fails as a whole.
  Status st = h.kv->begin_batch(std::vector<int32_t>{0, 0, 0}, std::vector<int32_t>{4, 5, 6});
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(h.kv->seq_length(0), 4);
  EXPECT_EQ(h.kv->allocated_bytes(), alloc);
  EXPECT_EQ(h.verify("after crossing batch"), 0);
  // Mixed with another sequence's valid tokens: still nothing happens.
  st = h.kv->begin_batch(std::vector<int32_t>{1, 0, 0, 0}, std::vector<int32_t>{0, 4, 5, 6});
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(h.kv->seq_length(1), 0);
  EXPECT_EQ(h.verify("after mixed crossing batch"), 0);
  ASSERT_TRUE(h.append({{0, 2}}).has_value());  // exactly n_ctx
  EXPECT_EQ(h.kv->seq_length(0), 6);
  st = h.kv->begin_batch(std::vector<int32_t>{0}, std::vector<int32_t>{6});
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(h.verify("full"), 0);
  // Other sequences have their own context.
  ASSERT_TRUE(h.append({{1, 6}, {2, 6}}).has_value());
  EXPECT_EQ(h.verify("all full"), 0);
}

void write_read_across_blocks(DType type) {
  Harness h(small_config(type), type == DType::F16 ? 11 : 12);
  ASSERT_TRUE(h.kv);
  int step = 0;
  for (const int n : {1, 3, 5, 2, 7, 1, 4}) {  // 23 tokens, crossing block edges at odd offsets
    ASSERT_TRUE(h.append({{0, n}}).has_value()) << "step " << step;
    EXPECT_EQ(h.verify("step " + std::to_string(step++)), 0);
  }
  EXPECT_EQ(h.kv->seq_length(0), 23);
  EXPECT_EQ(h.kv->block_table(0).size(), 6u);
  EXPECT_EQ(h.kv->allocated_bytes(), 6 * h.bb());
}

TEST(PagedKvCache, WriteReadF16AcrossBlocksAndLayers) { write_read_across_blocks(DType::F16); }
TEST(PagedKvCache, WriteReadF32AcrossBlocksAndLayers) { write_read_across_blocks(DType::F32); }

TEST(PagedKvCache, F16StoresRoundedValues) {
  KvConfig c = small_config(DType::F16);
  c.n_layer = 1;
  c.n_head_kv = 1;
  c.head_dim = 6;
  auto r = PagedKvCache::create(c);
  ASSERT_TRUE(r.has_value());
  auto& kv = **r;
  ASSERT_TRUE(kv.begin_batch(std::vector<int32_t>{0}, std::vector<int32_t>{0}).has_value());
  const float k[6] = {1.0f, -2.5f, 1.0f + 1.0f / 4096.0f, 65504.0f, 1e6f, 6e-8f};
  const float v[6] = {0.0f, -0.0f, 0.333333f, -65520.0f, 3.0f / 2048.0f, 0.1f};
  kv.write(0, 0, k, v);
  const auto* kh = static_cast<const uint16_t*>(kv.k_block(0, kv.block_table(0)[0]));
  const auto* vh = static_cast<const uint16_t*>(kv.v_block(0, kv.block_table(0)[0]));
  const uint16_t want_k[6] = {0x3c00, 0xc100, 0x3c00, 0x7bff, 0x7c00, 0x0001};
  const uint16_t want_v[6] = {0x0000, 0x8000, 0x3555, 0xfc00, 0x1600, 0x2e66};
  for (int j = 0; j < 6; ++j) {
    EXPECT_EQ(kh[j], want_k[j]) << j;
    EXPECT_EQ(vh[j], want_v[j]) << j;
  }
}

TEST(PagedKvCache, LayerAndBlockStorageDoesNotOverlap) {
  Harness h(small_config(DType::F32));
  ASSERT_TRUE(h.kv);
  ASSERT_TRUE(h.append({{0, 9}, {1, 5}, {2, 1}}).has_value());
  const size_t plane = h.row_elems() * 4 * static_cast<size_t>(h.cfg.block_size);
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  std::set<int32_t> blocks;
  for (int32_t s = 0; s < h.cfg.n_seq_max; ++s) {
    for (const int32_t b : h.kv->block_table(s)) blocks.insert(b);
  }
  EXPECT_EQ(blocks.size(), 3u + 2u + 1u);  // no block shared between unrelated sequences
  for (const int32_t b : blocks) {
    for (int32_t l = 0; l < h.cfg.n_layer; ++l) {
      for (const void* p : {h.kv->k_block(l, b), h.kv->v_block(l, b)}) {
        const auto a = reinterpret_cast<uintptr_t>(p);
        ranges.emplace_back(a, a + plane);
      }
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first) << i;
  EXPECT_EQ(h.verify("layout"), 0);
}

TEST(PagedKvCache, TwoSequencesInterleavedInOneBatch) {
  Harness h(small_config(), 21);
  ASSERT_TRUE(h.kv);
  ASSERT_TRUE(h.append({{0, 6}, {1, 6}}).has_value());  // 0,1,0,1,...
  EXPECT_EQ(h.verify("interleaved 1"), 0);
  ASSERT_TRUE(h.append({{1, 3}, {0, 1}, {2, 5}}).has_value());
  EXPECT_EQ(h.verify("interleaved 2"), 0);
  // An explicitly irregular order: 2, 0, 0, 1, 2, 0.
  const std::vector<int32_t> ids = {2, 0, 0, 1, 2, 0};
  const std::vector<int32_t> pos = {5, 7, 8, 9, 6, 9};
  ASSERT_TRUE(h.append_explicit(ids, pos).has_value());
  EXPECT_EQ(h.verify("irregular"), 0);
  EXPECT_EQ(h.kv->seq_length(0), 10);
  EXPECT_EQ(h.kv->seq_length(1), 10);
  EXPECT_EQ(h.kv->seq_length(2), 7);
}

TEST(PagedKvCache, ConcurrentWritesOfDifferentTokens) {
  KvConfig c = small_config(DType::F16);
  c.n_ctx = 64;
  c.head_dim = 16;
  auto r = PagedKvCache::create(c);
  ASSERT_TRUE(r.has_value());
  auto& kv = **r;
  constexpr int kTokens = 37;
  std::vector<int32_t> ids(kTokens, 0), pos(kTokens);
  for (int i = 0; i < kTokens; ++i) pos[static_cast<size_t>(i)] = i;
  ASSERT_TRUE(kv.begin_batch(ids, pos).has_value());
  const size_t n = static_cast<size_t>(c.n_head_kv * c.head_dim);
  auto value = [](int layer, int token, size_t j, bool v) {
    return static_cast<float>(layer * 1000 + token * 10) + static_cast<float>(j) * 0.25f + (v ? 0.5f : 0.0f);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> k(n), v(n);
      for (int i = t; i < kTokens; i += 4) {
        for (int l = 0; l < c.n_layer; ++l) {
          for (size_t j = 0; j < n; ++j) {
            k[j] = value(l, i, j, false);
            v[j] = value(l, i, j, true);
          }
          kv.write(l, i, k.data(), v.data());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto table = kv.block_table(0);
  int64_t bad = 0;
  for (int i = 0; i < kTokens; ++i) {
    const int32_t b = table[static_cast<size_t>(i / c.block_size)];
    for (int l = 0; l < c.n_layer; ++l) {
      const auto* kh = static_cast<const uint16_t*>(kv.k_block(l, b)) + static_cast<size_t>(i % c.block_size) * n;
      const auto* vh = static_cast<const uint16_t*>(kv.v_block(l, b)) + static_cast<size_t>(i % c.block_size) * n;
      for (size_t j = 0; j < n; ++j) {
        if (kh[j] != f32_to_fp16(value(l, i, j, false))) ++bad;
        if (vh[j] != f32_to_fp16(value(l, i, j, true))) ++bad;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(PagedKvCache, TruncateFreesAndReusesBlocks) {
  Harness h(small_config(), 31);
  ASSERT_TRUE(h.kv);
  ASSERT_TRUE(h.append({{0, 20}}).has_value());  // 5 blocks
  EXPECT_EQ(h.kv->allocated_bytes(), 5 * h.bb());
  h.truncate(0, 9);  // keeps 3 blocks, the last one partial
  EXPECT_EQ(h.kv->seq_length(0), 9);
  EXPECT_EQ(h.kv->block_table(0).size(), 3u);
  EXPECT_EQ(h.verify("truncated to 9"), 0);
  ASSERT_TRUE(h.append({{0, 11}}).has_value());  // overwrite 9..11 in the partial block, refill
  EXPECT_EQ(h.kv->allocated_bytes(), 5 * h.bb()) << "refill after truncate must reuse freed blocks";
  EXPECT_EQ(h.verify("refilled"), 0);

  h.truncate(0, 0);
  EXPECT_TRUE(h.kv->block_table(0).empty());
  ASSERT_TRUE(h.append({{1, 20}}).has_value());  // another sequence gets the freed blocks
  EXPECT_EQ(h.kv->allocated_bytes(), 5 * h.bb());
  EXPECT_EQ(h.verify("other seq reuses"), 0);

  // Degenerate arguments.
  h.truncate(1, 100);  // beyond the end: nothing
  EXPECT_EQ(h.kv->seq_length(1), 20);
  h.truncate(1, 20);
  EXPECT_EQ(h.kv->seq_length(1), 20);
  h.truncate(-1, 0);  // bad ids: ignored
  h.truncate(3, 0);
  EXPECT_EQ(h.verify("degenerate"), 0);
  h.truncate(1, -5);  // negative: everything
  EXPECT_EQ(h.kv->seq_length(1), 0);
  EXPECT_EQ(h.verify("negative p0"), 0);
  // Truncating exactly at a block boundary keeps whole blocks only.
  ASSERT_TRUE(h.append({{2, 10}}).has_value());
  h.truncate(2, 8);
  EXPECT_EQ(h.kv->block_table(2).size(), 2u);
  ASSERT_TRUE(h.append({{2, 12}}).has_value());
  EXPECT_EQ(h.kv->allocated_bytes(), 5 * h.bb());
  EXPECT_EQ(h.verify("block boundary"), 0);
}

TEST(PagedKvCache, CopyPrefixSharesBlocksAndCopiesOnWrite) {
  Harness h(small_config(), 41);
  ASSERT_TRUE(h.kv);
  ASSERT_TRUE(h.append({{0, 10}}).has_value());  // blocks: [0-3][4-7][8-9..]
  const int64_t alloc = h.kv->allocated_bytes();
  ASSERT_EQ(alloc, 3 * h.bb());

  ASSERT_TRUE(h.copy_prefix(0, 1, 8).has_value());  // whole blocks
  ASSERT_TRUE(h.copy_prefix(0, 2, 10).has_value());  // shares the partial tail block
  EXPECT_EQ(h.kv->allocated_bytes(), alloc) << "copy_prefix must share, not copy";
  {
    const auto t0 = h.kv->block_table(0);
    const auto t1 = h.kv->block_table(1);
    const auto t2 = h.kv->block_table(2);
    ASSERT_EQ(t1.size(), 2u);
    ASSERT_EQ(t2.size(), 3u);
    EXPECT_TRUE(std::equal(t1.begin(), t1.end(), t0.begin()));
    EXPECT_TRUE(std::equal(t2.begin(), t2.end(), t0.begin()));
  }
  EXPECT_EQ(h.verify("after copies"), 0);

  // dst writes into the shared tail block: it gets its own copy; src keeps its data.
  ASSERT_TRUE(h.append({{2, 1}}).has_value());
  EXPECT_EQ(h.kv->allocated_bytes(), alloc + h.bb());
  EXPECT_NE(h.kv->block_table(2)[2], h.kv->block_table(0)[2]);
  EXPECT_EQ(h.kv->block_table(2)[1], h.kv->block_table(0)[1]);  // full blocks stay shared
  EXPECT_EQ(h.verify("dst wrote shared tail"), 0);
  // src now writes its (no longer shared) tail in place.
  ASSERT_TRUE(h.append({{0, 2}}).has_value());
  EXPECT_EQ(h.kv->allocated_bytes(), alloc + h.bb());
  EXPECT_EQ(h.verify("src wrote its tail"), 0);
  // Seq 1 (8 tokens, whole blocks) appends into a new block: no copy of shared blocks.
  ASSERT_TRUE(h.append({{1, 3}}).has_value());
  EXPECT_EQ(h.kv->allocated_bytes(), alloc + 2 * h.bb());
  EXPECT_EQ(h.kv->block_table(1)[1], h.kv->block_table(0)[1]);
  EXPECT_EQ(h.verify("seq 1 appended"), 0);
}

TEST(PagedKvCache, CopyOnWriteWhenSourceWritesSharedTail) {
  Harness h(small_config(DType::F32), 42);
  ASSERT_TRUE(h.kv);
  ASSERT_TRUE(h.append({{0, 6}}).has_value());
  ASSERT_TRUE(h.copy_prefix(0, 1, 6).has_value());
  EXPECT_EQ(h.kv->allocated_bytes(), 2 * h.bb());
  ASSERT_TRUE(h.append({{0, 1}}).has_value());  // src writes pos 6 into the shared block
  EXPECT_EQ(h.kv->allocated_bytes(), 3 * h.bb());
  EXPECT_NE(h.kv->block_table(0)[1], h.kv->block_table(1)[1]);
  EXPECT_EQ(h.verify("src wrote shared tail"), 0);
  ASSERT_TRUE(h.append({{1, 2}}).has_value());  // dst writes 6, 7 in place now
  EXPECT_EQ(h.kv->allocated_bytes(), 3 * h.bb());
  EXPECT_EQ(h.verify("dst wrote its tail"), 0);
}

TEST(PagedKvCache, CopyPrefixInTheMiddleOfABlock) {
  Harness h(small_config(), 43);
  ASSERT_TRUE(h.kv);
  ASSERT_TRUE(h.append({{0, 12}}).has_value());
  ASSERT_TRUE(h.copy_prefix(0, 1, 6).has_value());  // block 1 holds src's 4..7, dst uses 4..5
  EXPECT_EQ(h.kv->seq_length(1), 6);
  EXPECT_EQ(h.kv->block_table(1).size(), 2u);
  EXPECT_EQ(h.kv->allocated_bytes(), 3 * h.bb());
  EXPECT_EQ(h.verify("mid-block copy"), 0);
  ASSERT_TRUE(h.append({{1, 4}}).has_value());  // dst overwrites rows 6, 7 of its block 1 copy, then new block
  EXPECT_EQ(h.verify("dst continued past mid-block"), 0);  // src's 6, 7 intact
  EXPECT_EQ(h.kv->allocated_bytes(), 5 * h.bb());
  // Truncating src into a shared block and writing there copies too.
  ASSERT_TRUE(h.copy_prefix(0, 2, 12).has_value());
  h.truncate(0, 1);
  ASSERT_TRUE(h.append({{0, 5}}).has_value());
  EXPECT_EQ(h.verify("src rewrote shared blocks"), 0);
}

TEST(PagedKvCache, CopyPrefixArguments) {
  Harness h(small_config(), 44);
  ASSERT_TRUE(h.kv);
  ASSERT_TRUE(h.append({{0, 7}, {1, 9}}).has_value());
  EXPECT_EQ(h.kv->copy_prefix(-1, 1, 3).error().code, ErrorCode::InvalidArgument);
  EXPECT_EQ(h.kv->copy_prefix(0, 3, 3).error().code, ErrorCode::InvalidArgument);
  EXPECT_EQ(h.verify("bad ids"), 0);
  const int64_t alloc = h.kv->allocated_bytes();
  ASSERT_TRUE(h.copy_prefix(0, 2, 100).has_value());  // clamps to src length
  EXPECT_EQ(h.kv->seq_length(2), 7);
  ASSERT_TRUE(h.copy_prefix(0, 1, 5).has_value());  // dst's own 9 tokens are replaced
  EXPECT_EQ(h.kv->seq_length(1), 5);
  EXPECT_EQ(h.verify("replaced dst"), 0);
  EXPECT_LE(h.kv->allocated_bytes(), alloc);
  ASSERT_TRUE(h.copy_prefix(1, 1, 3).has_value());  // src == dst: truncation
  EXPECT_EQ(h.kv->seq_length(1), 3);
  ASSERT_TRUE(h.copy_prefix(0, 2, -4).has_value());  // negative: empty
  EXPECT_EQ(h.kv->seq_length(2), 0);
  EXPECT_EQ(h.verify("arguments"), 0);
  // Blocks dropped by the replaced dst went back to the pool.
  ASSERT_TRUE(h.append({{1, 9}, {2, 9}}).has_value());
  EXPECT_EQ(h.verify("refill"), 0);
  EXPECT_LE(h.kv->allocated_bytes(), 2 * 3 * h.bb() + 2 * h.bb());
}

TEST(PagedKvCache, BudgetFullFailsWithoutPartialEffects) {
  KvConfig c = small_config();
  c.n_ctx = 64;
  c.max_bytes = 3 * block_bytes_of(c);
  Harness h(c, 51);
  ASSERT_TRUE(h.kv);
  EXPECT_EQ(h.kv->budget_bytes(), 3 * h.bb());
  ASSERT_TRUE(h.append({{0, 12}}).has_value());
  EXPECT_EQ(h.kv->allocated_bytes(), 3 * h.bb());
  Status st = h.kv->begin_batch(std::vector<int32_t>{0}, std::vector<int32_t>{12});
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(h.verify("budget full"), 0);
  // Several sequences: the whole batch fails, including the part that would fit on its own.
  h.truncate(0, 6);  // frees one block
  st = h.kv->begin_batch(std::vector<int32_t>{1, 0, 0, 0}, std::vector<int32_t>{0, 6, 7, 8});
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(h.kv->seq_length(1), 0);
  EXPECT_TRUE(h.kv->block_table(1).empty());
  EXPECT_EQ(h.kv->seq_length(0), 6);
  EXPECT_EQ(h.kv->block_table(0).size(), 2u);
  EXPECT_EQ(h.kv->allocated_bytes(), 3 * h.bb());
  EXPECT_EQ(h.verify("multi-seq budget failure"), 0);
  // Each part alone fits, one after another.
  ASSERT_TRUE(h.append({{1, 4}}).has_value());
  EXPECT_EQ(h.verify("seq 1 took the free block"), 0);
  ASSERT_TRUE(h.append({{0, 2}}).has_value());  // fills seq 0's partial block: no new block
  EXPECT_FALSE(h.append({{0, 1}}).has_value());
  EXPECT_EQ(h.kv->allocated_bytes(), 3 * h.bb());
  EXPECT_EQ(h.verify("budget exact"), 0);
}

TEST(PagedKvCache, BudgetCountsCopyOnWrite) {
  KvConfig c = small_config();
  c.max_bytes = 2 * block_bytes_of(c);
  Harness h(c, 52);
  ASSERT_TRUE(h.kv);
  ASSERT_TRUE(h.append({{0, 6}}).has_value());
  ASSERT_TRUE(h.copy_prefix(0, 1, 6).has_value());
  const std::vector<int32_t> table1(h.kv->block_table(1).begin(), h.kv->block_table(1).end());
  // dst's next token needs a private copy of the shared tail block: over budget.
  Status st = h.kv->begin_batch(std::vector<int32_t>{1}, std::vector<int32_t>{6});
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().code, ErrorCode::OutOfRange);
  EXPECT_TRUE(std::equal(table1.begin(), table1.end(), h.kv->block_table(1).begin()));
  EXPECT_EQ(h.verify("cow over budget"), 0);
  // Once src lets go, dst owns the blocks alone and writes in place.
  h.truncate(0, 0);
  ASSERT_TRUE(h.append({{1, 2}}).has_value());
  EXPECT_EQ(h.kv->allocated_bytes(), 2 * h.bb());
  EXPECT_EQ(h.verify("dst alone"), 0);
}

// Two sequences share one partial tail block and both extend it in the same batch: the first
// gets a private copy, after which the second is the sole owner and writes in place. Only one
// block is needed, and one is free, so the batch must succeed.
TEST(PagedKvCache, SharedTailExtendedByBothSharersNeedsOneCopy) {
  KvConfig c = small_config();
  c.max_bytes = 2 * block_bytes_of(c);
  Harness h(c, 53);
  ASSERT_TRUE(h.kv);
  ASSERT_TRUE(h.append({{0, 2}}).has_value());  // one block
  ASSERT_TRUE(h.copy_prefix(0, 1, 2).has_value());
  EXPECT_EQ(h.kv->allocated_bytes(), h.bb());
  Status st = h.append({{0, 1}, {1, 1}});
  EXPECT_TRUE(st.has_value()) << "needs 1 block, 1 of 2 free: " << st.error().to_string();
  if (st) {
    EXPECT_EQ(h.kv->allocated_bytes(), 2 * h.bb());
    EXPECT_EQ(h.verify("both extended"), 0);
  }
}

TEST(PagedKvCache, ClearForgetsEverythingAndKeepsStorage) {
  Harness h(small_config(), 61);
  ASSERT_TRUE(h.kv);
  ASSERT_TRUE(h.append({{0, 9}, {1, 5}}).has_value());
  ASSERT_TRUE(h.copy_prefix(0, 2, 7).has_value());
  const int64_t alloc = h.kv->allocated_bytes();
  h.clear();
  for (int32_t s = 0; s < h.cfg.n_seq_max; ++s) {
    EXPECT_EQ(h.kv->seq_length(s), 0);
    EXPECT_TRUE(h.kv->block_table(s).empty());
  }
  EXPECT_EQ(h.verify("cleared"), 0);
  // Positions restart at 0; the old ones are rejected.
  EXPECT_FALSE(h.kv->begin_batch(std::vector<int32_t>{0}, std::vector<int32_t>{9}).has_value());
  ASSERT_TRUE(h.append({{2, 9}, {0, 5}}).has_value());
  EXPECT_EQ(h.kv->allocated_bytes(), alloc) << "refill after clear must reuse blocks";
  EXPECT_EQ(h.verify("refilled after clear"), 0);
  h.clear();
  h.clear();  // twice is fine
  EXPECT_EQ(h.verify("cleared twice"), 0);
}

// Random sequences of operations against the shadow model, with a budget tight enough that
// begin_batch sometimes fails (and then must have changed nothing).
TEST(PagedKvCache, RandomOperationsMatchShadow) {
  for (const DType type : {DType::F16, DType::F32}) {
    KvConfig c = small_config(type);
    c.n_layer = 2;
    c.n_seq_max = 4;
    c.n_ctx = 30;
    c.block_size = 3;
    c.max_bytes = 14 * block_bytes_of(c);
    Harness h(c, type == DType::F16 ? 71 : 72);
    ASSERT_TRUE(h.kv);
    auto rng = make_rng(type == DType::F16 ? 73 : 74);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    int failures = 0;
    for (int step = 0; step < 600; ++step) {
      const int op = pick(0, 99);
      const std::string where = "step " + std::to_string(step) + " op " + std::to_string(op);
      if (op < 55) {
        std::vector<std::pair<int32_t, int32_t>> sc;
        for (int32_t s = 0; s < c.n_seq_max; ++s) {
          if (pick(0, 2) == 0) sc.emplace_back(s, pick(1, 5));
        }
        const int64_t alloc = h.kv->allocated_bytes();
        Status st = h.append(sc);
        if (!st) {
          ++failures;
          EXPECT_EQ(st.error().code, ErrorCode::OutOfRange) << where << ": " << st.error().to_string();
          EXPECT_EQ(h.kv->allocated_bytes(), alloc) << where;
        }
      } else if (op < 75) {
        const int32_t s = pick(0, c.n_seq_max - 1);
        h.truncate(s, pick(-1, static_cast<int>(h.shadow[static_cast<size_t>(s)].size()) + 1));
      } else if (op < 97) {
        const int32_t src = pick(0, c.n_seq_max - 1);
        const int32_t dst = pick(0, c.n_seq_max - 1);
        ASSERT_TRUE(h.copy_prefix(src, dst, pick(0, static_cast<int>(h.shadow[static_cast<size_t>(src)].size()) + 2))
                        .has_value());
      } else {
        h.clear();
      }
      EXPECT_LE(h.kv->allocated_bytes(), h.kv->budget_bytes()) << where;
      ASSERT_EQ(h.verify(where), 0);
    }
    EXPECT_GT(failures, 0) << "budget never reached: the test lost its teeth";
  }
}

}  // namespace
}  // namespace geniex::kv
