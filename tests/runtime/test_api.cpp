// Public API behaviour on the real model and on tiny generated files: errors are values,
// streaming equals the returned text, stop strings, cancellation, context limits, KV reuse
// across chat turns, determinism, and sessions on several threads.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../common/tiny_model.hpp"
#include "backends/cpu/packed.hpp"
#include "geniex/geniex.hpp"
#include "model_path.hpp"

namespace geniex {
namespace {

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("geniex_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

const Model& real_model() {
  static Model* model = [] {
    auto m = ModelBuilder(test_support::default_model_path()).with_threads(2).with_context(1024).build();
    EXPECT_TRUE(m.has_value()) << (m ? "" : m.error().to_string());
    return new Model(std::move(m).value());
  }();
  return *model;
}

GenerationConfig greedy(int n) {
  GenerationConfig c;
  c.temperature = 0;
  c.max_new_tokens = n;
  return c;
}

TEST(Api, MissingFileIsNotFound) {
  auto m = ModelBuilder("/nonexistent/model.gguf").build();
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().code, ErrorCode::NotFound);
  EXPECT_NE(m.error().message.find("/nonexistent/model.gguf"), std::string::npos);
}

TEST(Api, NotAGgufFileIsInvalidFormat) {
  const std::string path = temp_path("text.gguf");
  std::ofstream(path) << "this is not a model file, just some text that is long enough";
  auto m = ModelBuilder(path).build();
  std::filesystem::remove(path);
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().code, ErrorCode::InvalidFormat);
}

TEST(Api, DeviceParsingAndFallbackNotes) {
  EXPECT_FALSE(Device::parse("tpu").has_value());
  EXPECT_EQ(Device::parse("npu")->kind(), Device::Kind::Npu);
  const std::string path = temp_path("tiny.gguf");
  {
    const auto bytes = test_support::make_tiny_llama({});
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
  }
  auto m = ModelBuilder(path).with_device(Device::npu()).with_threads(1).build();
  std::filesystem::remove(path);  // the mapping stays valid
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  EXPECT_EQ(m->info().backends, std::vector<std::string>{"cpu"});
  ASSERT_EQ(m->info().device_notes.size(), 2u);
  EXPECT_NE(m->info().device_notes[0].find("npu"), std::string::npos);
  // This tiny file has no tokenizer: eval works, text generation says why it cannot.
  auto s = m->new_session();
  ASSERT_TRUE(s.has_value());
  const int32_t toks[3] = {1, 2, 3};
  auto logits = s->eval(toks);
  ASSERT_TRUE(logits.has_value()) << logits.error().to_string();
  EXPECT_EQ(logits->size(), static_cast<size_t>(m->info().n_vocab));
  auto text = s->generate("hello", greedy(4));
  ASSERT_FALSE(text.has_value());
  EXPECT_NE(text.error().message.find("tokenizer"), std::string::npos);
}

TEST(Api, PackedWeightsGiveTheSameResults) {
  // An all-Q4_0 tiny model: with AVX-512 its matrices are repacked at load (GENIEX_REPACK=0
  // keeps the file layout); both must agree.
  if (cpu::packed_kernels_for(DType::Q4_0, 64, 64) == nullptr) {
    GTEST_SKIP() << "no packed Q4_0 layout on this CPU (needs AVX-512 F+BW): nothing to compare";
  }
  test_support::TinyLlamaConfig cfg;
  cfg.embd_type = cfg.attn_type = cfg.attn_out_type = cfg.ffn_gate_type = cfg.ffn_up_type =
      cfg.ffn_down_type = cfg.output_type = DType::Q4_0;
  cfg.tied = true;
  const std::string path = temp_path("tiny_q4_0.gguf");
  {
    const auto bytes = test_support::make_tiny_llama(cfg);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
  }
  auto run = [&](const char* repack) {
    ::setenv("GENIEX_REPACK", repack, 1);
    auto m = ModelBuilder(path).with_threads(2).build();
    EXPECT_TRUE(m.has_value());
    auto s = m->new_session();
    std::vector<float> all;
    std::vector<int32_t> toks = {5, 17, 33, 2, 90, 61};
    for (int step = 0; step < 5; ++step) {
      auto l = s->eval(toks);
      EXPECT_TRUE(l.has_value());
      all.insert(all.end(), l->begin(), l->end());
      toks = {static_cast<int32_t>(step * 7 % 96)};
    }
    ::unsetenv("GENIEX_REPACK");
    return all;
  };
  const std::vector<float> packed = run("1");
  const std::vector<float> plain = run("0");
  std::filesystem::remove(path);
  ASSERT_EQ(packed.size(), plain.size());
  for (size_t i = 0; i < packed.size(); ++i) EXPECT_NEAR(packed[i], plain[i], 1e-3f * (1.0f + std::fabs(plain[i])));
}

TEST(Api, InvalidTokenAndContextOverflowLeaveSessionUsable) {
  GX_REQUIRE_MODEL();
  auto m = ModelBuilder(test_support::default_model_path()).with_threads(1).with_context(16).build();
  ASSERT_TRUE(m.has_value());
  auto s = m->new_session();
  ASSERT_TRUE(s.has_value());
  const int32_t bad[2] = {5, 1 << 30};
  auto r = s->eval(bad);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument);
  EXPECT_EQ(s->n_past(), 0);
  std::vector<int32_t> many(20, 42);
  r = s->eval(many);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(s->n_past(), 0);
  const int32_t ok[3] = {504, 3575, 282};
  EXPECT_TRUE(s->eval(ok).has_value());
  EXPECT_EQ(s->n_past(), 3);
  // Generation that reaches the context end stops cleanly.
  GenerationStats stats;
  GenerationConfig c = greedy(100);
  c.stats = &stats;
  auto text = s->generate(" The", c);
  ASSERT_TRUE(text.has_value()) << text.error().to_string();
  EXPECT_TRUE(stats.stop_reason == "context_full" || stats.stop_reason == "eos") << stats.stop_reason;
  EXPECT_LE(s->n_past(), 16);
}

