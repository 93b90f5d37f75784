// Host-side checks of the CUDA backend that need no GPU: the __host__ __device__ arithmetic of
// src/backends/cuda/device_math.cuh (the kernels' per-element and per-block math) against
// src/quant's scalar references and core/fp16, the fault specification parser, and the
// no-device path of the probe. They run in CI wherever the CUDA backend is built.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/device_math.cuh"
#include "backends/cuda/kv_staging.hpp"
#include "core/exp.hpp"
#include "core/fp16.hpp"
#include "quant/quant.hpp"

namespace geniex {
namespace {

namespace cm = cuda_math;

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::mt19937& rng() {
  static std::mt19937 r([] {
    const unsigned seed = std::random_device{}();
    std::printf("test_cuda_host seed %u\n", seed);
    return seed;
  }());
  return r;
}

std::vector<float> randn(size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng());
  return v;
}

const DType kWeightTypes[] = {DType::F32, DType::F16, DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K};

TEST(CudaDeviceMath, HalfToFloatMatchesCoreOnEveryHalf) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float want = fp16_to_f32(static_cast<uint16_t>(h));
    const float got = cm::half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(bits(got), bits(want)) << std::hex << h;
    }
  }
}

TEST(CudaDeviceMath, FloatToHalfMatchesCore) {
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 1e9f, -1e9f, 6.0e-8f, 2.9e-8f,
                           3.0e-8f, 6.1e-5f, 6.104e-5f, 1e-10f, INFINITY, -INFINITY};
  for (uint32_t u = 0; u < 0xffffffffu - 9973u; u += 9973u) {  // a sweep of every exponent, both signs
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);
  }
  for (float f : randn(100000, 3.0f)) xs.push_back(f);
  for (float f : xs) {
    const uint16_t want = f32_to_fp16(f);
    const uint16_t got = cm::float_to_half(f);
    if (std::isnan(f)) {
      ASSERT_EQ(got & 0x7c00u, 0x7c00u);
      ASSERT_NE(got & 0x3ffu, 0u);
    } else {
      ASSERT_EQ(got, want) << std::hexfloat << f;
    }
  }
}

TEST(CudaDeviceMath, ExpMatchesCore) {
  for (float x : randn(20000, 20.0f)) ASSERT_EQ(bits(cm::exp_f32(x)), bits(exp_f32(x))) << x;
}

// The kernels' activation quantization, written out per block with the helpers the kernels
// use, must give quantize_activations_ref's bytes.
std::vector<uint8_t> quantize_like_kernel(DType t, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> out(static_cast<size_t>(row_bytes(t, n)));
  if (t == DType::Q8_0 || t == DType::Q8_1) {
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[static_cast<size_t>(b * 32 + j)]));
      const float d = cm::q8_scale(amax), id = cm::q8_inv_scale(amax);
      int8_t q[32];
      int sum = 0;
      for (int j = 0; j < 32; ++j) {
        q[j] = cm::q8_quant(x[static_cast<size_t>(b * 32 + j)], id);
        sum += q[j];
      }
      if (t == DType::Q8_0) {
        auto* y = reinterpret_cast<quant::BlockQ8_0*>(out.data()) + b;
        y->d = cm::float_to_half(d);
        std::memcpy(y->qs, q, 32);
      } else {
        auto* y = reinterpret_cast<quant::BlockQ8_1*>(out.data()) + b;
        y->d = cm::float_to_half(d);
        y->s = cm::float_to_half(static_cast<float>(sum) * d);
        std::memcpy(y->qs, q, 32);
      }
    }
  } else {  // Q8_K
    for (int64_t b = 0; b < n / 256; ++b) {
      const float* xb = x.data() + b * 256;
      float amax = 0;
      int idx = 0;
      for (int i = 0; i < 256; ++i) {
        if (std::fabs(xb[i]) > amax) {
          amax = std::fabs(xb[i]);
          idx = i;
        }
      }
      quant::BlockQ8_K y{};
      if (amax != 0.0f) {
        const float iscale = cm::q8k_iscale(xb[idx]);
        for (int i = 0; i < 256; ++i) y.qs[i] = cm::q8k_quant(xb[i], iscale);
        for (int j = 0; j < 16; ++j) {
          int s = 0;
          for (int i = 0; i < 16; ++i) s += y.qs[j * 16 + i];
          y.bsums[j] = static_cast<int16_t>(s);
        }
        y.d = 1.0f / iscale;
      }
      std::memcpy(out.data() + b * static_cast<int64_t>(sizeof(y)), &y, sizeof(y));
    }
  }
  return out;
}

