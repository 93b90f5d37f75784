// Llama-family loader and graph builder: a straight sequence per layer of norm, attention,
// residual, norm, SwiGLU feed-forward, residual, every intermediate named.
#include "models/llama.hpp"

#include <cmath>
#include <string>

namespace geniex::models {

namespace {

std::string blk(int i, const char* name) { return "blk." + std::to_string(i) + "." + name; }

}  // namespace

Result<std::unique_ptr<LlamaModel>> LlamaModel::load(const gguf::File& file, LlamaVariant variant) {
  auto m = std::unique_ptr<LlamaModel>(new LlamaModel());
  m->variant_ = variant;
  HParams& hp = m->hp_;
  hp.architecture = variant == LlamaVariant::Qwen2 ? "qwen2" : variant == LlamaVariant::Qwen3 ? "qwen3" : "llama";
  const std::string a = hp.architecture + ".";
  GX_ASSIGN_OR_RETURN(hp.n_embd, get_count(file, a + "embedding_length"));
  GX_ASSIGN_OR_RETURN(hp.n_layer, get_count(file, a + "block_count"));
  GX_ASSIGN_OR_RETURN(hp.n_head, get_count(file, a + "attention.head_count"));
  GX_ASSIGN_OR_RETURN(hp.n_ff, get_count(file, a + "feed_forward_length"));
  hp.n_head_kv = hp.n_head;
  if (file.find(a + "attention.head_count_kv") != nullptr) {
    GX_ASSIGN_OR_RETURN(hp.n_head_kv, get_count(file, a + "attention.head_count_kv"));
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    return make_error(ErrorCode::InvalidFormat, "head_count " + std::to_string(hp.n_head) +
                                                    " is not a multiple of head_count_kv " +
                                                    std::to_string(hp.n_head_kv));
  }
  hp.head_dim = hp.n_embd / hp.n_head;
  if (file.find(a + "attention.key_length") != nullptr) {
    GX_ASSIGN_OR_RETURN(hp.head_dim, get_count(file, a + "attention.key_length"));
  }
  if (hp.head_dim % 2 != 0) {
    return make_error(ErrorCode::InvalidFormat, "head dimension " + std::to_string(hp.head_dim) + " is odd");
  }
  hp.n_rot = hp.head_dim;
  if (file.find(a + "rope.dimension_count") != nullptr) {
    GX_ASSIGN_OR_RETURN(hp.n_rot, get_count(file, a + "rope.dimension_count"));
  }
  if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
    return make_error(ErrorCode::InvalidFormat, "rope.dimension_count " + std::to_string(hp.n_rot) +
                                                    " does not fit head dimension " +
                                                    std::to_string(hp.head_dim));
  }
  hp.n_ctx_train = 4096;
  if (file.find(a + "context_length") != nullptr) {
    GX_ASSIGN_OR_RETURN(hp.n_ctx_train, get_count(file, a + "context_length"));
  }
  GX_ASSIGN_OR_RETURN(const double eps, file.get_f64(a + "attention.layer_norm_rms_epsilon"));
  hp.rms_eps = static_cast<float>(eps);
  if (file.find(a + "rope.freq_base") != nullptr) {
    GX_ASSIGN_OR_RETURN(const double base, file.get_f64(a + "rope.freq_base"));
    hp.rope_base = static_cast<float>(base);
  }
  if (const gguf::Value* type = file.find(a + "rope.scaling.type")) {
    const std::string* s = type->as_string();
    if (s != nullptr && *s == "linear") {
      GX_ASSIGN_OR_RETURN(const double factor, file.get_f64(a + "rope.scaling.factor"));
      if (factor > 0) hp.rope_scale = static_cast<float>(1.0 / factor);
    } else if (s != nullptr && *s != "none") {
      return make_error(ErrorCode::Unsupported, "rope scaling type '" + *s + "' is not supported yet");
    }
  }

