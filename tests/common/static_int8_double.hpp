// StaticInt8Double: a test double of a compute unit with NPU-like limits, to prove that the
// scheduler and the Session handle such a unit (static step shapes, chunked and padded
// prefill, fallback of the ops it refuses). It is not an NPU and does not claim to behave
// like one beyond these limits: it runs on the host, single-threaded.
//
// Its limits:
// - static shapes: it runs only steps of exactly static_tokens() tokens (128 by default),
//   and of those only operands with that many rows;
// - integer operands only: MatMul whose weights are symmetric integer blocks (Q8_0, and Q4_0
//   unpacked once to int8 in memory of its own); activations are quantized to int8 per
//   32-value block, products are accumulated in int32 per block, and the two fp16 scales are
//   applied after, block by block (the order of the scalar reference quant::vec_dot_ref);
// - everything else (norms, RoPE, attention, GLUs, get_rows, float/Q4_1/K-quant matmuls) is
//   refused with the reason, so the scheduler places it on the next backend.
// Arithmetic: its own (above) by default; CpuKernels runs the CPU backend's gemm kernel of
// the weight type instead (int8 x int8 blocks as well for Q8_0 and Q4_0), so where the CPU
// keeps the file's weight layout (GENIEX_REPACK=0) a Session with the double gives the CPU's
// logits bit for bit, and tests of the chunking and padding can ask for exact equality.
// It estimates its matmuls at 2 int8 TOPS with no launch cost, as a unit built for them.
// It computes in memory of its own (host memory, since the scheduler uploads only to host
// memory, but it checks that every activation it reads lies in its own buffers, so a missing
// Copy node is an error), counts what it ran, and can be told to fail at compute.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cpu/kernels.hpp"
#include "core/fp16.hpp"
#include "graph/graph.hpp"
#include "kv/kv_cache.hpp"
#include "quant/quant.hpp"

namespace geniex::test_support {

class StaticInt8Double final : public backends::Backend {
 public:
  static constexpr const char* kName = "static-int8-double";

  enum class Arithmetic { OwnInt8, CpuKernels };

  explicit StaticInt8Double(int32_t static_tokens = 128, Arithmetic arithmetic = Arithmetic::OwnInt8)
      : static_tokens_(static_tokens), arithmetic_(arithmetic) {}

  std::string_view name() const override { return kName; }
  // It runs on the host CPU; the enum has no kind for a test double.
  backends::DeviceKind kind() const override { return backends::DeviceKind::Cpu; }
  int32_t static_tokens() const override { return static_tokens_; }

  backends::Support supports(const graph::Graph& g, const graph::Node& n) const override {
    const int64_t step = step_tokens(g);
    if (step != static_tokens_) {
      return backends::Support::no("static shapes: compiled for " + std::to_string(static_tokens_) +
                                   "-token steps (this step has " + std::to_string(step) + ")");
    }
    if (n.op != graph::Op::MatMul) {
      return backends::Support::no("int8/int16 operands only: " + std::string(graph::op_name(n.op)) +
                                   " needs float arithmetic");
    }
    const graph::Node& w = g.node(n.src[0]);
    if (w.op != graph::Op::Weight || (w.type != DType::Q8_0 && w.type != DType::Q4_0)) {
      return backends::Support::no("int8/int16 operands only: " + std::string(dtype_name(w.type)) +
                                   " weights are not symmetric int8 blocks (Q8_0, Q4_0 are)");
    }
    if (n.ne[1] != static_tokens_) {
      return backends::Support::no("static shapes: compiled for " + std::to_string(static_tokens_) +
                                   "-row operands (this one has " + std::to_string(n.ne[1]) + ")");
    }
    return backends::Support::yes();
  }

  double estimate_us(const graph::Graph& g, const graph::Node& n) const override {
    if (n.op != graph::Op::MatMul) return 1e9;  // refused anyway
    const graph::Node& w = g.node(n.src[0]);
    return 2.0 * static_cast<double>(w.ne[0] * w.ne[1] * n.ne[1]) / 2e6;  // 2e12 ops/s in us
  }