TEST(Api, StreamingPiecesEqualTextAndAreValidUtf8) {
  GX_REQUIRE_MODEL();
  std::string streamed;
  int pieces = 0;
  GenerationStats stats;
  GenerationConfig c = greedy(48);
  c.stats = &stats;
  c.on_text = [&](std::string_view piece) {
    EXPECT_TRUE(valid_utf8(piece)) << "broken UTF-8 piece";
    streamed += piece;
    ++pieces;
    return true;
  };
  auto text = real_model().generate("Write the word 'café' and an emoji, then count to five:", c);
  ASSERT_TRUE(text.has_value()) << text.error().to_string();
  EXPECT_EQ(*text, streamed);
  EXPECT_GT(pieces, 1);
  EXPECT_TRUE(valid_utf8(*text));
  EXPECT_LE(stats.generated_tokens, 48);
  EXPECT_GT(stats.prompt_tokens, 5);
  EXPECT_GT(stats.prefill_ms, 0);
}

TEST(Api, StopStringCutsTheOutput) {
  GX_REQUIRE_MODEL();
  auto full = real_model().generate("The three primary colors are", greedy(40));
  ASSERT_TRUE(full.has_value());
  ASSERT_GT(full->size(), 20u);
  const std::string stop = full->substr(12, 5);
  const size_t at = full->find(stop);
  GenerationStats stats;
  GenerationConfig c = greedy(40);
  c.stop = {stop};
  c.stats = &stats;
  auto cut = real_model().generate("The three primary colors are", c);
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ(*cut, full->substr(0, at));
  EXPECT_EQ(stats.stop_reason, "stop_string");
}

TEST(Api, CallbackCanCancel) {
  GX_REQUIRE_MODEL();
  GenerationStats stats;
  GenerationConfig c = greedy(64);
  c.stats = &stats;
  int calls = 0;
  c.on_text = [&](std::string_view) { return ++calls < 3; };
  auto text = real_model().chat({{"user", "Tell me a long story about a dragon."}}, c);
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(stats.stop_reason, "cancelled");
  EXPECT_LT(stats.generated_tokens, 10);
}

