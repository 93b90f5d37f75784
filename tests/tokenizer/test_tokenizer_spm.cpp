// SentencePiece-style BPE ("llama" model): Llama 2 and Gemma 3 GGUF vocabularies, Mistral v0.1 /
// v0.3 tokenizer.model files, checked id for id against the Hugging Face fixtures written by
// scripts/tokenizer/make_spm_fixtures.py; plus synthetic vocabularies and malformed model files.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>

#include "core/mmap.hpp"
#include "tokenizer/sentencepiece_model.hpp"
#include "tokenizer_test_util.hpp"

using namespace geniex;
using namespace geniex::tok;
using namespace geniex::tok::testing;

namespace {

const char* const kSp = "\xE2\x96\x81";  // ▁

std::string tokenizer_dir() {
  if (const char* env = std::getenv("GENIEX_TOKENIZER_DIR"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/geniex/tokenizers";
}

struct Family {
  const char* name;
  const char* file;
};
constexpr Family kFamilies[] = {
    {"llama2", "vocab-llama-spm.gguf"},
    {"mistral_v1", "mistral-v1.model"},
    {"mistral_v3", "mistral-v3.model"},
    {"gemma3", "gemma-3-270m-q4_k_m.gguf"},
};

// The tokenizer metadata of a GGUF. A model file whose tensor types this build cannot read yet
// (Gemma 3 270M Q4_K_M holds Q5_0 tensors) is read as a vocabulary-only GGUF: its first 64 MiB,
// with the tensor count in the header set to zero.
Result<gguf::File> open_gguf_metadata(const std::string& path) {
  auto full = gguf::File::open(path);
  if (full || full.error().code != ErrorCode::Unsupported) return full;
  std::ifstream in(path, std::ios::binary);
  std::string head(64u << 20, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  if (head.size() < 24) return full;
  std::memset(head.data() + 8, 0, 8);  // n_tensors (u64 after magic and version)
  return gguf::File::parse(MappedFile::from_bytes(head.data(), head.size()));
}

// Loads a family's tokenizer once; nullptr (and *why) when its file is missing.
const Tokenizer* family(const std::string& name, std::string* why) {
  static std::map<std::string, std::pair<std::unique_ptr<Tokenizer>, std::string>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    std::string file;
    for (const Family& f : kFamilies) {
      if (name == f.name) file = f.file;
    }
    const std::string path = tokenizer_dir() + "/" + file;
    std::unique_ptr<Tokenizer> tok;
    std::string reason;
    if (!std::ifstream(path).good()) {
      reason = path + " not found (run scripts/fetch_tokenizers.sh or set GENIEX_TOKENIZER_DIR)";
    } else if (path.ends_with(".gguf")) {
      auto g = open_gguf_metadata(path);
      if (!g) {
        reason = "cannot open " + path + ": " + g.error().to_string();
      } else if (auto t = Tokenizer::from_gguf(*g); t) {
        tok = std::move(t).value();
      } else {
        reason = "from_gguf(" + path + "): " + t.error().to_string();
      }
    } else if (auto t = Tokenizer::from_sentencepiece(path); t) {
      tok = std::move(t).value();
    } else {
      reason = "from_sentencepiece(" + path + "): " + t.error().to_string();
    }
    it = cache.emplace(name, std::make_pair(std::move(tok), reason)).first;
  }
  if (why) *why = it->second.second;
  return it->second.first.get();
}

#define REQUIRE_FAMILY(tok, name)                    \
  std::string why_;                                  \
  const Tokenizer* tok = family(name, &why_);        \
  if (tok == nullptr) GTEST_SKIP() << why_;          \
  ASSERT_TRUE(why_.empty()) << why_

struct Fixture {
  nlohmann::json meta;
  std::vector<nlohmann::json> lines;
};

Fixture fixture(const std::string& name) {
  Fixture f;
  for (auto& j : read_jsonl(data_path(name + "_hf_ids.jsonl"))) {
    if (j.contains("meta")) f.meta = j["meta"];
    else f.lines.push_back(std::move(j));
  }
  return f;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

std::string stream_all(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
  StreamDecoder sd(t, skip_special);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    EXPECT_TRUE(utf8::is_valid(piece));
    out += piece;
  }
  return out + sd.flush();
}

// The HF parity check shared by the four families.
void check_parity(const std::string& name) {
  std::string why;
  const Tokenizer* t = family(name, &why);
  if (t == nullptr) GTEST_SKIP() << why;
  const Fixture f = fixture(name);
  ASSERT_EQ(f.lines.size(), 2123u) << "fixture " << name << "_hf_ids.jsonl";
  size_t match = 0, rt_checked = 0, rt_ok = 0, shown = 0;
  size_t bytes = 0;
  double secs = 0;
  for (const auto& line : f.lines) {
    const std::string text = line["text"].get<std::string>();
    const std::vector<int32_t> want = line["ids"].get<std::vector<int32_t>>();
    const auto t0 = std::chrono::steady_clock::now();
    auto got = t->encode(text, false, true);
    secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bytes += text.size();
    ASSERT_TRUE(got.has_value());
    if (*got == want) {
      ++match;
    } else if (shown++ < 5) {
      ADD_FAILURE() << name << " mismatch on " << nlohmann::json(text).dump() << "\n  want " << ids_str(want)
                    << "\n  got  " << ids_str(*got);
    }
    auto dec = t->decode(want);
    ASSERT_TRUE(dec.has_value());
    if (line.value("rt", false)) {  // HF decodes these back to the text: so must we
      ++rt_checked;
      rt_ok += *dec == text;
      EXPECT_EQ(*dec, text) << name << ": decode(HF ids) of " << nlohmann::json(text).dump();
    }
    if (utf8::is_valid(*dec)) {
      EXPECT_EQ(stream_all(*t, want, false), *dec) << nlohmann::json(text).dump();
    }
  }
  std::printf("[ %s ] %zu/%zu lines identical to Hugging Face; decode round trip %zu/%zu; "
              "encode %.1f MB/s (%zu bytes)\n",
              name.c_str(), match, f.lines.size(), rt_ok, rt_checked, bytes / 1e6 / (secs > 0 ? secs : 1e-9), bytes);
  EXPECT_EQ(match, f.lines.size());
}

}  // namespace

TEST(TokenizerSpm, Llama2ParityWithHuggingFace) { check_parity("llama2"); }
TEST(TokenizerSpm, MistralV1ParityWithHuggingFace) { check_parity("mistral_v1"); }
TEST(TokenizerSpm, MistralV3ParityWithHuggingFace) { check_parity("mistral_v3"); }
TEST(TokenizerSpm, Gemma3ParityWithHuggingFace) { check_parity("gemma3"); }

TEST(TokenizerSpm, Llama2Metadata) {
  REQUIRE_FAMILY(t, "llama2");
  EXPECT_EQ(t->model_name(), "llama");
  EXPECT_EQ(t->n_vocab(), 32000);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_TRUE(t->add_bos());
  EXPECT_FALSE(t->add_eos());
  EXPECT_TRUE(t->strips_leading_space());
  EXPECT_TRUE(t->is_eog(2));
  EXPECT_EQ(t->token_type(0), TokenType::Unknown);
  EXPECT_EQ(t->token_type(1), TokenType::Control);
  EXPECT_EQ(t->token_bytes(13), "\n");  // <0x0A>
  EXPECT_EQ(t->token_text(13), "<0x0A>");
}

TEST(TokenizerSpm, BosPerMetadata) {
  for (const char* name : {"llama2", "mistral_v1", "mistral_v3", "gemma3"}) {
    std::string why;
    const Tokenizer* t = family(name, &why);
    if (t == nullptr) {
      std::printf("[ %s ] skipped: %s\n", name, why.c_str());
      continue;
    }
    auto with = t->encode("Hello world", true, false);
    auto without = t->encode("Hello world", false, false);
    ASSERT_TRUE(with.has_value() && without.has_value());
    ASSERT_GE(t->bos_id(), 0) << name;
    ASSERT_EQ(with->size(), without->size() + 1) << name;
    EXPECT_EQ(with->front(), t->bos_id()) << name;
    EXPECT_TRUE(std::equal(without->begin(), without->end(), with->begin() + 1)) << name;
    auto empty = t->encode("", true, false);
    ASSERT_TRUE(empty.has_value());
    EXPECT_EQ(*empty, std::vector<int32_t>{t->bos_id()}) << name;  // OG behaviour: [bos]
    EXPECT_TRUE(t->encode("", false, false)->empty()) << name;
  }
  REQUIRE_FAMILY(g, "gemma3");
  EXPECT_EQ(g->token_text(g->bos_id()), "<bos>");
  EXPECT_FALSE(g->strips_leading_space());
}

TEST(TokenizerSpm, MistralV3ControlTokens) {
  REQUIRE_FAMILY(t, "mistral_v3");
  const auto inst = t->find_token("[INST]"), end_inst = t->find_token("[/INST]");
  ASSERT_TRUE(inst && end_inst);
  EXPECT_EQ(t->token_type(*inst), TokenType::Control);
  auto parsed = t->encode("[INST] hi [/INST]", false, true);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->front(), *inst);
  EXPECT_EQ(parsed->back(), *end_inst);
  // Legacy: the text after a control token gets its own dummy prefix: " hi " -> "▁▁hi▁".
  auto literal = t->encode("[INST] hi [/INST]", false, false);
  ASSERT_TRUE(literal.has_value());
  EXPECT_EQ(std::count(literal->begin(), literal->end(), *inst), 0);
  EXPECT_EQ(*t->decode(*literal), "[INST] hi [/INST]");
  EXPECT_EQ(*t->decode(*parsed, true), " hi ");  // the control tokens skipped; spaces are text
}

TEST(TokenizerSpm, ByteFallbackAndStreaming) {
  REQUIRE_FAMILY(t, "llama2");
  const std::string text = "a\xF0\x9F\x98\x80z";  // a😀z: the emoji is not a Llama 2 piece
  auto ids = t->encode(text, false, false);
  ASSERT_TRUE(ids.has_value());
  std::vector<int32_t> bytes;
  for (int32_t id : *ids) {
    if (t->token_type(id) == TokenType::Byte) bytes.push_back(id);
  }
  ASSERT_EQ(bytes.size(), 4u) << ids_str(*ids);
  EXPECT_EQ(t->token_text(bytes[0]), "<0xF0>");
  EXPECT_EQ(t->token_text(bytes[3]), "<0x80>");
  EXPECT_EQ(*t->decode(*ids), text);
  // Streaming: nothing comes out while the character is incomplete.
  StreamDecoder sd(*t);
  std::string out;
  for (int32_t id : *ids) {
    const std::string piece = sd.push(id);
    if (id == bytes[0] || id == bytes[1] || id == bytes[2]) {
      EXPECT_EQ(piece, "");
    }
    out += piece;
  }
  EXPECT_EQ(out + sd.flush(), text);
  // A split character flushed early becomes U+FFFD; reset starts a new stream.
  StreamDecoder partial(*t);
  EXPECT_EQ(partial.push(bytes[0]), "");
  EXPECT_EQ(partial.push(bytes[1]), "");
  EXPECT_EQ(partial.flush(), "\xEF\xBF\xBD");
  partial.reset();
  EXPECT_EQ(partial.push(*t->find_token(std::string(kSp) + "Hello")), "Hello");  // prefix space dropped
  EXPECT_EQ(partial.push(*t->find_token(std::string(kSp) + "world")), " world");
  // Invalid UTF-8 keeps its bytes through byte fallback.
  const std::string bad = "x\xFF\xC3(y";
  auto bad_ids = t->encode(bad, true, false);
  ASSERT_TRUE(bad_ids.has_value());
  EXPECT_EQ(*t->decode(*bad_ids, true), bad);
}

// ---- Synthetic vocabularies (no files needed) ----

namespace {

TokenizerConfig tiny_spm_config() {
  TokenizerConfig c;
  c.model = "llama";
  auto add = [&](const std::string& piece, float score, TokenType type) {
    c.tokens.push_back(piece);
    c.scores.push_back(score);
    c.token_types.push_back(static_cast<int32_t>(type));
  };
  add("<unk>", 0, TokenType::Unknown);
  add("<s>", 0, TokenType::Control);
  add("</s>", 0, TokenType::Control);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    add(buf, 0, TokenType::Byte);
  }
  const std::string sp = kSp;
  add(sp, -1, TokenType::Normal);          // 259
  add("a", -2, TokenType::Normal);         // 260
  add("b", -3, TokenType::Normal);         // 261
  add("c", -4, TokenType::Normal);         // 262
  add(sp + "a", -5, TokenType::Normal);    // 263
  add("ab", -6, TokenType::Normal);        // 264: worse than ▁a
  add("bc", -7, TokenType::Normal);        // 265
  add(sp + "ab", -8, TokenType::Normal);   // 266
  add("<tag>", 0, TokenType::UserDefined); // 267
  c.bos_id = 1;
  c.eos_id = 2;
  c.unk_id = 0;
  c.add_bos = true;
  return c;
}

std::vector<int32_t> enc(const Tokenizer& t, std::string_view s, bool parse = true) {
  auto r = t.encode(s, false, parse);
  EXPECT_TRUE(r.has_value());
  return r ? *r : std::vector<int32_t>{};
}

using V = std::vector<int32_t>;

}  // namespace

