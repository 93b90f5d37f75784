// A small Jinja interpreter for chat templates: lexer (with Jinja's whitespace rules), recursive
// descent parser into an AST, and a tree-walking renderer. Errors never throw out: the parser
// and the renderer record the first error and unwind.
#include "tokenizer/chat_template.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tokenizer/utf8.hpp"

namespace geniex::tok {

namespace {

constexpr int kMaxDepth = 200;                  // nesting of expressions and blocks
constexpr size_t kMaxOutput = 64u << 20;        // bytes of rendered text or any string value
constexpr int64_t kMaxIterations = 2'000'000;  // loop iterations per render

// ---------------------------------------------------------------- values

struct Value;
using VList = std::vector<Value>;
using VDict = std::vector<std::pair<std::string, Value>>;  // insertion ordered

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Macro };
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::shared_ptr<VList> list;
  std::shared_ptr<VDict> dict;
  const ChatTemplate::Node* macro = nullptr;  // Macro: the {% macro %} node (owned by the template)
  bool tuple = false;                         // List: a Python tuple (prints with parentheses)

  static Value none() { Value v; v.kind = Kind::None; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
  static Value str(std::string x) { Value v; v.kind = Kind::String; v.s = std::move(x); return v; }
  static Value make_list(VList items = {}) {
    Value v; v.kind = Kind::List; v.list = std::make_shared<VList>(std::move(items)); return v;
  }
  static Value make_tuple(VList items) {
    Value v = make_list(std::move(items));
    v.tuple = true;
    return v;
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
    case Value::Kind::Macro: return true;
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

// Python's repr() of a str: single quotes unless the text has ' and no ", escapes for \\, the
// quote, \n \r \t and other control characters (non-ASCII text stays as is, as in Python 3).
std::string repr_str(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == q || c == '\\') { out += '\\'; out += c; }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + q;
}

std::string repr(const Value& v) {
  if (v.kind == Value::Kind::String) return repr_str(v.s);
  if (v.kind == Value::Kind::Macro) return "<Macro>";
  if (v.kind == Value::Kind::List) {
    std::string out = v.tuple ? "(" : "[";
    for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
    if (v.tuple && v.list->size() == 1) out += ",";
    return out + (v.tuple ? ")" : "]");
  }
  if (v.kind == Value::Kind::Dict) {
    std::string out = "{";
    bool first = true;
    for (const auto& kv : *v.dict) {
      out += (first ? "" : ", ") + repr_str(kv.first) + ": " + repr(kv.second);
      first = false;
    }
    return out + "}";
  }
  return to_str(v);
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
    Block, Text, Output, If, For, Set, SetBlock, Break, Continue, Macro,
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
  // Macro: name; parameter names in `targets`; kids = body, then one default per parameter
  // (an undefined Literal where there is none).
  std::vector<std::string> targets;
  bool has_else = false;
  bool has_filter = false;
  bool tuple = false;  // ListLit: a tuple literal
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
    int depth = 0;
    for (size_t k = from; k + 1 < s.size(); ++k) {
      const char c = s[k];
      if (quote) {
        if (c == '\\') ++k;
        else if (c == quote) quote = 0;
        continue;
      }
      if (c == '\'' || c == '"') { quote = c; continue; }
      if (depth == 0 && c == close[0] && s[k + 1] == close[1]) return k;
      // As jinja2's lexer, brackets opened inside the tag must close before the tag can end.
      if (c == '(' || c == '[' || c == '{') ++depth;
      else if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
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
      if (peek_op(",")) {  // {% set a, b = x, y %}
        auto node = make_node(Node::Kind::Set, seg.pos);
        node->targets.push_back(target);
        while (peek_op(",")) {
          ++tp_;
          if (peek().kind != TokKind::Name) { fail(peek().pos, "expected a variable name"); return nullptr; }
          node->targets.push_back(next().text);
        }
        if (!expect_op("=")) return nullptr;
        auto value = parse_tuple_expr();
        if (!value || !expect_end()) return nullptr;
        ++idx;
        node->kids.push_back(value);
        return node;
      }
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
      auto value = parse_tuple_expr();
      if (!value || !expect_end()) return nullptr;
      ++idx;
      auto node = make_node(Node::Kind::Set, seg.pos);
      node->name = target;
      node->attr = attr;
      node->kids.push_back(value);
      return node;
    }
    if (word == "macro") {
      if (peek().kind != TokKind::Name) { fail(peek().pos, "expected a macro name"); return nullptr; }
      auto node = make_node(Node::Kind::Macro, seg.pos);
      node->name = next().text;
      if (!expect_op("(")) return nullptr;
      std::vector<NodeP> defaults;
      while (!peek_op(")")) {
        if (peek().kind != TokKind::Name) { fail(peek().pos, "expected a macro parameter name"); return nullptr; }
        node->targets.push_back(next().text);
        if (peek_op("=")) {
          ++tp_;
          auto d = parse_expr();
          if (!d) return nullptr;
          defaults.push_back(d);
        } else {
          defaults.push_back(make_node(Node::Kind::Literal, peek().pos));
        }
        if (!peek_op(",")) break;
        ++tp_;
      }
      if (!expect_op(")") || !expect_end()) return nullptr;
      ++idx;
      auto body = parse_block(idx, {"endmacro"}, depth + 1);
      if (!body) return nullptr;
      if (!start_expr(segs_[idx])) return nullptr;
      ++tp_;
      if (peek().kind == TokKind::Name && peek().text == node->name) ++tp_;  // {% endmacro name %}
      if (!expect_end()) return nullptr;
      ++idx;
      node->kids.push_back(body);
      for (auto& d : defaults) node->kids.push_back(d);
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
          while (e < s.size() && (std::isdigit(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
          t.kind = TokKind::Float;
        }
        if (e < s.size() && (s[e] == 'e' || s[e] == 'E')) {  // exponent: 1e20, 2.5e-3
          size_t x = e + 1;
          if (x < s.size() && (s[x] == '+' || s[x] == '-')) ++x;
          if (x < s.size() && std::isdigit(static_cast<unsigned char>(s[x]))) {
            while (x < s.size() && (std::isdigit(static_cast<unsigned char>(s[x])) || s[x] == '_')) ++x;
            e = x;
            t.kind = TokKind::Float;
          }
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
              case 'a': out += '\a'; break;
              case 'b': out += '\b'; break;
              case 'f': out += '\f'; break;
              case 'v': out += '\v'; break;
              case 'x': case 'u': case 'U': {  // Python's unicode-escape: \xhh \uhhhh \Uhhhhhhhh
                const size_t digits = x == 'x' ? 2 : x == 'u' ? 4 : 8;
                uint32_t cp = 0;
                size_t k2 = 0;
                for (; k2 < digits && e + k2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[e + k2])); ++k2) {
                  const char h = s[e + k2];
                  cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
                }
                if (k2 != digits || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                  fail(base + e - 2, "invalid escape in string literal");
                  return false;
                }
                e += digits;
                utf8::append_codepoint(out, cp);
                break;
              }
              default:
                if (x >= '0' && x <= '7') {  // octal, up to three digits
                  uint32_t cp = static_cast<uint32_t>(x - '0');
                  for (int od = 0; od < 2 && e < s.size() && s[e] >= '0' && s[e] <= '7'; ++od) cp = cp * 8 + static_cast<uint32_t>(s[e++] - '0');
                  utf8::append_codepoint(out, cp);
                  break;
                }
                out += '\\';
                out += x;
                break;
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

  // An expression, or a bare tuple `a, b` (as on the right of {% set %}).
  NodeP parse_tuple_expr() {
    auto first = parse_expr();
    if (!first || !peek_op(",")) return first;
    auto n = make_node(Node::Kind::ListLit, first->pos);
    n->tuple = true;
    n->kids.push_back(first);
    while (peek_op(",")) {
      ++tp_;
      if (peek().kind == TokKind::End) break;
      auto x = parse_expr();
      if (!x) return nullptr;
      n->kids.push_back(x);
    }
    return n;
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
  // As jinja2: `-x | f` is (-x) | f, the filters apply to the negated operand.
  NodeP parse_unary(bool with_filter = true) {
    DepthGuard g(this);
    if (depth_ > kMaxDepth) { fail(peek().pos, "expression nested too deeply"); return nullptr; }
    if (peek_op("-") || peek_op("+")) {
      const Tok& t = next();
      auto e = parse_unary(false);
      if (!e) return nullptr;
      auto n = make_node(Node::Kind::Unary, t.pos);
      n->name = t.text;
      n->kids = {e};
      return with_filter ? parse_filters(n) : n;
    }
    auto p = parse_primary();
    if (!p) return nullptr;
    p = parse_postfix(p);
    if (!p) return nullptr;
    return with_filter ? parse_filters(p) : p;
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
          if (peek_op(",")) {  // tuple
            auto n = make_node(Node::Kind::ListLit, t.pos);
            n->tuple = true;
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
  ChatTemplate::Clock clock;
  int64_t max_iterations = kMaxIterations;
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
        if (!n.targets.empty()) {
          if (v.kind != Value::Kind::List || v.list->size() != n.targets.size()) {
            fail(n, "cannot unpack " + repr(v) + " into " + std::to_string(n.targets.size()) + " names");
            return Flow::Normal;
          }
          for (size_t k = 0; k < n.targets.size(); ++k) scopes.back()[n.targets[k]] = (*v.list)[k];
        } else if (n.attr.empty()) {
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
        captured_ += saved.size();
        exec(*n.kids[0], depth + 1);
        captured_ -= saved.size();
        captured.swap(out_);
        out_.swap(saved);
        scopes.back()[n.name] = Value::str(std::move(captured));
        return Flow::Normal;
      }
      case Node::Kind::Break: return Flow::Break;
      case Node::Kind::Continue: return Flow::Continue;
      case Node::Kind::Macro: {
        Value m;
        m.kind = Value::Kind::Macro;
        m.macro = &n;
        scopes.back()[n.name] = m;
        return Flow::Normal;
      }
      default: fail(n, "internal: not a statement"); return Flow::Normal;
    }
  }

 private:
  std::string& out_;
  int64_t iterations_ = 0;

  size_t captured_ = 0;  // bytes held in output buffers set aside by macro calls and {% set %} blocks

  void emit(const Node& n, const std::string& s) {
    if (captured_ + out_.size() + s.size() > kMaxOutput) { fail(n, "output exceeds 64 MiB"); return; }
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
    // One scope and one loop object for the whole loop, updated in place per iteration (as
    // jinja2's LoopContext, so a captured `loop` sees the current iteration).
    Value loop = Value::make_dict();
    for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "previtem", "nextitem"}) {
      loop.dict->emplace_back(key, Value());
    }
    scopes.emplace_back();
    const size_t si = scopes.size() - 1;
    for (int64_t k = 0; k < len; ++k) {
      if (++iterations_ > max_iterations) {
        fail(n, "too many loop iterations (limit " + std::to_string(max_iterations) + ")");
        break;
      }
      scopes[si].clear();
      bind(scopes[si], items[static_cast<size_t>(k)]);
      VDict& l = *loop.dict;
      l[0].second = Value::integer(k + 1);
      l[1].second = Value::integer(k);
      l[2].second = Value::integer(len - k);
      l[3].second = Value::integer(len - k - 1);
      l[4].second = Value::boolean(k == 0);
      l[5].second = Value::boolean(k == len - 1);
      l[6].second = Value::integer(len);
      l[7].second = k > 0 ? items[static_cast<size_t>(k - 1)] : Value();
      l[8].second = k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value();
      scopes[si]["loop"] = loop;
      const Flow f = failed() ? Flow::Normal : exec(*n.kids[1], depth + 1);
      if (failed() || f == Flow::Break) break;
    }
    scopes.pop_back();
  }

  Value check_str(const Node& n, std::string s) {
    if (s.size() > kMaxOutput) { fail(n, "string exceeds 64 MiB"); return Value(); }
    return Value::str(std::move(s));
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
      case Node::Kind::Var: {
        Value v = lookup(n.name);
        if (v.is_undefined() && is_builtin(n.name)) {  // `strftime_now is defined` and the like
          v.kind = Value::Kind::Macro;
          v.s = n.name;
        }
        return v;
      }
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
        l.tuple = n.tuple;
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
    if (const Value m = lookup(fn); m.kind == Value::Kind::Macro && m.macro != nullptr) {
      return call_macro(n, *m.macro, args, depth);
    }
    if (fn == "strftime_now") {
      const auto now = clock ? clock() : std::chrono::system_clock::now();
      const std::time_t t = std::chrono::system_clock::to_time_t(now);
      std::tm tm{};
      localtime_r(&t, &tm);
      const std::string fmt = to_str(a0(args));
      if (fmt.empty()) return Value::str("");
      std::string buf(256 + fmt.size() * 8, '\0');
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
#endif
      const size_t len = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);  // the template's format
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
      buf.resize(len);
      return Value::str(std::move(buf));
    }
    if (fn == "raise_exception") {
      fail(n, "raise_exception: " + (args.empty() ? std::string() : to_str(args[0])));
      return Value();
    }
    if (fn == "namespace" || fn == "dict") {
      Value d = Value::make_dict();
      if (n.n_pos_args >= 1 && args[0].kind == Value::Kind::Dict) {  // namespace(mapping, **kw)
        for (const auto& kv : *args[0].dict) d.set(kv.first, kv.second);
      }
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
        if (l.list->size() >= 100'000) { fail(n, "range too big, maximum size for range is 100000"); return Value(); }  // jinja2 sandbox MAX_RANGE
        l.list->push_back(Value::integer(k));
      }
      return l;
    }
    fail(n, "unknown function '" + fn + "'");
    return Value();
  }

  static bool is_builtin(const std::string& name) {
    return name == "raise_exception" || name == "strftime_now" || name == "namespace" || name == "dict" ||
           name == "range";
  }

  static Value a0(const std::vector<Value>& args) { return args.empty() ? Value() : args[0]; }

  int macro_depth_ = 0;

  Value call_macro(const Node& call, const Node& m, const std::vector<Value>& args, int depth) {
    if (macro_depth_ >= 64) { fail(call, "macro recursion too deep"); return Value(); }
    std::unordered_map<std::string, Value> frame;
    const size_t np = m.targets.size();
    if (call.n_pos_args > np) {
      fail(call, "macro '" + m.name + "' takes " + std::to_string(np) + " arguments, got " +
                     std::to_string(call.n_pos_args));
      return Value();
    }
    for (size_t k = 0; k < np; ++k) {
      if (k < call.n_pos_args) frame[m.targets[k]] = args[k];
    }
    VDict kwargs;
    for (size_t j = 0; j < call.kw.size(); ++j) {
      const auto it = std::find(m.targets.begin(), m.targets.end(), call.kw[j]);
      if (it == m.targets.end()) { kwargs.emplace_back(call.kw[j], args[call.n_pos_args + j]); continue; }
      frame[call.kw[j]] = args[call.n_pos_args + j];
    }
    VList varargs(args.begin() + static_cast<std::ptrdiff_t>(std::min(call.n_pos_args, np)),
                  args.begin() + static_cast<std::ptrdiff_t>(call.n_pos_args));
    // Defaults are evaluated in the macro's frame, so later defaults may use earlier parameters.
    scopes.emplace_back(std::move(frame));
    for (size_t k = 0; k < np && !failed(); ++k) {
      if (!scopes.back().count(m.targets[k])) scopes.back()[m.targets[k]] = eval(*m.kids[k + 1], depth + 1);
    }
    scopes.back()["varargs"] = Value::make_list(std::move(varargs));
    scopes.back()["kwargs"] = Value::make_dict(std::move(kwargs));
    std::string saved;
    saved.swap(out_);
    captured_ += saved.size();
    ++macro_depth_;
    exec(*m.kids[0], depth + 1);
    --macro_depth_;
    captured_ -= saved.size();
    std::string body;
    body.swap(out_);
    out_.swap(saved);
    scopes.pop_back();
    if (failed()) return Value();
    return Value::str(std::move(body));
  }

  // Python str.split / str.rsplit (sep none: runs of whitespace; maxsplit < 0: no limit).
  static VList py_split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
    VList parts;
    if (sep.kind != Value::Kind::String) {
      std::vector<std::pair<size_t, size_t>> words;
      size_t k = 0;
      while (k < s.size()) {
        while (k < s.size() && is_space(s[k])) ++k;
        size_t e = k;
        while (e < s.size() && !is_space(s[e])) ++e;
        if (e > k) words.emplace_back(k, e);
        k = e;
      }
      if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
        for (auto [b, e] : words) parts.push_back(Value::str(s.substr(b, e - b)));
        return parts;
      }
      const size_t m = static_cast<size_t>(maxsplit);
      if (!from_right) {
        for (size_t w = 0; w < m; ++w) parts.push_back(Value::str(s.substr(words[w].first, words[w].second - words[w].first)));
        parts.push_back(Value::str(strip(s.substr(words[m].first), false, true)));
      } else {
        const size_t first = words.size() - m;
        parts.push_back(Value::str(strip(s.substr(0, words[first - 1].second), true, false)));
        for (size_t w = first; w < words.size(); ++w) parts.push_back(Value::str(s.substr(words[w].first, words[w].second - words[w].first)));
      }
      return parts;
    }
    const std::string& d = sep.s;
    std::vector<size_t> cuts;
    if (!from_right) {
      size_t pos = 0, f;
      while ((maxsplit < 0 || static_cast<int64_t>(cuts.size()) < maxsplit) && (f = s.find(d, pos)) != std::string::npos) {
        cuts.push_back(f);
        pos = f + d.size();
      }
    } else {
      size_t end = s.size();
      while ((maxsplit < 0 || static_cast<int64_t>(cuts.size()) < maxsplit) && end >= d.size()) {
        const size_t f = s.rfind(d, end - d.size());
        if (f == std::string::npos) break;
        cuts.insert(cuts.begin(), f);
        end = f;
      }
    }
    size_t pos = 0;
    for (size_t c : cuts) {
      parts.push_back(Value::str(s.substr(pos, c - pos)));
      pos = c + d.size();
    }
    parts.push_back(Value::str(s.substr(pos)));
    return parts;
  }

