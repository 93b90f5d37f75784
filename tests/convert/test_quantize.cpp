// geniex quantize: the weight quantizer against llama.cpp's error (committed fixture), the
// per-tensor type rules, quantized tiny models that load and stay close to F32, the output-file
// rules, and the streaming GGUF writer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/test_seed.hpp"
#include "common/tiny_model.hpp"
#include "convert/quantize.hpp"
#include "formats/gguf.hpp"
#include "geniex/geniex.hpp"
#include "quant/quant.hpp"

namespace geniex {
namespace {

namespace fs = std::filesystem;

std::string temp_dir() {
  const fs::path dir = fs::temp_directory_path() / ("geniex_quantize_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir.string();
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

double row_sse(DType t, const float* x, int64_t n, bool searched) {
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, n)), 0xA5);
  std::vector<float> y(static_cast<size_t>(n), std::nanf(""));
  if (searched) {
    quant::quantize_row_weights(t, x, q.data(), n);
  } else {
    quant::quantize_row_ref(t, x, q.data(), n);
  }
  quant::dequantize_row_ref(t, q.data(), y.data(), n);
  double e = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(y[static_cast<size_t>(i)]) - static_cast<double>(x[i]);
    e += d * d;
  }
  return e;
}

// ---- quality against llama.cpp ----------------------------------------------------------------

struct RmseFixture {
  uint32_t n_rows = 0, n_cols = 0;
  std::vector<float> rows;
  std::map<uint32_t, std::vector<double>> sse;  // ggml type id -> llama.cpp's error per row
};

RmseFixture load_rmse_fixture() {
  RmseFixture f;
  const std::vector<uint8_t> b = read_bytes(std::string(GENIEX_TEST_DATA) + "/quantize/rmse_reference.bin");
  size_t pos = 0;
  auto u32 = [&] {
    uint32_t v = 0;
    std::memcpy(&v, b.data() + pos, 4);
    pos += 4;
    return v;
  };
  if (b.size() < 20 || std::memcmp(b.data(), "GXQR", 4) != 0) return f;
  pos = 4;
  if (u32() != 1) return f;
  f.n_rows = u32();
  f.n_cols = u32();
  const uint32_t n_types = u32();
  f.rows.resize(static_cast<size_t>(f.n_rows) * f.n_cols);
  std::memcpy(f.rows.data(), b.data() + pos, f.rows.size() * sizeof(float));
  pos += f.rows.size() * sizeof(float);
  for (uint32_t t = 0; t < n_types; ++t) {
    const uint32_t id = u32();
    std::vector<double> s(f.n_rows);
    std::memcpy(s.data(), b.data() + pos, s.size() * sizeof(double));
    pos += s.size() * sizeof(double);
    f.sse[id] = std::move(s);
  }
  return f;
}

TEST(QuantizeQuality, NoWorseThanLlamaCppOnFixtureRows) {
  const RmseFixture f = load_rmse_fixture();
  ASSERT_GT(f.n_rows, 0u) << "tests/data/quantize/rmse_reference.bin missing or malformed "
                             "(scripts/make_quantize_rmse_fixture.py writes it)";
  ASSERT_EQ(f.sse.size(), 8u);
  for (const auto& [id, ref_sse] : f.sse) {
    const DType t = *dtype_from_id(id);
    double sum_ours = 0, sum_ref = 0;
    for (uint32_t r = 0; r < f.n_rows; ++r) {
      const float* x = f.rows.data() + static_cast<size_t>(r) * f.n_cols;
      // GenieX's reference quantizer is ggml's: same error as llama.cpp on every row.
      const double ref_ours = row_sse(t, x, f.n_cols, false);
      EXPECT_NEAR(ref_ours, ref_sse[r], 1e-6 * ref_sse[r] + 1e-12) << dtype_name(t) << " row " << r;
      // The weight quantizer: RMSE at most 1% above llama.cpp's on every row.
      const double ours = row_sse(t, x, f.n_cols, true);
      EXPECT_LE(ours, ref_sse[r] * 1.01 * 1.01 + 1e-12) << dtype_name(t) << " row " << r;
      sum_ours += ours;
      sum_ref += ref_sse[r];
    }
    std::printf("[ rmse     ] %-5s GenieX / llama.cpp = %.4f over %u rows\n", std::string(dtype_name(t)).c_str(),
                std::sqrt(sum_ours / sum_ref), f.n_rows);
  }
}

