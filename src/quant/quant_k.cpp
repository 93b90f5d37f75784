// K-quant references (Q4_K, Q5_K, Q6_K, Q8_K): ggml's search-based quantizers
// (make_qkx2-style min/scale search, make_qx-style symmetric search), the block decoders and
// the integer dot products against Q8_K activations.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.hpp"
#include "quant/quant.hpp"
#include "quant/quant_k.hpp"

namespace geniex::quant::detail {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, through the float magic-number trick ggml uses (valid for
// |v| < 2^22); kept bit-for-bit because it decides the stored quants.
inline int nearest_int(float v) {
  const float t = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

// Asymmetric search: find scale and min (min <= 0) so x ~ scale * L + min with L in
// [0, nmax], minimising the weighted squared error over nstep+1 candidate scales.
// Returns the scale; *the_min receives -min.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const auto fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Symmetric search (ggml's make_qx_quants with rmse_type 1, no importance weights): L in
// [0, 2*nmax), value = scale * (L - nmax); tries 19 scales around -nmax/max.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const auto fnmax = static_cast<float>(nmax);
  float iscale = -fnmax / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const auto fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(fnmax + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      const auto fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per-32 sub-block scale/min search, then the
// 6-bit quantization of those scales and mins against the block's d and dmin, then the final
// quants recomputed from the stored (rounded) scales.
template <int kNmax>
void quantize_kx_scales(const float* x, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales_out,
                        uint8_t* L, float rmin, float rdelta, int nstep) {
  uint8_t Laux[32];
  float weights[32];
  float mins[kQK_K / 32];
  float scales[kQK_K / 32];
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < kQK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, kNmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin,
                                 rdelta, nstep);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      scales_out[j] = ls;
      scales_out[j + 4] = lm;
    } else {
      scales_out[j + 4] = static_cast<uint8_t>((ls & 0x0f) | ((lm & 0x0f) << 4));
      scales_out[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales_out[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d_out = f32_to_fp16(max_scale / 63.f);
  *dmin_out = f32_to_fp16(max_min / 63.f);
  for (int j = 0; j < kQK_K / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, scales_out, &sc, &m);
    const float d = fp16_to_f32(*d_out) * sc;
    if (d == 0.0f) continue;
    const float dm = fp16_to_f32(*dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(kNmax, l)));
    }
  }
}

}  // namespace

void quantize_q4_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    quantize_kx_scales<15>(x, &y[i].d, &y[i].dmin, y[i].scales, L, -1.f, 0.1f, 20);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void dequantize_q4_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const float min = fp16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0, is = 0; j < kQK_K; j += 64, q += 32, is += 2) {
      uint8_t sc, m;
      get_scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void quantize_q5_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    quantize_kx_scales<31>(x, &y[i].d, &y[i].dmin, y[i].scales, L, -0.5f, 0.1f, 15);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, kQK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int nn = 0; nn < kQK_K; nn += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[nn + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[nn + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void dequantize_q5_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const float min = fp16_to_f32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    unsigned u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < kQK_K; j += 64, ql += 32, is += 2, u1 <<= 2, u2 <<= 2) {
      uint8_t sc, m;
      get_scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
      }
    }
  }
}

void quantize_q6_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  int8_t L[kQK_K];
  float scales[kQK_K / 16];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      if (std::fabs(scale) > max_abs_scale) {
        max_abs_scale = std::fabs(scale);
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      y[i].d = f32_to_fp16(0.f);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = f32_to_fp16(1 / iscale);
    for (int ib = 0; ib < kQK_K / 16; ++ib) {
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      const float d = fp16_to_f32(y[i].d) * y[i].scales[j];
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = nearest_int(x[16 * j + ii] / d);
        l = std::max(-32, std::min(31, l));
        L[16 * j + ii] = static_cast<int8_t>(l + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l] & 0x0f;
        const int q2 = L[j + l + 32] & 0x0f;
        const int q3 = L[j + l + 64] & 0x0f;
        const int q4 = L[j + l + 96] & 0x0f;
        ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                     ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

void dequantize_q6_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int nn = 0; nn < kQK_K; nn += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// Q8_K: d = max / -127 with max the signed element of largest magnitude (first one on ties);
// q = min(127, nearest_int(-127 / max * x)); bsums hold the sums of each 16 quants.
void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max = 0;
    float amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, kQK_K);
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

void dequantize_q8_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int j = 0; j < kQK_K; ++j) *y++ = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

