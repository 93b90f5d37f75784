// Rotary position embedding on the CPU. Angles follow ggml's recurrence (theta multiplied
// by base^(-2/n_rot) per pair, in float) so results match llama.cpp's bit for bit in spirit:
// pair i turns at freq_scale * (pos * base^(-2i/n_rot) / factor_i), with factor_i from the
// optional frequency-factor input (Llama 3.1+ "llama3" scaling), else 1.
#include <cmath>

#include "backends/cpu/backend/ops.hpp"
#include "backends/cpu/kernels.hpp"

namespace geniex::backends::cpu_ops {

void rope(const OpArgs& a) {
  const graph::RopeParams& p = a.node.rope;
  const auto* x = static_cast<const float*>(a.src(0));
  const auto* pos = static_cast<const int32_t*>(a.src(1));
  auto* y = static_cast<float*>(a.dst());
  const int64_t width = a.node.ne[0];
  const int64_t n_heads = width / p.head_dim;
  const int64_t n_tok = a.node.ne[1];
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  const int half = p.n_rot / 2;
  const float* factors = a.node.src[2] != graph::kNoInput ? static_cast<const float*>(a.src(2)) : nullptr;

  float cos_cache[512];
  float sin_cache[512];
  int64_t t0, t1;
  ThreadPool::split_range(n_tok, a.ith, a.nth, &t0, &t1);
  for (int64_t t = t0; t < t1; ++t) {
    float theta_base = static_cast<float>(pos[t]);
    for (int i = 0; i < half; ++i) {
      const float theta = p.freq_scale * (factors != nullptr ? theta_base / factors[i] : theta_base);
      cos_cache[i] = std::cos(theta);
      sin_cache[i] = std::sin(theta);
      theta_base *= theta_scale;
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* xh = x + t * width + h * p.head_dim;
      float* yh = y + t * width + h * p.head_dim;
      // fma as GCC contracts llama.cpp's rotation; the model's logits move with last-bit
      // changes here, so this keeps them closer to the reference.
      cpu::rope_rotate(xh, yh, cos_cache, sin_cache, half, p.mode == graph::RopeMode::Normal);
      for (int i = p.n_rot; i < p.head_dim; ++i) yh[i] = xh[i];
    }
  }
}

}  // namespace geniex::backends::cpu_ops
