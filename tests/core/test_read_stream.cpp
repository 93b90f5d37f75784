// read_stream_sum reads every element once whatever the split into streams (sizes that do and
// do not divide into the streams' cache lines, clamped stream counts, with and without
// prefetch), and read_bandwidth measures a positive finite rate with any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "core/read_stream.hpp"
#include "core_test_seed.hpp"

namespace geniex {
namespace {

TEST(ReadStream, SumIsExactForEverySplit) {
  std::mt19937 rng = core_test::make_rng(0x5e1du);
  for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{63}, size_t{64}, size_t{129},
                         size_t{1000}, size_t{4096}, size_t{4096 + 13}, size_t{65536 + 511}}) {
    std::vector<uint64_t> data(n);
    for (uint64_t& v : data) v = (uint64_t{rng()} << 32) | rng();  // the sums wrap (mod 2^64)
    const uint64_t want = std::accumulate(data.begin(), data.end(), uint64_t{0});
    for (const int streams : {-3, 0, 1, 2, 3, 4, 5, 8, 16, 17, 100}) {
      for (const size_t ahead : {size_t{0}, size_t{64}, size_t{100}, size_t{2048}, size_t{1} << 20}) {
        EXPECT_EQ(read_stream_sum(data, streams, ahead), want) << "n " << n << " streams " << streams << " ahead " << ahead;
      }
    }
  }
}

TEST(ReadStream, SubspanSumsOnlyItsElements) {
  std::vector<uint64_t> data(10000);
  std::iota(data.begin(), data.end(), uint64_t{1});
  const std::span<const uint64_t> all(data);
  // 1001 + ... + 9000
  EXPECT_EQ(read_stream_sum(all.subspan(1000, 8000), 4, 2048), uint64_t{(1001 + 9000) * 8000 / 2});
}

TEST(ReadStream, BandwidthIsPositiveForAnyThreadCount) {
  std::vector<uint64_t> data(size_t{1} << 18, 1);  // 2 MiB
  for (const int threads : {-1, 0, 1, 2, 3}) {
    const double bw = read_bandwidth(data, threads, 2);
    EXPECT_TRUE(std::isfinite(bw)) << threads;
    EXPECT_GT(bw, 1e6) << threads;  // any machine reads 2 MiB faster than 1 MB/s
  }
  // An empty buffer reads in no time: no rate, not a division by zero.
  EXPECT_EQ(read_bandwidth(std::span<const uint64_t>(), 2, 2), 0.0);
}

}  // namespace
}  // namespace geniex
