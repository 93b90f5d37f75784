// Hugging Face folder -> GGUF: config.json to llama.cpp's metadata keys, safetensors tensors to
// GGUF names and layouts (as convert_hf_to_gguf.py), tokenizer.json to tokenizer.ggml.* keys.
#include "convert/hf_import.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "formats/safetensors.hpp"
#include "quant/quant.hpp"
#include "tokenizer/pretokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace geniex::convert {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr double kPi = 3.14159265358979323846;

Error cfg_error(ErrorCode code, const std::string& what) { return make_error(code, "config.json: " + what); }

// ---------------------------------------------------------------------------------------------
// config.json

// Typed reads with errors naming the key.
Result<int64_t> get_int(const json& c, const char* key, std::optional<int64_t> fallback = std::nullopt) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) {
    if (fallback) return *fallback;
    return cfg_error(ErrorCode::NotFound, std::string("'") + key + "' is missing");
  }
  if (!it->is_number_integer()) return cfg_error(ErrorCode::InvalidFormat, std::string("'") + key + "' is not an integer");
  const int64_t v = it->get<int64_t>();
  if (v <= 0 || v > (int64_t{1} << 30)) {
    return cfg_error(ErrorCode::InvalidFormat, std::string("'") + key + "' = " + std::to_string(v) + " is out of range");
  }
  return v;
}

Result<double> get_float(const json& c, const char* key, std::optional<double> fallback = std::nullopt) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) {
    if (fallback) return *fallback;
    return cfg_error(ErrorCode::NotFound, std::string("'") + key + "' is missing");
  }
  if (!it->is_number()) return cfg_error(ErrorCode::InvalidFormat, std::string("'") + key + "' is not a number");
  const double v = it->get<double>();
  if (!std::isfinite(v)) return cfg_error(ErrorCode::InvalidFormat, std::string("'") + key + "' is not finite");
  return v;
}

std::optional<bool> get_bool(const json& c, const char* key) {
  auto it = c.find(key);
  if (it == c.end() || !it->is_boolean()) return std::nullopt;
  return it->get<bool>();
}

std::string get_string(const json& c, const char* key) {
  auto it = c.find(key);
  return it != c.end() && it->is_string() ? it->get<std::string>() : std::string();
}

enum class Family { Llama, Mistral, Qwen2, Qwen3, Gemma3 };

struct RopeScaling {
  std::string type = "default";  // "default", "linear", "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_context = 8192;
};

struct Config {
  Family family = Family::Llama;
  std::string model_type;
  std::string arch;  // GGUF architecture
  int64_t n_vocab = 0, n_embd = 0, n_ff = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  bool head_dim_given = false;
  int64_t n_ctx = 0;
  double rms_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope;
  std::optional<bool> tied;
  int64_t sliding_window = 0;  // 0: none
  double q_norm_scale = 1.0;   // Gemma 3: folds query_pre_attn_scalar into attn_q_norm
  std::vector<bool> layer_sliding;  // Gemma 3: per layer, from layer_types
};

// Transformers 5 writes "rope_parameters" ({"rope_type", "rope_theta", ...}, or one such object
// per layer type for Gemma 3); earlier versions "rope_theta" and "rope_scaling".
// legacy_scaling: read "rope_scaling" when there is no "rope_parameters" (Gemma 3's applies to
// its global layers only).
Result<std::pair<double, RopeScaling>> read_rope(const json& c, const char* layer_type, double default_theta,
                                                 const char* theta_key = "rope_theta", bool legacy_scaling = true) {
  const json* params = nullptr;
  double theta = default_theta;
  if (auto it = c.find("rope_parameters"); it != c.end() && it->is_object()) {
    params = &*it;
    if (layer_type != nullptr && params->contains(layer_type) && params->at(layer_type).is_object()) {
      params = &params->at(layer_type);
    }
    GX_ASSIGN_OR_RETURN(theta, get_float(*params, "rope_theta", default_theta));
  } else {
    GX_ASSIGN_OR_RETURN(theta, get_float(c, theta_key, default_theta));
    if (auto rs = c.find("rope_scaling"); legacy_scaling && rs != c.end() && rs->is_object()) params = &*rs;
  }
  RopeScaling r;
  if (params != nullptr) {
    r.type = get_string(*params, "rope_type");
    if (r.type.empty()) r.type = get_string(*params, "type");
    if (r.type.empty()) r.type = "default";
    GX_ASSIGN_OR_RETURN(r.factor, get_float(*params, "factor", 1.0));
    GX_ASSIGN_OR_RETURN(r.low_freq_factor, get_float(*params, "low_freq_factor", 1.0));
    GX_ASSIGN_OR_RETURN(r.high_freq_factor, get_float(*params, "high_freq_factor", 4.0));
    GX_ASSIGN_OR_RETURN(r.original_context, get_float(*params, "original_max_position_embeddings", 8192.0));
  }
  if (r.type != "default" && r.type != "linear" && r.type != "llama3") {
    return cfg_error(ErrorCode::Unsupported, "RoPE scaling type '" + r.type + "' is not supported (supported: linear, llama3)");
  }
  if (r.type != "default" && !(r.factor > 0)) return cfg_error(ErrorCode::InvalidFormat, "RoPE scaling factor must be > 0");
  if (r.type == "llama3" && !(r.high_freq_factor > r.low_freq_factor && r.low_freq_factor > 0 && r.original_context > 0)) {
    return cfg_error(ErrorCode::InvalidFormat, "llama3 RoPE scaling needs 0 < low_freq_factor < high_freq_factor");
  }
  if (!(theta > 0)) return cfg_error(ErrorCode::InvalidFormat, "rope_theta must be > 0");
  return std::make_pair(theta, r);
}

