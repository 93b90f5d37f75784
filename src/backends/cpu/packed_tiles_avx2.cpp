// AVX2 packed 8-row layouts for CPUs with AVX2+FMA+F16C (chosen when no AVX-512 layout serves
// the type): the layouts, tiles and gemm are in packed_tiles_avx2.hpp; this file compiles them
// with maddubs (no VNNI) and adds the file-layout-order tiles for GENIEX_AVX2_EXACT=1.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels_internal.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu::avx2 {
namespace {

#define GENIEX_TILES_VNNI 0
#include "backends/cpu/packed_tiles_avx2.hpp"
#undef GENIEX_TILES_VNNI

constexpr PackedKernels kPacked[] = {
    {"q4_0x8_avx2", &gemm<Fmt::Q4_0, false, true>, &dequantize_row<Fmt::Q4_0>, &repack<Fmt::Q4_0>},
    {"q4_1x8_avx2", &gemm<Fmt::Q4_1, false, true>, &dequantize_row<Fmt::Q4_1>, &repack<Fmt::Q4_1>},
    {"q8_0x8_avx2", &gemm<Fmt::Q8_0, false>, &dequantize_row<Fmt::Q8_0>, &repack<Fmt::Q8_0>},
    {"q5_0x8_avx2", &gemm<Fmt::Q5_0, false>, &dequantize_row<Fmt::Q5_0>, &repack<Fmt::Q5_0>},
    {"q5_1x8_avx2", &gemm<Fmt::Q5_1, false>, &dequantize_row<Fmt::Q5_1>, &repack<Fmt::Q5_1>},
};
// The 8 x 4 tiles alone (no 16-row pairs), for comparisons (isa "avx2x8").
constexpr PackedKernels kPackedRows8[] = {
    {"q4_0x8_avx2", &gemm<Fmt::Q4_0, false>, &dequantize_row<Fmt::Q4_0>, &repack<Fmt::Q4_0>},
    {"q4_1x8_avx2", &gemm<Fmt::Q4_1, false>, &dequantize_row<Fmt::Q4_1>, &repack<Fmt::Q4_1>},
};
constexpr PackedKernels kPackedExact[] = {
    {"q4_0x8_avx2_exact", &gemm<Fmt::Q4_0, true>, &dequantize_row<Fmt::Q4_0>, &repack<Fmt::Q4_0>},
    {"q4_1x8_avx2_exact", &gemm<Fmt::Q4_1, true>, &dequantize_row<Fmt::Q4_1>, &repack<Fmt::Q4_1>},
    {"q8_0x8_avx2_exact", &gemm<Fmt::Q8_0, true>, &dequantize_row<Fmt::Q8_0>, &repack<Fmt::Q8_0>},
    {"q5_0x8_avx2_exact", &gemm<Fmt::Q5_0, true>, &dequantize_row<Fmt::Q5_0>, &repack<Fmt::Q5_0>},
};

}  // namespace

const PackedKernels* packed_kernels_rows8(DType t) {
  switch (t) {
    case DType::Q4_0: return &kPackedRows8[0];
    case DType::Q4_1: return &kPackedRows8[1];
    default: return nullptr;
  }
}

// exact (GENIEX_AVX2_EXACT=1, read by packed.cpp): every column through tile_exact, the file
// layout's arithmetic bit for bit, ~2x slower prefill than the tiles.
const PackedKernels* packed_kernels(DType t, bool exact) {
  const PackedKernels* table = exact ? kPackedExact : kPacked;
  switch (t) {
    case DType::Q4_0: return &table[0];
    case DType::Q4_1: return &table[1];
    case DType::Q8_0: return &table[2];
    case DType::Q5_0: return &table[3];
    // Q5_1 has no exact tile: with GENIEX_AVX2_EXACT=1 it keeps the file layout, whose kernel is
    // that arithmetic.
    case DType::Q5_1: return exact ? nullptr : &kPacked[4];
    default: return nullptr;
  }
}

}  // namespace geniex::cpu::avx2
