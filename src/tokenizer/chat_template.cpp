// A small Jinja interpreter for chat templates: lexer (with Jinja's whitespace rules), recursive
// descent parser into an AST, and a tree-walking renderer. Errors never throw out: the parser
// and the renderer record the first error and unwind.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8.hpp"

namespace geniex::tok {

namespace {

constexpr int kMaxDepth = 200;                  // nesting of expressions and blocks
constexpr size_t kMaxOutput = 64u << 20;        // bytes of rendered text or any string value
constexpr int64_t kMaxIterations = 10'000'000;  // loop iterations per render

// ---------------------------------------------------------------- values

struct Value;
using VList = std::vector<Value>;
using VDict = std::vector<std::pair<std::string, Value>>;  // insertion ordered

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict };
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::shared_ptr<VList> list;
  std::shared_ptr<VDict> dict;

  static Value none() { Value v; v.kind = Kind::None; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
  static Value str(std::string x) { Value v; v.kind = Kind::String; v.s = std::move(x); return v; }
  static Value make_list(VList items = {}) {
    Value v; v.kind = Kind::List; v.list = std::make_shared<VList>(std::move(items)); return v;
  }
  static Value make_dict(VDict entries = {}) {
    Value v; v.kind = Kind::Dict; v.dict = std::make_shared<VDict>(std::move(entries)); return v;
  }
  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_numeric() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  double as_double() const { return kind == Kind::Float ? f : static_cast<double>(kind == Kind::Bool ? b : i); }
  int64_t as_int() const { return kind == Kind::Float ? static_cast<int64_t>(f) : (kind == Kind::Bool ? b : i); }
  const Value* get(std::string_view key) const {
    if (kind != Kind::Dict) return nullptr;
    for (const auto& kv : *dict) {
      if (kv.first == key) return &kv.second;
    }
    return nullptr;
  }
  void set(const std::string& key, Value v) {
    for (auto& kv : *dict) {
      if (kv.first == key) { kv.second = std::move(v); return; }
    }
    dict->emplace_back(key, std::move(v));
  }
};

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.b;
    case Value::Kind::Int: return v.i != 0;
    case Value::Kind::Float: return v.f != 0.0;
    case Value::Kind::String: return !v.s.empty();
    case Value::Kind::List: return !v.list->empty();
    case Value::Kind::Dict: return !v.dict->empty();
  }
  return false;
}

std::string format_float(double d) {  // Python repr-like
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string repr(const Value& v);

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.b ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.i);
    case Value::Kind::Float: return format_float(v.f);
    case Value::Kind::String: return v.s;
    default: return repr(v);
  }
}

std::string repr(const Value& v) {
  if (v.kind == Value::Kind::String) {
    std::string out = "'";
    for (char c : v.s) {
      if (c == '\'' || c == '\\') out += '\\';
      if (c == '\n') { out += "\\n"; continue; }
      out += c;
    }
    return out + "'";
  }
  if (v.kind == Value::Kind::List) {
    std::string out = "[";
    for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
    return out + "]";
  }
  if (v.kind == Value::Kind::Dict) {
    std::string out = "{";
    bool first = true;
    for (const auto& kv : *v.dict) {
      out += (first ? "'" : ", '") + kv.first + "': " + repr(kv.second);
      first = false;
    }
    return out + "}";
  }
  return to_str(v);
}

nlohmann::ordered_json to_json(const Value& v, int depth = 0) {
  if (depth > kMaxDepth) return nullptr;
  switch (v.kind) {
    case Value::Kind::Undefined: case Value::Kind::None: return nullptr;
    case Value::Kind::Bool: return v.b;
    case Value::Kind::Int: return v.i;
    case Value::Kind::Float: return v.f;
    case Value::Kind::String: return v.s;
    case Value::Kind::List: {
      auto a = nlohmann::ordered_json::array();
      for (const auto& x : *v.list) a.push_back(to_json(x, depth + 1));
      return a;
    }
    case Value::Kind::Dict: {
      auto o = nlohmann::ordered_json::object();
      for (const auto& kv : *v.dict) o[kv.first] = to_json(kv.second, depth + 1);
      return o;
    }
  }
  return nullptr;
}

bool equal(const Value& a, const Value& b) {
  if (a.is_numeric() && b.is_numeric()) return a.as_double() == b.as_double();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined: case Value::Kind::None: return true;
    case Value::Kind::String: return a.s == b.s;
    case Value::Kind::List:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Value::Kind::Dict:
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& kv : *a.dict) {
        const Value* o = b.get(kv.first);
        if (o == nullptr || !equal(kv.second, *o)) return false;
      }
      return true;
    default: return false;
  }
}