  // Mistral 7B v0.1 attends to the last 4,096 positions only. llama.cpp's converter drops the
  // window (its "llama" graph has none); GenieX's HF import and convert keep it under this key.
  if (file.find(a + "attention.sliding_window") != nullptr) {
    GX_ASSIGN_OR_RETURN(m->window_, get_count(file, a + "attention.sliding_window"));
  }

  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr) return make_error(ErrorCode::NotFound, "model is missing tensor 'token_embd.weight'");
  hp.n_vocab = static_cast<int32_t>(embd->ne[1]);
  const int64_t d = hp.n_embd;
  const int64_t q_dim = int64_t{hp.n_head} * hp.head_dim;
  const int64_t kv_dim = int64_t{hp.n_head_kv} * hp.head_dim;
  GX_ASSIGN_OR_RETURN(m->tok_embd_, load_weight(file, "token_embd.weight", {d, hp.n_vocab}));
  GX_ASSIGN_OR_RETURN(m->output_norm_, load_weight(file, "output_norm.weight", {d}));
  if (file.find_tensor("output.weight") != nullptr) {
    GX_ASSIGN_OR_RETURN(m->output_, load_weight(file, "output.weight", {d, hp.n_vocab}));
  } else {
    m->output_ = m->tok_embd_;
    hp.tied_output = true;
  }
  // Llama 3.1+ RoPE scaling ("llama3"): the converter stores one divisor per rotated pair.
  if (file.find_tensor("rope_freqs.weight") != nullptr) {
    GX_ASSIGN_OR_RETURN(m->rope_freqs_, load_weight(file, "rope_freqs.weight", {hp.n_rot / 2}));
  }
  m->layers_.resize(static_cast<size_t>(hp.n_layer));
  for (int i = 0; i < hp.n_layer; ++i) {
    LlamaLayer& L = m->layers_[static_cast<size_t>(i)];
    GX_ASSIGN_OR_RETURN(L.attn_norm, load_weight(file, blk(i, "attn_norm.weight"), {d}));
    GX_ASSIGN_OR_RETURN(L.wq, load_weight(file, blk(i, "attn_q.weight"), {d, q_dim}));
    GX_ASSIGN_OR_RETURN(L.wk, load_weight(file, blk(i, "attn_k.weight"), {d, kv_dim}));
    GX_ASSIGN_OR_RETURN(L.wv, load_weight(file, blk(i, "attn_v.weight"), {d, kv_dim}));
    GX_ASSIGN_OR_RETURN(L.wo, load_weight(file, blk(i, "attn_output.weight"), {q_dim, d}));
    GX_ASSIGN_OR_RETURN(L.ffn_norm, load_weight(file, blk(i, "ffn_norm.weight"), {d}));
    GX_ASSIGN_OR_RETURN(L.ffn_gate, load_weight(file, blk(i, "ffn_gate.weight"), {d, hp.n_ff}));
    GX_ASSIGN_OR_RETURN(L.ffn_up, load_weight(file, blk(i, "ffn_up.weight"), {d, hp.n_ff}));
    GX_ASSIGN_OR_RETURN(L.ffn_down, load_weight(file, blk(i, "ffn_down.weight"), {hp.n_ff, d}));
    if (variant == LlamaVariant::Qwen2) {
      GX_ASSIGN_OR_RETURN(L.bq, load_weight(file, blk(i, "attn_q.bias"), {q_dim}));
      GX_ASSIGN_OR_RETURN(L.bk, load_weight(file, blk(i, "attn_k.bias"), {kv_dim}));
      GX_ASSIGN_OR_RETURN(L.bv, load_weight(file, blk(i, "attn_v.bias"), {kv_dim}));
    }
    if (variant == LlamaVariant::Qwen3) {
      GX_ASSIGN_OR_RETURN(L.q_norm, load_weight(file, blk(i, "attn_q_norm.weight"), {hp.head_dim}));
      GX_ASSIGN_OR_RETURN(L.k_norm, load_weight(file, blk(i, "attn_k_norm.weight"), {hp.head_dim}));
    }
  }
  // Norm weights are read as f32 by every backend.
  for (const graph::WeightRef* w : m->weights()) {
    if (w->ne[1] == 1 && w->type != DType::F32) {
      return make_error(ErrorCode::Unsupported,
                        "tensor '" + w->name + "' is " + std::string(dtype_name(w->type)) + ", expected f32");
    }
  }
  return m;
}

std::vector<const graph::WeightRef*> LlamaModel::weights() const {
  std::vector<const graph::WeightRef*> out{&tok_embd_, &output_norm_};
  if (!hp_.tied_output) out.push_back(&output_);
  if (!rope_freqs_.name.empty()) out.push_back(&rope_freqs_);
  for (const LlamaLayer& L : layers_) {
    for (const graph::WeightRef* w : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_norm,
                                      &L.ffn_gate, &L.ffn_up, &L.ffn_down, &L.bq, &L.bk, &L.bv,
                                      &L.q_norm, &L.k_norm}) {
      if (!w->name.empty()) out.push_back(w);
    }
  }
  return out;
}

