// Every supported architecture against llama.cpp on tiny random-weight models: Llama with
// Llama 3.1 RoPE scaling over 8,400 positions (past the original 8,192-token context), Qwen2
// (q/k/v biases), Qwen3 (per-head q/k RMSNorm) and Gemma 3 (sliding-window local layers,
// pre/post norms, GELU-tanh). Each fixture (scripts/make_arch_refs.py)
// lists the GGUF's metadata and, per tensor, the parameters of a counter-based generator that
// this file reimplements, so the model is rebuilt here bit for bit; and llama.cpp's logits at a
// few positions.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backends/cpu/backend/ops.hpp"
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

nlohmann::json load_fixture(const std::string& name) {
  std::ifstream in(std::string(GENIEX_TEST_DATA) + "/arch_refs/" + name + ".json");
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// Writes the fixture's model to a temporary file; `drop` names a tensor to leave out;
// `override_key` (a u32 metadata key) gets `override_value` instead of the fixture's value.
std::string write_model(const nlohmann::json& fx, const std::string& drop = "",
                        const std::string& override_key = "", uint32_t override_value = 0) {
  gguf::Writer w;
  for (const auto& kv : fx["metadata"]) {
    const std::string key = kv[0], type = kv[1];
    if (type == "str") w.set_string(key, kv[2].get<std::string>());
    else if (type == "u32") w.set_u32(key, key == override_key ? override_value : kv[2].get<uint32_t>());
    else w.set_f32(key, kv[2].get<float>());
  }
  for (const auto& t : fx["tensors"]) {
    const std::string name = t[0];
    if (name == drop) continue;
    std::vector<int64_t> ne = t[1].get<std::vector<int64_t>>();
    int64_t n = 1;
    for (int64_t x : ne) n *= x;
    const std::vector<float> data = t[2].is_string() ? t[3].get<std::vector<float>>()
                                                      : values(t[2].get<uint64_t>(), n, t[3], t[4]);
    const Status st = w.add_tensor(name, DType::F32, std::move(ne), data.data(), data.size() * sizeof(float));
    EXPECT_TRUE(st.has_value()) << (st ? "" : st.error().to_string());
  }
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("geniex_arch_" + std::to_string(::getpid()) + "_" +
                             fx["metadata"][1][2].get<std::string>() +
                             (drop.empty() && override_key.empty() ? "" : "_changed") + ".gguf"))
                               .string();
  EXPECT_TRUE(w.write_file(path).has_value());
  return path;
}

// Logits at the fixture's positions below max_tokens, from one pass over its token sequence.
std::vector<std::vector<float>> run(const nlohmann::json& fx, const std::string& path,
                                    int32_t max_tokens = INT32_MAX) {
  std::vector<std::vector<float>> rows;
  const int32_t n_tokens = std::min(fx["n_tokens"].get<int32_t>(), max_tokens);
  const int32_t n_vocab = fx["n_vocab"];
  auto model = ModelBuilder(path).with_threads(2).with_context(fx["n_ctx"].get<int32_t>()).build();
  EXPECT_TRUE(model.has_value()) << (model ? "" : model.error().to_string());
  if (!model) return rows;
  EXPECT_EQ(model->info().n_vocab, n_vocab);
  auto session = model->new_session();
  EXPECT_TRUE(session.has_value());
  if (!session) return rows;
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
  for (int32_t i = 0; i < n_tokens; ++i) tokens[static_cast<size_t>(i)] = (i * 7 + 3) % n_vocab;
  auto logits = session->eval(tokens, /*all_logits=*/true);
  EXPECT_TRUE(logits.has_value()) << (logits ? "" : logits.error().to_string());
  if (!logits) return rows;
  EXPECT_EQ(logits->size(), static_cast<size_t>(n_tokens) * static_cast<size_t>(n_vocab));
  for (const auto& p : fx["positions"]) {
    if (p.get<int32_t>() >= n_tokens) break;
    const float* row = logits->data() + static_cast<size_t>(p.get<int32_t>()) * static_cast<size_t>(n_vocab);
    rows.emplace_back(row, row + n_vocab);
  }
  return rows;
}

// max |a - b| / max(1, max |b|).
double row_error(const std::vector<float>& a, const nlohmann::json& ref) {
  double max_diff = 0, max_ref = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    const double r = ref[i].get<double>();
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - r));
    max_ref = std::max(max_ref, std::fabs(r));
  }
  return max_diff / max_ref;
}

// f32 weights on both sides; llama.cpp keeps K and V in f16 and so does GenieX, so the bound is
// set by f16 rounding in attention, not by the architecture's arithmetic.
constexpr double kBound = 2e-3;

