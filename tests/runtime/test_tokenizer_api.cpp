// The public geniex::Tokenizer: loading by content from every kind of file, the same ids as the
// model's own tokenizer, streaming, chat templates, and clear errors for bad paths and files.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "geniex/geniex.hpp"
#include "geniex/tokenizer.hpp"
#include "model_path.hpp"

namespace geniex {
namespace {

std::string tokenizer_dir() {
  if (const char* d = std::getenv("GENIEX_TOKENIZER_DIR")) return d;
  if (const char* home = std::getenv("HOME")) return std::string(home) + "/.cache/geniex/tokenizers";
  return "";
}

std::filesystem::path temp_file(const std::string& name, const std::string& bytes) {
  const auto p = std::filesystem::temp_directory_path() / ("geniex_tokapi_" + name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

TEST(TokenizerApi, FromModelFileMatchesTheModel) {
  GX_REQUIRE_MODEL();
  auto tok = Tokenizer::load(test_support::default_model_path());
  ASSERT_TRUE(tok.has_value()) << tok.error().to_string();
  auto model = ModelBuilder(test_support::default_model_path()).with_threads(1).with_context(64).build();
  ASSERT_TRUE(model.has_value()) << model.error().to_string();
  auto from_model = model->tokenizer();
  ASSERT_TRUE(from_model.has_value());
  for (const char* text : {"Hello world", "<|im_start|>user\nHi<|im_end|>", "  spaces\t\ttabs\n\n", "日本語 🙂"}) {
    auto a = tok->encode(text);
    auto b = model->tokenize(text);
    auto c = from_model->encode(text);
    ASSERT_TRUE(a && b && c);
    EXPECT_EQ(*a, *b) << text;
    EXPECT_EQ(*a, *c) << text;
    auto back = tok->decode(*a);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, text);
  }
  // Special literals as plain text when asked.
  auto special = tok->encode("<|im_start|>", {.add_special = false, .parse_special = true});
  auto literal = tok->encode("<|im_start|>", {.add_special = false, .parse_special = false});
  ASSERT_TRUE(special && literal);
  EXPECT_EQ(special->size(), 1u);
  EXPECT_GT(literal->size(), 1u);
  EXPECT_EQ(tok->find_token("<|im_start|>"), std::optional<int32_t>((*special)[0]));
  EXPECT_TRUE(tok->is_special((*special)[0]));
  ASSERT_TRUE(tok->eos_id().has_value());
  EXPECT_TRUE(tok->is_end_of_generation(*tok->eos_id()));
  EXPECT_EQ(tok->n_vocab(), model->info().n_vocab);
  // The chat template renders as the model's does.
  ASSERT_TRUE(tok->has_chat_template());
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi"}};
  auto r1 = tok->apply_chat_template(msgs);
  auto r2 = model->apply_chat_template(msgs);
  ASSERT_TRUE(r1 && r2);
  EXPECT_EQ(*r1, *r2);
  EXPECT_NE(r1->find("<|im_start|>assistant\n"), std::string::npos);
}

TEST(TokenizerApi, HandleOutlivesTheModel) {
  GX_REQUIRE_MODEL();
  std::optional<Tokenizer> kept;
  {
    auto model = ModelBuilder(test_support::default_model_path()).with_threads(1).with_context(64).build();
    ASSERT_TRUE(model.has_value());
    auto t = model->tokenizer();
    ASSERT_TRUE(t.has_value());
    kept.emplace(*t);
  }
  auto ids = kept->encode("still here");
  ASSERT_TRUE(ids.has_value());
  auto text = kept->decode(*ids, /*skip_special=*/true);
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(*text, "still here");
}

TEST(TokenizerApi, StreamNeverSplitsACharacter) {
  GX_REQUIRE_MODEL();
  auto tok = Tokenizer::load(test_support::default_model_path());
  ASSERT_TRUE(tok.has_value());
  const std::string text = "naïve café 日本語 👩‍👩‍👧 done";
  auto ids = tok->encode(text, {.add_special = false});
  ASSERT_TRUE(ids.has_value());
  Tokenizer::Stream stream = tok->stream();
  std::string out;
  for (int32_t id : *ids) {
    const std::string piece = stream.push(id);
    // Every piece is complete UTF-8: no lead byte without its continuation bytes at the end.
    if (!piece.empty()) {
      const auto last = static_cast<unsigned char>(piece.back());
      EXPECT_TRUE(last < 0x80 || (last & 0xC0) == 0x80) << "piece ends in a lead byte";
    }
    out += piece;
  }
  out += stream.flush();
  EXPECT_EQ(out, text);
  EXPECT_EQ(stream.push(-5), "");  // out of range: ignored
}

TEST(TokenizerApi, LoadsEveryKindOfFileByContent) {
  const std::string dir = tokenizer_dir();
  struct Case {
    std::string path;
    std::vector<int32_t> hello_world;  // "Hello world" without BOS/EOS
  };
  const std::vector<Case> cases = {
      {dir + "/vocab-llama-bpe.gguf", {9906, 1917}},  // Llama 3 (GGUF, vocab only)
      {dir + "/hf/llama3", {9906, 1917}},             // the same, as a Hugging Face folder
      {dir + "/hf/llama3/tokenizer.json", {9906, 1917}},
      {dir + "/mistral-v1.model", {22557, 1526}},     // SentencePiece ModelProto
  };
  int missing = 0;
  for (const Case& c : cases) {
    if (!std::filesystem::exists(c.path)) {
      if (std::getenv("GENIEX_REQUIRE_MODEL") != nullptr) ADD_FAILURE() << "missing " << c.path;
      std::printf("[ missing  ] %s (scripts/fetch_tokenizers.sh)\n", c.path.c_str());
      ++missing;
      continue;
    }
    auto tok = Tokenizer::load(c.path);
    ASSERT_TRUE(tok.has_value()) << c.path << ": " << tok.error().to_string();
    auto ids = tok->encode("Hello world", {.add_special = false});
    ASSERT_TRUE(ids.has_value()) << c.path;
    EXPECT_EQ(*ids, c.hello_world) << c.path;
    auto text = tok->decode(*ids);
    ASSERT_TRUE(text.has_value());
    EXPECT_EQ(*text, "Hello world") << c.path;
  }
  if (missing == static_cast<int>(cases.size())) GTEST_SKIP() << "no tokenizer files in " << dir;
  // A renamed GGUF still loads: the kind comes from the content.
  const std::string gguf = dir + "/vocab-llama-bpe.gguf";
  if (std::filesystem::exists(gguf)) {
    const auto renamed = std::filesystem::temp_directory_path() / "geniex_tokapi_renamed.model";
    std::filesystem::copy_file(gguf, renamed, std::filesystem::copy_options::overwrite_existing);
    auto tok = Tokenizer::load(renamed.string());
    EXPECT_TRUE(tok.has_value()) << tok.error().to_string();
    std::filesystem::remove(renamed);
  }
}

TEST(TokenizerApi, BadPathsAndFilesAreErrors) {
  auto missing = Tokenizer::load("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::NotFound);
  EXPECT_NE(missing.error().message.find("/nonexistent/tokenizer.json"), std::string::npos);

  const auto empty = temp_file("empty.gguf", "");
  auto e = Tokenizer::load(empty.string());
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message.find("empty"), std::string::npos) << e.error().message;

  const auto text = temp_file("text.gguf", "just some text, not a tokenizer\n");
  auto t = Tokenizer::load(text.string());
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find("not a tokenizer file"), std::string::npos) << t.error().message;

  const auto json = temp_file("broken.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": ");
  auto j = Tokenizer::load(json.string());
  ASSERT_FALSE(j.has_value());
  EXPECT_NE(j.error().message.find(json.string()), std::string::npos) << j.error().message;

  const auto gguf = temp_file("truncated.gguf", std::string("GGUF\x03\x00\x00\x00\x01", 9));
  auto g = Tokenizer::load(gguf.string());
  ASSERT_FALSE(g.has_value());

  const auto dir = std::filesystem::temp_directory_path() / "geniex_tokapi_emptydir";
  std::filesystem::create_directories(dir);
  auto d = Tokenizer::load(dir.string());
  ASSERT_FALSE(d.has_value());
  EXPECT_NE(d.error().message.find("tokenizer.json"), std::string::npos) << d.error().message;
  for (const auto& p : {empty, text, json, gguf}) std::filesystem::remove(p);
  std::filesystem::remove(dir);
}

TEST(TokenizerApi, OutOfRangeIdsAreErrors) {
  GX_REQUIRE_MODEL();
  auto tok = Tokenizer::load(test_support::default_model_path());
  ASSERT_TRUE(tok.has_value());
  const std::vector<int32_t> bad = {1, tok->n_vocab()};
  auto r = tok->decode(bad);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(tok->token_bytes(-1), "");
}

}  // namespace
}  // namespace geniex