  Result<std::unique_ptr<backends::Buffer>> allocate(size_t bytes) override {
    ++allocations;
    return std::unique_ptr<backends::Buffer>(std::make_unique<OwnBuffer>(bytes, owned_));
  }
  // The scheduler writes step inputs and copies with memcpy, so the memory is host memory;
  // it is still the double's own (see compute's ownership check).
  bool host_visible() const override { return true; }

  Status compute(std::span<const int32_t> nodes, backends::ExecContext& ctx) override {
    ++computes;
    if (fail_at_compute > 0 && --fail_at_compute == 0) {
      return make_error(ErrorCode::BackendError, std::string(kName) + ": injected fault at compute");
    }
    const graph::Graph& g = *ctx.graph;
    if (ctx.step != nullptr && ctx.step->kv != nullptr) last_kv = ctx.step->kv;
    for (const int32_t id : nodes) {
      const graph::Node& n = g.node(id);
      void* dst = ctx.data[static_cast<size_t>(id)];
      if (!owns(dst, n.nbytes())) return foreign(n.name, "write its output");
      if (n.op == graph::Op::Copy) {
        std::memcpy(dst, ctx.data[static_cast<size_t>(n.src[0])], n.nbytes());
        ++copies_run;
        continue;
      }
      if (n.op != graph::Op::MatMul || step_tokens(g) != static_tokens_ || n.ne[1] != static_tokens_) {
        return make_error(ErrorCode::Internal, std::string(kName) + ": asked to run '" + n.name +
                                                   "', which supports() refuses");
      }
      const graph::Node& x = g.node(n.src[1]);
      const void* xdata = ctx.data[static_cast<size_t>(n.src[1])];
      if (!owns(xdata, x.nbytes())) return foreign(n.name, "read its activations");
      if (arithmetic_ == Arithmetic::CpuKernels) {
        matmul_cpu_kernel(g.node(n.src[0]), static_cast<const float*>(xdata), static_cast<float*>(dst), n.ne[1]);
      } else {
        matmul(g.node(n.src[0]), static_cast<const float*>(xdata), static_cast<float*>(dst), n.ne[1]);
      }
      ++matmuls_run;
      rows_run += n.ne[1];
    }
    return ok_status();
  }

  // Counters for tests.
  int computes = 0;     // compute() calls (one per split)
  int matmuls_run = 0;
  int copies_run = 0;
  int64_t rows_run = 0;  // sum of the rows of the matmuls run
  int allocations = 0;
  // Fault switch: when > 0, the compute() call that brings it to 0 fails (1: the next one).
  int fail_at_compute = 0;
  // The KV cache of the last step run (to check what a Session kept in it).
  const kv::KvCache* last_kv = nullptr;

 private:
  struct Range {
    const uint8_t* begin;
    size_t size;
  };
  using Ranges = std::vector<Range>;

  class OwnBuffer final : public backends::Buffer {
   public:
    OwnBuffer(size_t bytes, std::shared_ptr<Ranges> owned) : bytes_(bytes), owned_(std::move(owned)) {
      owned_->push_back({bytes_.data(), bytes_.size()});
    }
    ~OwnBuffer() override {
      owned_->erase(std::remove_if(owned_->begin(), owned_->end(),
                                   [&](const Range& r) { return r.begin == bytes_.data(); }),
                    owned_->end());
    }
    OwnBuffer(const OwnBuffer&) = delete;
    OwnBuffer& operator=(const OwnBuffer&) = delete;
    void* data() override { return bytes_.data(); }
    size_t size() const override { return bytes_.size(); }

   private:
    std::vector<uint8_t> bytes_;
    std::shared_ptr<Ranges> owned_;
  };

  // The step's token count: the size of the graph's Tokens input (0 if it has none).
  static int64_t step_tokens(const graph::Graph& g) {
    for (const graph::Node& n : g.nodes()) {
      if (n.op == graph::Op::Input && n.input == graph::InputKind::Tokens) return n.ne[0];
    }
    return 0;
  }

