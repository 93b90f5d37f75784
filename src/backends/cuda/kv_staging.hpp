// Where each sequence's visible KV rows go in the device staging buffers that the attention
// kernel reads (host logic, no CUDA: tested on the CPU in tests/cuda/test_cuda_host.cpp).
// Positions [lo, hi) of a sequence are staged in position order from row row0 + lo on, lo
// rounded down to a cache block so that whole blocks are copied.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backends/cuda/attention.cuh"

namespace geniex::backends::cuda {

struct StagedSeq {
  int32_t seq = 0;
  int32_t lo = 0, hi = 0;  // positions staged: [lo, hi), lo a multiple of the block size
  int32_t row0 = 0;        // staged row of position 0 (row0 + p is position p's row)
};

struct KvStagingPlan {
  std::vector<kern::AttnTokenInfo> info;  // per token of the batch
  std::vector<StagedSeq> seqs;            // in staging order
  int64_t rows = 0;                       // staged rows in all
  int32_t max_kv = 1;                     // the most keys any token sees, for the score scratch
};

// positions / seq_ids: the batch's tokens; window: sliding window (0: none).
KvStagingPlan plan_kv_staging(std::span<const int32_t> positions, std::span<const int32_t> seq_ids, int32_t window,
                              int32_t block_size);

}  // namespace geniex::backends::cuda
