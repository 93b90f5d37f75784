// The AVX2 packed 8-row layouts' tiles (packed_tiles_avx2.hpp) compiled with AVX-VNNI: one
// vpdpbusd (VEX) per quant vector and column where the AVX2 file has maddubs, an i16 add and,
// per block, a madd. Chosen at run time where CPUID reports AVX-VNNI (Alder Lake and later
// clients, Sapphire Rapids and later servers, Zen 5). Same layouts (the same repack), same bits
// as the AVX2 tiles.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels_internal.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu::avxvnni {
namespace {

#define GENIEX_TILES_VNNI 1
#include "backends/cpu/packed_tiles_avx2.hpp"
#undef GENIEX_TILES_VNNI

// The AVX2 file's repack and read-back (the layout is theirs), this file's gemm.
template <Fmt F>
PackedKernels make(const char* name) {
  const PackedKernels* base = avx2::packed_kernels(Traits<F>::kType, false);
  return PackedKernels{name, &gemm<F, false>, base->dequantize_row, base->repack};
}

}  // namespace

const PackedKernels* packed_kernels(DType t) {
  static const PackedKernels q4_0 = make<Fmt::Q4_0>("q4_0x8_avx2_vnni");
  static const PackedKernels q4_1 = make<Fmt::Q4_1>("q4_1x8_avx2_vnni");
  static const PackedKernels q8_0 = make<Fmt::Q8_0>("q8_0x8_avx2_vnni");
  static const PackedKernels q5_0 = make<Fmt::Q5_0>("q5_0x8_avx2_vnni");
  static const PackedKernels q5_1 = make<Fmt::Q5_1>("q5_1x8_avx2_vnni");
  switch (t) {
    case DType::Q4_0: return &q4_0;
    case DType::Q4_1: return &q4_1;
    case DType::Q8_0: return &q8_0;
    case DType::Q5_0: return &q5_0;
    case DType::Q5_1: return &q5_1;
    default: return nullptr;
  }
}

}  // namespace geniex::cpu::avxvnni