TEST(TokenizerSpm, SyntheticMergesByScore) {
  auto t = Tokenizer::from_config(tiny_spm_config());
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  const Tokenizer& k = **t;
  EXPECT_EQ(enc(k, "ab"), (V{266}));       // ▁a (best) then ▁a+b
  EXPECT_EQ(enc(k, "abc"), (V{263, 265}));  // ▁a (-5), then bc (-7) beats ▁ab (-8)
  EXPECT_EQ(enc(k, "abab"), (V{266, 264}));  // ▁a, then ab (-6), then ▁ab (-8)
  EXPECT_EQ(enc(k, "bc"), (V{259, 265}));   // ▁ b c: bc
  EXPECT_EQ(enc(k, " a"), (V{259, 263}));   // ▁▁a: no ▁▁ piece
  EXPECT_EQ(enc(k, "bbb"), (V{259, 261, 261, 261}));
  // 'd' is not a piece: byte fallback.
  EXPECT_EQ(enc(k, "ad"), (V{263, 3 + 'd'}));
  // user-defined pieces are split out even without parse_special; control ones only with it.
  EXPECT_EQ(enc(k, "a<tag>b", false), (V{263, 267, 259, 261}));
  EXPECT_EQ(enc(k, "<s>a", true), (V{1, 263}));
  EXPECT_EQ(enc(k, "<s>", false).size(), 4u);  // ▁ < s >  as bytes
  EXPECT_EQ(*k.decode(enc(k, "a<tag>b")), "a<tag> b");  // legacy prefix after added tokens
  EXPECT_EQ(*k.decode(V{1, 263}), "<s> a");
  EXPECT_EQ(*k.decode(V{1, 263}, true), "a");
  EXPECT_EQ(*k.encode("ab", true, false), (V{1, 266}));
  auto bad = k.decode(V{0, 1000});
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::OutOfRange);
}

