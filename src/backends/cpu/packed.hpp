// Weight layouts the CPU prefers, produced by repacking at load ("buffer-type" concern of the
// CPU backend). Q4_0x8: rows in groups of 8; per group and block, the 8 rows' fp16 scales
// (16 bytes) then their 8 x 16 quant bytes. Same size as Q4_0, and row r of a matrix starts
// at the same byte offset (r * row_bytes) when r is a multiple of 8, so row ranges split like
// the original.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels.hpp"

namespace geniex::cpu {

struct PackedKernels {
  const char* name;  // "q4_0x8"
  // As TypeKernels::gemm; w points at a group boundary and n_rows is a multiple of 8.
  void (*gemm)(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* a,
               size_t a_stride, int64_t n_cols, float* out, int64_t out_stride);
  // Row `row` of a packed matrix with rows of n elements, as f32.
  void (*dequantize_row)(const void* base, int64_t row, float* dst, int64_t n);
};

// The packed layout this CPU prefers for a weight matrix (n_cols x n_rows of type t), or
// nullptr to keep the file's layout. Honours GENIEX_REPACK=0.
const PackedKernels* packed_kernels_for(DType t, int64_t n, int64_t n_rows);

// Repacks Q4_0 rows (n elements each; n_rows a multiple of 8) into Q4_0x8.
void repack_q4_0x8(const void* src, void* dst, int64_t n, int64_t n_rows);
void dequantize_q4_0x8_row(const void* base, int64_t row, float* dst, int64_t n);

}  // namespace geniex::cpu