Result<Config> read_config(const fs::path& dir) {
  const fs::path path = dir / "config.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return make_error(ErrorCode::NotFound, "hf import: " + dir.string() + " has no config.json");
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in) return make_error(ErrorCode::IoError, "hf import: cannot read " + path.string());
  json root;
  try {
    root = json::parse(ss.str());
  } catch (const json::exception& e) {
    return cfg_error(ErrorCode::InvalidFormat, std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) return cfg_error(ErrorCode::InvalidFormat, "not a JSON object");

  std::string model_type = get_string(root, "model_type");
  std::string arch_name;
  if (auto it = root.find("architectures"); it != root.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    arch_name = (*it)[0].get<std::string>();
  }
  const json* c = &root;
  // Gemma 3 multimodal checkpoints: the language model's settings are under text_config.
  if (model_type == "gemma3" && root.contains("text_config") && root.at("text_config").is_object()) {
    c = &root.at("text_config");
  }
  Config cfg;
  static const std::pair<const char*, Family> kTypes[] = {
      {"llama", Family::Llama},   {"mistral", Family::Mistral},    {"qwen2", Family::Qwen2},
      {"qwen3", Family::Qwen3},   {"gemma3_text", Family::Gemma3}, {"gemma3", Family::Gemma3},
  };
  static const std::pair<const char*, Family> kArchs[] = {
      {"LlamaForCausalLM", Family::Llama},   {"MistralForCausalLM", Family::Mistral},
      {"Qwen2ForCausalLM", Family::Qwen2},   {"Qwen3ForCausalLM", Family::Qwen3},
      {"Gemma3ForCausalLM", Family::Gemma3}, {"Gemma3ForConditionalGeneration", Family::Gemma3},
  };
  bool known = false;
  for (const auto& [name, fam] : kTypes) {
    if (model_type == name) {
      cfg.family = fam;
      known = true;
    }
  }
  if (model_type.empty()) {
    for (const auto& [name, fam] : kArchs) {
      if (arch_name == name) {
        cfg.family = fam;
        known = true;
      }
    }
  }
  if (!known) {
    return cfg_error(ErrorCode::Unsupported, "model_type '" + model_type + "' (architectures '" + arch_name +
                                                 "') is not supported (supported: llama, mistral, qwen2, qwen3, "
                                                 "gemma3_text)");
  }
  cfg.model_type = model_type.empty() ? arch_name : model_type;
  const Family f = cfg.family;
  cfg.arch = f == Family::Qwen2 ? "qwen2" : f == Family::Qwen3 ? "qwen3" : f == Family::Gemma3 ? "gemma3" : "llama";

  GX_ASSIGN_OR_RETURN(cfg.n_vocab, get_int(*c, "vocab_size", f == Family::Gemma3 ? 262208 : std::optional<int64_t>()));
  GX_ASSIGN_OR_RETURN(cfg.n_embd, get_int(*c, "hidden_size"));
  GX_ASSIGN_OR_RETURN(cfg.n_ff, get_int(*c, "intermediate_size"));
  GX_ASSIGN_OR_RETURN(cfg.n_layer, get_int(*c, "num_hidden_layers"));
  GX_ASSIGN_OR_RETURN(cfg.n_head, get_int(*c, "num_attention_heads"));
  GX_ASSIGN_OR_RETURN(cfg.n_head_kv, get_int(*c, "num_key_value_heads", cfg.n_head));
  if (cfg.n_head % cfg.n_head_kv != 0) {
    return cfg_error(ErrorCode::InvalidFormat, "num_attention_heads " + std::to_string(cfg.n_head) +
                                                   " is not a multiple of num_key_value_heads " +
                                                   std::to_string(cfg.n_head_kv));
  }
  cfg.head_dim_given = c->contains("head_dim") && !c->at("head_dim").is_null();
  GX_ASSIGN_OR_RETURN(cfg.head_dim, get_int(*c, "head_dim", cfg.n_embd / cfg.n_head));
  if (cfg.head_dim % 2 != 0) return cfg_error(ErrorCode::InvalidFormat, "head dimension " + std::to_string(cfg.head_dim) + " is odd");
  GX_ASSIGN_OR_RETURN(cfg.n_ctx, get_int(*c, "max_position_embeddings", f == Family::Gemma3 ? 131072 : 4096));
  GX_ASSIGN_OR_RETURN(cfg.rms_eps, get_float(*c, "rms_norm_eps", 1e-6));
  if (!(cfg.rms_eps > 0)) return cfg_error(ErrorCode::InvalidFormat, "rms_norm_eps must be > 0");
  cfg.tied = get_bool(*c, "tie_word_embeddings");
  if (!cfg.tied) cfg.tied = get_bool(root, "tie_word_embeddings");

  const std::string act = get_string(*c, f == Family::Gemma3 ? "hidden_activation" : "hidden_act");
  const char* want_act = f == Family::Gemma3 ? "gelu_pytorch_tanh" : "silu";
  if (!act.empty() && act != want_act) {
    return cfg_error(ErrorCode::Unsupported, std::string("activation '") + act + "' (GenieX's " + cfg.arch +
                                                 " graph uses " + want_act + ")");
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (get_bool(*c, key).value_or(false)) {
      return cfg_error(ErrorCode::Unsupported, std::string("'") + key + "': true (biases on " +
                                                   (key[0] == 'a' ? "attention" : "MLP") + " projections) for " +
                                                   cfg.model_type);
    }
  }

  if (f == Family::Gemma3) {
    for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
      if (c->contains(key) && !c->at(key).is_null()) {
        return cfg_error(ErrorCode::Unsupported, std::string("gemma3: '") + key + "' (logit soft-capping)");
      }
    }
    GX_ASSIGN_OR_RETURN(auto global, read_rope(*c, "full_attention", 1000000.0));
    GX_ASSIGN_OR_RETURN(auto local, read_rope(*c, "sliding_attention", 10000.0, "rope_local_base_freq", false));
    cfg.rope_theta = global.first;
    cfg.rope = global.second;
    if (cfg.rope.type == "llama3") return cfg_error(ErrorCode::Unsupported, "gemma3 with llama3 RoPE scaling");
    // GenieX's gemma3 graph (as llama.cpp's) has a fixed local RoPE base; others cannot be
    // expressed in the GGUF.
    if (local.first != 10000.0 || local.second.type != "default") {
      return cfg_error(ErrorCode::Unsupported, "gemma3: local-layer RoPE base " + std::to_string(local.first) +
                                                   " or scaling (GenieX's gemma3 graph uses base 10000, no scaling)");
    }
    std::vector<std::string> types;
    if (auto it = c->find("layer_types"); it != c->end() && it->is_array()) {
      for (const json& t : *it) types.push_back(t.is_string() ? t.get<std::string>() : "?");
    } else {
      int64_t pattern = 6;
      for (const char* key : {"sliding_window_pattern", "_sliding_window_pattern"}) {
        if (c->contains(key) && c->at(key).is_number_integer()) pattern = c->at(key).get<int64_t>();
      }
      for (int64_t i = 0; i < cfg.n_layer; ++i) {
        types.push_back(pattern > 0 && (i + 1) % pattern == 0 ? "full_attention" : "sliding_attention");
      }
    }
    if (types.size() != static_cast<size_t>(cfg.n_layer)) {
      return cfg_error(ErrorCode::InvalidFormat, "gemma3: layer_types has " + std::to_string(types.size()) +
                                                     " entries for " + std::to_string(cfg.n_layer) + " layers");
    }
    for (const std::string& t : types) {
      if (t != "sliding_attention" && t != "full_attention") {
        return cfg_error(ErrorCode::Unsupported, "gemma3: layer type '" + t + "'");
      }
      cfg.layer_sliding.push_back(t == "sliding_attention");
    }
    GX_ASSIGN_OR_RETURN(cfg.sliding_window, get_int(*c, "sliding_window", 4096));
    // Hugging Face scales q by query_pre_attn_scalar^-1/2; the GGUF graph by head_dim^-1/2 after
    // the q norm. The difference goes into the q norm weight (RoPE is linear in q).
    GX_ASSIGN_OR_RETURN(const double qpas, get_float(*c, "query_pre_attn_scalar", static_cast<double>(cfg.head_dim)));
    if (!(qpas > 0)) return cfg_error(ErrorCode::InvalidFormat, "query_pre_attn_scalar must be > 0");
    cfg.q_norm_scale = std::sqrt(static_cast<double>(cfg.head_dim) / qpas);
  } else {
    GX_ASSIGN_OR_RETURN(auto rope, read_rope(*c, nullptr, 10000.0));
    cfg.rope_theta = rope.first;
    cfg.rope = rope.second;
    if (cfg.rope.type == "llama3" && f != Family::Llama && f != Family::Mistral) {
      return cfg_error(ErrorCode::Unsupported, "llama3 RoPE scaling for " + cfg.model_type);
    }
    if (f == Family::Mistral && c->contains("sliding_window") && !c->at("sliding_window").is_null()) {
      GX_ASSIGN_OR_RETURN(cfg.sliding_window, get_int(*c, "sliding_window"));
    }
    if ((f == Family::Qwen2 || f == Family::Qwen3) && get_bool(*c, "use_sliding_window").value_or(false)) {
      return cfg_error(ErrorCode::Unsupported, cfg.model_type + " with use_sliding_window: true");
    }
  }
  return cfg;
}

