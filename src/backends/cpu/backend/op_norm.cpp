// RMSNorm on the CPU: y = x / sqrt(mean(x^2) + eps) * w, sum accumulated in double as
// llama.cpp does, so logits agree closely.
#include <cmath>

#include "backends/cpu/backend/ops.hpp"

namespace geniex::backends::cpu_ops {

namespace {

// Rows per pass of the sums: each row's sum is one chain of double adds in element order (its
// bits), and a lone chain waits on every add's latency; R rows side by side keep R chains in
// flight.
constexpr int64_t kRows = 8;

void scale_row(const float* xr, float scale, const float* w, float* yr, int64_t n) {
  for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * w[i];
}

}  // namespace

void rms_norm(const OpArgs& a) {
  const auto* x = static_cast<const float*>(a.src(0));
  const auto* w = static_cast<const float*>(a.src(1));
  auto* y = static_cast<float*>(a.dst());
  const int64_t n = a.src_node(1).ne[0];  // group length: the whole row or one head
  int64_t r0, r1;
  ThreadPool::split_range(a.node.n_elements() / n, a.ith, a.nth, &r0, &r1);
  auto finish = [&](int64_t r, double sum) {
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + a.node.eps);
    scale_row(x + r * n, scale, w, y + r * n, n);
  };
  int64_t r = r0;
  for (; r + kRows <= r1; r += kRows) {
    double sum[kRows] = {};
    const float* xr = x + r * n;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < kRows; ++k) {
        const auto v = static_cast<double>(xr[k * n + i]);
        sum[k] += v * v;
      }
    }
    for (int64_t k = 0; k < kRows; ++k) finish(r + k, sum[k]);
  }
  for (; r < r1; ++r) {
    const float* xr = x + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i]) * static_cast<double>(xr[i]);
    finish(r, sum);
  }
}

}  // namespace geniex::backends::cpu_ops
