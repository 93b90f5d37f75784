// Gemm throughput of the CPU kernels at SmolLM2-135M shapes: decode (1 column, reported as
// GB/s of weight bytes streamed) and prefill (64 columns, reported as GFLOP/s).
// Rates use CPU time (the build machines are shared). Run with GENIEX_CPU_DISABLE=avx2 to
// measure the scalar tables.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/kernels.hpp"
#include "backends/cpu/packed.hpp"
#include "core/dtype.hpp"
#include "core/fp16.hpp"
#include "core/prefetch.hpp"
#include "core/read_stream.hpp"
#include "quant/quant.hpp"

namespace {

using geniex::DType;

struct Problem {
  std::vector<uint8_t> w, a;
  std::vector<float> out;
  size_t w_stride = 0, a_stride = 0;
};

Problem make_problem(const geniex::cpu::TypeKernels& k, int64_t rows, int64_t n, int64_t cols) {
  Problem p;
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> src(static_cast<size_t>(n));
  p.w_stride = static_cast<size_t>(geniex::row_bytes(k.type, n));
  p.a_stride = static_cast<size_t>(geniex::row_bytes(k.act_type, n));
  p.w.resize(p.w_stride * static_cast<size_t>(rows));
  // Quantize a few distinct rows and repeat them: the reference K-quantizers are slow and
  // the kernel's speed does not depend on the values.
  constexpr int64_t kDistinct = 16;
  for (int64_t r = 0; r < rows; ++r) {
    if (r < kDistinct) {
      for (auto& v : src) v = dist(rng);
      geniex::quant::quantize_row_ref(k.type, src.data(), p.w.data() + r * p.w_stride, n);
    } else {
      std::copy_n(p.w.data() + (r % kDistinct) * p.w_stride, p.w_stride,
                  p.w.data() + r * p.w_stride);
    }
  }
  p.a.resize(p.a_stride * static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    for (auto& v : src) v = dist(rng);
    k.quantize_act(src.data(), p.a.data() + c * p.a_stride, n);
  }
  p.out.resize(static_cast<size_t>(rows * cols));
  return p;
}

// args: weight type id, rows, n (row length), cols
void BM_gemm(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t rows = state.range(1), n = state.range(2), cols = state.range(3);
  const geniex::cpu::TypeKernels* k = geniex::cpu::kernels_for(type);
  if (k == nullptr) {
    state.SkipWithError("no kernels for type");
    return;
  }
  Problem p = make_problem(*k, rows, n, cols);
  for (auto _ : state) {
    k->gemm(n, p.w.data(), p.w_stride, rows, p.a.data(), p.a_stride, cols, p.out.data(), rows);
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(geniex::dtype_name(type)) + "/" + k->isa);
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(iters * static_cast<double>(p.w.size()) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      iters * 2.0 * static_cast<double>(rows * n * cols) / 1e9, benchmark::Counter::kIsRate);
}

void gemm_args(benchmark::internal::Benchmark* b) {
  for (DType t : {DType::Q4_1, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::F16}) {
    const auto id = static_cast<int64_t>(t);
    for (int64_t cols : {1, 64}) {
      b->Args({id, 1536, 576, cols});    // ffn up/gate
      b->Args({id, 576, 1536, cols});    // ffn down
      b->Args({id, 49152, 576, cols});   // output / embedding
    }
  }
  b->ArgNames({"type", "rows", "n", "cols"});
}
BENCHMARK(BM_gemm)->Apply(gemm_args)->Unit(benchmark::kMicrosecond);

// Packed 8-row layouts (backends/cpu/packed.hpp) against the file layout's AVX2 tiles, at
// SmolLM2 and Llama-3.2-1B shapes. args: weight type id, rows, n, cols, isa (0 avx2 file layout,
// 1 avx512 packed, 2 avx512vnni packed, 3 avx2 packed: packed_tiles_avx2.cpp / packed_k_tiles_avx2.cpp,
// 4 the same layouts with the AMX-INT8 gemm: packed_tiles_amx.cpp, 5 the same layouts with the
// AVX-VNNI tiles: packed_tiles_avxvnni.cpp, 6 the same layouts with 16-row zmm tiles:
// packed_tiles16_avx512vnni.cpp, 7 the AVX2 Q4_0 / Q4_1 gemm with 8 x 4 tiles only, 8 the K
// layouts' 8-row VNNI tiles EVEX-encoded on ymm: packed_k_tiles8_avx512vnni.cpp, 9 and 10 isa 6
// with one column through the 8-row or through the 16-row tiles, whichever this CPU would take).
constexpr const char* kIsas[] = {"avx2",       "avx512",          "avx512vnni",      "avx2",
                                 "amx",        "avxvnni",         "avx512vnni16",    "avx2x8",
                                 "avx512vnni8", "avx512vnni16-d8", "avx512vnni16-d16"};

void BM_gemm_packed(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t rows = state.range(1), n = state.range(2), cols = state.range(3);
  const char* isa = kIsas[state.range(4)];
  const geniex::cpu::TypeKernels* k = geniex::cpu::kernels_for_isa(type, "avx2");
  const geniex::cpu::PackedKernels* pk = state.range(4) == 0 ? nullptr : geniex::cpu::packed_kernels_for_isa(type, isa);
  if (k == nullptr || (state.range(4) != 0 && pk == nullptr)) {
    state.SkipWithError("kernels not available on this CPU");
    return;
  }
  Problem p = make_problem(*k, rows, n, cols);
  auto gemm = k->gemm;
  if (pk != nullptr) {
    std::vector<uint8_t> packed(p.w.size());
    pk->repack(p.w.data(), packed.data(), n, rows);
    p.w.swap(packed);
    gemm = pk->gemm;
  }
  for (auto _ : state) {
    gemm(n, p.w.data(), p.w_stride, rows, p.a.data(), p.a_stride, cols, p.out.data(), rows);
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(geniex::dtype_name(type)) + "/" + isa);
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(iters * static_cast<double>(p.w.size()) / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["GOP/s"] = benchmark::Counter(
      iters * 2.0 * static_cast<double>(rows * n * cols) / 1e9, benchmark::Counter::kIsRate);
}

void gemm_packed_args(benchmark::internal::Benchmark* b) {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (int64_t isa : {0, 1, 2, 3, 4, 5, 6}) {
      for (int64_t cols : {1, 128, 512}) {
        if (cols == 512 && isa < 3) continue;  // prefill-size batches: the AVX2 layouts, AMX, VNNI
        // K-quant rows need n % 256 == 0 (SmolLM2's 576 is not).
        if (t != DType::Q4_K && t != DType::Q5_K && t != DType::Q6_K) b->Args({static_cast<int64_t>(t), 1536, 576, cols, isa});  // SmolLM2 ffn up/gate
        b->Args({static_cast<int64_t>(t), 8192, 2048, cols, isa});  // 1B ffn up/gate
        if ((isa == 3 || isa == 4) && cols > 1) b->Args({static_cast<int64_t>(t), 2048, 8192, cols, isa});  // 1B ffn down
        if (isa == 3 && (t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K)) {
          b->Args({static_cast<int64_t>(t), 8192, 2048, cols, 8});  // the same with EVEX VNNI
        }
        if (isa == 3 && (t == DType::Q4_0 || t == DType::Q4_1)) {
          // The same with the 8 x 4 tiles only (isa 7, avx2x8).
          if (cols > 1) b->Args({static_cast<int64_t>(t), 2048, 8192, cols, 7});
          b->Args({static_cast<int64_t>(t), 8192, 2048, cols, 7});
          b->Args({static_cast<int64_t>(t), 1536, 576, cols, 7});
        }
      }
    }
  }
  // Decode from L2: 256 x 2048 (128-430 KiB of weights), the kernel's own rate. The 8192 x 2048
  // cases sit in an L3 that other tenants of a VM share, so they drift 20-33 GB/s run to run.
  // K types also at isa 8 (one column on isa 9 runs it or AVX-VNNI's: packed_kernels_k8_edge).
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const bool k_quant = t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
    b->Args({static_cast<int64_t>(t), 256, 2048, 1, 3});
    if (k_quant) b->Args({static_cast<int64_t>(t), 256, 2048, 1, 8});
    b->Args({static_cast<int64_t>(t), 256, 2048, 1, 9});
    b->Args({static_cast<int64_t>(t), 256, 2048, 1, 10});
  }
  // Decode from DRAM: 64-150 MiB of weights, past the last-level cache (the cases above fit
  // in it), to read against BM_read_bandwidth.
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    b->Args({static_cast<int64_t>(t), 65536, 2048, 1, 3});
    b->Args({static_cast<int64_t>(t), 65536, 2048, 1, 9});
    b->Args({static_cast<int64_t>(t), 65536, 2048, 1, 10});
    const bool k_quant = t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
    if (k_quant) {
      b->Args({static_cast<int64_t>(t), 65536, 2048, 1, 8});
    } else {  // 576-element rows: K-quant rows need n % 256 == 0
      b->Args({static_cast<int64_t>(t), 65536 * 3, 576, 1, 3});
      b->Args({static_cast<int64_t>(t), 65536 * 3, 576, 1, 9});
      b->Args({static_cast<int64_t>(t), 65536 * 3, 576, 1, 10});
    }
  }
  b->ArgNames({"type", "rows", "n", "cols", "isa"});
}
BENCHMARK(BM_gemm_packed)->Apply(gemm_packed_args)->Unit(benchmark::kMicrosecond);