// K-quant dots: integer sum of scale * (quant . q8) per sub-block, times d_w * d_a; the
// min term of Q4_K/Q5_K comes from the activation's bsums (sum of q8 per 16).
float dot_q4_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q4 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    int sumi = 0;
    int summs = 0;
    for (int j = 0; j < kQK_K / 64; ++j, q4 += 32, q8 += 64) {
      uint8_t sc0, m0, sc1, m1;
      get_scale_min_k4(2 * j, x[i].scales, &sc0, &m0);
      get_scale_min_k4(2 * j + 1, x[i].scales, &sc1, &m1);
      int s0 = 0, s1 = 0;
      for (int l = 0; l < 32; ++l) {
        s0 += (q4[l] & 0x0f) * q8[l];
        s1 += (q4[l] >> 4) * q8[l + 32];
      }
      sumi += sc0 * s0 + sc1 * s1;
      summs += m0 * (y[i].bsums[4 * j] + y[i].bsums[4 * j + 1]) +
               m1 * (y[i].bsums[4 * j + 2] + y[i].bsums[4 * j + 3]);
    }
    const float d = fp16_to_f32(x[i].d) * y[i].d;
    const float dmin = fp16_to_f32(x[i].dmin) * y[i].d;
    sumf += d * static_cast<float>(sumi) - dmin * static_cast<float>(summs);
  }
  return sumf;
}

float dot_q5_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const int8_t* q8 = y[i].qs;
    int sumi = 0;
    int summs = 0;
    unsigned u1 = 1, u2 = 2;
    for (int j = 0; j < kQK_K / 64; ++j, ql += 32, q8 += 64, u1 <<= 2, u2 <<= 2) {
      uint8_t sc0, m0, sc1, m1;
      get_scale_min_k4(2 * j, x[i].scales, &sc0, &m0);
      get_scale_min_k4(2 * j + 1, x[i].scales, &sc1, &m1);
      int s0 = 0, s1 = 0;
      for (int l = 0; l < 32; ++l) {
        s0 += ((ql[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0)) * q8[l];
        s1 += ((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) * q8[l + 32];
      }
      sumi += sc0 * s0 + sc1 * s1;
      summs += m0 * (y[i].bsums[4 * j] + y[i].bsums[4 * j + 1]) +
               m1 * (y[i].bsums[4 * j + 2] + y[i].bsums[4 * j + 3]);
    }
    const float d = fp16_to_f32(x[i].d) * y[i].d;
    const float dmin = fp16_to_f32(x[i].dmin) * y[i].d;
    sumf += d * static_cast<float>(sumi) - dmin * static_cast<float>(summs);
  }
  return sumf;
}

float dot_q6_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    const int8_t* q8 = y[i].qs;
    int sumi = 0;
    for (int nn = 0; nn < kQK_K; nn += 128, ql += 64, qh += 32, sc += 8, q8 += 128) {
      int s[8] = {};
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        s[is] += q1 * q8[l];
        s[is + 2] += q2 * q8[l + 32];
        s[is + 4] += q3 * q8[l + 64];
        s[is + 6] += q4 * q8[l + 96];
      }
      for (int k = 0; k < 8; ++k) sumi += sc[k] * s[k];
    }
    sumf += fp16_to_f32(x[i].d) * y[i].d * static_cast<float>(sumi);
  }
  return sumf;
}

}  // namespace geniex::quant::detail
