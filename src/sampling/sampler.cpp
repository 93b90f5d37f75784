// Sampler chain (penalties -> top_k -> top_p -> min_p -> temperature -> draw), argmax, StopMatcher.
#include "sampling/sampler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace geniex::sampling {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

// Caps what the constructor reserves for the history, whatever repeat_last_n says.
constexpr size_t kMaxHistoryReserve = 4096;

uint64_t random_seed() {
  try {
    std::random_device rd;
    uint64_t hi = rd();
    uint64_t lo = rd();
    return (hi << 32) ^ lo;
  } catch (...) {
    // No entropy source: fall back to the clock (still "random" for this purpose).
    auto t = std::chrono::high_resolution_clock::now().time_since_epoch().count();
    return static_cast<uint64_t>(t) * 0x9E3779B97F4A7C15ull;
  }
}

}  // namespace

Sampler::Sampler(const SamplerConfig& cfg) : cfg_(cfg) {
  seed_ = cfg_.seed == kRandomSeed ? random_seed() : cfg_.seed;
  rng_.seed(seed_);
  if (cfg_.repeat_last_n > 0) {
    history_.reserve(std::min(static_cast<size_t>(cfg_.repeat_last_n), kMaxHistoryReserve));
  }
}

void Sampler::accept(int32_t token) {
  if (cfg_.repeat_last_n == 0) return;
  if (cfg_.repeat_last_n < 0) {
    history_.push_back(token);
    return;
  }
  const auto cap = static_cast<size_t>(cfg_.repeat_last_n);
  if (history_.size() < cap) {
    history_.push_back(token);
    return;
  }
  history_[history_head_] = token;
  history_head_ = (history_head_ + 1) % cap;
}

void Sampler::reset() {
  history_.clear();
  history_head_ = 0;
  rng_.seed(seed_);
}

double Sampler::uniform01() {
  // 53 random bits -> [0, 1); defined here rather than by std::uniform_real_distribution so that
  // every standard library gives the same numbers.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

void Sampler::prepare_logits(std::span<const float> logits) {
  const size_t n = logits.size();
  work_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    float v = logits[i];
    if (std::isnan(v)) v = kNegInf;
    else if (v == kPosInf) v = std::numeric_limits<float>::max();
    work_[i] = v;
  }
}

void Sampler::apply_penalties() {
  const float p = cfg_.repeat_penalty;
  const size_t n = work_.size();
  if (penalized_.size() < n) penalized_.resize(n, 0);
  for (int32_t t : history_) {
    if (t < 0 || static_cast<size_t>(t) >= n || penalized_[static_cast<size_t>(t)]) continue;
    penalized_[static_cast<size_t>(t)] = 1;
    float& v = work_[static_cast<size_t>(t)];
    v = v > 0.0f ? v / p : v * p;  // same as llama.cpp: logit <= 0 is multiplied
  }
  for (int32_t t : history_) {  // leave the marks all zero for the next call
    if (t >= 0 && static_cast<size_t>(t) < n) penalized_[static_cast<size_t>(t)] = 0;
  }
}

namespace {

// Total order used everywhere: higher logit first, then lower id first.
struct Better {
  template <typename C>
  bool operator()(const C& a, const C& b) const {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  }
};

}  // namespace

void Sampler::collect_top_k(int32_t k) {
  // One pass with a bounded heap whose front is the worst candidate kept so far; nearly every
  // element is rejected by a single comparison.
  const auto kk = static_cast<size_t>(k);
  cand_.clear();
  if (cand_.capacity() < kk) cand_.reserve(kk);
  const size_t n = work_.size();
  const Better better;
  for (size_t i = 0; i < n; ++i) {
    const float v = work_[i];
    if (v == kNegInf) continue;
    if (cand_.size() < kk) {
      cand_.push_back({static_cast<int32_t>(i), v});
      std::push_heap(cand_.begin(), cand_.end(), better);
    } else if (v > cand_.front().logit) {  // equal logit never wins: its id is higher
      std::pop_heap(cand_.begin(), cand_.end(), better);
      cand_.back() = {static_cast<int32_t>(i), v};
      std::push_heap(cand_.begin(), cand_.end(), better);
    }
  }
  std::sort_heap(cand_.begin(), cand_.end(), better);  // best first
  sorted_ = true;
}

