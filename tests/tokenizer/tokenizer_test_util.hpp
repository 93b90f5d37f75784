// Shared helpers for the tokenizer tests: the SmolLM2 GGUF (skipped when absent), fixtures.
#pragma once

#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/gguf.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8.hpp"

namespace geniex::tok::testing {

inline std::string model_path() {
  if (const char* env = std::getenv("GENIEX_MODEL"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/geniex/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The SmolLM2 tokenizer, loaded once; nullptr (and *why set) when the model is unavailable.
inline const Tokenizer* smollm2(std::string* why) {
  static std::string reason;
  static std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    const std::string path = model_path();
    if (!std::ifstream(path).good()) {
      reason = "model not found at " + path + " (set GENIEX_MODEL to a SmolLM2 GGUF)";
      return nullptr;
    }
    auto file = gguf::File::open(path);
    if (!file) {
      reason = "cannot open " + path + ": " + file.error().to_string();
      return nullptr;
    }
    auto t = Tokenizer::from_gguf(*file);
    if (!t) {
      reason = "from_gguf failed: " + t.error().to_string();
      return nullptr;
    }
    return std::move(t).value();
  }();
  if (why) *why = reason;
  return tok.get();
}

inline std::string data_path(const std::string& name) { return std::string(GENIEX_TEST_DATA) + "/tokenizer/" + name; }

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

// A tiny byte-level tokenizer that needs no model file: the 256 byte tokens, a few merges and
// two control tokens.
inline std::unique_ptr<Tokenizer> tiny_tokenizer() {
  TokenizerConfig cfg;
  cfg.model = "gpt2";
  cfg.pre = "smollm";
  cfg.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  // byte alphabet spelled as GPT-2 does
  std::vector<std::string> bytes(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    std::string s;
    utf8::append_codepoint(s, keep ? b : next++);
    cfg.tokens.push_back(s);
  }
  cfg.token_types.assign(cfg.tokens.size(), 1);
  cfg.token_types[0] = cfg.token_types[1] = cfg.token_types[2] = 3;
  for (const char* m : {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r", "\xC4\xA0w or"}) {
    cfg.merges.push_back(m);
    std::string joined = m;
    joined.erase(joined.find(' '), 1);
    cfg.tokens.push_back(joined);
    cfg.token_types.push_back(1);
  }
  cfg.bos_id = 0;
  cfg.eos_id = 2;
  auto t = Tokenizer::from_config(cfg);
  return t ? std::move(t).value() : nullptr;
}

}  // namespace geniex::tok::testing
