// Persistent worker threads: a run executes fn(ith, nth) on every thread, with barriers
// inside for phase changes (one op after another), in the style of ggml's graph compute.
// Every wait spins briefly (hand-offs between ops take microseconds) and then sleeps on a
// futex, so a thread that the OS preempted costs the others a sleep, not a burnt time slice.
#pragma once

#include <atomic>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace geniex {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(ith, nth) on all threads (the caller is thread 0) and returns when all are
  // done. Not reentrant: one run at a time per pool.
  void run(const std::function<void(int ith, int nth)>& fn);

  // Called by every thread of the current run; returns when all have arrived.
  void barrier();

  // Work handed out on demand inside one phase (units of uneven cost): one thread calls
  // reset_tickets() before a barrier, then after it every thread takes next_ticket() until the
  // values run past its unit count. The barrier orders the reset before every take.
  void reset_tickets() { tickets_.store(0, std::memory_order_relaxed); }
  int64_t next_ticket() { return tickets_.fetch_add(1, std::memory_order_relaxed); }

  // Splits [0, n) into nth nearly equal contiguous chunks; returns thread ith's chunk.
  static void split_range(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
    const int64_t chunk = (n + nth - 1) / nth;
    *begin = chunk * ith < n ? chunk * ith : n;
    *end = *begin + chunk < n ? *begin + chunk : n;
  }

 private:
  void worker_main(int ith);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  // barrier state
  std::atomic<int> barrier_count_{0};
  std::atomic<uint32_t> barrier_phase_{0};
  std::atomic<int> barrier_sleepers_{0};
  std::atomic<int> done_sleepers_{0};
  std::atomic<int64_t> tickets_{0};
};

}  // namespace geniex
