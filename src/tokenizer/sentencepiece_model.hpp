// Minimal reader for SentencePiece model files (tokenizer.model): the protobuf wire format of
// sentencepiece's ModelProto, decoding only the fields GenieX uses. Unknown fields are skipped;
// truncated or malformed input is an InvalidFormat error, never a crash or an over-read.
//
// Fields read (sentencepiece_model.proto):
//   ModelProto      1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec
//   SentencePiece   1 piece (string), 2 score (float), 3 type (enum, default NORMAL = 1)
//   TrainerSpec     3 model_type (UNIGRAM = 1 default, BPE = 2, WORD = 3, CHAR = 4),
//                   35 byte_fallback, 40 unk_id (0), 41 bos_id (1), 42 eos_id (2), 43 pad_id (-1)
//   NormalizerSpec  1 name, 2 precompiled_charsmap, 3 add_dummy_prefix (true),
//                   4 remove_extra_whitespaces (true), 5 escape_whitespaces (true)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "tokenizer/tokenizer.hpp"

namespace geniex::tok {

struct SentencePieceModel {
  struct Piece {
    std::string piece;
    float score = 0.0f;
    int32_t type = 1;  // same numbering as TokenType
  };
  std::vector<Piece> pieces;
  int32_t model_type = 1;  // 1 unigram, 2 bpe, 3 word, 4 char
  bool byte_fallback = false;
  int32_t unk_id = 0;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t pad_id = -1;
  std::string normalizer_name;
  size_t precompiled_charsmap_size = 0;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// Parses a serialized ModelProto. Does not check model_type (callers decide what they support).
Result<SentencePieceModel> parse_sentencepiece_model(std::span<const uint8_t> bytes);

// The "llama" TokenizerConfig of a parsed model: BPE only (a Unigram, Word or Char model is an
// Unsupported error), add_bos as SentencePiece and HF's LlamaTokenizer default. `origin` names
// the file in messages.
Result<TokenizerConfig> sentencepiece_config(SentencePieceModel m, std::string_view origin);

}  // namespace geniex::tok
