// Tokenizer::from_tiktoken: a tiktoken rank file (one "base64(token bytes) rank" per line) as a
// byte-level BPE.
//
// tiktoken encodes a piece by repeatedly merging the adjacent pair whose concatenation has the
// lowest rank (a piece that is itself a token is emitted whole). The equivalent merge list, as
// transformers' TikTokenConverter derives it: every split of a token T into two tokens L + R is a
// merge "L R"; merges are ordered by the rank of T, then by the ranks of L and R. Token ids are
// the ranks; tokens are spelled in the GPT-2 byte alphabet like any "gpt2" vocabulary.
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "tokenizer/pretokenizer.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8.hpp"

namespace geniex::tok {

namespace {

int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Strict standard base64 (padding required to a multiple of 4). False on any bad character.
bool b64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t pad = 0;
  if (in.back() == '=') pad = in[in.size() - 2] == '=' ? 2 : 1;
  for (size_t i = 0; i < in.size(); i += 4) {
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const unsigned char c = static_cast<unsigned char>(in[i + k]);
      int d;
      if (c == '=' && i + 4 == in.size() && k >= 4 - pad) {
        d = 0;
      } else {
        d = b64_value(c);
        if (d < 0) return false;
      }
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out.push_back(static_cast<char>((v >> 16) & 0xFF));
    if (!(i + 4 == in.size() && pad >= 2)) out.push_back(static_cast<char>((v >> 8) & 0xFF));
    if (!(i + 4 == in.size() && pad >= 1)) out.push_back(static_cast<char>(v & 0xFF));
  }
  return true;
}

std::string spell(std::string_view bytes) {
  // GPT-2 byte -> code point map (printable bytes keep their value, the rest go to 256, ...).
  static const auto map = [] {
    std::array<uint32_t, 256> m{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      m[b] = keep ? b : next++;
    }
    return m;
  }();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) utf8::append_codepoint(out, map[c]);
  return out;
}

