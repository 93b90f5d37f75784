// Private interface between the ISA-independent kernel registry (kernels.cpp) and the
// per-ISA kernel files, which the build includes only on matching architectures.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels.hpp"
#include "backends/cpu/packed.hpp"

namespace geniex::cpu {

namespace {
// The prefill tiles' column blocking: how many columns of `bytes_per_column` (activation bytes
// per column, or per column pair) fit ~256 KiB of L2 while every row group passes over them,
// rounded down to a multiple of the tile width `tile`, at least one tile. Internal linkage: the
// per-ISA files include this with their own target flags, and one inline copy must not stand in
// for all of them.
constexpr int64_t l2_column_chunk(int64_t bytes_per_column, int64_t tile) {
  const int64_t fit = (int64_t{256} << 10) / (bytes_per_column > 0 ? bytes_per_column : 1);
  return fit / tile * tile > tile ? fit / tile * tile : tile;
}
static_assert(l2_column_chunk(2048 * 34 / 32, 4) == 120 && l2_column_chunk(1 << 20, 3) == 3);
}  // namespace

#if defined(__x86_64__) || defined(_M_X64)
#define GENIEX_HAVE_AVX2_KERNELS 1
namespace avx2 {
// Kernel table of weight type t compiled for AVX2+FMA+F16C; nullptr for types without one.
// Callers must check cpu_features() first: these functions execute AVX2 instructions.
const TypeKernels* kernels(DType t);
float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float alpha, const float* x, float* y, int64_t n);
void fp16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f32_to_fp16_row(const float* src, uint16_t* dst, int64_t n);
float dot_f32_f16(const float* a, const uint16_t* b, int64_t n);
void axpy_f16(float alpha, const uint16_t* x, float* y, int64_t n);
void attn_scores_f16(const float* q, const uint8_t* k, size_t row_bytes, int n_keys, int64_t hd, float scale,
                     float* scores);
void attn_accum_f16(const float* p, const uint8_t* v, size_t row_bytes, int n_keys, int64_t hd, float* acc);
void attn_scores_f16_multi(const float* q, int64_t q_stride, int nq, const KvRun* runs, int n_runs, size_t row_bytes,
                           int64_t hd, float scale, float* scores, int64_t ld);
void attn_accum_f16_multi(const float* p, int64_t ld, int nq, const uint8_t* v, size_t row_bytes, int n_keys,
                          int64_t hd, float* acc, int64_t acc_stride);
void exp_f32_row(const float* x, float* y, int64_t n);
void rope_rotate(const float* x, float* y, const float* cs, const float* sn, int half, bool interleaved);
void attn_softmax_multi(float* s, int64_t ld, int nq, int32_t jlo, int n_keys, const int32_t* kv0,
                        const int32_t* n_kv);
// Kernels for the AVX2 packed 8-row layout of weight type t (packed_tiles_avx2.cpp), or nullptr;
// exact: tiles in the file-layout AVX2 kernels' summation order (GENIEX_AVX2_EXACT=1).
const PackedKernels* packed_kernels(DType t, bool exact);
// Q4_0 / Q4_1 with the 8 x 4 tiles only (no 16-row pairs): the same bits; isa "avx2x8".
const PackedKernels* packed_kernels_rows8(DType t);
// The same for the K-quant layouts Q4_Kx8 / Q6_Kx8 (packed_k_tiles_avx2.cpp), or nullptr.
const PackedKernels* packed_kernels_k(DType t);
}  // namespace avx2
namespace avx512 {
// Types with AVX-512 (F+BW) kernels; nullptr for the others (use the AVX2 table then).
const TypeKernels* kernels(DType t);
// Kernels for the packed 8-row layout of weight type t (backends/cpu/packed.hpp), or nullptr.
const PackedKernels* packed_kernels(DType t);
// Q6_K's AVX2 K layout (Q6_Kx8) with a 16-row AVX-512 one-column (decode) tile, the AVX2 tiles'
// bits (packed_k_tiles_avx512.cpp); nullptr for other types.
const PackedKernels* packed_kernels_k(DType t);
// exp_f32_row and attn_softmax_multi with the exponential on 8 doubles per zmm, and the
// multi-query scores and accumulation in zmm (attn_avx512.cpp): the AVX2 functions' bits.
void attn_scores_f16_multi(const float* q, int64_t q_stride, int nq, const KvRun* runs, int n_runs, size_t row_bytes,
                           int64_t hd, float scale, float* scores, int64_t ld);
void attn_accum_f16_multi(const float* p, int64_t ld, int nq, const uint8_t* v, size_t row_bytes, int n_keys,
                          int64_t hd, float* acc, int64_t acc_stride);
void exp_f32_row(const float* x, float* y, int64_t n);
void attn_softmax_multi(float* s, int64_t ld, int nq, int32_t jlo, int n_keys, const int32_t* kv0,
                        const int32_t* n_kv);
}  // namespace avx512
namespace avx512vnni {
// As avx512::packed_kernels with VNNI dot products (the CPU must have AVX-512 VNNI).
const PackedKernels* packed_kernels(DType t);
// The AVX2 packed layouts of Q4_0, Q4_1, Q8_0, Q5_0, Q5_1 (same repack and row read-back, same
// bits) with 16-row zmm tiles, two 8-row groups per register (packed_tiles16_avx512vnni.cpp).
//
// How their one-column (decode) calls read the weights, the same bits either way: kRows8 through
// the 8-row tiles, one group after the other as one stream; kRows16 through the 16-row tiles, two
// groups side by side. On a Zen 4 kRows16 got half of kRows8's bandwidth from DRAM; on an Intel
// Xeon (AMX) kRows16 was faster from L2 and from DRAM (bench/LOG.md, twenty-fourth and
// thirty-first sessions). Q6_K takes the 8-row tile either way. decode_rows() is this CPU's
// choice: GENIEX_DECODE_ROWS=8 or 16 where set (read once), else kRows8 on AMD, kRows16 elsewhere.
enum class DecodeRows { kRows8, kRows16 };
DecodeRows decode_rows();
const PackedKernels* packed_kernels_16(DType t, DecodeRows d = decode_rows());
// The K layouts of Q4_K, Q5_K and Q6_K (packed_k.cpp's repack, same bits as
// avx2::packed_kernels_k) with 16-row zmm tiles (packed_k_tiles16_avx512vnni.cpp).
const PackedKernels* packed_kernels_k16(DType t, DecodeRows d = decode_rows());
// The same K layouts with their 8-row VNNI tiles (packed_k_tiles_avx2.hpp) EVEX-encoded on ymm
// (packed_k_tiles8_avx512vnni.cpp): AVX-VNNI's tiles for CPUs with AVX-512 VNNI but no AVX-VNNI
// (Zen 4, Ice Lake, Tiger Lake). Same bits as avx2::packed_kernels_k.
const PackedKernels* packed_kernels_k8(DType t);
}  // namespace avx512vnni
namespace avxvnni {
// The AVX2 packed layouts of Q4_0, Q4_1, Q8_0, Q5_0, Q5_1 (same repack and row read-back, same
// bits) with AVX-VNNI tiles (packed_tiles_avxvnni.cpp); the CPU must report avxvnni.
const PackedKernels* packed_kernels(DType t);
// The K-quant layouts of Q4_K, Q5_K, Q6_K (packed_k.cpp's repack, same bits as
// avx2::packed_kernels_k) with AVX-VNNI tiles (packed_k_tiles_avxvnni.cpp).
const PackedKernels* packed_kernels_k(DType t);
}  // namespace avxvnni
namespace amx {
// The AVX2 packed layouts of Q4_0, Q4_1, Q8_0, Q5_0, Q5_1 and the K layouts of Q4_K, Q5_K, Q6_K
// (same repack and row read-back) with an AMX-INT8 prefill gemm (packed_tiles_amx.cpp) whose
// results are the AVX2 tiles' bits;
// nullptr for other types. The CPU must report amx_int8 (cpu_features()).
const PackedKernels* packed_kernels(DType t);
}  // namespace amx
// The 8-row K tiles (Q4_K, Q5_K, Q6_K; same bits whichever) for one-column calls and a last odd
// group of the wider tiles: AVX-VNNI's where the CPU has it, else the EVEX-encoded ones where it
// has AVX-512 VNNI, else AVX2's (packed.cpp; baseline code, callable from any file).
const PackedKernels* packed_kernels_k8_edge(DType t);
#endif

