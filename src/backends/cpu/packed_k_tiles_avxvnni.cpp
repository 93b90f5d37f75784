// The packed K-quant tiles (packed_k_tiles_avx2.hpp) compiled with AVX-VNNI: per sub-block and
// column one vpdpbusd chain in i32 and one vpmulld by the scale, where the AVX2 file has maddubs,
// i16 adds and a madd; vpdpwssd for the min and offset terms. Chosen at run time where CPUID
// reports AVX-VNNI. Same layouts (packed_k.cpp's repack), same bits as the AVX2 tiles.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels_internal.hpp"
#include "backends/cpu/packed.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu::avxvnni {
namespace {

#define GENIEX_TILES_VNNI 1
#include "backends/cpu/packed_k_tiles_avx2.hpp"
#undef GENIEX_TILES_VNNI

}  // namespace

const PackedKernels* packed_kernels_k(DType t) {
  static const PackedKernels q4_k{
      "q4_kx8_vnni", &gemm_kx8<kQ4KBlock, true, &q4_k_tile<4>, &q4_k_tile<3>, &q4_k_tile<2>, &q4_k_tile<1>>,
      &dequantize_q4_kx8_row, &repack_q4_kx8};
  static const PackedKernels q5_k{
      "q5_kx8_vnni",
      &gemm_kx8<kQ5KBlock, true, &q4_k_tile<4, true>, &q4_k_tile<3, true>, &q4_k_tile<2, true>, &q4_k_tile<1, true>>,
      &dequantize_q5_kx8_row, &repack_q5_kx8};
  static const PackedKernels q6_k{
      "q6_kx8_vnni", &gemm_kx8<kQ6KBlock, false, &q6_k_tile<4>, &q6_k_tile<3>, &q6_k_tile<2>, &q6_k_tile<1>>,
      &dequantize_q6_kx8_row, &repack_q6_kx8};
  switch (t) {
    case DType::Q4_K: return &q4_k;
    case DType::Q5_K: return &q5_k;
    case DType::Q6_K: return &q6_k;
    default: return nullptr;
  }
}

}  // namespace geniex::cpu::avxvnni
