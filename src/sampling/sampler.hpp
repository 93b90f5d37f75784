// Token sampling from logits (llama.cpp's default chain) and stop-string matching over streamed text.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace geniex::sampling {

// Settings of the sampler chain. Defaults and meanings follow llama.cpp's `common` sampler.
struct SamplerConfig {
  float temperature = 0.8f;     // <= 0 means greedy (argmax after the penalties)
  int32_t top_k = 40;           // <= 0 (or >= vocab size): disabled
  float top_p = 0.95f;          // >= 1: disabled
  float min_p = 0.05f;          // <= 0: disabled
  float repeat_penalty = 1.0f;  // 1: disabled. llama.cpp semantics: logit > 0 ? logit / p : logit * p
  int32_t repeat_last_n = 64;   // window of accepted tokens penalized; 0: none; < 0: all since reset()
  uint64_t seed = 0xFFFFFFFF'FFFFFFFF;  // this value means "random" (std::random_device); else deterministic
};

inline constexpr uint64_t kRandomSeed = 0xFFFFFFFF'FFFFFFFF;

// Samples one token id from a row of logits. The chain, in llama.cpp's default order:
//
//   1. penalties    every distinct token among the last `repeat_last_n` accepted ones gets
//                   logit / p when its logit is > 0, logit * p otherwise (applied once per token);
//   2. top_k        keep the k highest logits (ties: lower id first);
//   3. top_p        softmax at temperature 1 over what is left, keep the smallest prefix of the
//                   sorted candidates whose probability mass reaches top_p (at least one token);
//   4. min_p        keep tokens whose probability is >= min_p * the highest probability,
//                   i.e. logit >= max_logit + ln(min_p);
//   5. temperature  divide the remaining logits by the temperature;
//   6. softmax + draw from the resulting distribution with the sampler's own RNG.
//
// With temperature <= 0 the chain reduces to argmax after step 1 (the truncations cannot change
// the maximum). NaN logits are ignored (never sampled); +inf is treated as the largest finite value.
// The RNG is a 64-bit Mersenne Twister, with its own float conversion, so a given seed gives the same
// tokens on every platform and standard library (the draws do not match llama.cpp's RNG stream).
//
// Steady state (same vocabulary size from call to call) allocates nothing: all working buffers
// live in the Sampler. top_k uses a bounded heap (one pass over the logits); top_p without top_k
// buckets the logits and sorts only the bucket where the nucleus ends. A Sampler is not thread-safe.
class Sampler {
 public:
  explicit Sampler(const SamplerConfig& cfg);

  // Draws a token id in [0, logits.size()). Errors: empty logits, all logits NaN / -inf,
  // more than INT32_MAX logits.
  Result<int32_t> sample(std::span<const float> logits);

  // Records a token that became part of the sequence (for the repetition penalty).
  void accept(int32_t token);

  // Forgets the history and restarts the RNG from the seed, so the same inputs repeat the same draws.
  void reset();

  // The seed in use (the drawn one when the config asked for a random seed).
  uint64_t seed() const { return seed_; }
  const SamplerConfig& config() const { return cfg_; }

 private:
  // top_p over the whole vocabulary buckets logits by distance below the max: kTopPBuckets buckets
  // over kTopPRange nats (exp(-32) ~ 1e-14, so the last, open-ended bucket carries no real mass).
  static constexpr size_t kTopPBuckets = 512;
  static constexpr float kTopPRange = 32.0f;

  struct Candidate {
    int32_t id;
    float logit;
  };

  void prepare_logits(std::span<const float> logits);  // work_ = logits with NaN/inf fixed, penalties applied
  void apply_penalties();
  void collect_top_k(int32_t k);   // cand_ = the best k of work_, sorted
  void collect_all();              // cand_ = every non -inf entry of work_, unsorted
  void apply_top_p();
  void apply_min_p();
  int32_t draw();
  double uniform01();              // in [0, 1)

  SamplerConfig cfg_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;

  // History ring for the repetition penalty (capacity repeat_last_n, or growing when < 0).
  std::vector<int32_t> history_;
  size_t history_head_ = 0;  // next slot to overwrite once the ring is full

  // Working buffers, kept between calls.
  std::vector<float> work_;
  std::vector<uint8_t> penalized_;  // marks, all zero between calls
  std::vector<Candidate> cand_;
  std::vector<Candidate> scratch_;     // top_p: the bucket that holds the cut
  std::vector<double> bucket_mass_;    // top_p: probability mass per bucket
  std::vector<float> probs_;
  bool sorted_ = false;
};

// Index of the largest logit; the first one wins ties; NaN is ignored. -1 when `logits` is empty
// or holds only NaN.
int32_t argmax(std::span<const float> logits);

// Finds stop strings in streamed text. push() returns the part that is safe to emit now: text that
// cannot be the start of a stop string, and never an incomplete UTF-8 sequence at the end (held until
// its remaining bytes arrive). When a stop string completes, stopped() becomes true, and the stop
// string and everything after it are dropped; later pushes return nothing. When several stops occur,
// the one that starts earliest in the text wins. Empty stop strings are ignored.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  std::string push(std::string_view text);
  // End of stream: returns whatever is held back (nothing after a stop).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace geniex::sampling
