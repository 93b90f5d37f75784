// Graph construction helpers with shape checks, and the structural signature used as the
// plan-cache key.
#include "graph/graph.hpp"

#include <cstring>
#include <utility>

#include "core/assert.hpp"

namespace geniex::graph {

std::string_view op_name(Op op) {
  switch (op) {
    case Op::Input: return "input";
    case Op::Weight: return "weight";
    case Op::GetRows: return "get_rows";
    case Op::RmsNorm: return "rms_norm";
    case Op::MatMul: return "matmul";
    case Op::Add: return "add";
    case Op::Rope: return "rope";
    case Op::Attention: return "attention";
    case Op::SwiGlu: return "swiglu";
    case Op::GeGlu: return "geglu";
    case Op::Scale: return "scale";
    case Op::Copy: return "copy";
    case Op::Count: break;
  }
  return "?";
}

size_t WeightRef::row_stride() const { return static_cast<size_t>(row_bytes(type, ne[0])); }

uint64_t Node::nbytes() const {
  if (op == Op::Weight) return 0;
  return static_cast<uint64_t>(row_bytes(type, ne[0]) * rows());
}

int32_t Graph::add(Node node) {
  for (int32_t s : node.src) GX_ASSERT(s == kNoInput || (s >= 0 && s < size()));
  nodes_.push_back(std::move(node));
  return size() - 1;
}

int32_t Graph::input(InputKind kind, int64_t n, std::string name) {
  Node node;
  node.op = Op::Input;
  node.type = DType::I32;
  node.ne = {n, 1, 1, 1};
  node.input = kind;
  node.name = std::move(name);
  return add(std::move(node));
}

int32_t Graph::weight(const WeightRef& w) {
  Node node;
  node.op = Op::Weight;
  node.type = w.type;
  node.ne = {w.ne[0], w.ne[1], w.ne[2], w.ne[3]};
  node.weight = &w;
  node.name = w.name;
  return add(std::move(node));
}

int32_t Graph::get_rows(int32_t table, int32_t ids, std::string name) {
  const Node& t = node(table);
  const Node& i = node(ids);
  GX_ASSERT(i.type == DType::I32);
  Node node;
  node.op = Op::GetRows;
  node.ne = {t.ne[0], i.ne[0], 1, 1};
  node.src = {table, ids, kNoInput};
  node.name = std::move(name);
  return add(std::move(node));
}

int32_t Graph::rms_norm(int32_t x, int32_t w, float eps, std::string name, int32_t layer) {
  // A weight shorter than the row normalizes each group of w.ne[0] values on its own
  // (per-head q/k norms).
  GX_ASSERT(node(w).ne[0] > 0 && node(x).ne[0] % node(w).ne[0] == 0);
  Node node;
  node.op = Op::RmsNorm;
  node.ne = this->node(x).ne;
  node.src = {x, w, kNoInput};
  node.eps = eps;
  node.name = std::move(name);
  node.layer = layer;
  return add(std::move(node));
}

int32_t Graph::matmul(int32_t w, int32_t x, std::string name, int32_t layer) {
  const Node& wn = node(w);
  const Node& xn = node(x);
  GX_ASSERT(wn.ne[0] == xn.ne[0]);
  GX_ASSERT(xn.type == DType::F32);
  Node node;
  node.op = Op::MatMul;
  node.ne = {wn.ne[1], xn.ne[1], 1, 1};
  node.src = {w, x, kNoInput};
  node.name = std::move(name);
  node.layer = layer;
  return add(std::move(node));
}

int32_t Graph::add(int32_t a, int32_t b, std::string name, int32_t layer) {
  // b is either a's shape or one row of it, added to every row (a bias).
  GX_ASSERT(node(a).ne == node(b).ne || (node(b).ne[0] == node(a).ne[0] && node(b).rows() == 1));
  Node node;
  node.op = Op::Add;
  node.ne = this->node(a).ne;
  node.src = {a, b, kNoInput};
  node.name = std::move(name);
  node.layer = layer;
  return add(std::move(node));
}

int32_t Graph::rope(int32_t x, int32_t pos, const RopeParams& p, std::string name, int32_t layer,
                    int32_t freq_factors) {
  const Node& xn = node(x);
  GX_ASSERT(p.head_dim > 0 && xn.ne[0] % p.head_dim == 0 && p.n_rot <= p.head_dim);
  GX_ASSERT(node(pos).ne[0] == xn.ne[1]);
  if (freq_factors != kNoInput) {
    const Node& f = node(freq_factors);
    GX_ASSERT(f.op == Op::Weight && f.type == DType::F32 && f.n_elements() == p.n_rot / 2);
  }
  Node node;
  node.op = Op::Rope;
  node.ne = xn.ne;
  node.src = {x, pos, freq_factors};
  node.rope = p;
  node.name = std::move(name);
  node.layer = layer;
  return add(std::move(node));
}

int32_t Graph::attention(int32_t q, int32_t k, int32_t v, const AttentionParams& p,
                         std::string name) {
  const Node& qn = node(q);
  GX_ASSERT(qn.ne[0] == int64_t{p.n_head} * p.head_dim);
  GX_ASSERT(node(k).ne[0] == int64_t{p.n_head_kv} * p.head_dim);
  GX_ASSERT(node(v).ne == node(k).ne);
  GX_ASSERT(p.n_head_kv > 0 && p.n_head % p.n_head_kv == 0);
  Node node;
  node.op = Op::Attention;
  node.ne = qn.ne;
  node.src = {q, k, v};
  node.attn = p;
  node.name = std::move(name);
  node.layer = p.layer;
  return add(std::move(node));
}

int32_t Graph::swiglu(int32_t gate, int32_t up, std::string name, int32_t layer) {
  GX_ASSERT(node(gate).ne == node(up).ne);
  Node node;
  node.op = Op::SwiGlu;
  node.ne = this->node(gate).ne;
  node.src = {gate, up, kNoInput};
  node.name = std::move(name);
  node.layer = layer;
  return add(std::move(node));
}

int32_t Graph::geglu(int32_t gate, int32_t up, std::string name, int32_t layer) {
  GX_ASSERT(node(gate).ne == node(up).ne);
  Node node;
  node.op = Op::GeGlu;
  node.ne = this->node(gate).ne;
  node.src = {gate, up, kNoInput};
  node.name = std::move(name);
  node.layer = layer;
  return add(std::move(node));
}

int32_t Graph::scale(int32_t x, float s, std::string name, int32_t layer) {
  Node node;
  node.op = Op::Scale;
  node.ne = this->node(x).ne;
  node.src = {x, kNoInput, kNoInput};
  node.scalar = s;
  node.name = std::move(name);
  node.layer = layer;
  return add(std::move(node));
}

namespace {
// FNV-1a over the bytes of plain fields.
struct Hasher {
  uint64_t h = 1469598103934665603ull;
  template <typename T>
  void mix(const T& v) {
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    for (unsigned char b : bytes) {
      h ^= b;
      h *= 1099511628211ull;
    }
  }
};
}  // namespace

uint64_t Graph::signature() const {
  Hasher hs;
  hs.mix(output_);
  for (const Node& n : nodes_) {
    hs.mix(n.op);
    hs.mix(n.type);
    hs.mix(n.ne);
    hs.mix(n.src);
    hs.mix(n.input);
    hs.mix(n.weight);
    hs.mix(n.eps);
    hs.mix(n.rope.n_rot);
    hs.mix(n.rope.head_dim);
    hs.mix(n.rope.mode);
    hs.mix(n.rope.freq_base);
    hs.mix(n.rope.freq_scale);
    hs.mix(n.attn.layer);
    hs.mix(n.attn.n_head);
    hs.mix(n.attn.n_head_kv);
    hs.mix(n.attn.head_dim);
    hs.mix(n.attn.scale);
    hs.mix(n.attn.window);
    hs.mix(n.scalar);
  }
  return hs.h;
}

std::string shape_string(const Node& n) {
  std::string s = std::to_string(n.ne[0]);
  int last = 3;
  while (last > 1 && n.ne[static_cast<size_t>(last)] == 1) --last;
  for (int i = 1; i <= last; ++i) s += "x" + std::to_string(n.ne[static_cast<size_t>(i)]);
  return s;
}

}  // namespace geniex::graph