// Compares GenieX with llama.cpp at every fixture position; then, to show that the comparison
// can fail, runs the model without `essential` (a tensor the architecture depends on; the
// loader must either refuse the file or give logits far from the reference).
void check_case(const std::string& name, const std::string& essential, int32_t essential_tokens) {
  const nlohmann::json fx = load_fixture(name);
  ASSERT_FALSE(fx.is_discarded()) << "cannot read tests/data/arch_refs/" << name << ".json";
  const std::string path = write_model(fx);
  const auto rows = run(fx, path);
  std::filesystem::remove(path);
  ASSERT_EQ(rows.size(), fx["positions"].size());
  double worst = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const double e = row_error(rows[i], fx["logits"][i]);
    std::printf("[ %-7s] pos %5d: relative error %.2e\n", name.c_str(), fx["positions"][i].get<int>(), e);
    EXPECT_LT(e, kBound) << name << " position " << fx["positions"][i];
    worst = std::max(worst, e);
  }
  std::printf("[ %-7s] worst relative error %.2e (bound %.0e)\n", name.c_str(), worst, kBound);

  if (essential.empty()) return;
  const std::string bad = write_model(fx, essential);
  auto model = ModelBuilder(bad).with_threads(2).with_context(fx["n_ctx"].get<int32_t>()).build();
  if (!model) {
    std::printf("[ %-7s] without %s: refused (%s)\n", name.c_str(), essential.c_str(),
                model.error().message.c_str());
    EXPECT_NE(model.error().message.find(essential), std::string::npos) << model.error().message;
  } else {
    const auto bad_rows = run(fx, bad, essential_tokens);
    double worst_bad = 0;
    for (size_t i = 0; i < bad_rows.size(); ++i) worst_bad = std::max(worst_bad, row_error(bad_rows[i], fx["logits"][i]));
    std::printf("[ %-7s] without %s: worst relative error %.2e\n", name.c_str(), essential.c_str(), worst_bad);
    EXPECT_GT(worst_bad, 10 * kBound);
  }
  std::filesystem::remove(bad);
}

TEST(ArchRefs, Llama31RopeScalingPast8192MatchesLlamaCpp) {
  check_case("llama31", "rope_freqs.weight", /*essential_tokens=*/1001);
}

TEST(ArchRefs, Qwen2MatchesLlamaCpp) { check_case("qwen2", "blk.1.attn_q.bias", 300); }

TEST(ArchRefs, Qwen3MatchesLlamaCpp) { check_case("qwen3", "blk.0.attn_k_norm.weight", 300); }

TEST(ArchRefs, Gemma3SlidingWindowMatchesLlamaCpp) {
  check_case("gemma3", "blk.2.post_ffw_norm.weight", 300);
  // The window matters: with one wider than the sequence, the logits past the 16th position
  // leave the bound, and the earlier ones stay within it.
  const nlohmann::json fx = load_fixture("gemma3");
  const std::string wide = write_model(fx, "", "gemma3.attention.sliding_window", 100000);
  const auto rows = run(fx, wide);
  std::filesystem::remove(wide);
  ASSERT_EQ(rows.size(), fx["positions"].size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const int pos = fx["positions"][i];
    const double e = row_error(rows[i], fx["logits"][i]);
    std::printf("[ gemma3 ] window 100000, pos %3d: relative error %.2e\n", pos, e);
    if (pos < 16) {
      EXPECT_LT(e, kBound);
    }
    if (pos >= 40) {
      EXPECT_GT(e, 10 * kBound);
    }
  }
}

// Decode token by token past the 16-key window and across the 32-key cache blocks: the split
// one-token attention (op_attention.cpp; forced from the first key) gives the unit path's bits
// at every step, with 1 and 2 threads, and both stay within the bound of llama.cpp's logits.
TEST(ArchRefs, Gemma3WindowedDecodeSplitAttentionGivesTheUnitPathsBits) {
  const nlohmann::json fx = load_fixture("gemma3");
  ASSERT_FALSE(fx.is_discarded());
  const std::string path = write_model(fx);
  const int32_t n_vocab = fx["n_vocab"];
  constexpr int32_t kSteps = 80;
  auto decode = [&](const char* min_keys, int threads) {
    // The CPU backend reads the variable when the model's session builds it.
    ::setenv("GENIEX_ATTN_SPLIT_MIN_KEYS", min_keys, 1);
    struct Unset {
      ~Unset() { ::unsetenv("GENIEX_ATTN_SPLIT_MIN_KEYS"); }
    } unset;
    auto model = ModelBuilder(path).with_threads(threads).with_context(fx["n_ctx"].get<int32_t>()).build();
    std::vector<float> all;
    EXPECT_TRUE(model.has_value()) << (model ? "" : model.error().to_string());
    if (!model) return all;
    auto session = model->new_session();
    EXPECT_TRUE(session.has_value());
    if (!session) return all;
    for (int32_t i = 0; i < kSteps; ++i) {
      const int32_t token = (i * 7 + 3) % n_vocab;  // the fixture's sequence
      auto logits = session->eval(std::span<const int32_t>(&token, 1));
      EXPECT_TRUE(logits.has_value());
      if (!logits) return all;
      all.insert(all.end(), logits->begin(), logits->end());
    }
    return all;
  };
  for (const int threads : {1, 2}) {
    const uint64_t runs0 = backends::cpu_ops::attention_split_runs();
    const std::vector<float> units = decode("1073741824", threads);
    const uint64_t runs1 = backends::cpu_ops::attention_split_runs();
    const std::vector<float> split = decode("1", threads);
    EXPECT_EQ(runs1, runs0) << "the unit path's model ran the split path";
    EXPECT_GE(backends::cpu_ops::attention_split_runs() - runs1, static_cast<uint64_t>(kSteps)) << "decode did not split";
    ASSERT_EQ(units.size(), static_cast<size_t>(kSteps) * static_cast<size_t>(n_vocab));
    ASSERT_EQ(split.size(), units.size());
    EXPECT_EQ(std::memcmp(units.data(), split.data(), units.size() * sizeof(float)), 0) << threads << " threads";
    for (size_t i = 0; i < fx["positions"].size(); ++i) {
      const int pos = fx["positions"][i];
      if (pos >= kSteps) break;
      const std::vector<float> row(split.begin() + static_cast<ptrdiff_t>(pos) * n_vocab,
                                   split.begin() + static_cast<ptrdiff_t>(pos + 1) * n_vocab);
      EXPECT_LT(row_error(row, fx["logits"][i]), kBound) << "position " << pos;
    }
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace geniex
