// SentencePiece-style BPE ("llama" tokenizer model: Llama 2, Mistral, Gemma 3) as Hugging Face
// tokenizers runs it from the tokenizer.json these models ship:
//   normalize   optional remove_extra_whitespaces (SentencePiece: trim and collapse ' ' runs),
//               optional dummy prefix "▁" (Prepend), then ' ' -> "▁" (Replace)
//   model       BPE over the characters of the whole normalized segment (no pre-tokenizer):
//               a character missing from the vocabulary becomes its UTF-8 bytes as <0xXX> tokens
//               (byte_fallback), else <unk> (consecutive unknowns fused into one); then adjacent
//               pairs are merged, best rank first, leftmost first among equals.
//   ranks       from explicit merges ("left right", best first) when given; otherwise derived
//               from the piece scores exactly as transformers' generate_merges() orders them:
//               every split of every piece into two vocabulary pieces, sorted by the merged
//               piece's score (higher first), then longer left part, then longer right part,
//               then piece id, left id, right id.
// Bytes that are not well-formed UTF-8 are kept: each byte of an ill-formed subpart is an
// unknown "character" and goes through byte fallback, so decode(encode(bytes)) == bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/result.hpp"

namespace geniex::tok::spm {

inline constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

// "<0xAB>" -> 0xAB; -1 when `piece` is not spelled that way.
int byte_piece_value(std::string_view piece);

// The normalized form of one raw text segment (see above).
std::string normalize(std::string_view text, bool add_prefix, bool remove_extra_whitespaces);

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class BpeModel {
 public:
  // tokens: vocabulary spelled with "▁"; scores: per token (needed when merges is empty).
  static Result<BpeModel> build(const std::vector<std::string>& tokens, const std::vector<float>& scores,
                                const std::vector<std::string>& merges, bool byte_fallback, int32_t unk_id);

  // Appends the ids of one normalized segment.
  void encode(std::string_view normalized, std::vector<int32_t>& out) const;
  size_t n_merges() const { return n_merges_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  const Merge* find_merge(int32_t a, int32_t b) const;
  int32_t char_id(std::string_view ch) const;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  std::vector<int32_t> ascii_id_;        // 128 entries, -1 when absent
  std::vector<int32_t> byte_token_;      // 256 entries: id of <0xXX>, -1 when absent
  std::vector<uint64_t> merge_keys_;     // open addressing: (a << 32 | b)
  std::vector<Merge> merge_vals_;
  size_t merge_mask_ = 0;
  size_t n_merges_ = 0;
  bool byte_fallback_ = true;
  int32_t unk_id_ = -1;
};

}  // namespace geniex::tok::spm