// Decode from DRAM on 2 threads, each on half of the rows (as the runtime splits a decode
// matmul): the kernels' share of a bandwidth both threads contend for, the end-to-end decode's
// situation, which one thread alone does not show. args: weight type id, isa (as above).
void BM_gemm_packed_2t(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t rows = 65536, n = 2048;
  const geniex::cpu::TypeKernels* k = geniex::cpu::kernels_for_isa(type, "avx2");
  const geniex::cpu::PackedKernels* pk = geniex::cpu::packed_kernels_for_isa(type, kIsas[state.range(1)]);
  if (k == nullptr || pk == nullptr) {
    state.SkipWithError("kernels not available on this CPU");
    return;
  }
  Problem p = make_problem(*k, rows, n, 1);
  std::vector<uint8_t> packed(p.w.size());
  pk->repack(p.w.data(), packed.data(), n, rows);
  p.w.swap(packed);
  const int64_t half = rows / 2;
  auto run = [&](int64_t r0) {
    pk->gemm(n, p.w.data() + static_cast<size_t>(r0) * p.w_stride, p.w_stride, half, p.a.data(), p.a_stride, 1,
             p.out.data() + r0, rows);
  };
  for (auto _ : state) {
    std::thread other(run, half);
    run(0);
    other.join();
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(geniex::dtype_name(type)) + "/" + kIsas[state.range(1)]);
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(p.w.size()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_gemm_packed_2t)
    ->ArgsProduct({{static_cast<int64_t>(DType::Q4_0), static_cast<int64_t>(DType::Q8_0)}, {3, 9, 10}})
    ->ArgsProduct({{static_cast<int64_t>(DType::Q4_K), static_cast<int64_t>(DType::Q5_K), static_cast<int64_t>(DType::Q6_K)},
                   {3, 8, 9, 10}})  // one K column on isa 9 runs isa 8's or AVX-VNNI's tiles
    ->ArgNames({"type", "isa"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The memory floors: streaming reads of a buffer larger than the last-level cache, run in the
// same process so the decode GB/s above can be read as a fraction of them. arg 1: 1 = one stream
// with no software prefetch, 4 = four streams each prefetched 2 KiB ahead (the decode kernels'
// pattern, and the better half of `geniex bench`'s roof probe, geniex::read_bandwidth). On 2
// threads each reads its half, as a decode splits its rows.
constexpr size_t kFloorAhead = 2048;

uint64_t floor_read(std::span<const uint64_t> data, int64_t streams) {
  return geniex::read_stream_sum(data, static_cast<int>(streams), streams > 1 ? kFloorAhead : 0);
}

void BM_read_bandwidth_2t(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0)) << 20;
  std::vector<uint64_t> buf(n / sizeof(uint64_t), 1);
  const std::span<const uint64_t> all(buf);
  const size_t half = buf.size() / 2;
  for (auto _ : state) {
    uint64_t a = 0, b = 0;
    std::thread other([&] { b = floor_read(all.subspan(half), state.range(1)); });
    a = floor_read(all.first(half), state.range(1));
    other.join();
    benchmark::DoNotOptimize(a + b);
  }
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(n) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_read_bandwidth_2t)->ArgsProduct({{128}, {1, 4}})->ArgNames({"MiB", "streams"})->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_read_bandwidth(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0)) << 20;
  std::vector<uint64_t> buf(n / sizeof(uint64_t), 1);
  for (auto _ : state) benchmark::DoNotOptimize(floor_read(buf, state.range(1)));
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(n) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_read_bandwidth)->ArgsProduct({{128}, {1, 4}})->ArgNames({"MiB", "streams"})->Unit(benchmark::kMillisecond);

