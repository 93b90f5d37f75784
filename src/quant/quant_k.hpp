// K-quant (256-element super-block) reference routines, behind quant.hpp's dispatch; also
// the 6-bit scale/min unpacking shared with the optimized kernels.
#pragma once

#include <cstdint>

namespace geniex::quant {

// Scale and min of sub-block j (0..7) of a Q4_K / Q5_K block's 12-byte scales field.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

namespace detail {

void quantize_q4_k(const float* x, void* dst, int64_t n);
void quantize_q5_k(const float* x, void* dst, int64_t n);
void quantize_q6_k(const float* x, void* dst, int64_t n);
void quantize_q8_k(const float* x, void* dst, int64_t n);
void dequantize_q4_k(const void* src, float* y, int64_t n);
void dequantize_q5_k(const void* src, float* y, int64_t n);
void dequantize_q6_k(const void* src, float* y, int64_t n);
void dequantize_q8_k(const void* src, float* y, int64_t n);
float dot_q4_k(const void* w, const void* a, int64_t n);
float dot_q5_k(const void* w, const void* a, int64_t n);
float dot_q6_k(const void* w, const void* a, int64_t n);

}  // namespace detail
}  // namespace geniex::quant