// ---------------------------------------------------------------------------------------------
// Tensors

enum class Transform {
  None,
  PermuteQ,   // Llama q rows: halves of each head interleaved (llama.cpp's adjacent-pair RoPE)
  PermuteK,   // the same over the kv heads
  NormShift,  // Gemma RMSNorm: stored as 1 + w
  QNorm,      // Gemma q norm: 1 + w, times Config::q_norm_scale
};

struct Planned {
  std::string hf_name;
  std::string gguf_name;
  std::vector<int64_t> shape;  // expected HF shape, outermost first
  Transform transform = Transform::None;
};

std::vector<Planned> plan_tensors(const Config& c, bool with_output) {
  const int64_t d = c.n_embd, q = c.n_head * c.head_dim, kv = c.n_head_kv * c.head_dim, ff = c.n_ff;
  const bool gemma = c.family == Family::Gemma3;
  const bool permute = c.family == Family::Llama || c.family == Family::Mistral;
  const Transform norm = gemma ? Transform::NormShift : Transform::None;
  std::vector<Planned> out;
  out.push_back({"model.embed_tokens.weight", "token_embd.weight", {c.n_vocab, d}});
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".";
    const std::string g = "blk." + std::to_string(i) + ".";
    out.push_back({h + "input_layernorm.weight", g + "attn_norm.weight", {d}, norm});
    out.push_back({h + "self_attn.q_proj.weight", g + "attn_q.weight", {q, d}, permute ? Transform::PermuteQ : Transform::None});
    out.push_back({h + "self_attn.k_proj.weight", g + "attn_k.weight", {kv, d}, permute ? Transform::PermuteK : Transform::None});
    out.push_back({h + "self_attn.v_proj.weight", g + "attn_v.weight", {kv, d}});
    if (c.family == Family::Qwen2) {
      out.push_back({h + "self_attn.q_proj.bias", g + "attn_q.bias", {q}});
      out.push_back({h + "self_attn.k_proj.bias", g + "attn_k.bias", {kv}});
      out.push_back({h + "self_attn.v_proj.bias", g + "attn_v.bias", {kv}});
    }
    if (c.family == Family::Qwen3 || gemma) {
      out.push_back({h + "self_attn.q_norm.weight", g + "attn_q_norm.weight", {c.head_dim}, gemma ? Transform::QNorm : Transform::None});
      out.push_back({h + "self_attn.k_norm.weight", g + "attn_k_norm.weight", {c.head_dim}, norm});
    }
    out.push_back({h + "self_attn.o_proj.weight", g + "attn_output.weight", {d, q}});
    if (gemma) {
      out.push_back({h + "post_attention_layernorm.weight", g + "post_attention_norm.weight", {d}, norm});
      out.push_back({h + "pre_feedforward_layernorm.weight", g + "ffn_norm.weight", {d}, norm});
      out.push_back({h + "post_feedforward_layernorm.weight", g + "post_ffw_norm.weight", {d}, norm});
    } else {
      out.push_back({h + "post_attention_layernorm.weight", g + "ffn_norm.weight", {d}});
    }
    out.push_back({h + "mlp.gate_proj.weight", g + "ffn_gate.weight", {ff, d}});
    out.push_back({h + "mlp.up_proj.weight", g + "ffn_up.weight", {ff, d}});
    out.push_back({h + "mlp.down_proj.weight", g + "ffn_down.weight", {d, ff}});
  }
  out.push_back({"model.norm.weight", "output_norm.weight", {d}, norm});
  if (with_output) out.push_back({"lm_head.weight", "output.weight", {c.n_vocab, d}});
  return out;
}