void Sampler::collect_all() {
  const size_t n = work_.size();
  cand_.clear();
  if (cand_.capacity() < n) cand_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (work_[i] != kNegInf) cand_.push_back({static_cast<int32_t>(i), work_[i]});
  }
  sorted_ = false;
}

namespace {

template <typename C>
float max_logit(const std::vector<C>& cand, bool sorted) {
  if (sorted) return cand.front().logit;
  float m = kNegInf;
  for (const auto& c : cand) m = std::max(m, c.logit);
  return m;
}

}  // namespace

void Sampler::apply_top_p() {
  if (cfg_.top_p >= 1.0f || cand_.size() <= 1) return;
  const float mx = max_logit(cand_, sorted_);
  const size_t n = cand_.size();
  probs_.resize(n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    probs_[i] = std::exp(cand_[i].logit - mx);
    sum += static_cast<double>(probs_[i]);
  }
  const double target = static_cast<double>(cfg_.top_p) * sum;

  if (sorted_) {  // after top_k: a plain scan
    double cum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      cum += static_cast<double>(probs_[i]);
      if (cum >= target) {
        cand_.resize(i + 1);
        return;
      }
    }
    return;  // rounding kept the sum just short: keep everything
  }

  // Whole vocabulary, unsorted. Sorting it all would cost O(V log V) per token; instead bucket the
  // candidates by distance below the max logit, find the bucket where the cumulative mass crosses
  // the target, keep every bucket above it and sort only that one bucket to place the exact cut.
  // The result is the same set the sorted scan would keep (buckets are monotone in the logit).
  constexpr size_t kBuckets = kTopPBuckets;
  constexpr float kScale = static_cast<float>(kBuckets) / kTopPRange;
  auto bucket_of = [&](float logit) {
    const float d = (mx - logit) * kScale;
    return d < static_cast<float>(kBuckets - 1) ? static_cast<size_t>(d) : kBuckets - 1;
  };
  bucket_mass_.assign(kBuckets, 0.0);
  for (size_t i = 0; i < n; ++i) bucket_mass_[bucket_of(cand_[i].logit)] += static_cast<double>(probs_[i]);
  double cum = 0.0;
  size_t cross = 0;
  while (cross < kBuckets - 1 && cum + bucket_mass_[cross] < target) cum += bucket_mass_[cross++];

  // Compact: buckets above `cross` stay (in place, unsorted); bucket `cross` goes to scratch.
  scratch_.clear();
  if (scratch_.capacity() < n) scratch_.reserve(n);
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t b = bucket_of(cand_[i].logit);
    if (b < cross) cand_[out++] = cand_[i];
    else if (b == cross) scratch_.push_back(cand_[i]);
  }
  std::sort(scratch_.begin(), scratch_.end(), Better{});
  for (const auto& c : scratch_) {
    cand_[out++] = c;
    cum += static_cast<double>(std::exp(c.logit - mx));
    if (cum >= target) break;
  }
  cand_.resize(out);
  sorted_ = cross == 0;  // only bucket 0 kept: it went through the sort
}

void Sampler::apply_min_p() {
  if (cfg_.min_p <= 0.0f || cand_.size() <= 1) return;
  const float mx = max_logit(cand_, sorted_);
  const float thr = std::min(mx, mx + std::log(cfg_.min_p));  // min_p > 1 still keeps the max
  if (sorted_) {
    size_t keep = 1;
    while (keep < cand_.size() && cand_[keep].logit >= thr) ++keep;
    cand_.resize(keep);
    return;
  }
  size_t out = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    if (cand_[i].logit >= thr) cand_[out++] = cand_[i];
  }
  cand_.resize(out);
}

