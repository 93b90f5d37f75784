// Llama family (Llama 2/3/3.1/3.2, SmolLM2, Mistral 7B v0.1 with its sliding window, v0.3) and its close relatives that differ
// only by a few tensors: Qwen2/2.5 (biases on q, k, v; NeoX RoPE) and Qwen3 (per-head RMSNorm
// on q and k; NeoX RoPE). RMSNorm, RoPE, grouped-query attention, SwiGLU.
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
  graph::WeightRef bq, bk, bv;         // Qwen2: (n_head * head_dim), (n_head_kv * head_dim) x2
  graph::WeightRef q_norm, k_norm;     // Qwen3: (head_dim)
};

enum class LlamaVariant { Llama, Qwen2, Qwen3 };

class LlamaModel final : public Architecture {
 public:
  // `variant` follows general.architecture: "llama", "qwen2", "qwen3".
  static Result<std::unique_ptr<LlamaModel>> load(const gguf::File& file,
                                                  LlamaVariant variant = LlamaVariant::Llama);

  const HParams& hparams() const override { return hp_; }
  graph::Graph build_graph(const StepShape& shape) const override;
  std::vector<const graph::WeightRef*> weights() const override;

 private:
  HParams hp_;
  LlamaVariant variant_ = LlamaVariant::Llama;
  graph::WeightRef tok_embd_;     // (n_embd, n_vocab)
  graph::WeightRef output_norm_;  // (n_embd)
  graph::WeightRef output_;       // (n_embd, n_vocab); == tok_embd_ when tied
  graph::WeightRef rope_freqs_;   // (n_rot / 2) f32 frequency factors; empty name when absent
  int32_t window_ = 0;            // Mistral 7B v0.1: sliding attention window (0 = none)
  std::vector<LlamaLayer> layers_;
};

}  // namespace geniex::models
