// SentencePiece-style BPE (see spm.hpp).
#include "tokenizer/spm.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "tokenizer/utf8.hpp"

namespace geniex::tok::spm {

namespace {

constexpr uint64_t kEmptyKey = ~0ull;

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

inline size_t slot(uint64_t k, size_t mask) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20) & mask; }

// Length of the UTF-8 "character" at p: a well-formed sequence, or one byte of an ill-formed one.
inline size_t char_len(const unsigned char* p, size_t n) {
  if (p[0] < 0x80) return 1;
  const utf8::Step st = utf8::next(p, n);
  return st.status == utf8::Status::Valid ? st.len : 1;
}

// Number of characters as Python's len() counts them (ill-formed bytes count one each).
size_t char_count(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += char_len(p + i, s.size() - i)) ++n;
  return n;
}

}  // namespace

int byte_piece_value(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = piece[i];
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

std::string normalize(std::string_view text, bool add_prefix, bool remove_extra_whitespaces) {
  std::string out;
  if (remove_extra_whitespaces) {
    size_t b = 0, e = text.size();
    while (b < e && text[b] == ' ') ++b;
    while (e > b && text[e - 1] == ' ') --e;
    text = text.substr(b, e - b);
  }
  if (text.empty()) return out;
  out.reserve(text.size() + text.size() / 2 + 3);
  if (add_prefix) out += kSpace;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == ' ') {
      if (remove_extra_whitespaces && i > 0 && text[i - 1] == ' ') continue;
      out += kSpace;
    } else {
      out += text[i];
    }
  }
  return out;
}

Result<BpeModel> BpeModel::build(const std::vector<std::string>& tokens, const std::vector<float>& scores,
                                 const std::vector<std::string>& merges, bool byte_fallback, int32_t unk_id) {
  BpeModel m;
  const size_t n = tokens.size();
  if (merges.empty() && scores.size() != n) {
    return make_error(ErrorCode::InvalidFormat, "tokenizer: SentencePiece BPE needs merges or one score per token (" +
                                                    std::to_string(scores.size()) + " scores for " +
                                                    std::to_string(n) + " tokens)");
  }
  m.byte_fallback_ = byte_fallback;
  m.unk_id_ = unk_id;
  m.vocab_.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) m.vocab_[tokens[i]] = static_cast<int32_t>(i);  // last wins, as HF's dict
  m.ascii_id_.assign(128, -1);
  for (int c = 0; c < 128; ++c) {
    auto it = m.vocab_.find(std::string_view(reinterpret_cast<const char*>(&c), 1));
    if (it != m.vocab_.end()) m.ascii_id_[static_cast<size_t>(c)] = it->second;
  }
  m.byte_token_.assign(256, -1);
  for (size_t i = 0; i < n; ++i) {
    const int b = byte_piece_value(tokens[i]);
    if (b >= 0 && m.byte_token_[static_cast<size_t>(b)] < 0) m.byte_token_[static_cast<size_t>(b)] = static_cast<int32_t>(i);
  }
  auto lookup = [&](std::string_view s) -> int32_t {
    auto it = m.vocab_.find(s);
    return it == m.vocab_.end() ? -1 : it->second;
  };

  struct Entry {
    uint64_t key;
    int32_t id;
  };
  std::vector<Entry> ordered;  // best first
  if (!merges.empty()) {
    ordered.reserve(merges.size());
    for (const std::string& mg : merges) {
      const size_t sp = mg.find(' ', 1);
      if (sp == std::string::npos) continue;
      const std::string_view l = std::string_view(mg).substr(0, sp), r = std::string_view(mg).substr(sp + 1);
      const int32_t a = lookup(l), b = lookup(r), c = lookup(std::string(l) + std::string(r));
      if (a < 0 || b < 0 || c < 0) continue;
      ordered.push_back({pair_key(a, b), c});
    }
  } else {
    struct Cand {
      float score;
      uint32_t len_l, len_r;
      int32_t order, id, a, b;
    };
    std::vector<Cand> cands;
    cands.reserve(n * 2);
    // HF iterates a {piece: score} dict: each distinct piece once, at its first occurrence, with
    // the score (and, in its vocab dict, the id) of its last occurrence.
    std::vector<bool> repeated(n, false);
    if (m.vocab_.size() != n) {
      std::unordered_map<std::string_view, int32_t> first;
      for (size_t i = 0; i < n; ++i) {
        if (!first.emplace(tokens[i], static_cast<int32_t>(i)).second) repeated[i] = true;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      if (repeated[i]) continue;
      const std::string& p = tokens[i];
      const int32_t id = lookup(p);
      float score = scores[static_cast<size_t>(id)];
      if (std::isnan(score)) score = -std::numeric_limits<float>::infinity();
      const auto* bytes = reinterpret_cast<const unsigned char*>(p.data());
      uint32_t len_l = 0;
      const uint32_t total = static_cast<uint32_t>(char_count(p));
      for (size_t k = 0; k < p.size();) {
        k += char_len(bytes + k, p.size() - k);
        ++len_l;
        if (k >= p.size()) break;
        const int32_t a = lookup(std::string_view(p).substr(0, k));
        if (a < 0) continue;
        const int32_t b = lookup(std::string_view(p).substr(k));
        if (b < 0) continue;
        cands.push_back({score, len_l, total - len_l, static_cast<int32_t>(i), id, a, b});
      }
    }
    std::sort(cands.begin(), cands.end(), [](const Cand& x, const Cand& y) {
      if (x.score != y.score) return x.score > y.score;
      if (x.len_l != y.len_l) return x.len_l > y.len_l;
      if (x.len_r != y.len_r) return x.len_r > y.len_r;
      if (x.order != y.order) return x.order < y.order;
      if (x.a != y.a) return x.a < y.a;
      return x.b < y.b;
    });
    ordered.reserve(cands.size());
    for (const Cand& c : cands) ordered.push_back({pair_key(c.a, c.b), c.id});
  }
  if (ordered.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return make_error(ErrorCode::InvalidFormat, "tokenizer: too many merges");
  }
  size_t cap = 16;
  while (cap < ordered.size() * 2) cap <<= 1;
  m.merge_keys_.assign(cap, kEmptyKey);
  m.merge_vals_.assign(cap, Merge{0, 0});
  m.merge_mask_ = cap - 1;
  for (size_t r = 0; r < ordered.size(); ++r) {
    const uint64_t k = ordered[r].key;
    size_t h = slot(k, m.merge_mask_);
    while (m.merge_keys_[h] != kEmptyKey && m.merge_keys_[h] != k) h = (h + 1) & m.merge_mask_;
    if (m.merge_keys_[h] == k) continue;  // a pair seen before keeps its better rank
    m.merge_keys_[h] = k;
    m.merge_vals_[h] = Merge{static_cast<int32_t>(r), ordered[r].id};
    ++m.n_merges_;
  }
  return m;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t a, int32_t b) const {
  const uint64_t k = pair_key(a, b);
  for (size_t h = slot(k, merge_mask_);; h = (h + 1) & merge_mask_) {
    if (merge_keys_[h] == k) return &merge_vals_[h];
    if (merge_keys_[h] == kEmptyKey) return nullptr;
  }
}

