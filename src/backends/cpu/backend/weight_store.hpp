// Weights the CPU backend keeps in its preferred layouts (backends/cpu/packed.hpp), repacked
// once per Model at load and shared by every Session's CPU backend.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>

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

  // Repacks each weight that has a preferred layout on this CPU (using n_threads threads)
  // and releases the file pages of the originals from this process (they are no longer read)
  // where they are pages of a shared file mapping; originals anywhere else keep their bytes.
  static Result<std::shared_ptr<const CpuWeightStore>> create(
      std::span<const graph::WeightRef* const> weights, int n_threads);

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
  // Every packed weight, in one anonymous mapping (unmapped with the store).
  struct Arena {
    uint8_t* base = nullptr;
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
