#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "tokenizer_test_util.hpp"

using namespace geniex;
using namespace geniex::tok;
using namespace geniex::tok::testing;

#define REQUIRE_MODEL(tok)                      \
  std::string why_;                             \
  const Tokenizer* tok = smollm2(&why_);        \
  if (tok == nullptr) GTEST_SKIP() << why_

TEST(Tokenizer, SmolLM2Metadata) {
  REQUIRE_MODEL(t);
  EXPECT_EQ(t->n_vocab(), 49152);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_FALSE(t->add_bos());
  EXPECT_EQ(t->model_name(), "gpt2");
  EXPECT_EQ(t->pre_name(), "smollm");
  EXPECT_EQ(t->find_token("<|im_start|>"), std::optional<int32_t>(1));
  EXPECT_EQ(t->find_token("<|im_end|>"), std::optional<int32_t>(2));
  EXPECT_FALSE(t->find_token("definitely not a token").has_value());
  EXPECT_TRUE(t->is_eog(2));   // eos, <|im_end|>
  EXPECT_TRUE(t->is_eog(0));   // <|endoftext|>
  EXPECT_FALSE(t->is_eog(1));  // <|im_start|>
  EXPECT_FALSE(t->is_eog(100));
  EXPECT_EQ(t->token_type(1), TokenType::Control);
  EXPECT_EQ(t->token_bytes(1), "<|im_start|>");
  EXPECT_EQ(t->token_bytes(-1), "");
  EXPECT_EQ(t->token_bytes(t->n_vocab()), "");
  EXPECT_NE(t->chat_template().find("<|im_start|>"), std::string::npos);
}

TEST(Tokenizer, SmolLM2ParityWithHuggingFace) {
  REQUIRE_MODEL(t);
  const auto lines = read_jsonl(data_path("smollm2_hf_ids.jsonl"));
  ASSERT_GE(lines.size(), 600u) << "fixture missing: run scripts/tokenizer/make_tokenizer_fixture.py";
  size_t matched = 0, bytes = 0;
  int shown = 0;
  for (const auto& line : lines) {
    const std::string text = line.at("text").get<std::string>();
    const std::vector<int32_t> want = line.at("ids").get<std::vector<int32_t>>();
    auto got = t->encode(text, /*add_special=*/false, /*parse_special=*/true);
    ASSERT_TRUE(got) << got.error().to_string();
    bytes += text.size();
    if (*got == want) {
      ++matched;
    } else if (shown++ < 10) {
      std::string g, w;
      for (int32_t id : *got) g += std::to_string(id) + " ";
      for (int32_t id : want) w += std::to_string(id) + " ";
      ADD_FAILURE() << "mismatch for " << nlohmann::json(text).dump() << "\n  got:  " << g << "\n  want: " << w;
    }
  }
  std::printf("[ parity ] %zu / %zu corpus lines match Hugging Face ids\n", matched, lines.size());
  EXPECT_EQ(matched, lines.size());

  // Throughput: the corpus encoded repeatedly (the word cache is warm after the first pass).
  const int reps = 20;
  const auto t0 = std::chrono::steady_clock::now();
  size_t n_tokens = 0;
  for (int r = 0; r < reps; ++r) {
    for (const auto& line : lines) {
      auto ids = t->encode(line.at("text").get_ref<const std::string&>(), false, true);
      n_tokens += ids->size();
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ speed  ] encode: %.2f MB/s, %.2f Mtok/s (%zu bytes x %d in %.3f s)\n",
              static_cast<double>(bytes) * reps / s / 1e6, static_cast<double>(n_tokens) / s / 1e6, bytes, reps, s);
}