int32_t BpeModel::char_id(std::string_view ch) const {
  if (ch.size() == 1 && static_cast<unsigned char>(ch[0]) < 0x80) return ascii_id_[static_cast<unsigned char>(ch[0])];
  auto it = vocab_.find(ch);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  struct Sym {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  thread_local std::vector<Sym> syms;
  syms.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  bool last_unk = false;
  auto push = [&](int32_t id) {
    const int32_t i = static_cast<int32_t>(syms.size());
    syms.push_back({id, i - 1, -1});
    if (i > 0) syms[static_cast<size_t>(i - 1)].next = i;
  };
  for (size_t i = 0; i < text.size();) {
    const size_t len = char_len(p + i, text.size() - i);
    const int32_t id = char_id(text.substr(i, len));
    if (id >= 0) {
      push(id);
      last_unk = false;
    } else {
      bool done = false;
      if (byte_fallback_) {
        bool all = true;
        for (size_t k = 0; k < len; ++k) all = all && byte_token_[p[i + k]] >= 0;
        if (all) {
          for (size_t k = 0; k < len; ++k) push(byte_token_[p[i + k]]);
          done = true;
          last_unk = false;
        }
      }
      if (!done && unk_id_ >= 0) {
        if (!last_unk) push(unk_id_);  // fuse_unk: a run of unknowns is one <unk>
        last_unk = true;
      }
    }
    i += len;
  }
  if (syms.empty()) return;

  struct Cand {
    int32_t rank;
    int32_t left;
    int32_t left_id;
    int32_t right_id;
    int32_t new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  thread_local std::vector<Cand> heap;
  heap.clear();
  auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = syms[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const int32_t a = syms[static_cast<size_t>(left)].id, b = syms[static_cast<size_t>(right)].id;
    const Merge* mg = find_merge(a, b);
    if (mg == nullptr) return;
    heap.push_back({mg->rank, left, a, b, mg->id});
    std::push_heap(heap.begin(), heap.end(), std::greater<Cand>());
  };
  const int32_t n = static_cast<int32_t>(syms.size());
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<Cand>());
    const Cand c = heap.back();
    heap.pop_back();
    Sym& l = syms[static_cast<size_t>(c.left)];
    if (l.id != c.left_id || l.next < 0) continue;  // stale
    Sym& r = syms[static_cast<size_t>(l.next)];
    if (r.id != c.right_id) continue;
    l.id = c.new_id;
    r.id = -1;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.left;
    push_pair(l.prev);
    push_pair(c.left);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) out.push_back(syms[static_cast<size_t>(i)].id);
}

}  // namespace geniex::tok::spm
