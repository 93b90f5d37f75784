// The packed-weights cache: the CPU backend's repacked weights (backends/cpu/packed.hpp) kept
// in a file of their own, a GGUF container with GenieX metadata, and mapped on later loads of
// the same model file on the same kind of CPU instead of repacked. A load then neither repacks
// nor faults in fresh memory for the packed copy: its pages are the page cache's, shared by
// every process that maps the file and reclaimable under memory pressure like the model file's
// own. The model file stays the source of truth (GPU backends read its bytes), so the cache is
// a side file, never a replacement for it.
//
// A cache file is used only when all of these match: its format version; its key, which names
// the model file (real path, size, modification time, inode, device) and, per packed tensor,
// its name, type, shape, offset, the packed layout's kernels and a fingerprint of that layout's
// bytes (its repack of a fixed pseudo-random input, so a GenieX that packs differently misses
// instead of reading the old bytes); its tensors against this load's plan; and a checksum of
// every packed byte, verified at each load (a torn or corrupted file is rebuilt, never read).
// Files are written under a temporary name, with their space reserved first, and renamed into
// place, so a reader never sees a partial one.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backends/cpu/backend/weight_store.hpp"
#include "core/mmap.hpp"
#include "core/result.hpp"
#include "graph/graph.hpp"

namespace geniex::runtime {

struct PackedLoad {
  std::shared_ptr<const backends::CpuWeightStore> store;
  // "off": no cache directory given; "hit": mapped from the cache file; "written": repacked
  // into a new cache file, which later loads map; "unavailable": repacked in memory (`note`
  // says why no cache file was used or written).
  std::string status;
  std::string path;  // the cache file ("" when off or when the model has no file)
  std::string note;  // why a cache file was not used or was rebuilt; "" otherwise
};

// The CPU backend's packed weights for the model in `source` (a file path, "" for a model
// built in memory): repacked at load when cache_dir is empty, else through a cache file in
// cache_dir (created if missing). Failing to read or write the cache never fails the load:
// the weights are then repacked in memory and the note says why.
Result<PackedLoad> load_packed_weights(std::span<const graph::WeightRef* const> weights, int n_threads,
                                       const std::string& source, const std::string& cache_dir);

// Pieces, for tests and the fuzz target.
struct SourceIdentity {
  std::string path;  // real path
  uint64_t size = 0;
  uint64_t mtime_ns = 0;
  uint64_t inode = 0;
  uint64_t device = 0;
};
Result<SourceIdentity> identify_source(const std::string& path);
std::string packed_cache_key(const backends::CpuWeightStore::Plan& plan, const SourceIdentity& source);
// "<model file stem>-<16 hex digits of the path's hash>-<16 of the key's>.gxpack"
std::string packed_cache_file_name(const SourceIdentity& source, const std::string& key);
// Checks a cache file's bytes against this load's plan and key; returns the offset of its data
// section, or InvalidFormat naming the first thing that does not match.
Result<uint64_t> check_packed_cache(std::shared_ptr<MappedFile> file, const backends::CpuWeightStore::Plan& plan,
                                    const std::string& key, int n_threads);
// The checksum of a cache file's data section (XXH3 of 8 MiB chunks, then of their hashes:
// the same value for any thread count).
uint64_t packed_checksum(const uint8_t* data, size_t bytes, int n_threads);

}  // namespace geniex::runtime