Error bad_line(const std::string& path, size_t line_no, const std::string& why) {
  return make_error(ErrorCode::InvalidFormat,
                    "tokenizer: tiktoken file " + path + " line " + std::to_string(line_no) + ": " + why);
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_tiktoken(
    const std::string& path, const std::string& pre, const std::vector<std::pair<std::string, int32_t>>& specials) {
  if (!named_pre_spec(pre)) {
    return make_error(ErrorCode::Unsupported, "tokenizer: tiktoken pre-tokenizer '" + pre +
                                                  "' is not supported (supported: " + supported_pre_names() + ")");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::IoError, "tokenizer: cannot open tiktoken file " + path);

  std::vector<std::pair<size_t, std::string>> entries;  // (rank, token bytes) in file order
  std::string line, tok;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || line.find(' ', sp + 1) != std::string::npos) {
      return bad_line(path, line_no, "expected 'base64 rank'");
    }
    if (!b64_decode(std::string_view(line).substr(0, sp), tok) || tok.empty()) {
      return bad_line(path, line_no, "invalid base64 token '" + line.substr(0, std::min<size_t>(sp, 40)) + "'");
    }
    const std::string_view num = std::string_view(line).substr(sp + 1);
    if (num.empty() || num.size() > 9 ||
        !std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return bad_line(path, line_no, "invalid rank '" + std::string(num.substr(0, 20)) + "'");
    }
    entries.emplace_back(static_cast<size_t>(std::stoul(std::string(num))), tok);
  }
  if (in.bad()) return make_error(ErrorCode::IoError, "tokenizer: read error on " + path);
  if (entries.empty())
    return make_error(ErrorCode::InvalidFormat, "tokenizer: tiktoken file " + path + " has no ranks");
  // Ranks must be exactly 0..n-1 (token ids); checked before anything is sized by a rank.
  const size_t n_entries = entries.size();
  std::vector<std::string> by_rank(n_entries);  // token bytes per rank
  std::vector<bool> seen(n_entries, false);
  for (auto& [rank, bytes] : entries) {
    if (rank >= n_entries) {
      return make_error(ErrorCode::InvalidFormat, "tokenizer: tiktoken file " + path + ": rank " +
                                                      std::to_string(rank) + " out of range (" +
                                                      std::to_string(n_entries) + " lines: ranks must be 0.." +
                                                      std::to_string(n_entries - 1) + ")");
    }
    if (seen[rank]) {
      return make_error(ErrorCode::InvalidFormat,
                        "tokenizer: tiktoken file " + path + ": rank " + std::to_string(rank) + " appears twice");
    }
    seen[rank] = true;
    by_rank[rank] = std::move(bytes);
  }
  entries.clear();
  const size_t n_ranks = by_rank.size();
  std::unordered_map<std::string_view, int32_t> rank_of;
  rank_of.reserve(n_ranks * 2);
  for (size_t r = 0; r < n_ranks; ++r) {
    if (!rank_of.emplace(by_rank[r], static_cast<int32_t>(r)).second) {
      return make_error(ErrorCode::InvalidFormat,
                        "tokenizer: tiktoken file " + path + ": token of rank " + std::to_string(r) + " appears twice");
    }
  }

  // Merges: (merged rank, left rank, right rank), sorted.
  std::vector<std::tuple<int32_t, int32_t, int32_t>> merges;
  merges.reserve(n_ranks * 2);
  for (size_t r = 0; r < n_ranks; ++r) {
    const std::string_view t = by_rank[r];
    for (size_t i = 1; i < t.size(); ++i) {
      auto l = rank_of.find(t.substr(0, i));
      if (l == rank_of.end()) continue;
      auto rr = rank_of.find(t.substr(i));
      if (rr == rank_of.end()) continue;
      merges.emplace_back(static_cast<int32_t>(r), l->second, rr->second);
    }
  }
  std::sort(merges.begin(), merges.end());

  TokenizerConfig cfg;
  cfg.model = "gpt2";
  cfg.pre = pre;
  cfg.ignore_merges = true;  // tiktoken emits a piece that is a token whole
  cfg.tokens.reserve(n_ranks + specials.size());
  for (const std::string& b : by_rank) cfg.tokens.push_back(spell(b));
  cfg.token_types.assign(n_ranks, static_cast<int32_t>(TokenType::Normal));
  cfg.merges.reserve(merges.size());
  for (const auto& [m, l, r] : merges) {
    cfg.merges.push_back(cfg.tokens[static_cast<size_t>(l)] + " " + cfg.tokens[static_cast<size_t>(r)]);
  }
  for (const auto& [text, id] : specials) {
    if (text.empty()) return make_error(ErrorCode::InvalidArgument, "tokenizer: tiktoken: empty special token text");
    if (id < static_cast<int32_t>(n_ranks) || id > static_cast<int32_t>(n_ranks) + 1000000) {
      return make_error(ErrorCode::InvalidArgument, "tokenizer: tiktoken: special token '" + text + "' id " +
                                                        std::to_string(id) + " must be at least the number of ranks (" +
                                                        std::to_string(n_ranks) + ")");
    }
    const size_t idx = static_cast<size_t>(id);
    if (idx >= cfg.tokens.size()) {
      cfg.tokens.resize(idx + 1);
      cfg.token_types.resize(idx + 1, static_cast<int32_t>(TokenType::Unused));
    }
    if (!cfg.tokens[idx].empty()) {
      return make_error(ErrorCode::InvalidArgument,
                        "tokenizer: tiktoken: special token id " + std::to_string(id) + " given twice");
    }
    cfg.tokens[idx] = text;
    cfg.token_types[idx] = static_cast<int32_t>(TokenType::Control);
    if (text == "<|endoftext|>") cfg.eos_id = id;
  }
  return from_config(std::move(cfg));
}

}  // namespace geniex::tok
