// Byte-level BPE (GPT-2 family): byte alphabet, regex pre-tokenizer, rank-ordered merges over
// token ids, special-token splitting, decode and streaming decode.
#include "tokenizer/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "core/log.hpp"
#include "tokenizer/pretokenizer.hpp"
#include "tokenizer/regex.hpp"
#include "tokenizer/spm.hpp"
#include "tokenizer/utf8.hpp"

namespace geniex::tok {

namespace {

// GPT-2's reversible byte -> code point map: printable bytes keep their value, the others are
// moved to 256, 257, ... in byte order, so every byte has a visible, non-space character.
std::array<uint32_t, 256> make_byte_to_cp() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[b] = keep ? b : next++;
  }
  return map;
}

const std::array<uint32_t, 256>& byte_to_cp() {
  static const std::array<uint32_t, 256> map = make_byte_to_cp();
  return map;
}

// Inverse map: code point -> byte, or -1. Code points used are < 324.
int cp_to_byte(uint32_t cp) {
  static const std::array<int16_t, 512> inv = [] {
    std::array<int16_t, 512> a{};
    a.fill(-1);
    const auto& m = byte_to_cp();
    for (int b = 0; b < 256; ++b) a[m[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
    return a;
  }();
  return cp < inv.size() ? inv[cp] : -1;
}

// Bytes a byte-level spelled token stands for; when some character is outside the byte
// alphabet (added tokens stored as plain text), the token's own UTF-8 (as HF's decoder does).
std::string spelled_to_bytes(const std::string& spelled) {
  std::string out;
  out.reserve(spelled.size());
  const auto* p = reinterpret_cast<const unsigned char*>(spelled.data());
  size_t i = 0;
  while (i < spelled.size()) {
    const utf8::Step st = utf8::next(p + i, spelled.size() - i);
    if (st.status != utf8::Status::Valid) return spelled;
    const int b = cp_to_byte(utf8::decode_valid(p + i, st.len));
    if (b < 0) return spelled;
    out.push_back(static_cast<char>(b));
    i += st.len;
  }
  return out;
}

std::string bytes_to_spelled(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) utf8::append_codepoint(out, byte_to_cp()[c]);
  return out;
}

// Pre-tokenizer patterns, the named registry and NFC live in pretokenizer.{hpp,cpp}.

const char* const kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|endoftext|>", "<|end|>", "<end_of_turn>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "<|eom_id|>", "<|return|>", "<|call|>",
    ("<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"),  // <｜end▁of▁sentence｜>
};

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct MergeInfo {
  int32_t rank;
  int32_t id;
};

