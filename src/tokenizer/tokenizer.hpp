// Tokenizer (byte-level BPE as in GPT-2 / SmolLM2 / Llama 3 / Qwen2, and SentencePiece-style BPE
// as in Llama 2 / Mistral / Gemma 3, see spm.hpp), streaming decode that never emits broken
// UTF-8, and a small Jinja renderer for chat templates.
//
// Thread safety: a Tokenizer and a ChatTemplate are immutable after construction; encode,
// decode and render may be called from any number of threads at once. A StreamDecoder belongs
// to one generation stream (one thread at a time).
//
// Invalid UTF-8 input to encode never fails and never crashes. Hugging Face tokenizers cannot
// even receive such input (Rust &str / Python str), and llama.cpp replaces each bad byte with
// U+FFFD. GenieX keeps the bytes instead: every maximal run of bytes that is not well-formed
// UTF-8 becomes a pre-token of its own and goes through the byte-level alphabet like any other
// byte, so decode(encode(bytes)) == bytes for every byte string (on vocabularies that have all
// 256 byte tokens; a byte missing from the vocabulary is dropped, as HF and llama.cpp do). The
// regex pre-tokenizer runs
// on the well-formed runs between them.
// SentencePiece vocabularies ("llama") do the same through byte fallback: each byte of an
// ill-formed sequence becomes its <0xXX> token.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.hpp"
#include "tokenizer/chat_template.hpp"

namespace geniex::gguf {
class File;
}

namespace geniex::tok {

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

// Everything a tokenizer is built from, independent of the file format: GGUF metadata
// (tokenizer.ggml.*), a Hugging Face folder (tokenizer.json, tokenizer_config.json,
// tokenizer.model) or a tiktoken rank file fill the same struct.
struct TokenizerConfig {
  // "gpt2": byte-level BPE (GPT-2, SmolLM2, Llama 3, Qwen2/2.5/3). Tokens are spelled in the
  //         GPT-2 byte-to-unicode alphabet.
  // "llama": SentencePiece-style BPE with byte fallback (Llama 2, Mistral, Gemma 3). Tokens are
  //         spelled with U+2581 for spaces; <0xXX> byte tokens; merges come from `merges` when
  //         given, else from `scores` (the higher the score of the merged piece, the earlier).
  std::string model = "gpt2";          // tokenizer.ggml.model
  std::string pre = "default";         // tokenizer.ggml.pre (named pre-tokenizer)
  // Explicit pre-tokenizer: regexes applied in order, each splitting every piece into matches and
  // the gaps between them (HF Split behaviour "isolated"). When non-empty it replaces `pre`.
  std::vector<std::string> pre_patterns;
  std::string normalizer;              // "" (none) or "nfc" (Qwen2's tokenizer.json)
  bool ignore_merges = false;          // HF BPE ignore_merges: a word that is a token stays whole
  std::vector<std::string> tokens;     // spelling as stored in the file (see `model`)
  std::vector<float> scores;           // SentencePiece piece scores ("llama"); may be empty
  std::vector<int32_t> token_types;    // empty: all Normal
  std::vector<std::string> merges;     // "left right", best first
  // SentencePiece options ("llama" only).
  bool add_space_prefix = true;        // tokenizer.ggml.add_space_prefix (Gemma: false)
  bool byte_fallback = true;           // unknown characters become <0xXX> byte tokens
  bool remove_extra_whitespaces = false;  // SentencePiece normalizer option
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  int32_t eot_id = -1;
  int32_t eom_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  std::string chat_template;
};

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);
  static Result<std::unique_ptr<Tokenizer>> from_config(TokenizerConfig config);
  // A Hugging Face tokenizer: a folder with tokenizer.json (and tokenizer_config.json when
  // present: chat template, BOS/EOS and add_bos_token), or the path of a tokenizer.json.
  static Result<std::unique_ptr<Tokenizer>> from_hf(const std::string& path);
  // A SentencePiece model file (tokenizer.model, protobuf ModelProto).
  static Result<std::unique_ptr<Tokenizer>> from_sentencepiece(const std::string& path);
  // Any of the above told apart by content (GGUF magic, JSON, protobuf): a GGUF with
  // tokenizer.ggml.* metadata, a Hugging Face folder or tokenizer.json, a SentencePiece model.
  // Errors name the path.
  static Result<std::unique_ptr<Tokenizer>> from_path(const std::string& path);
  // A tiktoken rank file (base64 token, space, rank per line) with the pre-tokenizer named `pre`
  // ("qwen2", "qwen35", ...) and the special tokens that follow the ranks (text, id).
  static Result<std::unique_ptr<Tokenizer>> from_tiktoken(
      const std::string& path, const std::string& pre,
      const std::vector<std::pair<std::string, int32_t>>& specials);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special: add BOS/EOS as the model's metadata says (add_bos_token / add_eos_token).
  // parse_special: recognise control and user-defined token literals such as "<|im_start|>"
  // in the text (leftmost, longest first), as Hugging Face does for added tokens.
  // SentencePiece ("llama") vocabularies: <unk> and control pieces need parse_special;
  // user-defined pieces (HF non-special added tokens, e.g. Gemma's whitespace runs) are always
  // matched whole. Each text segment between added tokens gets the dummy prefix on its own (HF
  // legacy behaviour, as sentencepiece and llama.cpp): "<s>Hi" -> <s> "▁Hi".
  Result<std::vector<int32_t>> encode(std::string_view text, bool add_special,
                                      bool parse_special) const;
  // Concatenated raw bytes of the tokens (may be incomplete UTF-8 when the ids end inside a
  // character; use StreamDecoder for display). skip_special drops control/unknown tokens.
  // An id outside [0, n_vocab) is an OutOfRange error.
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special = false) const;
  std::string token_bytes(int32_t id) const;  // raw bytes a token stands for ("" if out of range)
  const std::string& token_text(int32_t id) const;  // as stored in the vocabulary
  TokenType token_type(int32_t id) const;

  int32_t n_vocab() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  bool add_bos() const;
  bool add_eos() const;
  bool is_eog(int32_t id) const;      // end of generation: eos, eot, <|im_end|>, <|endoftext|>...
  bool is_special(int32_t id) const;  // control or unknown: what skip_special drops
  std::optional<int32_t> find_token(std::string_view text) const;  // by stored spelling
  const std::string& chat_template() const;  // "" if none
  const std::string& model_name() const;     // "gpt2" or "llama"
  const std::string& pre_name() const;       // "smollm"
  // True for SentencePiece vocabularies with a dummy prefix: decode (and StreamDecoder) drop one
  // leading space of the output, as HF's decoder Strip(" ", 1, 0) does.
  bool strips_leading_space() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The TokenizerConfig that Tokenizer::from_hf builds from a Hugging Face folder or tokenizer.json
// (for converters that write it out as GGUF metadata).
Result<TokenizerConfig> hf_tokenizer_config(const std::string& path);

// Streaming decode for generation: push token ids one at a time and get text that is always
// well-formed UTF-8. The concatenated output equals decode() of the same ids (for SentencePiece
// vocabularies that includes dropping the dummy prefix's space at the start of the stream). Bytes that may still become a character are held back; bytes that can
// never be well-formed are replaced by U+FFFD (one per maximal ill-formed subpart).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true);
  std::string push(int32_t id);  // out-of-range ids are ignored
  std::string flush();           // held-back bytes come out as U+FFFD
  void reset() {
    pending_.clear();
    at_start_ = true;
  }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  bool at_start_ = true;  // nothing emitted yet (see Tokenizer::strips_leading_space)
  std::string pending_;
};

}  // namespace geniex::tok
