// Attention on the CPU over the paged KV cache: phase 1 stores the batch's K and V rows,
// phase 2 runs each (token, head) query over its sequence's blocks (causal by position):
// scores, an exact softmax, then the probability-weighted sum of V rows. The kernels take a
// cache block of keys per call (cpu::attn_scores_f16 / attn_accum_f16) and give the same bits
// as one dot / axpy per key, which the OpenCL backend reproduces.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/exp.hpp"
#include "core/fp16.hpp"

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

  // Scores for one (token, head): up to the context length, per thread.
  thread_local std::vector<float> scores;
  thread_local std::vector<uint16_t> probs16;
  float q16[512];
  float acc[512];

  int64_t w0, w1;
  ThreadPool::split_range(n_tok * p.n_head, a.ith, a.nth, &w0, &w1);
  for (int64_t w = w0; w < w1; ++w) {
    const int64_t t = w / p.n_head;
    const int32_t h = static_cast<int32_t>(w % p.n_head);
    const int32_t g = h / group;
    const float* qh = q + t * q_width + int64_t{h} * p.head_dim;
    const int32_t seq = step.seq_ids[static_cast<size_t>(t)];
    const int32_t n_kv = step.positions[static_cast<size_t>(t)] + 1;  // causal
    // Sliding window: keys before kv0 are out of reach (their scores stay out of the softmax).
    const int32_t kv0 = p.window > 0 ? std::max(0, n_kv - p.window) : 0;
    const std::span<const int32_t> table = cache.block_table(seq);
    if (scores.size() < static_cast<size_t>(n_kv)) scores.resize(static_cast<size_t>(n_kv));

    // With an f16 cache the query is rounded to f16 and so are the probabilities, as in
    // llama.cpp's default attention; its logits are sensitive to that rounding, and matching
    // it keeps greedy generations identical.
    for (int32_t d = 0; d < p.head_dim; ++d) q16[d] = f16 ? fp16_to_f32(f32_to_fp16(qh[d])) : qh[d];
    float m = -std::numeric_limits<float>::infinity();
    for (int32_t start = kv0 / bs * bs; start < n_kv; start += bs) {
      const int32_t blk = table[static_cast<size_t>(start / bs)];
      const int32_t n = std::min(bs, n_kv - start);
      const int32_t j0 = std::max(0, kv0 - start);
      const auto* kb = static_cast<const uint8_t*>(cache.k_block(p.layer, blk)) + static_cast<size_t>(g) * head_off;
      float* sc = scores.data() + start;
      if (f16) {
        cpu::attn_scores_f16(q16, kb + static_cast<size_t>(j0) * row_bytes, row_bytes, n - j0, p.head_dim, p.scale,
                             sc + j0);
      } else {
        for (int32_t j = j0; j < n; ++j) {
          sc[j] = cpu::dot_f32(q16, reinterpret_cast<const float*>(kb + static_cast<size_t>(j) * row_bytes), p.head_dim) *
                  p.scale;
        }
      }
      for (int32_t j = j0; j < n; ++j) m = std::max(m, sc[j]);
    }
    float* sk = scores.data() + kv0;
    const int32_t n_keys = n_kv - kv0;
    for (int32_t j = 0; j < n_keys; ++j) sk[j] -= m;
    cpu::exp_f32_row(sk, sk, n_keys);
    double sum = 0.0;
    for (int32_t j = 0; j < n_keys; ++j) sum += static_cast<double>(sk[j]);
    const auto inv = static_cast<float>(1.0 / sum);
    for (int32_t j = 0; j < n_keys; ++j) sk[j] *= inv;
    if (f16) {
      if (probs16.size() < static_cast<size_t>(n_keys)) probs16.resize(static_cast<size_t>(n_keys));
      cpu::f32_to_fp16_row(sk, probs16.data(), n_keys);
      cpu::fp16_to_f32_row(probs16.data(), sk, n_keys);
    }
    std::fill(acc, acc + p.head_dim, 0.0f);
    for (int32_t start = kv0 / bs * bs; start < n_kv; start += bs) {
      const int32_t blk = table[static_cast<size_t>(start / bs)];
      const int32_t n = std::min(bs, n_kv - start);
      const int32_t j0 = std::max(0, kv0 - start);
      const auto* vb = static_cast<const uint8_t*>(cache.v_block(p.layer, blk)) + static_cast<size_t>(g) * head_off;
      const float* pr = scores.data() + start;
      if (f16) {
        cpu::attn_accum_f16(pr + j0, vb + static_cast<size_t>(j0) * row_bytes, row_bytes, n - j0, p.head_dim, acc);
      } else {
        for (int32_t j = j0; j < n; ++j) {
          cpu::axpy_f32(pr[j], reinterpret_cast<const float*>(vb + static_cast<size_t>(j) * row_bytes), acc, p.head_dim);
        }
      }
    }
    float* oh = out + t * q_width + int64_t{h} * p.head_dim;
    std::copy(acc, acc + p.head_dim, oh);
  }
}

}  // namespace geniex::backends::cpu_ops
