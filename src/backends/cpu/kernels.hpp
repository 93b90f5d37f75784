// Optimized CPU kernels per tensor type, chosen once at run time from the CPU's features
// (scalar reference, AVX2/FMA; later AVX-512/VNNI, NEON dotprod/i8mm).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"

namespace geniex::cpu {

struct TypeKernels {
  DType type;
  DType act_type;  // == quant::vec_dot_type(type)
  const char* isa; // "scalar", "avx2", ... (for logs and benchmarks)

  // Dequantize n elements (multiple of the block size) to f32.
  void (*dequantize_row)(const void* src, float* dst, int64_t n);
  // Convert n f32 activations to act_type (multiple of act_type's block size).
  void (*quantize_act)(const float* src, void* dst, int64_t n);
  // out[c * out_stride + r] = dot(weight row r, activation row c) for r < n_rows, c < n_cols.
  // Weight rows are w_stride bytes apart, activation rows a_stride bytes apart (in act_type).
  // Kernels block over rows and columns so weights stream once per column tile.
  void (*gemm)(int64_t n, const void* w, size_t w_stride, int64_t n_rows,
               const void* a, size_t a_stride, int64_t n_cols,
               float* out, int64_t out_stride);
};

// Nullptr for types without kernels. The selection honours GENIEX_CPU_DISABLE (see
// core/cpu_features.hpp), so tests can run the scalar and the SIMD paths in one process
// by asking for a specific ISA below.
const TypeKernels* kernels_for(DType weight_type);

// Kernels of a given ISA ("scalar" or "avx2"), for tests that compare implementations;
// nullptr when that ISA is not compiled in or not supported by this CPU.
const TypeKernels* kernels_for_isa(DType weight_type, const char* isa);

// Fast f32 helpers used by the CPU ops (vectorized where possible).
float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float alpha, const float* x, float* y, int64_t n);  // y += alpha * x
void fp16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f32_to_fp16_row(const float* src, uint16_t* dst, int64_t n);
// dot of an f32 vector with an fp16 vector (KV cache reads).
float dot_f32_f16(const float* a, const uint16_t* b, int64_t n);
void axpy_f16(float alpha, const uint16_t* x, float* y, int64_t n);  // y += alpha * x

// Attention over n_keys fp16 rows of hd elements, row_bytes apart. Bit-identical to the
// per-key calls they replace: scores[j] = dot_f32_f16(q, k_j, hd) * scale, and
// acc += p[j] * v_j for j = 0, 1, ... (axpy_f16 in key order).
void attn_scores_f16(const float* q, const uint8_t* k, size_t row_bytes, int n_keys, int64_t hd, float scale,
                     float* scores);
void attn_accum_f16(const float* p, const uint8_t* v, size_t row_bytes, int n_keys, int64_t hd, float* acc);
// The same for nq queries sharing the key/value rows (the heads of a GQA group, several
// tokens), each key row read once for all of them. Query i is q + i * q_stride. The keys come as
// runs of consecutive rows (the blocks of a paged cache), key j counting through the runs in
// order; query i's score for key j goes to scores[j * ld + i], with attn_scores_f16's bits.
// acc + i * acc_stride += p[j * ld + i] * v_j for j = 0, 1, ..., with attn_accum_f16's bits.
struct KvRun {
  const uint8_t* rows;  // the run's first row; the others follow row_bytes apart
  int n;
};
void attn_scores_f16_multi(const float* q, int64_t q_stride, int nq, const KvRun* runs, int n_runs, size_t row_bytes,
                           int64_t hd, float scale, float* scores, int64_t ld);
void attn_accum_f16_multi(const float* p, int64_t ld, int nq, const uint8_t* v, size_t row_bytes, int n_keys,
                          int64_t hd, float* acc, int64_t acc_stride);
// The softmax of a unit of queries, in place over their scores: s[(j - jlo) * ld + i] is query
// i's score for key j, j in [jlo, jlo + n_keys), and query i attends the keys [kv0[i], n_kv[i])
// (each query at least one in the span). Per query: m = the largest score of its keys; every
// entry becomes exp_f32(s - m); the query's entries are summed in double in key order; every
// entry is multiplied by (float)(1 / sum) and rounded to f16 (llama.cpp's probabilities with an
// f16 cache). Entries of keys outside a query's range end up with values that nothing reads.
// The same bits on every ISA.
void attn_softmax_multi(float* s, int64_t ld, int nq, int32_t jlo, int n_keys, const int32_t* kv0,
                        const int32_t* n_kv);
// Queries per prefill attention unit that suit these kernels: 48 where the scores run 16 queries
// per zmm (AVX-512), else 24.
int attn_unit_queries();
// RoPE: turns `half` pairs of x into y by angles with cosines cs[i] and sines sn[i]:
// y0 = fma(x0, c, -(x1 s)), y1 = fma(x0, s, x1 c), the pair (x[2i], x[2i+1]) when interleaved
// (llama's "normal" mode), else (x[i], x[i + half]) (NeoX); the same bits on every ISA.
void rope_rotate(const float* x, float* y, const float* cs, const float* sn, int half, bool interleaved);
// y[i] = exp_f32(x[i]) (core/exp.hpp: exp in double, rounded once to float).
void exp_f32_row(const float* x, float* y, int64_t n);

}  // namespace geniex::cpu