// Checkpoint names to the plain causal-LM names (Gemma 3 multimodal checkpoints nest the language
// model); empty for tensors the text model does not use.
std::string canonical_name(const std::string& name, Family f) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  auto ends = [&](const char* s) {
    const size_t n = std::char_traits<char>::length(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  if (ends("rotary_emb.inv_freq")) return "";  // a buffer some checkpoints save
  if (f == Family::Gemma3) {
    for (const char* p : {"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."}) {
      if (starts(p)) return "";
    }
    if (starts("model.language_model.")) return "model." + name.substr(21);
    if (starts("language_model.model.")) return "model." + name.substr(21);
    if (starts("language_model.lm_head.")) return name.substr(15);
  }
  return name;
}

// llama.cpp's permute(): rows (head, half, i) -> (head, i, half).
void permute_rows(std::vector<float>& w, int64_t rows, int64_t cols, int64_t n_head) {
  const int64_t hd = rows / n_head;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t i = 0; i < hd / 2; ++i) {
      for (int64_t half = 0; half < 2; ++half) {
        const float* src = w.data() + (h * hd + half * (hd / 2) + i) * cols;
        std::copy(src, src + cols, out.data() + (h * hd + 2 * i + half) * cols);
      }
    }
  }
  w.swap(out);
}

