#include "core/read_stream.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <thread>
#include <vector>

namespace geniex {

namespace {

constexpr int kMaxStreams = 16;
constexpr size_t kLine = 64 / sizeof(uint64_t);  // elements per cache line

// One cache line of each of S streams per step, eight lanes of sums per stream (which the
// compiler keeps in vector registers).
template <int S>
uint64_t sum_streams(const uint64_t* p, size_t part, size_t ahead) {
  std::array<std::array<uint64_t, kLine>, S> acc{};
  for (size_t i = 0; i + kLine <= part; i += kLine) {
    for (int s = 0; s < S; ++s) {
      const uint64_t* q = p + static_cast<size_t>(s) * part + i;
      if (ahead != 0 && i + ahead < part) __builtin_prefetch(q + ahead);
      for (size_t k = 0; k < kLine; ++k) acc[s][k] += q[k];
    }
  }
  uint64_t total = 0;
  for (const auto& lanes : acc) {
    for (const uint64_t v : lanes) total += v;
  }
  return total;
}

template <int S>
uint64_t sum_dispatch(const uint64_t* p, size_t part, size_t ahead, int streams) {
  if constexpr (S > 1) {
    if (streams < S) return sum_dispatch<S / 2>(p, part, ahead, streams);
  }
  return sum_streams<S>(p, part, ahead);
}

}  // namespace

uint64_t read_stream_sum(std::span<const uint64_t> data, int streams, size_t prefetch_bytes) {
  // Powers of two only, so that the dispatch has five instances.
  int s = 1;
  while (s * 2 <= std::clamp(streams, 1, kMaxStreams)) s *= 2;
  // Each part a whole number of cache lines; what is left over is summed plainly.
  const size_t part = data.size() / static_cast<size_t>(s) / kLine * kLine;
  const size_t ahead = prefetch_bytes / sizeof(uint64_t) / kLine * kLine;
  uint64_t total = part == 0 ? 0 : sum_dispatch<kMaxStreams>(data.data(), part, ahead, s);
  for (size_t i = part * static_cast<size_t>(s); i < data.size(); ++i) total += data[i];
  return total;
}

double read_bandwidth(std::span<const uint64_t> data, int threads, int passes) {
  using Clock = std::chrono::steady_clock;
  const auto n_threads = static_cast<size_t>(std::max(1, threads));
  constexpr size_t kAhead = 2048;  // bytes; 1-4 KiB read alike on the Intel VM
  std::vector<uint64_t> sums(n_threads * kLine);  // one cache line apart
  double best = 0;
  for (int pass = 0; pass <= std::max(1, passes); ++pass) {
    const bool multi = pass % 2 == 0;
    auto read = [&](size_t t) {
      const size_t begin = data.size() * t / n_threads, end = data.size() * (t + 1) / n_threads;
      sums[t * kLine] = read_stream_sum(data.subspan(begin, end - begin), multi ? 4 : 1, multi ? kAhead : 0);
    };
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (size_t t = 1; t < n_threads; ++t) pool.emplace_back(read, t);
    read(0);
    for (std::thread& th : pool) th.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (pass > 0 && s > 0) best = std::max(best, static_cast<double>(data.size_bytes()) / s);
  }
  // Keeps the sums, and so the reads, from being optimised away.
  uint64_t all = 0;
  for (const uint64_t v : sums) all += v;
  asm volatile("" : : "r"(all));
  return best;
}

}  // namespace geniex