// Open-addressing hash map from a (left id, right id) pair to its merge: the hot lookup of BPE.
class MergeMap {
 public:
  void build(const std::vector<std::pair<uint64_t, MergeInfo>>& entries) {
    size_t cap = 16;
    while (cap < entries.size() * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, MergeInfo{0, 0});
    mask_ = cap - 1;
    for (const auto& [k, v] : entries) {
      size_t h = slot(k);
      while (keys_[h] != kEmpty && keys_[h] != k) h = (h + 1) & mask_;
      if (keys_[h] == k) continue;  // duplicate pair: the better (earlier) rank wins
      keys_[h] = k;
      vals_[h] = v;
    }
  }
  const MergeInfo* find(uint64_t k) const {
    if (keys_.empty()) return nullptr;
    for (size_t h = slot(k);; h = (h + 1) & mask_) {
      if (keys_[h] == k) return &vals_[h];
      if (keys_[h] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  size_t slot(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<uint64_t> keys_;
  std::vector<MergeInfo> vals_;
  size_t mask_ = 0;
};

constexpr size_t kCacheMaxWord = 48;      // bytes; longer words are not cached
constexpr size_t kCacheMaxEntries = 1u << 16;

}  // namespace

struct Tokenizer::Impl {
  TokenizerConfig cfg;
  std::vector<std::string> bytes;  // per id
  std::unordered_map<std::string, int32_t> spelled_to_id;
  MergeMap merges;
  std::array<int32_t, 256> byte_id{};  // id of the single-byte token, -1 if absent
  std::vector<std::shared_ptr<const Regex>> splits;
  bool ignore_merges = false;
  bool nfc = false;  // normalize each non-special segment to NFC before splitting
  std::array<std::vector<int32_t>, 256> specials_by_first;  // longest first
  std::unordered_set<int32_t> eog;

  // "llama" (SentencePiece BPE, see spm.hpp) only; null for byte-level BPE.
  std::unique_ptr<spm::BpeModel> spm;
  bool spm_prefix = false;  // dummy "▁" before every text segment; decode strips one leading space
  // Added tokens by first byte: the distinct lengths (longest first) and a spelling -> id map.
  struct AddedIndex {
    std::array<std::vector<uint32_t>, 256> lens;
    std::unordered_map<std::string, int32_t, spm::StringHash, std::equal_to<>> ids;
    void add(const std::string& s, int32_t id) {
      if (!ids.emplace(s, id).second) return;  // first wins
      auto& v = lens[static_cast<unsigned char>(s[0])];
      const auto len = static_cast<uint32_t>(s.size());
      if (std::find(v.begin(), v.end(), len) == v.end()) {
        v.push_back(len);
        std::sort(v.begin(), v.end(), std::greater<uint32_t>());
      }
    }
    // Longest added token starting at text[i]: its id and length, or {-1, 0}.
    std::pair<int32_t, size_t> match(std::string_view text, size_t i) const {
      for (uint32_t len : lens[static_cast<unsigned char>(text[i])]) {
        if (len > text.size() - i) continue;
        auto it = ids.find(text.substr(i, len));
        if (it != ids.end()) return {it->second, len};
      }
      return {-1, 0};
    }
  };
  AddedIndex added_all;   // unknown, control and user-defined pieces (parse_special)
  AddedIndex added_user;  // user-defined pieces only
  static Result<std::unique_ptr<Tokenizer>> build_spm(TokenizerConfig config);
  void encode_spm(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  TokenType type(int32_t id) const {
    if (cfg.token_types.empty()) return TokenType::Normal;
    return static_cast<TokenType>(cfg.token_types[static_cast<size_t>(id)]);
  }

  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_cached(std::string_view word, std::vector<int32_t>& out) const;
  void split(std::vector<std::unique_ptr<Regex::Matcher>>& matchers, size_t stage,
             std::string_view text, std::vector<int32_t>& out) const;
  void encode_plain(std::vector<std::unique_ptr<Regex::Matcher>>& matchers, std::string_view text,
                    std::vector<int32_t>& out) const;
};

void Tokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    auto it = spelled_to_id.find(bytes_to_spelled(word));
    if (it != spelled_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  const int32_t n = static_cast<int32_t>(word.size());
  thread_local std::vector<Sym> syms;
  syms.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    syms[static_cast<size_t>(i)] = {byte_id[static_cast<unsigned char>(word[static_cast<size_t>(i)])], i - 1,
                                    i + 1 < n ? i + 1 : -1};
  }
  struct Cand {
    int32_t rank;
    int32_t left;
    int32_t left_id;
    int32_t right_id;
    int32_t new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  thread_local std::vector<Cand> queue;  // min-heap on (rank, position)
  queue.clear();
  auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = syms[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const int32_t a = syms[static_cast<size_t>(left)].id;
    const int32_t b = syms[static_cast<size_t>(right)].id;
    if (a < 0 || b < 0) return;
    const MergeInfo* m = merges.find(pair_key(a, b));
    if (m == nullptr) return;
    queue.push_back({m->rank, left, a, b, m->id});
    std::push_heap(queue.begin(), queue.end(), std::greater<Cand>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), std::greater<Cand>());
    const Cand c = queue.back();
    queue.pop_back();
    Sym& l = syms[static_cast<size_t>(c.left)];
    if (l.id != c.left_id || l.next < 0) continue;  // stale
    Sym& r = syms[static_cast<size_t>(l.next)];
    if (r.id != c.right_id) continue;
    l.id = c.new_id;
    r.id = -2;  // dead
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.left;
    push_pair(l.prev);
    push_pair(c.left);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const int32_t id = syms[static_cast<size_t>(i)].id;
    // A byte missing from the vocabulary (SmolLM2 lacks 21 of the 256) is dropped, as
    // Hugging Face's byte-level BPE without an unk token and llama.cpp both do.
    if (id >= 0) out.push_back(id);
  }
}

void Tokenizer::Impl::bpe_cached(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    const int32_t id = byte_id[static_cast<unsigned char>(word[0])];
    if (id >= 0) out.push_back(id);  // a missing byte is dropped (see bpe())
    return;
  }
  if (word.size() > kCacheMaxWord) {
    bpe(word, out);
    return;
  }
  std::string key(word);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(key);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  bpe(word, out);
  std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cache.size() >= kCacheMaxEntries) cache.clear();
  cache.emplace(std::move(key), std::move(ids));
}

void Tokenizer::Impl::split(std::vector<std::unique_ptr<Regex::Matcher>>& matchers, size_t stage,
                            std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (stage >= matchers.size()) {
    bpe_cached(text, out);
    return;
  }
  size_t pos = 0;
  size_t b = 0, e = 0;
  while (pos < text.size() && matchers[stage]->find(text, pos, &b, &e)) {
    if (e == b) {  // empty match: cannot happen with our patterns; step one character
      const auto* p = reinterpret_cast<const unsigned char*>(text.data());
      e = b + utf8::next(p + b, text.size() - b).len;
      split(matchers, stage + 1, text.substr(pos, e - pos), out);
      pos = e;
      continue;
    }
    if (b > pos) split(matchers, stage + 1, text.substr(pos, b - pos), out);
    split(matchers, stage + 1, text.substr(b, e - b), out);
    pos = e;
  }
  if (pos < text.size()) split(matchers, stage + 1, text.substr(pos), out);
}

void Tokenizer::Impl::encode_plain(std::vector<std::unique_ptr<Regex::Matcher>>& matchers,
                                   std::string_view text, std::vector<int32_t>& out) const {
  std::string normalized;  // NFC keeps ill-formed bytes as they are, so the scan below is unchanged
  if (nfc && !nfc_quick_ok(text)) {
    normalized = normalize_nfc(text);
    text = normalized;
  }
  // Well-formed runs go through the regex splits; each maximal ill-formed run is a word.
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0, run = 0;
  while (i < text.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const utf8::Step st = utf8::next(p + i, text.size() - i);
    if (st.status == utf8::Status::Valid) {
      i += st.len;
      continue;
    }
    split(matchers, 0, text.substr(run, i - run), out);
    size_t j = i + st.len;
    while (j < text.size() && p[j] >= 0x80) {
      const utf8::Step s2 = utf8::next(p + j, text.size() - j);
      if (s2.status == utf8::Status::Valid) break;
      j += s2.len;
    }
    bpe(text.substr(i, j - i), out);
    i = run = j;
  }
  split(matchers, 0, text.substr(run), out);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_config(TokenizerConfig config) {
  if (config.model == "llama") return Impl::build_spm(std::move(config));
  if (config.model != "gpt2") {
    return make_error(ErrorCode::Unsupported,
                      "tokenizer: tokenizer.ggml.model '" + config.model +
                          "' is not supported (supported: 'gpt2' byte-level BPE, 'llama' SentencePiece BPE)");
  }
  // Explicit pre_patterns (Hugging Face Split stages) replace the named pre-tokenizer.
  std::optional<PreSpec> spec =
      config.pre_patterns.empty() ? named_pre_spec(config.pre)
                                  : std::optional<PreSpec>(PreSpec{config.pre_patterns, false, ""});
  if (!spec) {
    return make_error(ErrorCode::Unsupported,
                      "tokenizer: tokenizer.ggml.pre '" + config.pre + "' (tokenizer.ggml.model '" +
                          config.model + "') is not supported (supported: " + supported_pre_names() + ")");
  }
  spec->ignore_merges = spec->ignore_merges || config.ignore_merges;
  if (!config.normalizer.empty()) spec->normalizer = config.normalizer == "none" ? "" : config.normalizer;
  if (!spec->normalizer.empty() && spec->normalizer != "nfc") {
    return make_error(ErrorCode::Unsupported, "tokenizer: normalizer '" + spec->normalizer +
                                                  "' is not supported (supported: none, nfc)");
  }
  const size_t n = config.tokens.size();
  if (n == 0) return make_error(ErrorCode::InvalidFormat, "tokenizer: empty vocabulary");
  if (n > static_cast<size_t>(INT32_MAX / 2)) {
    return make_error(ErrorCode::InvalidFormat, "tokenizer: vocabulary too large");
  }
  if (!config.token_types.empty() && config.token_types.size() != n) {
    return make_error(ErrorCode::InvalidFormat,
                      "tokenizer: tokenizer.ggml.token_type has " + std::to_string(config.token_types.size()) +
                          " entries but tokenizer.ggml.tokens has " + std::to_string(n));
  }
  for (int32_t& t : config.token_types) {
    if (t < 0 || t > 6) t = static_cast<int32_t>(TokenType::Normal);
  }
  auto check_id = [&](int32_t& id, const char* what) {
    if (id >= static_cast<int64_t>(n) || id < -1) {
      GX_LOG_WARN(std::string("tokenizer: ") + what + " id " + std::to_string(id) + " out of range; ignored");
      id = -1;
    }
  };
  check_id(config.bos_id, "bos");
  check_id(config.eos_id, "eos");
  check_id(config.unk_id, "unk");
  check_id(config.pad_id, "pad");
  check_id(config.eot_id, "eot");
  check_id(config.eom_id, "eom");

  auto impl = std::make_unique<Impl>();
  impl->ignore_merges = spec->ignore_merges;
  impl->nfc = spec->normalizer == "nfc";
  for (const std::string& pattern : spec->splits) {
    GX_ASSIGN_OR_RETURN(auto re, Regex::compile(expand_whitespace(pattern)));
    impl->splits.push_back(std::move(re));
  }
  impl->bytes.resize(n);
  impl->spelled_to_id.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    impl->bytes[i] = spelled_to_bytes(config.tokens[i]);
    impl->spelled_to_id.emplace(config.tokens[i], static_cast<int32_t>(i));  // first wins
  }
  impl->byte_id.fill(-1);
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8::append_codepoint(s, byte_to_cp()[static_cast<size_t>(b)]);
    auto it = impl->spelled_to_id.find(s);
    if (it != impl->spelled_to_id.end()) impl->byte_id[static_cast<size_t>(b)] = it->second;
  }
  std::vector<std::pair<uint64_t, MergeInfo>> merge_entries;
  merge_entries.reserve(config.merges.size());
  size_t skipped = 0;
  for (size_t r = 0; r < config.merges.size(); ++r) {
    const std::string& m = config.merges[r];
    const size_t sp = m.find(' ', 1);  // a token may itself be a lone space in plain-text vocabs
    if (sp == std::string::npos) {
      ++skipped;
      continue;
    }
    const std::string left = m.substr(0, sp), right = m.substr(sp + 1);
    auto a = impl->spelled_to_id.find(left), b = impl->spelled_to_id.find(right);
    auto c = impl->spelled_to_id.find(left + right);
    if (a == impl->spelled_to_id.end() || b == impl->spelled_to_id.end() || c == impl->spelled_to_id.end()) {
      ++skipped;
      continue;
    }
    merge_entries.emplace_back(pair_key(a->second, b->second), MergeInfo{static_cast<int32_t>(r), c->second});
  }
  impl->merges.build(merge_entries);
  if (skipped > 0) {
    GX_LOG_WARN("tokenizer: " + std::to_string(skipped) + " merges reference unknown tokens; ignored");
  }

