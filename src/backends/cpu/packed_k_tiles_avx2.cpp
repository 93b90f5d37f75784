// AVX2 register tiles over the packed K-quant layouts Q4_Kx8, Q5_Kx8 and Q6_Kx8 (packed_k.cpp) with
// Q8_K activations: the tiles and their driver are in packed_k_tiles_avx2.hpp, compiled here
// with maddubs / madd (no VNNI).
//
// Compiled with -mavx2 -mfma -mf16c and only called after a run-time CPU check: everything
// here is file-local (no inline functions shared with other files).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels_internal.hpp"
#include "backends/cpu/packed.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu::avx2 {
namespace {

#define GENIEX_TILES_VNNI 0
#include "backends/cpu/packed_k_tiles_avx2.hpp"
#undef GENIEX_TILES_VNNI

}  // namespace

const PackedKernels* packed_kernels_k(DType t) {
  static const PackedKernels q4_k{
      "q4_kx8", &gemm_kx8<kQ4KBlock, true, &q4_k_tile<4>, &q4_k_tile<3>, &q4_k_tile<2>, &q4_k_tile<1>>,
      &dequantize_q4_kx8_row, &repack_q4_kx8};
  static const PackedKernels q5_k{
      "q5_kx8", &gemm_kx8<kQ5KBlock, true, &q4_k_tile<4, true>, &q4_k_tile<3, true>, &q4_k_tile<2, true>, &q4_k_tile<1, true>>,
      &dequantize_q5_kx8_row, &repack_q5_kx8};
  static const PackedKernels q6_k{
      "q6_kx8", &gemm_kx8<kQ6KBlock, false, &q6_k_tile<4>, &q6_k_tile<3>, &q6_k_tile<2>, &q6_k_tile<1>>,
      &dequantize_q6_kx8_row, &repack_q6_kx8};
  switch (t) {
    case DType::Q4_K: return &q4_k;
    case DType::Q5_K: return &q5_k;
    case DType::Q6_K: return &q6_k;
    default: return nullptr;
  }
}

}  // namespace geniex::cpu::avx2
