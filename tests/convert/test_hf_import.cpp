// Hugging Face folders against transformers: each tiny model of tests/data/hf_tiny
// (scripts/make_hf_tiny.py; Llama 3.1 with llama3 RoPE scaling, SmolLM2-style tied BF16, Mistral
// F16 sharded with a sliding window, Qwen2 with biases, Qwen3, Gemma 3) is loaded four ways and
// its logits compared with the ones transformers computed:
//   direct  ModelBuilder on the folder (in-memory import, weights as stored, BF16 as F32)
//   f32     import to an F32 GGUF file, then load it
//   f16     F16 GGUF (2-D weights rounded to F16)
//   q8_0, q4_0  quantized GGUFs: top-1 agreement and mean KL divergence against the reference
// Error measure for the float paths, per listed position: max |logit - ref| / max |ref|.
// And the errors a broken folder must give: missing config.json, unknown model_type, missing
// tensor, shape mismatch, truncated shard.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>

#include "common/safetensors_writer.hpp"
#include "common/test_seed.hpp"
#include "convert/hf_import.hpp"
#include "formats/gguf.hpp"
#include "formats/safetensors.hpp"
#include "geniex/geniex.hpp"
#include "tokenizer/tokenizer.hpp"

namespace geniex {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Tolerances per path, set from measurements (scripts/make_hf_tiny.py fixtures, transformers 5.24
// in float32). Not 1e-4: GenieX keeps K and V in an f16 KV cache and rounds q and the attention
// probabilities to f16 (as llama.cpp's default attention), so even at position 0, where attention
// returns V itself, the logits differ from transformers by 2.5e-4 of their range; over 100
// positions the worst F32-path error measured is 1.5e-3 (gemma3). Conversion mistakes (a wrong
// permutation, a missing +1, wrong RoPE factors) give errors of order 0.1 to 1; the weights
// themselves are checked bit for bit in ImportedWeightsAreExact.
constexpr double kF32Kv16MaxRel = 2.5e-3;
// With the KV cache in F32 (ModelBuilder::with_kv_cache_type) attention runs in full precision:
// measured worst 2.8e-6 over all six models (float32 rounding), bound 2e-5 (the issue asks ~1e-4).
constexpr double kF32MaxRel = 2e-5;
// F16: every 2-D weight rounded to F16, and activations rounded to F16 for F16 matmuls
// (measured worst 2.2e-3, qwen3). Also the direct path of a checkpoint stored in F16 (mistral).
constexpr double kF16MaxRel = 4e-3;
// Quantized paths on random (untrained) weights, whose nearly flat logits let quantization move
// the argmax more often than on a trained model. Measured: Q8_0 top-1 >= 17/18 and mean KL
// <= 4.5e-4 per model; Q4_0 top-1 8/18 to 12/18 and mean KL 0.034 to 0.057. Chance is 1/512.
constexpr double kQ8MinTop1 = 0.85, kQ8MaxKl = 2e-3;
constexpr double kQ4MinTop1 = 0.3, kQ4MaxKl = 0.15;

fs::path fixture_dir() {
  if (const char* env = std::getenv("GENIEX_HF_TINY")) return env;
  return fs::path(GENIEX_TEST_DATA) / "hf_tiny";
}

const json& refs() {
  static const json j = [] {
    std::ifstream in(fixture_dir() / "refs.json");
    return json::parse(in, nullptr, /*allow_exceptions=*/false);
  }();
  return j;
}

fs::path temp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("geniex_hf_" + std::to_string(::getpid()) + "_" + tag);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::vector<float> softmax(const float* x, size_t n) {
  const float mx = *std::max_element(x, x + n);
  std::vector<float> p(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    p[i] = std::exp(x[i] - mx);
    sum += static_cast<double>(p[i]);
  }
  for (float& v : p) v = static_cast<float>(static_cast<double>(v) / sum);
  return p;
}

struct Measured {
  double max_rel = 0;   // worst over positions of max|diff| / max|ref|
  int top1_same = 0;
  int n_positions = 0;
  double kl_sum = 0;    // sum over positions of KL(ref || test)
  double mean_kl() const { return n_positions ? kl_sum / n_positions : 0; }
  double top1() const { return n_positions ? static_cast<double>(top1_same) / n_positions : 0; }
};

// Evaluates every prompt of the model's references in a fresh session and compares.
void measure(const Model& model, const json& ref, Measured& m) {
  for (const json& prompt : ref["prompts"]) {
    auto session = model.new_session();
    ASSERT_TRUE(session.has_value()) << session.error().to_string();
    const std::vector<int32_t> tokens = prompt["tokens"].get<std::vector<int32_t>>();
    auto logits = session->eval(tokens, /*all_logits=*/true);
    ASSERT_TRUE(logits.has_value()) << logits.error().to_string();
    const size_t n_vocab = static_cast<size_t>(model.info().n_vocab);
    ASSERT_EQ(logits->size(), n_vocab * tokens.size());
    const auto& positions = prompt["positions"];
    for (size_t k = 0; k < positions.size(); ++k) {
      const size_t pos = positions[k].get<size_t>();
      const std::vector<float> want = prompt["logits"][k].get<std::vector<float>>();
      ASSERT_EQ(want.size(), n_vocab);
      const float* got = logits->data() + pos * n_vocab;
      double max_diff = 0, max_ref = 0;
      for (size_t i = 0; i < n_vocab; ++i) {
        max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
        max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
      }
      m.max_rel = std::max(m.max_rel, max_diff / max_ref);
      if (std::getenv("GENIEX_HF_VERBOSE")) std::printf("    pos %zu rel %.3g\n", pos, max_diff / max_ref);
      const auto p = softmax(want.data(), n_vocab), q = softmax(got, n_vocab);
      double kl = 0;
      for (size_t i = 0; i < n_vocab; ++i) {
        const double pi = static_cast<double>(p[i]), qi = static_cast<double>(q[i]);
        if (pi > 0) kl += pi * (std::log(pi) - std::log(std::max(1e-30, qi)));
      }
      m.kl_sum += kl;
      m.top1_same += std::max_element(want.begin(), want.end()) - want.begin() == std::max_element(got, got + n_vocab) - got;
      m.n_positions++;
    }
  }
}

// Greedy continuation of the "short" prompt, compared with transformers' generate().
void check_greedy(const Model& model, const json& ref) {
  if (!ref.contains("greedy")) return;
  const std::vector<int32_t> want = ref["greedy"].get<std::vector<int32_t>>();
  for (const json& prompt : ref["prompts"]) {
    if (prompt["name"] != "short") continue;
    auto s = model.new_session();
    ASSERT_TRUE(s.has_value());
    std::vector<int32_t> next = prompt["tokens"].get<std::vector<int32_t>>();
    std::vector<int32_t> got;
    for (size_t i = 0; i < want.size(); ++i) {
      auto l = s->eval(next);
      ASSERT_TRUE(l.has_value()) << l.error().to_string();
      const int32_t id = static_cast<int32_t>(std::max_element(l->begin(), l->end()) - l->begin());
      got.push_back(id);
      next = {id};
    }
    EXPECT_EQ(got, want) << "greedy continuation differs from transformers";
  }
}

std::string write_gguf(const std::string& model_dir, std::optional<DType> type, const fs::path& out) {
  convert::ImportOptions o;
  o.type = type;
  convert::ImportReport rep;
  auto w = convert::import_hf(model_dir, o, &rep);
  EXPECT_TRUE(w.has_value()) << w.error().to_string();
  if (!w) return "";
  auto st = w->write_file(out.string());
  EXPECT_TRUE(st.has_value()) << st.error().to_string();
  return out.string();
}

class HfTiny : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTiny, MatchesTransformers) {
  const std::string name = GetParam();
  ASSERT_FALSE(refs().is_discarded()) << "cannot read " << (fixture_dir() / "refs.json")
                                      << " (scripts/make_hf_tiny.py writes it)";
  ASSERT_TRUE(refs()["models"].contains(name)) << name << " missing from refs.json";
  const json& ref = refs()["models"][name];
  const std::string dir = (fixture_dir() / name).string();
  const fs::path tmp = temp_dir(name);

