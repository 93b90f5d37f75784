// CpuBackend: capability answers, cost estimates, and the compute loop that runs a split's
// nodes one after another on all threads, with a barrier between two nodes only where the
// second depends on the first's memory (consecutive matmuls of one input, the two RoPEs run
// back to back).
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
    : pool_(n_threads), weights_(std::move(weights)) {
  const char* b = std::getenv("GENIEX_CPU_BARRIERS");
  barrier_every_node_ = b != nullptr && std::string(b) == "all";
  if (const char* k = std::getenv("GENIEX_ATTN_SPLIT_MIN_KEYS"); k != nullptr && *k != '\0') {
    char* end = nullptr;
    const long v = std::strtol(k, &end, 10);
    if (*end == '\0' && v > 0) attn_split_min_keys_ = static_cast<int32_t>(std::min<long>(v, 1L << 30));
  }
}

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

namespace {

// Byte ranges read and written since the last barrier, to decide whether the next node may
// start without one: it may when it reads nothing written since, and writes nothing read or
// written since (activation buffers are reused, so this compares addresses, not node ids).
class Hazards {
 public:
  void add(const void* p, size_t bytes, bool write) {
    if (p == nullptr || bytes == 0) return;
    if (n_ == kMax) {  // never with the graphs built here; stay safe regardless
      full_ = true;
      return;
    }
    const auto b = reinterpret_cast<uintptr_t>(p);
    r_[n_++] = Range{b, b + bytes, write};
  }
  // Conflicts with a read (write = false) or a write of [p, p + bytes).
  bool conflicts(const void* p, size_t bytes, bool write) const {
    if (full_) return true;
    if (p == nullptr || bytes == 0) return false;
    const auto b = reinterpret_cast<uintptr_t>(p), e = b + bytes;
    for (size_t i = 0; i < n_; ++i) {
      if ((write || r_[i].write) && b < r_[i].end && r_[i].begin < e) return true;
    }
    return false;
  }
  void reset() {
    n_ = 0;
    full_ = false;
  }

 private:
  struct Range {
    uintptr_t begin, end;
    bool write;
  };
  static constexpr size_t kMax = 64;
  Range r_[kMax];
  size_t n_ = 0;
  bool full_ = false;
};

// Ops that read only their inputs and write only their output (everything but attention,
// which also writes and reads the KV cache and hands out work through the pool's tickets).
bool pure_op(graph::Op op) {
  switch (op) {
    case graph::Op::GetRows:
    case graph::Op::RmsNorm:
    case graph::Op::MatMul:
    case graph::Op::Add:
    case graph::Op::Rope:
    case graph::Op::SwiGlu:
    case graph::Op::GeGlu:
    case graph::Op::Scale:
    case graph::Op::Copy:
      return true;
    default:
      return false;
  }
}

}  // namespace

Status CpuBackend::compute(std::span<const int32_t> nodes, ExecContext& ctx) {
  const graph::Graph& g = *ctx.graph;
  const int nth = pool_.size();
  size_t need = 0;
  // One part per thread for every one-token matmul of this run alike (the largest one's), so
  // that one thread's part never overlaps another's whatever format each quantizes into: a part
  // sized per matmul put thread 1's Q8_0 part of v over the tail of thread 0's Q8_1 part of k.
  size_t work_part = 0;
  for (int32_t id : nodes) {
    const graph::Node& n = g.node(id);
    if (n.op == graph::Op::MatMul && n.ne[1] == 1) {
      work_part = std::max(work_part, cpu_ops::work_bytes(g, n, 1));
    } else {
      need = std::max(need, cpu_ops::work_bytes(g, n, nth));
    }
    if (n.op == graph::Op::Attention && ctx.step != nullptr) {
      need = std::max(need, cpu_ops::attention_work_bytes(n, *ctx.step, attn_split_min_keys_));
    }
  }
  need = std::max(need, work_part * static_cast<size_t>(nth));
  if (work_.size() < need) work_.resize(need);
  uint8_t* work = work_.data();
  if (n_tickets_ < g.nodes().size()) {
    n_tickets_ = g.nodes().size();
    tickets_ = std::make_unique<cpu_ops::RowTicket[]>(n_tickets_);
  }
  for (int32_t id : nodes) tickets_[static_cast<size_t>(id)].next.store(0, std::memory_order_relaxed);
  cpu_ops::RowTicket* tickets = tickets_.get();

  pool_.run([&](int ith, int nth_run) {
    // Every thread makes the same decisions from the same sequence, so all call barrier()
    // equally often.
    cpu_ops::ActCache act;
    Hazards hz;
    bool sync_next = false;  // a barrier before the next node regardless
    // The work buffer's uses since the last barrier. A one-token matmul quantizes its input
    // into this thread's own part and reads only that part (op_matmul.cpp), so one-token
    // matmuls never conflict with each other there (q then k, gate then up: each thread's
    // ActCache makes the same choice); a batch's quantized input is shared by every thread.
    bool work_shared = false, work_shared_written = false, work_private = false;
    bool first = true;
    for (int32_t id : nodes) {
      const graph::Node& node = g.node(id);
      const size_t out_bytes = node.nbytes();
      const bool quantizes = node.op == graph::Op::MatMul && cpu_ops::matmul_quantizes(g, node, act);
      const bool reads_work = node.op == graph::Op::MatMul && cpu_ops::work_bytes(g, node, nth) > 0;
      const bool private_work = reads_work && node.ne[1] == 1;
      if (!first) {
        bool barrier = barrier_every_node_ || sync_next || !pure_op(node.op) ||
                       hz.conflicts(ctx.data[static_cast<size_t>(id)], out_bytes, true);
        for (const int32_t s : node.src) {
          if (barrier) break;
          if (s != graph::kNoInput) barrier = hz.conflicts(ctx.data[static_cast<size_t>(s)], g.node(s).nbytes(), false);
        }
        if (!barrier && reads_work) {
          barrier = private_work ? work_shared : work_shared_written || work_private || (quantizes && work_shared);
        }
        if (barrier) {
          pool_.barrier();
          hz.reset();
          work_shared = work_shared_written = work_private = false;
        }
      }
      first = false;
      const cpu_ops::OpArgs args{g, node, ctx, pool_, work, work_part, weights_.get(), ith, nth_run, &act,
                                 &tickets[static_cast<size_t>(id)], attn_split_min_keys_};
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
      hz.add(ctx.data[static_cast<size_t>(id)], out_bytes, true);
      for (const int32_t s : node.src) {
        if (s != graph::kNoInput) hz.add(ctx.data[static_cast<size_t>(s)], g.node(s).nbytes(), false);
      }
      if (private_work) {
        work_private = true;
      } else if (reads_work) {
        work_shared = true;
        work_shared_written = work_shared_written || quantizes;
      }
      sync_next = !pure_op(node.op);
    }
  });
  return ok_status();
}

}  // namespace geniex::backends
