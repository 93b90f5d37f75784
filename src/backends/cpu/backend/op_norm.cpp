// RMSNorm on the CPU: y = x / sqrt(mean(x^2) + eps) * w, sum accumulated in double as
// llama.cpp does, so logits agree closely.
#include <cmath>

#include "backends/cpu/backend/ops.hpp"

namespace geniex::backends::cpu_ops {

void rms_norm(const OpArgs& a) {
  const auto* x = static_cast<const float*>(a.src(0));
  const auto* w = static_cast<const float*>(a.src(1));
  auto* y = static_cast<float*>(a.dst());
  const int64_t n = a.src_node(1).ne[0];  // group length: the whole row or one head
  int64_t r0, r1;
  ThreadPool::split_range(a.node.n_elements() / n, a.ith, a.nth, &r0, &r1);
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i]) * static_cast<double>(xr[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + a.node.eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * w[i];
  }
}

}  // namespace geniex::backends::cpu_ops
