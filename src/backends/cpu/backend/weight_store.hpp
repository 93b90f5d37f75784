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

  // Repacks each weight that has a preferred layout on this CPU (using n_threads threads)
  // and releases the file pages of the originals from this process (they are no longer read).
  static Result<std::shared_ptr<const CpuWeightStore>> create(
      std::span<const graph::WeightRef* const> weights, int n_threads);

  // The packed form of the weight whose file bytes start at `original`, or nullptr.
  const Packed* find(const void* original) const;
  int64_t packed_bytes() const { return packed_bytes_; }
  size_t size() const { return index_.size(); }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;
  std::unordered_map<const void*, Packed> index_;
  int64_t packed_bytes_ = 0;
};

}  // namespace geniex::backends
