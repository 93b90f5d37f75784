// Attention kernel over K/V rows staged on the device.
//
// The KV cache lives in host memory (PagedKvCache blocks). Per layer and step, ops.cpp
// stores the batch's K/V rows in the cache (KvCache::write, after downloading them), then
// copies the rows each sequence can see, block by block, into pinned staging memory and
// uploads them with one copy for K and one for V. The kernel reads the staged rows. The cost is
// the visible context per layer per step over PCIe; a device-resident cache (a KvCache whose
// block pool is device memory, written by a kernel, with block tables uploaded per step) would
// remove it and is not written yet.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace geniex::backends::cuda::kern {

// Per token of the batch: staged row of its sequence's position 0, keys visible [kv0, n_kv).
struct AttnTokenInfo {
  int32_t row0;
  int32_t n_kv;
  int32_t kv0;
  int32_t pad;
};

struct AttentionArgs {
  const float* q;         // [n_tok, n_head * head_dim]
  const void* k_rows;     // staged rows, n_head_kv * head_dim values of f16 or f32 each
  const void* v_rows;
  bool f16;               // cache rows are f16 (queries and probabilities are then rounded to f16)
  const AttnTokenInfo* info;  // [n_tok]
  float* scores;          // scratch [chunk tokens, n_head, max_kv]
  int32_t max_kv;
  float* out;             // [n_tok, n_head * head_dim]
  int64_t t0, n_tok;      // tokens [t0, t0 + n_tok) of the batch in this launch
  int32_t n_head, n_head_kv, head_dim;
  float scale;
};

cudaError_t attention(const AttentionArgs& a, cudaStream_t s);

}  // namespace geniex::backends::cuda::kern
