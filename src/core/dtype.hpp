// DType: element and quantized-block types, with the numeric ids used by GGUF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace geniex {

// Values equal GGUF's ggml_type ids, so a file's type field maps directly.
enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,   // activation format paired with Q4_1 and Q5_1 weights
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,  // activation format paired with K-quant weights
  I8 = 24,
  I16 = 25,
  I32 = 26,
  BF16 = 30,
};

struct DTypeInfo {
  DType type;
  std::string_view name;     // "q4_0"
  int64_t block_size;        // elements per block (1 for plain types)
  int64_t block_bytes;       // bytes per block
  bool quantized;
};

// nullopt for ids GenieX does not know (a file with such a tensor gets a clear error).
std::optional<DType> dtype_from_id(uint32_t id);
const DTypeInfo& dtype_info(DType t);
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);  // case-insensitive "q4_k"

// Bytes for a row of n elements; n must be a multiple of the block size (checked by callers
// that take sizes from files; see row_bytes_checked).
inline int64_t row_bytes(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  return n / info.block_size * info.block_bytes;
}

// Overflow- and divisibility-checked size of n elements; nullopt on failure.
std::optional<uint64_t> bytes_for_elements(DType t, uint64_t n);

// Block sizes shared by the quantized formats.
inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK8_1 = 32;
inline constexpr int kQK_K = 256;
inline constexpr int kKScaleSize = 12;

}  // namespace geniex
