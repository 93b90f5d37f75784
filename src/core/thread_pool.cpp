// Thread pool with spin-then-sleep waiting: workers spin briefly between runs (decode steps
// issue runs back to back), then sleep on a condition variable so an idle process costs nothing.
#include "core/thread_pool.hpp"

#include <system_error>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GX_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define GX_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define GX_CPU_RELAX() ((void)0)
#endif

namespace geniex {
namespace {
// ~0.3 ms of pause instructions while idle between runs; ~40 us inside a run.
constexpr int kSpinsBeforeSleep = 1 << 14;
constexpr int kBarrierSpins = 1 << 11;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  try {
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
  } catch (const std::system_error&) {
    // The system has no thread left to give: run with the workers that started. No run has
    // begun, and a worker reads the size only in a run, after the release that starts it.
    n_threads_ = static_cast<int>(workers_.size()) + 1;
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) wake_.notify_all();
  fn(0, n_threads_);
  int spins = 0;
  for (int left; (left = pending_.load(std::memory_order_acquire)) != 0;) {
    if (++spins < kBarrierSpins) {
      GX_CPU_RELAX();
      continue;
    }
    done_sleepers_.fetch_add(1);
    pending_.wait(left);
    done_sleepers_.fetch_sub(1);
  }
  job_ = nullptr;
}

void ThreadPool::worker_main(int ith) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    uint64_t gen;
    while ((gen = generation_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpinsBeforeSleep) {
        GX_CPU_RELAX();
        continue;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(ith, n_threads_);
    pending_.fetch_sub(1);
    if (done_sleepers_.load() > 0) pending_.notify_all();
  }
}

void ThreadPool::barrier() {
  if (n_threads_ == 1) return;
  const uint32_t phase = barrier_phase_.load(std::memory_order_acquire);
  if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == n_threads_ - 1) {
    barrier_count_.store(0, std::memory_order_relaxed);
    barrier_phase_.fetch_add(1);  // seq_cst: pairs with the sleepers' increment below
    if (barrier_sleepers_.load() > 0) barrier_phase_.notify_all();
    return;
  }
  for (int spins = 0; spins < kBarrierSpins; ++spins) {
    if (barrier_phase_.load(std::memory_order_acquire) != phase) return;
    GX_CPU_RELAX();
  }
  barrier_sleepers_.fetch_add(1);
  while (barrier_phase_.load() == phase) barrier_phase_.wait(phase);
  barrier_sleepers_.fetch_sub(1);
}

}  // namespace geniex