// Llama 3.1 RoPE scaling as llama.cpp stores it: one divisor per rotated pair.
std::vector<float> llama3_rope_factors(const Config& c) {
  const RopeScaling& r = c.rope;
  const double low_wavelen = r.original_context / r.low_freq_factor;
  const double high_wavelen = r.original_context / r.high_freq_factor;
  std::vector<float> out;
  for (int64_t i = 0; i < c.head_dim; i += 2) {
    const double freq = 1.0 / std::pow(c.rope_theta, static_cast<double>(i) / static_cast<double>(c.head_dim));
    const double wavelen = 2 * kPi / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(static_cast<float>(r.factor));
    } else {
      const double smooth = (r.original_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      out.push_back(static_cast<float>(1.0 / ((1 - smooth) / r.factor + smooth)));
    }
  }
  return out;
}

// The stored type of a matrix of rows of n_cols elements.
// Fallbacks are collected per kind ("q4_k -> q5_0": tensor names) for one note each.
DType matrix_type(const ImportOptions& o, DType source, int64_t n_cols,
                  std::map<std::string, std::vector<std::string>>& fallbacks, const std::string& name) {
  DType t = source;
  if (o.type) {
    t = *o.type;
  } else if (source == DType::BF16 && !o.keep_bf16) {
    t = DType::F32;
  }
  const int64_t block = dtype_info(t).block_size;
  if (n_cols % block == 0) return t;
  // As llama.cpp's quantizer: K-quants fall back to a 32-element format, the rest to F16.
  DType fb = DType::F16;
  if (t == DType::Q4_K) fb = DType::Q5_0;
  if (t == DType::Q5_K) fb = DType::Q5_1;
  if (t == DType::Q6_K) fb = DType::Q8_0;
  if (n_cols % dtype_info(fb).block_size != 0) fb = DType::F16;
  fallbacks[std::string(dtype_name(t)) + " -> " + std::string(dtype_name(fb))].push_back(name);
  return fb;
}

Result<std::vector<uint8_t>> encode(DType t, const std::vector<float>& v, int64_t n_cols) {
  const int64_t rows = static_cast<int64_t>(v.size()) / n_cols;
  std::vector<uint8_t> out(static_cast<size_t>(row_bytes(t, n_cols) * rows));
  if (t == DType::F32) {
    std::copy(reinterpret_cast<const uint8_t*>(v.data()), reinterpret_cast<const uint8_t*>(v.data() + v.size()),
              out.begin());
    return out;
  }
  if (!quant::can_quantize(t)) {
    return make_error(ErrorCode::Unsupported, "hf import: no quantizer for type " + std::string(dtype_name(t)));
  }
  const size_t rb = static_cast<size_t>(row_bytes(t, n_cols));
  for (int64_t r = 0; r < rows; ++r) {
    quant::quantize_row_ref(t, v.data() + r * n_cols, out.data() + static_cast<size_t>(r) * rb, n_cols);
  }
  return out;
}

// llama.cpp's llama_ftype for the dominant matrix type.
uint32_t file_type(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;
    case DType::Q5_1: return 9;
    case DType::Q4_K: return 14;  // Q4_K_S: every matrix Q4_K
    case DType::Q5_K: return 16;  // Q5_K_S
    case DType::Q6_K: return 18;
    case DType::BF16: return 32;
    default: return 0;
  }
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

// The named pre-tokenizer (tokenizer.ggml.pre, llama.cpp's names) whose splits equal the
// tokenizer.json pipeline's.
std::optional<std::string> pre_name_for(const tok::TokenizerConfig& t) {
  const std::string norm = t.normalizer == "none" ? "" : t.normalizer;
  for (const char* name : {"gpt-2", "smollm", "llama-bpe", "qwen2", "qwen35"}) {
    const auto spec = tok::named_pre_spec(name);
    if (spec && spec->splits == t.pre_patterns && spec->normalizer == norm && spec->ignore_merges == t.ignore_merges) {
      return std::string(name);
    }
  }
  return std::nullopt;
}

