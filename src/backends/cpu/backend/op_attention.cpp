// Attention on the CPU over the paged KV cache: phase 1 stores the batch's K and V rows,
// phase 2 runs each (token, head) query over its sequence's blocks with an online softmax
// (flash-style: one pass, no score matrix), causal by position.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/backend/ops.hpp"
#include "backends/cpu/kernels.hpp"
#include "kv/kv_cache.hpp"

namespace geniex::backends::cpu_ops {

void attention(const OpArgs& a) {
  const graph::AttentionParams& p = a.node.attn;
  const StepData& step = *a.ctx.step;
  kv::KvCache& cache = *step.kv;
  const auto* q = static_cast<const float*>(a.src(0));
  const auto* k = static_cast<const float*>(a.src(1));
  const auto* v = static_cast<const float*>(a.src(2));
  auto* out = static_cast<float*>(a.dst());
  const int64_t n_tok = a.node.ne[1];
  const int64_t kv_width = int64_t{p.n_head_kv} * p.head_dim;
  const int64_t q_width = int64_t{p.n_head} * p.head_dim;

  int64_t t0, t1;
  ThreadPool::split_range(n_tok, a.ith, a.nth, &t0, &t1);
  for (int64_t t = t0; t < t1; ++t) {
    cache.write(p.layer, static_cast<int32_t>(t), k + t * kv_width, v + t * kv_width);
  }
  a.pool.barrier();

  const kv::KvConfig& cfg = cache.config();
  const bool f16 = cfg.type == DType::F16;
  const int32_t bs = cfg.block_size;
  const int32_t group = p.n_head / p.n_head_kv;
  const size_t elem = f16 ? 2 : 4;
  const size_t row_bytes = static_cast<size_t>(kv_width) * elem;
  const size_t head_off = static_cast<size_t>(p.head_dim) * elem;

  float scores[256];
  float acc[512];
  const int32_t chunk = std::min(bs, 256);

  int64_t w0, w1;
  ThreadPool::split_range(n_tok * p.n_head, a.ith, a.nth, &w0, &w1);
  for (int64_t w = w0; w < w1; ++w) {
    const int64_t t = w / p.n_head;
    const int32_t h = static_cast<int32_t>(w % p.n_head);
    const int32_t g = h / group;
    const float* qh = q + t * q_width + int64_t{h} * p.head_dim;
    const int32_t seq = step.seq_ids[static_cast<size_t>(t)];
    const int32_t n_kv = step.positions[static_cast<size_t>(t)] + 1;  // causal
    const std::span<const int32_t> table = cache.block_table(seq);

    float m = -std::numeric_limits<float>::infinity();
    float l = 0.0f;
    std::fill(acc, acc + p.head_dim, 0.0f);
    for (int32_t start = 0; start < n_kv; start += chunk) {
      const int32_t blk = table[static_cast<size_t>(start / bs)];
      const int32_t row0 = start % bs;
      const int32_t n = std::min(chunk - (row0 % chunk), n_kv - start);
      const auto* kb = static_cast<const uint8_t*>(cache.k_block(p.layer, blk)) +
                       static_cast<size_t>(row0) * row_bytes + static_cast<size_t>(g) * head_off;
      const auto* vb = static_cast<const uint8_t*>(cache.v_block(p.layer, blk)) +
                       static_cast<size_t>(row0) * row_bytes + static_cast<size_t>(g) * head_off;
      float block_max = -std::numeric_limits<float>::infinity();
      for (int32_t j = 0; j < n; ++j) {
        const uint8_t* kr = kb + static_cast<size_t>(j) * row_bytes;
        const float s = (f16 ? cpu::dot_f32_f16(qh, reinterpret_cast<const uint16_t*>(kr), p.head_dim)
                             : cpu::dot_f32(qh, reinterpret_cast<const float*>(kr), p.head_dim)) *
                        p.scale;
        scores[j] = s;
        block_max = std::max(block_max, s);
      }
      const float m_new = std::max(m, block_max);
      const float correction = std::exp(m - m_new);  // 0 on the first block
      if (correction != 1.0f) {
        for (int32_t d = 0; d < p.head_dim; ++d) acc[d] *= correction;
      }
      l *= correction;
      for (int32_t j = 0; j < n; ++j) {
        const float e = std::exp(scores[j] - m_new);
        l += e;
        const uint8_t* vr = vb + static_cast<size_t>(j) * row_bytes;
        if (f16) cpu::axpy_f16(e, reinterpret_cast<const uint16_t*>(vr), acc, p.head_dim);
        else cpu::axpy_f32(e, reinterpret_cast<const float*>(vr), acc, p.head_dim);
      }
      m = m_new;
    }
    float* oh = out + t * q_width + int64_t{h} * p.head_dim;
    const float inv = 1.0f / l;
    for (int32_t d = 0; d < p.head_dim; ++d) oh[d] = acc[d] * inv;
  }
}

}  // namespace geniex::backends::cpu_ops
