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

const PackedKernels* packed_kernels_k(DType t) { return k_kernels(t, "q4_kx8_vnni", "q5_kx8_vnni", "q6_kx8_vnni"); }

}  // namespace geniex::cpu::avxvnni
