// Gemma 3 loader and graph builder. Facts from the model's published configuration and
// llama.cpp's GGUF conventions: the converter stores RMSNorm weights with Gemma's "+1" already
// added; local (sliding-window) layers use RoPE base 10000, global layers the file's
// rope.freq_base; every sixth layer is global; q is scaled by 1/sqrt(head_dim) before attention
// (query_pre_attn_scalar = head_dim for the published sizes except 27B, which uses
// n_embd / n_head).
#include "models/gemma3.hpp"

#include <cmath>
#include <string>

namespace geniex::models {

namespace {

std::string blk(int i, const char* name) { return "blk." + std::to_string(i) + "." + name; }

constexpr int kGlobalEvery = 6;  // layers 5, 11, 17, ... are global

}  // namespace

Result<std::unique_ptr<Gemma3Model>> Gemma3Model::load(const gguf::File& file) {
  auto m = std::unique_ptr<Gemma3Model>(new Gemma3Model());
  HParams& hp = m->hp_;
  const std::string a = "gemma3.";
  hp.architecture = "gemma3";
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
  if (hp.head_dim % 2 != 0 || hp.head_dim > 512) {
    return make_error(ErrorCode::InvalidFormat, "head dimension " + std::to_string(hp.head_dim) +
                                                    " is odd or over 512");
  }
  hp.n_rot = hp.head_dim;
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
    if (s != nullptr && *s == "linear") {  // global layers only (Gemma 3 4B and larger)
      GX_ASSIGN_OR_RETURN(const double factor, file.get_f64(a + "rope.scaling.factor"));
      if (factor > 0) hp.rope_scale = static_cast<float>(1.0 / factor);
    } else if (s != nullptr && *s != "none") {
      return make_error(ErrorCode::Unsupported, "gemma3: rope scaling type '" + *s + "' is not supported");
    }
  }
  if (file.find(a + "attention.sliding_window") == nullptr) {
    return make_error(ErrorCode::NotFound, "gemma3: metadata '" + a + "attention.sliding_window' is missing");
  }
  GX_ASSIGN_OR_RETURN(m->window_, get_count(file, a + "attention.sliding_window"));
  m->attn_scale_ = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));

  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr) return make_error(ErrorCode::NotFound, "model is missing tensor 'token_embd.weight'");
  hp.n_vocab = static_cast<int32_t>(embd->ne[1]);
  hp.tied_output = true;
  if (file.find_tensor("output.weight") != nullptr) {
    return make_error(ErrorCode::Unsupported, "gemma3: a separate output.weight is not expected (Gemma ties it)");
  }
  const int64_t d = hp.n_embd;
  const int64_t q_dim = int64_t{hp.n_head} * hp.head_dim;
  const int64_t kv_dim = int64_t{hp.n_head_kv} * hp.head_dim;
  GX_ASSIGN_OR_RETURN(m->tok_embd_, load_weight(file, "token_embd.weight", {d, hp.n_vocab}));
  GX_ASSIGN_OR_RETURN(m->output_norm_, load_weight(file, "output_norm.weight", {d}));
  // Which layers slide: every sixth is global, unless a per-layer bool array says otherwise
  // (GenieX's Hugging Face import writes one for checkpoints whose layer_types differ).
  std::vector<bool> local(static_cast<size_t>(hp.n_layer));
  for (int i = 0; i < hp.n_layer; ++i) local[static_cast<size_t>(i)] = (i + 1) % kGlobalEvery != 0;
  if (const gguf::Value* pattern = file.find(a + "attention.sliding_window_pattern")) {
    const gguf::Array* arr = pattern->as_array();
    if (arr == nullptr || arr->elem_type != gguf::ValueType::Bool || arr->items.size() != local.size()) {
      return make_error(ErrorCode::InvalidFormat, "gemma3: metadata '" + a +
                                                      "attention.sliding_window_pattern' is not an array of " +
                                                      std::to_string(hp.n_layer) + " bools");
    }
    for (size_t i = 0; i < local.size(); ++i) local[i] = arr->items[i].as_bool().value_or(true);
  }
  m->layers_.resize(static_cast<size_t>(hp.n_layer));
  for (int i = 0; i < hp.n_layer; ++i) {
    Gemma3Layer& L = m->layers_[static_cast<size_t>(i)];
    L.local = local[static_cast<size_t>(i)];
    GX_ASSIGN_OR_RETURN(L.attn_norm, load_weight(file, blk(i, "attn_norm.weight"), {d}));
    GX_ASSIGN_OR_RETURN(L.wq, load_weight(file, blk(i, "attn_q.weight"), {d, q_dim}));
    GX_ASSIGN_OR_RETURN(L.wk, load_weight(file, blk(i, "attn_k.weight"), {d, kv_dim}));
    GX_ASSIGN_OR_RETURN(L.wv, load_weight(file, blk(i, "attn_v.weight"), {d, kv_dim}));
    GX_ASSIGN_OR_RETURN(L.q_norm, load_weight(file, blk(i, "attn_q_norm.weight"), {hp.head_dim}));
    GX_ASSIGN_OR_RETURN(L.k_norm, load_weight(file, blk(i, "attn_k_norm.weight"), {hp.head_dim}));
    GX_ASSIGN_OR_RETURN(L.wo, load_weight(file, blk(i, "attn_output.weight"), {q_dim, d}));
    GX_ASSIGN_OR_RETURN(L.post_attn_norm, load_weight(file, blk(i, "post_attention_norm.weight"), {d}));
    GX_ASSIGN_OR_RETURN(L.ffn_norm, load_weight(file, blk(i, "ffn_norm.weight"), {d}));
    GX_ASSIGN_OR_RETURN(L.ffn_gate, load_weight(file, blk(i, "ffn_gate.weight"), {d, hp.n_ff}));
    GX_ASSIGN_OR_RETURN(L.ffn_up, load_weight(file, blk(i, "ffn_up.weight"), {d, hp.n_ff}));
    GX_ASSIGN_OR_RETURN(L.ffn_down, load_weight(file, blk(i, "ffn_down.weight"), {hp.n_ff, d}));
    GX_ASSIGN_OR_RETURN(L.post_ffn_norm, load_weight(file, blk(i, "post_ffw_norm.weight"), {d}));
  }
  for (const graph::WeightRef* w : m->weights()) {
    if (w->ne[1] == 1 && w->type != DType::F32) {
      return make_error(ErrorCode::Unsupported,
                        "tensor '" + w->name + "' is " + std::string(dtype_name(w->type)) + ", expected f32");
    }
  }
  return m;
}

