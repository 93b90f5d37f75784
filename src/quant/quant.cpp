// Scalar reference quantizers, dequantizers and dot products for the GGUF block formats.
// The arithmetic follows ggml's reference code step for step (same rounding helpers, same
// order of float operations where it changes results), so that files quantized here and by
// llama.cpp agree and GenieX's logits match llama.cpp's on the same weights.
#include "quant/quant.hpp"

#include <algorithm>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/fp16.hpp"
#include "quant/quant_k.hpp"

namespace geniex::quant {
namespace {

inline float h2f(uint16_t h) { return fp16_to_f32(h); }
inline uint16_t f2h(float f) { return f32_to_fp16(f); }

// ---- plain types ---------------------------------------------------------------------------

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(s[i]);
}
void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(src[i]);
}
void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
}
void quantize_bf16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
}

// ---- 32-element block formats ----------------------------------------------------------------

// Q4_0: d = max / -8 where max is the signed element of largest magnitude, q = x/d + 8.
void quantize_q4_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  const int64_t nb = n / kQK4_0;
  for (int64_t i = 0; i < nb; ++i, x += kQK4_0) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      // Truncation toward zero of (v + 8.5) after the int8 cast, as ggml does.
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int q1 =
          std::min(15, static_cast<int>(static_cast<int8_t>(x[j + kQK4_0 / 2] * id + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}
void dequantize_q4_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  const int64_t nb = n / kQK4_0;
  for (int64_t i = 0; i < nb; ++i, y += kQK4_0) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0f) - 8) * d;
      y[j + kQK4_0 / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

// Q4_1: d = (max - min) / 15, m = min, q = (x - min)/d.
void quantize_q4_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  const int64_t nb = n / kQK4_1;
  for (int64_t i = 0; i < nb; ++i, x += kQK4_1) {
    float min = FLT_MAX;
    float max = -FLT_MAX;
    for (int j = 0; j < kQK4_1; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    y[i].m = f2h(min);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int q1 = std::min(
          15, static_cast<int>(static_cast<int8_t>((x[j + kQK4_1 / 2] - min) * id + 0.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}
void dequantize_q4_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  const int64_t nb = n / kQK4_1;
  for (int64_t i = 0; i < nb; ++i, y += kQK4_1) {
    const float d = h2f(x[i].d);
    const float m = h2f(x[i].m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0f) * d + m;
      y[j + kQK4_1 / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

// Q5_0 / Q5_1: the fifth bit of element j is bit j of qh, a little-endian uint32.
inline uint32_t load_qh(const uint8_t* qh) {
  return static_cast<uint32_t>(qh[0]) | (static_cast<uint32_t>(qh[1]) << 8) |
         (static_cast<uint32_t>(qh[2]) << 16) | (static_cast<uint32_t>(qh[3]) << 24);
}
inline void store_qh(uint8_t* qh, uint32_t v) {
  for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(v >> (8 * k));
}
// Quant j (0..31) of a 5-bit block, unsigned 0..31.
inline int q5_at(const uint8_t* qs, uint32_t qh, int j) {
  const int lo = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
  return lo | static_cast<int>(((qh >> j) & 1u) << 4);
}

// Q5_0: d = max / -16 where max is the signed element of largest magnitude, q = x/d + 16.
void quantize_q5_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  const int64_t nb = n / kQK5_0;
  for (int64_t i = 0; i < nb; ++i, x += kQK5_0) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQK5_0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      // As Q4_0: truncation of (v + 16.5) after an int8 cast, capped at 31.
      const int q0 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
      const int q1 =
          std::min(31, static_cast<int>(static_cast<int8_t>(x[j + kQK5_0 / 2] * id + 16.5f)));
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + kQK5_0 / 2);
    }
    store_qh(y[i].qh, qh);
  }
}
void dequantize_q5_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  const int64_t nb = n / kQK5_0;
  for (int64_t i = 0; i < nb; ++i, y += kQK5_0) {
    const float d = h2f(x[i].d);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < kQK5_0; ++j) y[j] = static_cast<float>(q5_at(x[i].qs, qh, j) - 16) * d;
  }
}

// Q5_1: d = (max - min) / 31, m = min, q = (x - min)/d.
void quantize_q5_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  const int64_t nb = n / kQK5_1;
  for (int64_t i = 0; i < nb; ++i, x += kQK5_1) {
    float min = FLT_MAX;
    float max = -FLT_MAX;
    for (int j = 0; j < kQK5_1; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    y[i].m = f2h(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const int q0 = std::min(31, static_cast<int>(static_cast<uint8_t>((x[j] - min) * id + 0.5f)));
      const int q1 = std::min(
          31, static_cast<int>(static_cast<uint8_t>((x[j + kQK5_1 / 2] - min) * id + 0.5f)));
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + kQK5_1 / 2);
    }
    store_qh(y[i].qh, qh);
  }
}
void dequantize_q5_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  const int64_t nb = n / kQK5_1;
  for (int64_t i = 0; i < nb; ++i, y += kQK5_1) {
    const float d = h2f(x[i].d);
    const float m = h2f(x[i].m);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < kQK5_1; ++j) y[j] = static_cast<float>(q5_at(x[i].qs, qh, j)) * d + m;
  }
}

