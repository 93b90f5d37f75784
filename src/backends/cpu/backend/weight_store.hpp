// Weights the CPU backend keeps in its preferred layouts (backends/cpu/packed.hpp), repacked
// once per Model at load and shared by every Session's CPU backend.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "backends/cpu/packed.hpp"
#include "core/result.hpp"
#include "graph/graph.hpp"

namespace geniex::backends {

class CpuWeightStore {
 public:
  struct Packed {
    const uint8_t* data = nullptr;
    const cpu::PackedKernels* kernels = nullptr;
  };

  // The weights that get a packed layout on this CPU, in arena order: each at `offset` (a
  // multiple of 64) in an arena of `bytes` (every packed size rounded up to 64). Tied weights
  // (the same bytes named twice) appear once.
  struct PlanItem {
    const graph::WeightRef* weight = nullptr;
    const cpu::PackedKernels* kernels = nullptr;
    size_t offset = 0;
  };
  struct Plan {
    std::vector<PlanItem> items;
    size_t bytes = 0;
  };
  static Plan plan(std::span<const graph::WeightRef* const> weights);

  // Repacks every item of `plan` to base + offset (base 64-byte aligned, plan.bytes long), rows
  // split over n_threads threads, and releases the file pages of the originals from this
  // process (they are no longer read) where they are pages of a shared file mapping; originals
  // anywhere else keep their bytes.
  static void repack_into(const Plan& plan, uint8_t* base, int n_threads);

  // For a load that will not read the plan's originals (a packed-weights cache hit): releases
  // their file pages from this process where they are pages of a shared file mapping, reading
  // one byte per 2 MiB first where the page cache holds it, so that later reads of the model's
  // other tensors beside them map small windows, not whole 2 MiB folios (weight_store.cpp).
  // Call it before the packed copy comes in: its reads map memory for a moment.
  static void release_originals(const Plan& plan);

  // A store over packed bytes already in place (plan item i at data + offset) inside the
  // mapping [map, map + map_bytes), which the store unmaps when it goes (a mapped file of
  // packed weights, see runtime/packed_cache.hpp). huge_page_bytes: the bytes advised for 2 MiB
  // pages.
  static std::shared_ptr<const CpuWeightStore> adopt(const Plan& plan, void* map, size_t map_bytes,
                                                     const uint8_t* data, int64_t huge_page_bytes);

  // plan(), an anonymous arena (2 MiB-aligned, advised MADV_HUGEPAGE unless GENIEX_HUGEPAGES=0)
  // and repack_into(): each weight with a preferred layout on this CPU, packed at load.
  static Result<std::shared_ptr<const CpuWeightStore>> create(
      std::span<const graph::WeightRef* const> weights, int n_threads);

  // A mapping of `bytes` that starts on a 2 MiB boundary, so that 2 MiB pages (anonymous ones,
  // or a file's 2 MiB page-cache folios) can back it: anonymous and private when fd < 0, else
  // fd's first `bytes`, shared. nullptr when mmap fails; munmap(base, bytes) releases it.
  static uint8_t* map_2mib_aligned(int fd, size_t bytes, int prot);
  // MADV_HUGEPAGE on the whole 2 MiB pages of [base, base + bytes), unless GENIEX_HUGEPAGES=0;
  // returns the bytes advised.
  static int64_t advise_huge_pages(uint8_t* base, size_t bytes);

  // The packed form of the weight whose file bytes start at `original`, or nullptr.
  const Packed* find(const void* original) const;
  int64_t packed_bytes() const { return packed_bytes_; }
  // Bytes of the packed arena advised for 2 MiB pages (MADV_HUGEPAGE; whether the kernel backs
  // them so is its choice: AnonHugePages in /proc/self/smaps tells).
  int64_t huge_page_bytes() const { return huge_page_bytes_; }
  size_t size() const { return index_.size(); }

  CpuWeightStore() = default;
  CpuWeightStore(const CpuWeightStore&) = delete;
  CpuWeightStore& operator=(const CpuWeightStore&) = delete;

 private:
  // Every packed weight, in one mapping (anonymous, or a file's; unmapped with the store).
  struct Arena {
    void* base = nullptr;
    size_t bytes = 0;
    Arena() = default;
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    ~Arena();
  };
  Arena arena_;
  std::unordered_map<const void*, Packed> index_;
  int64_t packed_bytes_ = 0;
  int64_t huge_page_bytes_ = 0;
};

}  // namespace geniex::backends
