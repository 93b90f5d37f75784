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

const PackedKernels* packed_kernels_k(DType t) { return k_kernels(t, "q4_kx8", "q5_kx8", "q6_kx8"); }

}  // namespace geniex::cpu::avx2