Result<bool> write_tokenizer(const fs::path& dir, const Config& c, gguf::Writer& w, ImportReport& rep) {
  std::error_code ec;
  if (!fs::exists(dir / "tokenizer.json", ec)) {
    rep.notes.push_back("no tokenizer.json: the GGUF has no tokenizer");
    return false;
  }
  GX_ASSIGN_OR_RETURN(tok::TokenizerConfig t, tok::hf_tokenizer_config(dir.string()));
  if (static_cast<int64_t>(t.tokens.size()) > c.n_vocab) {
    return make_error(ErrorCode::InvalidFormat, "hf import: tokenizer.json has " + std::to_string(t.tokens.size()) +
                                                    " tokens but config.json vocab_size is " + std::to_string(c.n_vocab));
  }
  if (t.token_types.empty()) t.token_types.assign(t.tokens.size(), static_cast<int32_t>(tok::TokenType::Normal));
  // Embedding rows past the tokenizer's ids (padded vocabularies): placeholder tokens, as llama.cpp.
  for (int64_t i = static_cast<int64_t>(t.tokens.size()); i < c.n_vocab; ++i) {
    t.tokens.push_back("[PAD" + std::to_string(i) + "]");
    t.token_types.push_back(static_cast<int32_t>(tok::TokenType::Unused));
  }
  if (t.model == "gpt2") {
    const auto pre = pre_name_for(t);
    if (!pre) {
      std::string pats;
      for (const auto& p : t.pre_patterns) pats += (pats.empty() ? "" : ", ") + p.substr(0, 80);
      return make_error(ErrorCode::Unsupported,
                        "hf import: tokenizer.json's pre-tokenizer (splits: " + pats + "; normalizer '" + t.normalizer +
                            "') matches none of the named pre-tokenizers a GGUF can record (gpt-2, smollm, "
                            "llama-bpe, qwen2, qwen35)");
    }
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", *pre);
    w.set_string_array("tokenizer.ggml.tokens", t.tokens);
    w.set_i32_array("tokenizer.ggml.token_type", t.token_types);
    w.set_string_array("tokenizer.ggml.merges", t.merges);
  } else {
    // SentencePiece-style BPE: GGUF keeps piece scores, from which the merge order follows
    // (the higher the merged piece's score, the earlier). Each merge product scores -rank; pieces
    // no merge makes (characters, bytes, added tokens) score below every merge.
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < t.tokens.size(); ++i) index.emplace(t.tokens[i], i);
    const float floor = -static_cast<float>(t.merges.size()) - 1.0f;
    std::vector<float> scores(t.tokens.size(), floor);
    std::vector<bool> seen(t.tokens.size(), false);
    for (size_t r = 0; r < t.merges.size(); ++r) {
      const std::string& m = t.merges[r];
      const size_t sp = m.find(' ');
      if (sp == std::string::npos) continue;
      auto it = index.find(m.substr(0, sp) + m.substr(sp + 1));
      if (it != index.end() && !seen[it->second]) {
        seen[it->second] = true;
        scores[it->second] = -static_cast<float>(r);
      }
    }
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string("tokenizer.ggml.pre", "default");
    w.set_string_array("tokenizer.ggml.tokens", t.tokens);
    w.set_f32_array("tokenizer.ggml.scores", scores);
    w.set_i32_array("tokenizer.ggml.token_type", t.token_types);
    w.set_bool("tokenizer.ggml.add_space_prefix", t.add_space_prefix);
  }
  auto set_id = [&](const char* key, int32_t id) {
    if (id >= 0) w.set_u32(key, static_cast<uint32_t>(id));
  };
  set_id("tokenizer.ggml.bos_token_id", t.bos_id);
  set_id("tokenizer.ggml.eos_token_id", t.eos_id);
  set_id("tokenizer.ggml.unknown_token_id", t.unk_id);
  set_id("tokenizer.ggml.padding_token_id", t.pad_id);
  set_id("tokenizer.ggml.eot_token_id", t.eot_id);
  set_id("tokenizer.ggml.eom_token_id", t.eom_id);
  w.set_bool("tokenizer.ggml.add_bos_token", t.add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", t.add_eos);
  if (!t.chat_template.empty()) w.set_string("tokenizer.chat_template", t.chat_template);
  return true;
}

