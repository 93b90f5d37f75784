// Llama 3.1-style RoPE scaling (rope_freqs.weight frequency factors) against llama.cpp, on a
// tiny random-weight model over 8,400 positions, past the original 8,192-token context.
// The model is rebuilt here from the same counter-based generator as
// scripts/make_rope_scaling_ref.py; the fixture holds llama.cpp's logits at a few positions.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/gguf.hpp"
#include "geniex/geniex.hpp"

namespace geniex {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Same values as the script's values(): offset + scale * u, u uniform in [-1, 1).
std::vector<float> values(uint64_t seed, int64_t n, double scale, double offset) {
  std::vector<float> out(static_cast<size_t>(n));
  const uint64_t base = (seed & 0xFFFFFFFFull) << 32;
  for (int64_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(splitmix64(base | static_cast<uint64_t>(i)) >> 11) *
                         (1.0 / 9007199254740992.0) * 2.0 - 1.0;
    out[static_cast<size_t>(i)] = static_cast<float>(offset + scale * u);
  }
  return out;
}

nlohmann::json load_fixture() {
  std::ifstream in(std::string(GENIEX_TEST_DATA) + "/rope_scaling/llama31_tiny.json");
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// Writes the fixture's model; with_factors = false leaves rope_freqs.weight out.
std::string write_model(const nlohmann::json& fx, bool with_factors) {
  const nlohmann::json& c = fx["config"];
  const int64_t d = c["n_embd"], ff = c["n_ff"], v = c["n_vocab"];
  const int64_t n_head = c["n_head"], n_head_kv = c["n_head_kv"], n_layer = c["n_layer"];
  const int64_t hd = d / n_head;
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "tiny-llama31-rope-test");
  w.set_u32("llama.context_length", 131072);
  w.set_u32("llama.embedding_length", static_cast<uint32_t>(d));
  w.set_u32("llama.block_count", static_cast<uint32_t>(n_layer));
  w.set_u32("llama.feed_forward_length", static_cast<uint32_t>(ff));
  w.set_u32("llama.attention.head_count", static_cast<uint32_t>(n_head));
  w.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(n_head_kv));
  w.set_f32("llama.rope.freq_base", c["rope_base"].get<float>());
  w.set_u32("llama.rope.dimension_count", static_cast<uint32_t>(hd));
  w.set_f32("llama.attention.layer_norm_rms_epsilon", c["rms_eps"].get<float>());
  w.set_u32("llama.vocab_size", static_cast<uint32_t>(v));
  uint64_t seed = 1;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, double scale, double offset = 0.0) {
    int64_t n = 1;
    for (int64_t x : ne) n *= x;
    const std::vector<float> data = values(seed++, n, scale, offset);
    const Status st = w.add_tensor(name, DType::F32, std::move(ne), data.data(), data.size() * sizeof(float));
    EXPECT_TRUE(st.has_value()) << (st ? "" : st.error().to_string());
  };
  add("token_embd.weight", {d, v}, 1.0);
  add("output_norm.weight", {d}, 0.2, 1.0);
  add("output.weight", {d, v}, 0.15);
  for (int64_t i = 0; i < n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", {d}, 0.2, 1.0);
    add(p + "attn_q.weight", {d, n_head * hd}, 0.3);
    add(p + "attn_k.weight", {d, n_head_kv * hd}, 0.3);
    add(p + "attn_v.weight", {d, n_head_kv * hd}, 0.3);
    add(p + "attn_output.weight", {n_head * hd, d}, 0.15);
    add(p + "ffn_norm.weight", {d}, 0.2, 1.0);
    add(p + "ffn_gate.weight", {d, ff}, 0.15);
    add(p + "ffn_up.weight", {d, ff}, 0.15);
    add(p + "ffn_down.weight", {ff, d}, 0.1);
  }
  if (with_factors) {
    const std::vector<float> f = fx["rope_freqs"].get<std::vector<float>>();
    const Status st = w.add_tensor("rope_freqs.weight", DType::F32, {static_cast<int64_t>(f.size())}, f.data(),
                                   f.size() * sizeof(float));
    EXPECT_TRUE(st.has_value());
  }
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("geniex_rope_" + std::to_string(::getpid()) + (with_factors ? "_f.gguf" : "_n.gguf")))
                               .string();
  EXPECT_TRUE(w.write_file(path).has_value());
  return path;
}