TEST(TokenizerSpm, SyntheticExplicitMergesAndUnknown) {
  TokenizerConfig c = tiny_spm_config();
  c.merges = {"b c", "a b", kSp + std::string(" ab"), kSp + std::string(" a")};  // bc first now
  c.byte_fallback = false;
  c.add_space_prefix = false;
  auto t = Tokenizer::from_config(c);
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  EXPECT_EQ(enc(**t, "abc"), (V{260, 265}));         // a, bc (bc beats ab)
  EXPECT_EQ(enc(**t, "ab"), (V{264}));
  EXPECT_EQ(enc(**t, "xyz a"), (V{0, 263}));         // unknowns fused into one <unk>
  EXPECT_EQ(*(*t)->decode(V{260, 265}), "abc");      // no dummy prefix to strip
  EXPECT_FALSE((*t)->strips_leading_space());
}

TEST(TokenizerSpm, SyntheticRemoveExtraWhitespaces) {
  TokenizerConfig c = tiny_spm_config();
  c.remove_extra_whitespaces = true;
  auto t = Tokenizer::from_config(c);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(enc(**t, "  a   b  "), enc(**t, "a b"));
}

TEST(TokenizerSpm, ConfigErrors) {
  TokenizerConfig c = tiny_spm_config();
  c.scores.pop_back();
  auto t = Tokenizer::from_config(c);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find("score"), std::string::npos);
  c = tiny_spm_config();
  c.token_types.pop_back();
  EXPECT_FALSE(Tokenizer::from_config(c).has_value());
  c = tiny_spm_config();
  c.tokens.clear();
  c.scores.clear();
  c.token_types.clear();
  EXPECT_FALSE(Tokenizer::from_config(c).has_value());
  c = tiny_spm_config();
  c.scores[300] = std::nanf("");  // a NaN score must not break the merge sort
  EXPECT_TRUE(Tokenizer::from_config(c).has_value());
  c.model = "bert";
  auto u = Tokenizer::from_config(c);
  ASSERT_FALSE(u.has_value());
  EXPECT_EQ(u.error().code, ErrorCode::Unsupported);
}

