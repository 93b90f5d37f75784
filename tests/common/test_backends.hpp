// Test doubles of backends with partial capabilities, to exercise the scheduler's
// placement, fallback and copies. They compute on the host with the CPU kernels, but in
// memory of their own, so every cross-backend read must go through a Copy node.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cpu/backend/cpu_backend.hpp"
#include "backends/cpu/kernels.hpp"

namespace geniex::test_support {

// Runs MatMul only, and only for the weight types given (e.g. Q8_0 and F32), single-threaded.
class MatMulOnlyBackend final : public backends::Backend {
 public:
  explicit MatMulOnlyBackend(std::set<DType> types, std::string name = "matmul-only")
      : types_(std::move(types)), name_(std::move(name)) {}

  std::string_view name() const override { return name_; }
  backends::DeviceKind kind() const override { return backends::DeviceKind::Gpu; }
  backends::Support supports(const graph::Graph& g, const graph::Node& n) const override {
    if (n.op == graph::Op::Copy) return backends::Support::yes();
    if (n.op != graph::Op::MatMul) return backends::Support::no("only matmul");
    const DType w = g.node(n.src[0]).type;
    if (types_.count(w) == 0) return backends::Support::no("no " + std::string(dtype_name(w)) + " matmul");
    return backends::Support::yes();
  }
  double estimate_us(const graph::Graph&, const graph::Node&) const override { return 1.0; }
  Result<std::unique_ptr<backends::Buffer>> allocate(size_t bytes) override {
    ++allocations;
    return std::unique_ptr<backends::Buffer>(std::make_unique<backends::HostBuffer>(bytes));
  }
  bool host_visible() const override { return true; }
  Status compute(std::span<const int32_t> nodes, backends::ExecContext& ctx) override {
    const graph::Graph& g = *ctx.graph;
    for (int32_t id : nodes) {
      const graph::Node& n = g.node(id);
      ++nodes_run;
      void* dst = ctx.data[static_cast<size_t>(id)];
      if (n.op == graph::Op::Copy) {
        std::memcpy(dst, ctx.data[static_cast<size_t>(n.src[0])], n.nbytes());
        continue;
      }
      const graph::Node& w = g.node(n.src[0]);
      const cpu::TypeKernels* k = cpu::kernels_for(w.type);
      const int64_t K = w.ne[0], N = w.ne[1], T = n.ne[1];
      const auto* x = static_cast<const float*>(ctx.data[static_cast<size_t>(n.src[1])]);
      const void* act = x;
      size_t act_stride = static_cast<size_t>(K) * 4;
      if (k->act_type != DType::F32) {
        act_stride = static_cast<size_t>(row_bytes(k->act_type, K));
        scratch_.resize(act_stride * static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) k->quantize_act(x + t * K, scratch_.data() + static_cast<size_t>(t) * act_stride, K);
        act = scratch_.data();
      }
      k->gemm(K, ctx.data[static_cast<size_t>(n.src[0])], static_cast<size_t>(row_bytes(w.type, K)), N, act,
              act_stride, T, static_cast<float*>(dst), N);
    }
    return ok_status();
  }

  int nodes_run = 0;
  int allocations = 0;

 private:
  std::set<DType> types_;
  std::string name_;
  std::vector<uint8_t> scratch_;
};

}  // namespace geniex::test_support
