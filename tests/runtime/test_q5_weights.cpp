// Q5_0 / Q5_1 weights through the whole CPU path (get_rows on a Q5_0 embedding table, matmuls
// on Q5_0 and Q5_1 matrices, prefill and decode): a tiny model stored in Q5 must give the
// logits of the same model with every Q5 tensor decoded to F32, up to the int8 rounding of
// the activations that the quantized dot products use.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "../common/tiny_model.hpp"
#include "formats/gguf.hpp"
#include "geniex/geniex.hpp"
#include "quant/quant.hpp"

namespace geniex {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("geniex_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// Copy of the GGUF at `in` with every Q5_0 / Q5_1 tensor decoded to F32.
void write_decoded_copy(const std::string& in, const std::string& out) {
  auto f = gguf::File::open(in);
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  gguf::Writer w;
  for (const auto& [key, value] : f->metadata()) w.set_value(key, value);
  for (const gguf::TensorInfo& t : f->tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    if (t.type != DType::Q5_0 && t.type != DType::Q5_1) {
      ASSERT_TRUE(w.add_tensor(t.name, t.type, ne, t.data, t.nbytes).has_value()) << t.name;
      continue;
    }
    std::vector<float> values(static_cast<size_t>(t.n_elements()));
    const int64_t rows = t.n_elements() / t.ne[0];
    const auto rb = static_cast<size_t>(row_bytes(t.type, t.ne[0]));
    for (int64_t r = 0; r < rows; ++r) {
      quant::dequantize_row_ref(t.type, t.data + static_cast<size_t>(r) * rb,
                                values.data() + r * t.ne[0], t.ne[0]);
    }
    ASSERT_TRUE(w.add_tensor(t.name, DType::F32, ne, values.data(), values.size() * sizeof(float))
                    .has_value())
        << t.name;
  }
  ASSERT_TRUE(w.write_file(out).has_value());
}

std::vector<float> run_steps(const std::string& path) {
  auto m = ModelBuilder(path).with_threads(2).build();
  EXPECT_TRUE(m.has_value()) << (m ? "" : m.error().to_string());
  if (!m) return {};
  auto s = m->new_session();
  EXPECT_TRUE(s.has_value());
  if (!s) return {};
  std::vector<float> all;
  std::vector<int32_t> toks = {5, 17, 33, 2, 90, 61, 7};  // prefill, then decode steps
  for (int step = 0; step < 4; ++step) {
    auto l = s->eval(toks);
    EXPECT_TRUE(l.has_value()) << (l ? "" : l.error().to_string());
    if (!l) return {};
    all.insert(all.end(), l->begin(), l->end());
    toks = {static_cast<int32_t>((step * 29 + 3) % 96)};
  }
  return all;
}

TEST(Q5Weights, MatchTheDecodedModel) {
  test_support::TinyLlamaConfig cfg;
  cfg.embd_type = DType::Q5_0;
  cfg.attn_type = DType::Q5_1;
  cfg.attn_out_type = DType::Q5_0;
  cfg.ffn_gate_type = DType::Q5_0;
  cfg.ffn_up_type = DType::Q5_1;
  cfg.ffn_down_type = DType::Q5_0;
  cfg.output_type = DType::Q5_1;
  const std::string q5 = temp_path("tiny_q5.gguf");
  const std::string f32 = temp_path("tiny_q5_decoded.gguf");
  {
    const auto bytes = test_support::make_tiny_llama(cfg);
    std::FILE* fp = std::fopen(q5.c_str(), "wb");
    ASSERT_NE(fp, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), fp), bytes.size());
    std::fclose(fp);
  }
  write_decoded_copy(q5, f32);
  const std::vector<float> got = run_steps(q5);
  const std::vector<float> want = run_steps(f32);
  std::filesystem::remove(q5);
  std::filesystem::remove(f32);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  double err2 = 0.0, sig2 = 0.0, max_err = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << i;
    const double e = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    err2 += e * e;
    sig2 += static_cast<double>(want[i]) * static_cast<double>(want[i]);
    max_err = std::max(max_err, std::fabs(e));
  }
  const double nmse = err2 / sig2;
  std::printf("Q5 vs decoded F32: nmse %.3g, max abs error %.3g\n", nmse, max_err);
  // Measured 1.7e-3 (int8 activations at every matmul of a random 2-layer model); a misread
  // layout gives errors of the order of the logits themselves (nmse ~ 1).
  EXPECT_LT(nmse, 1e-2);
}

}  // namespace
}  // namespace geniex
