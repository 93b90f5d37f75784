// Attention on the CPU over the paged KV cache: phase 1 stores the batch's K and V rows,
// phase 2 runs every query over its sequence's blocks (causal by position): scores, an exact
// softmax, then the probability-weighted sum of V rows.
//
// With an f16 cache, phase 2 works in units of several queries that read the same key rows:
// up to kTileTokens consecutive tokens of one sequence times the heads of one GQA group (or a
// part of it when units would be too few for the threads). Each key row is converted once for
// all of a unit's queries (cpu::attn_scores_f16_multi / attn_accum_f16_multi), and every
// query's numbers keep the bits of one dot / axpy per key in key order, which the OpenCL
// backend reproduces. Units run longest first and are handed out on demand (causal units grow
// with position, so contiguous shares would leave one thread with most of the work).
//
// One token over a long context (decode) instead runs in three phases with the same arithmetic,
// so the same bits (attention_decode_split): the scores of every query over shares of the cache
// blocks, then each query's softmax, then the weighted sums by 32-dimension slices, the scores
// shared in the backend's work buffer. Units of whole GQA groups would leave threads idle where
// the KV heads are few (SmolLM2: 3), splitting a group's heads reads every key row once per
// part, and a unit's pass reads one head's few cache lines of every row, which from DRAM ran at
// a fifth of the bandwidth (Llama-3.2-1B at 2048 keys: bench_kernels BM_attn_decode); the
// split path reads each block's rows once, whole, with every head inside, and runs the softmax
// of all the heads' queries side by side in the vector lanes.
#include <algorithm>
#include <atomic>
#include <limits>
#include <vector>

#include "backends/cpu/backend/ops.hpp"
#include "backends/cpu/kernels.hpp"
#include "core/prefetch.hpp"
#include "kv/kv_cache.hpp"

namespace geniex::backends::cpu_ops {

namespace {


struct Scratch {
  std::vector<float> q;       // [query][head_dim], rounded to f16
  std::vector<float> s;       // [key - jlo][query]: scores, then probabilities
  std::vector<float> acc;     // [query][head_dim]
  std::vector<int32_t> kv0, n_kv;
  std::vector<uint16_t> p16;
  std::vector<int64_t> tiles;  // first token of each tile, then n_tok
  std::vector<cpu::KvRun> runs;  // a unit's key rows, one run per cache block
};

// f32 cache: one (token, head) query at a time, dots and axpys per key.
void attention_f32(const OpArgs& a) {
  const graph::AttentionParams& p = a.node.attn;
  const StepData& step = *a.ctx.step;
  kv::KvCache& cache = *step.kv;
  const auto* q = static_cast<const float*>(a.src(0));
  auto* out = static_cast<float*>(a.dst());
  const int64_t n_tok = a.node.ne[1];
  const int64_t kv_width = int64_t{p.n_head_kv} * p.head_dim;
  const int64_t q_width = int64_t{p.n_head} * p.head_dim;
  const int32_t bs = cache.config().block_size;
  const int32_t group = p.n_head / p.n_head_kv;
  const size_t row_bytes = static_cast<size_t>(kv_width) * 4;
  const size_t head_off = static_cast<size_t>(p.head_dim) * 4;
  thread_local std::vector<float> scores;
  std::vector<float> acc(static_cast<size_t>(p.head_dim));

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
    float m = -std::numeric_limits<float>::infinity();
    for (int32_t j = kv0; j < n_kv; ++j) {
      const auto* kb = static_cast<const uint8_t*>(cache.k_block(p.layer, table[static_cast<size_t>(j / bs)]));
      const auto* kr = reinterpret_cast<const float*>(kb + static_cast<size_t>(j % bs) * row_bytes + g * head_off);
      scores[static_cast<size_t>(j)] = cpu::dot_f32(qh, kr, p.head_dim) * p.scale;
      m = std::max(m, scores[static_cast<size_t>(j)]);
    }
    float* sk = scores.data() + kv0;
    const int32_t n_keys = n_kv - kv0;
    for (int32_t j = 0; j < n_keys; ++j) sk[j] -= m;
    cpu::exp_f32_row(sk, sk, n_keys);
    double sum = 0.0;
    for (int32_t j = 0; j < n_keys; ++j) sum += static_cast<double>(sk[j]);
    const auto inv = static_cast<float>(1.0 / sum);
    for (int32_t j = 0; j < n_keys; ++j) sk[j] *= inv;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int32_t j = kv0; j < n_kv; ++j) {
      const auto* vb = static_cast<const uint8_t*>(cache.v_block(p.layer, table[static_cast<size_t>(j / bs)]));
      const auto* vr = reinterpret_cast<const float*>(vb + static_cast<size_t>(j % bs) * row_bytes + g * head_off);
      cpu::axpy_f32(scores[static_cast<size_t>(j)], vr, acc.data(), p.head_dim);
    }
    std::copy(acc.begin(), acc.end(), out + t * q_width + int64_t{h} * p.head_dim);
  }
}

