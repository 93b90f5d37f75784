// Llama family (Llama 2/3, SmolLM2, ...): RMSNorm, RoPE, grouped-query attention, SwiGLU.
#pragma once

#include <memory>
#include <vector>

#include "models/architecture.hpp"

namespace geniex::models {

struct LlamaLayer {
  graph::WeightRef attn_norm;  // (n_embd)
  graph::WeightRef wq;         // (n_embd, n_head * head_dim)
  graph::WeightRef wk;         // (n_embd, n_head_kv * head_dim)
  graph::WeightRef wv;         // (n_embd, n_head_kv * head_dim)
  graph::WeightRef wo;         // (n_head * head_dim, n_embd)
  graph::WeightRef ffn_norm;   // (n_embd)
  graph::WeightRef ffn_gate;   // (n_embd, n_ff)
  graph::WeightRef ffn_up;     // (n_embd, n_ff)
  graph::WeightRef ffn_down;   // (n_ff, n_embd)
};

class LlamaModel final : public Architecture {
 public:
  static Result<std::unique_ptr<LlamaModel>> load(const gguf::File& file);

  const HParams& hparams() const override { return hp_; }
  graph::Graph build_graph(const StepShape& shape) const override;
  std::vector<const graph::WeightRef*> weights() const override;

 private:
  HParams hp_;
  graph::WeightRef tok_embd_;     // (n_embd, n_vocab)
  graph::WeightRef output_norm_;  // (n_embd)
  graph::WeightRef output_;       // (n_embd, n_vocab); == tok_embd_ when tied
  graph::WeightRef rope_freqs_;   // (n_rot / 2) f32 frequency factors; empty name when absent
  std::vector<LlamaLayer> layers_;
};

}  // namespace geniex::models