  for (size_t i = 0; i < n; ++i) {
    const auto t = config.token_types.empty() ? TokenType::Normal : static_cast<TokenType>(config.token_types[i]);
    if ((t == TokenType::Control || t == TokenType::UserDefined) && !config.tokens[i].empty()) {
      impl->specials_by_first[static_cast<unsigned char>(config.tokens[i][0])].push_back(static_cast<int32_t>(i));
    }
    if (t == TokenType::Control) {
      for (const char* e : kEogTexts) {
        if (config.tokens[i] == e) impl->eog.insert(static_cast<int32_t>(i));
      }
    }
  }
  for (auto& v : impl->specials_by_first) {
    std::stable_sort(v.begin(), v.end(), [&](int32_t x, int32_t y) {
      return config.tokens[static_cast<size_t>(x)].size() > config.tokens[static_cast<size_t>(y)].size();
    });
  }
  for (int32_t id : {config.eos_id, config.eot_id, config.eom_id}) {
    if (id >= 0) impl->eog.insert(id);
  }
  impl->cfg = std::move(config);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, bool add_special,
                                               bool parse_special) const {
  const Impl& im = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && im.cfg.add_bos && im.cfg.bos_id >= 0) out.push_back(im.cfg.bos_id);
  if (im.spm) {
    im.encode_spm(text, parse_special, out);
    if (add_special && im.cfg.add_eos && im.cfg.eos_id >= 0) out.push_back(im.cfg.eos_id);
    return out;
  }
  std::vector<std::unique_ptr<Regex::Matcher>> matchers;
  matchers.reserve(im.splits.size());
  for (const auto& re : im.splits) matchers.push_back(std::make_unique<Regex::Matcher>(*re));

  if (!parse_special) {
    im.encode_plain(matchers, text, out);
  } else {
    size_t start = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      const auto& cands = im.specials_by_first[static_cast<unsigned char>(text[i])];
      if (cands.empty()) continue;
      for (int32_t id : cands) {
        const std::string& s = im.cfg.tokens[static_cast<size_t>(id)];
        if (text.compare(i, s.size(), s) == 0) {
          im.encode_plain(matchers, text.substr(start, i - start), out);
          out.push_back(id);
          start = i + s.size();
          i = start - 1;
          break;
        }
      }
    }
    im.encode_plain(matchers, text.substr(start), out);
  }
  if (add_special && im.cfg.add_eos && im.cfg.eos_id >= 0) out.push_back(im.cfg.eos_id);
  return out;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) {
      return make_error(ErrorCode::OutOfRange, "tokenizer: decode: token id " + std::to_string(id) +
                                                   " outside vocabulary of " + std::to_string(n_vocab()));
    }
    if (skip_special && is_special(id)) continue;
    out += impl_->bytes[static_cast<size_t>(id)];
  }
  if (impl_->spm_prefix && !out.empty() && out[0] == ' ') out.erase(0, 1);  // HF Strip(left=1)
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  return impl_->bytes[static_cast<size_t>(id)];
}

