// Tokenizer::from_sentencepiece: a SentencePiece model file (tokenizer.model) -> "llama" config.
#include "core/log.hpp"
#include "core/mmap.hpp"
#include "tokenizer/sentencepiece_model.hpp"
#include "tokenizer/tokenizer.hpp"

namespace geniex::tok {

Result<TokenizerConfig> sentencepiece_config(SentencePieceModel m, std::string_view origin) {
  const std::string where(origin);
  if (m.model_type != 2) {
    static const char* const kNames[] = {"?", "Unigram", "BPE", "Word", "Char"};
    const char* name = m.model_type >= 1 && m.model_type <= 4 ? kNames[m.model_type] : "unknown";
    return make_error(ErrorCode::Unsupported,
                      "tokenizer: SentencePiece model " + where + " is a " + name + " model (model_type " +
                          std::to_string(m.model_type) + "); only BPE SentencePiece models are supported");
  }
  if (!m.escape_whitespaces) {
    return make_error(ErrorCode::Unsupported,
                      "tokenizer: SentencePiece model " + where + " has escape_whitespaces off (not supported)");
  }
  if (m.precompiled_charsmap_size > 0 && m.normalizer_name != "identity") {
    GX_LOG_WARN("tokenizer: SentencePiece normalizer '" + m.normalizer_name +
                "' (precompiled charsmap) is not applied; text is tokenized as given");
  }
  TokenizerConfig cfg;
  cfg.model = "llama";
  cfg.tokens.reserve(m.pieces.size());
  cfg.scores.reserve(m.pieces.size());
  cfg.token_types.reserve(m.pieces.size());
  for (SentencePieceModel::Piece& p : m.pieces) {
    cfg.tokens.push_back(std::move(p.piece));
    cfg.scores.push_back(p.score);
    cfg.token_types.push_back(p.type >= 1 && p.type <= 6 ? p.type : 1);
  }
  const auto n = static_cast<int64_t>(cfg.tokens.size());
  auto id_or_none = [&](int32_t id) { return id >= 0 && id < n ? id : -1; };
  cfg.add_space_prefix = m.add_dummy_prefix;
  cfg.remove_extra_whitespaces = m.remove_extra_whitespaces;
  cfg.byte_fallback = m.byte_fallback;
  cfg.unk_id = id_or_none(m.unk_id);
  cfg.bos_id = id_or_none(m.bos_id);
  cfg.eos_id = id_or_none(m.eos_id);
  cfg.pad_id = id_or_none(m.pad_id);
  cfg.add_bos = cfg.bos_id >= 0;  // SentencePiece / HF LlamaTokenizer default: add_bos_token
  cfg.add_eos = false;
  return cfg;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_sentencepiece(const std::string& path) {
  GX_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  auto parsed = parse_sentencepiece_model(std::span<const uint8_t>(file->data(), file->size()));
  if (!parsed) return make_error(parsed.error().code, parsed.error().message + " (" + path + ")");
  GX_ASSIGN_OR_RETURN(TokenizerConfig cfg, sentencepiece_config(std::move(parsed).value(), path));
  return from_config(std::move(cfg));
}

}  // namespace geniex::tok