TEST(QuantizeQuality, SearchNeverWorseThanReferencePerBlock) {
  std::mt19937 rng = test_support::make_rng(41);
  // Q4_0 searches (never worse, better somewhere); every other type is the reference itself.
  const DType types[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                         DType::Q4_K, DType::Q5_K, DType::Q6_K};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::student_t_distribution<float> heavy(2.5f);
  for (const DType t : types) {
    const int64_t block = dtype_info(t).block_size;
    double total_ours = 0, total_ref = 0;
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> x(static_cast<size_t>(block));
      const float scale = std::pow(10.0f, static_cast<float>(trial % 7) - 4.0f);
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = scale * (trial % 3 == 0 ? heavy(rng) : normal(rng)) + (trial % 5 == 0 ? 0.5f * scale : 0.0f);
      }
      if (trial == 1) std::fill(x.begin(), x.end(), 0.0f);
      if (trial == 2) std::fill(x.begin(), x.end(), 0.25f);
      const double ours = row_sse(t, x.data(), block, true);
      const double ref = row_sse(t, x.data(), block, false);
      if (t == DType::Q4_0) {
        ASSERT_LE(ours, ref) << dtype_name(t) << " trial " << trial;
      } else {
        ASSERT_EQ(ours, ref) << dtype_name(t) << " trial " << trial;
      }
      total_ours += ours;
      total_ref += ref;
    }
    if (t == DType::Q4_0) {
      EXPECT_LT(total_ours, total_ref) << "the Q4_0 search found nothing better anywhere";
    }
  }
}

// ---- targets and per-tensor rules --------------------------------------------------------------

TEST(QuantizeTargets, NamesAndFileTypes) {
  auto t = convert::find_quant_target("Q4_K_M");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->base, DType::Q4_K);
  EXPECT_EQ(t->file_type, 15u);
  EXPECT_EQ(convert::find_quant_target("q8_0")->file_type, 7u);
  EXPECT_EQ(convert::find_quant_target("q5_0")->file_type, 8u);
  EXPECT_EQ(convert::find_quant_target("f16")->file_type, 1u);
  EXPECT_EQ(convert::find_quant_target("bf16")->file_type, 32u);
  auto bad = convert::find_quant_target("q3_k_xl");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::InvalidArgument);
  EXPECT_NE(bad.error().message.find("q3_k_xl"), std::string::npos);
  EXPECT_NE(bad.error().message.find("q4_k_m"), std::string::npos);  // lists the known names
}

gguf::File open_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  write_bytes(path, bytes);
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.has_value()) << f.error().to_string();
  return std::move(*f);
}

std::map<std::string, DType> plan_types(const gguf::File& f, std::string_view target, bool pure = false) {
  auto plan = convert::plan_quantization(f, *convert::find_quant_target(target), pure);
  EXPECT_TRUE(plan.has_value()) << plan.error().to_string();
  std::map<std::string, DType> out;
  for (const auto& c : *plan) out[c.name] = c.to;
  return out;
}

test_support::TinyLlamaConfig f32_config(int n_embd, int n_layer, bool tied) {
  test_support::TinyLlamaConfig c;
  c.n_embd = n_embd;
  c.n_ff = 2 * n_embd;
  c.n_layer = n_layer;
  c.tied = tied;
  c.embd_type = c.attn_type = c.attn_out_type = c.ffn_gate_type = c.ffn_up_type = c.ffn_down_type =
      c.output_type = DType::F32;
  return c;
}