// Code points of a UTF-8 string as separate strings (ill-formed bytes stand alone).
std::vector<std::string> chars_of(const std::string& s) {
  std::vector<std::string> out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    const utf8::Step st = utf8::next(p + i, s.size() - i);
    const size_t len = st.status == utf8::Status::Valid ? st.len : 1;
    out.emplace_back(s, i, len);
    i += len;
  }
  return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string strip(const std::string& s, bool left, bool right, const std::string* chars = nullptr) {
  auto strip_char = [&](char c) { return chars ? chars->find(c) != std::string::npos : is_space(c); };
  size_t b = 0, e = s.size();
  if (left) while (b < e && strip_char(s[b])) ++b;
  if (right) while (e > b && strip_char(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// ---------------------------------------------------------------- lexer

enum class TokKind { Name, Int, Float, String, Op, End };
struct Tok {
  TokKind kind = TokKind::End;
  std::string text;
  size_t pos = 0;  // offset in the source, for messages
};

struct Segment {
  enum class Kind { Text, Expr, Stmt } kind;
  std::string text;      // Text: the text; Expr/Stmt: the inside of the tag
  size_t pos;            // source offset of the segment start
};

}  // namespace

// ---------------------------------------------------------------- AST

struct ChatTemplate::Node {
  enum class Kind {
    // expressions
    Literal, Var, GetAttr, GetItem, Slice, Call, Filter, Test, Unary, Binary, Cond, ListLit, DictLit,
    // statements
    Block, Text, Output, If, For, Set, SetBlock, Break, Continue,
  } kind;
  size_t pos = 0;
  std::string name;  // Var/GetAttr/Filter/Test name, operator, Set target
  std::string attr;  // Set: namespace attribute
  Value literal;
  std::vector<std::shared_ptr<const Node>> kids;  // operands / block children
  std::vector<std::string> kw;                    // Call/Filter keyword names (parallel to trailing kids)
  size_t n_pos_args = 0;
  bool negated = false;
  // If: kids are (cond, block) pairs, then an optional else block (odd count).
  // For: kids = iterable, body, [else], [filter]; names in `targets`.
  std::vector<std::string> targets;
  bool has_else = false;
  bool has_filter = false;
};

namespace {

using NodeP = std::shared_ptr<const ChatTemplate::Node>;
using Node = ChatTemplate::Node;

std::shared_ptr<Node> make_node(Node::Kind k, size_t pos) {
  auto n = std::make_shared<Node>();
  n->kind = k;
  n->pos = pos;
  return n;
}

class Parser {
 public:
  Parser(const std::string& src, ChatTemplate::Options opt) : src_(src), opt_(opt) {}

  NodeP parse() {
    if (!lex_segments()) return nullptr;
    size_t idx = 0;
    auto root = parse_block(idx, {}, 0);
    if (!root || failed()) return nullptr;
    if (idx < segs_.size()) {
      fail(segs_[idx].pos, "unexpected '{% " + first_word(segs_[idx].text) + " %}'");
      return nullptr;
    }
    return root;
  }
  const std::string& error() const { return error_; }

 private:
  const std::string& src_;
  ChatTemplate::Options opt_;
  std::vector<Segment> segs_;
  std::string error_;
  std::string ended_by_;  // keyword that ended the last parse_block
  // expression parsing state
  std::vector<Tok> toks_;
  size_t tp_ = 0;
  int depth_ = 0;

  bool failed() const { return !error_.empty(); }
  void fail(size_t pos, const std::string& msg) {
    if (failed()) return;
    size_t line = 1, col = 1;
    for (size_t k = 0; k < pos && k < src_.size(); ++k) {
      if (src_[k] == '\n') { ++line; col = 1; } else { ++col; }
    }
    error_ = "chat template: line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + msg;
  }
  static std::string first_word(const std::string& s) {
    size_t b = 0;
    while (b < s.size() && is_space(s[b])) ++b;
    size_t e = b;
    while (e < s.size() && !is_space(s[e])) ++e;
    return s.substr(b, e - b);
  }

  // Splits the source into text and tags, applying -/+ markers, trim_blocks and lstrip_blocks.
  bool lex_segments() {
    std::string src = src_;
    if (!src.empty() && src.back() == '\n') {  // Jinja drops one trailing newline
      src.pop_back();
      if (!src.empty() && src.back() == '\r') src.pop_back();
    }
    size_t i = 0;
    bool strip_next = false, trim_next = false, line_start = true;
    while (i <= src.size()) {
      size_t open = src.find('{', i);
      while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' &&
             src[open + 1] != '#') {
        open = src.find('{', open + 1);
      }
      if (open != std::string::npos && open + 1 >= src.size()) open = std::string::npos;
      std::string text = src.substr(i, (open == std::string::npos ? src.size() : open) - i);
      if (strip_next) text = strip(text, true, false);
      else if (trim_next && !text.empty() && text[0] == '\n') text.erase(0, 1);
      else if (trim_next && text.size() >= 2 && text[0] == '\r' && text[1] == '\n') text.erase(0, 2);
      if (open == std::string::npos) {
        if (!text.empty()) segs_.push_back({Segment::Kind::Text, text, i});
        break;
      }
      const char kind = src[open + 1];
      const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
      size_t inner = open + 2;
      const bool minus_left = inner < src.size() && src[inner] == '-';
      const bool plus_left = inner < src.size() && src[inner] == '+';
      if (minus_left || plus_left) ++inner;
      size_t end = find_close(src, inner, close, kind == '#');
      if (end == std::string::npos) {
        fail(open, std::string("unclosed '") + src.substr(open, 2) + "' (missing '" + close + "')");
        return false;
      }
      size_t inner_end = end;
      const bool minus_right = inner_end > inner && src[inner_end - 1] == '-';
      const bool plus_right = inner_end > inner && src[inner_end - 1] == '+';
      if (minus_right || plus_right) --inner_end;
      const bool block_like = kind != '{';
      // whitespace before the tag
      if (minus_left) {
        text = strip(text, false, true);
      } else if (block_like && opt_.lstrip_blocks && !plus_left) {
        const size_t nl = text.rfind('\n');
        const size_t from = nl == std::string::npos ? 0 : nl + 1;
        if ((nl != std::string::npos || line_start) &&
            std::all_of(text.begin() + static_cast<std::ptrdiff_t>(from), text.end(),
                        [](char c) { return c == ' ' || c == '\t'; })) {
          text.erase(from);
        }
      }
      if (!text.empty()) segs_.push_back({Segment::Kind::Text, text, i});
      if (kind != '#') {
        segs_.push_back({kind == '{' ? Segment::Kind::Expr : Segment::Kind::Stmt,
                         src.substr(inner, inner_end - inner), inner});
      }
      strip_next = minus_right;
      trim_next = block_like && opt_.trim_blocks && !plus_right;
      i = end + 2;
      line_start = (trim_next && i < src.size() && src[i] == '\n');
    }
    return true;
  }

  // Position of the closing delimiter, skipping string literals inside expressions.
  static size_t find_close(const std::string& s, size_t from, const std::string& close, bool comment) {
    if (comment) return s.find(close, from);
    char quote = 0;
    for (size_t k = from; k + 1 < s.size(); ++k) {
      const char c = s[k];
      if (quote) {
        if (c == '\\') ++k;
        else if (c == quote) quote = 0;
        continue;
      }
      if (c == '\'' || c == '"') { quote = c; continue; }
      if (c == close[0] && s[k + 1] == close[1]) return k;
    }
    return std::string::npos;
  }

  // ---- statements

  // Parses segments until one of `enders` (first word of a {% %} tag) or the end.
  std::shared_ptr<Node> parse_block(size_t& idx, const std::vector<std::string>& enders, int depth) {
    auto block = make_node(Node::Kind::Block, idx < segs_.size() ? segs_[idx].pos : 0);
    ended_by_.clear();
    if (depth > kMaxDepth) {
      fail(block->pos, "blocks nested too deeply");
      return nullptr;
    }
    while (idx < segs_.size() && !failed()) {
      const Segment& seg = segs_[idx];
      if (seg.kind == Segment::Kind::Text) {
        auto t = make_node(Node::Kind::Text, seg.pos);
        t->literal = Value::str(seg.text);
        block->kids.push_back(t);
        ++idx;
        continue;
      }
      if (seg.kind == Segment::Kind::Expr) {
        if (!start_expr(seg)) return nullptr;
        auto e = parse_expr();
        if (!e || !expect_end()) return nullptr;
        auto o = make_node(Node::Kind::Output, seg.pos);
        o->kids.push_back(e);
        block->kids.push_back(o);
        ++idx;
        continue;
      }
      const std::string word = first_word(seg.text);
      if (std::find(enders.begin(), enders.end(), word) != enders.end()) {
        ended_by_ = word;
        return block;
      }
      auto stmt = parse_stmt(idx, word, depth);
      if (!stmt) return nullptr;
      block->kids.push_back(stmt);
    }
    if (failed()) return nullptr;
    if (!enders.empty()) {
      fail(src_.size(), "unexpected end of template: missing '{% " + enders.back() + " %}'");
      return nullptr;
    }
    return block;
  }

  bool start_expr(const Segment& seg) {
    toks_.clear();
    tp_ = 0;
    depth_ = 0;
    return tokenize(seg.text, seg.pos);
  }

  std::shared_ptr<Node> parse_stmt(size_t& idx, const std::string& word, int depth) {
    const Segment& seg = segs_[idx];
    if (!start_expr(seg)) return nullptr;
    ++tp_;  // the keyword
    if (word == "if") {
      auto node = make_node(Node::Kind::If, seg.pos);
      auto cond = parse_expr();
      if (!cond || !expect_end()) return nullptr;
      ++idx;
      while (true) {
        auto body = parse_block(idx, {"elif", "else", "endif"}, depth + 1);
        if (!body) return nullptr;
        node->kids.push_back(cond);
        node->kids.push_back(body);
        const std::string ender = ended_by_;
        const Segment& es = segs_[idx];
        if (!start_expr(es)) return nullptr;
        ++tp_;
        ++idx;
        if (ender == "elif") {
          cond = parse_expr();
          if (!cond || !expect_end()) return nullptr;
          continue;
        }
        if (!expect_end()) return nullptr;
        if (ender == "else") {
          auto else_body = parse_block(idx, {"endif"}, depth + 1);
          if (!else_body) return nullptr;
          if (!start_expr(segs_[idx])) return nullptr;
          ++tp_;
          if (!expect_end()) return nullptr;
          ++idx;
          node->kids.push_back(else_body);
        }
        return node;
      }
    }
    if (word == "for") {
      auto node = make_node(Node::Kind::For, seg.pos);
      while (true) {
        if (peek().kind != TokKind::Name) { fail(peek().pos, "expected a loop variable name"); return nullptr; }
        node->targets.push_back(next().text);
        if (peek_op(",")) { ++tp_; continue; }
        break;
      }
      if (!(peek().kind == TokKind::Name && peek().text == "in")) { fail(peek().pos, "expected 'in' in for loop"); return nullptr; }
      ++tp_;
      auto iter = parse_or();  // no conditional expression: `if` filters the loop
      if (!iter) return nullptr;
      NodeP filter;
      if (peek().kind == TokKind::Name && peek().text == "if") {
        ++tp_;
        filter = parse_or();
        if (!filter) return nullptr;
      }
      if (peek().kind == TokKind::Name && peek().text == "recursive") { fail(peek().pos, "recursive loops are not supported"); return nullptr; }
      if (!expect_end()) return nullptr;
      ++idx;
      auto body = parse_block(idx, {"else", "endfor"}, depth + 1);
      if (!body) return nullptr;
      node->kids.push_back(iter);
      node->kids.push_back(body);
      if (ended_by_ == "else") {
        ++idx;
        auto else_body = parse_block(idx, {"endfor"}, depth + 1);
        if (!else_body) return nullptr;
        node->kids.push_back(else_body);
        node->has_else = true;
      }
      if (!start_expr(segs_[idx])) return nullptr;
      ++tp_;
      if (!expect_end()) return nullptr;
      ++idx;
      if (filter) {
        node->kids.push_back(filter);
        node->has_filter = true;
      }
      return node;
    }
    if (word == "set") {
      if (peek().kind != TokKind::Name) { fail(peek().pos, "expected a variable name after 'set'"); return nullptr; }
      const std::string target = next().text;
      std::string attr;
      if (peek_op(".")) {
        ++tp_;
        if (peek().kind != TokKind::Name) { fail(peek().pos, "expected an attribute name"); return nullptr; }
        attr = next().text;
      }
      if (peek().kind == TokKind::End && attr.empty()) {  // block set
        ++idx;
        auto body = parse_block(idx, {"endset"}, depth + 1);
        if (!body) return nullptr;
        if (!start_expr(segs_[idx])) return nullptr;
        ++tp_;
        if (!expect_end()) return nullptr;
        ++idx;
        auto node = make_node(Node::Kind::SetBlock, seg.pos);
        node->name = target;
        node->kids.push_back(body);
        return node;
      }
      if (!peek_op("=")) { fail(peek().pos, "expected '=' in set"); return nullptr; }
      ++tp_;
      auto value = parse_expr();
      if (!value || !expect_end()) return nullptr;
      ++idx;
      auto node = make_node(Node::Kind::Set, seg.pos);
      node->name = target;
      node->attr = attr;
      node->kids.push_back(value);
      return node;
    }
    if (word == "break" || word == "continue") {
      if (!expect_end()) return nullptr;
      ++idx;
      return make_node(word == "break" ? Node::Kind::Break : Node::Kind::Continue, seg.pos);
    }
    if (word == "generation") {  // transformers' assistant-mask marker: render the body as is
      if (!expect_end()) return nullptr;
      ++idx;
      auto body = parse_block(idx, {"endgeneration"}, depth + 1);
      if (!body) return nullptr;
      ++idx;
      return body;
    }
    fail(seg.pos, word.empty() ? "empty statement tag" : "unknown or unsupported tag '" + word + "'");
    return nullptr;
  }

  // ---- expression tokens

  bool tokenize(const std::string& s, size_t base) {
    size_t k = 0;
    while (k < s.size()) {
      const char c = s[k];
      if (is_space(c)) { ++k; continue; }
      Tok t;
      t.pos = base + k;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = k;
        while (e < s.size() && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
        t.kind = TokKind::Name;
        t.text = s.substr(k, e - k);
        k = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = k;
        while (e < s.size() && (std::isdigit(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
        t.kind = TokKind::Int;
        if (e + 1 < s.size() && s[e] == '.' && std::isdigit(static_cast<unsigned char>(s[e + 1]))) {
          ++e;
          while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
          t.kind = TokKind::Float;
        }
        t.text = s.substr(k, e - k);
        t.text.erase(std::remove(t.text.begin(), t.text.end(), '_'), t.text.end());
        k = e;
      } else if (c == '\'' || c == '"') {
        std::string out;
        size_t e = k + 1;
        bool closed = false;
        while (e < s.size()) {
          const char d = s[e];
          if (d == c) { closed = true; ++e; break; }
          if (d == '\\' && e + 1 < s.size()) {
            const char x = s[e + 1];
            e += 2;
            switch (x) {
              case 'n': out += '\n'; break;
              case 't': out += '\t'; break;
              case 'r': out += '\r'; break;
              case '\\': out += '\\'; break;
              case '\'': out += '\''; break;
              case '"': out += '"'; break;
              case '\n': break;
              default: out += '\\'; out += x; break;
            }
            continue;
          }
          out += d;
          ++e;
        }
        if (!closed) { fail(base + k, "unterminated string literal"); return false; }
        t.kind = TokKind::String;
        t.text = std::move(out);
        k = e;
      } else {
        static const char* const ops[] = {"==", "!=", "<=", ">=", "//", "**", "(", ")", "[", "]", "{", "}",
                                          ".", ",", ":", "|", "+", "-", "*", "/", "%", "~", "<", ">", "="};
        bool found = false;
        for (const char* op : ops) {
          const size_t n = std::char_traits<char>::length(op);
          if (s.compare(k, n, op) == 0) {
            t.kind = TokKind::Op;
            t.text = op;
            k += n;
            found = true;
            break;
          }
        }
        if (!found) { fail(base + k, std::string("unexpected character '") + c + "'"); return false; }
      }
      toks_.push_back(std::move(t));
    }
    Tok end;
    end.pos = base + s.size();
    toks_.push_back(end);
    return true;
  }

  const Tok& peek(size_t ahead = 0) const {
    const size_t k = std::min(tp_ + ahead, toks_.size() - 1);
    return toks_[k];
  }
  const Tok& next() {
    const Tok& t = peek();
    if (tp_ + 1 < toks_.size()) ++tp_;
    return t;
  }
  bool peek_op(const char* op) const { return peek().kind == TokKind::Op && peek().text == op; }
  bool peek_name(const char* n) const { return peek().kind == TokKind::Name && peek().text == n; }
  bool expect_op(const char* op) {
    if (!peek_op(op)) {
      fail(peek().pos, std::string("expected '") + op + "'" + describe(peek()));
      return false;
    }
    ++tp_;
    return true;
  }
  bool expect_end() {
    if (failed()) return false;
    if (peek().kind != TokKind::End) {
      fail(peek().pos, "unexpected" + describe(peek()));
      return false;
    }
    return true;
  }
  static std::string describe(const Tok& t) {
    if (t.kind == TokKind::End) return " (found end of tag)";
    return " (found '" + t.text + "')";
  }

  // ---- expressions (Jinja precedence)

  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* pp) : p(pp) { ++p->depth_; }
    ~DepthGuard() { --p->depth_; }
  };

  NodeP parse_expr() {
    DepthGuard g(this);
    if (depth_ > kMaxDepth) { fail(peek().pos, "expression nested too deeply"); return nullptr; }
    auto value = parse_or();
    if (!value) return nullptr;
    if (peek_name("if")) {
      const size_t pos = next().pos;
      auto cond = parse_or();
      if (!cond) return nullptr;
      NodeP other;
      if (peek_name("else")) {
        ++tp_;
        other = parse_expr();
        if (!other) return nullptr;
      } else {
        auto u = make_node(Node::Kind::Literal, pos);
        other = u;  // undefined
      }
      auto n = make_node(Node::Kind::Cond, pos);
      n->kids = {value, cond, other};
      return n;
    }
    return value;
  }

  NodeP binary(const std::string& op, size_t pos, NodeP l, NodeP r) {
    if (!l || !r) return nullptr;
    auto n = make_node(Node::Kind::Binary, pos);
    n->name = op;
    n->kids = {std::move(l), std::move(r)};
    return n;
  }

  NodeP parse_or() {
    auto l = parse_and();
    while (l && peek_name("or")) {
      const size_t pos = next().pos;
      l = binary("or", pos, l, parse_and());
    }
    return l;
  }
  NodeP parse_and() {
    auto l = parse_not();
    while (l && peek_name("and")) {
      const size_t pos = next().pos;
      l = binary("and", pos, l, parse_not());
    }
    return l;
  }
  NodeP parse_not() {
    if (peek_name("not")) {
      DepthGuard g(this);
      if (depth_ > kMaxDepth) { fail(peek().pos, "expression nested too deeply"); return nullptr; }
      const size_t pos = next().pos;
      auto e = parse_not();
      if (!e) return nullptr;
      auto n = make_node(Node::Kind::Unary, pos);
      n->name = "not";
      n->kids = {e};
      return n;
    }
    return parse_compare();
  }
  NodeP parse_compare() {
    auto l = parse_add();
    while (l) {
      const Tok& t = peek();
      std::string op;
      if (t.kind == TokKind::Op && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" ||
                                    t.text == "<=" || t.text == ">=")) {
        op = t.text;
        ++tp_;
      } else if (peek_name("in")) {
        op = "in";
        ++tp_;
      } else if (peek_name("not") && peek(1).kind == TokKind::Name && peek(1).text == "in") {
        op = "not in";
        tp_ += 2;
      } else {
        break;
      }
      l = binary(op, t.pos, l, parse_add());
    }
    return l;
  }
  NodeP parse_add() {
    auto l = parse_concat();
    while (l && (peek_op("+") || peek_op("-"))) {
      const Tok& t = next();
      l = binary(t.text, t.pos, l, parse_concat());
    }
    return l;
  }
  NodeP parse_concat() {
    auto l = parse_mul();
    while (l && peek_op("~")) {
      const size_t pos = next().pos;
      l = binary("~", pos, l, parse_mul());
    }
    return l;
  }
  NodeP parse_mul() {
    auto l = parse_pow();
    while (l && (peek_op("*") || peek_op("/") || peek_op("//") || peek_op("%"))) {
      const Tok& t = next();
      l = binary(t.text, t.pos, l, parse_pow());
    }
    return l;
  }
  NodeP parse_pow() {
    auto l = parse_unary();
    while (l && peek_op("**")) {
      const size_t pos = next().pos;
      l = binary("**", pos, l, parse_unary());
    }
    return l;
  }
  NodeP parse_unary() {
    DepthGuard g(this);
    if (depth_ > kMaxDepth) { fail(peek().pos, "expression nested too deeply"); return nullptr; }
    if (peek_op("-") || peek_op("+")) {
      const Tok& t = next();
      auto e = parse_unary();
      if (!e) return nullptr;
      auto n = make_node(Node::Kind::Unary, t.pos);
      n->name = t.text;
      n->kids = {e};
      return parse_filters(n);
    }
    auto p = parse_primary();
    if (!p) return nullptr;
    p = parse_postfix(p);
    if (!p) return nullptr;
    return parse_filters(p);
  }

  // Arguments of a call or filter: (a, b, key=value). Appends to n->kids and n->kw.
  bool parse_args(Node& n) {
    if (!expect_op("(")) return false;
    bool seen_kw = false;
    while (!peek_op(")")) {
      if (peek().kind == TokKind::End) { fail(peek().pos, "expected ')'"); return false; }
      if (peek().kind == TokKind::Name && peek(1).kind == TokKind::Op && peek(1).text == "=") {
        n.kw.push_back(next().text);
        ++tp_;
        auto v = parse_expr();
        if (!v) return false;
        n.kids.push_back(v);
        seen_kw = true;
      } else {
        if (seen_kw) { fail(peek().pos, "positional argument after keyword argument"); return false; }
        auto v = parse_expr();
        if (!v) return false;
        n.kids.push_back(v);
        ++n.n_pos_args;
      }
      if (!peek_op(",")) break;
      ++tp_;
    }
    return expect_op(")");
  }

  NodeP parse_postfix(NodeP e) {
    while (e && !failed()) {
      if (peek_op(".")) {
        const size_t pos = next().pos;
        if (peek().kind != TokKind::Name && peek().kind != TokKind::Int) {
          fail(peek().pos, "expected an attribute name after '.'");
          return nullptr;
        }
        auto n = make_node(Node::Kind::GetAttr, pos);
        n->name = next().text;
        n->kids = {e};
        e = n;
      } else if (peek_op("[")) {
        const size_t pos = next().pos;
        NodeP a, b, c;
        bool is_slice = false;
        if (!peek_op(":")) {
          a = parse_expr();
          if (!a) return nullptr;
        }
        if (peek_op(":")) {
          is_slice = true;
          ++tp_;
          if (!peek_op("]") && !peek_op(":")) {
            b = parse_expr();
            if (!b) return nullptr;
          }
          if (peek_op(":")) {
            ++tp_;
            if (!peek_op("]")) {
              c = parse_expr();
              if (!c) return nullptr;
            }
          }
        }
        if (!expect_op("]")) return nullptr;
        auto undefined = make_node(Node::Kind::Literal, pos);
        if (is_slice) {
          auto n = make_node(Node::Kind::Slice, pos);
          n->kids = {e, a ? a : undefined, b ? b : undefined, c ? c : undefined};
          e = n;
        } else {
          auto n = make_node(Node::Kind::GetItem, pos);
          n->kids = {e, a};
          e = n;
        }
      } else if (peek_op("(")) {
        auto n = make_node(Node::Kind::Call, peek().pos);
        n->kids = {e};
        if (!parse_args(*n)) return nullptr;
        e = n;
      } else {
        break;
      }
    }
    return failed() ? nullptr : e;
  }

  NodeP parse_filters(NodeP e) {
    while (e && !failed()) {
      if (peek_op("|")) {
        const size_t pos = next().pos;
        if (peek().kind != TokKind::Name) { fail(peek().pos, "expected a filter name after '|'"); return nullptr; }
        auto n = make_node(Node::Kind::Filter, pos);
        n->name = next().text;
        n->kids = {e};
        n->n_pos_args = 1;
        if (peek_op("(") && !parse_args(*n)) return nullptr;
        e = n;
      } else if (peek_name("is")) {
        const size_t pos = next().pos;
        auto n = make_node(Node::Kind::Test, pos);
        if (peek_name("not")) { ++tp_; n->negated = true; }
        if (peek().kind != TokKind::Name) { fail(peek().pos, "expected a test name after 'is'"); return nullptr; }
        n->name = next().text;
        n->kids = {e};
        n->n_pos_args = 1;
        if (peek_op("(")) {
          if (!parse_args(*n)) return nullptr;
        } else if (peek().kind == TokKind::String || peek().kind == TokKind::Int || peek().kind == TokKind::Float) {
          auto arg = parse_primary();  // `is divisibleby 3` style single argument
          if (!arg) return nullptr;
          n->kids.push_back(arg);
          ++n->n_pos_args;
        }
        e = n;
      } else {
        break;
      }
    }
    return failed() ? nullptr : e;
  }

  NodeP parse_primary() {
    const Tok& t = peek();
    switch (t.kind) {
      case TokKind::Int: {
        ++tp_;
        auto n = make_node(Node::Kind::Literal, t.pos);
        errno = 0;
        const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) { fail(t.pos, "integer literal out of range"); return nullptr; }
        n->literal = Value::integer(v);
        return n;
      }
      case TokKind::Float: {
        ++tp_;
        auto n = make_node(Node::Kind::Literal, t.pos);
        n->literal = Value::number(std::strtod(t.text.c_str(), nullptr));
        return n;
      }
      case TokKind::String: {
        ++tp_;
        auto n = make_node(Node::Kind::Literal, t.pos);
        std::string s = t.text;
        while (peek().kind == TokKind::String) s += next().text;  // adjacent literals concatenate
        n->literal = Value::str(std::move(s));
        return n;
      }
      case TokKind::Name: {
        ++tp_;
        auto n = make_node(Node::Kind::Literal, t.pos);
        if (t.text == "true" || t.text == "True") { n->literal = Value::boolean(true); return n; }
        if (t.text == "false" || t.text == "False") { n->literal = Value::boolean(false); return n; }
        if (t.text == "none" || t.text == "None") { n->literal = Value::none(); return n; }
        static const char* const reserved[] = {"and", "or", "not", "in", "is", "if", "else"};
        for (const char* r : reserved) {
          if (t.text == r) { fail(t.pos, "unexpected keyword '" + t.text + "'"); return nullptr; }
        }
        n->kind = Node::Kind::Var;
        n->name = t.text;
        return n;
      }
      case TokKind::Op: {
        if (t.text == "(") {
          ++tp_;
          auto e = parse_expr();
          if (!e) return nullptr;
          if (peek_op(",")) {  // tuple: treated as a list
            auto n = make_node(Node::Kind::ListLit, t.pos);
            n->kids.push_back(e);
            while (peek_op(",")) {
              ++tp_;
              if (peek_op(")")) break;
              auto x = parse_expr();
              if (!x) return nullptr;
              n->kids.push_back(x);
            }
            e = n;
          }
          if (!expect_op(")")) return nullptr;
          return e;
        }
        if (t.text == "[") {
          ++tp_;
          auto n = make_node(Node::Kind::ListLit, t.pos);
          while (!peek_op("]")) {
            auto x = parse_expr();
            if (!x) return nullptr;
            n->kids.push_back(x);
            if (!peek_op(",")) break;
            ++tp_;
          }
          if (!expect_op("]")) return nullptr;
          return n;
        }
        if (t.text == "{") {
          ++tp_;
          auto n = make_node(Node::Kind::DictLit, t.pos);
          while (!peek_op("}")) {
            auto k = parse_expr();
            if (!k || !expect_op(":")) return nullptr;
            auto v = parse_expr();
            if (!v) return nullptr;
            n->kids.push_back(k);
            n->kids.push_back(v);
            if (!peek_op(",")) break;
            ++tp_;
          }
          if (!expect_op("}")) return nullptr;
          return n;
        }
        break;
      }
      case TokKind::End:
        fail(t.pos, "expected an expression (found end of tag)");
        return nullptr;
    }
    fail(t.pos, "unexpected '" + t.text + "'");
    return nullptr;
  }
};

// ---------------------------------------------------------------- renderer

class Renderer {
 public:
  explicit Renderer(std::string& out) : out_(out) {}
  std::string error;
  std::vector<std::unordered_map<std::string, Value>> scopes;

  bool failed() const { return !error.empty(); }
  void fail(const Node& n, const std::string& msg) {
    if (failed()) return;
    error = "chat template: render error at offset " + std::to_string(n.pos) + ": " + msg;
  }

  enum class Flow { Normal, Break, Continue };

  Flow exec(const Node& n, int depth) {
    if (failed()) return Flow::Normal;
    if (depth > kMaxDepth * 4) { fail(n, "template nested too deeply"); return Flow::Normal; }
    switch (n.kind) {
      case Node::Kind::Block:
        for (const auto& k : n.kids) {
          const Flow f = exec(*k, depth + 1);
          if (f != Flow::Normal || failed()) return f;
        }
        return Flow::Normal;
      case Node::Kind::Text: emit(n, n.literal.s); return Flow::Normal;
      case Node::Kind::Output: {
        const Value v = eval(*n.kids[0], 0);
        if (!failed()) emit(n, to_str(v));
        return Flow::Normal;
      }
      case Node::Kind::If: {
        const size_t pairs = n.kids.size() / 2;
        for (size_t k = 0; k < pairs; ++k) {
          const Value c = eval(*n.kids[2 * k], 0);
          if (failed()) return Flow::Normal;
          if (truthy(c)) return exec(*n.kids[2 * k + 1], depth + 1);
        }
        if (n.kids.size() % 2 == 1) return exec(*n.kids.back(), depth + 1);
        return Flow::Normal;
      }
      case Node::Kind::For: exec_for(n, depth); return Flow::Normal;
      case Node::Kind::Set: {
        Value v = eval(*n.kids[0], 0);
        if (failed()) return Flow::Normal;
        if (n.attr.empty()) {
          scopes.back()[n.name] = std::move(v);
        } else {
          Value ns = lookup(n.name);
          if (ns.kind != Value::Kind::Dict) { fail(n, "cannot set attribute of non-namespace '" + n.name + "'"); return Flow::Normal; }
          ns.set(n.attr, std::move(v));  // shared: updates the namespace in place
        }
        return Flow::Normal;
      }
      case Node::Kind::SetBlock: {
        std::string captured;
        std::string saved;
        saved.swap(out_);
        exec(*n.kids[0], depth + 1);
        captured.swap(out_);
        out_.swap(saved);
        scopes.back()[n.name] = Value::str(std::move(captured));
        return Flow::Normal;
      }
      case Node::Kind::Break: return Flow::Break;
      case Node::Kind::Continue: return Flow::Continue;
      default: fail(n, "internal: not a statement"); return Flow::Normal;
    }
  }

 private:
  std::string& out_;
  int64_t iterations_ = 0;

  void emit(const Node& n, const std::string& s) {
    if (out_.size() + s.size() > kMaxOutput) { fail(n, "output exceeds 64 MiB"); return; }
    out_ += s;
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value();
  }

  std::vector<Value> iterate(const Value& v) {
    std::vector<Value> items;
    if (v.kind == Value::Kind::List) items = *v.list;
    else if (v.kind == Value::Kind::Dict) for (const auto& kv : *v.dict) items.push_back(Value::str(kv.first));
    else if (v.kind == Value::Kind::String) for (auto& c : chars_of(v.s)) items.push_back(Value::str(std::move(c)));
    return items;
  }

  void exec_for(const Node& n, int depth) {
    const Value iterable = eval(*n.kids[0], 0);
    if (failed()) return;
    if (!iterable.is_undefined() && iterable.kind != Value::Kind::None && iterable.kind != Value::Kind::List &&
        iterable.kind != Value::Kind::Dict && iterable.kind != Value::Kind::String) {
      fail(n, "cannot iterate over " + repr(iterable));
      return;
    }
    std::vector<Value> items = iterate(iterable);
    auto bind = [&](std::unordered_map<std::string, Value>& scope, const Value& item) {
      if (n.targets.size() == 1) {
        scope[n.targets[0]] = item;
        return;
      }
      if (item.kind != Value::Kind::List || item.list->size() != n.targets.size()) {
        fail(n, "cannot unpack " + repr(item) + " into " + std::to_string(n.targets.size()) + " loop variables");
        return;
      }
      for (size_t k = 0; k < n.targets.size(); ++k) scope[n.targets[k]] = (*item.list)[k];
    };
    if (n.has_filter) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        scopes.emplace_back();
        bind(scopes.back(), item);
        const Value c = eval(*n.kids.back(), 0);
        scopes.pop_back();
        if (failed()) return;
        if (truthy(c)) kept.push_back(item);
      }
      items.swap(kept);
    }
    if (items.empty()) {
      if (n.has_else) exec(*n.kids[2], depth + 1);
      return;
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      if (++iterations_ > kMaxIterations) { fail(n, "too many loop iterations"); return; }
      scopes.emplace_back();
      bind(scopes.back(), items[static_cast<size_t>(k)]);
      Value loop = Value::make_dict();
      loop.set("index", Value::integer(k + 1));
      loop.set("index0", Value::integer(k));
      loop.set("revindex", Value::integer(len - k));
      loop.set("revindex0", Value::integer(len - k - 1));
      loop.set("first", Value::boolean(k == 0));
      loop.set("last", Value::boolean(k == len - 1));
      loop.set("length", Value::integer(len));
      loop.set("previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value());
      loop.set("nextitem", k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value());
      scopes.back()["loop"] = loop;
      const Flow f = failed() ? Flow::Normal : exec(*n.kids[1], depth + 1);
      scopes.pop_back();
      if (failed() || f == Flow::Break) return;
    }
  }

  Value check_str(const Node& n, std::string s) {
    if (s.size() > kMaxOutput) { fail(n, "string exceeds 64 MiB"); return Value(); }
    return Value::str(std::move(s));
  }

  // Positional argument k (0-based, counting the filtered value for filters), or undefined;
  // keyword `name` wins when given.
  Value arg(const Node& n, size_t k, const char* name, const std::vector<Value>& args) {
    for (size_t j = 0; j < n.kw.size(); ++j) {
      if (n.kw[j] == name) return args[n.n_pos_args + j];
    }
    return k < n.n_pos_args ? args[k] : Value();
  }

  std::vector<Value> eval_args(const Node& n, size_t first, int depth) {
    std::vector<Value> args;
    for (size_t k = first; k < n.kids.size(); ++k) args.push_back(eval(*n.kids[k], depth + 1));
    return args;
  }

 public:
  Value eval(const Node& n, int depth) {
    if (failed()) return Value();
    if (depth > kMaxDepth * 2) { fail(n, "expression nested too deeply"); return Value(); }
    switch (n.kind) {
      case Node::Kind::Literal: return n.literal;
      case Node::Kind::Var: return lookup(n.name);
      case Node::Kind::GetAttr: {
        const Value obj = eval(*n.kids[0], depth + 1);
        if (const Value* v = obj.get(n.name)) return *v;
        if (obj.kind == Value::Kind::List && !n.name.empty() && std::isdigit(static_cast<unsigned char>(n.name[0]))) {
          return index(n, obj, Value::integer(std::strtoll(n.name.c_str(), nullptr, 10)));
        }
        return Value();
      }
      case Node::Kind::GetItem: {
        const Value obj = eval(*n.kids[0], depth + 1);
        const Value key = eval(*n.kids[1], depth + 1);
        return index(n, obj, key);
      }
      case Node::Kind::Slice: return slice(n, depth);
      case Node::Kind::ListLit: {
        Value l = Value::make_list();
        for (const auto& k : n.kids) l.list->push_back(eval(*k, depth + 1));
        return l;
      }
      case Node::Kind::DictLit: {
        Value d = Value::make_dict();
        for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
          const Value key = eval(*n.kids[k], depth + 1);
          d.set(to_str(key), eval(*n.kids[k + 1], depth + 1));
        }
        return d;
      }
      case Node::Kind::Cond: {
        const Value c = eval(*n.kids[1], depth + 1);
        return eval(truthy(c) ? *n.kids[0] : *n.kids[2], depth + 1);
      }
      case Node::Kind::Unary: {
        const Value v = eval(*n.kids[0], depth + 1);
        if (n.name == "not") return Value::boolean(!truthy(v));
        if (!v.is_numeric()) { fail(n, "bad operand for unary " + n.name + ": " + repr(v)); return Value(); }
        if (n.name == "+") return v;
        return v.kind == Value::Kind::Float ? Value::number(-v.f) : Value::integer(-v.as_int());
      }
      case Node::Kind::Binary: return binary(n, depth);
      case Node::Kind::Call: return call(n, depth);
      case Node::Kind::Filter: return filter(n, depth);
      case Node::Kind::Test: return test(n, depth);
      default: fail(n, "internal: not an expression"); return Value();
    }
  }

 private:
  Value index(const Node& n, const Value& obj, const Value& key) {
    if (obj.kind == Value::Kind::Dict) {
      if (const Value* v = obj.get(to_str(key))) return *v;
      return Value();
    }
    if ((obj.kind == Value::Kind::List || obj.kind == Value::Kind::String) && key.kind == Value::Kind::Int) {
      if (obj.kind == Value::Kind::List) {
        const int64_t size = static_cast<int64_t>(obj.list->size());
        const int64_t k = key.i < 0 ? key.i + size : key.i;
        if (k < 0 || k >= size) return Value();
        return (*obj.list)[static_cast<size_t>(k)];
      }
      const auto chars = chars_of(obj.s);
      const int64_t size = static_cast<int64_t>(chars.size());
      const int64_t k = key.i < 0 ? key.i + size : key.i;
      if (k < 0 || k >= size) return Value();
      return Value::str(chars[static_cast<size_t>(k)]);
    }
    (void)n;
    return Value();
  }

  Value slice(const Node& n, int depth) {
    const Value obj = eval(*n.kids[0], depth + 1);
    const Value a = eval(*n.kids[1], depth + 1), b = eval(*n.kids[2], depth + 1), c = eval(*n.kids[3], depth + 1);
    if (failed()) return Value();
    std::vector<Value> items;
    const bool is_str = obj.kind == Value::Kind::String;
    if (obj.kind == Value::Kind::List) items = *obj.list;
    else if (is_str) for (auto& ch : chars_of(obj.s)) items.push_back(Value::str(std::move(ch)));
    else return Value();
    const int64_t size = static_cast<int64_t>(items.size());
    const int64_t step = c.is_undefined() || c.kind == Value::Kind::None ? 1 : c.as_int();
    if (step == 0) { fail(n, "slice step cannot be zero"); return Value(); }
    auto norm = [&](const Value& v, int64_t def) {
      if (v.is_undefined() || v.kind == Value::Kind::None) return def;
      int64_t x = v.as_int();
      if (x < 0) x += size;
      if (step > 0) return std::clamp<int64_t>(x, 0, size);
      return std::clamp<int64_t>(x, -1, size - 1);
    };
    const int64_t start = norm(a, step > 0 ? 0 : size - 1);
    const int64_t stop = norm(b, step > 0 ? size : -1);
    Value out = is_str ? Value::str("") : Value::make_list();
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (is_str) out.s += items[static_cast<size_t>(k)].s;
      else out.list->push_back(items[static_cast<size_t>(k)]);
    }
    return out;
  }

  Value binary(const Node& n, int depth) {
    const std::string& op = n.name;
    const Value l = eval(*n.kids[0], depth + 1);
    if (op == "and") return truthy(l) ? eval(*n.kids[1], depth + 1) : l;
    if (op == "or") return truthy(l) ? l : eval(*n.kids[1], depth + 1);
    const Value r = eval(*n.kids[1], depth + 1);
    if (failed()) return Value();
    if (op == "==") return Value::boolean(equal(l, r));
    if (op == "!=") return Value::boolean(!equal(l, r));
    if (op == "~") return check_str(n, to_str(l) + to_str(r));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.kind == Value::Kind::String) found = r.s.find(to_str(l)) != std::string::npos;
      else if (r.kind == Value::Kind::List) found = std::any_of(r.list->begin(), r.list->end(), [&](const Value& x) { return equal(x, l); });
      else if (r.kind == Value::Kind::Dict) found = r.get(to_str(l)) != nullptr;
      else if (!r.is_undefined()) { fail(n, "'in' needs a string, list or mapping on the right, got " + repr(r)); return Value(); }
      return Value::boolean(op == "in" ? found : !found);
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp;
      if (l.is_numeric() && r.is_numeric()) {
        const double x = l.as_double(), y = r.as_double();
        cmp = x < y ? -1 : (x > y ? 1 : 0);
      } else if (l.kind == Value::Kind::String && r.kind == Value::Kind::String) {
        cmp = l.s.compare(r.s);
      } else {
        fail(n, "cannot compare " + repr(l) + " and " + repr(r));
        return Value();
      }
      if (op == "<") return Value::boolean(cmp < 0);
      if (op == ">") return Value::boolean(cmp > 0);
      if (op == "<=") return Value::boolean(cmp <= 0);
      return Value::boolean(cmp >= 0);
    }
    if (op == "+") {
      if (l.is_numeric() && r.is_numeric()) {
        if (l.kind == Value::Kind::Float || r.kind == Value::Kind::Float) return Value::number(l.as_double() + r.as_double());
        return Value::integer(static_cast<int64_t>(static_cast<uint64_t>(l.as_int()) + static_cast<uint64_t>(r.as_int())));
      }
      if (l.kind == Value::Kind::List && r.kind == Value::Kind::List) {
        VList all = *l.list;
        all.insert(all.end(), r.list->begin(), r.list->end());
        return Value::make_list(std::move(all));
      }
      // strings; undefined counts as "" (GenieX is lenient where Jinja would raise)
      if ((l.kind == Value::Kind::String || l.is_undefined()) && (r.kind == Value::Kind::String || r.is_undefined())) {
        return check_str(n, l.s + r.s);
      }
      fail(n, "unsupported operands for +: " + repr(l) + " and " + repr(r));
      return Value();
    }
    if (op == "*" && ((l.kind == Value::Kind::String && r.kind == Value::Kind::Int) ||
                      (r.kind == Value::Kind::String && l.kind == Value::Kind::Int))) {
      const std::string& s = l.kind == Value::Kind::String ? l.s : r.s;
      const int64_t times = l.kind == Value::Kind::Int ? l.i : r.i;
      if (times <= 0) return Value::str("");
      if (s.size() * static_cast<uint64_t>(std::min<int64_t>(times, INT32_MAX)) > kMaxOutput) {
        fail(n, "string exceeds 64 MiB");
        return Value();
      }
      std::string out;
      for (int64_t k = 0; k < times; ++k) out += s;
      return Value::str(std::move(out));
    }
    if (!l.is_numeric() || !r.is_numeric()) {
      fail(n, "unsupported operands for " + op + ": " + repr(l) + " and " + repr(r));
      return Value();
    }
    const bool fl = l.kind == Value::Kind::Float || r.kind == Value::Kind::Float;
    if (op == "-") {
      if (fl) return Value::number(l.as_double() - r.as_double());
      return Value::integer(static_cast<int64_t>(static_cast<uint64_t>(l.as_int()) - static_cast<uint64_t>(r.as_int())));
    }
    if (op == "*") {
      if (fl) return Value::number(l.as_double() * r.as_double());
      return Value::integer(static_cast<int64_t>(static_cast<uint64_t>(l.as_int()) * static_cast<uint64_t>(r.as_int())));
    }
    if (op == "**") {
      if (fl || r.as_int() < 0 || r.as_int() > 64) return Value::number(std::pow(l.as_double(), r.as_double()));
      uint64_t acc = 1;
      for (int64_t k = 0; k < r.as_int(); ++k) acc *= static_cast<uint64_t>(l.as_int());
      return Value::integer(static_cast<int64_t>(acc));
    }
    if (r.as_double() == 0.0) { fail(n, "division by zero"); return Value(); }
    if (op == "/") return Value::number(l.as_double() / r.as_double());
    if (op == "//") {
      if (fl) return Value::number(std::floor(l.as_double() / r.as_double()));
      const int64_t a = l.as_int(), b = r.as_int();
      if (a == INT64_MIN && b == -1) return Value::integer(INT64_MIN);
      int64_t q = a / b;
      if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
      return Value::integer(q);
    }
    if (op == "%") {
      if (fl) {
        const double a = l.as_double(), b = r.as_double();
        return Value::number(a - std::floor(a / b) * b);
      }
      const int64_t a = l.as_int(), b = r.as_int();
      if (b == -1) return Value::integer(0);
      int64_t m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) m += b;
      return Value::integer(m);
    }
    fail(n, "unknown operator " + op);
    return Value();
  }

  Value call(const Node& n, int depth) {
    const Node& callee = *n.kids[0];
    std::vector<Value> args = eval_args(n, 1, depth);
    if (failed()) return Value();
    if (callee.kind == Node::Kind::GetAttr) {  // method call
      const Value obj = eval(*callee.kids[0], depth + 1);
      if (failed()) return Value();
      return method(n, obj, callee.name, args);
    }
    if (callee.kind != Node::Kind::Var) { fail(n, "only named functions can be called"); return Value(); }
    const std::string& fn = callee.name;
    if (fn == "raise_exception") {
      fail(n, "raise_exception: " + (args.empty() ? std::string() : to_str(args[0])));
      return Value();
    }
    if (fn == "namespace" || fn == "dict") {
      Value d = Value::make_dict();
      for (size_t k = 0; k < n.kw.size(); ++k) d.set(n.kw[k], args[n.n_pos_args + k]);
      return d;
    }
    if (fn == "range") {
      int64_t start = 0, stop = 0, step = 1;
      if (n.n_pos_args == 1) stop = args[0].as_int();
      else if (n.n_pos_args >= 2) { start = args[0].as_int(); stop = args[1].as_int(); }
      if (n.n_pos_args >= 3) step = args[2].as_int();
      if (step == 0) { fail(n, "range() step must not be zero"); return Value(); }
      Value l = Value::make_list();
      for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
        if (l.list->size() >= 1'000'000) { fail(n, "range() too long"); return Value(); }
        l.list->push_back(Value::integer(k));
      }
      return l;
    }
    fail(n, "unknown function '" + fn + "'");
    return Value();
  }

  Value method(const Node& n, const Value& obj, const std::string& name, const std::vector<Value>& args) {
    auto a = [&](size_t k) { return k < args.size() ? args[k] : Value(); };
    if (obj.kind == Value::Kind::String) {
      const std::string& s = obj.s;
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const Value chars = a(0);
        const std::string* cp = chars.kind == Value::Kind::String ? &chars.s : nullptr;
        return Value::str(strip(s, name != "rstrip", name != "lstrip", cp));
      }
      if (name == "lower" || name == "upper") {
        std::string out = s;
        for (char& c : out) c = static_cast<char>(name == "lower" ? std::tolower(static_cast<unsigned char>(c))
                                                                  : std::toupper(static_cast<unsigned char>(c)));
        return Value::str(std::move(out));
      }
      if (name == "startswith") return Value::boolean(s.rfind(to_str(a(0)), 0) == 0);
      if (name == "endswith") {
        const std::string suf = to_str(a(0));
        return Value::boolean(s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0);
      }
      if (name == "replace") {
        const std::string from = to_str(a(0)), to = to_str(a(1));
        if (from.empty()) return obj;
        std::string out;
        size_t pos = 0, f;
        while ((f = s.find(from, pos)) != std::string::npos) {
          out.append(s, pos, f - pos);
          out += to;
          pos = f + from.size();
          if (out.size() > kMaxOutput) { fail(n, "string exceeds 64 MiB"); return Value(); }
        }
        out.append(s, pos);
        return Value::str(std::move(out));
      }
      if (name == "split") {
        Value l = Value::make_list();
        const Value sep = a(0);
        if (sep.kind != Value::Kind::String) {
          size_t k = 0;
          while (k < s.size()) {
            while (k < s.size() && is_space(s[k])) ++k;
            size_t e = k;
            while (e < s.size() && !is_space(s[e])) ++e;
            if (e > k) l.list->push_back(Value::str(s.substr(k, e - k)));
            k = e;
          }
          return l;
        }
        if (sep.s.empty()) { fail(n, "split(): empty separator"); return Value(); }
        size_t pos = 0, f;
        while ((f = s.find(sep.s, pos)) != std::string::npos) {
          l.list->push_back(Value::str(s.substr(pos, f - pos)));
          pos = f + sep.s.size();
        }
        l.list->push_back(Value::str(s.substr(pos)));
        return l;
      }
    }
    if (obj.kind == Value::Kind::Dict) {
      if (name == "items") {
        Value l = Value::make_list();
        for (const auto& kv : *obj.dict) l.list->push_back(Value::make_list({Value::str(kv.first), kv.second}));
        return l;
      }
      if (name == "keys" || name == "values") {
        Value l = Value::make_list();
        for (const auto& kv : *obj.dict) l.list->push_back(name == "keys" ? Value::str(kv.first) : kv.second);
        return l;
      }
      if (name == "get") {
        if (const Value* v = obj.get(to_str(a(0)))) return *v;
        return args.size() > 1 ? args[1] : Value::none();
      }
    }
    fail(n, "unknown method '" + name + "' on " + (obj.is_undefined() ? std::string("undefined value") : repr(obj)));
    return Value();
  }

  Value filter(const Node& n, int depth) {
    std::vector<Value> args = eval_args(n, 0, depth);
    if (failed()) return Value();
    const Value& v = args[0];
    const std::string& f = n.name;
    if (f == "trim") return Value::str(strip(to_str(v), true, true));
    if (f == "length" || f == "count") {
      if (v.kind == Value::Kind::String) return Value::integer(static_cast<int64_t>(chars_of(v.s).size()));
      if (v.kind == Value::Kind::List) return Value::integer(static_cast<int64_t>(v.list->size()));
      if (v.kind == Value::Kind::Dict) return Value::integer(static_cast<int64_t>(v.dict->size()));
      return Value::integer(0);
    }
    if (f == "upper" || f == "lower" || f == "capitalize" || f == "title") {
      std::string s = to_str(v);
      bool start = true;
      for (char& c : s) {
        const auto u = static_cast<unsigned char>(c);
        const bool up = f == "upper" || ((f == "capitalize" || f == "title") && start);
        c = static_cast<char>(up ? std::toupper(u) : std::tolower(u));
        start = f == "title" ? !std::isalnum(u) : false;
      }
      return Value::str(std::move(s));
    }
    if (f == "default" || f == "d") {
      const bool boolean = truthy(arg(n, 2, "boolean", args));
      const bool use_default = boolean ? !truthy(v) : v.is_undefined();
      return use_default ? (n.n_pos_args > 1 || !n.kw.empty() ? arg(n, 1, "default_value", args) : Value::str("")) : v;
    }
    if (f == "first" || f == "last") {
      std::vector<Value> items = iterate(v);
      if (items.empty()) return Value();
      return f == "first" ? items.front() : items.back();
    }
    if (f == "join") {
      const std::string sep = n.n_pos_args > 1 ? to_str(args[1]) : std::string();
      std::string out;
      bool first = true;
      for (const Value& x : iterate(v)) {
        if (!first) out += sep;
        out += to_str(x);
        first = false;
        if (out.size() > kMaxOutput) { fail(n, "string exceeds 64 MiB"); return Value(); }
      }
      return Value::str(std::move(out));
    }
    if (f == "tojson") {
      const Value indent = arg(n, 1, "indent", args);
      const nlohmann::ordered_json j = to_json(v);
      const int ind = indent.kind == Value::Kind::Int ? static_cast<int>(std::clamp<int64_t>(indent.i, 0, 16)) : -1;
      std::string s = j.dump(ind, ' ', false, nlohmann::json::error_handler_t::replace);
      if (ind < 0) {  // Python json.dumps separators: ", " and ": "
        std::string spaced;
        bool in_str = false;
        for (size_t k = 0; k < s.size(); ++k) {
          const char c = s[k];
          spaced += c;
          if (in_str) {
            if (c == '\\' && k + 1 < s.size()) spaced += s[++k];
            else if (c == '"') in_str = false;
          } else if (c == '"') {
            in_str = true;
          } else if (c == ',' || c == ':') {
            spaced += ' ';
          }
        }
        s.swap(spaced);
      }
      return Value::str(std::move(s));
    }
    if (f == "string") return Value::str(to_str(v));
    if (f == "int") {
      if (v.kind == Value::Kind::String) return Value::integer(std::strtoll(v.s.c_str(), nullptr, 10));
      return Value::integer(v.is_numeric() ? v.as_int() : 0);
    }
    if (f == "float") {
      if (v.kind == Value::Kind::String) return Value::number(std::strtod(v.s.c_str(), nullptr));
      return Value::number(v.is_numeric() ? v.as_double() : 0.0);
    }
    if (f == "list") return Value::make_list(iterate(v));
    if (f == "reverse") {
      if (v.kind == Value::Kind::String) {
        auto chars = chars_of(v.s);
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
        return Value::str(std::move(out));
      }
      VList items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::make_list(std::move(items));
    }
    if (f == "abs") {
      if (v.kind == Value::Kind::Float) return Value::number(std::fabs(v.f));
      return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    if (f == "replace") {
      const std::string s = to_str(v), from = to_str(arg(n, 1, "old", args)), to = to_str(arg(n, 2, "new", args));
      return method(n, Value::str(s), "replace", {Value::str(from), Value::str(to)});
    }
    if (f == "items") return method(n, v, "items", {});
    if (f == "safe" || f == "e" || f == "escape") return v.kind == Value::Kind::String ? v : Value::str(to_str(v));
    fail(n, "unknown filter '" + f + "'");
    return Value();
  }

  Value test(const Node& n, int depth) {
    std::vector<Value> args = eval_args(n, 0, depth);
    if (failed()) return Value();
    const Value& v = args[0];
    const std::string& t = n.name;
    bool r;
    if (t == "defined") r = !v.is_undefined();
    else if (t == "undefined") r = v.is_undefined();
    else if (t == "none") r = v.kind == Value::Kind::None;
    else if (t == "string") r = v.kind == Value::Kind::String;
    else if (t == "number") r = v.kind == Value::Kind::Int || v.kind == Value::Kind::Float;
    else if (t == "integer") r = v.kind == Value::Kind::Int;
    else if (t == "float") r = v.kind == Value::Kind::Float;
    else if (t == "boolean") r = v.kind == Value::Kind::Bool;
    else if (t == "true") r = v.kind == Value::Kind::Bool && v.b;
    else if (t == "false") r = v.kind == Value::Kind::Bool && !v.b;
    else if (t == "mapping") r = v.kind == Value::Kind::Dict;
    else if (t == "sequence" || t == "iterable")
      r = v.kind == Value::Kind::List || v.kind == Value::Kind::String || v.kind == Value::Kind::Dict;
    else if (t == "even" || t == "odd") r = v.is_numeric() && (v.as_int() % 2 == 0) == (t == "even");
    else if (t == "eq" || t == "equalto" || t == "sameas") r = args.size() > 1 && equal(v, args[1]);
    else if (t == "ne") r = !(args.size() > 1 && equal(v, args[1]));
    else if (t == "in") {
      const Value& c = args.size() > 1 ? args[1] : Value();
      if (c.kind == Value::Kind::String) r = c.s.find(to_str(v)) != std::string::npos;
      else if (c.kind == Value::Kind::List) r = std::any_of(c.list->begin(), c.list->end(), [&](const Value& x) { return equal(x, v); });
      else r = c.get(to_str(v)) != nullptr;
    } else {
      fail(n, "unknown test '" + t + "'");
      return Value();
    }
    return Value::boolean(n.negated ? !r : r);
  }
};

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string source) { return parse(std::move(source), Options{}); }

