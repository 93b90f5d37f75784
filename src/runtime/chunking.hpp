// How a Session cuts the tokens of one eval into steps. Normally: steps of at most n_batch
// tokens. When a backend runs only static shapes (Backend::static_tokens() = T), a run of
// several tokens (prefill) goes in steps of exactly T tokens, the last one padded; a single
// token (decode) is not padded: it does not fit the static shape and runs on the backends
// that take any shape, which the plan records as the fallback reason.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/backend.hpp"

namespace geniex::runtime {

struct StepChunk {
  int32_t start = 0;     // index of the step's first token in the eval's tokens
  int32_t n_real = 0;    // tokens of the eval in this step
  int32_t n_padded = 0;  // tokens the step runs: n_real, or T when padded
};

// The static step size of a scheduler's backends: the first nonzero static_tokens() in
// preference order; 0 when every backend takes any shape.
int32_t static_step_tokens(const std::vector<backends::Backend*>& backends);

// Steps for n_tokens new tokens after n_past cached ones, in a context of n_ctx (the caller
// has checked n_past + n_tokens <= n_ctx). A padded step needs room for its pad tokens in
// the context; a last step without that room runs unpadded (so on the fallback backends).
std::vector<StepChunk> plan_steps(int32_t n_tokens, int32_t n_past, int32_t n_ctx,
                                  int32_t n_batch, int32_t static_tokens);

}  // namespace geniex::runtime
