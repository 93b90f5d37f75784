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
constexpr size_t kGroupBlockBytes = 8 * 2 + 8 * 16;  // 144 = 8 x sizeof(BlockQ4_0)
}

void repack_q4_0x8(const void* src, void* dst, int64_t n, int64_t n_rows) {
  const int64_t nb = n / 32;
  const auto* in = static_cast<const quant::BlockQ4_0*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < n_rows / 8; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* o = out + (static_cast<size_t>(g * nb + b)) * kGroupBlockBytes;
      for (int r = 0; r < 8; ++r) {
        const quant::BlockQ4_0& blk = in[(g * 8 + r) * nb + b];
        std::memcpy(o + 2 * r, &blk.d, 2);
        std::memcpy(o + 16 + 16 * r, blk.qs, 16);
      }
    }
  }
}

void dequantize_q4_0x8_row(const void* base, int64_t row, float* dst, int64_t n) {
  const int64_t nb = n / 32;
  const int64_t g = row / 8;
  const int r = static_cast<int>(row % 8);
  const auto* in = static_cast<const uint8_t*>(base);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = in + static_cast<size_t>(g * nb + b) * kGroupBlockBytes;
    uint16_t h;
    std::memcpy(&h, blk + 2 * r, 2);
    const float d = fp16_to_f32(h);
    const uint8_t* qs = blk + 16 + 16 * r;
    for (int j = 0; j < 16; ++j) {
      dst[b * 32 + j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
      dst[b * 32 + j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

const PackedKernels* packed_kernels_for(DType t, int64_t n, int64_t n_rows) {
  if (const char* env = std::getenv("GENIEX_REPACK")) {
    if (std::strcmp(env, "0") == 0) return nullptr;
  }
  if (t != DType::Q4_0 || n % 32 != 0 || n_rows % 8 != 0) return nullptr;
#if defined(GENIEX_HAVE_AVX2_KERNELS)
  const CpuFeatures& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx2 && f.fma && f.f16c) return avx512::packed_q4_0x8();
#endif
  return nullptr;
}

}  // namespace geniex::cpu
