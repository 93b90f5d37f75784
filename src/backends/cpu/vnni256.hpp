// The 256-bit vpdpbusd / vpdpwssd for the 8-row VNNI tiles (packed_tiles_avx2.hpp,
// packed_k_tiles_avx2.hpp): EVEX (AVX-512 VNNI + VL) where the including file is compiled for
// AVX-512 VNNI (Zen 4, Ice Lake, Tiger Lake have no AVX-VNNI), else VEX (AVX-VNNI). The same
// instructions and results either way.
// Macros only (no includes): the tile headers include it inside their namespaces, after
// <immintrin.h>.
#pragma once

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define geniex_dpbusd256 _mm256_dpbusd_epi32
#define geniex_dpwssd256 _mm256_dpwssd_epi32
#else
#define geniex_dpbusd256 _mm256_dpbusd_avx_epi32
#define geniex_dpwssd256 _mm256_dpwssd_avx_epi32
#endif
