// Tiny valid GGUF files used as the fuzz seed corpus (tests/data/gguf/corpus) and by tests.
// make_gguf_corpus writes them; test_formats checks the committed copies still match.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "formats/gguf.hpp"

namespace geniex::gguf::seeds {

struct Seed {
  std::string name;
  std::vector<uint8_t> bytes;
};

inline std::vector<uint8_t> pattern(size_t n, uint8_t start) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(start + i * 7);
  return b;
}

// Every scalar value type, a string array, a nested array; no tensors.
inline std::vector<uint8_t> metadata_only() {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_value("v.u8", Value::of_u8(200));
  w.set_value("v.i8", Value::of_i8(-5));
  w.set_value("v.u16", Value::of_u16(60000));
  w.set_value("v.i16", Value::of_i16(-30000));
  w.set_u32("v.u32", 4000000000u);
  w.set_i32("v.i32", -2000000000);
  w.set_f32("v.f32", 0.5f);
  w.set_bool("v.bool", true);
  w.set_u64("v.u64", 1ull << 40);
  w.set_value("v.i64", Value::of_i64(-(1ll << 40)));
  w.set_value("v.f64", Value::of_f64(-2.25));
  w.set_string_array("tokenizer.ggml.tokens", {"<s>", "</s>", "a", "b"});
  w.set_value("v.nested",
              Value::of_array(ValueType::Array,
                              {Value::of_array(ValueType::I32, {Value::of_i32(1), Value::of_i32(2)}),
                               Value::of_array(ValueType::String, {Value::of_string("x")})}));
  return w.to_bytes();
}

// A few tensors of different types at the default alignment.
inline std::vector<uint8_t> small_tensors() {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  w.set_f32_array("v.scores", {0.0f, -1.5f, 2.0f});
  const auto a = pattern(4 * 4 * 2, 1);
  const auto b = pattern(34, 2);      // one q8_0 block
  const auto c = pattern(2 * 8, 3);   // f16 {8}
  (void)w.add_tensor("a.weight", DType::F32, {4, 2}, a.data(), a.size());
  (void)w.add_tensor("b.weight", DType::Q8_0, {32}, b.data(), b.size());
  (void)w.add_tensor("c.bias", DType::F16, {8}, c.data(), c.size());
  return w.to_bytes();
}

// Non-default alignment (written as general.alignment) and a quantized tensor.
inline std::vector<uint8_t> aligned64() {
  Writer w;
  w.set_alignment(64);
  w.set_i32_array("v.ids", {1, -2, 3});
  const auto a = pattern(18, 4);      // one q4_0 block
  const auto b = pattern(4 * 3, 5);   // i32 {3}
  (void)w.add_tensor("q.weight", DType::Q4_0, {32}, a.data(), a.size());
  (void)w.add_tensor("i.weight", DType::I32, {3}, b.data(), b.size());
  return w.to_bytes();
}

inline std::vector<Seed> all() {
  return {{"metadata_only.gguf", metadata_only()},
          {"small_tensors.gguf", small_tensors()},
          {"aligned64.gguf", aligned64()}};
}

}  // namespace geniex::gguf::seeds
