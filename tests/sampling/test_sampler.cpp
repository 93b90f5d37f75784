// Tests of the sampler chain (greedy, seeds, top_k/top_p/min_p cuts and frequencies, penalties, errors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "sampling/sampler.hpp"

namespace gs = geniex::sampling;

namespace {

gs::SamplerConfig plain(float temperature, uint64_t seed = 1234) {
  gs::SamplerConfig c;
  c.temperature = temperature;
  c.top_k = 0;
  c.top_p = 1.0f;
  c.min_p = 0.0f;
  c.repeat_penalty = 1.0f;
  c.seed = seed;
  return c;
}

std::vector<float> random_logits(size_t n, uint32_t seed, float scale = 3.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Logits whose softmax is `probs` (up to a constant).
std::vector<float> logits_from_probs(const std::vector<double>& probs) {
  std::vector<float> v;
  for (double p : probs) v.push_back(static_cast<float>(std::log(p)));
  return v;
}

int32_t must_sample(gs::Sampler& s, std::span<const float> logits) {
  auto r = s.sample(logits);
  EXPECT_TRUE(r.has_value()) << (r.has_value() ? "" : r.error().to_string());
  return r.has_value() ? r.value() : -1;
}

// Draws `n` tokens and checks (1) only tokens with expected > 0 occur, (2) a Pearson chi-square
// statistic over the allowed tokens stays under `bound` (the 99.9% quantile for its degrees of freedom).
void check_frequencies(gs::Sampler& s, std::span<const float> logits, const std::vector<double>& expected,
                       int n, double bound) {
  std::vector<int> counts(expected.size(), 0);
  for (int i = 0; i < n; ++i) {
    const int32_t t = must_sample(s, logits);
    ASSERT_GE(t, 0);
    ASSERT_LT(static_cast<size_t>(t), expected.size());
    ASSERT_GT(expected[static_cast<size_t>(t)], 0.0) << "token " << t << " should have been cut";
    counts[static_cast<size_t>(t)]++;
  }
  double chi2 = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] <= 0.0) continue;
    const double e = expected[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  EXPECT_LT(chi2, bound) << "frequencies far from the renormalized probabilities";
}

}  // namespace

TEST(Argmax, FirstMaxWinsAndNaNIgnored) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a{1.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(gs::argmax(a), 1);
  std::vector<float> b{nan, -5.0f, nan, -1.0f, nan};
  EXPECT_EQ(gs::argmax(b), 3);
  std::vector<float> c{nan, nan};
  EXPECT_EQ(gs::argmax(c), -1);
  EXPECT_EQ(gs::argmax(std::span<const float>()), -1);
  std::vector<float> d{-std::numeric_limits<float>::infinity()};
  EXPECT_EQ(gs::argmax(d), 0);
}

TEST(Sampler, GreedyPicksArgmax) {
  gs::SamplerConfig cfg;  // defaults everywhere except the temperature
  cfg.temperature = 0.0f;
  gs::Sampler s(cfg);
  for (uint32_t k = 0; k < 20; ++k) {
    auto logits = random_logits(50000, k);
    EXPECT_EQ(must_sample(s, logits), gs::argmax(logits));
  }
  std::vector<float> ties{0.5f, 2.0f, 2.0f, 1.0f};
  EXPECT_EQ(must_sample(s, ties), 1);
  cfg.temperature = -1.0f;
  gs::Sampler neg(cfg);
  EXPECT_EQ(must_sample(neg, ties), 1);
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedDifferent) {
  auto logits = random_logits(1000, 7, 1.0f);  // flat enough that draws vary
  auto run = [&](uint64_t seed) {
    gs::SamplerConfig cfg;
    cfg.temperature = 1.0f;
    cfg.seed = seed;
    gs::Sampler s(cfg);
    std::vector<int32_t> out;
    for (int i = 0; i < 100; ++i) out.push_back(must_sample(s, logits));
    return out;
  };
  const auto a = run(42);
  EXPECT_EQ(a, run(42));
  EXPECT_NE(a, run(43));
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 5u);

  // reset() restarts the RNG stream.
  gs::SamplerConfig cfg;
  cfg.temperature = 1.0f;
  cfg.seed = 42;
  gs::Sampler s(cfg);
  EXPECT_EQ(s.seed(), 42u);
  std::vector<int32_t> first, second;
  for (int i = 0; i < 100; ++i) first.push_back(must_sample(s, logits));
  s.reset();
  for (int i = 0; i < 100; ++i) second.push_back(must_sample(s, logits));
  EXPECT_EQ(first, second);
  EXPECT_EQ(first, a);
}

