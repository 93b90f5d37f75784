// Parity with llama.cpp on the real SmolLM2 GGUF: last-position logits of 8 prompts and
// 64-token greedy continuations of 4 prompts, against fixtures made by
// scripts/make_llamacpp_refs.py (llama-cpp-python on the same file).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "geniex/geniex.hpp"
#include "model_path.hpp"

namespace geniex {
namespace {

nlohmann::json load_json(const std::string& name) {
  std::ifstream in(std::string(GENIEX_TEST_DATA) + "/llamacpp/" + name);
  EXPECT_TRUE(in.good()) << name;
  return nlohmann::json::parse(in);
}

int32_t argmax(std::span<const float> v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) if (v[i] > v[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

Model load_model() {
  auto model = ModelBuilder(test_support::default_model_path()).with_device(Device::cpu()).with_threads(2).with_context(512).build();
  EXPECT_TRUE(model.has_value()) << (model ? "" : model.error().to_string());
  return std::move(model).value();
}

TEST(LlamaCppParity, LastLogitsOfEightPrompts) {
  GX_REQUIRE_MODEL();
  const nlohmann::json meta = load_json("logits_prompts.json");
  const auto n_vocab = meta["n_vocab"].get<size_t>();
  std::ifstream bin(std::string(GENIEX_TEST_DATA) + "/llamacpp/logits_last.f32", std::ios::binary);
  std::vector<float> ref(n_vocab * meta["prompts"].size());
  bin.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(ref.size() * 4));
  ASSERT_TRUE(bin.good());
  ASSERT_GE(meta["prompts"].size(), 8u);

  Model model = load_model();
  auto session = model.new_session();
  ASSERT_TRUE(session.has_value());
  double worst = 0, sum_abs = 0;
  size_t count = 0;
  for (size_t p = 0; p < meta["prompts"].size(); ++p) {
    const auto& prompt = meta["prompts"][p];
    const auto tokens = prompt["tokens"].get<std::vector<int32_t>>();
    // Our tokenizer must agree with llama.cpp's on these prompts too.
    auto ours = model.tokenize(prompt["text"].get<std::string>(), true, true);
    ASSERT_TRUE(ours.has_value());
    EXPECT_EQ(*ours, tokens) << prompt["name"];
    session->reset();
    auto logits = session->eval(tokens);
    ASSERT_TRUE(logits.has_value()) << logits.error().to_string();
    const std::span<const float> r(ref.data() + p * n_vocab, n_vocab);
    EXPECT_EQ(argmax(*logits), argmax(r)) << "prompt " << prompt["name"];
    double max_abs = 0, mean_abs = 0;
    for (size_t i = 0; i < n_vocab; ++i) {
      const double d = std::fabs(static_cast<double>((*logits)[i]) - static_cast<double>(r[i]));
      max_abs = std::max(max_abs, d);
      mean_abs += d;
    }
    sum_abs += mean_abs;
    count += n_vocab;
    mean_abs /= static_cast<double>(n_vocab);
    worst = std::max(worst, max_abs);
    std::printf("  %-16s tokens %3zu  top1 %6d  max|diff| %.4f  mean|diff| %.5f\n",
                prompt["name"].get<std::string>().c_str(), tokens.size(), argmax(*logits), max_abs, mean_abs);
  }
  std::printf("  overall: max|diff| %.4f  mean|diff| %.5f\n", worst, sum_abs / static_cast<double>(count));
  // Bounds from llama.cpp's own spread: on these prompts its flash-attention mode differs
  // from its default by mean |diff| 0.09-0.22 and max 0.88 (measured 2026-11-30, llama.cpp
  // 0.3.36 via llama-cpp-python). Prompts without attention across tokens ("single_word")
  // match bit for bit.
  EXPECT_LT(worst, 1.0);
  EXPECT_LT(sum_abs / static_cast<double>(count), 0.15);
}

TEST(LlamaCppParity, GreedySixtyFourTokens) {
  GX_REQUIRE_MODEL();
  const nlohmann::json ref = load_json("greedy.json");
  Model model = load_model();
  auto session = model.new_session();
  ASSERT_TRUE(session.has_value());
  ASSERT_GE(ref["runs"].size(), 4u);
  for (const auto& run : ref["runs"]) {
    const auto prompt = run["prompt_tokens"].get<std::vector<int32_t>>();
    const auto expected = run["generated"].get<std::vector<int32_t>>();
    session->reset();
    auto logits = session->eval(prompt);
    ASSERT_TRUE(logits.has_value());
    // Free-running: our own greedy tokens until the first divergence. Then teacher-forced:
    // llama.cpp's tokens are fed, so every one of its steps is compared, and every step where
    // our argmax differs must be a near-tie in llama.cpp's own logits.
    size_t same = 0, forced_mismatch = 0;
    bool diverged = false;
    for (size_t i = 0; i < expected.size(); ++i) {
      const int32_t ours = argmax(*logits);
      if (ours != expected[i]) {
        const auto& step = run["steps"][i];
        const double gap = step["top1_logit"].get<double>() - step["top2_logit"].get<double>();
        std::printf("  %s: step %zu differs (ours %d, llama.cpp %d, llama.cpp top1-top2 gap %.4f)\n",
                    run["name"].get<std::string>().c_str(), i, ours, expected[i], gap);
        // What counts as a near-tie is measured on llama.cpp itself: its flash-attention mode,
        // teacher-forced through these same runs, disagrees with its default at 5 steps, with
        // top1-top2 gaps 0.02-0.67 (chat_mountain 21/40/43, code 12/27; llama-cpp-python
        // 0.3.36, 2026-11-30). A gap above that is a real difference.
        EXPECT_LT(gap, 0.7) << "divergence without a near-tie in " << run["name"] << " at step " << i;
        if (diverged) ++forced_mismatch;
        diverged = true;
      } else if (!diverged) {
        ++same;
      }
      if (i + 1 == expected.size()) break;
      const int32_t next[1] = {expected[i]};
      logits = session->eval(next);
      ASSERT_TRUE(logits.has_value());
    }
    // How many near-tie steps differ depends on the order each dot product is summed in, so
    // the bound comes from GenieX's own kernel orders on these runs (2026-12-01, SmolLM2 Q4_1,
    // chat_mountain is the worst run for each): the file-layout AVX2 order 2, the scalar
    // reference 4, the packed AVX2 tiles 5 (their logits: mean |diff| 0.113 against the
    // scalar reference's 0.135). More than 6 would be drift, not order.
    EXPECT_LE(forced_mismatch, 6u) << run["name"];
    std::printf("  %-16s %zu/%zu greedy tokens identical free-running; %zu further near-tie "
                "differences under teacher forcing\n",
                run["name"].get<std::string>().c_str(), same, expected.size(), forced_mismatch);
  }
}

}  // namespace
}  // namespace geniex
