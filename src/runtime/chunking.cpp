// Step planning for Session::eval: n_batch steps, or T-token steps padded for static shapes.
#include "runtime/chunking.hpp"

#include <algorithm>

namespace geniex::runtime {

int32_t static_step_tokens(const std::vector<backends::Backend*>& backends) {
  for (const backends::Backend* b : backends) {
    if (b->static_tokens() > 0) return b->static_tokens();
  }
  return 0;
}

std::vector<StepChunk> plan_steps(int32_t n_tokens, int32_t n_past, int32_t n_ctx,
                                  int32_t n_batch, int32_t static_tokens) {
  std::vector<StepChunk> steps;
  // A single token is a decode step: padding it to T would multiply its work by T.
  const bool padded = static_tokens > 0 && n_tokens > 1;
  const int32_t step = padded ? static_tokens : std::max(1, n_batch);
  for (int32_t start = 0; start < n_tokens; start += step) {
    StepChunk c;
    c.start = start;
    c.n_real = std::min(step, n_tokens - start);
    c.n_padded = c.n_real;
    // Pad tokens occupy KV positions during the step (removed after it), so they need room.
    if (padded && c.n_real < step && static_cast<int64_t>(n_past) + start + step <= n_ctx) {
      c.n_padded = step;
    }
    steps.push_back(c);
  }
  return steps;
}

}  // namespace geniex::runtime