#if defined(__aarch64__)
#define GENIEX_HAVE_NEON_KERNELS 1
// AArch64 tables (kernels_neon*.cpp): "neon" runs on every AArch64 CPU; "dotprod" needs
// FEAT_DotProd (SDOT) and "i8mm" FEAT_I8MM (SMMLA) as well: check cpu_features() first.
namespace neon {
const TypeKernels* kernels(DType t);
float dot_f32(const float* a, const float* b, int64_t n);
void axpy_f32(float alpha, const float* x, float* y, int64_t n);
void fp16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f32_to_fp16_row(const float* src, uint16_t* dst, int64_t n);
float dot_f32_f16(const float* a, const uint16_t* b, int64_t n);
void axpy_f16(float alpha, const uint16_t* x, float* y, int64_t n);
void attn_scores_f16(const float* q, const uint8_t* k, size_t row_bytes, int n_keys, int64_t hd,
                     float scale, float* scores);
void attn_accum_f16(const float* p, const uint8_t* v, size_t row_bytes, int n_keys, int64_t hd,
                    float* acc);
// exp_f32 (core/exp.hpp) on two double lanes per vector, the AVX-512 exp's steps.
void exp_f32_row(const float* x, float* y, int64_t n);
}  // namespace neon
namespace neon_dotprod {
const TypeKernels* kernels(DType t);
}  // namespace neon_dotprod
namespace neon_i8mm {
const TypeKernels* kernels(DType t);
// The x8z layouts (packed.hpp) for Q4_0, Q4_1 and Q8_0; nullptr for other types.
const PackedKernels* packed_kernels(DType t);
}  // namespace neon_i8mm
#endif

}  // namespace geniex::cpu