// The split one-token path runs for one token over at least attn_split_min_keys keys (CpuBackend:
// 128, GENIEX_ATTN_SPLIT_MIN_KEYS).
std::atomic<uint64_t> g_split_runs{0};

// Heads per key row of the split path's scores: n_head rounded up to 8, the softmax kernels'
// group of lanes (AVX2: 8 queries per vector, AVX-512: 16). The padding columns hold zeros and
// go through the softmax as queries of their own that nothing reads, so that every query is in
// a full group: a group's lanes cost no more than one query, where a query left over went alone,
// with a serial max and sum over its keys (SmolLM2's 9 heads in shares of 5 and 4 did).
constexpr int64_t split_ld(int32_t n_head) { return (int64_t{n_head} + 7) / 8 * 8; }

// Whether a step's attention node runs attention_decode_split, and then the work bytes it needs.
size_t split_bytes(const graph::Node& n, const StepData& step, int32_t min_keys) {
  if (n.ne[1] != 1 || step.kv == nullptr || step.kv->config().type != DType::F16 || step.positions.empty()) return 0;
  const graph::AttentionParams& p = n.attn;
  const int32_t n_kv = step.positions[0] + 1;
  const int32_t kv0 = p.window > 0 ? std::max(0, n_kv - p.window) : 0;
  if (n_kv - kv0 < min_keys || p.head_dim % 16 != 0) return 0;
  return (static_cast<size_t>(n_kv - kv0) * static_cast<size_t>(split_ld(p.n_head)) * sizeof(float) + 63) / 64 * 64;
}

