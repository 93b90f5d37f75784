// Tokenizer::from_gguf: reads llama.cpp's tokenizer.* metadata keys into a TokenizerConfig.
#include "formats/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace geniex::tok {

namespace {

// Optional id key: absent -> -1; present with a bad type -> error.
Result<int32_t> optional_id(const gguf::File& file, std::string_view key) {
  if (file.find(key) == nullptr) return int32_t{-1};
  GX_ASSIGN_OR_RETURN(uint64_t v, file.get_u64(key));
  if (v > static_cast<uint64_t>(INT32_MAX)) return int32_t{-1};
  return static_cast<int32_t>(v);
}

Result<bool> optional_bool(const gguf::File& file, std::string_view key, bool fallback) {
  if (file.find(key) == nullptr) return fallback;
  return file.get_bool(key);
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& file) {
  TokenizerConfig cfg;
  if (file.find("tokenizer.ggml.model") == nullptr) {
    return make_error(ErrorCode::NotFound, "tokenizer: GGUF has no tokenizer.ggml.model key");
  }
  GX_ASSIGN_OR_RETURN(cfg.model, file.get_string("tokenizer.ggml.model"));
  if (file.find("tokenizer.ggml.pre") != nullptr) {
    GX_ASSIGN_OR_RETURN(cfg.pre, file.get_string("tokenizer.ggml.pre"));
  }
  if (cfg.model != "gpt2" && cfg.model != "llama") {  // check before reading large arrays
    return make_error(ErrorCode::Unsupported,
                      "tokenizer: tokenizer.ggml.model '" + cfg.model + "' (tokenizer.ggml.pre '" + cfg.pre +
                          "') is not supported (supported: 'gpt2' byte-level BPE, 'llama' SentencePiece BPE)");
  }
  const bool spm = cfg.model == "llama";
  GX_ASSIGN_OR_RETURN(cfg.tokens, file.get_string_array("tokenizer.ggml.tokens"));
  if (file.find("tokenizer.ggml.token_type") != nullptr) {
    GX_ASSIGN_OR_RETURN(std::vector<int64_t> types, file.get_i64_array("tokenizer.ggml.token_type"));
    cfg.token_types.reserve(types.size());
    for (int64_t t : types) cfg.token_types.push_back(t >= 0 && t <= 6 ? static_cast<int32_t>(t) : 1);
  }
  if (spm) {
    // SentencePiece BPE: merge order from the piece scores (as llama.cpp; HF derives its merges
    // from the same scores). Byte fallback is implied by the <0xXX> pieces.
    if (file.find("tokenizer.ggml.scores") == nullptr) {
      return make_error(ErrorCode::NotFound, "tokenizer: GGUF with tokenizer.ggml.model 'llama' has no "
                                             "tokenizer.ggml.scores");
    }
    GX_ASSIGN_OR_RETURN(std::vector<double> scores, file.get_f64_array("tokenizer.ggml.scores"));
    cfg.scores.reserve(scores.size());
    for (double v : scores) cfg.scores.push_back(static_cast<float>(v));
    GX_ASSIGN_OR_RETURN(cfg.add_space_prefix, optional_bool(file, "tokenizer.ggml.add_space_prefix", true));
    GX_ASSIGN_OR_RETURN(cfg.remove_extra_whitespaces,
                        optional_bool(file, "tokenizer.ggml.remove_extra_whitespaces", false));
    cfg.byte_fallback = true;
  } else {
    if (file.find("tokenizer.ggml.merges") == nullptr) {
      return make_error(ErrorCode::NotFound, "tokenizer: GGUF with tokenizer.ggml.model 'gpt2' has no "
                                             "tokenizer.ggml.merges");
    }
    GX_ASSIGN_OR_RETURN(cfg.merges, file.get_string_array("tokenizer.ggml.merges"));
  }
  GX_ASSIGN_OR_RETURN(cfg.bos_id, optional_id(file, "tokenizer.ggml.bos_token_id"));
  GX_ASSIGN_OR_RETURN(cfg.eos_id, optional_id(file, "tokenizer.ggml.eos_token_id"));
  GX_ASSIGN_OR_RETURN(cfg.unk_id, optional_id(file, "tokenizer.ggml.unknown_token_id"));
  GX_ASSIGN_OR_RETURN(cfg.pad_id, optional_id(file, "tokenizer.ggml.padding_token_id"));
  GX_ASSIGN_OR_RETURN(cfg.eot_id, optional_id(file, "tokenizer.ggml.eot_token_id"));
  GX_ASSIGN_OR_RETURN(cfg.eom_id, optional_id(file, "tokenizer.ggml.eom_token_id"));
  // llama.cpp's defaults when the key is absent: SentencePiece vocabularies add BOS.
  GX_ASSIGN_OR_RETURN(cfg.add_bos, optional_bool(file, "tokenizer.ggml.add_bos_token", spm));
  GX_ASSIGN_OR_RETURN(cfg.add_eos, optional_bool(file, "tokenizer.ggml.add_eos_token", false));
  if (file.find("tokenizer.chat_template") != nullptr) {
    GX_ASSIGN_OR_RETURN(cfg.chat_template, file.get_string("tokenizer.chat_template"));
  }
  return from_config(std::move(cfg));
}

}  // namespace geniex::tok
