// Portable parts of the packed layouts: repacking and row dequantization; the matching
// kernels are per ISA (kernels_avx512.cpp).
#include "backends/cpu/packed.hpp"

#include <cstdlib>
#include <cstring>

#include "backends/cpu/kernels_internal.hpp"
#include "core/cpu_features.hpp"
#include "core/fp16.hpp"
#include "quant/quant.hpp"

namespace geniex::cpu {

namespace {

// Group block g, b of a layout with 8 rows per group: `head` bytes of per-row fields
// (fp16 each, `fields` of them per row, stored field-major) then 8 x `qbytes` quant bytes.
template <class Block, int kFields, size_t kQBytes>
void repack_x8(const void* src, void* dst, int64_t n, int64_t n_rows) {
  constexpr size_t kHead = 16 * kFields;
  constexpr size_t kGroupBlock = kHead + 8 * kQBytes;
  static_assert(kGroupBlock == 8 * sizeof(Block));
  const int64_t nb = n / 32;
  const auto* in = static_cast<const Block*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < n_rows / 8; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + static_cast<size_t>(g * nb + b) * kGroupBlock;
      for (int r = 0; r < 8; ++r) {
        const auto* blk = reinterpret_cast<const uint8_t*>(&in[(g * 8 + r) * nb + b]);
        for (int f = 0; f < kFields; ++f) std::memcpy(o + 16 * f + 2 * r, blk + 2 * f, 2);
        std::memcpy(o + kHead + kQBytes * r, blk + 2 * kFields, kQBytes);
      }
    }
  }
}

// Row `row` gathered back into the file's block layout, then the reference dequantization.
template <class Block, int kFields, size_t kQBytes>
void dequantize_x8_row(DType t, const void* base, int64_t row, float* dst, int64_t n) {
  constexpr size_t kHead = 16 * kFields;
  constexpr size_t kGroupBlock = kHead + 8 * kQBytes;
  const int64_t nb = n / 32;
  const int64_t g = row / 8;
  const int r = static_cast<int>(row % 8);
  const auto* in = static_cast<const uint8_t*>(base);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = in + static_cast<size_t>(g * nb + b) * kGroupBlock;
    Block blk;
    auto* o = reinterpret_cast<uint8_t*>(&blk);
    for (int f = 0; f < kFields; ++f) std::memcpy(o + 2 * f, gb + 16 * f + 2 * r, 2);
    std::memcpy(o + 2 * kFields, gb + kHead + kQBytes * r, kQBytes);
    quant::dequantize_row_ref(t, &blk, dst + b * 32, 32);
  }
}

bool repack_disabled() {
  const char* env = std::getenv("GENIEX_REPACK");
  return env != nullptr && std::strcmp(env, "0") == 0;
}

}  // namespace

void repack_q4_0x8(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_x8<quant::BlockQ4_0, 1, 16>(src, dst, n, n_rows);
}
void repack_q4_1x8(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_x8<quant::BlockQ4_1, 2, 16>(src, dst, n, n_rows);
}
void repack_q8_0x8(const void* src, void* dst, int64_t n, int64_t n_rows) {
  repack_x8<quant::BlockQ8_0, 1, 32>(src, dst, n, n_rows);
}
void dequantize_q4_0x8_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_x8_row<quant::BlockQ4_0, 1, 16>(DType::Q4_0, base, row, dst, n);
}
void dequantize_q4_1x8_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_x8_row<quant::BlockQ4_1, 2, 16>(DType::Q4_1, base, row, dst, n);
}
void dequantize_q8_0x8_row(const void* base, int64_t row, float* dst, int64_t n) {
  dequantize_x8_row<quant::BlockQ8_0, 1, 32>(DType::Q8_0, base, row, dst, n);
}

const PackedKernels* packed_kernels_for_isa(DType t, const char* isa) {
  if (isa == nullptr) return nullptr;
#if defined(GENIEX_HAVE_AVX2_KERNELS)
  const CpuFeatures& f = cpu_features();
  const bool avx512 = f.avx512f && f.avx512bw && f.avx2 && f.fma && f.f16c;
  if (std::strcmp(isa, "avx512") == 0) return avx512 ? avx512::packed_kernels(t) : nullptr;
  if (std::strcmp(isa, "avx512vnni") == 0) return avx512 && f.avx512vnni ? avx512vnni::packed_kernels(t) : nullptr;
  if (std::strcmp(isa, "avx2") == 0) {
    if (!(f.avx2 && f.fma && f.f16c)) return nullptr;
    // GENIEX_AVX2_EXACT=1 (read here, once per weight at load): the file-layout kernels'
    // summation order. The 32-block layouts have exact tiles for it; the K-quant layouts
    // (packed_k.cpp) do not, so those weights stay in the file's layout then.
    const char* env = std::getenv("GENIEX_AVX2_EXACT");
    const bool exact = env != nullptr && std::strcmp(env, "1") == 0;
    if (const PackedKernels* k = avx2::packed_kernels(t, exact)) return k;
    return exact ? nullptr : avx2::packed_kernels_k(t);
  }
#else
  (void)t;
#endif
  return nullptr;
}

const PackedKernels* packed_kernels_for(DType t, int64_t n, int64_t n_rows) {
  if (repack_disabled() || n % 32 != 0 || n_rows % 8 != 0) return nullptr;
  if (const PackedKernels* k = packed_kernels_for_isa(t, "avx512vnni")) return k;
  if (const PackedKernels* k = packed_kernels_for_isa(t, "avx512")) return k;
  return packed_kernels_for_isa(t, "avx2");  // own layouts (packed_tiles_avx2.cpp)
}

}  // namespace geniex::cpu