void BM_quantize_act(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t n = 576 * 64;
  const geniex::cpu::TypeKernels* k = geniex::cpu::kernels_for(type);
  std::vector<float> src(static_cast<size_t>(n));
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& v : src) v = dist(rng);
  std::vector<uint8_t> dst(static_cast<size_t>(geniex::row_bytes(k->act_type, n)));
  for (auto _ : state) {
    k->quantize_act(src.data(), dst.data(), n);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_quantize_act)
    ->Arg(static_cast<int64_t>(DType::Q4_1))
    ->Arg(static_cast<int64_t>(DType::Q8_0))
    ->Arg(static_cast<int64_t>(DType::Q4_K));

// GenieX's exponential over softmax-like inputs (scores minus their maximum), as attention and
// SwiGLU call it: 4096 floats per call.
void BM_exp_f32_row(benchmark::State& state) {
  const int64_t n = 4096;
  std::vector<float> x(static_cast<size_t>(n)), y(x.size());
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  for (auto& v : x) v = -std::abs(dist(rng));
  for (auto _ : state) {
    geniex::cpu::exp_f32_row(x.data(), y.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_exp_f32_row);

// A prefill attention unit's three steps at SmolLM2's head size (64, an f16 cache): nq queries
// against a 32-key cache block (scores), the unit softmax over 256 keys, and the probability-
// weighted sum over a block. args: nq. Items are scores (query x key pairs).
struct AttnUnit {
  std::vector<float> q, s;
  std::vector<uint8_t> kv;
  std::vector<int32_t> kv0, n_kv;
};
AttnUnit make_attn_unit(int nq, int n_keys, int64_t hd) {
  AttnUnit u;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  u.q.resize(static_cast<size_t>(nq * hd));
  for (auto& v : u.q) v = geniex::fp16_to_f32(geniex::f32_to_fp16(dist(rng)));
  u.kv.resize(static_cast<size_t>(n_keys * hd) * 2);
  for (size_t i = 0; i < u.kv.size() / 2; ++i) {
    const uint16_t h = geniex::f32_to_fp16(dist(rng));
    std::memcpy(u.kv.data() + 2 * i, &h, 2);
  }
  u.s.resize(static_cast<size_t>(nq * n_keys));
  for (auto& v : u.s) v = 4.0f * dist(rng);
  u.kv0.assign(static_cast<size_t>(nq), 0);
  u.n_kv.assign(static_cast<size_t>(nq), n_keys);
  return u;
}
void BM_attn_scores(benchmark::State& state) {
  const int nq = static_cast<int>(state.range(0)), n_keys = static_cast<int>(state.range(1));
  const int64_t hd = 64;
  AttnUnit u = make_attn_unit(nq, n_keys, hd);
  std::vector<geniex::cpu::KvRun> runs;  // cache blocks of 32 keys
  for (int j = 0; j < n_keys; j += 32) runs.push_back({u.kv.data() + static_cast<size_t>(j * hd) * 2, std::min(32, n_keys - j)});
  for (auto _ : state) {
    geniex::cpu::attn_scores_f16_multi(u.q.data(), hd, nq, runs.data(), static_cast<int>(runs.size()),
                                       static_cast<size_t>(hd) * 2, hd, 0.125f, u.s.data(), nq);
    benchmark::DoNotOptimize(u.s.data());
  }
  state.SetItemsProcessed(state.iterations() * nq * n_keys);
}
BENCHMARK(BM_attn_scores)->Args({3, 32})->Args({24, 32})->Args({48, 32})->Args({48, 256});
void BM_attn_softmax(benchmark::State& state) {
  const int nq = static_cast<int>(state.range(0)), n_keys = 256;
  AttnUnit u = make_attn_unit(nq, n_keys, 64);
  for (auto _ : state) {
    // In place again and again: after the first pass the scores are probabilities, the same work.
    geniex::cpu::attn_softmax_multi(u.s.data(), nq, nq, 0, n_keys, u.kv0.data(), u.n_kv.data());
    benchmark::DoNotOptimize(u.s.data());
  }
  state.SetItemsProcessed(state.iterations() * nq * n_keys);
}
BENCHMARK(BM_attn_softmax)->Arg(3)->Arg(24)->Arg(48);
void BM_attn_accum(benchmark::State& state) {
  const int nq = static_cast<int>(state.range(0)), n_keys = 32;
  const int64_t hd = 64;
  AttnUnit u = make_attn_unit(nq, n_keys, hd);
  for (auto& v : u.s) v = std::abs(v) * 0.01f;
  std::vector<float> acc(static_cast<size_t>(nq * hd));
  for (auto _ : state) {
    geniex::cpu::attn_accum_f16_multi(u.s.data(), nq, nq, u.kv.data(), static_cast<size_t>(hd) * 2, n_keys, hd,
                                      acc.data(), hd);
    benchmark::DoNotOptimize(acc.data());
  }
  state.SetItemsProcessed(state.iterations() * nq * n_keys);
}
BENCHMARK(BM_attn_accum)->Arg(3)->Arg(24)->Arg(48);

// One decode token's attention over a long context, one thread, at Llama-3.2-1B's shape (8 KV
// heads of 4 queries, head size 64, an f16 cache of 32-key blocks whose rows hold every KV
// head). args: keys, order, layers. Order 0 runs each KV head over all keys in turn (scores,
// softmax, weighted sum: the unit path's order, one head's two cache lines of every 1 KiB row);
// order 1 goes block by block with every head inside, the next block asked for in L2 meanwhile,
// the scores as [key][head] and one softmax for all 32 queries (the split path's order). Each
// iteration reads the next of `layers` caches: 24 at 2048 keys are 96 MiB, from DRAM as in
// decode; 1 at 256 keys stays in L2. Bytes are the K and V rows read.
void BM_attn_decode(benchmark::State& state) {
  const int n_keys = static_cast<int>(state.range(0));
  const bool by_block = state.range(1) != 0;
  const int n_layers = static_cast<int>(state.range(2));
  constexpr int kHeadsKv = 8, kGroup = 4, kHeads = kHeadsKv * kGroup, kBlock = 32;
  constexpr int64_t hd = 64;
  const size_t row_bytes = size_t{kHeadsKv} * hd * 2;
  const size_t layer_bytes = static_cast<size_t>(n_keys) * row_bytes;
  std::vector<uint8_t> k(layer_bytes * static_cast<size_t>(n_layers)), v(k.size());
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (size_t i = 0; i + 1 < k.size(); i += 2) {
    const uint16_t a = geniex::f32_to_fp16(dist(rng)), b = geniex::f32_to_fp16(0.5f * dist(rng));
    std::memcpy(k.data() + i, &a, 2);
    std::memcpy(v.data() + i, &b, 2);
  }
  std::vector<float> q(static_cast<size_t>(kHeads * hd));
  for (auto& x : q) x = geniex::fp16_to_f32(geniex::f32_to_fp16(dist(rng)));
  std::vector<float> s(static_cast<size_t>(n_keys * kHeads)), out(q.size());
  const std::vector<int32_t> lo(kHeads, 0), hi(kHeads, n_keys);
  std::vector<geniex::cpu::KvRun> runs;
  auto head_off = [&](int g) { return static_cast<size_t>(g * hd) * 2; };
  auto prefetch_part = [&](const uint8_t* base, int j, int g) {  // 1/8 of block j's rows
    if (j >= n_keys) return;
    const size_t part = kBlock * row_bytes / kHeadsKv;
    geniex::prefetch_l2(base + static_cast<size_t>(j) * row_bytes + part * static_cast<size_t>(g), part);
  };
  int layer = 0;
  for (auto _ : state) {
    const uint8_t* kl = k.data() + layer_bytes * static_cast<size_t>(layer);
    const uint8_t* vl = v.data() + layer_bytes * static_cast<size_t>(layer);
    std::fill(out.begin(), out.end(), 0.0f);
    if (!by_block) {
      for (int g = 0; g < kHeadsKv; ++g) {
        runs.clear();
        for (int j = 0; j < n_keys; j += kBlock) {
          runs.push_back({kl + static_cast<size_t>(j) * row_bytes + head_off(g), std::min(kBlock, n_keys - j)});
        }
        geniex::cpu::attn_scores_f16_multi(q.data() + g * kGroup * hd, hd, kGroup, runs.data(), static_cast<int>(runs.size()),
                                           row_bytes, hd, 0.125f, s.data(), kGroup);
        geniex::cpu::attn_softmax_multi(s.data(), kGroup, kGroup, 0, n_keys, lo.data(), hi.data());
        for (int j = 0; j < n_keys; j += kBlock) {
          geniex::cpu::attn_accum_f16_multi(s.data() + j * kGroup, kGroup, kGroup, vl + static_cast<size_t>(j) * row_bytes + head_off(g),
                                            row_bytes, std::min(kBlock, n_keys - j), hd, out.data() + g * kGroup * hd, hd);
        }
      }
    } else {
      for (int j = 0; j < n_keys; j += kBlock) {
        for (int g = 0; g < kHeadsKv; ++g) {
          prefetch_part(kl, j + kBlock, g);
          const geniex::cpu::KvRun run{kl + static_cast<size_t>(j) * row_bytes + head_off(g), std::min(kBlock, n_keys - j)};
          geniex::cpu::attn_scores_f16_multi(q.data() + g * kGroup * hd, hd, kGroup, &run, 1, row_bytes, hd, 0.125f,
                                             s.data() + j * kHeads + g * kGroup, kHeads);
        }
      }
      geniex::cpu::attn_softmax_multi(s.data(), kHeads, kHeads, 0, n_keys, lo.data(), hi.data());
      for (int j = 0; j < n_keys; j += kBlock) {
        for (int g = 0; g < kHeadsKv; ++g) {
          prefetch_part(vl, j + kBlock, g);
          geniex::cpu::attn_accum_f16_multi(s.data() + j * kHeads + g * kGroup, kHeads, kGroup,
                                            vl + static_cast<size_t>(j) * row_bytes + head_off(g), row_bytes,
                                            std::min(kBlock, n_keys - j), hd, out.data() + g * kGroup * hd, hd);
        }
      }
    }
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % n_layers;
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(2 * layer_bytes));
}
BENCHMARK(BM_attn_decode)
    ->Args({2048, 0, 24})
    ->Args({2048, 1, 24})
    ->Args({256, 0, 1})
    ->Args({256, 1, 1})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
