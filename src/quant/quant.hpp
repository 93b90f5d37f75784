// Scalar reference quantize / dequantize / dot for every tensor type: the ground truth that
// every optimized kernel is tested against. Layouts follow GGUF's block formats.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"

namespace geniex::quant {

// Packed block layouts (fp16 values stored as raw uint16_t bits).
#pragma pack(push, 1)
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];  // low nibbles: elements 0..15, high nibbles: 16..31
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_1 / 2];
};
// Q5_0 / Q5_1: the low 4 bits of each quant as in Q4_0 / Q4_1; bit j of qh (read as a
// little-endian uint32) is the fifth bit of element j.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[kQK5_0 / 8];
  uint8_t qs[kQK5_0 / 2];  // low nibbles: elements 0..15, high nibbles: 16..31
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[kQK5_1 / 8];
  uint8_t qs[kQK5_1 / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
struct BlockQ8_1 {
  uint16_t d;  // scale
  uint16_t s;  // d * sum(qs)
  int8_t qs[kQK8_1];
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];  // 8 scales and 8 mins, 6 bits each
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sums of groups of 16 qs
};
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// True for types with a reference dequantize (all weight types and activation formats).
bool can_dequantize(DType t);
// True for types with a reference quantizer (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q8_1, Q4_K, Q5_K, Q6_K, Q8_K).
bool can_quantize(DType t);

// n must be a multiple of the type's block size.
void dequantize_row_ref(DType t, const void* src, float* dst, int64_t n);
void quantize_row_ref(DType t, const float* src, void* dst, int64_t n);

// Weight quantizer of `geniex quantize`. Q4_0: a search per block over scales (ggml's choice
// among the candidates) that keeps a candidate only if it lowers the x^2-weighted squared error
// without raising the plain squared error above the reference's. Every other type: exactly
// quantize_row_ref (ggml's reference quantizer, as llama.cpp's quantize without an imatrix).
void quantize_row_weights(DType t, const float* src, void* dst, int64_t n);

// Activation quantizer used by dot-product kernels. For Q8_0 and Q8_1 it follows the
// arithmetic of ggml's x86 activation path (scale 127/amax, ties to even), which differs in
// rare roundings from the weight quantizer above (1/(amax/127), ties away from zero);
// matching it keeps GenieX's logits bit-identical to llama.cpp's wherever attention is not
// involved. Other types: same as quantize_row_ref.
void quantize_activations_ref(DType t, const float* src, void* dst, int64_t n);

// The activation format paired with weight type w for dot products:
// Q4_0, Q5_0, Q8_0 -> Q8_0; Q4_1, Q5_1 -> Q8_1; Q4_K, Q5_K, Q6_K -> Q8_K; F16 -> F16;
// BF16 -> BF16; F32 -> F32.
DType vec_dot_type(DType w);

// Dot product of one row of weights (type w) with one row of activations already
// quantized to vec_dot_type(w); n elements.
float vec_dot_ref(DType w, const void* wrow, const void* arow, int64_t n);

}  // namespace geniex::quant