TEST(Api, SeededSamplingIsDeterministicAndGreedyMatchesArgmax) {
  GX_REQUIRE_MODEL();
  GenerationConfig c;
  c.max_new_tokens = 24;
  c.temperature = 0.9f;
  c.seed = 1234;
  auto a = real_model().generate("Once upon a time", c);
  auto b = real_model().generate("Once upon a time", c);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *b);
  // greedy through generate == argmax loop through eval
  auto g = real_model().generate("Once upon a time", greedy(12));
  ASSERT_TRUE(g.has_value());
  auto s = real_model().new_session();
  auto ids = real_model().tokenize("Once upon a time");
  ASSERT_TRUE(s && ids);
  auto logits = s->eval(*ids);
  std::vector<int32_t> out;
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(logits.has_value());
    int32_t best = 0;
    for (size_t v = 1; v < logits->size(); ++v) if ((*logits)[v] > (*logits)[static_cast<size_t>(best)]) best = static_cast<int32_t>(v);
    if (best == 2) break;  // <|im_end|> ends generation
    out.push_back(best);
    const int32_t next[1] = {best};
    logits = s->eval(next);
  }
  auto text = real_model().detokenize(out);
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(*g, *text);
}

TEST(Api, ChatReusesTheCacheAcrossTurns) {
  GX_REQUIRE_MODEL();
  auto s = real_model().new_session();
  ASSERT_TRUE(s.has_value());
  std::vector<ChatMessage> msgs = {{"user", "Name a fruit."}};
  auto first = s->chat(msgs, greedy(16));
  ASSERT_TRUE(first.has_value());
  msgs.push_back({"assistant", *first});
  msgs.push_back({"user", "And a vegetable?"});
  GenerationStats stats;
  GenerationConfig c = greedy(16);
  c.stats = &stats;
  auto second = s->chat(msgs, c);
  ASSERT_TRUE(second.has_value());
  EXPECT_GT(stats.reused_prompt_tokens, 20);
  // The same conversation from scratch gives the same reply.
  auto fresh = real_model().chat(msgs, greedy(16));
  ASSERT_TRUE(fresh.has_value());
  EXPECT_EQ(*second, *fresh);
}

TEST(Api, BadInputDoesNotCrash) {
  GX_REQUIRE_MODEL();
  EXPECT_FALSE(real_model().generate("", greedy(4)).has_value());
  auto r = real_model().generate(std::string("\xff\xfe\xc3 broken \xe2\x82 utf8", 19), greedy(4));
  EXPECT_TRUE(r.has_value()) << r.error().to_string();
  if (r) {
    EXPECT_TRUE(valid_utf8(*r));
  }
  GenerationConfig neg = greedy(4);
  neg.max_new_tokens = -1;
  EXPECT_FALSE(real_model().generate("hi", neg).has_value());
  EXPECT_FALSE(real_model().chat({}, greedy(4)).has_value());
  EXPECT_FALSE(real_model().plan(0).has_value());
  EXPECT_FALSE(ModelBuilder(test_support::default_model_path()).with_threads(-3).build().has_value());
}

TEST(Api, SessionsOnSeveralThreadsMatchSequential) {
  GX_REQUIRE_MODEL();
  const std::vector<std::string> prompts = {"The sky is", "Water boils at", "A cat is"};
  std::vector<std::string> seq, par(prompts.size());
  for (const auto& p : prompts) seq.push_back(*real_model().generate(p, greedy(10)));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] { par[i] = *real_model().generate(prompts[i], greedy(10)); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(seq, par);
}

TEST(Api, PlanListsEveryNodeOnCpu) {
  GX_REQUIRE_MODEL();
  auto plan = real_model().plan(1);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->n_copies, 0);
  EXPECT_EQ(plan->n_splits, 1);
  int matmuls = 0;
  for (const PlanRow& row : plan->rows) {
    EXPECT_EQ(row.backend, "cpu") << row.name;
    matmuls += row.op == "matmul";
  }
  EXPECT_EQ(matmuls, 30 * 7 + 1);
  EXPECT_GT(plan->activation_bytes.at(0).second, 0);
}

}  // namespace
}  // namespace geniex