TEST(QuantizePlan, LlamaCppRules) {
  const std::string dir = temp_dir();
  const gguf::File f = open_bytes(dir + "/plan8.gguf", test_support::make_tiny_llama(f32_config(256, 8, false)));
  // Q4_K_M: output Q6_K, attn_v and ffn_down Q6_K on layers 0, 3, 6, 7 of 8 (first and last
  // eighth, every third between), the rest Q4_K, vectors F32.
  auto m = plan_types(f, "q4_k_m");
  EXPECT_EQ(m["output.weight"], DType::Q6_K);
  EXPECT_EQ(m["token_embd.weight"], DType::Q4_K);
  EXPECT_EQ(m["output_norm.weight"], DType::F32);
  for (int i = 0; i < 8; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    const DType more = (i == 0 || i == 3 || i == 6 || i == 7) ? DType::Q6_K : DType::Q4_K;
    EXPECT_EQ(m[p + "attn_v.weight"], more) << i;
    EXPECT_EQ(m[p + "ffn_down.weight"], more) << i;
    EXPECT_EQ(m[p + "attn_q.weight"], DType::Q4_K);
    EXPECT_EQ(m[p + "ffn_norm.weight"], DType::F32);
  }
  EXPECT_EQ(plan_types(f, "q5_k_m")["blk.3.ffn_down.weight"], DType::Q6_K);
  EXPECT_EQ(plan_types(f, "q5_k_m")["blk.4.ffn_down.weight"], DType::Q5_K);
  // Plain types: only the output is raised; --pure keeps even that.
  EXPECT_EQ(plan_types(f, "q4_0")["output.weight"], DType::Q6_K);
  EXPECT_EQ(plan_types(f, "q4_0")["blk.0.attn_v.weight"], DType::Q4_0);
  EXPECT_EQ(plan_types(f, "q8_0")["output.weight"], DType::Q8_0);
  EXPECT_EQ(plan_types(f, "q4_0", true)["output.weight"], DType::Q4_0);
  EXPECT_EQ(plan_types(f, "f16")["output.weight"], DType::F16);

  // Tied embeddings: the token embedding plays the output's part. 64 columns: K types fall
  // back (Q4_K -> Q5_0, Q6_K -> Q8_0), the tied output too (not a multiple of 256 -> Q8_0).
  const gguf::File g = open_bytes(dir + "/plan_tied.gguf", test_support::make_tiny_llama(f32_config(64, 2, true)));
  auto plan = convert::plan_quantization(g, *convert::find_quant_target("q4_k_m"), false);
  ASSERT_TRUE(plan.has_value());
  for (const auto& c : *plan) {
    if (c.name == "token_embd.weight") {
      EXPECT_EQ(c.to, DType::Q8_0);
    } else if (c.name == "blk.0.attn_q.weight") {
      EXPECT_EQ(c.to, DType::Q5_0);
      EXPECT_TRUE(c.fallback);
      EXPECT_EQ(c.preferred, DType::Q4_K);
    } else if (c.name == "blk.1.ffn_down.weight") {
      EXPECT_EQ(c.to, DType::Q8_0);  // the last layer is raised to Q6_K; 128 columns do not fit it
      EXPECT_EQ(c.preferred, DType::Q6_K);
    }
  }
  fs::remove_all(dir);
}

// ---- whole files ---------------------------------------------------------------------------------

std::vector<float> run_logits(const std::string& path) {
  auto m = ModelBuilder(path).with_threads(2).build();
  EXPECT_TRUE(m.has_value()) << m.error().to_string();
  if (!m) return {};
  auto s = m->new_session();
  EXPECT_TRUE(s.has_value());
  std::vector<float> all;
  std::vector<int32_t> toks = {5, 17, 33, 2, 90, 61, 7, 12};
  for (int step = 0; step < 3; ++step) {
    auto l = s->eval(toks);
    EXPECT_TRUE(l.has_value()) << l.error().to_string();
    if (!l) return {};
    all.insert(all.end(), l->begin(), l->end());
    toks = {static_cast<int32_t>(11 + step * 29)};
  }
  return all;
}

// The tiny model with every matrix rescaled to a standard deviation of 1/sqrt(columns) (the
// token embedding to 1), so activations keep their size through the layers and the logits
// measure the weights' error instead of amplifying it chaotically.
void write_well_conditioned(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::string raw = path + ".raw";
  write_bytes(raw, bytes);
  auto f = gguf::File::open(raw);
  ASSERT_TRUE(f.has_value());
  gguf::Writer w;
  for (const auto& [key, value] : f->metadata()) w.set_value(key, value);
  for (const auto& t : f->tensors()) {
    ASSERT_EQ(t.type, DType::F32);
    std::vector<float> v(static_cast<size_t>(t.n_elements()));
    std::memcpy(v.data(), t.data, t.nbytes);
    if (t.n_dims == 2) {
      double ss = 0;
      for (const float x : v) ss += static_cast<double>(x) * static_cast<double>(x);
      const double want = t.name == "token_embd.weight" ? 1.0 : 1.0 / std::sqrt(static_cast<double>(t.ne[0]));
      const auto k = static_cast<float>(want / std::sqrt(ss / static_cast<double>(v.size())));
      for (float& x : v) x *= k;
    }
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    ASSERT_TRUE(w.add_tensor(t.name, t.type, ne, v.data(), v.size() * sizeof(float)).has_value());
  }
  ASSERT_TRUE(w.write_file(path).has_value());
  fs::remove(raw);
}

