// ThreadPool: every thread runs once per run, barriers publish each phase's writes, split_range
// partitions exactly, and oversubscribed / idle pools still work (the sleep paths).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <set>
#include <thread>
#include <vector>

#include "core/thread_pool.hpp"
#include "core_test_seed.hpp"

namespace geniex {
namespace {

// One cache line per thread so that the counters do not share lines.
struct alignas(64) PaddedCount {
  int64_t value = 0;
};

TEST(ThreadPool, SizeIsClampedToAtLeastOne) {
  EXPECT_EQ(ThreadPool(0).size(), 1);
  EXPECT_EQ(ThreadPool(-3).size(), 1);
  EXPECT_EQ(ThreadPool(1).size(), 1);
  EXPECT_EQ(ThreadPool(4).size(), 4);
}

TEST(ThreadPool, RunCallsEveryIthExactlyOncePerRun) {
  for (const int n : {1, 2, 3, 5}) {
    SCOPED_TRACE("pool size " + std::to_string(n));
    ThreadPool pool(n);
    ASSERT_EQ(pool.size(), n);
    std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
    std::vector<std::thread::id> ids(static_cast<size_t>(n));
    std::atomic<int> bad_nth{0}, bad_ith{0}, bad_caller{0};
    const auto caller = std::this_thread::get_id();
    constexpr int kRuns = 150;
    for (int r = 0; r < kRuns; ++r) {
      for (auto& c : calls) c.store(0);
      pool.run([&](int ith, int nth) {
        if (nth != n) bad_nth.fetch_add(1);
        if (ith < 0 || ith >= n) {
          bad_ith.fetch_add(1);
          return;
        }
        if (ith == 0 && std::this_thread::get_id() != caller) bad_caller.fetch_add(1);
        ids[static_cast<size_t>(ith)] = std::this_thread::get_id();
        calls[static_cast<size_t>(ith)].fetch_add(1);
      });
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(calls[static_cast<size_t>(i)].load(), 1) << "run " << r << " ith " << i;
      }
      // Each ith ran on its own thread.
      std::set<std::thread::id> distinct(ids.begin(), ids.end());
      ASSERT_EQ(distinct.size(), static_cast<size_t>(n)) << "run " << r;
    }
    EXPECT_EQ(bad_nth.load(), 0);
    EXPECT_EQ(bad_ith.load(), 0);
    EXPECT_EQ(bad_caller.load(), 0);
  }
}

// Each phase: every thread writes its own slice of plain (non-atomic) memory, barrier, then
// reads every other thread's slice and checks it; a second barrier keeps the next phase's
// writes from racing with this phase's reads. The caller's writes before run() and the
// workers' writes of the last phase must also be visible across run boundaries.
// At most `runs` runs, stopping early after `max_ms` (a loaded machine makes an oversubscribed
// barrier cost a futex sleep; the binary must stay within seconds under ASan).
void barrier_stress(int n, int runs, int phases, int max_ms) {
  SCOPED_TRACE("pool size " + std::to_string(n) + ", runs " + std::to_string(runs));
  ThreadPool pool(n);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(max_ms);
  int done = 0;
  constexpr int kSlice = 16;
  const int kPhases = phases;
  std::vector<int64_t> data(static_cast<size_t>(n * kSlice), -1);
  std::vector<PaddedCount> errors(static_cast<size_t>(n));
  int64_t input = -1;
  auto value = [](int64_t run, int phase, int ith, int k) {
    return ((run * 7 + phase) * 131 + ith) * 64 + k;
  };
  for (int r = 0; r < runs; ++r) {
    if (r % 64 == 63 && std::chrono::steady_clock::now() > deadline) break;
    ++done;
    input = r;  // written by the caller before run(): every worker must see it
    pool.run([&](int ith, int nth) {
      int64_t& err = errors[static_cast<size_t>(ith)].value;
      if (input != r) ++err;
      for (int p = 0; p < kPhases; ++p) {
        for (int k = 0; k < kSlice; ++k) data[static_cast<size_t>(ith * kSlice + k)] = value(r, p, ith, k);
        pool.barrier();
        for (int j = 0; j < nth; ++j) {
          for (int k = 0; k < kSlice; ++k) {
            if (data[static_cast<size_t>(j * kSlice + k)] != value(r, p, j, k)) ++err;
          }
        }
        pool.barrier();
      }
      // Last write of the run, read by the caller after run() returns.
      data[static_cast<size_t>(ith * kSlice)] = value(r, kPhases, ith, 0);
    });
    for (int j = 0; j < n; ++j) {
      if (data[static_cast<size_t>(j * kSlice)] != value(r, kPhases, j, 0)) ++errors[0].value;
    }
  }
  int64_t total = 0;
  for (const auto& e : errors) total += e.value;
  EXPECT_EQ(total, 0);
  std::cout << "[          ] " << done << " runs of " << n << " threads\n";
}

TEST(ThreadPool, BarrierPublishesPhaseWrites_2Threads_10kRuns) { barrier_stress(2, 10000, 2, 2000); }
TEST(ThreadPool, BarrierPublishesPhaseWrites_3Threads) { barrier_stress(3, 1500, 3, 1500); }
TEST(ThreadPool, BarrierPublishesPhaseWrites_5Threads) { barrier_stress(5, 600, 3, 1500); }

// A barrier counts arrivals: no thread may leave before the slowest arrives, even when some
// threads have gone to sleep on the barrier (one thread is deliberately late).
TEST(ThreadPool, BarrierWaitsForLateThread) {
  for (const int n : {2, 3, 5}) {
    SCOPED_TRACE("pool size " + std::to_string(n));
    ThreadPool pool(n);
    for (int r = 0; r < 5; ++r) {
      std::atomic<int> arrived{0};
      std::atomic<int> early{0};
      const int late = r % n;
      pool.run([&](int ith, int nth) {
        if (ith == late) std::this_thread::sleep_for(std::chrono::milliseconds(3));
        arrived.fetch_add(1);
        pool.barrier();
        if (arrived.load() != nth) early.fetch_add(1);
      });
      EXPECT_EQ(early.load(), 0) << "run " << r;
    }
  }
}

// run() must not return before a slow worker finishes (the caller sleeps on pending_).
TEST(ThreadPool, RunWaitsForSlowWorker) {
  ThreadPool pool(3);
  for (int r = 0; r < 5; ++r) {
    std::atomic<int> done{0};
    pool.run([&](int ith, int) {
      if (ith == 2) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      done.fetch_add(1);
    });
    EXPECT_EQ(done.load(), 3);
  }
}

// Workers that have gone to sleep between runs are woken by the next run.
TEST(ThreadPool, WakesSleepingWorkersBetweenRuns) {
  ThreadPool pool(3);
  for (int r = 0; r < 10; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // well past the idle spin
    std::atomic<int> mask{0};
    pool.run([&](int ith, int) { mask.fetch_or(1 << ith); });
    EXPECT_EQ(mask.load(), 0b111) << "run " << r;
  }
}

TEST(ThreadPool, MoreThreadsThanCoresCompletes) {
  const unsigned hc = std::max(1u, std::thread::hardware_concurrency());
  const int n = static_cast<int>(std::min(3u * hc + 1u, 64u));
  ThreadPool pool(n);
  ASSERT_EQ(pool.size(), n);
  std::vector<PaddedCount> counts(static_cast<size_t>(n));
  constexpr int kRuns = 60;
  std::atomic<int> bad{0};
  for (int r = 0; r < kRuns; ++r) {
    pool.run([&](int ith, int nth) {
      ++counts[static_cast<size_t>(ith)].value;
      pool.barrier();
      // After the barrier every thread has counted this run.
      for (int j = 0; j < nth; ++j) {
        if (counts[static_cast<size_t>(j)].value != r + 1) bad.fetch_add(1);
      }
      pool.barrier();
    });
  }
  for (int i = 0; i < n; ++i) EXPECT_EQ(counts[static_cast<size_t>(i)].value, kRuns);
  EXPECT_EQ(bad.load(), 0);
}

TEST(ThreadPool, DestructionWhileIdle) {
  for (int i = 0; i < 20; ++i) {
    { ThreadPool never_run(3); }  // workers never got a job
    {
      ThreadPool spinning(3);  // destroyed right after a run, workers still spinning
      std::atomic<int> c{0};
      spinning.run([&](int, int) { c.fetch_add(1); });
      EXPECT_EQ(c.load(), 3);
    }
  }
  ThreadPool sleeping(4);
  std::atomic<int> c{0};
  sleeping.run([&](int, int) { c.fetch_add(1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // workers asleep on the cv
  EXPECT_EQ(c.load(), 4);
  // Destructor runs here and must wake and join them (the test would hang otherwise).
}

TEST(ThreadPool, SplitRangeCoversExactlyWithoutOverlap) {
  auto check = [](int64_t n, int nth) {
    int64_t expect_begin = 0;
    const int64_t max_chunk = (n + nth - 1) / nth;
    for (int ith = 0; ith < nth; ++ith) {
      int64_t b = -7, e = -7;
      ThreadPool::split_range(n, ith, nth, &b, &e);
      ASSERT_EQ(b, expect_begin) << "n=" << n << " nth=" << nth << " ith=" << ith;
      ASSERT_LE(b, e) << "n=" << n << " nth=" << nth << " ith=" << ith;
      ASSERT_LE(e, n) << "n=" << n << " nth=" << nth << " ith=" << ith;
      ASSERT_LE(e - b, max_chunk) << "n=" << n << " nth=" << nth << " ith=" << ith;
      expect_begin = e;
    }
    ASSERT_EQ(expect_begin, n) << "n=" << n << " nth=" << nth;
  };
  for (int64_t n = 0; n <= 300; ++n) {
    for (int nth = 1; nth <= 33; ++nth) check(n, nth);
  }
  auto rng = core_test::make_rng(0x5911u);
  std::uniform_int_distribution<int64_t> big(0, int64_t{1} << 40);
  std::uniform_int_distribution<int> threads(1, 256);
  for (int i = 0; i < 2000; ++i) check(big(rng), threads(rng));
  // Mark each element to be sure nothing is covered twice (and nothing missed).
  for (const int64_t n : {1, 7, 64, 1000, 1023}) {
    for (const int nth : {1, 2, 3, 5, 8, 64}) {
      std::vector<int> hits(static_cast<size_t>(n), 0);
      for (int ith = 0; ith < nth; ++ith) {
        int64_t b = 0, e = 0;
        ThreadPool::split_range(n, ith, nth, &b, &e);
        for (int64_t x = b; x < e; ++x) ++hits[static_cast<size_t>(x)];
      }
      for (int64_t x = 0; x < n; ++x) ASSERT_EQ(hits[static_cast<size_t>(x)], 1) << n << "/" << nth;
    }
  }
}

}  // namespace
}  // namespace geniex