  static std::string case_map(const std::string& s, const std::string& how) {
    std::string out = s;
    bool start = true;
    for (char& c : out) {
      const auto u = static_cast<unsigned char>(c);
      bool up = how == "upper";
      if (how == "capitalize") up = start;
      if (how == "title") up = start;
      c = static_cast<char>(up ? std::toupper(u) : (how == "swapcase" ? c : std::tolower(u)));
      if (how == "title") start = !std::isalpha(u) && u < 0x80;
      else start = false;
    }
    return out;
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
      if (name == "lower" || name == "upper" || name == "title" || name == "capitalize") {
        return Value::str(case_map(s, name));
      }
      if (name == "startswith" || name == "endswith") {
        std::vector<std::string> options;
        const Value p = a(0);
        if (p.kind == Value::Kind::List) for (const Value& x : *p.list) options.push_back(to_str(x));
        else options.push_back(to_str(p));
        for (const std::string& o : options) {
          if (name == "startswith" ? s.rfind(o, 0) == 0
                                   : (s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0)) {
            return Value::boolean(true);
          }
        }
        return Value::boolean(false);
      }
      if (name == "replace") {
        const std::string from = to_str(a(0)), to = to_str(a(1));
        int64_t count = a(2).kind == Value::Kind::Int ? a(2).i : -1;
        std::string out;
        if (from.empty()) {  // Python inserts `to` around every character
          for (const std::string& ch : chars_of(s)) {
            if (count != 0) { out += to; if (count > 0) --count; }
            out += ch;
            if (out.size() > kMaxOutput) { fail(n, "string exceeds 64 MiB"); return Value(); }
          }
          if (count != 0) out += to;
          return Value::str(std::move(out));
        }
        size_t pos = 0, f;
        while (count != 0 && (f = s.find(from, pos)) != std::string::npos) {
          out.append(s, pos, f - pos);
          out += to;
          pos = f + from.size();
          if (count > 0) --count;
          if (out.size() > kMaxOutput) { fail(n, "string exceeds 64 MiB"); return Value(); }
        }
        out.append(s, pos);
        return Value::str(std::move(out));
      }
      if (name == "split" || name == "rsplit") {
        const Value sep = arg_or_kw(n, args, 0, "sep");
        const Value maxsplit = arg_or_kw(n, args, 1, "maxsplit");
        if (sep.kind == Value::Kind::String && sep.s.empty()) { fail(n, "split(): empty separator"); return Value(); }
        return Value::make_list(py_split(s, sep, maxsplit.kind == Value::Kind::Int ? maxsplit.i : -1, name == "rsplit"));
      }
      if (name == "splitlines") {
        Value l = Value::make_list();
        size_t pos = 0;
        while (pos < s.size()) {
          size_t e = s.find_first_of("\r\n", pos);
          if (e == std::string::npos) { l.list->push_back(Value::str(s.substr(pos))); break; }
          l.list->push_back(Value::str(s.substr(pos, e - pos)));
          pos = e + ((s[e] == '\r' && e + 1 < s.size() && s[e + 1] == '\n') ? 2 : 1);
        }
        return l;
      }
      if (name == "join") {
        std::string out;
        bool first = true;
        for (const Value& x : iterate(a(0))) {
          if (!first) out += s;
          out += to_str(x);
          first = false;
          if (out.size() > kMaxOutput) { fail(n, "string exceeds 64 MiB"); return Value(); }
        }
        return Value::str(std::move(out));
      }
      if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
        const std::string sub = to_str(a(0));
        if (name == "count") {
          if (sub.empty()) return Value::integer(static_cast<int64_t>(chars_of(s).size()) + 1);
          int64_t c = 0;
          for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++c;
          return Value::integer(c);
        }
        const size_t f = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
        if (f == std::string::npos) {
          if (name == "index" || name == "rindex") { fail(n, "substring not found"); return Value(); }
          return Value::integer(-1);
        }
        return Value::integer(static_cast<int64_t>(chars_of(s.substr(0, f)).size()));
      }
      if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
          name == "isupper") {
        if (s.empty()) return Value::boolean(false);
        bool any_cased = false, ok = true;
        for (char c : s) {
          const auto u = static_cast<unsigned char>(c);
          if (name == "isdigit") ok = ok && std::isdigit(u);
          else if (name == "isalpha") ok = ok && std::isalpha(u);
          else if (name == "isalnum") ok = ok && std::isalnum(u);
          else if (name == "isspace") ok = ok && is_space(c);
          else if (name == "islower") { ok = ok && !std::isupper(u); any_cased = any_cased || std::islower(u); }
          else { ok = ok && !std::islower(u); any_cased = any_cased || std::isupper(u); }
        }
        if (name == "islower" || name == "isupper") ok = ok && any_cased;
        return Value::boolean(ok);
      }
    }
    if (obj.kind == Value::Kind::Dict) {
      if (name == "items") {
        Value l = Value::make_list();
        for (const auto& kv : *obj.dict) l.list->push_back(Value::make_tuple({Value::str(kv.first), kv.second}));
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
      if (name == "cycle" && obj.get("index0") != nullptr) {  // loop.cycle(a, b, ...)
        if (args.empty()) { fail(n, "loop.cycle() needs at least one value"); return Value(); }
        return args[static_cast<size_t>(obj.get("index0")->as_int()) % args.size()];
      }
    }
    if (obj.kind == Value::Kind::List) {
      if (name == "index" || name == "count") {
        int64_t c = 0;
        for (size_t k = 0; k < obj.list->size(); ++k) {
          if (!equal((*obj.list)[k], a(0))) continue;
          if (name == "index") return Value::integer(static_cast<int64_t>(k));
          ++c;
        }
        if (name == "index") { fail(n, "list.index(x): x not in list"); return Value(); }
        return Value::integer(c);
      }
    }
    fail(n, "unknown method '" + name + "' on " + (obj.is_undefined() ? std::string("undefined value") : repr(obj)));
    return Value();
  }

  Value arg_or_kw(const Node& n, const std::vector<Value>& args, size_t k, const char* name) {
    for (size_t j = 0; j < n.kw.size(); ++j) {
      if (n.kw[j] == name) return args[n.n_pos_args + j];
    }
    return k < n.n_pos_args ? args[k] : Value();
  }

  // Arguments of a filter or test: positional (the filtered value first) and keyword.
  struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
    Value get(size_t k, const char* name) const {
      for (const auto& [key, v] : kw) {
        if (key == name) return v;
      }
      return k < pos.size() ? pos[k] : Value();
    }
    bool has(size_t k, const char* name) const {
      for (const auto& kv : kw) {
        if (kv.first == name) return true;
      }
      return k < pos.size();
    }
  };

  Args node_args(const Node& n, int depth) {
    std::vector<Value> all = eval_args(n, 0, depth);
    Args a;
    for (size_t k = 0; k < all.size(); ++k) {
      if (k < n.n_pos_args) a.pos.push_back(std::move(all[k]));
      else a.kw.emplace_back(n.kw[k - n.n_pos_args], std::move(all[k]));
    }
    return a;
  }

  Value filter(const Node& n, int depth) {
    Args args = node_args(n, depth);
    if (failed()) return Value();
    return apply_filter(n, n.name, args);
  }

  // Attribute lookup for map/selectattr/sort/...: dotted path, integer parts index lists.
  static Value get_path(const Value& v, const std::string& path) {
    Value cur = v;
    size_t pos = 0;
    while (pos <= path.size()) {
      size_t dot = path.find('.', pos);
      if (dot == std::string::npos) dot = path.size();
      const std::string part = path.substr(pos, dot - pos);
      if (const Value* x = cur.get(part)) {
        cur = *x;
      } else if (cur.kind == Value::Kind::List && !part.empty() && std::isdigit(static_cast<unsigned char>(part[0]))) {
        const size_t k = static_cast<size_t>(std::strtoull(part.c_str(), nullptr, 10));
        cur = k < cur.list->size() ? (*cur.list)[k] : Value();
      } else {
        return Value();
      }
      pos = dot + 1;
    }
    return cur;
  }

  static std::string lower_ascii(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }

  // Python ordering for sort/dictsort/min/max; false when the values cannot be ordered.
  bool less(const Node& n, const Value& a, const Value& b, bool case_sensitive) {
    if (a.is_numeric() && b.is_numeric()) return a.as_double() < b.as_double();
    if (a.kind == Value::Kind::String && b.kind == Value::Kind::String) {
      return case_sensitive ? a.s < b.s : lower_ascii(a.s) < lower_ascii(b.s);
    }
    if (a.kind == Value::Kind::List && b.kind == Value::Kind::List) {
      for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k) {
        if (less(n, (*a.list)[k], (*b.list)[k], case_sensitive)) return true;
        if (less(n, (*b.list)[k], (*a.list)[k], case_sensitive)) return false;
      }
      return a.list->size() < b.list->size();
    }
    fail(n, "cannot order " + repr(a) + " and " + repr(b));
    return false;
  }

  Value sorted(const Node& n, VList items, bool reverse, bool case_sensitive, const std::string& attribute) {
    std::vector<Value> keys;
    for (const Value& x : items) keys.push_back(attribute.empty() ? x : get_path(x, attribute));
    std::vector<size_t> order(items.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      return reverse ? less(n, keys[y], keys[x], case_sensitive) : less(n, keys[x], keys[y], case_sensitive);
    });
    VList out;
    for (size_t k : order) out.push_back(items[k]);
    return Value::make_list(std::move(out));
  }

  Value tojson(const Node& n, const Value& v, const Args& args) {
    const Value indent = args.get(1, "indent");
    const Value ensure_ascii = args.get(0, "ensure_ascii");
    const Value separators = args.get(2, "separators");
    const Value sort_keys = args.get(3, "sort_keys");
    std::string item_sep = ", ", key_sep = ": ";
    int ind = -1;
    if (indent.kind == Value::Kind::Int) {
      ind = static_cast<int>(std::clamp<int64_t>(indent.i, 0, 64));
      item_sep = ",";
    } else if (indent.kind == Value::Kind::String) {
      fail(n, "tojson: string indents are not supported");
      return Value();
    }
    if (separators.kind == Value::Kind::List && separators.list->size() == 2) {
      item_sep = to_str((*separators.list)[0]);
      key_sep = to_str((*separators.list)[1]);
    }
    const bool ascii = ensure_ascii.kind == Value::Kind::Bool && ensure_ascii.b;
    std::string out;
    if (!dump_json(n, v, ind, 0, item_sep, key_sep, ascii, truthy(sort_keys), out)) return Value();
    return Value::str(std::move(out));
  }

  // json.dumps with Python's formatting (separators, indent, ensure_ascii, sort_keys).
  bool dump_json(const Node& n, const Value& v, int indent, int level, const std::string& item_sep,
                 const std::string& key_sep, bool ascii, bool sort_keys, std::string& out) {
    if (failed()) return false;
    if (level > kMaxDepth) { fail(n, "tojson: value nested too deeply"); return false; }
    if (out.size() > kMaxOutput) { fail(n, "string exceeds 64 MiB"); return false; }
    auto newline = [&](int lv) {
      if (indent < 0) return;
      out += '\n';
      out.append(static_cast<size_t>(indent) * static_cast<size_t>(lv), ' ');
    };
    switch (v.kind) {
      case Value::Kind::Undefined: fail(n, "tojson: value is undefined"); return false;
      case Value::Kind::Macro: fail(n, "tojson: a macro is not JSON serializable"); return false;
      case Value::Kind::None: out += "null"; return true;
      case Value::Kind::Bool: out += v.b ? "true" : "false"; return true;
      case Value::Kind::Int: out += std::to_string(v.i); return true;
      case Value::Kind::Float:
        if (std::isnan(v.f)) out += "NaN";
        else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
        else out += format_float(v.f);
        return true;
      case Value::Kind::String:
        out += nlohmann::ordered_json(v.s).dump(-1, ' ', ascii, nlohmann::json::error_handler_t::replace);
        return true;
      case Value::Kind::List: {
        if (v.list->empty()) { out += "[]"; return true; }
        out += '[';
        for (size_t k = 0; k < v.list->size(); ++k) {
          if (k) out += item_sep;
          newline(level + 1);
          if (!dump_json(n, (*v.list)[k], indent, level + 1, item_sep, key_sep, ascii, sort_keys, out)) return false;
        }
        newline(level);
        out += ']';
        return true;
      }
      case Value::Kind::Dict: {
        if (v.dict->empty()) { out += "{}"; return true; }
        std::vector<const std::pair<std::string, Value>*> entries;
        for (const auto& kv : *v.dict) entries.push_back(&kv);
        if (sort_keys) {
          std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
        }
        out += '{';
        for (size_t k = 0; k < entries.size(); ++k) {
          if (k) out += item_sep;
          newline(level + 1);
          out += nlohmann::ordered_json(entries[k]->first).dump(-1, ' ', ascii, nlohmann::json::error_handler_t::replace);
          out += key_sep;
          if (!dump_json(n, entries[k]->second, indent, level + 1, item_sep, key_sep, ascii, sort_keys, out)) return false;
        }
        newline(level);
        out += '}';
        return true;
      }
    }
    return false;
  }

  static std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    return out;
  }

  Value apply_filter(const Node& n, const std::string& f, const Args& args) {
    const Value v = args.pos.empty() ? Value() : args.pos[0];
    if (f == "trim") {
      const Value chars = args.get(1, "chars");
      return Value::str(strip(to_str(v), true, true, chars.kind == Value::Kind::String ? &chars.s : nullptr));
    }
    if (f == "length" || f == "count") {
      if (v.kind == Value::Kind::String) return Value::integer(static_cast<int64_t>(chars_of(v.s).size()));
      if (v.kind == Value::Kind::List) return Value::integer(static_cast<int64_t>(v.list->size()));
      if (v.kind == Value::Kind::Dict) return Value::integer(static_cast<int64_t>(v.dict->size()));
      if (v.is_undefined()) return Value::integer(0);
      fail(n, "object of type " + repr(v) + " has no len()");
      return Value();
    }
    if (f == "title") {  // jinja2's do_title: words start after whitespace, '-', '(', '{', '[', '<'
      std::string out = to_str(v);
      bool start = true;
      for (char& c : out) {
        const auto u = static_cast<unsigned char>(c);
        const bool sep = is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        if (!sep) c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
        start = sep;
      }
      return Value::str(std::move(out));
    }
    if (f == "upper" || f == "lower" || f == "capitalize") return Value::str(case_map(to_str(v), f));
    if (f == "default" || f == "d") {
      const bool boolean = truthy(args.get(2, "boolean"));
      const bool use_default = boolean ? !truthy(v) : v.is_undefined();
      return use_default ? (args.has(1, "default_value") ? args.get(1, "default_value") : Value::str("")) : v;
    }
    if (f == "first" || f == "last") {
      std::vector<Value> items = iterate(v);
      if (items.empty()) return Value();
      return f == "first" ? items.front() : items.back();
    }
    if (f == "join") {
      const std::string sep = to_str(args.get(1, "d"));
      const Value attribute = args.get(2, "attribute");
      std::string out;
      bool first = true;
      for (const Value& x : iterate(v)) {
        if (!first) out += sep;
        out += to_str(attribute.is_undefined() ? x : get_path(x, to_str(attribute)));
        first = false;
        if (out.size() > kMaxOutput) { fail(n, "string exceeds 64 MiB"); return Value(); }
      }
      return Value::str(std::move(out));
    }
    if (f == "tojson") {
      Args rest;
      rest.pos.assign(args.pos.begin() + (args.pos.empty() ? 0 : 1), args.pos.end());
      rest.kw = args.kw;
      return tojson(n, v, rest);
    }
    if (f == "string") return Value::str(to_str(v));
    if (f == "int") {
      const Value def = args.has(1, "default") ? args.get(1, "default") : Value::integer(0);
      if (v.kind == Value::Kind::String) {
        const std::string t = strip(v.s, true, true);
        char* end = nullptr;
        errno = 0;
        const long long x = std::strtoll(t.c_str(), &end, 10);
        if (!t.empty() && end && *end == '\0' && errno == 0) return Value::integer(x);
        const double d = std::strtod(t.c_str(), &end);
        if (!t.empty() && end && *end == '\0' && std::isfinite(d)) return Value::integer(static_cast<int64_t>(d));
        return def;
      }
      if (v.kind == Value::Kind::Float && !std::isfinite(v.f)) return def;
      return v.is_numeric() ? Value::integer(v.as_int()) : def;
    }
    if (f == "float") {
      const Value def = args.has(1, "default") ? args.get(1, "default") : Value::number(0.0);
      if (v.kind == Value::Kind::String) {
        const std::string t = strip(v.s, true, true);
        char* end = nullptr;
        const double d = std::strtod(t.c_str(), &end);
        return !t.empty() && end && *end == '\0' ? Value::number(d) : def;
      }
      return v.is_numeric() ? Value::number(v.as_double()) : def;
    }
    if (f == "bool") return Value::boolean(truthy(v));
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
    if (f == "round") {
      const int64_t prec = args.get(1, "precision").is_numeric() ? args.get(1, "precision").as_int() : 0;
      const std::string method = args.has(2, "method") ? to_str(args.get(2, "method")) : "common";
      const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(prec, -300, 300)));
      double x = v.as_double() * scale;
      x = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
      return Value::number(x / scale);
    }
    if (f == "replace") {
      std::vector<Value> margs = {args.get(1, "old"), args.get(2, "new")};
      if (args.has(3, "count")) margs.push_back(args.get(3, "count"));
      return method(n, Value::str(to_str(v)), "replace", margs);
    }
    if (f == "items") {
      if (v.is_undefined()) return Value::make_list();
      if (v.kind != Value::Kind::Dict) { fail(n, "Can only get item pairs from a mapping."); return Value(); }
      return method(n, v, "items", {});
    }
    if (f == "safe") return v.kind == Value::Kind::String ? v : Value::str(to_str(v));
    if (f == "e" || f == "escape" || f == "forceescape") return Value::str(html_escape(to_str(v)));
    if (f == "attr") return get_path(v, to_str(args.get(1, "name")));
    if (f == "map") {
      VList out;
      if (args.has(99, "attribute")) {
        const std::string attribute = to_str(args.get(99, "attribute"));
        const bool has_default = args.has(99, "default");
        for (const Value& x : iterate(v)) {
          Value y = get_path(x, attribute);
          if (y.is_undefined() && has_default) y = args.get(99, "default");
          out.push_back(std::move(y));
        }
        return Value::make_list(std::move(out));
      }
      if (args.pos.size() < 2) { fail(n, "map: needs a filter name or attribute="); return Value(); }
      const std::string name = to_str(args.pos[1]);
      for (const Value& x : iterate(v)) {
        Args sub;
        sub.pos.push_back(x);
        sub.pos.insert(sub.pos.end(), args.pos.begin() + 2, args.pos.end());
        sub.kw = args.kw;
        out.push_back(apply_filter(n, name, sub));
        if (failed()) return Value();
      }
      return Value::make_list(std::move(out));
    }
    if (f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr") {
      const bool by_attr = f == "selectattr" || f == "rejectattr";
      const bool want = f == "select" || f == "selectattr";
      const size_t first_arg = by_attr ? 2 : 1;
      const std::string attribute = by_attr ? to_str(args.get(1, "attribute")) : std::string();
      const bool has_test = args.pos.size() > first_arg;
      const std::string test_name = has_test ? to_str(args.pos[first_arg]) : std::string();
      std::vector<Value> extra(args.pos.begin() + static_cast<std::ptrdiff_t>(std::min(args.pos.size(), first_arg + 1)),
                               args.pos.end());
      VList out;
      for (const Value& x : iterate(v)) {
        const Value subject = by_attr ? get_path(x, attribute) : x;
        const bool r = has_test ? apply_test(n, test_name, subject, extra) : truthy(subject);
        if (failed()) return Value();
        if (r == want) out.push_back(x);
      }
      return Value::make_list(std::move(out));
    }
    if (f == "unique") {
      const bool cs = truthy(args.get(1, "case_sensitive"));
      const Value attribute = args.get(2, "attribute");
      VList out;
      std::vector<Value> seen;
      for (const Value& x : iterate(v)) {
        Value key = attribute.is_undefined() ? x : get_path(x, to_str(attribute));
        if (!cs && key.kind == Value::Kind::String) key = Value::str(lower_ascii(key.s));
        if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) continue;
        seen.push_back(key);
        out.push_back(x);
      }
      return Value::make_list(std::move(out));
    }
    if (f == "sort") {
      const Value attribute = args.get(3, "attribute");
      return sorted(n, iterate(v), truthy(args.get(1, "reverse")), truthy(args.get(2, "case_sensitive")),
                    attribute.is_undefined() ? std::string() : to_str(attribute));
    }
    if (f == "dictsort") {
      if (v.kind != Value::Kind::Dict) { fail(n, "dictsort: a mapping is required"); return Value(); }
      const bool by_value = to_str(args.get(2, "by")) == "value";
      VList pairs = method(n, v, "items", {}).list ? *method(n, v, "items", {}).list : VList();
      VList keyed;
      for (const Value& p : pairs) keyed.push_back(Value::make_list({(*p.list)[by_value ? 1 : 0], p}));
      Value s = sorted(n, keyed, truthy(args.get(3, "reverse")), truthy(args.get(1, "case_sensitive")), "0");
      VList out;
      if (s.list) for (const Value& x : *s.list) out.push_back((*x.list)[1]);
      return Value::make_list(std::move(out));
    }
    if (f == "sum") {
      const Value attribute = args.get(1, "attribute");
      Value acc = args.has(2, "start") ? args.get(2, "start") : Value::integer(0);
      for (const Value& x : iterate(v)) {
        const Value y = attribute.is_undefined() ? x : get_path(x, to_str(attribute));
        if (!acc.is_numeric() || !y.is_numeric()) { fail(n, "sum: values must be numbers"); return Value(); }
        if (acc.kind == Value::Kind::Float || y.kind == Value::Kind::Float) acc = Value::number(acc.as_double() + y.as_double());
        else acc = Value::integer(acc.as_int() + y.as_int());
      }
      return acc;
    }
    if (f == "min" || f == "max") {
      const bool cs = truthy(args.get(1, "case_sensitive"));
      const Value attribute = args.get(2, "attribute");
      Value best;
      Value best_key;
      for (const Value& x : iterate(v)) {
        const Value key = attribute.is_undefined() ? x : get_path(x, to_str(attribute));
        if (best.is_undefined() || (f == "min" ? less(n, key, best_key, cs) : less(n, best_key, key, cs))) {
          best = x;
          best_key = key;
        }
      }
      return best;
    }
    if (f == "indent") {
      const Value w = args.get(1, "width");
      const std::string pad = w.kind == Value::Kind::String ? w.s : std::string(static_cast<size_t>(std::clamp<int64_t>(w.is_numeric() ? w.as_int() : 4, 0, 1024)), ' ');
      const bool first = truthy(args.get(2, "first"));
      const bool blank = truthy(args.get(3, "blank"));
      std::string s = to_str(v);
      std::string out;
      size_t pos = 0;
      bool first_line = true;
      while (true) {
        const size_t nl = s.find('\n', pos);
        const std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        if ((!first_line || first) && (blank || !line.empty())) out += pad;
        out += line;
        if (nl == std::string::npos) break;
        out += '\n';
        pos = nl + 1;
        first_line = false;
        if (out.size() > kMaxOutput) { fail(n, "string exceeds 64 MiB"); return Value(); }
      }
      return Value::str(std::move(out));
    }
    if (f == "wordcount") {
      int64_t c = 0;
      bool in_word = false;
      for (char ch : to_str(v)) {
        const bool w = std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || static_cast<unsigned char>(ch) >= 0x80;
        if (w && !in_word) ++c;
        in_word = w;
      }
      return Value::integer(c);
    }
    if (f == "center") {
      const std::string s = to_str(v);
      const int64_t width = args.get(1, "width").is_numeric() ? std::min<int64_t>(args.get(1, "width").as_int(), 1 << 20) : 80;
      const int64_t len = static_cast<int64_t>(chars_of(s).size());
      if (width <= len) return Value::str(s);
      const int64_t total = width - len;
      const int64_t left = total / 2 + (total & width & 1);
      return Value::str(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
    }
    if (f == "batch" || f == "slice") {
      const Value cnt = args.get(1, f == "batch" ? "linecount" : "slices");
      const int64_t k = cnt.is_numeric() ? cnt.as_int() : 1;
      if (k <= 0) { fail(n, f + ": count must be positive"); return Value(); }
      VList items = iterate(v), out;
      if (f == "batch") {
        for (size_t i = 0; i < items.size(); i += static_cast<size_t>(k)) {
          VList chunk(items.begin() + static_cast<std::ptrdiff_t>(i),
                      items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), i + static_cast<size_t>(k))));
          out.push_back(Value::make_list(std::move(chunk)));
        }
      } else {
        const size_t per = items.size() / static_cast<size_t>(k), extra = items.size() % static_cast<size_t>(k);
        size_t off = 0;
        for (size_t i = 0; i < static_cast<size_t>(std::min<int64_t>(k, 1 << 20)); ++i) {
          const size_t len = per + (i < extra ? 1 : 0);
          out.push_back(Value::make_list(VList(items.begin() + static_cast<std::ptrdiff_t>(off),
                                               items.begin() + static_cast<std::ptrdiff_t>(off + len))));
          off += len;
        }
      }
      return Value::make_list(std::move(out));
    }
    fail(n, "unknown filter '" + f + "'");
    return Value();
  }

  Value test(const Node& n, int depth) {
    std::vector<Value> args = eval_args(n, 0, depth);
    if (failed()) return Value();
    const Value v = args[0];
    const std::vector<Value> extra(args.begin() + 1, args.end());
    const bool r = apply_test(n, n.name, v, extra);
    if (failed()) return Value();
    return Value::boolean(n.negated ? !r : r);
  }

  bool apply_test(const Node& n, const std::string& t, const Value& v, const std::vector<Value>& extra) {
    const Value x = extra.empty() ? Value() : extra[0];
    using K = Value::Kind;
    if (t == "defined") return !v.is_undefined();
    if (t == "undefined") return v.is_undefined();
    if (t == "none") return v.kind == K::None;
    if (t == "string") return v.kind == K::String;
    if (t == "number") return v.kind == K::Int || v.kind == K::Float || v.kind == K::Bool;
    if (t == "integer") return v.kind == K::Int;
    if (t == "float") return v.kind == K::Float;
    if (t == "boolean") return v.kind == K::Bool;
    if (t == "true") return v.kind == K::Bool && v.b;
    if (t == "false") return v.kind == K::Bool && !v.b;
    if (t == "mapping") return v.kind == K::Dict;
    if (t == "callable") return v.kind == K::Macro || v.is_undefined();  // jinja2's Undefined has __call__
    // jinja2's Undefined is iterable (and empty) and passes the sequence test
    if (t == "sequence" || t == "iterable") return v.kind == K::List || v.kind == K::String || v.kind == K::Dict || v.is_undefined();
    if (t == "even" || t == "odd") return v.is_numeric() && ((v.as_int() % 2 == 0) == (t == "even"));
    if (t == "divisibleby") return v.is_numeric() && x.is_numeric() && x.as_int() != 0 && v.as_int() % x.as_int() == 0;
    if (t == "eq" || t == "equalto" || t == "==") return equal(v, x);
    if (t == "ne" || t == "!=") return !equal(v, x);
    if (t == "sameas") return v.kind == x.kind && equal(v, x);
    if (t == "lt" || t == "lessthan" || t == "<") return less(n, v, x, true);
    if (t == "gt" || t == "greaterthan" || t == ">") return less(n, x, v, true);
    if (t == "le" || t == "<=") return !less(n, x, v, true);
    if (t == "ge" || t == ">=") return !less(n, v, x, true);
    if (t == "lower" || t == "upper") return v.kind == K::String && case_map(v.s, t) == v.s;
    if (t == "escaped") return false;
    if (t == "in") {
      if (x.kind == K::String) return x.s.find(to_str(v)) != std::string::npos;
      if (x.kind == K::List) return std::any_of(x.list->begin(), x.list->end(), [&](const Value& y) { return equal(y, v); });
      return x.get(to_str(v)) != nullptr;
    }
    if (t == "filter" || t == "test") return v.kind == K::String;
    fail(n, "unknown test '" + t + "'");
    return false;
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
  t.options_ = options;
  return t;
}

