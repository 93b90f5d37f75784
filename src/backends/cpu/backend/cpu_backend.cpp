// CpuBackend: capability answers, cost estimates, and the compute loop that runs a split's
// nodes one after another on all threads with a barrier between nodes.
#include "backends/cpu/backend/cpu_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>

#include "backends/cpu/backend/ops.hpp"
#include "backends/cpu/kernels.hpp"

namespace geniex::backends {

HostBuffer::HostBuffer(size_t bytes) : size_(bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
}

HostBuffer::~HostBuffer() { std::free(data_); }

CpuBackend::CpuBackend(int n_threads, std::shared_ptr<const CpuWeightStore> weights)
    : pool_(n_threads), weights_(std::move(weights)) {}

Support CpuBackend::supports(const graph::Graph& g, const graph::Node& n) const {
  using graph::Op;
  switch (n.op) {
    case Op::MatMul:
    case Op::GetRows: {
      const DType w = g.node(n.src[0]).type;
      if (cpu::kernels_for(w) == nullptr) {
        return Support::no("no cpu kernel for " + std::string(dtype_name(w)) + " weights");
      }
      return Support::yes();
    }
    case Op::Attention:
      if (n.attn.head_dim > 512) return Support::no("head_dim over 512");
      return Support::yes();
    case Op::Rope:
      if (n.rope.n_rot > 1024) return Support::no("n_rot over 1024");
      return Support::yes();
    case Op::RmsNorm:
    case Op::Add:
    case Op::SwiGlu:
    case Op::GeGlu:
    case Op::Scale:
    case Op::Copy:
      return Support::yes();
    default:
      return Support::no("op " + std::string(graph::op_name(n.op)) + " is not a compute op");
  }
}

double CpuBackend::estimate_us(const graph::Graph& g, const graph::Node& n) const {
  // The backend's own rough guess: 20 GB/s for weights, 50 GFLOP/s, 2 us launch (the cpu
  // entry of sched::default_backend_profile). The scheduler's cost model uses the device
  // profile's measured rates (geniex calibrate) instead wherever the profile names "cpu".
  constexpr double kBytesPerUs = 20e3;
  constexpr double kFlopsPerUs = 50e3;
  double us = 2.0;
  if (n.op == graph::Op::MatMul) {
    const graph::Node& w = g.node(n.src[0]);
    const double weight_bytes = static_cast<double>(row_bytes(w.type, w.ne[0]) * w.ne[1]);
    const double flops = 2.0 * static_cast<double>(w.ne[0] * w.ne[1] * n.ne[1]);
    us += std::max(weight_bytes / kBytesPerUs, flops / kFlopsPerUs);
  } else {
    us += static_cast<double>(n.nbytes()) * 3 / kBytesPerUs;
  }
  return us;
}

Result<std::unique_ptr<Buffer>> CpuBackend::allocate(size_t bytes) {
  auto buffer = std::make_unique<HostBuffer>(bytes);
  if (!buffer->ok()) {
    return make_error(ErrorCode::OutOfMemory,
                      "cpu: cannot allocate " + std::to_string(bytes) + " bytes for activations");
  }
  return std::unique_ptr<Buffer>(std::move(buffer));
}

Status CpuBackend::compute(std::span<const int32_t> nodes, ExecContext& ctx) {
  const graph::Graph& g = *ctx.graph;
  size_t need = 0;
  for (int32_t id : nodes) need = std::max(need, cpu_ops::work_bytes(g, g.node(id)));
  if (work_.size() < need) work_.resize(need);
  uint8_t* work = work_.data();

  pool_.run([&](int ith, int nth) {
    for (int32_t id : nodes) {
      const graph::Node& node = g.node(id);
      const cpu_ops::OpArgs args{g, node, ctx, pool_, work, weights_.get(), ith, nth};
      switch (node.op) {
        case graph::Op::GetRows: cpu_ops::get_rows(args); break;
        case graph::Op::RmsNorm: cpu_ops::rms_norm(args); break;
        case graph::Op::MatMul: cpu_ops::matmul(args); break;
        case graph::Op::Add: cpu_ops::add(args); break;
        case graph::Op::Rope: cpu_ops::rope(args); break;
        case graph::Op::Attention: cpu_ops::attention(args); break;
        case graph::Op::SwiGlu: cpu_ops::swiglu(args); break;
        case graph::Op::GeGlu: cpu_ops::geglu(args); break;
        case graph::Op::Scale: cpu_ops::scale(args); break;
        case graph::Op::Copy: cpu_ops::copy(args); break;
        default: break;  // Input/Weight never reach a backend
      }
      pool_.barrier();
    }
  });
  return ok_status();
}

}  // namespace geniex::backends