// Q8_0: d = amax / 127, q = roundf(x / d) (round half away from zero).
void quantize_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  const int64_t nb = n / kQK8_0;
  for (int64_t i = 0; i < nb; ++i, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    for (int j = 0; j < kQK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}
void dequantize_q8_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  const int64_t nb = n / kQK8_0;
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

// Q8_1: as Q8_0, plus s = d * sum(q) for the min term of Q4_1 dot products.
void quantize_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  const int64_t nb = n / kQK8_1;
  for (int64_t i = 0; i < nb; ++i, x += kQK8_1) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_1; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f2h(d);
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].s = f2h(static_cast<float>(sum) * d);
  }
}
void dequantize_q8_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_1*>(src);
  const int64_t nb = n / kQK8_1;
  for (int64_t i = 0; i < nb; ++i, y += kQK8_1) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < kQK8_1; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

// ---- dot products ----------------------------------------------------------------------------
// Plain types accumulate in double: the reference is the most accurate answer, and kernels
// (f32 accumulators) are compared to it within a tolerance.

float dot_f32(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(y[i]);
  return static_cast<float>(s);
}
// F16 weights are dotted with F16 activations (as ggml's vec_dot_f16), each product in f32
// precision exactly, the sum in double.
float dot_f16(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    s += static_cast<double>(fp16_to_f32(x[i])) * static_cast<double>(fp16_to_f32(y[i]));
  }
  return static_cast<float>(s);
}
float dot_bf16(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    s += static_cast<double>(bf16_to_f32(x[i])) * static_cast<double>(bf16_to_f32(y[i]));
  }
  return static_cast<float>(s);
}

float dot_q4_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      sumi += ((x[i].qs[j] & 0x0f) - 8) * y[i].qs[j];
      sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + kQK4_0 / 2];
    }
    sumf += static_cast<float>(sumi) * (h2f(x[i].d) * h2f(y[i].d));
  }
  return sumf;
}

float dot_q4_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK4_1; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      sumi += (x[i].qs[j] & 0x0f) * y[i].qs[j];
      sumi += (x[i].qs[j] >> 4) * y[i].qs[j + kQK4_1 / 2];
    }
    sumf += static_cast<float>(sumi) * (h2f(x[i].d) * h2f(y[i].d)) + h2f(x[i].m) * h2f(y[i].s);
  }
  return sumf;
}

float dot_q5_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK5_0; ++i) {
    const uint32_t qh = load_qh(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < kQK5_0; ++j) sumi += (q5_at(x[i].qs, qh, j) - 16) * y[i].qs[j];
    sumf += static_cast<float>(sumi) * (h2f(x[i].d) * h2f(y[i].d));
  }
  return sumf;
}

float dot_q5_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK5_1; ++i) {
    const uint32_t qh = load_qh(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < kQK5_1; ++j) sumi += q5_at(x[i].qs, qh, j) * y[i].qs[j];
    sumf += static_cast<float>(sumi) * (h2f(x[i].d) * h2f(y[i].d)) + h2f(x[i].m) * h2f(y[i].s);
  }
  return sumf;
}

float dot_q8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK8_0; ++j) sumi += x[i].qs[j] * y[i].qs[j];
    sumf += static_cast<float>(sumi) * (h2f(x[i].d) * h2f(y[i].d));
  }
  return sumf;
}

}  // namespace

bool can_dequantize(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q4_0: case DType::Q4_1:
    case DType::Q5_0: case DType::Q5_1: case DType::Q8_0: case DType::Q8_1: case DType::Q4_K:
    case DType::Q5_K: case DType::Q6_K:
    case DType::Q8_K:
      return true;
    default:
      return false;
  }
}

bool can_quantize(DType t) { return can_dequantize(t); }

