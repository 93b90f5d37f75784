// GenieX's exponential for softmax and SiLU: exp evaluated in double and rounded once to float.
// Every backend computes exactly this (the CPU here; OpenCL devices with fp64 in
// kernels/attention.cl), so attention and SwiGLU agree bit for bit across backends. A double exp
// within an ulp of the true value rounds to the correctly rounded float except when the result
// lies within ~2^-29 relative of a float rounding boundary, so two conforming double exps (glibc's,
// an OpenCL device's) give the same float in all but astronomically rare cases. Float expf from
// the C library is not used: its last bit is the library's choice.
#pragma once

#include <cmath>

namespace geniex {

inline float exp_f32(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }

}  // namespace geniex