TEST(Tokenizer, SmolLM2ColdEncodeThroughput) {
  REQUIRE_MODEL(t);
  // Distinct words every time, so the cache cannot help: the BPE merge loop itself.
  std::string text;
  uint32_t x = 12345;
  while (text.size() < (2u << 20)) {
    x = x * 1664525u + 1013904223u;
    const int len = 3 + static_cast<int>((x >> 24) % 9);
    text += ' ';
    for (int k = 0; k < len; ++k) {
      x = x * 1664525u + 1013904223u;
      text += static_cast<char>('a' + (x >> 27) % 26);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto ids = t->encode(text, false, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(ids);
  std::printf("[ speed  ] cold encode of %zu random-word bytes: %.2f MB/s (%zu tokens)\n", text.size(),
              static_cast<double>(text.size()) / s / 1e6, ids->size());
  auto back = t->decode(*ids);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, text);
}

TEST(Tokenizer, SmolLM2RoundTrip) {
  REQUIRE_MODEL(t);
  const auto lines = read_jsonl(data_path("corpus.jsonl"));
  ASSERT_FALSE(lines.empty());
  size_t checked = 0;
  for (const auto& line : lines) {
    const std::string text = line.at("text").get<std::string>();
    if (!utf8::is_valid(text)) continue;
    for (bool parse_special : {true, false}) {
      auto ids = t->encode(text, false, parse_special);
      ASSERT_TRUE(ids);
      auto back = t->decode(*ids);
      ASSERT_TRUE(back);
      EXPECT_EQ(*back, text) << nlohmann::json(text).dump();
    }
    ++checked;
  }
  std::printf("[ round  ] decode(encode(s)) == s for %zu lines\n", checked);
}

TEST(Tokenizer, SmolLM2SpecialTokens) {
  REQUIRE_MODEL(t);
  auto with = t->encode("<|im_start|>user\nhi<|im_end|>", false, true);
  ASSERT_TRUE(with);
  ASSERT_GE(with->size(), 3u);
  EXPECT_EQ(with->front(), 1);
  EXPECT_EQ(with->back(), 2);
  auto without = t->encode("<|im_start|>user\nhi<|im_end|>", false, false);
  ASSERT_TRUE(without);
  for (int32_t id : *without) {
    EXPECT_NE(id, 1);
    EXPECT_NE(id, 2);
  }
  auto d = t->decode(*with, /*skip_special=*/true);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, "user\nhi");
  // add_special follows add_bos_token = false for SmolLM2: nothing is added.
  auto a = t->encode("hi", true, true), b = t->encode("hi", false, true);
  EXPECT_EQ(*a, *b);
  // Digits are split one by one (smollm pre-tokenizer).
  auto digits = t->encode("12345", false, false);
  EXPECT_EQ(digits->size(), 5u);
  // decode of an out-of-range id is an error, not a crash
  const int32_t bad[] = {5, -3};
  auto r = t->decode(bad);
  EXPECT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::OutOfRange);
}

TEST(Tokenizer, StreamDecoderNeverEmitsBrokenUtf8) {
  REQUIRE_MODEL(t);
  const auto lines = read_jsonl(data_path("corpus.jsonl"));
  size_t split_chars = 0;
  for (const auto& line : lines) {
    const std::string text = line.at("text").get<std::string>();
    auto ids = t->encode(text, false, true);
    ASSERT_TRUE(ids);
    StreamDecoder sd(*t, /*skip_special=*/false);
    std::string all;
    for (int32_t id : *ids) {
      const std::string chunk = sd.push(id);
      ASSERT_TRUE(utf8::is_valid(chunk)) << "chunk for " << nlohmann::json(text).dump();
      if (!utf8::is_valid(t->token_bytes(id))) ++split_chars;
      all += chunk;
    }
    all += sd.flush();
    EXPECT_EQ(all, text);
  }
  EXPECT_GT(split_chars, 0u) << "corpus should contain characters split across tokens";
  std::printf("[ stream ] %zu tokens carried partial UTF-8 sequences\n", split_chars);
}