TEST(Sampler, RandomSeedIsDrawnAndReported) {
  gs::SamplerConfig cfg;
  ASSERT_EQ(cfg.seed, gs::kRandomSeed);
  gs::Sampler a(cfg), b(cfg);
  EXPECT_NE(a.seed(), b.seed());  // 2^-64 chance of a false failure
  // A sampler seeded with the reported seed repeats the random one.
  auto logits = random_logits(500, 3, 1.0f);
  gs::SamplerConfig fixed = cfg;
  fixed.seed = a.seed();
  gs::Sampler c(fixed);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(must_sample(a, logits), must_sample(c, logits));
}

TEST(Sampler, TopK1EqualsGreedy) {
  gs::SamplerConfig cfg;
  cfg.temperature = 1.5f;
  cfg.top_k = 1;
  cfg.seed = 5;
  gs::Sampler s(cfg);
  for (uint32_t k = 0; k < 30; ++k) {
    auto logits = random_logits(32000, 100 + k, 0.5f);
    if (k % 3 == 0) logits[17] = logits[static_cast<size_t>(gs::argmax(logits))];  // a tie, lower id wins
    EXPECT_EQ(must_sample(s, logits), gs::argmax(logits));
  }
}

TEST(Sampler, TopKKeepsExactlyTheBestK) {
  const auto logits = random_logits(50000, 11);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const std::set<int32_t> top(order.begin(), order.begin() + 10);

  gs::SamplerConfig cfg = plain(5.0f, 9);  // hot: the 10 kept tokens all get drawn
  cfg.top_k = 10;
  gs::Sampler s(cfg);
  std::set<int32_t> seen;
  for (int i = 0; i < 500; ++i) {
    const int32_t t = must_sample(s, logits);
    ASSERT_TRUE(top.count(t)) << "token " << t << " is outside the top 10";
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(Sampler, TopPCutAndFrequencies) {
  // Probabilities 0.5, 0.25, 0.15, 0.06, 0.04 (shuffled ids): top_p 0.85 keeps the first three
  // (cumulative 0.5, 0.75, 0.90), renormalized to 0.5/0.9, 0.25/0.9, 0.15/0.9.
  const std::vector<double> probs{0.06, 0.25, 0.5, 0.04, 0.15};
  const auto logits = logits_from_probs(probs);
  gs::SamplerConfig cfg = plain(1.0f, 77);
  cfg.top_p = 0.85f;
  gs::Sampler s(cfg);
  const std::vector<double> expected{0.0, 0.25 / 0.9, 0.5 / 0.9, 0.0, 0.15 / 0.9};
  check_frequencies(s, logits, expected, 20000, 13.8);  // chi2(2) 99.9% = 13.8

  // top_p is applied before the temperature: a hot temperature changes the weights, not the cut.
  gs::SamplerConfig hot = cfg;
  hot.temperature = 2.0f;
  gs::Sampler h(hot);
  double z = std::sqrt(0.25) + std::sqrt(0.5) + std::sqrt(0.15);
  check_frequencies(h, logits, {0.0, std::sqrt(0.25) / z, std::sqrt(0.5) / z, 0.0, std::sqrt(0.15) / z}, 20000,
                    13.8);
}

TEST(Sampler, TopPOnLargeVocabularyMatchesFullSort) {
  // Without top_k the nucleus is found through buckets of logits (only the bucket with the cut is
  // sorted); here it spans thousands of tokens over many buckets. Compare with a full sort.
  const auto logits = random_logits(60000, 21, 1.0f);
  const double mx = static_cast<double>(*std::max_element(logits.begin(), logits.end()));
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  const double top_p = 0.3;
  double cum = 0.0;
  size_t keep = 0;
  while (cum < top_p * sum) cum += std::exp(static_cast<double>(logits[order[keep++]]) - mx);
  ASSERT_GT(keep, 1000u);
  const std::set<int32_t> nucleus(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep));

  gs::SamplerConfig cfg = plain(1.0f, 3);
  cfg.top_p = static_cast<float>(top_p);
  gs::Sampler s(cfg);
  bool saw_last_kept_region = false;
  for (int i = 0; i < 120; ++i) {
    const int32_t t = must_sample(s, logits);
    ASSERT_TRUE(nucleus.count(t)) << "token " << t << " is outside the nucleus";
    if (logits[t] < logits[order[keep / 2]]) saw_last_kept_region = true;
  }
  EXPECT_TRUE(saw_last_kept_region);
}

TEST(Sampler, TopPWithTiesKeepsLowerIds) {
  // 1000 equal logits (all in one bucket): top_p 0.25 keeps 250 of them, the lowest ids.
  std::vector<float> logits(1000, 0.5f);
  gs::SamplerConfig cfg = plain(1.0f, 12);
  cfg.top_p = 0.2505f;
  gs::Sampler s(cfg);
  std::set<int32_t> seen;
  for (int i = 0; i < 600; ++i) {
    const int32_t t = must_sample(s, logits);
    ASSERT_LT(t, 251);
    seen.insert(t);
  }
  EXPECT_GT(seen.size(), 150u);
}

TEST(Sampler, MinPCutAndFrequencies) {
  // min_p 0.2 of the max 0.4 is 0.08: 0.06 and 0.04 are cut; the rest renormalize to 4/9, 3/9, 2/9.
  const std::vector<double> probs{0.2, 0.04, 0.4, 0.06, 0.3};
  const auto logits = logits_from_probs(probs);
  gs::SamplerConfig cfg = plain(1.0f, 99);
  cfg.min_p = 0.2f;
  gs::Sampler s(cfg);
  check_frequencies(s, logits, {2.0 / 9, 0.0, 4.0 / 9, 0.0, 3.0 / 9}, 20000, 13.8);

  // Same cut through the sorted path (after top_k).
  cfg.top_k = 4;
  gs::Sampler sk(cfg);
  check_frequencies(sk, logits, {2.0 / 9, 0.0, 4.0 / 9, 0.0, 3.0 / 9}, 20000, 13.8);
}

TEST(Sampler, FullChainFrequencies) {
  // top_k 4 drops 0.02; top_p 0.9 over the rest (0.45,0.3,0.15,0.08 of 0.98: cum .459,.765,.918)
  // keeps three; min_p 0.4 (threshold 0.18) then keeps two: 0.45 and 0.3 -> 0.6 / 0.4.
  const std::vector<double> probs{0.08, 0.45, 0.02, 0.15, 0.3};
  const auto logits = logits_from_probs(probs);
  gs::SamplerConfig cfg = plain(1.0f, 2024);
  cfg.top_k = 4;
  cfg.top_p = 0.9f;
  cfg.min_p = 0.4f;
  gs::Sampler s(cfg);
  check_frequencies(s, logits, {0.0, 0.6, 0.0, 0.0, 0.4}, 20000, 10.9);  // chi2(1) 99.9% = 10.8
}

TEST(Sampler, UntruncatedFrequenciesFollowTemperature) {
  const std::vector<double> probs{0.1, 0.2, 0.3, 0.4};
  const auto logits = logits_from_probs(probs);
  gs::Sampler s(plain(0.5f, 31));  // T = 0.5 squares the probabilities
  const double z = 0.01 + 0.04 + 0.09 + 0.16;
  check_frequencies(s, logits, {0.01 / z, 0.04 / z, 0.09 / z, 0.16 / z}, 20000, 16.3);  // chi2(3) 99.9%
}

TEST(Sampler, RepetitionPenaltyPositiveLogits) {
  gs::SamplerConfig cfg = plain(0.0f);
  cfg.repeat_penalty = 1.5f;
  cfg.repeat_last_n = 4;
  gs::Sampler s(cfg);
  const std::vector<float> logits{2.0f, 1.8f, -1.0f, 0.5f};
  EXPECT_EQ(must_sample(s, logits), 0);
  s.accept(0);  // 2.0 / 1.5 = 1.33 < 1.8
  EXPECT_EQ(must_sample(s, logits), 1);
  s.accept(0);  // applied once per distinct token, not per occurrence
  EXPECT_EQ(must_sample(s, logits), 1);
  s.accept(1);  // 1.8 / 1.5 = 1.2 < 1.33
  EXPECT_EQ(must_sample(s, logits), 0);
  // Window of 4: after four other tokens, 0 and 1 are no longer penalized.
  for (int i = 0; i < 4; ++i) s.accept(2);
  EXPECT_EQ(must_sample(s, logits), 0);
  s.accept(0);
  EXPECT_EQ(must_sample(s, logits), 1);
  s.reset();
  EXPECT_EQ(must_sample(s, logits), 0);
}

TEST(Sampler, RepetitionPenaltyNegativeLogits) {
  gs::SamplerConfig cfg = plain(0.0f);
  cfg.repeat_penalty = 1.5f;
  gs::Sampler s(cfg);
  const std::vector<float> logits{-1.0f, -1.2f, -3.0f};
  EXPECT_EQ(must_sample(s, logits), 0);
  s.accept(0);  // -1.0 * 1.5 = -1.5 < -1.2
  EXPECT_EQ(must_sample(s, logits), 1);
  // A zero logit is multiplied (stays 0) as in llama.cpp; out-of-range history ids are ignored.
  const std::vector<float> zero{0.0f, -0.1f};
  s.reset();
  s.accept(0);
  s.accept(1000);
  s.accept(-7);
  EXPECT_EQ(must_sample(s, zero), 0);
}

TEST(Sampler, RepetitionPenaltyAppliesBeforeTopK) {
  gs::SamplerConfig cfg = plain(1.0f, 8);
  cfg.top_k = 1;
  cfg.repeat_penalty = 2.0f;
  gs::Sampler s(cfg);
  const std::vector<float> logits{3.0f, 2.0f, 1.0f};
  s.accept(0);  // 1.5 < 2.0: top_k 1 now keeps token 1
  for (int i = 0; i < 20; ++i) EXPECT_EQ(must_sample(s, logits), 1);
}

TEST(Sampler, NaNAndEmptyLogitsAreErrors) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float temp : {0.0f, 0.8f}) {
    gs::SamplerConfig cfg;
    cfg.temperature = temp;
    cfg.seed = 1;
    gs::Sampler s(cfg);
    auto e = s.sample(std::span<const float>());
    ASSERT_FALSE(e.has_value());
    EXPECT_EQ(e.error().code, geniex::ErrorCode::InvalidArgument);
    std::vector<float> all_nan(100, nan);
    EXPECT_FALSE(s.sample(all_nan).has_value());
    std::vector<float> all_neg_inf(10, -inf);
    EXPECT_FALSE(s.sample(all_neg_inf).has_value());
    // Some NaN: never drawn.
    std::vector<float> some{nan, 0.0f, nan, 0.1f, nan};
    for (int i = 0; i < 200; ++i) {
      const int32_t t = must_sample(s, some);
      EXPECT_TRUE(t == 1 || t == 3) << t;
    }
    // +inf wins over everything finite.
    std::vector<float> pinf{1.0f, inf, 50.0f};
    EXPECT_EQ(must_sample(s, pinf), 1);
  }
}

TEST(Sampler, VocabularySizeMayChange) {
  gs::SamplerConfig cfg;
  cfg.seed = 10;
  cfg.repeat_penalty = 1.3f;
  gs::Sampler s(cfg);
  s.accept(40000);
  for (size_t n : {50000u, 100u, 151936u, 7u}) {
    auto logits = random_logits(n, static_cast<uint32_t>(n));
    const int32_t t = must_sample(s, logits);
    EXPECT_GE(t, 0);
    EXPECT_LT(static_cast<size_t>(t), n);
    s.accept(t);
  }
}