// One token (decode), f16 cache: the scores of every query over key ranges, then each query's
// softmax, then the weighted sums by 32-dimension slices, the scores shared in the backend's work
// buffer as [key][head] (split_ld columns, so that the softmax runs the heads' queries side by
// side in its lanes).
// Both passes over the keys go cache block by cache block with every KV head inside, so each
// block's rows are read once, whole, and the next block is asked for in L2 (prefetch_l2) while
// one is computed: the rows of one KV head are a few cache lines every row_bytes, a stride the
// hardware prefetchers follow late from DRAM. The
// same arithmetic per score, probability and sum as the unit path, so the same bits.
void attention_decode_split(const OpArgs& a) {
  const graph::AttentionParams& p = a.node.attn;
  const StepData& step = *a.ctx.step;
  kv::KvCache& cache = *step.kv;
  const auto* q = static_cast<const float*>(a.src(0));
  auto* out = static_cast<float*>(a.dst());
  const int32_t bs = cache.config().block_size;
  const int32_t group = p.n_head / p.n_head_kv;
  const int64_t hd = p.head_dim;
  const int64_t ld = split_ld(p.n_head);
  const size_t row_bytes = static_cast<size_t>(p.n_head_kv) * static_cast<size_t>(hd) * 2;
  const size_t head_off = static_cast<size_t>(hd) * 2;
  const int32_t n_kv = step.positions[0] + 1;
  const int32_t kv0 = p.window > 0 ? std::max(0, n_kv - p.window) : 0;
  const int32_t n_keys = n_kv - kv0;
  const std::span<const int32_t> table = cache.block_table(step.seq_ids[0]);
  auto* s_all = reinterpret_cast<float*>(a.work);
  a.act->src = -1;  // the work buffer no longer holds a matmul's quantized input
  if (a.ith == 0) g_split_runs.fetch_add(1, std::memory_order_relaxed);

  // Cache blocks holding keys [kv0, n_kv): block b's keys [lo(b), hi(b)) and their first row.
  const int32_t b_first = kv0 / bs, b_end = (n_kv - 1) / bs + 1;
  auto key_lo = [&](int32_t b) { return std::max(kv0, b * bs); };
  auto key_hi = [&](int32_t b) { return std::min(n_kv, (b + 1) * bs); };
  auto rows = [&](int32_t b, bool values) {
    const int32_t blk = table[static_cast<size_t>(b)];
    const void* base = values ? cache.v_block(p.layer, blk) : cache.k_block(p.layer, blk);
    return static_cast<const uint8_t*>(base) + static_cast<size_t>(key_lo(b) - b * bs) * row_bytes;
  };

  // Phase 1: scores, contiguous shares of the blocks, every KV head's group inside each.
  thread_local std::vector<float> qf;
  thread_local std::vector<uint16_t> q16;
  int64_t w0, w1;
  ThreadPool::split_range(b_end - b_first, a.ith, a.nth, &w0, &w1);
  if (w1 > w0) {
    // The queries rounded to f16, as the unit path does.
    qf.resize(static_cast<size_t>(p.n_head * hd));
    q16.resize(qf.size());
    cpu::f32_to_fp16_row(q, q16.data(), p.n_head * hd);
    cpu::fp16_to_f32_row(q16.data(), qf.data(), p.n_head * hd);
  }
  for (int64_t w = w0; w < w1; ++w) {
    const auto b = static_cast<int32_t>(b_first + w);
    const uint8_t* k = rows(b, false);
    const int32_t j = key_lo(b), n = key_hi(b) - j;
    const uint8_t* next = w + 1 < w1 ? rows(b + 1, false) : nullptr;
    const size_t next_part = next != nullptr ? static_cast<size_t>(key_hi(b + 1) - key_lo(b + 1)) * row_bytes / static_cast<size_t>(p.n_head_kv) : 0;
    float* sb = s_all + static_cast<int64_t>(j - kv0) * ld;
    for (int32_t r = 0; r < n; ++r) std::fill(sb + r * ld + p.n_head, sb + (r + 1) * ld, 0.0f);  // padding
    for (int32_t g = 0; g < p.n_head_kv; ++g) {
      if (next != nullptr) prefetch_l2(next + static_cast<size_t>(g) * next_part, next_part);
      const cpu::KvRun run{k + static_cast<size_t>(g) * head_off, n};
      cpu::attn_scores_f16_multi(qf.data() + int64_t{g} * group * hd, hd, group, &run, 1, row_bytes, hd, p.scale,
                                 sb + int64_t{g} * group, ld);
    }
  }
  a.pool.barrier();

  // Phase 2: each query's softmax over its keys, contiguous shares of the groups of 8 columns.
  thread_local std::vector<int32_t> lo, hi;
  ThreadPool::split_range(ld / 8, a.ith, a.nth, &w0, &w1);
  if (w1 > w0) {
    const auto nq = static_cast<size_t>(8 * (w1 - w0));
    lo.assign(nq, kv0);
    hi.assign(nq, n_kv);
    cpu::attn_softmax_multi(s_all + 8 * w0, ld, static_cast<int>(nq), kv0, n_keys, lo.data(), hi.data());
  }
  a.pool.barrier();

  // Phase 3: the weighted sums of V rows, items (KV head, 32-dimension slice), contiguous shares
  // of them; block by block, each item's keys in order.
  const int64_t slice = hd % 32 == 0 ? 32 : 16;
  const int64_t slices = hd / slice;
  ThreadPool::split_range(int64_t{p.n_head_kv} * slices, a.ith, a.nth, &w0, &w1);
  if (w1 <= w0) return;
  for (int64_t w = w0; w < w1; ++w) {
    const int64_t g = w / slices, d0 = (w % slices) * slice;
    float* acc = out + g * group * hd + d0;  // the group's heads are hd apart
    for (int32_t i = 0; i < group; ++i) std::fill(acc + i * hd, acc + i * hd + slice, 0.0f);
  }
  // The bytes of a row this thread's items read: from the first item's slice to the last's.
  const size_t span_lo = static_cast<size_t>(w0 / slices) * head_off + static_cast<size_t>(w0 % slices * slice) * 2;
  const size_t span_hi = static_cast<size_t>((w1 - 1) / slices) * head_off + static_cast<size_t>(((w1 - 1) % slices + 1) * slice) * 2;
  for (int32_t b = b_first; b < b_end; ++b) {
    const uint8_t* v = rows(b, true);
    const int32_t j = key_lo(b), n = key_hi(b) - j;
    if (b + 1 < b_end) {
      const uint8_t* next = rows(b + 1, true);
      for (int32_t r = 0; r < key_hi(b + 1) - key_lo(b + 1); ++r) prefetch_l2(next + static_cast<size_t>(r) * row_bytes + span_lo, span_hi - span_lo);
    }
    const float* sb = s_all + static_cast<int64_t>(j - kv0) * ld;
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t g = w / slices, d0 = (w % slices) * slice;
      cpu::attn_accum_f16_multi(sb + g * group, ld, group, v + static_cast<size_t>(g) * head_off + static_cast<size_t>(d0) * 2,
                                row_bytes, n, slice, out + g * group * hd + d0, hd);
    }
  }
}

}  // namespace

