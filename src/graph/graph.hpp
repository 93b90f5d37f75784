// Op IR: a Graph is a topologically ordered list of Nodes, each producing one tensor.
// Architectures build one per step; the scheduler places and plans it; backends run it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"

namespace geniex::graph {

enum class Op : uint8_t {
  Input,      // data supplied per step by the runtime (see InputKind)
  Weight,     // model weights (read-only, owned by the Model)
  GetRows,    // (src0 weights [K, V], src1 ids i32 [T]) -> f32 [K, T]
  RmsNorm,    // (src0 x [K, T], src1 weight [G]) -> x / rms(x) * weight, over each group
              // of G consecutive values (G == K: whole rows; G == head_dim: per head)
  MatMul,     // (src0 weights [K, N], src1 x f32 [K, T]) -> f32 [N, T]
  Add,        // (src0 [K, T], src1 [K, T] or [K]) -> sum; a [K] src1 is added to every row
  Rope,       // (src0 x [n_head * head_dim, T], src1 positions i32 [T], optional src2
              // frequency factors f32 [n_rot / 2]: pair i turns at theta_i / factor_i) -> rotated
  Attention,  // (q, k, v) for the batch; writes k, v into the KV cache of `layer`, then
              // attends every query over its sequence's cached keys (causal)
  SwiGlu,     // (src0 gate, src1 up) -> silu(gate) * up
  GeGlu,      // (src0 gate, src1 up) -> gelu_tanh(gate) * up (Gemma)
  Scale,      // (src0) -> src0 * scalar
  Copy,       // (src0) -> identical tensor on another backend (inserted by the scheduler)
  Count,
};
std::string_view op_name(Op op);

enum class InputKind : uint8_t { None, Tokens, Positions, OutputRows };

// A weight tensor as the model holds it: typed, shaped, pointing into the mapped file.
struct WeightRef {
  std::string name;
  DType type = DType::F32;
  int64_t ne[4] = {1, 1, 1, 1};
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  size_t row_stride() const;  // bytes between rows (ne[0] elements)
};

enum class RopeMode : uint8_t { Normal, NeoX };  // adjacent pairs vs halves

struct RopeParams {
  int32_t n_rot = 0;       // rotated dimensions per head
  int32_t head_dim = 0;
  RopeMode mode = RopeMode::Normal;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
};

struct AttentionParams {
  int32_t layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;
  int32_t window = 0;  // sliding window: a query at position p sees keys at p - window + 1 .. p; 0: all
};

constexpr int32_t kNoInput = -1;

struct Node {
  Op op = Op::Input;
  DType type = DType::F32;               // output element type
  std::array<int64_t, 4> ne = {1, 1, 1, 1};  // output shape, ne[0] innermost
  std::array<int32_t, 3> src = {kNoInput, kNoInput, kNoInput};
  std::string name;                      // "blk.3.attn_q", for plans, traces and debugging
  int32_t layer = -1;
  InputKind input = InputKind::None;
  const WeightRef* weight = nullptr;     // Op::Weight
  float eps = 0.0f;                      // Op::RmsNorm
  float scalar = 1.0f;                   // Op::Scale
  RopeParams rope;                       // Op::Rope
  AttentionParams attn;                  // Op::Attention

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  uint64_t nbytes() const;  // storage of the output (0 for weights: they are not activations)
  int n_inputs() const {
    int n = 0;
    for (int32_t s : src) n += s != kNoInput;
    return n;
  }
};

class Graph {
 public:
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  Node& mutable_node(int32_t id) { return nodes_[static_cast<size_t>(id)]; }
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  int32_t output() const { return output_; }
  void set_output(int32_t id) { output_ = id; }

  // Appends a node; inputs must already exist (keeps the list topologically ordered).
  int32_t add(Node node);

  // Builder helpers: each checks shapes with assertions (model code is ours; a mismatch is a
  // bug, not user input) and names the result.
  int32_t input(InputKind kind, int64_t n, std::string name);
  int32_t weight(const WeightRef& w);
  int32_t get_rows(int32_t table, int32_t ids, std::string name);
  int32_t rms_norm(int32_t x, int32_t w, float eps, std::string name, int32_t layer);
  int32_t matmul(int32_t w, int32_t x, std::string name, int32_t layer);
  int32_t add(int32_t a, int32_t b, std::string name, int32_t layer);
  // freq_factors: a Weight node of n_rot / 2 floats (Llama 3.1+ "llama3" scaling), or kNoInput.
  int32_t rope(int32_t x, int32_t pos, const RopeParams& p, std::string name, int32_t layer,
               int32_t freq_factors = kNoInput);
  int32_t attention(int32_t q, int32_t k, int32_t v, const AttentionParams& p, std::string name);
  int32_t swiglu(int32_t gate, int32_t up, std::string name, int32_t layer);
  int32_t geglu(int32_t gate, int32_t up, std::string name, int32_t layer);
  int32_t scale(int32_t x, float s, std::string name, int32_t layer);

  // Structural hash: ops, shapes, params and weight identities (not names). Two graphs with
  // equal signatures run identically, so a plan made for one serves the other.
  uint64_t signature() const;

 private:
  std::vector<Node> nodes_;
  int32_t output_ = kNoInput;
};

// "576x1" style shape string for plans and messages.
std::string shape_string(const Node& n);

}  // namespace geniex::graph