Result<ChatTemplate> ChatTemplate::parse(std::string source, Options options) {
  Parser p(source, options);
  NodeP root = p.parse();
  if (!root) {
    return make_error(ErrorCode::InvalidArgument,
                      p.error().empty() ? std::string("chat template: parse failed") : p.error());
  }
  ChatTemplate t;
  t.root_ = std::move(root);
  t.source_ = std::move(source);
  return t;
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                         const std::string& bos_token, const std::string& eos_token) const {
  if (!root_) return make_error(ErrorCode::InvalidArgument, "chat template: empty template");
  std::string out;
  Renderer r(out);
  r.scopes.emplace_back();
  auto& globals = r.scopes.back();
  Value msgs = Value::make_list();
  for (const ChatMessage& m : messages) {
    Value d = Value::make_dict();
    d.set("role", Value::str(m.role));
    d.set("content", Value::str(m.content));
    msgs.list->push_back(std::move(d));
  }
  globals["messages"] = msgs;
  globals["add_generation_prompt"] = Value::boolean(add_generation_prompt);
  globals["bos_token"] = Value::str(bos_token);
  globals["eos_token"] = Value::str(eos_token);
  r.scopes.emplace_back();  // template-level sets live above the globals
  r.exec(*root_, 0);
  if (r.failed()) return make_error(ErrorCode::InvalidArgument, r.error);
  return out;
}

ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

}  // namespace geniex::tok
