// Tokenizer::from_hf: a Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json,
// chat_template.jinja) mapped onto a TokenizerConfig.
//
// Supported tokenizer.json pipelines (model BPE only):
//   byte-level ("gpt2"): normalizer none or NFC; pre_tokenizer ByteLevel (add_prefix_space=false),
//     Split (Regex or String pattern, behavior Isolated, not inverted), Digits, or a Sequence of
//     them; each regex stage becomes one TokenizerConfig::pre_patterns entry.
//   SentencePiece-style ("llama", Llama 2 / Mistral / Gemma): normalizer Prepend("▁") and
//     Replace(" ", "▁") (alone or in a Sequence), or a Metaspace pre-tokenizer; byte_fallback.
// Decoders (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence) are checked and
// need no state: decode is the inverse of the spelling. post_processor TemplateProcessing tells
// whether BOS / EOS are added. Anything else is an Unsupported error naming the component.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/log.hpp"
#include "tokenizer/pretokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace geniex::tok {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kSpm = "\xE2\x96\x81";  // U+2581, SentencePiece's space

Error unsupported(const std::string& what) {
  return make_error(ErrorCode::Unsupported, "tokenizer: tokenizer.json: " + what + " is not supported");
}
Error malformed(const std::string& what) {
  return make_error(ErrorCode::InvalidFormat, "tokenizer: tokenizer.json: " + what);
}

Result<std::string> read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return make_error(ErrorCode::IoError, "tokenizer: cannot open " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return make_error(ErrorCode::IoError, "tokenizer: read error on " + p.string());
  return ss.str();
}

Result<json> parse_json(const std::string& text, const fs::path& p) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    return make_error(ErrorCode::InvalidFormat,
                      "tokenizer: " + p.filename().string() + " is not valid JSON: " + e.what());
  }
}

