// Builds small random-weight Llama GGUF files in memory for tests (mixed weight types so
// every kernel and the scheduler's fallbacks are exercised).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "formats/gguf.hpp"
#include "quant/quant.hpp"

namespace geniex::test_support {

struct TinyLlamaConfig {
  int n_embd = 64;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 2;
  int n_ff = 128;
  int n_vocab = 96;
  bool tied = false;
  DType embd_type = DType::Q8_0;
  DType attn_type = DType::Q8_0;
  std::optional<DType> attn_v_type;  // attn_v's, when not attn_type's
  DType attn_out_type = DType::Q4_0;
  DType ffn_gate_type = DType::Q4_1;
  DType ffn_up_type = DType::F32;
  DType ffn_down_type = DType::Q8_0;
  DType output_type = DType::F16;
  uint32_t seed = 1234;
};

// A fixture that cannot be built is a broken test, not a skipped one.
inline void require_ok(const Status& st, const std::string& name) {
  if (!st) {
    std::fprintf(stderr, "tiny model: cannot add '%s': %s\n", name.c_str(), st.error().to_string().c_str());
    std::abort();
  }
}

inline void add_random_tensor(gguf::Writer& w, std::mt19937& rng, const std::string& name, DType type,
                              std::vector<int64_t> ne, float scale) {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = dist(rng);
  const int64_t rows = n / ne[0];
  const auto rb = static_cast<size_t>(row_bytes(type, ne[0]));
  std::vector<uint8_t> bytes(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    quant::quantize_row_ref(type, values.data() + r * ne[0], bytes.data() + static_cast<size_t>(r) * rb, ne[0]);
  }
  require_ok(w.add_tensor(name, type, std::move(ne), bytes.data(), bytes.size()), name);
}

inline void add_ones_tensor(gguf::Writer& w, std::mt19937& rng, const std::string& name, int64_t n) {
  std::uniform_real_distribution<float> dist(0.8f, 1.2f);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = dist(rng);
  require_ok(w.add_tensor(name, DType::F32, {n}, values.data(), values.size() * sizeof(float)), name);
}

inline std::vector<uint8_t> make_tiny_llama(const TinyLlamaConfig& c) {
  gguf::Writer w;
  std::mt19937 rng(c.seed);
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "tiny-llama-test");
  w.set_u32("llama.context_length", 256);
  w.set_u32("llama.embedding_length", static_cast<uint32_t>(c.n_embd));
  w.set_u32("llama.block_count", static_cast<uint32_t>(c.n_layer));
  w.set_u32("llama.feed_forward_length", static_cast<uint32_t>(c.n_ff));
  w.set_u32("llama.attention.head_count", static_cast<uint32_t>(c.n_head));
  w.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.n_head_kv));
  w.set_f32("llama.rope.freq_base", 10000.0f);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  const int64_t d = c.n_embd;
  const int64_t hd = c.n_embd / c.n_head;
  add_random_tensor(w, rng, "token_embd.weight", c.embd_type, {d, c.n_vocab}, 1.0f);
  add_ones_tensor(w, rng, "output_norm.weight", d);
  if (!c.tied) add_random_tensor(w, rng, "output.weight", c.output_type, {d, c.n_vocab}, 0.2f);
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add_ones_tensor(w, rng, p + "attn_norm.weight", d);
    add_random_tensor(w, rng, p + "attn_q.weight", c.attn_type, {d, c.n_head * hd}, 0.3f);
    add_random_tensor(w, rng, p + "attn_k.weight", c.attn_type, {d, c.n_head_kv * hd}, 0.3f);
    add_random_tensor(w, rng, p + "attn_v.weight", c.attn_v_type.value_or(c.attn_type), {d, c.n_head_kv * hd}, 0.3f);
    add_random_tensor(w, rng, p + "attn_output.weight", c.attn_out_type, {c.n_head * hd, d}, 0.2f);
    add_ones_tensor(w, rng, p + "ffn_norm.weight", d);
    add_random_tensor(w, rng, p + "ffn_gate.weight", c.ffn_gate_type, {d, c.n_ff}, 0.2f);
    add_random_tensor(w, rng, p + "ffn_up.weight", c.ffn_up_type, {d, c.n_ff}, 0.2f);
    add_random_tensor(w, rng, p + "ffn_down.weight", c.ffn_down_type, {c.n_ff, d}, 0.2f);
  }
  return w.to_bytes();
}

}  // namespace geniex::test_support
