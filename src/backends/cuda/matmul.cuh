// MatMul kernels (launchers callable from host C++): activation quantization to the weight
// type's partner format, the matrix-vector kernel for decode, and the fp16 dequantization that
// feeds cuBLAS's tensor-core GEMM for prefill (ops.cpp makes the GemmEx call).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.hpp"

namespace geniex::backends::cuda::kern {

// Weight types with MatMul and GetRows kernels.
bool has_weight_kernels(DType t);

// x: n_tok rows of k f32 values -> rows of act_type (Q8_0, Q8_1, Q8_K or F16), row_bytes apart,
// exactly as quant::quantize_activations_ref (ggml's x86 activation rounding).
cudaError_t quantize_act(DType act_type, const float* x, void* out, int64_t k, int64_t n_tok, cudaStream_t s);

// out[t * n + r] = dot(row r of w, activation row t): integer dot products on int8 activations
// for the quantized types (act from quantize_act), f32 / f16 products for F32 / F16 weights.
cudaError_t mul_mv(DType w_type, const void* w, const void* act, float* out, int64_t k, int64_t n, int64_t n_tok,
                   cudaStream_t s);

// n rows of k values of type t (a weight type, or the int8 activation formats Q8_0, Q8_1,
// Q8_K) -> fp16 (bits), rounded once from the reference's f32 value.
cudaError_t dequant_to_f16(DType t, const void* src, uint16_t* out, int64_t k, int64_t n, cudaStream_t s);

}  // namespace geniex::backends::cuda::kern