TEST(CudaDeviceMath, ActivationQuantizationMatchesReference) {
  for (DType t : {DType::Q8_0, DType::Q8_1, DType::Q8_K}) {
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<float> x = randn(1024, rep % 2 ? 0.01f : 3.0f);
      if (rep == 3) std::fill(x.begin(), x.begin() + 256, 0.0f);  // an all-zero block
      if (rep == 4) {  // a tie of magnitudes: the first one sets the sign
        x[5] = -7.5f;
        x[200] = 7.5f;
      }
      std::vector<uint8_t> want(static_cast<size_t>(row_bytes(t, 1024)));
      quant::quantize_activations_ref(t, x.data(), want.data(), 1024);
      ASSERT_EQ(quantize_like_kernel(t, x), want) << dtype_name(t) << " rep " << rep;
    }
  }
}

// Random rows of each weight type: quantized from random floats, plus raw random quant bytes
// (every nibble and scale pattern) under a sane fp16 scale.
std::vector<uint8_t> random_weights(DType t, int64_t k, int64_t rows, bool raw) {
  const std::vector<float> x = randn(static_cast<size_t>(k * rows), 0.5f);
  std::vector<uint8_t> w(static_cast<size_t>(row_bytes(t, k) * rows));
  for (int64_t r = 0; r < rows; ++r) {
    quant::quantize_row_ref(t, x.data() + r * k, w.data() + r * row_bytes(t, k), k);
  }
  if (!raw || t == DType::F32 || t == DType::F16) return w;
  std::uniform_int_distribution<int> byte(0, 255);
  const DTypeInfo& info = dtype_info(t);
  const auto n_blocks = static_cast<int64_t>(w.size()) / info.block_bytes;
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* p = w.data() + b * info.block_bytes;
    // Keep the fp16 scale fields (they are where quantize_row_ref put them), randomize the rest.
    size_t lo = 0, hi = static_cast<size_t>(info.block_bytes);
    if (t == DType::Q4_0 || t == DType::Q8_0) lo = 2;
    if (t == DType::Q4_1 || t == DType::Q4_K) lo = 4;
    if (t == DType::Q6_K) hi -= 2;
    for (size_t i = lo; i < hi; ++i) p[i] = static_cast<uint8_t>(byte(rng()));
  }
  return w;
}

TEST(CudaDeviceMath, DequantizeMatchesReferenceBitForBit) {
  for (DType t : kWeightTypes) {
    const int64_t k = dtype_info(t).block_size == 256 ? 512 : 96;
    for (bool raw : {false, true}) {
      const std::vector<uint8_t> w = random_weights(t, k, 3, raw);
      for (int64_t r = 0; r < 3; ++r) {
        const uint8_t* row = w.data() + r * row_bytes(t, k);
        std::vector<float> want(static_cast<size_t>(k));
        quant::dequantize_row_ref(t, row, want.data(), k);
        for (int64_t i = 0; i < k; ++i) {
          ASSERT_EQ(bits(cm::dequant_row_at(t, row, i)), bits(want[static_cast<size_t>(i)]))
              << dtype_name(t) << " row " << r << " element " << i << (raw ? " (raw bytes)" : "");
        }
      }
    }
  }
  // The activation formats the prefill GEMM decodes.
  for (DType t : {DType::Q8_0, DType::Q8_1, DType::Q8_K}) {
    const std::vector<float> x = randn(512, 2.0f);
    std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, 512)));
    quant::quantize_activations_ref(t, x.data(), q.data(), 512);
    std::vector<float> want(512);
    quant::dequantize_row_ref(t, q.data(), want.data(), 512);
    for (int64_t i = 0; i < 512; ++i) {
      ASSERT_EQ(bits(cm::dequant_row_at(t, q.data(), i)), bits(want[static_cast<size_t>(i)])) << dtype_name(t) << " " << i;
    }
  }
}