graph::Graph LlamaModel::build_graph(const StepShape& shape) const {
  graph::Graph g;
  const HParams& hp = hp_;
  const int32_t tokens = g.input(graph::InputKind::Tokens, shape.n_tokens, "inp_tokens");
  const int32_t pos = g.input(graph::InputKind::Positions, shape.n_tokens, "inp_pos");
  int32_t x = g.get_rows(g.weight(tok_embd_), tokens, "inp_embd");  // (n_embd, T)

  graph::RopeParams rope;
  rope.n_rot = hp.n_rot;
  rope.head_dim = hp.head_dim;
  // llama.cpp's converter permutes Llama's q/k rows for adjacent-pair rotation; Qwen keeps
  // Hugging Face's layout, which rotates halves (NeoX).
  rope.mode = variant_ == LlamaVariant::Llama ? graph::RopeMode::Normal : graph::RopeMode::NeoX;
  rope.freq_base = hp.rope_base;
  rope.freq_scale = hp.rope_scale;
  const int32_t freq_factors = rope_freqs_.name.empty() ? graph::kNoInput : g.weight(rope_freqs_);
  graph::AttentionParams attn;
  attn.n_head = hp.n_head;
  attn.n_head_kv = hp.n_head_kv;
  attn.head_dim = hp.head_dim;
  attn.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  attn.window = window_;

  for (int i = 0; i < hp.n_layer; ++i) {
    const LlamaLayer& L = layers_[static_cast<size_t>(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    const int32_t h = g.rms_norm(x, g.weight(L.attn_norm), hp.rms_eps, p + "attn_norm", i);
    int32_t q = g.matmul(g.weight(L.wq), h, p + "attn_q", i);  // (n_head * head_dim, T)
    int32_t k = g.matmul(g.weight(L.wk), h, p + "attn_k", i);  // (n_head_kv * head_dim, T)
    int32_t v = g.matmul(g.weight(L.wv), h, p + "attn_v", i);
    if (!L.bq.name.empty()) {
      q = g.add(q, g.weight(L.bq), p + "attn_q_bias", i);
      k = g.add(k, g.weight(L.bk), p + "attn_k_bias", i);
      v = g.add(v, g.weight(L.bv), p + "attn_v_bias", i);
    }
    if (!L.q_norm.name.empty()) {
      q = g.rms_norm(q, g.weight(L.q_norm), hp.rms_eps, p + "attn_q_norm", i);
      k = g.rms_norm(k, g.weight(L.k_norm), hp.rms_eps, p + "attn_k_norm", i);
    }
    q = g.rope(q, pos, rope, p + "attn_q_rope", i, freq_factors);
    k = g.rope(k, pos, rope, p + "attn_k_rope", i, freq_factors);
    attn.layer = i;
    const int32_t a = g.attention(q, k, v, attn, p + "attn");
    const int32_t o = g.matmul(g.weight(L.wo), a, p + "attn_out", i);  // (n_embd, T)
    x = g.add(x, o, p + "attn_residual", i);
    if (i == hp.n_layer - 1 && shape.n_outputs < shape.n_tokens) {
      // Only the rows whose logits are wanted go through the last FFN and the output head.
      const int32_t rows = g.input(graph::InputKind::OutputRows, shape.n_outputs, "inp_out_ids");
      x = g.get_rows(x, rows, p + "out_rows");
    }
    const int32_t hf = g.rms_norm(x, g.weight(L.ffn_norm), hp.rms_eps, p + "ffn_norm", i);
    const int32_t gate = g.matmul(g.weight(L.ffn_gate), hf, p + "ffn_gate", i);  // (n_ff, T)
    const int32_t up = g.matmul(g.weight(L.ffn_up), hf, p + "ffn_up", i);
    const int32_t act = g.swiglu(gate, up, p + "ffn_swiglu", i);
    const int32_t down = g.matmul(g.weight(L.ffn_down), act, p + "ffn_down", i);  // (n_embd, T)
    x = g.add(x, down, p + "ffn_residual", i);
  }
  x = g.rms_norm(x, g.weight(output_norm_), hp.rms_eps, "output_norm", -1);
  const int32_t logits = g.matmul(g.weight(output_), x, "output", -1);  // (n_vocab, n_out)
  g.set_output(logits);
  return g;
}

}  // namespace geniex::models