uint64_t attention_split_runs() { return g_split_runs.load(std::memory_order_relaxed); }

size_t attention_work_bytes(const graph::Node& n, const StepData& step, int32_t min_keys) {
  return split_bytes(n, step, min_keys);
}

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
    cache.write(p.layer, static_cast<int32_t>(t), k + t * kv_width, v + t * kv_width, &cpu::f32_to_fp16_row);
  }
  if (a.ith == 0) a.pool.reset_tickets();
  a.pool.barrier();

  const kv::KvConfig& cfg = cache.config();
  if (cfg.type != DType::F16) {
    attention_f32(a);
    return;
  }
  if (split_bytes(a.node, step, a.attn_split_min_keys) > 0) {
    attention_decode_split(a);
    return;
  }
  const int32_t bs = cfg.block_size;
  const int32_t group = p.n_head / p.n_head_kv;
  const int64_t hd = p.head_dim;
  const size_t row_bytes = static_cast<size_t>(kv_width) * 2;
  const size_t head_off = static_cast<size_t>(hd) * 2;

  thread_local Scratch sc;
  // Tiles: runs of up to tile_tokens consecutive tokens of one sequence (every thread builds the
  // same list).
  // Queries per unit: tokens x heads of a group near what the kernels prefer
  // (cpu::attn_unit_queries: 48 where the scores take 16 queries per vector, else 24).
  const int tile_tokens = std::max(1, cpu::attn_unit_queries() / group);
  sc.tiles.clear();
  for (int64_t t = 0; t < n_tok;) {
    sc.tiles.push_back(t);
    const int32_t seq = step.seq_ids[static_cast<size_t>(t)];
    const int64_t end = std::min<int64_t>(n_tok, t + tile_tokens);
    ++t;
    while (t < end && step.seq_ids[static_cast<size_t>(t)] == seq) ++t;
  }
  const auto n_tiles = static_cast<int64_t>(sc.tiles.size());
  sc.tiles.push_back(n_tok);
  // A group's heads split in parts while units are too few to keep the threads busy (decode).
  int32_t parts = 1;
  while (parts < group && n_tiles * p.n_head_kv * parts < 4 * int64_t{a.nth}) ++parts;
  const int64_t units_per_tile = int64_t{p.n_head_kv} * parts;
  const int64_t n_units = n_tiles * units_per_tile;

  for (int64_t u = a.pool.next_ticket(); u < n_units; u = a.pool.next_ticket()) {
    // Last tiles first: with causal attention they have the most keys.
    const int64_t tile = n_tiles - 1 - u / units_per_tile;
    const int32_t g = static_cast<int32_t>(u % units_per_tile / parts);
    int64_t h0, h1;
    ThreadPool::split_range(group, static_cast<int>(u % parts), parts, &h0, &h1);
    const int64_t tb = sc.tiles[static_cast<size_t>(tile)], te = sc.tiles[static_cast<size_t>(tile) + 1];
    const int nh = static_cast<int>(h1 - h0);
    const int nq = static_cast<int>(te - tb) * nh;
    const int32_t seq = step.seq_ids[static_cast<size_t>(tb)];
    const std::span<const int32_t> table = cache.block_table(seq);

    // Queries (token-major, then head), rounded to f16 as in llama.cpp's default attention
    // (its logits are sensitive to that rounding; matching it keeps greedy generations equal),
    // and their key ranges: causal, and the sliding window's start where the layer has one.
    sc.q.resize(static_cast<size_t>(nq) * static_cast<size_t>(hd));
    sc.p16.resize(sc.q.size());
    sc.kv0.resize(static_cast<size_t>(nq));
    sc.n_kv.resize(static_cast<size_t>(nq));
    int32_t jlo = std::numeric_limits<int32_t>::max(), jhi = 0;  // union of the ranges
    int32_t clo = 0, chi = std::numeric_limits<int32_t>::max();   // keys every query has
    for (int64_t t = tb; t < te; ++t) {
      const int32_t n_kv = step.positions[static_cast<size_t>(t)] + 1;
      const int32_t kv0 = p.window > 0 ? std::max(0, n_kv - p.window) : 0;
      jlo = std::min(jlo, kv0);
      jhi = std::max(jhi, n_kv);
      clo = std::max(clo, kv0);
      chi = std::min(chi, n_kv);
      for (int hh = 0; hh < nh; ++hh) {
        const auto i = static_cast<size_t>((t - tb) * nh + hh);
        sc.kv0[i] = kv0;
        sc.n_kv[i] = n_kv;
        const float* qh = q + t * q_width + (int64_t{g} * group + h0 + hh) * hd;
        uint16_t* qd16 = sc.p16.data() + i * static_cast<size_t>(hd);
        cpu::f32_to_fp16_row(qh, qd16, hd);
        cpu::fp16_to_f32_row(qd16, sc.q.data() + i * static_cast<size_t>(hd), hd);
      }
    }
    if (chi < clo) chi = clo;  // no key common to all: every key goes the per-query way
    const int32_t n_keys = jhi - jlo;
    const size_t ld = static_cast<size_t>(nq);
    sc.s.resize(static_cast<size_t>(n_keys) * ld);

    // Calls fn(j, n, k rows, v rows) for the keys [from, to) in runs within one cache block.
    auto for_each_run = [&](int32_t from, int32_t to, auto&& fn) {
      for (int32_t start = from / bs * bs; start < to; start += bs) {
        const int32_t blk = table[static_cast<size_t>(start / bs)];
        const int32_t j = std::max(from, start), e = std::min(to, start + bs);
        if (j >= e) continue;
        const size_t off = static_cast<size_t>(j - start) * row_bytes + static_cast<size_t>(g) * head_off;
        fn(j, e - j, static_cast<const uint8_t*>(cache.k_block(p.layer, blk)) + off,
           static_cast<const uint8_t*>(cache.v_block(p.layer, blk)) + off);
      }
    };
    auto active = [&](int i, int32_t j) { return j >= sc.kv0[static_cast<size_t>(i)] && j < sc.n_kv[static_cast<size_t>(i)]; };

    // Scores of every query for every key of the union (those outside a query's range are
    // computed and never read), in one call over the runs.
    sc.runs.clear();
    for_each_run(jlo, jhi, [&](int32_t, int32_t n, const uint8_t* kr, const uint8_t*) { sc.runs.push_back({kr, n}); });
    cpu::attn_scores_f16_multi(sc.q.data(), hd, nq, sc.runs.data(), static_cast<int>(sc.runs.size()), row_bytes, hd,
                               p.scale, sc.s.data(), static_cast<int64_t>(ld));
    // Softmax per query over its own keys (max, exp, sum in double in key order), probabilities
    // rounded to f16 as llama.cpp does with an f16 cache.
    cpu::attn_softmax_multi(sc.s.data(), static_cast<int64_t>(ld), nq, jlo, n_keys, sc.kv0.data(), sc.n_kv.data());

    // Weighted sum of V rows: keys every query has in one multi-query call per run, the
    // others query by query, all in key order.
    sc.acc.assign(ld * static_cast<size_t>(hd), 0.0f);
    for_each_run(jlo, jhi, [&](int32_t j, int32_t n, const uint8_t*, const uint8_t* vr) {
      const int32_t e = j + n;
      const int32_t c0 = std::clamp(clo, j, e), c1 = std::clamp(chi, c0, e);
      // Keys outside the common range: for each, the runs of queries that have it.
      auto singles = [&](int32_t from, int32_t to) {
        for (int32_t jj = from; jj < to; ++jj) {
          const float* prow = sc.s.data() + static_cast<size_t>(jj - jlo) * ld;
          const uint8_t* vrow = vr + static_cast<size_t>(jj - j) * row_bytes;
          for (int i = 0; i < nq;) {
            if (!active(i, jj)) {
              ++i;
              continue;
            }
            int e2 = i + 1;
            while (e2 < nq && active(e2, jj)) ++e2;
            cpu::attn_accum_f16_multi(prow + i, static_cast<int64_t>(ld), e2 - i, vrow, row_bytes, 1, hd,
                                      sc.acc.data() + i * hd, hd);
            i = e2;
          }
        }
      };
      singles(j, c0);
      if (c1 > c0) {
        cpu::attn_accum_f16_multi(sc.s.data() + static_cast<size_t>(c0 - jlo) * ld, static_cast<int64_t>(ld), nq,
                                  vr + static_cast<size_t>(c0 - j) * row_bytes, row_bytes, c1 - c0, hd, sc.acc.data(), hd);
      }
      singles(c1, e);
    });
    for (int64_t t = tb; t < te; ++t) {
      for (int hh = 0; hh < nh; ++hh) {
        const auto i = static_cast<size_t>((t - tb) * nh + hh);
        const float* src = sc.acc.data() + i * static_cast<size_t>(hd);
        std::copy(src, src + hd, out + t * q_width + (int64_t{g} * group + h0 + hh) * hd);
      }
    }
  }
}

}  // namespace geniex::backends::cpu_ops
