// Repacking at load: one pass over each weight that a packed layout serves, split by rows
// over threads; then the original pages are dropped from this process with MADV_DONTNEED so
// resident memory stays one copy of the weights.
#include "backends/cpu/backend/weight_store.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <new>
#include <string>
#include <thread>

namespace geniex::backends {
namespace {

// Drops the whole pages of [data, data + bytes) from this process (file pages stay in the page
// cache; a later read maps them back).
void drop_pages(const uint8_t* data, size_t bytes, long page) {
  const auto p = static_cast<uintptr_t>(page);
  const auto begin = (reinterpret_cast<uintptr_t>(data) + p - 1) / p * p;
  const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) / p * p;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace

Result<std::shared_ptr<const CpuWeightStore>> CpuWeightStore::create(
    std::span<const graph::WeightRef* const> weights, int n_threads) {
  auto store = std::make_shared<CpuWeightStore>();
  const long page = ::sysconf(_SC_PAGESIZE);
  for (const graph::WeightRef* w : weights) {
    if (store->index_.count(w->data) != 0) continue;  // tied weights appear twice
    const cpu::PackedKernels* k = cpu::packed_kernels_for(w->type, w->ne[0], w->ne[1]);
    if (k == nullptr || w->ne[2] != 1 || w->ne[3] != 1) continue;
    std::unique_ptr<uint8_t[]> buf(new (std::nothrow) uint8_t[w->nbytes]);
    if (!buf) {
      return make_error(ErrorCode::OutOfMemory,
                        "cpu: cannot allocate " + std::to_string(w->nbytes) + " bytes to repack '" + w->name + "'");
    }
    // Rows in groups of 8, split over threads.
    const int64_t groups = w->ne[1] / 8;
    const size_t group_bytes = static_cast<size_t>(row_bytes(w->type, w->ne[0])) * 8;
    const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(n_threads, groups / 64 + 1)));
    std::vector<std::thread> pool;
    for (int t = 0; t < nt; ++t) {
      pool.emplace_back([&, t] {
        const int64_t g0 = groups * t / nt, g1 = groups * (t + 1) / nt;
        k->repack(w->data + static_cast<size_t>(g0) * group_bytes,
                           buf.get() + static_cast<size_t>(g0) * group_bytes, w->ne[0], (g1 - g0) * 8);
      });
    }
    for (auto& th : pool) th.join();
    drop_pages(w->data, w->nbytes, page);
    store->index_[w->data] = Packed{buf.get(), k};
    store->packed_bytes_ += static_cast<int64_t>(w->nbytes);
    store->buffers_.push_back(std::move(buf));
  }
  // Once more at the end: reading a tensor maps its neighbours' pages too (the kernel's fault-
  // around maps a whole aligned window of cached pages), including tensors dropped before.
  for (const graph::WeightRef* w : weights) {
    if (store->index_.count(w->data) != 0) drop_pages(w->data, w->nbytes, page);
  }
  return std::shared_ptr<const CpuWeightStore>(std::move(store));
}

const CpuWeightStore::Packed* CpuWeightStore::find(const void* original) const {
  auto it = index_.find(original);
  return it == index_.end() ? nullptr : &it->second;
}

}  // namespace geniex::backends
