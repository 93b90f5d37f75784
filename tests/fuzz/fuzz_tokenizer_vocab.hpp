// Shared by the tokenizer fuzz targets (fuzz_tokenizer_encode.cpp, fuzz_tokenizer_decode.cpp):
// the vocabulary under test, property checks that abort with a readable message, and an
// oracle for well-formed UTF-8 that does not reuse the tokenizer's own UTF-8 code.
//
// Vocabulary: $GENIEX_FUZZ_VOCAB, a path or a bare file name looked up in
// $GENIEX_TOKENIZER_DIR (default ~/.cache/geniex/tokenizers), or "@model" for $GENIEX_MODEL (default
// the cached SmolLM2 GGUF); unset: vocab-llama-bpe.gguf in that folder.
// A GGUF, vocab-only or a full model. Exit codes when it cannot be used (before any input runs):
//   77 (ctest SKIP_RETURN_CODE): the file is not there (scripts/fetch_tokenizers.sh fetches it)
//    0 : the tokenizer kind is not supported by this build (ErrorCode::Unsupported), a message
//        says so; e.g. SentencePiece vocabularies before that tokenizer exists
//    1 : any other load error (a real bug: a shipped vocabulary must load)
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace geniex::fuzz {

inline constexpr int kExitSkip = 77;

inline std::string vocab_path() {
  const char* env = std::getenv("GENIEX_FUZZ_VOCAB");
  std::string name = env != nullptr && *env != '\0' ? env : "vocab-llama-bpe.gguf";
  if (name == "@model") {  // the model the end-to-end tests use (SmolLM2)
    if (const char* m = std::getenv("GENIEX_MODEL"); m != nullptr && *m != '\0') return m;
    const char* home = std::getenv("HOME");
    return std::string(home != nullptr ? home : "") + "/.cache/geniex/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  if (name.find('/') != std::string::npos) return name;
  std::string dir;
  if (const char* d = std::getenv("GENIEX_TOKENIZER_DIR"); d != nullptr && *d != '\0') {
    dir = d;
  } else {
    const char* home = std::getenv("HOME");
    dir = std::string(home != nullptr ? home : "") + "/.cache/geniex/tokenizers";
  }
  return dir + "/" + name;
}

// The tokenizer under test, loaded on first use (exits as described above when unusable).
inline const tok::Tokenizer& vocab(const char* target) {
  static std::unique_ptr<tok::Tokenizer> tokenizer = [target]() -> std::unique_ptr<tok::Tokenizer> {
    const std::string path = vocab_path();
    std::FILE* probe = std::fopen(path.c_str(), "rb");
    if (probe == nullptr) {
      std::fprintf(stderr, "%s: SKIP: vocabulary %s not found (run scripts/fetch_tokenizers.sh or set "
                   "GENIEX_FUZZ_VOCAB / GENIEX_TOKENIZER_DIR)\n", target, path.c_str());
      std::exit(kExitSkip);
    }
    std::fclose(probe);
    Result<gguf::File> file = gguf::File::open(path);
    if (!file) {
      std::fprintf(stderr, "%s: %s %s: %s\n", target,
                   file.error().code == ErrorCode::Unsupported ? "NOT RUN (exit 0): the GGUF reader of this build cannot open"
                                                               : "cannot read",
                   path.c_str(), file.error().to_string().c_str());
      std::exit(file.error().code == ErrorCode::Unsupported ? 0 : 1);
    }
    Result<std::unique_ptr<tok::Tokenizer>> t = tok::Tokenizer::from_gguf(*file);
    if (!t) {
      if (t.error().code == ErrorCode::Unsupported) {
        std::fprintf(stderr, "%s: NOT RUN: %s loads as an unsupported tokenizer in this build (%s); "
                     "exiting 0 until that tokenizer kind is implemented\n",
                     target, path.c_str(), t.error().to_string().c_str());
        std::exit(0);
      }
      std::fprintf(stderr, "%s: tokenizer from %s failed to load: %s\n", target, path.c_str(),
                   t.error().to_string().c_str());
      std::exit(1);
    }
    std::fprintf(stderr, "%s: vocabulary %s (model %s, pre %s, %d tokens)\n", target, path.c_str(),
                 (*t)->model_name().c_str(), (*t)->pre_name().c_str(), (*t)->n_vocab());
    return std::move(t).value();
  }();
  return *tokenizer;
}

// Byte-level BPE (GPT-2 alphabet): decode(encode(bytes)) == bytes for every byte string, unless
// the vocabulary normalizes its input (Qwen2: NFC).
inline bool byte_level(const tok::Tokenizer& t) { return t.model_name() == "gpt2"; }

// Whether encode normalizes the text, found by behaviour: does "e" + U+0301 come back as is?
inline bool normalizes(const tok::Tokenizer& t) {
  static const bool value = [&t] {
    const std::string probe = "e\xCC\x81";
    Result<std::vector<int32_t>> ids = t.encode(probe, false, false);
    if (!ids) return false;
    Result<std::string> back = t.decode(*ids);
    return !back || *back != probe;
  }();
  return value;
}

// Printable, bounded view of some bytes for failure messages.
inline std::string show(std::string_view s, size_t max = 160) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > max) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

[[noreturn]] inline void fail(const char* target, const std::string& what, std::string_view input) {
  std::fprintf(stderr, "%s: PROPERTY FAILED: %s\n  input (%zu bytes): %s\n", target, what.c_str(), input.size(),
               show(input, 400).c_str());
  std::fflush(stderr);
  std::abort();
}

// Well-formed UTF-8 as in the Unicode standard, Table 3-7: for each lead byte, the range the
// second byte must fall in and the sequence length. Written independently of tokenizer/utf8.hpp
// so that it can judge the tokenizer's output.
struct LeadInfo {
  int len;             // 0: never a lead byte
  unsigned char lo;    // allowed second byte
  unsigned char hi;
};

inline LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Length of the well-formed sequence at s[i], or -(length of the maximal ill-formed subpart)
// (the lead byte plus the continuation bytes that still fit, at least 1).
inline int utf8_step(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const LeadInfo li = lead_info(b0);
  if (li.len == 0) return -1;
  for (int k = 1; k < li.len; ++k) {
    if (i + static_cast<size_t>(k) >= s.size()) return -k;
    const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    const unsigned char lo = k == 1 ? li.lo : 0x80;
    const unsigned char hi = k == 1 ? li.hi : 0xBF;
    if (b < lo || b > hi) return -k;
  }
  return li.len;
}

inline bool well_formed(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_step(s, i);
    if (n < 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

// s with every maximal ill-formed subpart replaced by one U+FFFD (Unicode's recommended
// practice, what StreamDecoder promises).
inline std::string replace_ill_formed(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_step(s, i);
    if (n > 0) {
      out.append(s.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else {
      out += "\xEF\xBF\xBD";
      i += static_cast<size_t>(-n);
    }
  }
  return out;
}

// Bytes that come back from decode(encode(byte)) alone: those the vocabulary has a byte token
// for (SmolLM2's lacks 21 of the 256, e.g. 0x04 and 0xFF).
inline bool representable(const tok::Tokenizer& t, std::string_view s) {
  static const std::array<bool, 256> table = [&t] {
    std::array<bool, 256> ok{};
    for (int b = 0; b < 256; ++b) {
      const std::string one(1, static_cast<char>(b));
      Result<std::vector<int32_t>> ids = t.encode(one, false, false);
      if (!ids) continue;
      Result<std::string> back = t.decode(*ids);
      ok[static_cast<size_t>(b)] = back && *back == one;
    }
    return ok;
  }();
  for (const char c : s) {
    if (!table[static_cast<unsigned char>(c)]) return false;
  }
  return true;
}

inline bool ascii(std::string_view s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// decode(ids) as documented: the concatenated token bytes (special tokens dropped when skipping),
// less one leading space on SentencePiece vocabularies with a dummy prefix.
inline std::string expected_decode(const tok::Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
  std::string out;
  for (const int32_t id : ids) {
    if (!(skip_special && t.is_special(id))) out += t.token_bytes(id);
  }
  if (t.strips_leading_space() && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

// Byte-level vocabularies, parse_special = false: decode(encode(x)) == x for every byte string
// whose bytes all have byte tokens; where the vocabulary normalizes (NFC), for ASCII x, and
// otherwise encode(decode(encode(x))) == encode(x) (normalizing twice changes nothing).
inline void check_round_trip(const char* target, const tok::Tokenizer& t, std::string_view text,
                             std::string_view input) {
  if (!byte_level(t) || !representable(t, text)) return;
  Result<std::vector<int32_t>> ids = t.encode(text, false, false);
  if (!ids) fail(target, "encode failed: " + ids.error().to_string(), input);
  Result<std::string> back = t.decode(*ids);
  if (!back) fail(target, "decode of encode's ids failed: " + back.error().to_string(), input);
  if (!normalizes(t) || ascii(text)) {
    if (*back != text) {
      fail(target,
           std::string("decode(encode(x)) != x on a byte-level vocabulary") +
               (well_formed(text) ? " (x is well-formed UTF-8)" : " (x is not well-formed UTF-8)") + ": got '" +
               show(*back) + "' for x = '" + show(text) + "'",
           input);
    }
    return;
  }
  Result<std::vector<int32_t>> again = t.encode(*back, false, false);
  if (!again || *again != *ids) {
    fail(target, "encode(decode(encode(x))) != encode(x) on a normalizing byte-level vocabulary; decode gave '" +
                     show(*back) + "' for x = '" + show(text) + "'",
         input);
  }
}

// Streams ids through a StreamDecoder, checking every piece, and returns the whole output.
inline std::string stream_decode(const char* target, const tok::Tokenizer& t, const int32_t* ids, size_t n,
                                 bool skip_special, std::string_view input) {
  tok::StreamDecoder sd(t, skip_special);
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const std::string piece = sd.push(ids[i]);
    if (!well_formed(piece)) {
      fail(target, "StreamDecoder::push(" + std::to_string(ids[i]) + ") returned ill-formed UTF-8 '" + show(piece) +
                       "'", input);
    }
    out += piece;
  }
  const std::string tail = sd.flush();
  if (!well_formed(tail)) fail(target, "StreamDecoder::flush returned ill-formed UTF-8 '" + show(tail) + "'", input);
  out += tail;
  return out;
}

}  // namespace geniex::fuzz