void write_hparams(const Config& c, const std::string& name, gguf::Writer& w) {
  const std::string a = c.arch + ".";
  w.set_string("general.architecture", c.arch);
  w.set_string("general.name", name);
  w.set_u32(a + "context_length", static_cast<uint32_t>(c.n_ctx));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(c.n_embd));
  w.set_u32(a + "block_count", static_cast<uint32_t>(c.n_layer));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(c.n_ff));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(c.n_head));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(c.n_head_kv));
  w.set_f32(a + "rope.freq_base", static_cast<float>(c.rope_theta));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_eps));
  if (c.head_dim_given || c.family == Family::Gemma3) {
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(c.head_dim));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(c.head_dim));
  }
  if (c.family != Family::Gemma3) w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  w.set_u32(a + "vocab_size", static_cast<uint32_t>(c.n_vocab));
  if (c.rope.type == "linear") {
    w.set_string(a + "rope.scaling.type", "linear");
    w.set_f32(a + "rope.scaling.factor", static_cast<float>(c.rope.factor));
  }
  if (c.sliding_window > 0) w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
  // Gemma 3 layers slide except every sixth, unless layer_types says otherwise: then one bool per
  // layer (true = sliding), which GenieX's gemma3 loader reads (llama.cpp's uses the fixed pattern).
  bool default_pattern = true;
  for (size_t i = 0; i < c.layer_sliding.size(); ++i) default_pattern = default_pattern && c.layer_sliding[i] == ((i + 1) % 6 != 0);
  if (!default_pattern) {
    std::vector<gguf::Value> items;
    for (bool b : c.layer_sliding) items.push_back(gguf::Value::of_bool(b));
    w.set_value(a + "attention.sliding_window_pattern", gguf::Value::of_array(gguf::ValueType::Bool, std::move(items)));
  }
}

}  // namespace

bool is_hf_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.json", ec);
}

