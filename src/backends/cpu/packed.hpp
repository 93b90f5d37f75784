// Weight layouts the CPU prefers, produced by repacking at load ("buffer-type" concern of the
// CPU backend). Rows in groups of 8; per group and 32-element block, the 8 rows' fields one
// after the other:
//   Q4_0x8: 8 fp16 scales, then 8 x 16 quant bytes (144 bytes);
//   Q4_1x8: 8 fp16 scales, 8 fp16 mins, then 8 x 16 quant bytes (160 bytes);
//   Q8_0x8: 8 fp16 scales, then 8 x 32 quant bytes (272 bytes).
// Same size as the file's type, and row r of a matrix starts at the same byte offset
// (r * row_bytes) when r is a multiple of 8, so row ranges split like the original.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels.hpp"

namespace geniex::cpu {

struct PackedKernels {
  const char* name;  // "q4_0x8", "q4_1x8", "q8_0x8"
  // As TypeKernels::gemm; w points at a group boundary and n_rows is a multiple of 8.
  void (*gemm)(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
               size_t a_stride, int64_t n_cols, float* out, int64_t out_stride);
  // Row `row` of a packed matrix with rows of n elements, as f32.
  void (*dequantize_row)(const void* base, int64_t row, float* dst, int64_t n);
  // Repacks n_rows rows (a multiple of 8) of n elements each from the file's layout.
  void (*repack)(const void* src, void* dst, int64_t n, int64_t n_rows);
};

// The packed layout this CPU prefers for a weight matrix (n_cols x n_rows of type t), or
// nullptr to keep the file's layout. Honours GENIEX_REPACK=0.
const PackedKernels* packed_kernels_for(DType t, int64_t n, int64_t n_rows);

// Kernels of a given ISA ("avx512", "avx512vnni", "avx2": its own layouts, see
// packed_tiles_avx2.cpp, or "i8mm" on AArch64: the x8z layouts below) for tests that compare
// implementations;
// nullptr when not compiled in, not supported by this CPU, or no layout for t.
const PackedKernels* packed_kernels_for_isa(DType t, const char* isa);

// Repack rows (n elements each; n_rows a multiple of 8) into the 8-row layouts, and read one
// row back as f32 (bit-exact with the reference dequantization).
void repack_q4_0x8(const void* src, void* dst, int64_t n, int64_t n_rows);
void repack_q4_1x8(const void* src, void* dst, int64_t n, int64_t n_rows);
void repack_q8_0x8(const void* src, void* dst, int64_t n, int64_t n_rows);
void dequantize_q4_0x8_row(const void* base, int64_t row, float* dst, int64_t n);
void dequantize_q4_1x8_row(const void* base, int64_t row, float* dst, int64_t n);
void dequantize_q8_0x8_row(const void* base, int64_t row, float* dst, int64_t n);

// AArch64 layouts for the SMMLA kernels (kernels_neon_i8mm.cpp), per group of 8 rows and
// 32-element block: the 8 rows' fp16 scales (16 bytes; Q4_1 then its 8 fp16 mins), then per
// row pair (2p, 2p+1) the four SMMLA operands z0..z3, z_k being row 2p's elements 8k..8k+7
// followed by row 2p+1's:
//   Q8_0x8z (272 bytes): z0, z1, z2, z3 as int8, 16 bytes each;
//   Q4_0x8z (144 bytes) and Q4_1x8z (160 bytes): two 16-byte vectors, byte j of the first
//     holding z0[j] in its low nibble and z1[j] in its high one, the second z2 and z3. Q4_1's
//     nibbles are its quants (`v & 15`, `v >> 4`); Q4_0's are q ^ 8, the 4-bit two's
//     complement of q - 8, so `v << 4` and `v & 0xF0` are 16 (q - 8) as int8. Two
//     instructions decode 32 weights.
// Same sizes and row offsets as the 8-row layouts above.
//   Q5_0x8z (176 bytes) and Q5_1x8z (192 bytes, d then m): per row pair 40 bytes A (16), B (16),
//     H (8) holding t = q ^ 16 for Q5_0 (the 5-bit two's complement of q - 16), t = q for Q5_1:
//     A[i] = t(z0[i]) << 3 | t(z2[i]) >> 2, B[i] the same of z1 and z3, H[m] (m < 8) the low
//     two bits of t(z2[m]), t(z2[8 + m]), t(z3[m]), t(z3[8 + m]) at bits 0, 2, 4, 6. Q5_0's
//     z0 is `A & 0xF8` (8 (q - 16)), Q5_1's `A >> 3`; z2 and z3 join A's or B's low three bits
//     and two bits of H (a shift by lane and a shift-and-insert, plus one and).
void repack_q4_0x8z(const void* src, void* dst, int64_t n, int64_t n_rows);
void repack_q5_0x8z(const void* src, void* dst, int64_t n, int64_t n_rows);
void repack_q5_1x8z(const void* src, void* dst, int64_t n, int64_t n_rows);
void dequantize_q5_0x8z_row(const void* base, int64_t row, float* dst, int64_t n);
void dequantize_q5_1x8z_row(const void* base, int64_t row, float* dst, int64_t n);
void repack_q4_1x8z(const void* src, void* dst, int64_t n, int64_t n_rows);
void repack_q8_0x8z(const void* src, void* dst, int64_t n, int64_t n_rows);
void dequantize_q4_0x8z_row(const void* base, int64_t row, float* dst, int64_t n);
void dequantize_q4_1x8z_row(const void* base, int64_t row, float* dst, int64_t n);
void dequantize_q8_0x8z_row(const void* base, int64_t row, float* dst, int64_t n);

// K-quant layouts (packed_k.cpp), per group of 8 rows and 256-element super-block, each
// row's fields in 4-byte chunks, chunk k of the 8 rows together (32 bytes, row r at 4r):
//   Q4_Kx8 (1152 bytes): 8 fp16 d, 8 fp16 dmin, 3 chunks of scale bytes, 32 chunks of quants;
//   Q5_Kx8 (1408 bytes): Q4_Kx8's fields, then 8 chunks of qh;
//   Q6_Kx8 (1680 bytes): 8 fp16 d, 4 chunks of scales, 32 chunks of ql, 16 chunks of qh.
void repack_q4_kx8(const void* src, void* dst, int64_t n, int64_t n_rows);
void repack_q5_kx8(const void* src, void* dst, int64_t n, int64_t n_rows);
void repack_q6_kx8(const void* src, void* dst, int64_t n, int64_t n_rows);
void dequantize_q5_kx8_row(const void* base, int64_t row, float* dst, int64_t n);
void dequantize_q4_kx8_row(const void* base, int64_t row, float* dst, int64_t n);
void dequantize_q6_kx8_row(const void* base, int64_t row, float* dst, int64_t n);

// AArch64 K-quant layouts for the SMMLA kernels (packed_k.cpp documents their bytes), per group
// of 8 rows and super-block, same size and row offsets as the file:
//   Q4_Kx8z (1152 bytes): the 8 rows' d and dmin, their 6-bit sub-block scales and mins as one
//     SMMLA operand per row pair, and the quants as nibbles that `v & 15` / `v >> 4` turn into
//     USMMLA operands;
//   Q5_Kx8z (1408 bytes): Q4_Kx8z's fields, then the fifth bits, 8 bytes per row pair and
//     sub-block that a shift by lane and a bit select put into bit 4 of the nibbles;
//   Q6_Kx8z (1680 bytes): the 8 rows' d, each row pair's scales per half super-block (a
//     16-byte TBL table each), and per row pair and 32 elements the four SMMLA operands as low
//     nibbles and top bit pairs (a shift and an insert per operand give 4 (q - 32)).
void repack_q4_kx8z(const void* src, void* dst, int64_t n, int64_t n_rows);
void repack_q5_kx8z(const void* src, void* dst, int64_t n, int64_t n_rows);
void repack_q6_kx8z(const void* src, void* dst, int64_t n, int64_t n_rows);
void dequantize_q5_kx8z_row(const void* base, int64_t row, float* dst, int64_t n);
void dequantize_q4_kx8z_row(const void* base, int64_t row, float* dst, int64_t n);
void dequantize_q6_kx8z_row(const void* base, int64_t row, float* dst, int64_t n);

}  // namespace geniex::cpu
