// Element-wise CPU ops: Add, SwiGLU (silu(gate) * up) and Copy.
#include <cmath>
#include <cstring>

#include "backends/cpu/backend/ops.hpp"
#include "backends/cpu/kernels.hpp"

namespace geniex::backends::cpu_ops {

void add(const OpArgs& a) {
  const auto* x = static_cast<const float*>(a.src(0));
  const auto* y = static_cast<const float*>(a.src(1));
  auto* out = static_cast<float*>(a.dst());
  int64_t i0, i1;
  ThreadPool::split_range(a.node.n_elements(), a.ith, a.nth, &i0, &i1);
  if (a.src_node(1).n_elements() == a.node.n_elements()) {
    for (int64_t i = i0; i < i1; ++i) out[i] = x[i] + y[i];
    return;
  }
  const int64_t k = a.node.ne[0];  // y is one row, added to every row of x
  for (int64_t i = i0; i < i1; ++i) out[i] = x[i] + y[i % k];
}

void swiglu(const OpArgs& a) {
  const auto* g = static_cast<const float*>(a.src(0));
  const auto* u = static_cast<const float*>(a.src(1));
  auto* out = static_cast<float*>(a.dst());
  int64_t i0, i1;
  ThreadPool::split_range(a.node.n_elements(), a.ith, a.nth, &i0, &i1);
  // out = g / (1 + exp_f32(-g)) * u, the exponentials a chunk at a time (cpu::exp_f32_row has
  // exp_f32's bits, so the result is the same as element by element).
  float e[256];
  for (int64_t c = i0; c < i1; c += 256) {
    const int64_t n = i1 - c < 256 ? i1 - c : 256;
    for (int64_t i = 0; i < n; ++i) e[i] = -g[c + i];
    cpu::exp_f32_row(e, e, n);
    for (int64_t i = 0; i < n; ++i) out[c + i] = g[c + i] / (1.0f + e[i]) * u[c + i];
  }
}

// GELU with the tanh approximation (PyTorch's gelu(approximate="tanh"), Gemma's activation).
void geglu(const OpArgs& a) {
  const auto* g = static_cast<const float*>(a.src(0));
  const auto* u = static_cast<const float*>(a.src(1));
  auto* out = static_cast<float*>(a.dst());
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  int64_t i0, i1;
  ThreadPool::split_range(a.node.n_elements(), a.ith, a.nth, &i0, &i1);
  for (int64_t i = i0; i < i1; ++i) {
    const float x = g[i];
    const float gelu = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
    out[i] = gelu * u[i];
  }
}

void scale(const OpArgs& a) {
  const auto* x = static_cast<const float*>(a.src(0));
  auto* out = static_cast<float*>(a.dst());
  const float s = a.node.scalar;
  int64_t i0, i1;
  ThreadPool::split_range(a.node.n_elements(), a.ith, a.nth, &i0, &i1);
  for (int64_t i = i0; i < i1; ++i) out[i] = x[i] * s;
}

void copy(const OpArgs& a) {
  const auto total = static_cast<int64_t>(a.node.nbytes());
  int64_t b0, b1;
  ThreadPool::split_range(total, a.ith, a.nth, &b0, &b1);
  if (b1 > b0) {
    std::memcpy(static_cast<uint8_t*>(a.dst()) + b0, static_cast<const uint8_t*>(a.src(0)) + b0,
                static_cast<size_t>(b1 - b0));
  }
}

}  // namespace geniex::backends::cpu_ops