Result<DType> parse_output_type(const std::string& name) {
  static const char* const kNames[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"};
  std::string lower;
  for (char ch : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* n : kNames) {
    if (lower == n) {
      if (auto t = dtype_from_name(n)) return *t;
    }
  }
  return make_error(ErrorCode::InvalidArgument,
                    "unknown output type '" + name + "' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k)");
}

Result<gguf::Writer> import_hf(const std::string& dir_str, const ImportOptions& options, ImportReport* report) {
  ImportReport local;
  ImportReport& rep = report != nullptr ? *report : local;
  rep = ImportReport{};
  if (options.type && !(*options.type == DType::F32 || quant::can_quantize(*options.type)) ) {
    return make_error(ErrorCode::InvalidArgument, "hf import: cannot store weights as " + std::string(dtype_name(*options.type)));
  }
  if (options.type && (*options.type == DType::Q8_1 || *options.type == DType::Q8_K)) {
    return make_error(ErrorCode::InvalidArgument, "hf import: " + std::string(dtype_name(*options.type)) +
                                                      " is an activation format, not a weight type");
  }
  const fs::path dir(dir_str);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return make_error(ErrorCode::NotFound, "hf import: '" + dir_str + "' is not a folder");
  GX_ASSIGN_OR_RETURN(const Config c, read_config(dir));
  rep.architecture = c.arch;
  GX_ASSIGN_OR_RETURN(const safetensors::Folder st, safetensors::Folder::open(dir_str));

  // Canonical names of everything in the checkpoint; each must be used (or be known to be unused).
  std::map<std::string, const safetensors::Tensor*> by_name;
  for (const safetensors::Tensor* t : st.tensors()) {
    const std::string n = canonical_name(t->name, c.family);
    if (!n.empty()) by_name.emplace(n, t);
  }
  const bool has_lm_head = by_name.count("lm_head.weight") != 0;
  const bool tied = c.family == Family::Gemma3 || c.tied.value_or(!has_lm_head);
  if (tied) by_name.erase("lm_head.weight");  // a tied checkpoint may still save the copy
  std::vector<Planned> plan = plan_tensors(c, !tied);

  gguf::Writer w;
  std::string name = fs::weakly_canonical(dir, ec).filename().string();
  if (name.empty()) name = dir.filename().string();
  write_hparams(c, name, w);

  uint64_t total_bytes = 0;
  for (const Planned& p : plan) {
    auto it = by_name.find(p.hf_name);
    if (it == by_name.end()) {
      return make_error(ErrorCode::NotFound, "hf import: " + dir_str + " is missing tensor '" + p.hf_name + "'" +
                                                 (p.hf_name == "lm_head.weight" ? " (tie_word_embeddings is false)" : ""));
    }
    const safetensors::Tensor& t = *it->second;
    if (t.shape != p.shape) {
      std::string want = "[";
      for (size_t i = 0; i < p.shape.size(); ++i) want += (i ? ", " : "") + std::to_string(p.shape[i]);
      return make_error(ErrorCode::InvalidFormat, "hf import: tensor '" + t.name + "' has shape " + t.shape_string() +
                                                      ", config.json implies " + want + "]");
    }
    if (!t.type) {
      return make_error(ErrorCode::Unsupported, "hf import: tensor '" + t.name + "' has dtype " + t.dtype +
                                                    " (supported: F32, F16, BF16)");
    }
    total_bytes += t.nbytes;
  }
  for (const auto& [n, t] : by_name) {
    bool used = false;
    for (const Planned& p : plan) used = used || p.hf_name == n;
    if (!used) {
      return make_error(ErrorCode::Unsupported, "hf import: tensor '" + t->name + "' (" + t->file +
                                                    ") has no place in GenieX's " + c.arch + " graph; " +
                                                    "this " + c.model_type + " variant is not supported");
    }
  }

  std::map<DType, uint64_t> matrix_bytes;
  std::map<std::string, std::vector<std::string>> fallbacks;
  const size_t n_total = plan.size() + (c.rope.type == "llama3" ? 1 : 0);
  size_t n_done = 0;
  uint64_t bytes_done = 0;
  if (c.rope.type == "llama3") {
    const std::vector<float> f = llama3_rope_factors(c);
    GX_TRY(w.add_tensor("rope_freqs.weight", DType::F32, {static_cast<int64_t>(f.size())}, f.data(), f.size() * 4));
    ++n_done;
    rep.n_tensors++;
  }
  for (const Planned& p : plan) {
    const safetensors::Tensor& t = *by_name.at(p.hf_name);
    GX_ASSIGN_OR_RETURN(std::vector<float> v, safetensors::to_f32(t));
    const int64_t n_cols = p.shape.back();
    const int64_t n_rows = static_cast<int64_t>(t.n_elements) / n_cols;
    switch (p.transform) {
      case Transform::PermuteQ: permute_rows(v, n_rows, n_cols, c.n_head); break;
      case Transform::PermuteK: permute_rows(v, n_rows, n_cols, c.n_head_kv); break;
      case Transform::NormShift:
        for (float& x : v) x += 1.0f;
        break;
      case Transform::QNorm:
        for (float& x : v) x = static_cast<float>((static_cast<double>(x) + 1.0) * c.q_norm_scale);
        break;
      case Transform::None: break;
    }
    const bool matrix = p.shape.size() == 2;
    const DType type = matrix ? matrix_type(options, *t.type, n_cols, fallbacks, p.gguf_name) : DType::F32;
    GX_ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, encode(type, v, n_cols));
    std::vector<int64_t> ne(p.shape.rbegin(), p.shape.rend());
    GX_TRY(w.add_tensor(p.gguf_name, type, ne, bytes.data(), bytes.size()));
    if (matrix) matrix_bytes[type] += bytes.size();
    rep.n_tensors++;
    rep.n_params += t.n_elements;
    rep.output_bytes += bytes.size();
    bytes_done += t.nbytes;
    rep.source_bytes += t.nbytes;
    if (options.progress) options.progress(++n_done, n_total, bytes_done, total_bytes);
  }
  for (const auto& [kind, names] : fallbacks) {
    rep.notes.push_back(std::to_string(names.size()) + " tensor(s) stored " + kind +
                        " because their rows do not split into the type's blocks (e.g. " + names.front() + ")");
  }
  DType dominant = DType::F32;
  uint64_t most = 0;
  for (const auto& [type, bytes] : matrix_bytes) {
    if (bytes > most) {
      most = bytes;
      dominant = type;
    }
  }
  w.set_u32("general.file_type", file_type(dominant));
  if (dtype_info(dominant).quantized) w.set_u32("general.quantization_version", 2);
  GX_ASSIGN_OR_RETURN(rep.has_tokenizer, write_tokenizer(dir, c, w, rep));
  return w;
}

Result<gguf::File> load_hf_as_gguf(const std::string& dir, const ImportOptions& options) {
  std::vector<uint8_t> bytes;
  {
    GX_ASSIGN_OR_RETURN(gguf::Writer w, import_hf(dir, options));
    bytes = w.to_bytes();
  }  // the writer's copy of the tensors goes before the memfd's is made
  const int fd = ::memfd_create("geniex-hf-import", MFD_CLOEXEC);
  if (fd < 0) return make_error(ErrorCode::IoError, std::string("hf import: memfd_create failed: ") + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return make_error(ErrorCode::IoError, "hf import: writing the in-memory GGUF failed: " + std::string(std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  std::vector<uint8_t>().swap(bytes);
  auto mapping = MappedFile::open("/proc/self/fd/" + std::to_string(fd));
  ::close(fd);  // the mapping keeps the file alive
  if (!mapping) return make_error(mapping.error().code, "hf import: " + mapping.error().message);
  return gguf::File::parse(std::move(mapping).value());
}

}  // namespace geniex::convert