TEST(Tokenizer, StreamDecoderEmoji) {
  REQUIRE_MODEL(t);
  const std::string text = "family \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 "
                           "flag \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8 rocket \xF0\x9F\x9A\x80!";
  auto ids = t->encode(text, false, false);
  ASSERT_TRUE(ids);
  StreamDecoder sd(*t);
  std::string all;
  for (int32_t id : *ids) {
    const std::string c = sd.push(id);
    EXPECT_TRUE(utf8::is_valid(c));
    all += c;
  }
  all += sd.flush();
  EXPECT_EQ(all, text);
  // A stream that stops inside a character: flush gives U+FFFD.
  StreamDecoder partial(*t);
  std::string out;
  const std::string rocket = "\xF0\x9F\x9A\x80";
  auto rocket_ids = t->encode(rocket, false, false);
  ASSERT_TRUE(rocket_ids);
  for (int32_t id : *rocket_ids) {
    if (t->token_bytes(id) == rocket) GTEST_SKIP() << "rocket is a single token";
    out += partial.push(id);
    break;  // only the first piece
  }
  out += partial.flush();
  EXPECT_EQ(out, "\xEF\xBF\xBD");
  // skip_special drops control tokens
  StreamDecoder skip(*t, true);
  EXPECT_EQ(skip.push(1), "");
  EXPECT_EQ(skip.push(t->n_vocab() + 5), "");
}

TEST(Tokenizer, InvalidUtf8) {
  // Ill-formed bytes go through the byte alphabet: lossless when the vocabulary has every byte
  // (the tiny tokenizer); SmolLM2's vocabulary lacks the bytes that never occur in UTF-8
  // (C0, C1, F5..FF and a few controls), which are dropped, as HF's byte-level BPE (no unk
  // token) and llama.cpp do; they never become the unknown token <|endoftext|> (id 0), a control
  // token. Never a crash or broken stream.
  auto tiny = tiny_tokenizer();
  ASSERT_TRUE(tiny);
  std::string why;
  const Tokenizer* smol = smollm2(&why);
  const std::string cases[] = {
      std::string("\xFF\xFE hello \x80\x81 world \xC3", 18), "abc\xE2\x82", "\xED\xA0\x80 surrogate",
      "\xC0\xAF overlong", std::string("nul\0byte", 8), "\xF4\x90\x80\x80 above max", "tail \xF0\x9F\x9A",
      "\x80\x80\x80\x80\x80 run", "<|im_start|>\xE2<|im_end|>\x9F"};
  for (const Tokenizer* t : std::initializer_list<const Tokenizer*>{tiny.get(), smol}) {
    if (t == nullptr) continue;
    for (const std::string& s : cases) {
      const bool representable = t == tiny.get() || s.find_first_of("\xC0\xC1\xF5\xF6\xF7\xF8\xF9\xFA\xFB\xFC\xFD\xFE\xFF") == std::string::npos;
      for (bool ps : {false, true}) {
        auto ids = t->encode(s, false, ps);
        ASSERT_TRUE(ids);
        auto back = t->decode(*ids);
        ASSERT_TRUE(back);
        if (representable) {
          EXPECT_EQ(*back, s);
        }
        if (t == smol) {
          EXPECT_EQ(std::count(ids->begin(), ids->end(), 0), 0) << nlohmann::json::array({s}).dump(
              -1, ' ', false, nlohmann::json::error_handler_t::replace);
        }
        StreamDecoder sd(*t, false);
        for (int32_t id : *ids) EXPECT_TRUE(utf8::is_valid(sd.push(id)));
        EXPECT_TRUE(utf8::is_valid(sd.flush()));
      }
    }
  }
}

TEST(Tokenizer, TinyConfigBpe) {
  auto t = tiny_tokenizer();
  ASSERT_TRUE(t);
  auto ids = t->encode("hello world", false, false);
  ASSERT_TRUE(ids);
  ASSERT_EQ(ids->size(), 4u);
  EXPECT_EQ(t->token_text((*ids)[0]), "hello");
  EXPECT_EQ(t->token_text((*ids)[1]), "\xC4\xA0wor");  // "Ġwor": no merge with "l"
  EXPECT_EQ(t->token_text((*ids)[2]), "l");
  auto with = t->encode("<|im_start|>hello", true, true);
  ASSERT_TRUE(with);
  EXPECT_EQ((*with)[0], 1);
}