TEST(QuantizeFile, EveryTypeLoadsAndStaysCloseToF32) {
  const std::string dir = temp_dir();
  const std::string in = dir + "/source_f32.gguf";
  write_well_conditioned(in, test_support::make_tiny_llama(f32_config(256, 2, false)));
  const std::vector<float> want = run_logits(in);
  ASSERT_FALSE(want.empty());
  double range = 0;
  for (const float v : want) range = std::max(range, std::fabs(static_cast<double>(v)));
  // max |logit - F32 logit| / max |F32 logit|: bounds a few times what each type gives.
  // Measured (2 layers, 256 wide): f16 8e-4, bf16 6e-3, q8_0 1.9e-2, q6_k 5.3e-2, q5_* 0.09-0.11,
  // q4_* 0.15-0.23; bounds at about twice that.
  const std::map<std::string, double> bound = {
      {"f32", 1e-6}, {"f16", 2e-3}, {"bf16", 1.5e-2}, {"q8_0", 4e-2}, {"q6_k", 1e-1},
      {"q5_0", 2e-1}, {"q5_1", 2e-1}, {"q5_k", 2e-1}, {"q5_k_m", 2e-1}, {"q4_0", 4e-1},
      {"q4_1", 4e-1}, {"q4_k", 4e-1}, {"q4_k_m", 4e-1}};
  auto f32_file = gguf::File::open(in);
  ASSERT_TRUE(f32_file.has_value());
  for (const convert::QuantTarget& t : convert::quant_targets()) {
    const std::string out = dir + "/tiny_" + std::string(t.name) + ".gguf";
    convert::QuantizeOptions opts;
    opts.n_threads = 2;
    auto s = convert::quantize_file(in, out, t, opts);
    ASSERT_TRUE(s.has_value()) << t.name << ": " << s.error().to_string();
    EXPECT_FALSE(fs::exists(out + ".part"));
    EXPECT_EQ(s->out_file_bytes, fs::file_size(out));
    auto f = gguf::File::open(out);
    ASSERT_TRUE(f.has_value()) << f.error().to_string();
    // Metadata copied, file type set.
    EXPECT_EQ(*f->get_u64("general.file_type"), t.file_type);
    for (const auto& [key, value] : f32_file->metadata()) {
      if (key == "general.file_type") continue;
      ASSERT_NE(f->find(key), nullptr) << key;
      EXPECT_TRUE(*f->find(key) == value) << key;
    }
    EXPECT_EQ(f->find_tensor("blk.1.attn_q.weight")->type, t.base) << t.name;
    EXPECT_EQ(f->find_tensor("blk.0.attn_norm.weight")->type, DType::F32);
    const std::vector<float> got = run_logits(out);
    ASSERT_EQ(got.size(), want.size()) << t.name;
    double max_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i] - want[i])));
    std::printf("[ logits   ] %-7s max|diff|/range = %.2e\n", std::string(t.name).c_str(), max_diff / range);
    EXPECT_LE(max_diff / range, bound.at(std::string(t.name))) << t.name;
  }
  fs::remove_all(dir);
}