  bool owns(const void* p, uint64_t bytes) const {
    const auto* b = static_cast<const uint8_t*>(p);
    for (const Range& r : *owned_) {
      if (b >= r.begin && b + bytes <= r.begin + r.size) return true;
    }
    return false;
  }
  static Status foreign(const std::string& node, const char* what) {
    return make_error(ErrorCode::Internal, std::string(kName) + ": '" + node + "' would " + what +
                                               " outside the double's own memory (missing copy)");
  }

  // int8 weights: per 32-value block, the fp16 scale and 32 int8 values (Q8_0's layout).
  // Q8_0 weights are used in place; Q4_0 weights are unpacked once (q - 8) into own memory.
  const quant::BlockQ8_0* int8_weights(const graph::Node& w) {
    if (w.type == DType::Q8_0) return reinterpret_cast<const quant::BlockQ8_0*>(w.weight->data);
    auto it = unpacked_.find(w.weight->data);
    if (it != unpacked_.end()) return it->second.data();
    const int64_t n_blocks = w.ne[0] / kQK4_0 * w.ne[1];
    std::vector<quant::BlockQ8_0> out(static_cast<size_t>(n_blocks));
    const auto* src = reinterpret_cast<const quant::BlockQ4_0*>(w.weight->data);
    for (int64_t b = 0; b < n_blocks; ++b) {
      out[static_cast<size_t>(b)].d = src[b].d;
      for (int j = 0; j < kQK4_0 / 2; ++j) {
        out[static_cast<size_t>(b)].qs[j] = static_cast<int8_t>((src[b].qs[j] & 0x0f) - 8);
        out[static_cast<size_t>(b)].qs[j + kQK4_0 / 2] = static_cast<int8_t>((src[b].qs[j] >> 4) - 8);
      }
    }
    return unpacked_.emplace(w.weight->data, std::move(out)).first->second.data();
  }

  // out (T, N) = x (T, K) . W (N, K)^T with int8 x int8 -> int32 per block.
  void matmul(const graph::Node& w, const float* x, float* out, int64_t n_tok) {
    const int64_t K = w.ne[0], N = w.ne[1], nb = K / kQK8_0;
    const quant::BlockQ8_0* wq = int8_weights(w);
    act_.resize(static_cast<size_t>(nb * n_tok));
    for (int64_t t = 0; t < n_tok; ++t) {
      quant::quantize_activations_ref(DType::Q8_0, x + t * K, act_.data() + t * nb, K);
    }
    for (int64_t t = 0; t < n_tok; ++t) {
      const quant::BlockQ8_0* a = act_.data() + t * nb;
      for (int64_t r = 0; r < N; ++r) {
        const quant::BlockQ8_0* wr = wq + r * nb;
        float sum = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          int32_t sumi = 0;
          for (int j = 0; j < kQK8_0; ++j) sumi += int32_t{wr[b].qs[j]} * int32_t{a[b].qs[j]};
          sum += static_cast<float>(sumi) * (fp16_to_f32(wr[b].d) * fp16_to_f32(a[b].d));
        }
        out[t * N + r] = sum;
      }
    }
  }

  // The CPU backend's kernel for the weight type, on the weights as stored.
  void matmul_cpu_kernel(const graph::Node& w, const float* x, float* out, int64_t n_tok) {
    const cpu::TypeKernels* k = cpu::kernels_for(w.type);
    const int64_t K = w.ne[0], N = w.ne[1];
    const auto stride = static_cast<size_t>(row_bytes(k->act_type, K));
    scratch_.resize(stride * static_cast<size_t>(n_tok));
    for (int64_t t = 0; t < n_tok; ++t) k->quantize_act(x + t * K, scratch_.data() + static_cast<size_t>(t) * stride, K);
    k->gemm(K, w.weight->data, static_cast<size_t>(row_bytes(w.type, K)), N, scratch_.data(), stride, n_tok, out, N);
  }

  int32_t static_tokens_;
  Arithmetic arithmetic_;
  std::vector<uint8_t> scratch_;
  std::shared_ptr<Ranges> owned_ = std::make_shared<Ranges>();
  std::map<const uint8_t*, std::vector<quant::BlockQ8_0>> unpacked_;
  std::vector<quant::BlockQ8_0> act_;
};

}  // namespace geniex::test_support