// ---- SentencePiece model files ----

namespace {

// A tiny protobuf writer for building ModelProto bytes.
struct Pb {
  std::string b;
  void varint(uint64_t v) {
    while (v >= 0x80) {
      b.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    b.push_back(static_cast<char>(v));
  }
  void tag(uint32_t field, uint32_t wire) { varint((static_cast<uint64_t>(field) << 3) | wire); }
  void field_varint(uint32_t field, uint64_t v) {
    tag(field, 0);
    varint(v);
  }
  void field_bytes(uint32_t field, std::string_view s) {
    tag(field, 2);
    varint(s.size());
    b.append(s);
  }
  void field_float(uint32_t field, float f) {
    tag(field, 5);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
  }
};

std::string tiny_model_proto(int model_type) {
  const TokenizerConfig c = tiny_spm_config();
  Pb m;
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    Pb p;
    p.field_bytes(1, c.tokens[i]);
    p.field_float(2, c.scores[i]);
    if (c.token_types[i] != 1) p.field_varint(3, static_cast<uint64_t>(c.token_types[i]));
    m.field_bytes(1, p.b);
  }
  Pb trainer;
  trainer.field_varint(3, static_cast<uint64_t>(model_type));
  trainer.field_varint(4, c.tokens.size());
  trainer.field_varint(35, 1);
  trainer.field_varint(43, static_cast<uint64_t>(-1));  // pad_id -1: a 10-byte varint
  trainer.field_bytes(45, "<unk>");
  m.field_bytes(2, trainer.b);
  Pb norm;
  norm.field_bytes(1, "identity");
  norm.field_varint(3, 1);
  norm.field_varint(4, 0);
  m.field_bytes(3, norm.b);
  m.tag(99, 1);  // an unknown fixed64 field is skipped
  for (int i = 0; i < 8; ++i) m.b.push_back(0);
  return m.b;
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::span<const uint8_t> as_span(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

TEST(TokenizerSpm, SentencePieceSyntheticModel) {
  const std::string bytes = tiny_model_proto(2);
  auto m = parse_sentencepiece_model(as_span(bytes));
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  EXPECT_EQ(m->pieces.size(), 268u);
  EXPECT_EQ(m->model_type, 2);
  EXPECT_TRUE(m->byte_fallback);
  EXPECT_EQ(m->pad_id, -1);
  EXPECT_EQ(m->unk_id, 0);
  EXPECT_EQ(m->bos_id, 1);
  EXPECT_EQ(m->normalizer_name, "identity");
  EXPECT_FALSE(m->remove_extra_whitespaces);
  EXPECT_EQ(m->pieces[10].type, 6);
  EXPECT_EQ(m->pieces[263].type, 1);
  EXPECT_EQ(m->pieces[261].score, -3.0f);
  auto t = Tokenizer::from_sentencepiece(write_temp("gx_tiny_spm.model", bytes));
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  EXPECT_EQ(enc(**t, "abc"), (V{263, 265}));
  EXPECT_EQ(*(*t)->encode("ab", true, false), (V{1, 266}));

  auto uni = Tokenizer::from_sentencepiece(write_temp("gx_tiny_unigram.model", tiny_model_proto(1)));
  ASSERT_FALSE(uni.has_value());
  EXPECT_EQ(uni.error().code, ErrorCode::Unsupported);
  EXPECT_NE(uni.error().message.find("Unigram"), std::string::npos) << uni.error().message;

  auto missing = Tokenizer::from_sentencepiece(::testing::TempDir() + "gx_no_such_file.model");
  EXPECT_FALSE(missing.has_value());
}

TEST(TokenizerSpm, SentencePieceMalformedNeverCrashes) {
  // Seeded truncations and mutations of a valid model: parse and load either succeed or fail
  // with InvalidFormat/Unsupported, never crash (ASan/UBSan builds check the "never").
  const std::string good = tiny_model_proto(2);
  std::mt19937_64 rng(1234);
  size_t errors = 0, ok = 0;
  auto check = [&](const std::string& bytes) {
    auto m = parse_sentencepiece_model(as_span(bytes));
    if (!m) {
      ++errors;
      EXPECT_EQ(m.error().code, ErrorCode::InvalidFormat);
      EXPECT_FALSE(m.error().message.empty());
      return;
    }
    ++ok;
    if (m->model_type != 2) return;
    TokenizerConfig c;
    c.model = "llama";
    for (auto& p : m->pieces) {
      c.tokens.push_back(p.piece);
      c.scores.push_back(p.score);
      c.token_types.push_back(p.type);
    }
    c.unk_id = m->unk_id;
    c.bos_id = m->bos_id;
    auto t = Tokenizer::from_config(c);
    if (t) {
      auto ids = (*t)->encode("ab c\xF0\x9F\x98\x80<tag>", true, true);
      ASSERT_TRUE(ids.has_value());
      EXPECT_TRUE((*t)->decode(*ids).has_value());
    }
  };
  for (size_t len = 0; len < good.size(); len += 1 + rng() % 7) check(good.substr(0, len));
  for (int r = 0; r < 3000; ++r) {
    std::string b = good;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
      const size_t pos = rng() % b.size();
      switch (rng() % 4) {
        case 0: b[pos] = static_cast<char>(rng()); break;
        case 1: b[pos] = static_cast<char>(0xFF); break;
        case 2: b.erase(pos, 1 + rng() % 16); break;
        default: b.insert(pos, 1, static_cast<char>(rng())); break;
      }
      if (b.empty()) b.push_back('\x0a');
    }
    check(b);
  }
  std::printf("[ spm mutation ] %zu parse errors, %zu parsed\n", errors, ok);
  EXPECT_GT(errors, 100u);

  // Specific malformed inputs.
  for (const std::string& bad : {std::string("\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12),
                                 std::string("\x0a\x05\x0a\x03", 4), std::string("\x0b", 1),
                                 std::string("\x0a\x00", 2), std::string()}) {
    auto m = parse_sentencepiece_model(as_span(bad));
    ASSERT_FALSE(m.has_value());
    EXPECT_EQ(m.error().code, ErrorCode::InvalidFormat);
  }
}

TEST(TokenizerSpm, SentencePieceRealModelTruncated) {
  const std::string path = tokenizer_dir() + "/mistral-v1.model";
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) GTEST_SKIP() << path << " not found";
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto full = parse_sentencepiece_model(as_span(bytes));
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(full->pieces.size(), 32000u);
  EXPECT_EQ(full->model_type, 2);
  EXPECT_TRUE(full->byte_fallback);
  EXPECT_TRUE(full->add_dummy_prefix);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 40; ++i) {
    const size_t len = rng() % bytes.size();
    auto m = parse_sentencepiece_model(as_span(bytes.substr(0, len)));
    if (!m) {
      EXPECT_EQ(m.error().code, ErrorCode::InvalidFormat);
    }
    // a cut that happens to fall between fields parses (fewer pieces): fine, never a crash
  }
}