// Summing a row's units in block order (per block for the K-quants, their integer parts)
// reproduces vec_dot_ref exactly; the kernels' lane-strided float sum stays within float
// rounding of it.
TEST(CudaDeviceMath, DotUnitsReproduceReferenceDot) {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    const DType at = quant::vec_dot_type(t);
    const int64_t k = dtype_info(t).block_size == 256 ? 256 * 5 : 32 * 23;
    for (bool raw : {false, true}) {
      for (int rep = 0; rep < 10; ++rep) {
        const std::vector<uint8_t> w = random_weights(t, k, 1, raw);
        const std::vector<float> x = randn(static_cast<size_t>(k), 1.0f);
        std::vector<uint8_t> a(static_cast<size_t>(row_bytes(at, k)));
        quant::quantize_activations_ref(at, x.data(), a.data(), k);
        const float want = quant::vec_dot_ref(t, w.data(), a.data(), k);
        float exact = 0.0f;  // the reference's order
        std::vector<float> lanes(32, 0.0f);  // the kernel's: unit u to lane u % 32
        const int64_t n_blocks = k / dtype_info(t).block_size;
        int64_t u = 0;
        for (int64_t b = 0; b < n_blocks; ++b) {
          if (t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0) {
            float v = 0;
            if (t == DType::Q4_0) v = cm::dot_unit_q4_0(reinterpret_cast<const quant::BlockQ4_0*>(w.data())[b], reinterpret_cast<const quant::BlockQ8_0*>(a.data())[b]);
            if (t == DType::Q4_1) v = cm::dot_unit_q4_1(reinterpret_cast<const quant::BlockQ4_1*>(w.data())[b], reinterpret_cast<const quant::BlockQ8_1*>(a.data())[b]);
            if (t == DType::Q8_0) v = cm::dot_unit_q8_0(reinterpret_cast<const quant::BlockQ8_0*>(w.data())[b], reinterpret_cast<const quant::BlockQ8_0*>(a.data())[b]);
            exact += v;
            lanes[static_cast<size_t>(u++ % 32)] += v;
            continue;
          }
          const auto& ab = reinterpret_cast<const quant::BlockQ8_K*>(a.data())[b];
          cm::KParts total;
          for (int s = 0; s < 8; ++s) {
            cm::KParts p;
            float v;
            if (t == DType::Q4_K) {
              const auto& wb = reinterpret_cast<const quant::BlockQ4_K*>(w.data())[b];
              p = cm::dot_unit_q4_k(wb, ab, s);
              v = cm::q4_k_block_value(wb, ab, p);
            } else {
              const auto& wb = reinterpret_cast<const quant::BlockQ6_K*>(w.data())[b];
              p = cm::dot_unit_q6_k(wb, ab, s);
              v = cm::q6_k_block_value(wb, ab, p);
            }
            total.sumi += p.sumi;
            total.summs += p.summs;
            lanes[static_cast<size_t>(u++ % 32)] += v;
          }
          exact += t == DType::Q4_K
                       ? cm::q4_k_block_value(reinterpret_cast<const quant::BlockQ4_K*>(w.data())[b], ab, total)
                       : cm::q6_k_block_value(reinterpret_cast<const quant::BlockQ6_K*>(w.data())[b], ab, total);
        }
        ASSERT_EQ(bits(exact), bits(want)) << dtype_name(t) << " rep " << rep << (raw ? " (raw bytes)" : "");
        double strided = 0, magnitude = 0;
        for (float l : lanes) strided += static_cast<double>(l);
        for (float l : lanes) magnitude += std::fabs(static_cast<double>(l));
        EXPECT_NEAR(strided, static_cast<double>(want), 1e-5 * (magnitude + 1e-30)) << dtype_name(t);
      }
    }
  }
}

TEST(CudaDeviceMath, AttentionAndRopeIndexHelpers) {
  EXPECT_EQ(cm::first_visible(0, 0), 0);
  EXPECT_EQ(cm::first_visible(100, 0), 0);
  EXPECT_EQ(cm::first_visible(3, 5), 0);
  EXPECT_EQ(cm::first_visible(4, 5), 0);
  EXPECT_EQ(cm::first_visible(5, 5), 1);   // keys 1..5: five of them
  EXPECT_EQ(cm::first_visible(40, 16), 25);
  int i0, i1;
  cm::rope_pair(false, 3, 32, &i0, &i1);
  EXPECT_EQ(i0, 6);
  EXPECT_EQ(i1, 7);
  cm::rope_pair(true, 3, 32, &i0, &i1);
  EXPECT_EQ(i0, 3);
  EXPECT_EQ(i1, 35);
}

