// AVX-512 VNNI kernels, chosen at run time where the CPU has them: the packed 8-row layouts'
// register tiles (kernels_x8_tiles.hpp) with dpbusd, one instruction for what maddubs + madd
// (+ add) do in kernels_avx512.cpp.
#include <immintrin.h>

#include "backends/cpu/avx512_diagnostics.hpp"

#include <cstring>
#include <vector>

#include "backends/cpu/kernels_internal.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu::avx512vnni {
namespace {

#include "backends/cpu/kernels_x8_tiles.hpp"

}  // namespace

const PackedKernels* packed_kernels(DType t) {
  static const PackedKernels q4_0{"q4_0x8", &x8_gemm<X8Format::Q4_0, true>, &dequantize_q4_0x8_row, &repack_q4_0x8};
  static const PackedKernels q4_1{"q4_1x8", &x8_gemm<X8Format::Q4_1, true>, &dequantize_q4_1x8_row, &repack_q4_1x8};
  static const PackedKernels q8_0{"q8_0x8", &x8_gemm<X8Format::Q8_0, true>, &dequantize_q8_0x8_row, &repack_q8_0x8};
  if (t == DType::Q4_0) return &q4_0;
  if (t == DType::Q4_1) return &q4_1;
  if (t == DType::Q8_0) return &q8_0;
  return nullptr;
}

}  // namespace geniex::cpu::avx512vnni