namespace {

template <typename J>
Value from_json(const J& j, int depth) {
  if (depth > kMaxDepth) return Value::none();
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string: return Value::str(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      Value l = Value::make_list();
      for (const auto& x : j) l.list->push_back(from_json(x, depth + 1));
      return l;
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::make_dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), from_json(it.value(), depth + 1));
      return d;
    }
    default: return Value::none();  // binary, discarded
  }
}

// transformers' _alias_reasoning_fields: {"thinking": r, **message, "reasoning_content": r}.
Value alias_reasoning(const Value& m) {
  if (m.kind != Value::Kind::Dict) return m;
  const Value* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    const Value* v = m.get(key);
    if (v != nullptr && v->kind != Value::Kind::None && !v->is_undefined()) { reasoning = v; break; }
  }
  if (reasoning == nullptr) return m;
  Value out = Value::make_dict();
  if (m.get("thinking") == nullptr) out.dict->emplace_back("thinking", *reasoning);
  for (const auto& kv : *m.dict) out.dict->emplace_back(kv.first, kv.second);
  out.set("thinking", m.get("thinking") ? *m.get("thinking") : *reasoning);
  out.set("reasoning_content", *reasoning);
  return out;
}

}  // namespace

struct ChatTemplate::Globals {
  std::unordered_map<std::string, Value> vars;
};

