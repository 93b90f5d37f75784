// GenieX public tokenizer API: a model's tokenizer on its own, without loading weights.
//
//   auto tok = geniex::Tokenizer::load("vocab-llama-bpe.gguf");  // or a HF folder, tokenizer.json,
//   auto ids = tok->encode("Hello world");                        //    a SentencePiece .model
//   auto text = tok->decode(*ids);
//
// Errors are values; no input (invalid UTF-8, out-of-range ids, malformed files) crashes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "geniex/result.hpp"

namespace geniex {

struct ChatMessage;

struct EncodeOptions {
  // Add BOS/EOS as the tokenizer's metadata says (add_bos_token / add_eos_token).
  bool add_special = true;
  // Recognise special-token literals such as "<|im_start|>" in the text; false treats them as
  // plain text (what a user's message should get).
  bool parse_special = true;
};

class Tokenizer {
 public:
  // The kind is told by the content, not the name: a GGUF with tokenizer.ggml.* metadata (a full
  // model or a vocab-only file), a Hugging Face folder or tokenizer.json (with
  // tokenizer_config.json beside it when present), or a SentencePiece tokenizer.model.
  static Result<Tokenizer> load(const std::string& path);

  Tokenizer(const Tokenizer&);
  Tokenizer& operator=(const Tokenizer&);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  Result<std::vector<int32_t>> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Ids to text. Bytes of an incomplete character at the end come back as they are; use
  // Stream for text shown while generating. An id outside [0, n_vocab) is an OutOfRange error.
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The chat template stored with the tokenizer (GGUF tokenizer.chat_template or
  // tokenizer_config.json), rendered like transformers' apply_chat_template.
  Result<std::string> apply_chat_template(const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt = true) const;
  bool has_chat_template() const;

  int32_t n_vocab() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  bool is_end_of_generation(int32_t id) const;  // EOS, end-of-turn, <|im_end|>, ...
  bool is_special(int32_t id) const;            // control/unknown: what skip_special drops
  std::string token_bytes(int32_t id) const;    // raw bytes of one token ("" if out of range)
  std::optional<int32_t> find_token(std::string_view spelling) const;  // as stored in the vocabulary

  // Incremental decoding for generation: the concatenated pieces equal decode() of the same ids,
  // and no piece ends inside a UTF-8 character (held back until complete; bytes that can never
  // form one come out as U+FFFD).
  class Stream {
   public:
    Stream(Stream&&) noexcept;
    Stream& operator=(Stream&&) noexcept;
    ~Stream();
    std::string push(int32_t id);  // out-of-range ids are ignored
    std::string flush();

   private:
    friend class Tokenizer;
    struct Impl;
    explicit Stream(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
  };
  Stream stream(bool skip_special = true) const;

  struct Impl;  // runtime-internal

 private:
  friend class Model;
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace geniex