// The attention op's staging plan, replayed on a fake paged cache whose rows hold their own
// (sequence, position): every key a token may see must be where the kernel reads it.
TEST(CudaKvStaging, EveryVisibleKeyIsStagedWhereTheKernelReadsIt) {
  std::uniform_int_distribution<int> pick(0, 1 << 30);
  for (int rep = 0; rep < 300; ++rep) {
    const int32_t bs = rep % 3 == 0 ? 4 : (rep % 3 == 1 ? 32 : 7);
    const int32_t window = rep % 4 == 0 ? 0 : 1 + pick(rng()) % 40;
    const int n_seqs = 1 + pick(rng()) % 3;
    // A batch: each sequence continues from its cached length with a few new tokens.
    std::vector<int32_t> positions, seq_ids;
    std::map<int32_t, int32_t> length;  // tokens per sequence after the batch
    for (int q = 0; q < n_seqs; ++q) {
      const int32_t seq = q * 2 + pick(rng()) % 2;
      const int32_t cached = pick(rng()) % 90;
      const int32_t fresh = 1 + pick(rng()) % (rep % 2 ? 1 : 20);
      for (int32_t i = 0; i < fresh; ++i) {
        positions.push_back(cached + i);
        seq_ids.push_back(seq);
      }
      length[seq] = cached + fresh;
    }
    // The cache: blocks in a shuffled pool; a row holds seq * 100000 + position.
    std::map<int32_t, std::vector<int32_t>> table;
    std::vector<std::vector<int64_t>> pool;
    std::vector<int32_t> ids;
    for (const auto& [seq, len] : length) {
      for (int32_t b = 0; b * bs < len; ++b) ids.push_back(seq * 1000 + b);
    }
    std::shuffle(ids.begin(), ids.end(), rng());
    pool.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t seq = ids[i] / 1000, b = ids[i] % 1000;
      auto& t = table[seq];
      if (t.size() <= static_cast<size_t>(b)) t.resize(static_cast<size_t>(b) + 1);
      t[static_cast<size_t>(b)] = static_cast<int32_t>(i);
      pool[i].resize(static_cast<size_t>(bs));
      for (int32_t r = 0; r < bs; ++r) pool[i][static_cast<size_t>(r)] = int64_t{seq} * 100000 + b * bs + r;
    }
    const backends::cuda::KvStagingPlan plan = backends::cuda::plan_kv_staging(positions, seq_ids, window, bs);
    ASSERT_EQ(plan.info.size(), positions.size());
    std::vector<int64_t> staged(static_cast<size_t>(plan.rows), -1);
    for (const backends::cuda::StagedSeq& r : plan.seqs) {  // the copies ops.cpp makes, block by block
      ASSERT_EQ(r.lo % bs, 0);
      for (int32_t start = r.lo; start < r.hi; start += bs) {
        const std::vector<int64_t>& block = pool[static_cast<size_t>(table[r.seq][static_cast<size_t>(start / bs)])];
        ASSERT_GE(r.row0 + start, 0);
        ASSERT_LE(r.row0 + start + bs, plan.rows);
        std::copy(block.begin(), block.end(), staged.begin() + r.row0 + start);
      }
    }
    for (size_t t = 0; t < positions.size(); ++t) {
      const backends::cuda::kern::AttnTokenInfo& in = plan.info[t];
      EXPECT_EQ(in.n_kv, positions[t] + 1);
      EXPECT_EQ(in.kv0, cm::first_visible(positions[t], window));
      EXPECT_LE(in.n_kv, plan.max_kv);
      for (int32_t j = in.kv0; j < in.n_kv; ++j) {
        ASSERT_EQ(staged[static_cast<size_t>(in.row0 + j)], int64_t{seq_ids[t]} * 100000 + j)
            << "rep " << rep << " token " << t << " key " << j;
      }
    }
  }
}

TEST(CudaFault, ParsesSpecifications) {
  using backends::cuda::Fault;
  auto none = Fault::parse("");
  ASSERT_TRUE(none.has_value());
  EXPECT_FALSE(none->alloc);
  EXPECT_TRUE(none->refused_ops.empty());
  auto f = Fault::parse("alloc,op:matmul,op:attention");
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  EXPECT_TRUE(f->alloc);
  EXPECT_EQ(f->refused_ops.size(), 2u);
  EXPECT_EQ(f->refused_ops.count("matmul"), 1u);
  auto bad = Fault::parse("build");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("unknown fault 'build'"), std::string::npos) << bad.error().message;
  auto bad_op = Fault::parse("op:conv2d");
  ASSERT_FALSE(bad_op.has_value());
  EXPECT_NE(bad_op.error().message.find("unknown op 'conv2d'"), std::string::npos) << bad_op.error().message;
  EXPECT_FALSE(Fault::parse("op:").has_value());
  EXPECT_FALSE(Fault::parse("alloc,").has_value());
}

// Without a GPU (this repository's CI), the probe says why in a message that names the cause;
// with one, it reports a device of compute capability 8.0 or newer.
TEST(CudaProbe, SaysWhyThereIsNoDeviceOrDescribesIt) {
  auto probe = backends::cuda::probe_device();
  if (!probe) {
    const std::string& m = probe.error().message;
    EXPECT_TRUE(m.rfind("no CUDA device", 0) == 0 || m.find("compute capability") != std::string::npos) << m;
    auto be = backends::cuda::CudaBackend::create();
    ASSERT_FALSE(be.has_value());
    EXPECT_EQ(be.error().message, m);
    std::printf("no CUDA device here: %s\n", m.c_str());
    return;
  }
  EXPECT_FALSE(probe->name.empty());
  EXPECT_GE(probe->cc_major, 8);
  EXPECT_GT(probe->total_mem, 0u);
}

}  // namespace
}  // namespace geniex