  struct Path {
    const char* label;
    std::optional<DType> type;
    bool direct;
    KvCacheType kv = KvCacheType::F16;
  };
  const Path paths[] = {{"direct", std::nullopt, true, KvCacheType::F32},
                        {"f32", DType::F32, false, KvCacheType::F32},
                        {"f32kv16", DType::F32, false, KvCacheType::F16},
                        {"f16", DType::F16, false},
                        {"q8_0", DType::Q8_0, false},
                        {"q4_0", DType::Q4_0, false}};
  for (const Path& p : paths) {
    SCOPED_TRACE(std::string(name) + " " + p.label);
    const std::string path = p.direct ? dir : write_gguf(dir, p.type, tmp / (std::string(p.label) + ".gguf"));
    ASSERT_FALSE(path.empty());
    auto model = ModelBuilder(path).with_threads(2).with_kv_cache_type(p.kv).build();
    ASSERT_TRUE(model.has_value()) << model.error().to_string();
    EXPECT_EQ(model->info().n_vocab, 512);
    Measured m;
    measure(*model, ref, m);
    std::printf("[ measured ] %-8s %-6s max rel err %.3g  top-1 %d/%d  mean KL %.3g\n", name.c_str(), p.label,
                m.max_rel, m.top1_same, m.n_positions, m.mean_kl());
    const std::string label = p.label;
    const bool f16_on_disk = ref.value("dtype_on_disk", "") == "float16";
    if (label == "f32" || (label == "direct" && !f16_on_disk)) {
      EXPECT_LE(m.max_rel, kF32MaxRel);
      check_greedy(*model, ref);
    } else if (label == "f32kv16") {
      EXPECT_LE(m.max_rel, kF32Kv16MaxRel);
      check_greedy(*model, ref);
    } else if (label == "f16" || label == "direct") {
      EXPECT_LE(m.max_rel, kF16MaxRel);
    } else if (label == "q8_0") {
      EXPECT_GE(m.top1(), kQ8MinTop1);
      EXPECT_LE(m.mean_kl(), kQ8MaxKl);
    } else {
      EXPECT_GE(m.top1(), kQ4MinTop1);
      EXPECT_LE(m.mean_kl(), kQ4MaxKl);
    }
  }
  fs::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(Models, HfTiny,
                         ::testing::Values("llama31", "smollm2", "mistral", "qwen2", "qwen3", "gemma3"),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

// The tokenizer travels with the weights: the imported GGUF's tokenizer encodes like the folder's
// tokenizer.json read directly.
TEST(HfImport, TokenizerMatchesTokenizerJson) {
  for (const char* name : {"llama31", "gemma3"}) {
    const std::string dir = (fixture_dir() / name).string();
    if (!fs::exists(fs::path(dir) / "tokenizer.json")) continue;
    auto model = ModelBuilder(dir).with_threads(1).build();
    ASSERT_TRUE(model.has_value()) << model.error().to_string();
    auto direct = tok::Tokenizer::from_hf(dir);
    ASSERT_TRUE(direct.has_value()) << direct.error().to_string();
    for (const char* text : {"Hello world, this is GenieX.", "  spaces\tand\nnewlines 12345 ", "ünïcödé ✓"}) {
      auto a = model->tokenize(text, true, true);
      auto b = (*direct)->encode(text, true, true);
      ASSERT_TRUE(a.has_value() && b.has_value());
      EXPECT_EQ(*a, *b) << name << ": " << text;
    }
  }
}

// The F32 GGUF holds exactly the checkpoint's values in llama.cpp's layout: Llama q/k rows
// interleaved per head (row h*hd + 2i + j <- h*hd + j*hd/2 + i), Gemma norms 1 + w, the q norm
// also times sqrt(head_dim / query_pre_attn_scalar), Llama 3.1 rope_freqs from the config.
TEST(HfImport, ImportedWeightsAreExact) {
  for (const std::string name : {"llama31", "gemma3"}) {
    SCOPED_TRACE(name);
    const std::string dir = (fixture_dir() / name).string();
    convert::ImportOptions o;
    o.type = DType::F32;
    auto w = convert::import_hf(dir, o);
    ASSERT_TRUE(w.has_value()) << w.error().to_string();
    const std::vector<uint8_t> bytes = w->to_bytes();
    auto g = gguf::File::parse(MappedFile::from_bytes(bytes.data(), bytes.size()));
    ASSERT_TRUE(g.has_value()) << g.error().to_string();
    auto st = safetensors::Folder::open(dir);
    ASSERT_TRUE(st.has_value()) << st.error().to_string();
    auto values = [&](const std::string& hf) {
      const safetensors::Tensor* t = st->find(hf);
      EXPECT_NE(t, nullptr) << hf;
      return t ? safetensors::to_f32(*t).value() : std::vector<float>();
    };
    auto gguf_values = [&](const std::string& n) {
      const gguf::TensorInfo* t = g->find_tensor(n);
      EXPECT_NE(t, nullptr) << n;
      EXPECT_EQ(t ? t->type : DType::F16, DType::F32) << n;
      std::vector<float> v(t ? static_cast<size_t>(t->n_elements()) : 0);
      if (t) std::memcpy(v.data(), t->data, v.size() * 4);
      return v;
    };
    EXPECT_EQ(gguf_values("token_embd.weight"), values("model.embed_tokens.weight"));
    const int64_t hd = 16, cols = 64;
    const std::vector<float> q_hf = values("model.layers.0.self_attn.q_proj.weight");
    const std::vector<float> q = gguf_values("blk.0.attn_q.weight");
    ASSERT_EQ(q.size(), q_hf.size());
    for (int64_t r = 0; r < static_cast<int64_t>(q.size()) / cols; ++r) {
      const int64_t h = r / hd, i = (r % hd) / 2, j = r % 2;
      const int64_t src = name == "llama31" ? h * hd + j * hd / 2 + i : r;  // Gemma keeps HF's (NeoX) order
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(q[static_cast<size_t>(r * cols + c)], q_hf[static_cast<size_t>(src * cols + c)]) << r;
    }
    if (name == "llama31") {
      const std::vector<float> f = gguf_values("rope_freqs.weight");
      ASSERT_EQ(f.size(), 8u);
      // rope_parameters: theta 500000, factor 8, low 1, high 4, original context 64.
      for (size_t k = 0; k < f.size(); ++k) {
        const double wavelen = 2 * std::numbers::pi * std::pow(500000.0, 2.0 * static_cast<double>(k) / 16.0);
        const double smooth = (64.0 / wavelen - 1.0) / 3.0;
        const double want = wavelen < 16 ? 1.0 : wavelen > 64 ? 8.0 : 1.0 / ((1 - smooth) / 8.0 + smooth);
        EXPECT_NEAR(f[k], want, 1e-6 * want) << k;
      }
      EXPECT_EQ(gguf_values("blk.1.ffn_norm.weight"), values("model.layers.1.post_attention_layernorm.weight"));
    } else {
      const std::vector<float> n_hf = values("model.layers.2.pre_feedforward_layernorm.weight");
      const std::vector<float> n = gguf_values("blk.2.ffn_norm.weight");
      ASSERT_EQ(n.size(), n_hf.size());
      for (size_t k = 0; k < n.size(); ++k) EXPECT_EQ(n[k], n_hf[k] + 1.0f) << k;
      EXPECT_EQ(g->find_tensor("output.weight"), nullptr);  // tied
      auto pattern = g->find("gemma3.attention.sliding_window_pattern");
      ASSERT_NE(pattern, nullptr);
      EXPECT_EQ(pattern->to_display(), gguf::Value::of_array(gguf::ValueType::Bool, {gguf::Value::of_bool(true), gguf::Value::of_bool(true), gguf::Value::of_bool(false)}).to_display());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Broken folders. A small Llama written here; each case breaks one thing.

class HfBroken : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    config_ = {{"architectures", {"LlamaForCausalLM"}},
               {"model_type", "llama"},
               {"vocab_size", 64},
               {"hidden_size", 32},
               {"intermediate_size", 64},
               {"num_hidden_layers", 1},
               {"num_attention_heads", 2},
               {"num_key_value_heads", 1},
               {"rms_norm_eps", 1e-5},
               {"tie_word_embeddings", false}};
    std::mt19937 rng = test_support::make_rng(77);
    std::normal_distribution<float> n(0.0f, 0.2f);
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
      int64_t count = 1;
      for (int64_t d : shape) count *= d;
      std::vector<float> v(static_cast<size_t>(count));
      for (float& x : v) x = n(rng);
      tensors_.emplace_back(name, shape, v);
    };
    add("model.embed_tokens.weight", {64, 32});
    add("model.layers.0.input_layernorm.weight", {32});
    add("model.layers.0.self_attn.q_proj.weight", {32, 32});
    add("model.layers.0.self_attn.k_proj.weight", {16, 32});
    add("model.layers.0.self_attn.v_proj.weight", {16, 32});
    add("model.layers.0.self_attn.o_proj.weight", {32, 32});
    add("model.layers.0.post_attention_layernorm.weight", {32});
    add("model.layers.0.mlp.gate_proj.weight", {64, 32});
    add("model.layers.0.mlp.up_proj.weight", {64, 32});
    add("model.layers.0.mlp.down_proj.weight", {32, 64});
    add("model.norm.weight", {32});
    add("lm_head.weight", {64, 32});
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& drop = "", const std::string& reshape = "") {
    std::ofstream(dir_ / "config.json") << config_.dump();
    test::SafetensorsWriter w;
    for (const auto& [name, shape, v] : tensors_) {
      if (name == drop) continue;
      std::vector<int64_t> s = shape;
      if (name == reshape) std::reverse(s.begin(), s.end());
      w.add(name, "F32", s, v);
    }
    w.write((dir_ / "model.safetensors").string());
  }
  Error import_error() {
    auto r = convert::import_hf(dir_.string(), {});
    if (r.has_value()) return make_error(ErrorCode::Ok, "import succeeded");
    return r.error();
  }

  fs::path dir_;
  json config_;
  std::vector<std::tuple<std::string, std::vector<int64_t>, std::vector<float>>> tensors_;
};

TEST_F(HfBroken, IntactFolderLoads) {
  write();
  auto model = ModelBuilder(dir_.string()).with_threads(1).build();
  ASSERT_TRUE(model.has_value()) << model.error().to_string();
  EXPECT_EQ(model->info().architecture, "llama");
  EXPECT_EQ(model->info().n_vocab, 64);
  // No tokenizer.json: the weights still evaluate.
  auto s = model->new_session();
  ASSERT_TRUE(s.has_value());
  const std::vector<int32_t> toks = {1, 2, 3};
  auto l = s->eval(toks);
  ASSERT_TRUE(l.has_value()) << l.error().to_string();
  EXPECT_EQ(l->size(), 64u);
}

TEST_F(HfBroken, MissingConfig) {
  write();
  fs::remove(dir_ / "config.json");
  const Error e = import_error();
  EXPECT_EQ(e.code, ErrorCode::NotFound) << e.to_string();
  EXPECT_NE(e.message.find("config.json"), std::string::npos) << e.to_string();
  EXPECT_FALSE(convert::is_hf_folder(dir_.string()));
}

TEST_F(HfBroken, UnknownModelType) {
  config_["model_type"] = "gpt_neox";
  config_["architectures"] = {"GPTNeoXForCausalLM"};
  write();
  const Error e = import_error();
  EXPECT_EQ(e.code, ErrorCode::Unsupported) << e.to_string();
  EXPECT_NE(e.message.find("gpt_neox"), std::string::npos) << e.to_string();
  // Through ModelBuilder the same error reaches the user.
  auto model = ModelBuilder(dir_.string()).build();
  ASSERT_FALSE(model.has_value());
  EXPECT_NE(model.error().message.find("gpt_neox"), std::string::npos) << model.error().to_string();
}

TEST_F(HfBroken, MissingTensor) {
  write("model.layers.0.mlp.up_proj.weight");
  const Error e = import_error();
  EXPECT_EQ(e.code, ErrorCode::NotFound) << e.to_string();
  EXPECT_NE(e.message.find("model.layers.0.mlp.up_proj.weight"), std::string::npos) << e.to_string();
}

TEST_F(HfBroken, MissingLmHeadWhenUntied) {
  write("lm_head.weight");
  const Error e = import_error();
  EXPECT_EQ(e.code, ErrorCode::NotFound) << e.to_string();
  EXPECT_NE(e.message.find("lm_head.weight"), std::string::npos) << e.to_string();
}

TEST_F(HfBroken, ShapeMismatch) {
  write("", "model.layers.0.mlp.down_proj.weight");
  const Error e = import_error();
  EXPECT_EQ(e.code, ErrorCode::InvalidFormat) << e.to_string();
  EXPECT_NE(e.message.find("model.layers.0.mlp.down_proj.weight"), std::string::npos) << e.to_string();
  EXPECT_NE(e.message.find("[64, 32]"), std::string::npos) << e.to_string();
}

TEST_F(HfBroken, UnexpectedTensor) {
  tensors_.emplace_back("model.layers.0.self_attn.q_proj.bias", std::vector<int64_t>{32}, std::vector<float>(32, 0.0f));
  write();
  const Error e = import_error();
  EXPECT_EQ(e.code, ErrorCode::Unsupported) << e.to_string();
  EXPECT_NE(e.message.find("q_proj.bias"), std::string::npos) << e.to_string();
}

TEST_F(HfBroken, TruncatedShard) {
  write();
  const fs::path p = dir_ / "model.safetensors";
  fs::resize_file(p, fs::file_size(p) - 100);
  const Error e = import_error();
  EXPECT_EQ(e.code, ErrorCode::InvalidFormat) << e.to_string();
  EXPECT_NE(e.message.find("model.safetensors"), std::string::npos) << e.to_string();
  EXPECT_NE(e.message.find("truncated"), std::string::npos) << e.to_string();
}

TEST_F(HfBroken, UnsupportedRopeScaling) {
  config_["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  write();
  const Error e = import_error();
  EXPECT_EQ(e.code, ErrorCode::Unsupported) << e.to_string();
  EXPECT_NE(e.message.find("yarn"), std::string::npos) << e.to_string();
}

TEST_F(HfBroken, BadConfigValues) {
  config_["hidden_size"] = -4;
  write();
  Error e = import_error();
  EXPECT_EQ(e.code, ErrorCode::InvalidFormat) << e.to_string();
  EXPECT_NE(e.message.find("hidden_size"), std::string::npos) << e.to_string();
  std::ofstream(dir_ / "config.json") << "{\"model_type\": ";
  e = import_error();
  EXPECT_EQ(e.code, ErrorCode::InvalidFormat) << e.to_string();
  EXPECT_NE(e.message.find("config.json"), std::string::npos) << e.to_string();
}

// Quantize on load: a folder loaded with a load type runs exactly like the GGUF converted to
// that type (same bytes, same logits); a load type on a GGUF file or an unknown type is an error.
TEST(HfImport, LoadTypeQuantizesWhileLoading) {
  const std::string dir = (fixture_dir() / "qwen2").string();
  const fs::path tmp = fs::temp_directory_path() / ("geniex_hf_loadtype_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  const std::string gguf = write_gguf(dir, DType::Q8_0, tmp / "q8.gguf");
  ASSERT_FALSE(gguf.empty());
  auto on_load = ModelBuilder(dir).with_threads(1).with_load_type("q8_0").build();
  auto from_file = ModelBuilder(gguf).with_threads(1).build();
  ASSERT_TRUE(on_load.has_value()) << on_load.error().to_string();
  ASSERT_TRUE(from_file.has_value()) << from_file.error().to_string();
  EXPECT_EQ(on_load->info().n_params, from_file->info().n_params);
  const std::vector<int32_t> tokens = {1, 56, 76, 73, 225, 415, 276, 79};
  auto s1 = on_load->new_session();
  auto s2 = from_file->new_session();
  ASSERT_TRUE(s1.has_value() && s2.has_value());
  auto l1 = s1->eval(tokens, true);
  ASSERT_TRUE(l1.has_value());
  const std::vector<float> a(l1->begin(), l1->end());
  auto l2 = s2->eval(tokens, true);
  ASSERT_TRUE(l2.has_value());
  ASSERT_EQ(a.size(), l2->size());
  EXPECT_TRUE(std::equal(a.begin(), a.end(), l2->begin())) << "quantize-on-load differs from the converted file";

  auto on_gguf = ModelBuilder(gguf).with_load_type("q4_0").build();
  ASSERT_FALSE(on_gguf.has_value());
  EXPECT_EQ(on_gguf.error().code, ErrorCode::InvalidArgument);
  EXPECT_NE(on_gguf.error().message.find("geniex quantize"), std::string::npos) << on_gguf.error().to_string();
  auto unknown = ModelBuilder(dir).with_load_type("q3_k").build();
  ASSERT_FALSE(unknown.has_value());
  EXPECT_NE(unknown.error().message.find("q3_k"), std::string::npos) << unknown.error().to_string();
  fs::remove_all(tmp);
}

TEST(HfImportTypes, OutputTypeNames) {
  for (const char* n : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "Q8_0"}) {
    auto t = convert::parse_output_type(n);
    ASSERT_TRUE(t.has_value()) << n;
  }
  EXPECT_EQ(*convert::parse_output_type("q4_k"), DType::Q4_K);
  auto bad = convert::parse_output_type("q3_k");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("q3_k"), std::string::npos);
  EXPECT_FALSE(convert::parse_output_type("q8_k").has_value());  // activation format
}

}  // namespace
}  // namespace geniex