TEST(Tokenizer, UnsupportedModelsAreErrors) {
  TokenizerConfig cfg;
  cfg.tokens = {"a", "b"};
  cfg.model = "bert";  // WordPiece ("llama" is SentencePiece BPE: test_tokenizer_spm.cpp)
  auto r = Tokenizer::from_config(cfg);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Unsupported);
  EXPECT_NE(r.error().message.find("bert"), std::string::npos);
  cfg.model = "gpt2";
  cfg.pre = "some-new-pre";
  r = Tokenizer::from_config(cfg);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::Unsupported);
  EXPECT_NE(r.error().message.find("some-new-pre"), std::string::npos);
  cfg.pre = "llama-bpe";
  cfg.token_types = {1};  // wrong length
  r = Tokenizer::from_config(cfg);
  EXPECT_FALSE(r);
  cfg.token_types.clear();
  cfg.tokens.clear();
  EXPECT_FALSE(Tokenizer::from_config(cfg));
}

TEST(Tokenizer, FromGgufErrors) {
  auto parse = [](const gguf::Writer& w) {
    const auto bytes = w.to_bytes();
    return gguf::File::parse(MappedFile::from_bytes(bytes.data(), bytes.size()));
  };
  {
    gguf::Writer w;
    w.set_string("general.architecture", "llama");
    auto f = parse(w);
    ASSERT_TRUE(f) << f.error().to_string();
    auto t = Tokenizer::from_gguf(*f);
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().code, ErrorCode::NotFound);
  }
  {
    gguf::Writer w;
    w.set_string("tokenizer.ggml.model", "bert");
    w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "a"});
    auto f = parse(w);
    ASSERT_TRUE(f);
    auto t = Tokenizer::from_gguf(*f);
    ASSERT_FALSE(t);
    EXPECT_EQ(t.error().code, ErrorCode::Unsupported);
    EXPECT_NE(t.error().message.find("tokenizer.ggml.model"), std::string::npos);
  }
  {
    gguf::Writer w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "ab", "<|endoftext|>"});
    w.set_i32_array("tokenizer.ggml.token_type", {1, 1, 1, 3});
    w.set_string_array("tokenizer.ggml.merges", {"a b", "bogus", "x y"});
    w.set_u32("tokenizer.ggml.eos_token_id", 3);
    w.set_u32("tokenizer.ggml.bos_token_id", 99);  // out of range: ignored
    auto f = parse(w);
    ASSERT_TRUE(f);
    auto t = Tokenizer::from_gguf(*f);
    ASSERT_TRUE(t) << t.error().to_string();
    EXPECT_EQ((*t)->eos_id(), 3);
    EXPECT_EQ((*t)->bos_id(), -1);
    EXPECT_TRUE((*t)->is_eog(3));
    auto ids = (*t)->encode("ab<|endoftext|>", true, true);
    ASSERT_TRUE(ids);
    EXPECT_EQ(*ids, (std::vector<int32_t>{2, 3}));
  }
  {
    gguf::Writer w;  // wrong type for the token list
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_u32("tokenizer.ggml.tokens", 7);
    auto f = parse(w);
    ASSERT_TRUE(f);
    EXPECT_FALSE(Tokenizer::from_gguf(*f));
  }
}

TEST(Tokenizer, OtherPreTokenizers) {
  // llama-bpe and qwen2 patterns compile and split numbers in groups of 3 / singly.
  for (const char* pre : {"llama-bpe", "qwen2", "default", "starcoder"}) {
    auto base = tiny_tokenizer();
    ASSERT_TRUE(base);
    TokenizerConfig cfg;
    cfg.model = "gpt2";
    cfg.pre = pre;
    for (int32_t i = 0; i < base->n_vocab(); ++i) cfg.tokens.push_back(base->token_text(i));
    auto t = Tokenizer::from_config(cfg);
    ASSERT_TRUE(t) << pre << ": " << t.error().to_string();
    const std::string s = "I'M 1234567 hello\r\n\n  world's";
    auto ids = (*t)->encode(s, false, false);
    ASSERT_TRUE(ids);
    EXPECT_EQ(*(*t)->decode(*ids), s);
  }
}
