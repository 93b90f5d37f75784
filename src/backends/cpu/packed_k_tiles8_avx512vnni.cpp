// The packed K-quant 8-row tiles (packed_k_tiles_avx2.hpp) with VNNI dot products, EVEX-encoded
// on ymm: for CPUs that have AVX-512 VNNI but not AVX-VNNI (Zen 4, Ice Lake, Tiger Lake), whose
// one-column (decode) calls and last odd 8-row groups would otherwise run the AVX2 maddubs tiles.
// Compiled with AVX-512 F/BW/VL/VNNI, so the tiles also get ymm16-31. Same layouts (packed_k.cpp's
// repack), same bits as the AVX2 and AVX-VNNI tiles (exact integer sums, the same float steps).
#include <immintrin.h>

#include "backends/cpu/avx512_diagnostics.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels_internal.hpp"
#include "backends/cpu/packed.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu::avx512vnni {
namespace {

#define GENIEX_TILES_VNNI 1
#include "backends/cpu/packed_k_tiles_avx2.hpp"
#undef GENIEX_TILES_VNNI

}  // namespace

const PackedKernels* packed_kernels_k8(DType t) {
  return k_kernels(t, "q4_kx8_evex_vnni", "q5_kx8_evex_vnni", "q6_kx8_evex_vnni");
}

}  // namespace geniex::cpu::avx512vnni