int32_t Sampler::draw() {
  if (cand_.size() == 1) return cand_.front().id;
  const float mx = max_logit(cand_, sorted_);
  const float t = cfg_.temperature;
  probs_.resize(cand_.size());
  double sum = 0.0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    probs_[i] = std::exp((cand_[i].logit - mx) / t);
    sum += static_cast<double>(probs_[i]);
  }
  const double u = uniform01() * sum;
  double cum = 0.0;
  size_t last_nonzero = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    if (probs_[i] <= 0.0f) continue;
    cum += static_cast<double>(probs_[i]);
    last_nonzero = i;
    if (u < cum) return cand_[i].id;
  }
  return cand_[last_nonzero].id;  // u landed on the rounding slack at the very end
}

Result<int32_t> Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) {
    return make_error(ErrorCode::InvalidArgument, "sampler: empty logits");
  }
  if (logits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return make_error(ErrorCode::OutOfRange,
                      "sampler: " + std::to_string(logits.size()) + " logits exceed the int32 token range");
  }
  const bool penalize = cfg_.repeat_penalty != 1.0f && cfg_.repeat_penalty > 0.0f && !history_.empty();
  if (cfg_.temperature <= 0.0f && !penalize) {  // plain greedy: no copy needed
    const int32_t best = argmax(logits);
    if (best < 0 || logits[static_cast<size_t>(best)] == kNegInf) {
      return make_error(ErrorCode::InvalidArgument,
                        "sampler: all " + std::to_string(logits.size()) + " logits are NaN or -inf");
    }
    return best;
  }

  prepare_logits(logits);
  if (penalize) apply_penalties();

  if (cfg_.temperature <= 0.0f) {
    const int32_t best = argmax(work_);
    if (best < 0 || work_[static_cast<size_t>(best)] == kNegInf) {
      return make_error(ErrorCode::InvalidArgument,
                        "sampler: all " + std::to_string(logits.size()) + " logits are NaN or -inf");
    }
    return best;
  }

  const int32_t n = static_cast<int32_t>(logits.size());
  if (cfg_.top_k > 0 && cfg_.top_k < n) collect_top_k(cfg_.top_k);
  else collect_all();
  if (cand_.empty()) {
    return make_error(ErrorCode::InvalidArgument,
                      "sampler: all " + std::to_string(logits.size()) + " logits are NaN or -inf");
  }
  apply_top_p();
  apply_min_p();
  return draw();
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = -1;
  float best_v = 0.0f;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (std::isnan(v)) continue;
    if (best < 0 || v > best_v) {
      best = static_cast<int32_t>(i);
      best_v = v;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// StopMatcher

namespace {

// Length of the prefix of `s` that ends on a complete UTF-8 character: an incomplete multi-byte
// sequence at the very end is excluded. Invalid bytes count as complete (they are never held forever).
size_t utf8_complete_prefix(std::string_view s) {
  const size_t n = s.size();
  const size_t lo = n >= 4 ? n - 4 : 0;
  for (size_t i = n; i > lo; --i) {
    const auto c = static_cast<unsigned char>(s[i - 1]);
    if ((c & 0xC0u) == 0x80u) continue;  // continuation byte: keep looking for the lead
    size_t need = 1;
    if ((c & 0xE0u) == 0xC0u) need = 2;
    else if ((c & 0xF0u) == 0xE0u) need = 3;
    else if ((c & 0xF8u) == 0xF0u) need = 4;
    return (n - (i - 1)) < need ? i - 1 : n;
  }
  return n;
}

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);

  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    std::string out = held_.substr(0, first);
    held_.clear();
    stopped_ = true;
    return out;
  }

  // Hold back the longest tail that could still grow into a stop string.
  const std::string_view h = held_;
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1, h.size()); len > hold; --len) {
      if (h.substr(h.size() - len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  const size_t cut = std::min(held_.size() - hold, utf8_complete_prefix(h));
  std::string out = held_.substr(0, cut);
  held_.erase(0, cut);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace geniex::sampling