Result<std::string> ChatTemplate::render_globals(Globals& globals) const {
  if (!root_) return make_error(ErrorCode::InvalidArgument, "chat template: empty template");
  std::string out;
  Renderer r(out);
  r.clock = clock_;
  r.max_iterations = options_.max_loop_iterations;
  r.scopes.emplace_back(std::move(globals.vars));
  r.scopes.emplace_back();  // template-level sets live above the globals
  r.exec(*root_, 0);
  if (r.failed()) return make_error(ErrorCode::InvalidArgument, r.error);
  return out;
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                         const std::string& bos_token, const std::string& eos_token) const {
  Globals g;
  auto& globals = g.vars;
  Value msgs = Value::make_list();
  for (const ChatMessage& m : messages) {
    Value d = Value::make_dict();
    d.set("role", Value::str(m.role));
    d.set("content", Value::str(m.content));
    msgs.list->push_back(std::move(d));
  }
  globals["messages"] = msgs;
  globals["tools"] = Value::none();
  globals["documents"] = Value::none();
  globals["add_generation_prompt"] = Value::boolean(add_generation_prompt);
  globals["bos_token"] = Value::str(bos_token);
  globals["eos_token"] = Value::str(eos_token);
  return render_globals(g);
}

namespace {

template <typename J>
Status context_globals(const J& context, std::unordered_map<std::string, Value>& globals) {
  if (!context.is_object()) return make_error(ErrorCode::InvalidArgument, "chat template: context must be a JSON object");
  globals["tools"] = Value::none();
  globals["documents"] = Value::none();
  globals["add_generation_prompt"] = Value::boolean(false);
  for (auto it = context.begin(); it != context.end(); ++it) globals[it.key()] = from_json(it.value(), 0);
  auto m = globals.find("messages");
  if (m == globals.end()) {
    globals["messages"] = Value::make_list();
  } else if (m->second.kind == Value::Kind::List) {
    for (Value& msg : *m->second.list) msg = alias_reasoning(msg);
  }
  return ok_status();
}

}  // namespace

Result<std::string> ChatTemplate::render_json(const nlohmann::ordered_json& context) const {
  Globals g;
  GX_TRY(context_globals(context, g.vars));
  return render_globals(g);
}

Result<std::string> ChatTemplate::render_json(const nlohmann::json& context) const {
  Globals g;
  GX_TRY(context_globals(context, g.vars));
  return render_globals(g);
}

ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

}  // namespace geniex::tok