std::string type_of(const json& j) {
  if (!j.is_object()) return "";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool flag(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// Escapes a literal string for PCRE2.
std::string regex_quote(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

struct Pipeline {
  bool byte_level = false;
  bool metaspace = false;
  bool prepend_space = false;  // Prepend("▁") normalizer or Metaspace prepend_scheme != never
  bool replace_space = false;  // Replace(" " -> "▁") normalizer or Metaspace
  bool nfc = false;
  std::vector<std::string> patterns;
};

std::optional<Error> read_normalizer(const json& j, Pipeline& p) {
  if (j.is_null()) return std::nullopt;
  const std::string t = type_of(j);
  if (t == "NFC") {
    p.nfc = true;
  } else if (t == "Sequence") {
    for (const json& n : j.value("normalizers", json::array())) {
      if (auto e = read_normalizer(n, p)) return e;
    }
  } else if (t == "Prepend") {
    if (j.value("prepend", std::string()) != kSpm) return unsupported("normalizer Prepend of other than U+2581");
    p.prepend_space = true;
  } else if (t == "Replace") {
    const json& pat = j.at("pattern");
    if (!pat.contains("String") || pat.at("String") != " " || j.value("content", std::string()) != kSpm) {
      return unsupported("normalizer Replace other than ' ' -> U+2581");
    }
    p.replace_space = true;
  } else {
    return unsupported("normalizer '" + (t.empty() ? j.dump().substr(0, 60) : t) + "'");
  }
  return std::nullopt;
}

std::optional<Error> read_pre_tokenizer(const json& j, Pipeline& p) {
  if (j.is_null()) return std::nullopt;
  const std::string t = type_of(j);
  if (t == "Sequence") {
    for (const json& n : j.value("pretokenizers", json::array())) {
      if (auto e = read_pre_tokenizer(n, p)) return e;
    }
  } else if (t == "ByteLevel") {
    if (flag(j, "add_prefix_space", false)) return unsupported("pre_tokenizer ByteLevel with add_prefix_space=true");
    p.byte_level = true;
    if (flag(j, "use_regex", true)) p.patterns.push_back(kGpt2Pattern);
  } else if (t == "Split") {
    const std::string behavior = j.value("behavior", std::string());
    if (behavior != "Isolated") return unsupported("pre_tokenizer Split with behavior '" + behavior + "'");
    if (flag(j, "invert", false)) return unsupported("pre_tokenizer Split with invert=true");
    const json& pat = j.at("pattern");
    if (pat.contains("Regex")) {
      p.patterns.push_back(pat.at("Regex").get<std::string>());
    } else if (pat.contains("String")) {
      p.patterns.push_back(regex_quote(pat.at("String").get<std::string>()));
    } else {
      return malformed("pre_tokenizer Split without a Regex or String pattern");
    }
  } else if (t == "Digits") {
    p.patterns.push_back(flag(j, "individual_digits", false) ? "\\p{N}" : "\\p{N}+");
  } else if (t == "Metaspace") {
    if (j.value("replacement", std::string(kSpm)) != kSpm) return unsupported("pre_tokenizer Metaspace replacement");
    p.metaspace = true;
    p.replace_space = true;
    std::string scheme = j.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = flag(j, "add_prefix_space", true) ? "always" : "never";
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      return unsupported("pre_tokenizer Metaspace prepend_scheme '" + scheme + "'");
    }
    p.prepend_space = scheme != "never";
  } else {
    return unsupported("pre_tokenizer '" + (t.empty() ? j.dump().substr(0, 60) : t) + "'");
  }
  return std::nullopt;
}

std::optional<Error> check_decoder(const json& j) {
  if (j.is_null()) return std::nullopt;
  const std::string t = type_of(j);
  if (t == "Sequence") {
    for (const json& d : j.value("decoders", json::array())) {
      if (auto e = check_decoder(d)) return e;
    }
    return std::nullopt;
  }
  if (t == "ByteLevel" || t == "Metaspace" || t == "Replace" || t == "ByteFallback" || t == "Fuse" || t == "Strip") {
    return std::nullopt;
  }
  return unsupported("decoder '" + (t.empty() ? j.dump().substr(0, 60) : t) + "'");
}

struct Template {
  std::vector<int32_t> before, after;  // special token ids around $A in the single template
};

std::optional<Error> read_post_processor(const json& j, Template& tpl) {
  if (j.is_null()) return std::nullopt;
  const std::string t = type_of(j);
  if (t == "ByteLevel") return std::nullopt;
  if (t == "Sequence") {
    for (const json& d : j.value("processors", json::array())) {
      if (auto e = read_post_processor(d, tpl)) return e;
    }
    return std::nullopt;
  }
  if (t != "TemplateProcessing")
    return unsupported("post_processor '" + (t.empty() ? j.dump().substr(0, 60) : t) + "'");
  const json& specials = j.value("special_tokens", json::object());
  bool seen_a = false;
  for (const json& item : j.at("single")) {
    if (item.contains("Sequence")) {
      seen_a = true;
      continue;
    }
    if (!item.contains("SpecialToken")) return malformed("post_processor template item " + item.dump());
    const std::string name = item.at("SpecialToken").at("id").get<std::string>();
    auto sp = specials.find(name);
    if (sp == specials.end()) return malformed("post_processor special token '" + name + "' has no ids");
    for (const json& id : sp->at("ids")) (seen_a ? tpl.after : tpl.before).push_back(id.get<int32_t>());
  }
  if (tpl.before.size() > 1 || tpl.after.size() > 1) {
    return unsupported("post_processor template adding more than one token before or after the text");
  }
  return std::nullopt;
}

// "<0xAB>" byte tokens of SentencePiece vocabularies.
bool is_byte_token(const std::string& s) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

// A token named in tokenizer_config.json: a string, an AddedToken object or null.
std::optional<std::string> token_name(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && it->at("content").is_string())
    return it->at("content").get<std::string>();
  return std::nullopt;
}

Result<TokenizerConfig> build(const json& tj, const json& tc, std::string chat_template) {
  TokenizerConfig cfg;
  const json& model = tj.at("model");
  const std::string mtype = type_of(model);
  if (!mtype.empty() && mtype != "BPE") return unsupported("model type '" + mtype + "' (supported: BPE)");
  if (!model.contains("vocab") || !model.at("vocab").is_object())
    return malformed("model.vocab is missing or not an object");
  if (!model.contains("merges") || !model.at("merges").is_array())
    return malformed("model.merges is missing or not an array");
  if (model.contains("dropout") && !model.at("dropout").is_null() && model.at("dropout").get<double>() != 0.0) {
    return unsupported("BPE dropout");
  }
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(k) && model.at(k).is_string() && !model.at(k).get<std::string>().empty()) {
      return unsupported(std::string("BPE ") + k);
    }
  }

  Pipeline p;
  if (auto e = read_normalizer(tj.value("normalizer", json()), p)) return std::move(*e);
  if (auto e = read_pre_tokenizer(tj.value("pre_tokenizer", json()), p)) return std::move(*e);
  if (auto e = check_decoder(tj.value("decoder", json()))) return std::move(*e);
  Template tpl;
  if (auto e = read_post_processor(tj.value("post_processor", json()), tpl)) return std::move(*e);
  const bool byte_fallback = flag(model, "byte_fallback", false);

  // Vocabulary and added tokens, by id.
  // Ids may leave holes, but not huge ones: a bogus id must not size the vocabulary.
  const size_t n_added =
      tj.contains("added_tokens") && tj.at("added_tokens").is_array() ? tj.at("added_tokens").size() : 0;
  const int64_t kMaxId = static_cast<int64_t>(model.at("vocab").size() + n_added) + 65536;
  std::unordered_map<std::string, int32_t> by_text;
  auto place = [&](const std::string& text, int64_t id, bool added) -> std::optional<Error> {
    if (id < 0 || id >= kMaxId) return malformed("token '" + text.substr(0, 40) + "' has id " + std::to_string(id));
    const size_t i = static_cast<size_t>(id);
    if (i >= cfg.tokens.size()) {
      cfg.tokens.resize(i + 1);
      cfg.token_types.resize(i + 1, static_cast<int32_t>(TokenType::Unused));
    }
    if (cfg.token_types[i] != static_cast<int32_t>(TokenType::Unused) && cfg.tokens[i] != text) {
      return malformed("id " + std::to_string(id) + " is used by both '" + cfg.tokens[i].substr(0, 40) + "' and '" +
                       text.substr(0, 40) + "'");
    }
    if (!added && cfg.token_types[i] != static_cast<int32_t>(TokenType::Unused)) {
      return malformed("id " + std::to_string(id) + " appears twice in model.vocab");
    }
    cfg.tokens[i] = text;
    if (!added) cfg.token_types[i] = static_cast<int32_t>(TokenType::Normal);
    by_text.emplace(text, static_cast<int32_t>(id));
    return std::nullopt;
  };
  for (const auto& [text, id] : model.at("vocab").items()) {
    if (!id.is_number_integer()) return malformed("model.vocab['" + text.substr(0, 40) + "'] is not an integer id");
    if (auto e = place(text, id.get<int64_t>(), false)) return std::move(*e);
  }
  for (const json& at : tj.value("added_tokens", json::array())) {
    const std::string text = at.at("content").get<std::string>();
    if (text.empty()) return malformed("added token with empty content");
    if (auto e = place(text, at.at("id").get<int64_t>(), true)) return std::move(*e);
    const size_t i = static_cast<size_t>(at.at("id").get<int64_t>());
    cfg.token_types[i] = static_cast<int32_t>(flag(at, "special", false) ? TokenType::Control : TokenType::UserDefined);
    if (flag(at, "lstrip", false) || flag(at, "rstrip", false) || flag(at, "single_word", false)) {
      GX_LOG_WARN("tokenizer: tokenizer.json: added token '" + text +
                  "' has lstrip/rstrip/single_word; GenieX matches it literally");
    }
  }
  if (cfg.tokens.empty()) return malformed("empty vocabulary");
  for (size_t i = 0; i < cfg.tokens.size(); ++i) {
    if (cfg.token_types[i] == static_cast<int32_t>(TokenType::Unused) && cfg.tokens[i].empty()) {
      cfg.tokens[i] = "[UNUSED" + std::to_string(i) + "]";  // a hole in the ids
    }
  }
  cfg.merges.reserve(model.at("merges").size());
  for (const json& m : model.at("merges")) {
    if (m.is_string()) {
      cfg.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      cfg.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return malformed("model.merges entry " + m.dump().substr(0, 60) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  cfg.ignore_merges = flag(model, "ignore_merges", false);
  if (model.contains("unk_token") && model.at("unk_token").is_string()) {
    auto it = by_text.find(model.at("unk_token").get<std::string>());
    if (it != by_text.end()) cfg.unk_id = it->second;
  }

  if (p.byte_level) {
    if (p.prepend_space || p.replace_space || p.metaspace) {
      return unsupported("a pipeline mixing ByteLevel with Metaspace / Prepend / Replace");
    }
    cfg.model = "gpt2";
    cfg.pre = "hf";
    cfg.pre_patterns = p.patterns.empty() ? std::vector<std::string>{kWholePattern} : p.patterns;
    cfg.normalizer = p.nfc ? "nfc" : "none";
  } else if (p.metaspace || p.replace_space || p.prepend_space || byte_fallback) {
    if (p.nfc) return unsupported("normalizer NFC in a SentencePiece-style (Metaspace / byte_fallback) pipeline");
    if (!p.patterns.empty()) return unsupported("pre_tokenizer Split / Digits in a SentencePiece-style pipeline");
    cfg.model = "llama";
    cfg.pre = "default";
    cfg.add_space_prefix = p.prepend_space;
    cfg.byte_fallback = byte_fallback;
    for (size_t i = 0; i < cfg.tokens.size(); ++i) {
      if (cfg.token_types[i] == static_cast<int32_t>(TokenType::Normal) && is_byte_token(cfg.tokens[i])) {
        cfg.token_types[i] = static_cast<int32_t>(TokenType::Byte);
      }
    }
  } else {
    return unsupported("a BPE pipeline with neither a ByteLevel pre-tokenizer nor Metaspace / byte_fallback");
  }
  if (cfg.unk_id >= 0) cfg.token_types[static_cast<size_t>(cfg.unk_id)] = static_cast<int32_t>(TokenType::Unknown);

  // BOS / EOS: the post-processor says what is added; tokenizer_config.json names the tokens
  // and may override add_bos_token / add_eos_token.
  if (!tpl.before.empty()) {
    cfg.bos_id = tpl.before[0];
    cfg.add_bos = true;
  }
  if (!tpl.after.empty()) {
    cfg.eos_id = tpl.after[0];
    cfg.add_eos = true;
  }
  auto id_of = [&](const char* key) -> int32_t {
    const auto name = token_name(tc, key);
    if (!name) return -1;
    auto it = by_text.find(*name);
    if (it == by_text.end()) {
      GX_LOG_WARN(std::string("tokenizer: tokenizer_config.json ") + key + " '" + *name + "' is not in the vocabulary");
      return -1;
    }
    return it->second;
  };
  if (const int32_t b = id_of("bos_token"); b >= 0 && tpl.before.empty()) cfg.bos_id = b;
  if (const int32_t e = id_of("eos_token"); e >= 0) {
    if (!tpl.after.empty() && tpl.after[0] != e)
      cfg.eot_id = e;  // generation ends on it too
    else
      cfg.eos_id = e;
  }
  if (const int32_t u = id_of("unk_token"); u >= 0 && cfg.unk_id < 0) cfg.unk_id = u;
  if (const int32_t pad = id_of("pad_token"); pad >= 0) cfg.pad_id = pad;
  if (tc.contains("add_bos_token") && tc.at("add_bos_token").is_boolean())
    cfg.add_bos = tc.at("add_bos_token").get<bool>();
  if (tc.contains("add_eos_token") && tc.at("add_eos_token").is_boolean())
    cfg.add_eos = tc.at("add_eos_token").get<bool>();

  if (tc.contains("chat_template")) {
    const json& ct = tc.at("chat_template");
    if (ct.is_string()) {
      chat_template = ct.get<std::string>();
    } else if (ct.is_array()) {  // [{"name": ..., "template": ...}]: "default", else the first
      for (const json& e : ct) {
        if (!e.is_object() || !e.contains("template"))
          return malformed("tokenizer_config.json chat_template list entry");
        if (chat_template.empty() || e.value("name", std::string()) == "default") {
          chat_template = e.at("template").get<std::string>();
          if (e.value("name", std::string()) == "default") break;
        }
      }
    }
  }
  cfg.chat_template = std::move(chat_template);
  return cfg;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf(const std::string& path) {
  GX_ASSIGN_OR_RETURN(TokenizerConfig cfg, hf_tokenizer_config(path));
  return Tokenizer::from_config(std::move(cfg));
}

Result<TokenizerConfig> hf_tokenizer_config(const std::string& path) {
  std::error_code ec;
  fs::path tj_path = path;
  if (fs::is_directory(tj_path, ec)) tj_path /= "tokenizer.json";
  if (!fs::exists(tj_path, ec)) return make_error(ErrorCode::NotFound, "tokenizer: " + tj_path.string() + " not found");
  const fs::path dir = tj_path.parent_path();
  GX_ASSIGN_OR_RETURN(std::string text, read_text(tj_path));
  GX_ASSIGN_OR_RETURN(json tj, parse_json(text, tj_path));
  json tc = json::object();
  if (fs::exists(dir / "tokenizer_config.json", ec)) {
    GX_ASSIGN_OR_RETURN(std::string ctext, read_text(dir / "tokenizer_config.json"));
    GX_ASSIGN_OR_RETURN(tc, parse_json(ctext, dir / "tokenizer_config.json"));
    if (!tc.is_object())
      return make_error(ErrorCode::InvalidFormat, "tokenizer: tokenizer_config.json is not an object");
  }
  std::string chat_template;
  if (fs::exists(dir / "chat_template.jinja", ec)) {
    GX_ASSIGN_OR_RETURN(chat_template, read_text(dir / "chat_template.jinja"));
  }
  if (!tj.is_object() || !tj.contains("model")) {
    return make_error(ErrorCode::InvalidFormat, "tokenizer: " + tj_path.string() + " has no \"model\"");
  }
  try {
    return build(tj, tc, std::move(chat_template));
  } catch (const json::exception& e) {  // a field of the wrong type or missing
    return make_error(ErrorCode::InvalidFormat, "tokenizer: " + tj_path.filename().string() + ": " + e.what());
  }
}

}  // namespace geniex::tok
