// Gemma 3 (text): embeddings scaled by sqrt(n_embd); per layer RMSNorm before and after both
// attention and the feed-forward; per-head RMSNorm on q and k; GELU-tanh gated feed-forward;
// local layers with a sliding window and their own RoPE base alternating with global layers
// (five local, then one global); output tied to the embeddings.
#pragma once

#include <memory>
#include <vector>

#include "models/architecture.hpp"

namespace geniex::models {

struct Gemma3Layer {
  graph::WeightRef attn_norm;       // (n_embd)
  graph::WeightRef wq;              // (n_embd, n_head * head_dim)
  graph::WeightRef wk;              // (n_embd, n_head_kv * head_dim)
  graph::WeightRef wv;              // (n_embd, n_head_kv * head_dim)
  graph::WeightRef q_norm;          // (head_dim)
  graph::WeightRef k_norm;          // (head_dim)
  graph::WeightRef wo;              // (n_head * head_dim, n_embd)
  graph::WeightRef post_attn_norm;  // (n_embd)
  graph::WeightRef ffn_norm;        // (n_embd)
  graph::WeightRef ffn_gate;        // (n_embd, n_ff)
  graph::WeightRef ffn_up;          // (n_embd, n_ff)
  graph::WeightRef ffn_down;        // (n_ff, n_embd)
  graph::WeightRef post_ffn_norm;   // (n_embd)
  bool local = false;               // sliding-window layer
};

class Gemma3Model final : public Architecture {
 public:
  static Result<std::unique_ptr<Gemma3Model>> load(const gguf::File& file);

  const HParams& hparams() const override { return hp_; }
  graph::Graph build_graph(const StepShape& shape) const override;
  std::vector<const graph::WeightRef*> weights() const override;

 private:
  HParams hp_;
  int32_t window_ = 0;              // sliding window of the local layers
  float rope_base_local_ = 10000.0f;
  float attn_scale_ = 1.0f;         // applied to q before attention
  graph::WeightRef tok_embd_;       // (n_embd, n_vocab), also the output head
  graph::WeightRef output_norm_;    // (n_embd)
  std::vector<Gemma3Layer> layers_;
};

}  // namespace geniex::models
