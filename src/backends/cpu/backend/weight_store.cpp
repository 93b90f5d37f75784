// Repacking at load: one pass over each weight that a packed layout serves, split by rows
// over threads, into one 2 MiB-aligned arena; then the original pages are dropped from this
// process with MADV_DONTNEED so resident memory stays one copy of the weights (where they are
// file pages: bytes in the heap or other anonymous memory are left alone).
#include "backends/cpu/backend/weight_store.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/log.hpp"

namespace geniex::backends {
namespace {

// The address ranges of this process's shared file mappings (/proc/self/maps: shared, with an
// inode), sorted: there MADV_DONTNEED only unmaps a page, and a later read maps the file's page
// back. Anywhere else (the heap, anonymous or private mappings: MappedFile::from_bytes's copy, a
// caller's own buffer) it would discard the bytes, so weights there keep their pages. Empty when
// /proc is not readable: then nothing is dropped.
using Ranges = std::vector<std::pair<uintptr_t, uintptr_t>>;
Ranges shared_file_ranges() {
  Ranges out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long start = 0, end = 0, offset = 0, inode = 0;
    char perms[8] = {}, dev[32] = {};
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %31s %llu", &start, &end, perms, &offset, dev, &inode) == 6 &&
        std::strlen(perms) == 4 && perms[3] == 's' && inode != 0) {
      out.emplace_back(static_cast<uintptr_t>(start), static_cast<uintptr_t>(end));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool inside(const Ranges& ranges, uintptr_t begin, uintptr_t end) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(begin, UINTPTR_MAX));
  if (it == ranges.begin()) return false;
  --it;
  return begin >= it->first && end <= it->second;
}

// Drops the whole pages of [data, data + bytes) from this process when they lie in a shared file
// mapping (file pages stay in the page cache; a later read maps them back).
void drop_pages(const Ranges& droppable, const uint8_t* data, size_t bytes, long page) {
  const auto p = static_cast<uintptr_t>(page);
  const auto begin = (reinterpret_cast<uintptr_t>(data) + p - 1) / p * p;
  const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) / p * p;
  if (end > begin && inside(droppable, begin, end)) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

constexpr size_t kHugePage = size_t{2} << 20;

bool huge_pages_enabled() {
  static const bool enabled = [] {
    const char* e = std::getenv("GENIEX_HUGEPAGES");
    return e == nullptr || std::string(e) != "0";
  }();
  return enabled;
}

}  // namespace

uint8_t* CpuWeightStore::map_2mib_aligned(int fd, size_t bytes, int prot) {
  // A reservation 2 MiB longer, the mapping placed over its first 2 MiB boundary, the rest of
  // the reservation given back.
  void* raw = ::mmap(nullptr, bytes + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto raw_addr = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t addr = (raw_addr + kHugePage - 1) / kHugePage * kHugePage;
  const int flags = fd < 0 ? MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED : MAP_SHARED | MAP_FIXED;
  void* p = ::mmap(reinterpret_cast<void*>(addr), bytes, prot, flags, fd, 0);
  if (p == MAP_FAILED) {
    ::munmap(raw, bytes + kHugePage);
    return nullptr;
  }
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t end = addr + (bytes + page - 1) / page * page;
  if (addr > raw_addr) ::munmap(raw, addr - raw_addr);
  if (raw_addr + bytes + kHugePage > end) ::munmap(reinterpret_cast<void*>(end), raw_addr + bytes + kHugePage - end);
  return static_cast<uint8_t*>(p);
}

int64_t CpuWeightStore::advise_huge_pages(uint8_t* base, size_t bytes) {
#if defined(MADV_HUGEPAGE)
  const size_t whole = bytes / kHugePage * kHugePage;
  if (huge_pages_enabled() && whole > 0 && ::madvise(base, whole, MADV_HUGEPAGE) == 0) {
    return static_cast<int64_t>(whole);
  }
#else
  (void)base;
  (void)bytes;
#endif
  return 0;
}

CpuWeightStore::Arena::~Arena() {
  if (base != nullptr) ::munmap(base, bytes);
}

CpuWeightStore::Plan CpuWeightStore::plan(std::span<const graph::WeightRef* const> weights) {
  Plan out;
  std::unordered_set<const void*> seen;
  for (const graph::WeightRef* w : weights) {
    if (!seen.insert(w->data).second) continue;  // tied weights appear twice
    const cpu::PackedKernels* k = cpu::packed_kernels_for(w->type, w->ne[0], w->ne[1]);
    if (k == nullptr || w->ne[2] != 1 || w->ne[3] != 1) continue;
    out.items.push_back({w, k, out.bytes});
    out.bytes += (w->nbytes + 63) / 64 * 64;
  }
  return out;
}

void CpuWeightStore::repack_into(const Plan& plan, uint8_t* base, int n_threads) {
  const long page = ::sysconf(_SC_PAGESIZE);
  const Ranges droppable = shared_file_ranges();
  for (const PlanItem& item : plan.items) {
    const graph::WeightRef* w = item.weight;
    uint8_t* dst = base + item.offset;
    // Rows in groups of 8, split over threads.
    const int64_t groups = w->ne[1] / 8;
    const size_t group_bytes = static_cast<size_t>(row_bytes(w->type, w->ne[0])) * 8;
    const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(n_threads, groups / 64 + 1)));
    const auto repack_share = [&](int t) {
      const int64_t g0 = groups * t / nt, g1 = groups * (t + 1) / nt;
      item.kernels->repack(w->data + static_cast<size_t>(g0) * group_bytes, dst + static_cast<size_t>(g0) * group_bytes,
                           w->ne[0], (g1 - g0) * 8);
    };
    std::vector<std::thread> pool;
    pool.reserve(static_cast<size_t>(nt));
    int started = 0;
    try {
      for (; started < nt; ++started) pool.emplace_back(repack_share, started);
    } catch (const std::system_error&) {
      // No thread left to start: this thread repacks the shares that have none.
      for (int t = started; t < nt; ++t) repack_share(t);
    }
    for (auto& th : pool) th.join();
    drop_pages(droppable, w->data, w->nbytes, page);
  }
  // Once more at the end: reading a tensor maps its neighbours' pages too (the kernel's fault-
  // around maps a whole aligned window of cached pages), including tensors dropped before.
  // (Not release_originals: its reads would map whole folios again on top of the full arena,
  // +139 MiB of peak RSS on the 1B Q8_0 file.)
  for (const PlanItem& item : plan.items) drop_pages(droppable, item.weight->data, item.weight->nbytes, page);
}

