// Q5_0 / Q5_1 against llama.cpp's own quantizer: tests/data/quant/q5_fixture.bin holds source
// floats with the bytes and decoded floats that the `gguf` Python package (ggml's reference
// rules) produced for them (regenerate with scripts/make_q5_fixture.py). GenieX must quantize
// the sources to the same bytes and decode the bytes to the same floats, bit for bit, in the
// reference and in every kernel table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "backends/cpu/kernels.hpp"
#include "core/fp16.hpp"
#include "quant/quant.hpp"

namespace geniex {
namespace {

struct Encoded {
  DType type = DType::F32;
  size_t row_bytes = 0;
  std::vector<uint8_t> bytes;
  std::vector<float> decoded;
};

struct Fixture {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> src;
  Encoded q5_0, q5_1;
};

class Cursor {
 public:
  explicit Cursor(std::vector<uint8_t> data) : data_(std::move(data)) {}
  bool read(void* dst, size_t n) {
    if (n > data_.size() - pos_) return false;
    std::memcpy(dst, data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  std::vector<uint8_t> data_;
  size_t pos_ = 0;
};

// Empty message on success (the test then asserts on it, so a broken fixture fails loudly).
std::string load_fixture(Fixture* f) {
  const std::string path = std::string(GENIEX_TEST_DATA) + "/quant/q5_fixture.bin";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot open " + path + " (regenerate with scripts/make_q5_fixture.py)";
  Cursor c(std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}));
  char magic[8];
  uint32_t rows = 0, cols = 0;
  if (!c.read(magic, 8) || std::memcmp(magic, "GXQ5FIX1", 8) != 0) return path + ": bad magic";
  if (!c.read(&rows, 4) || !c.read(&cols, 4) || rows == 0 || cols == 0 || cols % 32 != 0 ||
      rows > 4096 || cols > 65536) {
    return path + ": bad shape";
  }
  f->rows = rows;
  f->cols = cols;
  const size_t n = static_cast<size_t>(rows) * cols;
  f->src.resize(n);
  if (!c.read(f->src.data(), n * sizeof(float))) return path + ": truncated sources";
  for (Encoded* e : {&f->q5_0, &f->q5_1}) {
    uint32_t id = 0, rb = 0;
    if (!c.read(&id, 4) || !c.read(&rb, 4)) return path + ": truncated section header";
    const auto t = dtype_from_id(id);
    if (!t) return path + ": unknown type id " + std::to_string(id);
    e->type = *t;
    e->row_bytes = rb;
    if (static_cast<int64_t>(rb) != row_bytes(*t, cols)) {
      return path + ": " + std::string(dtype_name(*t)) + " row size " + std::to_string(rb) +
             ", GenieX expects " + std::to_string(row_bytes(*t, cols));
    }
    e->bytes.resize(static_cast<size_t>(rows) * rb);
    e->decoded.resize(n);
    if (!c.read(e->bytes.data(), e->bytes.size()) || !c.read(e->decoded.data(), n * sizeof(float))) {
      return path + ": truncated " + std::string(dtype_name(*t)) + " section";
    }
  }
  if (!c.at_end()) return path + ": trailing bytes";
  if (f->q5_0.type != DType::Q5_0 || f->q5_1.type != DType::Q5_1) return path + ": wrong types";
  return "";
}

const Fixture& fixture() {
  static Fixture f;
  static const std::string error = load_fixture(&f);
  EXPECT_EQ(error, "");
  return f;
}

class Q5Fixture : public testing::TestWithParam<DType> {
 protected:
  const Encoded& encoded() const {
    return GetParam() == DType::Q5_0 ? fixture().q5_0 : fixture().q5_1;
  }
};

TEST_P(Q5Fixture, QuantizesToLlamaCppBytes) {
  const Fixture& f = fixture();
  ASSERT_GT(f.rows, 0);
  const Encoded& e = encoded();
  std::vector<uint8_t> got(e.row_bytes);
  for (int64_t r = 0; r < f.rows; ++r) {
    quant::quantize_row_ref(e.type, f.src.data() + r * f.cols, got.data(), f.cols);
    const uint8_t* want = e.bytes.data() + static_cast<size_t>(r) * e.row_bytes;
    for (size_t i = 0; i < e.row_bytes; ++i) {
      ASSERT_EQ(got[i], want[i]) << dtype_name(e.type) << " row " << r << " byte " << i
                                 << " (block " << i / dtype_info(e.type).block_bytes << ")";
    }
  }
}

TEST_P(Q5Fixture, DequantizesToLlamaCppFloats) {
  const Fixture& f = fixture();
  ASSERT_GT(f.rows, 0);
  const Encoded& e = encoded();
  std::vector<const cpu::TypeKernels*> tables;
  for (const char* isa : {"scalar", "avx2", "avx512"}) {
    if (const cpu::TypeKernels* k = cpu::kernels_for_isa(e.type, isa)) tables.push_back(k);
  }
  tables.push_back(cpu::kernels_for(e.type));
  std::vector<float> got(static_cast<size_t>(f.cols));
  for (int64_t r = 0; r < f.rows; ++r) {
    const uint8_t* q = e.bytes.data() + static_cast<size_t>(r) * e.row_bytes;
    const float* want = e.decoded.data() + r * f.cols;
    quant::dequantize_row_ref(e.type, q, got.data(), f.cols);
    for (int64_t i = 0; i < f.cols; ++i) {
      ASSERT_EQ(f32_to_bits(got[i]), f32_to_bits(want[i]))
          << dtype_name(e.type) << " reference, row " << r << " element " << i << ": " << got[i]
          << " vs " << want[i];
    }
    for (const cpu::TypeKernels* k : tables) {
      ASSERT_NE(k, nullptr);
      std::fill(got.begin(), got.end(), 12345.0f);
      k->dequantize_row(q, got.data(), f.cols);
      ASSERT_EQ(std::memcmp(got.data(), want, got.size() * sizeof(float)), 0)
          << dtype_name(e.type) << " " << k->isa << " kernel, row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Q5, Q5Fixture, testing::Values(DType::Q5_0, DType::Q5_1),
                         [](const testing::TestParamInfo<DType>& param_info) {
                           return std::string(dtype_name(param_info.param));
                         });

}  // namespace
}  // namespace geniex