const std::string& Tokenizer::token_text(int32_t id) const {
  static const std::string empty;
  if (id < 0 || id >= n_vocab()) return empty;
  return impl_->cfg.tokens[static_cast<size_t>(id)];
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return TokenType::Undefined;
  return impl_->type(id);
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->cfg.tokens.size()); }
int32_t Tokenizer::bos_id() const { return impl_->cfg.bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->cfg.eos_id; }
bool Tokenizer::add_bos() const { return impl_->cfg.add_bos; }
bool Tokenizer::add_eos() const { return impl_->cfg.add_eos; }
bool Tokenizer::is_eog(int32_t id) const { return impl_->eog.count(id) != 0; }
bool Tokenizer::is_special(int32_t id) const {
  const TokenType t = token_type(id);
  return t == TokenType::Control || t == TokenType::Unknown;
}
std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  auto it = impl_->spelled_to_id.find(std::string(text));
  if (it == impl_->spelled_to_id.end()) return std::nullopt;
  return it->second;
}
const std::string& Tokenizer::chat_template() const { return impl_->cfg.chat_template; }
const std::string& Tokenizer::model_name() const { return impl_->cfg.model; }
const std::string& Tokenizer::pre_name() const { return impl_->cfg.pre; }
bool Tokenizer::strips_leading_space() const { return impl_->spm_prefix; }