std::vector<const graph::WeightRef*> Gemma3Model::weights() const {
  std::vector<const graph::WeightRef*> out{&tok_embd_, &output_norm_};
  for (const Gemma3Layer& L : layers_) {
    for (const graph::WeightRef* w : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.q_norm, &L.k_norm, &L.wo,
                                      &L.post_attn_norm, &L.ffn_norm, &L.ffn_gate, &L.ffn_up, &L.ffn_down,
                                      &L.post_ffn_norm}) {
      out.push_back(w);
    }
  }
  return out;
}

graph::Graph Gemma3Model::build_graph(const StepShape& shape) const {
  graph::Graph g;
  const HParams& hp = hp_;
  const int32_t tokens = g.input(graph::InputKind::Tokens, shape.n_tokens, "inp_tokens");
  const int32_t pos = g.input(graph::InputKind::Positions, shape.n_tokens, "inp_pos");
  const int32_t embd = g.weight(tok_embd_);
  int32_t x = g.get_rows(embd, tokens, "inp_embd");  // (n_embd, T)
  x = g.scale(x, std::sqrt(static_cast<float>(hp.n_embd)), "inp_embd_scaled", -1);

  graph::RopeParams rope_local;
  rope_local.n_rot = hp.n_rot;
  rope_local.head_dim = hp.head_dim;
  rope_local.mode = graph::RopeMode::NeoX;
  rope_local.freq_base = rope_base_local_;
  graph::RopeParams rope_global = rope_local;
  rope_global.freq_base = hp.rope_base;
  rope_global.freq_scale = hp.rope_scale;
  graph::AttentionParams attn;
  attn.n_head = hp.n_head;
  attn.n_head_kv = hp.n_head_kv;
  attn.head_dim = hp.head_dim;
  attn.scale = 1.0f;  // q is scaled before attention, as llama.cpp does

  for (int i = 0; i < hp.n_layer; ++i) {
    const Gemma3Layer& L = layers_[static_cast<size_t>(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    const graph::RopeParams& rope = L.local ? rope_local : rope_global;
    const int32_t h = g.rms_norm(x, g.weight(L.attn_norm), hp.rms_eps, p + "attn_norm", i);
    int32_t q = g.matmul(g.weight(L.wq), h, p + "attn_q", i);
    int32_t k = g.matmul(g.weight(L.wk), h, p + "attn_k", i);
    const int32_t v = g.matmul(g.weight(L.wv), h, p + "attn_v", i);
    q = g.rms_norm(q, g.weight(L.q_norm), hp.rms_eps, p + "attn_q_norm", i);
    k = g.rms_norm(k, g.weight(L.k_norm), hp.rms_eps, p + "attn_k_norm", i);
    q = g.rope(q, pos, rope, p + "attn_q_rope", i);
    k = g.rope(k, pos, rope, p + "attn_k_rope", i);
    q = g.scale(q, attn_scale_, p + "attn_q_scaled", i);
    attn.layer = i;
    attn.window = L.local ? window_ : 0;
    const int32_t a = g.attention(q, k, v, attn, p + "attn");
    int32_t o = g.matmul(g.weight(L.wo), a, p + "attn_out", i);
    o = g.rms_norm(o, g.weight(L.post_attn_norm), hp.rms_eps, p + "attn_post_norm", i);
    x = g.add(x, o, p + "attn_residual", i);
    if (i == hp.n_layer - 1 && shape.n_outputs < shape.n_tokens) {
      const int32_t rows = g.input(graph::InputKind::OutputRows, shape.n_outputs, "inp_out_ids");
      x = g.get_rows(x, rows, p + "out_rows");
    }
    const int32_t hf = g.rms_norm(x, g.weight(L.ffn_norm), hp.rms_eps, p + "ffn_norm", i);
    const int32_t gate = g.matmul(g.weight(L.ffn_gate), hf, p + "ffn_gate", i);
    const int32_t up = g.matmul(g.weight(L.ffn_up), hf, p + "ffn_up", i);
    const int32_t act = g.geglu(gate, up, p + "ffn_geglu", i);
    int32_t down = g.matmul(g.weight(L.ffn_down), act, p + "ffn_down", i);
    down = g.rms_norm(down, g.weight(L.post_ffn_norm), hp.rms_eps, p + "ffn_post_norm", i);
    x = g.add(x, down, p + "ffn_residual", i);
  }
  x = g.rms_norm(x, g.weight(output_norm_), hp.rms_eps, "output_norm", -1);
  const int32_t logits = g.matmul(embd, x, "output", -1);  // tied head
  g.set_output(logits);
  return g;
}

}  // namespace geniex::models