void CpuWeightStore::release_originals(const Plan& plan) {
  const long page = ::sysconf(_SC_PAGESIZE);
  const auto p = static_cast<uintptr_t>(page);
  const Ranges droppable = shared_file_ranges();
  for (const PlanItem& item : plan.items) {
    const uint8_t* data = item.weight->data;
    const size_t bytes = item.weight->nbytes;
    const auto begin = (reinterpret_cast<uintptr_t>(data) + p - 1) / p * p;
    const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) / p * p;
    if (end <= begin || !inside(droppable, begin, end)) continue;
    // One read per 2 MiB where the page cache holds the page (mincore), then the drop. A large
    // page-cache folio that was never mapped here stays whole, and on Linux 6.18 a later read
    // of a small tensor beside it (a norm) maps all of its 2 MiB: without this, a load that
    // skipped the repack (a packed-weights cache hit) kept 66 MiB of the 1B Q4_0 file resident
    // next to the cache; with it 18 MiB (3.8 MiB after a repack, which reads every page). Pages
    // not cached are not read (no disk reads for this).
    volatile uint8_t sink = 0;
    for (uintptr_t a = begin; a < end; a += kHugePage) {
      unsigned char resident = 0;
      if (::mincore(reinterpret_cast<void*>(a), 1, &resident) == 0 && (resident & 1) != 0) {
        sink = static_cast<uint8_t>(sink + *reinterpret_cast<const volatile uint8_t*>(a));
      }
    }
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
}

std::shared_ptr<const CpuWeightStore> CpuWeightStore::adopt(const Plan& plan, void* map, size_t map_bytes,
                                                            const uint8_t* data, int64_t huge_page_bytes) {
  auto store = std::make_shared<CpuWeightStore>();
  store->arena_.base = map;
  store->arena_.bytes = map_bytes;
  store->huge_page_bytes_ = huge_page_bytes;
  for (const PlanItem& item : plan.items) {
    store->index_[item.weight->data] = Packed{data + item.offset, item.kernels};
    store->packed_bytes_ += static_cast<int64_t>(item.weight->nbytes);
  }
  return store;
}

Result<std::shared_ptr<const CpuWeightStore>> CpuWeightStore::create(
    std::span<const graph::WeightRef* const> weights, int n_threads) {
  const Plan p = plan(weights);
  if (p.items.empty()) return std::shared_ptr<const CpuWeightStore>(std::make_shared<CpuWeightStore>());
  const long page = ::sysconf(_SC_PAGESIZE);

  // One anonymous mapping, its start on a 2 MiB boundary: a decode step streams every packed
  // weight once, and with 2 MiB pages (MADV_HUGEPAGE, asked before anything is written) that
  // stream takes a TLB miss per 2 MiB instead of per 4 KiB. The mapping ends at the last 4 KiB
  // page of the weights, so the partial 2 MiB at the end stays in small pages and resident
  // memory is the weights' size either way. GENIEX_HUGEPAGES=0 turns the advice off.
  const size_t bytes = (p.bytes + static_cast<size_t>(page) - 1) / static_cast<size_t>(page) * static_cast<size_t>(page);
  uint8_t* base = map_2mib_aligned(-1, bytes, PROT_READ | PROT_WRITE);
  if (base == nullptr) {
    return make_error(ErrorCode::OutOfMemory, "cpu: cannot map " + std::to_string(bytes) + " bytes to repack " +
                                                  std::to_string(p.items.size()) + " weights");
  }
  const int64_t huge = advise_huge_pages(base, bytes);
  // Owned from here on, so an exception below cannot leak the mapping.
  std::shared_ptr<const CpuWeightStore> store = adopt(p, base, bytes, base, huge);
  repack_into(p, base, n_threads);
  GX_LOG_INFO("cpu: repacked " + std::to_string(store->size()) + " weights (" +
              std::to_string(store->packed_bytes() >> 20) + " MiB), " + std::to_string(huge >> 20) +
              " MiB advised for 2 MiB pages");
  return store;
}

const CpuWeightStore::Packed* CpuWeightStore::find(const void* original) const {
  auto it = index_.find(original);
  return it == index_.end() ? nullptr : &it->second;
}

}  // namespace geniex::backends