void dequantize_row_ref(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::F16: dequantize_f16(src, dst, n); return;
    case DType::BF16: dequantize_bf16(src, dst, n); return;
    case DType::Q4_0: dequantize_q4_0(src, dst, n); return;
    case DType::Q4_1: dequantize_q4_1(src, dst, n); return;
    case DType::Q5_0: dequantize_q5_0(src, dst, n); return;
    case DType::Q5_1: dequantize_q5_1(src, dst, n); return;
    case DType::Q8_0: dequantize_q8_0(src, dst, n); return;
    case DType::Q8_1: dequantize_q8_1(src, dst, n); return;
    case DType::Q4_K: detail::dequantize_q4_k(src, dst, n); return;
    case DType::Q5_K: detail::dequantize_q5_k(src, dst, n); return;
    case DType::Q6_K: detail::dequantize_q6_k(src, dst, n); return;
    case DType::Q8_K: detail::dequantize_q8_k(src, dst, n); return;
    default: assert(false && "dequantize_row_ref: unsupported type"); return;
  }
}

void quantize_row_ref(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::F16: quantize_f16(src, dst, n); return;
    case DType::BF16: quantize_bf16(src, dst, n); return;
    case DType::Q4_0: quantize_q4_0(src, dst, n); return;
    case DType::Q4_1: quantize_q4_1(src, dst, n); return;
    case DType::Q5_0: quantize_q5_0(src, dst, n); return;
    case DType::Q5_1: quantize_q5_1(src, dst, n); return;
    case DType::Q8_0: quantize_q8_0(src, dst, n); return;
    case DType::Q8_1: quantize_q8_1(src, dst, n); return;
    case DType::Q4_K: detail::quantize_q4_k(src, dst, n); return;
    case DType::Q5_K: detail::quantize_q5_k(src, dst, n); return;
    case DType::Q6_K: detail::quantize_q6_k(src, dst, n); return;
    case DType::Q8_K: detail::quantize_q8_k(src, dst, n); return;
    default: assert(false && "quantize_row_ref: unsupported type"); return;
  }
}

namespace {

// ---- weight quantizers: a search per block, never worse than the reference -----------------
// Every candidate is packed and decoded with the format's own dequantizer, so the error that
// picks the winner is exactly the error the kernels will see. ggml's choice (the reference
// above) is always the first candidate.

// Nearest level in [lo, hi], ties to even (ggml's float magic-number rounding: no libm call,
// which a search that rounds ~10^9 values a model cannot afford).
inline int round_clamped(float v, int lo, int hi) {
  v = std::min(std::max(v, static_cast<float>(lo) - 1.0f), static_cast<float>(hi) + 1.0f);
  const float t = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, sizeof(i));
  return std::clamp((i & 0x007fffff) - 0x00400000, lo, hi);
}

// Squared error of a block, plain and weighted by x^2 (the weighting of ggml's make_qx_quants:
// large weights matter more to the model than their share of the plain error says).
struct BlockError {
  double plain = 0;
  double weighted = 0;
  void add(float y, float x) {
    const double diff = static_cast<double>(y) - static_cast<double>(x);
    plain += diff * diff;
    weighted += diff * diff * static_cast<double>(x) * static_cast<double>(x);
  }
  // A candidate wins when it lowers the weighted error without raising the plain error above
  // the reference's.
  bool better_than(const BlockError& best, double ref_plain) const {
    return plain <= ref_plain && weighted < best.weighted;
  }
};

template <class Block>
BlockError block_error(void (*dequant)(const void*, float*, int64_t), const Block& b, const float* x) {
  float y[32];
  dequant(&b, y, 32);
  BlockError e;
  for (int j = 0; j < 32; ++j) e.add(y[j], x[j]);
  return e;
}

// Symmetric formats: x ~ d * l with l in [lo, hi]. Tries scales that map the largest-magnitude
// element to a range of levels at either end, refits d by least squares for the levels found,
// rounds it to fp16 and re-picks the nearest levels; `pack` stores (d, l[32]) into a block.
template <class Block, class Pack>
void search_symmetric(const float* x, int lo, int hi, Block* best, BlockError best_err, Pack pack) {
  const double ref_plain = best_err.plain;
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax == 0.0f) return;
  int l[32];
  float best_d = 0;
  for (int end = 0; end < 2; ++end) {
    // end 0: max at the negative end (lo), as ggml does; end 1: at the positive end (hi).
    const auto top = static_cast<float>(end == 0 ? -lo : hi);
    const float sign = (end == 0) == (max > 0) ? -1.0f : 1.0f;
    for (int is = -4; is <= 4; ++is) {
      const float levels = top + 0.15f * static_cast<float>(is);
      if (levels <= 0.5f) continue;
      const float iscale = sign * levels / amax;
      float sxl = 0, sll = 0;
      for (int j = 0; j < 32; ++j) {
        const int q = round_clamped(x[j] * iscale, lo, hi);
        sxl += x[j] * static_cast<float>(q);
        sll += static_cast<float>(q * q);
      }
      if (sll == 0) continue;
      const float d = h2f(f2h(sxl / sll));
      if (d == 0.0f) continue;
      const float id = 1.0f / d;
      BlockError err;
      for (int j = 0; j < 32; ++j) {
        // The dequantizers' arithmetic: level times d, in float.
        err.add(static_cast<float>(round_clamped(x[j] * id, lo, hi)) * d, x[j]);
      }
      if (err.better_than(best_err, ref_plain)) {
        best_err = err;
        best_d = d;
      }
    }
  }
  if (best_d == 0.0f) return;
  const float id = 1.0f / best_d;
  for (int j = 0; j < 32; ++j) l[j] = round_clamped(x[j] * id, lo, hi);
  pack(best, f2h(best_d), l);
}