TEST(QuantizeFile, OutputRulesAndErrors) {
  const std::string dir = temp_dir();
  const std::string in = dir + "/in.gguf";
  write_bytes(in, test_support::make_tiny_llama(f32_config(64, 1, true)));
  const auto target = *convert::find_quant_target("q8_0");
  convert::QuantizeOptions opts;
  opts.n_threads = 1;

  const std::string out = dir + "/out.gguf";
  write_bytes(out, {'k', 'e', 'e', 'p'});
  auto refused = convert::quantize_file(in, out, target, opts);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::InvalidArgument);
  EXPECT_NE(refused.error().message.find("--force"), std::string::npos);
  EXPECT_EQ(read_bytes(out), (std::vector<uint8_t>{'k', 'e', 'e', 'p'}));

  opts.force = true;
  auto forced = convert::quantize_file(in, out, target, opts);
  ASSERT_TRUE(forced.has_value()) << forced.error().to_string();
  EXPECT_TRUE(gguf::File::open(out).has_value());
  EXPECT_FALSE(fs::exists(out + ".part"));

  auto same = convert::quantize_file(in, in, target, opts);
  ASSERT_FALSE(same.has_value());
  EXPECT_NE(same.error().message.find("is the input"), std::string::npos);

  auto missing = convert::quantize_file(dir + "/nope.gguf", dir + "/x.gguf", target, opts);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::NotFound);

  write_bytes(dir + "/junk.gguf", std::vector<uint8_t>(100, 7));
  auto junk = convert::quantize_file(dir + "/junk.gguf", dir + "/x.gguf", target, opts);
  ASSERT_FALSE(junk.has_value());
  EXPECT_FALSE(fs::exists(dir + "/x.gguf"));

  // An integer matrix named like a weight cannot be converted.
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  std::vector<int32_t> ints(64 * 4, 3);
  ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight", DType::I32, {64, 4}, ints.data(), ints.size() * 4).has_value());
  write_bytes(dir + "/ints.gguf", w.to_bytes());
  auto ints_result = convert::quantize_file(dir + "/ints.gguf", dir + "/y.gguf", target, opts);
  ASSERT_FALSE(ints_result.has_value());
  EXPECT_EQ(ints_result.error().code, ErrorCode::Unsupported);
  EXPECT_NE(ints_result.error().message.find("blk.0.attn_q.weight"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/y.gguf"));
  EXPECT_FALSE(fs::exists(dir + "/y.gguf.part"));
  fs::remove_all(dir);
}

// ---- streaming writer ------------------------------------------------------------------------------

TEST(GgufStreamingWriter, ByteIdenticalToInMemoryWriter) {
  std::mt19937 rng = test_support::make_rng(77);
  struct T {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
  };
  std::vector<T> tensors;
  const DType types[] = {DType::F32, DType::Q4_0, DType::F16, DType::Q6_K, DType::Q8_0};
  for (int i = 0; i < 7; ++i) {
    const DType t = types[i % 5];
    std::vector<int64_t> ne = {dtype_info(t).block_size * (1 + static_cast<int64_t>(rng() % 3)) * (t == DType::F32 ? 3 : 1),
                               1 + static_cast<int64_t>(rng() % 4)};
    std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes(t, ne[0]) * ne[1]));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    if (t == DType::F16 || t == DType::F32) std::fill(bytes.begin(), bytes.end(), static_cast<uint8_t>(i));
    tensors.push_back({"t" + std::to_string(i), t, ne, bytes});
  }
  auto fill_meta = [](gguf::Writer& w) {
    w.set_string("general.architecture", "llama");
    w.set_u32("general.alignment", 64);
    w.set_f32_array("x.values", {1.5f, -2.0f});
    w.set_string_array("x.names", {"a", "bc", ""});
  };
  gguf::Writer mem;
  fill_meta(mem);
  for (const T& t : tensors) ASSERT_TRUE(mem.add_tensor(t.name, t.type, t.ne, t.bytes.data(), t.bytes.size()).has_value());
  gguf::Writer stream;
  fill_meta(stream);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const T& t = tensors[i];
    // Half in memory, half produced on demand.
    if (i % 2 == 0) {
      ASSERT_TRUE(stream.add_tensor_info(t.name, t.type, t.ne).has_value());
    } else {
      ASSERT_TRUE(stream.add_tensor(t.name, t.type, t.ne, t.bytes.data(), t.bytes.size()).has_value());
    }
  }
  const std::string dir = temp_dir();
  std::vector<size_t> asked;
  const Status st = stream.write_file_streaming(dir + "/s.gguf", [&](size_t i, const std::string& name, std::vector<uint8_t>& out) {
    asked.push_back(i);
    EXPECT_EQ(name, tensors[i].name);
    out = tensors[i].bytes;
    return ok_status();
  });
  ASSERT_TRUE(st.has_value()) << st.error().to_string();
  EXPECT_EQ(asked, (std::vector<size_t>{0, 2, 4, 6}));
  EXPECT_EQ(read_bytes(dir + "/s.gguf"), mem.to_bytes());

  // A producer giving the wrong size, or failing, stops the write with its error.
  const Status short_write = stream.write_file_streaming(dir + "/bad.gguf", [](size_t, const std::string&, std::vector<uint8_t>& out) {
    out.assign(3, 0);
    return ok_status();
  });
  EXPECT_FALSE(short_write.has_value());
  const Status failed = stream.write_file_streaming(dir + "/bad.gguf", [](size_t, const std::string&, std::vector<uint8_t>&) -> Status {
    return make_error(ErrorCode::Cancelled, "stop");
  });
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error().code, ErrorCode::Cancelled);
  // Unwritable path.
  EXPECT_FALSE(stream.write_file_streaming(dir + "/no/such/dir/x.gguf", nullptr).has_value());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace geniex