// ---- SentencePiece BPE ("llama") ----

Result<std::unique_ptr<Tokenizer>> Tokenizer::Impl::build_spm(TokenizerConfig config) {
  const size_t n = config.tokens.size();
  if (n == 0) return make_error(ErrorCode::InvalidFormat, "tokenizer: empty vocabulary");
  if (n > static_cast<size_t>(INT32_MAX / 2)) {
    return make_error(ErrorCode::InvalidFormat, "tokenizer: vocabulary too large");
  }
  if (!config.token_types.empty() && config.token_types.size() != n) {
    return make_error(ErrorCode::InvalidFormat,
                      "tokenizer: tokenizer.ggml.token_type has " + std::to_string(config.token_types.size()) +
                          " entries but tokenizer.ggml.tokens has " + std::to_string(n));
  }
  if (config.merges.empty() && config.scores.size() != n) {
    return make_error(ErrorCode::InvalidFormat,
                      "tokenizer: SentencePiece BPE without merges needs one score per token "
                      "(tokenizer.ggml.scores has " + std::to_string(config.scores.size()) +
                          " entries, tokenizer.ggml.tokens has " + std::to_string(n) + ")");
  }
  for (int32_t& t : config.token_types) {
    if (t < 0 || t > 6) t = static_cast<int32_t>(TokenType::Normal);
  }
  for (auto [id, what] : {std::pair<int32_t*, const char*>{&config.bos_id, "bos"}, {&config.eos_id, "eos"},
                          {&config.unk_id, "unk"}, {&config.pad_id, "pad"}, {&config.eot_id, "eot"},
                          {&config.eom_id, "eom"}}) {
    if (*id >= static_cast<int64_t>(n) || *id < -1) {
      GX_LOG_WARN(std::string("tokenizer: ") + what + " id " + std::to_string(*id) + " out of range; ignored");
      *id = -1;
    }
  }
  GX_ASSIGN_OR_RETURN(spm::BpeModel model, spm::BpeModel::build(config.tokens, config.scores, config.merges,
                                                                config.byte_fallback, config.unk_id));
  auto impl = std::make_unique<Impl>();
  impl->spm = std::make_unique<spm::BpeModel>(std::move(model));
  impl->spm_prefix = config.add_space_prefix;
  impl->byte_id.fill(-1);
  impl->bytes.resize(n);
  impl->spelled_to_id.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = config.tokens[i];
    impl->spelled_to_id.emplace(t, static_cast<int32_t>(i));  // first wins
    const int b = spm::byte_piece_value(t);  // HF's ByteFallback decoder: any "<0xXX>" spelling
    if (b >= 0) {
      impl->bytes[i] = std::string(1, static_cast<char>(b));
      continue;
    }
    std::string& out = impl->bytes[i];
    out.reserve(t.size());
    for (size_t k = 0; k < t.size();) {
      if (t.compare(k, spm::kSpace.size(), spm::kSpace) == 0) {
        out += ' ';
        k += spm::kSpace.size();
      } else {
        out += t[k++];
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const auto t = config.token_types.empty() ? TokenType::Normal : static_cast<TokenType>(config.token_types[i]);
    // Unknown and control pieces are HF special added tokens (parse_special); user-defined pieces
    // are non-special added tokens, matched whole in any text.
    if ((t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) &&
        !config.tokens[i].empty()) {
      impl->added_all.add(config.tokens[i], static_cast<int32_t>(i));
      if (t == TokenType::UserDefined) impl->added_user.add(config.tokens[i], static_cast<int32_t>(i));
    }
    if (t == TokenType::Control) {
      for (const char* e : kEogTexts) {
        if (config.tokens[i] == e) impl->eog.insert(static_cast<int32_t>(i));
      }
    }
  }
  for (int32_t id : {config.eos_id, config.eot_id, config.eom_id}) {
    if (id >= 0) impl->eog.insert(id);
  }
  impl->cfg = std::move(config);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

// Added tokens are split out first (leftmost, longest first, as HF's added-vocabulary trie);
// every text segment between them is normalized on its own, so each gets the dummy prefix
// (HF legacy behaviour, also sentencepiece's and llama.cpp's): "[INST] hi" -> [INST] "▁▁hi".
void Tokenizer::Impl::encode_spm(std::string_view text, bool parse_special, std::vector<int32_t>& out) const {
  auto segment = [&](std::string_view seg) {
    if (seg.empty()) return;
    spm->encode(spm::normalize(seg, spm_prefix, cfg.remove_extra_whitespaces), out);
  };
  const AddedIndex& added = parse_special ? added_all : added_user;
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const auto [id, len] = added.match(text, i);
    if (id < 0) {
      ++i;
      continue;
    }
    segment(text.substr(start, i - start));
    out.push_back(id);
    i = start = i + len;
  }
  segment(text.substr(start));
}

// ---- StreamDecoder ----

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special) : tok_(&tok), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  if (id < 0 || id >= tok_->n_vocab()) return {};
  if (skip_special_ && tok_->is_special(id)) return {};
  const size_t before = pending_.size();
  pending_ += tok_->token_bytes(id);
  if (at_start_ && pending_.size() > before) {  // as decode: the dummy prefix's space goes
    at_start_ = false;
    if (tok_->strips_leading_space() && pending_[before] == ' ') pending_.erase(before, 1);
  }
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(pending_.data());
  size_t i = 0;
  while (i < pending_.size()) {
    const utf8::Step st = utf8::next(p + i, pending_.size() - i);
    if (st.status == utf8::Status::Incomplete) break;  // may complete with the next token
    if (st.status == utf8::Status::Valid) {
      out.append(pending_, i, st.len);
    } else {
      out += utf8::kReplacement;
    }
    i += st.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  if (!pending_.empty()) out = std::string(utf8::kReplacement);  // one incomplete sequence
  pending_.clear();
  return out;
}

}  // namespace geniex::tok