void pack_q4_0(BlockQ4_0* b, uint16_t d, const int* l) {
  b->d = d;
  for (int j = 0; j < 16; ++j) b->qs[j] = static_cast<uint8_t>((l[j] + 8) | ((l[j + 16] + 8) << 4));
}

template <class Block>
void weights_symmetric(void (*ref)(const float*, void*, int64_t), void (*dequant)(const void*, float*, int64_t),
                       void (*pack)(Block*, uint16_t, const int*), int lo, int hi, const float* x, void* dst,
                       int64_t n) {
  auto* y = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    ref(x, &y[i], 32);
    search_symmetric(x, lo, hi, &y[i], block_error(dequant, y[i], x), pack);
  }
}

}  // namespace

void quantize_row_weights(DType t, const float* src, void* dst, int64_t n) {
  // Only Q4_0 searches: on SmolLM2 its perplexity improved (22.13 vs llama.cpp's 23.05, GPL-3
  // text, 8 chunks of 512), while the same kind of search on Q8_0, Q5_0 and the K types lowered
  // the RMSE but raised the perplexity (bench/LOG.md); those stay ggml's reference choice, which
  // is byte-identical to llama.cpp's quantizer.
  if (t == DType::Q4_0) {
    weights_symmetric<BlockQ4_0>(quantize_q4_0, dequantize_q4_0, pack_q4_0, -8, 7, src, dst, n);
    return;
  }
  quantize_row_ref(t, src, dst, n);
}

DType vec_dot_type(DType w) {
  switch (w) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: return DType::Q8_0;
    case DType::Q4_1: case DType::Q5_1: return DType::Q8_1;
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return DType::Q8_K;
    case DType::F16: return DType::F16;
    case DType::BF16: return DType::BF16;
    default: return DType::F32;
  }
}

float vec_dot_ref(DType w, const void* wrow, const void* arow, int64_t n) {
  switch (w) {
    case DType::F32: return dot_f32(wrow, arow, n);
    case DType::F16: return dot_f16(wrow, arow, n);
    case DType::BF16: return dot_bf16(wrow, arow, n);
    case DType::Q4_0: return dot_q4_0(wrow, arow, n);
    case DType::Q4_1: return dot_q4_1(wrow, arow, n);
    case DType::Q5_0: return dot_q5_0(wrow, arow, n);
    case DType::Q5_1: return dot_q5_1(wrow, arow, n);
    case DType::Q8_0: return dot_q8_0(wrow, arow, n);
    case DType::Q4_K: return detail::dot_q4_k(wrow, arow, n);
    case DType::Q5_K: return detail::dot_q5_k(wrow, arow, n);
    case DType::Q6_K: return detail::dot_q6_k(wrow, arow, n);
    default: assert(false && "vec_dot_ref: unsupported weight type"); return 0.0f;
  }
}


namespace {
// One 32-element block the way ggml's x86 activation quantizer does it; returns d and the
// sum of the quants.
float quantize_act_block32(const float* x, int8_t* qs, int* sum) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int s = 0;
  for (int j = 0; j < 32; ++j) {
    qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));  // default rounding: ties to even
    s += qs[j];
  }
  *sum = s;
  return d;
}
}  // namespace

void quantize_activations_ref(DType t, const float* src, void* dst, int64_t n) {
  if (t == DType::Q8_0) {
    auto* y = static_cast<BlockQ8_0*>(dst);
    for (int64_t i = 0; i < n / 32; ++i) {
      int sum;
      y[i].d = f2h(quantize_act_block32(src + i * 32, y[i].qs, &sum));
    }
    return;
  }
  if (t == DType::Q8_1) {
    auto* y = static_cast<BlockQ8_1*>(dst);
    for (int64_t i = 0; i < n / 32; ++i) {
      int sum;
      const float d = quantize_act_block32(src + i * 32, y[i].qs, &sum);
      y[i].d = f2h(d);
      y[i].s = f2h(static_cast<float>(sum) * d);
    }
    return;
  }
  quantize_row_ref(t, src, dst, n);
}

}  // namespace geniex::quant
