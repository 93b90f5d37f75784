// DType table: names and block geometry of every type GenieX understands.
#include "core/dtype.hpp"

#include <array>
#include <cctype>
#include <limits>

namespace geniex {
namespace {

constexpr std::array<DTypeInfo, 16> kTable = {{
    {DType::F32, "f32", 1, 4, false},
    {DType::F16, "f16", 1, 2, false},
    {DType::Q4_0, "q4_0", kQK4_0, 2 + kQK4_0 / 2, true},
    {DType::Q4_1, "q4_1", kQK4_1, 2 + 2 + kQK4_1 / 2, true},
    {DType::Q5_0, "q5_0", kQK5_0, 2 + kQK5_0 / 8 + kQK5_0 / 2, true},
    {DType::Q5_1, "q5_1", kQK5_1, 2 + 2 + kQK5_1 / 8 + kQK5_1 / 2, true},
    {DType::Q8_0, "q8_0", kQK8_0, 2 + kQK8_0, true},
    {DType::Q8_1, "q8_1", kQK8_1, 2 + 2 + kQK8_1, true},
    {DType::Q4_K, "q4_k", kQK_K, 2 + 2 + kKScaleSize + kQK_K / 2, true},
    {DType::Q5_K, "q5_k", kQK_K, 2 + 2 + kKScaleSize + kQK_K / 8 + kQK_K / 2, true},
    {DType::Q6_K, "q6_k", kQK_K, kQK_K / 2 + kQK_K / 4 + kQK_K / 16 + 2, true},
    {DType::Q8_K, "q8_k", kQK_K, 4 + kQK_K + kQK_K / 16 * 2, true},
    {DType::I8, "i8", 1, 1, false},
    {DType::I16, "i16", 1, 2, false},
    {DType::I32, "i32", 1, 4, false},
    {DType::BF16, "bf16", 1, 2, false},
}};

}  // namespace

std::optional<DType> dtype_from_id(uint32_t id) {
  for (const auto& info : kTable) {
    if (static_cast<uint32_t>(info.type) == id) return info.type;
  }
  return std::nullopt;
}

const DTypeInfo& dtype_info(DType t) {
  for (const auto& info : kTable) {
    if (info.type == t) return info;
  }
  return kTable[0];  // unreachable for valid enum values
}

std::string_view dtype_name(DType t) { return dtype_info(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& info : kTable) {
    if (info.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(name[i])) != info.name[i]) {
        same = false;
        break;
      }
    }
    if (same) return info.type;
  }
  return std::nullopt;
}

std::optional<uint64_t> bytes_for_elements(DType t, uint64_t n) {
  const DTypeInfo& info = dtype_info(t);
  const auto bs = static_cast<uint64_t>(info.block_size);
  const auto bb = static_cast<uint64_t>(info.block_bytes);
  if (n % bs != 0) return std::nullopt;
  const uint64_t blocks = n / bs;
  if (blocks > std::numeric_limits<uint64_t>::max() / bb) return std::nullopt;
  return blocks * bb;
}

}  // namespace geniex