struct RunResult {
  std::vector<std::vector<float>> rows;  // logits at the fixture's positions
};

// Runs the fixture's token sequence (its first max_tokens tokens when that is smaller) and keeps
// the logits at the fixture's positions that were reached.
RunResult run(const nlohmann::json& fx, const std::string& path, int32_t max_tokens = INT32_MAX) {
  RunResult out;
  const nlohmann::json& c = fx["config"];
  const int32_t n_tokens = std::min(c["n_tokens"].get<int32_t>(), max_tokens);
  const int32_t n_vocab = c["n_vocab"];
  auto model = ModelBuilder(path).with_threads(2).with_context(c["n_ctx"].get<int32_t>()).build();
  EXPECT_TRUE(model.has_value()) << (model ? "" : model.error().to_string());
  if (!model) return out;
  auto session = model->new_session();
  EXPECT_TRUE(session.has_value());
  if (!session) return out;
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
  for (int32_t i = 0; i < n_tokens; ++i) tokens[static_cast<size_t>(i)] = (i * 7 + 3) % n_vocab;
  auto logits = session->eval(tokens, /*all_logits=*/true);
  EXPECT_TRUE(logits.has_value()) << (logits ? "" : logits.error().to_string());
  if (!logits) return out;
  EXPECT_EQ(logits->size(), static_cast<size_t>(n_tokens) * static_cast<size_t>(n_vocab));
  for (const auto& p : fx["positions"]) {
    if (p.get<int32_t>() >= n_tokens) break;
    const auto* row = logits->data() + static_cast<size_t>(p.get<int32_t>()) * static_cast<size_t>(n_vocab);
    out.rows.emplace_back(row, row + n_vocab);
  }
  return out;
}

// max |a - b| / max(1, max |b|) per row.
double row_error(const std::vector<float>& a, const nlohmann::json& ref) {
  double max_diff = 0, max_ref = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    const double r = ref[i].get<double>();
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - r));
    max_ref = std::max(max_ref, std::fabs(r));
  }
  return max_diff / max_ref;
}

TEST(RopeScaling, Llama31FrequencyFactorsMatchLlamaCppPast8192) {
  const nlohmann::json fx = load_fixture();
  ASSERT_FALSE(fx.is_discarded()) << "cannot read tests/data/rope_scaling/llama31_tiny.json";
  const std::string with = write_model(fx, true);
  const std::string without = write_model(fx, false);
  const RunResult a = run(fx, with);
  const RunResult b = run(fx, without, /*max_tokens=*/1001);  // enough to show the difference
  std::filesystem::remove(with);
  std::filesystem::remove(without);
  ASSERT_EQ(a.rows.size(), fx["positions"].size());
  ASSERT_GE(b.rows.size(), 3u);
  // f32 weights; llama.cpp keeps K and V in f16 and so does GenieX, so the bound is set by
  // f16 rounding of the cache and of the attention probabilities, not by the rotation.
  constexpr double kBound = 2e-3;
  double worst = 0, worst_without_late = 0;
  for (size_t i = 0; i < a.rows.size(); ++i) {
    const int pos = fx["positions"][i];
    const double e = row_error(a.rows[i], fx["logits"][i]);
    std::printf("[ rope   ] pos %5d: error %.2e with factors", pos, e);
    if (i < b.rows.size()) {
      const double e0 = row_error(b.rows[i], fx["logits"][i]);
      std::printf(", %.2e without", e0);
      if (pos >= 1000) worst_without_late = std::max(worst_without_late, e0);
    }
    std::printf("\n");
    EXPECT_LT(e, kBound) << "position " << pos;
    worst = std::max(worst, e);
  }
  // The check can fail: dropping the factors moves the logits far beyond the bound.
  EXPECT_GT(worst_without_late, 10 * kBound);
  std::printf("[ rope   ] worst relative error %.2e (bound %.0e)\n", worst, kBound);
}

}  // namespace
}  // namespace geniex
