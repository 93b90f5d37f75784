// CudaBackend: device probe and creation (stream, cuBLAS handle), fault injection, capability
// answers with reasons, cost guesses, two-halved arenas (pinned host + device mirror) with the
// uploads and downloads around each compute() call, weight uploads cached per tensor, and the
// compute loop that dispatches each node to its op (ops.cpp).
//
// Written without a GPU at hand: everything here compiles and the device-independent parts
// (fault parsing, the no-device path) are tested in CI; the rest is exercised by
// tests/cuda/test_cuda_backend.cpp and the op harness on a GPU (scripts/cuda_device_check.sh).
#include "backends/cuda/cuda_backend.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>

#include "backends/cuda/matmul.cuh"
#include "backends/cuda/ops.hpp"

namespace geniex::backends::cuda {

// ---- faults ----------------------------------------------------------------------------------

Result<Fault> Fault::parse(std::string_view spec) {
  Fault f;
  f.spec = std::string(spec);
  size_t pos = 0;
  while (pos <= spec.size() && !spec.empty()) {
    const size_t comma = spec.find(',', pos);
    const std::string_view item = spec.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    if (item == "alloc") {
      f.alloc = true;
    } else if (item.substr(0, 3) == "op:" && item.size() > 3) {
      const std::string name(item.substr(3));
      bool known = false;
      for (int i = 0; i < static_cast<int>(graph::Op::Count); ++i) {
        known = known || graph::op_name(static_cast<graph::Op>(i)) == name;
      }
      if (!known) return make_error(ErrorCode::InvalidArgument, "GENIEX_CUDA_FAULT: unknown op '" + name + "'");
      f.refused_ops.insert(name);
    } else {
      return make_error(ErrorCode::InvalidArgument, "GENIEX_CUDA_FAULT: unknown fault '" + std::string(item) +
                                                        "' (expected alloc or op:NAME, comma-separated)");
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return f;
}

Result<Fault> Fault::from_env() {
  const char* v = std::getenv("GENIEX_CUDA_FAULT");
  if (v == nullptr || *v == '\0') return Fault{};
  return parse(v);
}

// ---- device probe ----------------------------------------------------------------------------

Result<DeviceInfo> probe_device() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
    // Without a GPU the runtime usually finds no driver and says "driver version is
    // insufficient"; name the likely cause first.
    const bool absent = err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice;
    return make_error(ErrorCode::Unsupported, std::string("no CUDA device: ") +
                                                  (absent ? "no NVIDIA GPU or driver found (cudaGetDeviceCount: "
                                                          : "cudaGetDeviceCount failed (") +
                                                  cudaGetErrorString(err) + ")");
  }
  if (count == 0) return make_error(ErrorCode::Unsupported, "no CUDA device: cudaGetDeviceCount returned 0");
  cudaDeviceProp prop{};
  if (const cudaError_t e = cudaGetDeviceProperties(&prop, 0); e != cudaSuccess) {
    return make_error(ErrorCode::Unsupported, std::string("no CUDA device: cannot read device 0: ") + cudaGetErrorString(e));
  }
  DeviceInfo info;
  info.index = 0;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.total_mem = prop.totalGlobalMem;
  if (info.cc_major < 8) {
    return make_error(ErrorCode::Unsupported, "CUDA device " + info.name + " has compute capability " +
                                                  std::to_string(info.cc_major) + "." + std::to_string(info.cc_minor) +
                                                  "; the CUDA backend's kernels need 8.0 or newer");
  }
  return info;
}

// ---- arenas ----------------------------------------------------------------------------------

struct Arena {
  void* host = nullptr;  // pinned, what Buffer::data() returns
  void* dev = nullptr;   // same size, same offsets
  size_t size = 0;
};

struct ArenaRegistry {
  std::mutex mutex;
  std::vector<Arena*> live;
};

namespace {

class CudaBuffer final : public Buffer {
 public:
  explicit CudaBuffer(std::shared_ptr<ArenaRegistry> reg) : reg_(std::move(reg)) {}
  ~CudaBuffer() override {
    {
      std::lock_guard<std::mutex> lock(reg_->mutex);
      reg_->live.erase(std::remove(reg_->live.begin(), reg_->live.end(), &arena_), reg_->live.end());
    }
    if (arena_.dev != nullptr) cudaFree(arena_.dev);
    if (arena_.host != nullptr) cudaFreeHost(arena_.host);
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  Status init(size_t bytes) {
    const size_t n = std::max<size_t>(bytes, 256);
    if (cudaError_t e = cudaHostAlloc(&arena_.host, n, cudaHostAllocDefault); e != cudaSuccess) {
      arena_.host = nullptr;
      return make_error(ErrorCode::OutOfMemory, "cuda: cannot allocate " + std::to_string(bytes) +
                                                    " bytes of pinned host memory for activations: " +
                                                    cudaGetErrorString(e));
    }
    if (cudaError_t e = cudaMalloc(&arena_.dev, n); e != cudaSuccess) {
      arena_.dev = nullptr;
      return make_error(ErrorCode::OutOfMemory, "cuda: cannot allocate " + std::to_string(bytes) +
                                                    " bytes of device memory for activations: " + cudaGetErrorString(e));
    }
    arena_.size = n;
    std::lock_guard<std::mutex> lock(reg_->mutex);
    reg_->live.push_back(&arena_);
    return ok_status();
  }

  void* data() override { return arena_.host; }
  size_t size() const override { return arena_.size; }

 private:
  std::shared_ptr<ArenaRegistry> reg_;
  Arena arena_;
};

bool contains(const Arena& a, const void* p) {
  const auto* b = static_cast<const uint8_t*>(a.host);
  const auto* q = static_cast<const uint8_t*>(p);
  return q >= b && q < b + a.size;
}

}  // namespace

// ---- creation --------------------------------------------------------------------------------

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(const Options& options) {
  Fault fault;
  if (options.fault) {
    fault = *options.fault;
  } else {
    GX_ASSIGN_OR_RETURN(fault, Fault::from_env());
  }
  GX_ASSIGN_OR_RETURN(DeviceInfo info, probe_device());
  std::unique_ptr<CudaBackend> be(new CudaBackend());
  be->info_ = info;
  be->fault_ = fault;
  be->arenas_ = std::make_shared<ArenaRegistry>();
  GX_TRY(be->check(cudaSetDevice(info.index), "selecting device " + info.name));
  GX_TRY(be->check(cudaStreamCreateWithFlags(&be->stream_, cudaStreamNonBlocking), "creating a stream"));
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    return make_error(ErrorCode::BackendError, "cuda: cannot create a cuBLAS handle on " + info.name);
  }
  be->cublas_ = handle;
  if (cublasSetStream(handle, be->stream_) != CUBLAS_STATUS_SUCCESS) {
    return make_error(ErrorCode::BackendError, "cuda: cannot bind cuBLAS to the backend's stream");
  }
  // A device that cannot allocate a small buffer runs nothing: say so once, here.
  if (fault.alloc) {
    be->unusable_ = "cuda: device allocations fail (GENIEX_CUDA_FAULT=alloc)";
    return be;
  }
  void* probe = nullptr;
  if (cudaError_t e = cudaMalloc(&probe, 4096); e != cudaSuccess) {
    be->unusable_ = std::string("cuda: cannot allocate device memory: ") + cudaGetErrorString(e);
    return be;
  }
  cudaFree(probe);
  return be;
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (auto& [ptr, d] : weights_) cudaFree(d);
  for (ScratchBuf& s : scratch_) {
    if (s.dev != nullptr) cudaFree(s.dev);
    if (s.host != nullptr) cudaFreeHost(s.host);
  }
  for (RopeTable& t : rope_tables_) {
    if (t.dev != nullptr) cudaFree(t.dev);
  }
  if (cublas_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status CudaBackend::check(cudaError_t err, const std::string& what) const {
  if (err == cudaSuccess) return ok_status();
  return make_error(ErrorCode::BackendError, "cuda: " + what + ": " + cudaGetErrorString(err));
}

Status CudaBackend::sync(const std::string& what) { return check(cudaStreamSynchronize(stream_), what); }

// ---- capability ------------------------------------------------------------------------------

Support CudaBackend::supports(const graph::Graph& g, const graph::Node& n) const {
  using graph::Op;
  if (!unusable_.empty()) return Support::no(unusable_);
  if (fault_.refused_ops.count(std::string(graph::op_name(n.op))) != 0) {
    return Support::no("GENIEX_CUDA_FAULT refuses " + std::string(graph::op_name(n.op)));
  }
  if (n.type != DType::F32 && n.op != Op::Copy) {
    return Support::no(std::string(dtype_name(n.type)) + " outputs (kernels write f32)");
  }
  switch (n.op) {
    case Op::MatMul:
    case Op::GetRows: {
      const graph::Node& w = g.node(n.src[0]);
      if (!kern::has_weight_kernels(w.type)) {
        return Support::no("no CUDA kernel for " + std::string(dtype_name(w.type)) + " weights");
      }
      if (n.op == Op::MatMul && w.op != Op::Weight) return Support::no("MatMul of two activations");
      if (n.op == Op::GetRows && g.node(n.src[1]).type != DType::I32) return Support::no("row ids are not i32");
      if (w.op == Op::Weight && w.weight != nullptr && w.weight->nbytes > info_.total_mem / 2) {
        return Support::no("weight " + w.weight->name + " (" + std::to_string(w.weight->nbytes) +
                           " bytes) exceeds half the device's memory");
      }
      if (n.op == Op::MatMul && (w.ne[0] > INT32_MAX || w.ne[1] > INT32_MAX)) {
        return Support::no("MatMul dimensions beyond cuBLAS's int range");
      }
      return Support::yes();
    }
    case Op::RmsNorm:
      if (g.node(n.src[1]).type != DType::F32) return Support::no("norm weight is not f32");
      return Support::yes();
    case Op::Rope:
      if (n.rope.n_rot % 2 != 0 || n.rope.n_rot > n.rope.head_dim) return Support::no("n_rot odd or over head_dim");
      if (n.src[2] != graph::kNoInput && g.node(n.src[2]).type != DType::F32) return Support::no("frequency factors not f32");
      return Support::yes();
    case Op::Attention:
      if (n.attn.head_dim > 512) return Support::no("head_dim over 512 (the query is kept in shared memory)");
      if (n.attn.n_head_kv <= 0 || n.attn.n_head % n.attn.n_head_kv != 0) return Support::no("n_head not a multiple of n_head_kv");
      return Support::yes();
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

double CudaBackend::estimate_us(const graph::Graph& g, const graph::Node& n) const {
  // Rough defaults for an H100/H200-class GPU until calibration exists: 3 TB/s from memory,
  // 300 TFLOP/s fp16 with tensor cores, 5 us per launch; attention adds the host KV copy
  // (about 20 GB/s).
  constexpr double kBytesPerUs = 3e6;
  constexpr double kFlopsPerUs = 3e8;
  double us = 5.0;
  if (n.op == graph::Op::MatMul) {
    const graph::Node& w = g.node(n.src[0]);
    const double weight_bytes = static_cast<double>(row_bytes(w.type, w.ne[0]) * w.ne[1]);
    const double flops = 2.0 * static_cast<double>(w.ne[0] * w.ne[1] * n.ne[1]);
    us += 5.0 + std::max(weight_bytes / kBytesPerUs, flops / kFlopsPerUs);
  } else if (n.op == graph::Op::Attention) {
    us += 20.0 + static_cast<double>(n.nbytes()) * 3 / 2e4;
  } else {
    us += static_cast<double>(n.nbytes()) * 3 / kBytesPerUs;
  }
  return us;
}

// ---- memory ----------------------------------------------------------------------------------

Result<std::unique_ptr<Buffer>> CudaBackend::allocate(size_t bytes) {
  if (fault_.alloc) return make_error(ErrorCode::OutOfMemory, "cuda: device allocations fail (GENIEX_CUDA_FAULT=alloc)");
  GX_TRY(check(cudaSetDevice(info_.index), "selecting the device"));
  auto buf = std::make_unique<CudaBuffer>(arenas_);
  GX_TRY(buf->init(bytes));
  return std::unique_ptr<Buffer>(std::move(buf));
}

Arena* CudaBackend::arena_of(const void* host_ptr) const {
  std::lock_guard<std::mutex> lock(arenas_->mutex);
  for (Arena* a : arenas_->live) {
    if (contains(*a, host_ptr)) return a;
  }
  return nullptr;
}

Result<void*> CudaBackend::weight_dev(const graph::WeightRef& w) {
  auto it = weights_.find(w.data);
  if (it != weights_.end()) return it->second;
  void* d = nullptr;
  if (cudaError_t e = cudaMalloc(&d, static_cast<size_t>(w.nbytes)); e != cudaSuccess) {
    return make_error(ErrorCode::OutOfMemory, "cuda: cannot allocate " + std::to_string(w.nbytes) +
                                                  " bytes for weight " + w.name + ": " + cudaGetErrorString(e));
  }
  if (cudaError_t e = cudaMemcpy(d, w.data, static_cast<size_t>(w.nbytes), cudaMemcpyHostToDevice); e != cudaSuccess) {
    cudaFree(d);
    return make_error(ErrorCode::BackendError, "cuda: uploading weight " + w.name + ": " + cudaGetErrorString(e));
  }
  weights_.emplace(w.data, d);
  return d;
}

Result<void*> CudaBackend::dev(const ExecContext& ctx, int32_t node_id) {
  const graph::Node& n = ctx.graph->node(node_id);
  if (n.op == graph::Op::Weight) return weight_dev(*n.weight);
  const void* p = ctx.data[static_cast<size_t>(node_id)];
  const Arena* a = arena_of(p);
  if (a == nullptr) {
    return make_error(ErrorCode::Internal, "cuda: tensor '" + n.name + "' is not in this backend's memory");
  }
  return static_cast<uint8_t*>(a->dev) + (static_cast<const uint8_t*>(p) - static_cast<const uint8_t*>(a->host));
}

Result<const void*> CudaBackend::host(const ExecContext& ctx, int32_t node_id) {
  const graph::Node& n = ctx.graph->node(node_id);
  if (n.op == graph::Op::Weight) return static_cast<const void*>(n.weight->data);
  void* p = ctx.data[static_cast<size_t>(node_id)];
  const auto i = static_cast<size_t>(node_id);
  if (i < on_device_only_.size() && on_device_only_[i] != 0) {
    GX_ASSIGN_OR_RETURN(void* d, dev(ctx, node_id));
    GX_TRY(check(cudaMemcpyAsync(p, d, static_cast<size_t>(n.nbytes()), cudaMemcpyDeviceToHost, stream_),
                 "downloading " + n.name));
    GX_TRY(sync("downloading " + n.name));
    on_device_only_[i] = 0;
  }
  return static_cast<const void*>(p);
}

Result<void*> CudaBackend::scratch(Scratch slot, size_t bytes) {
  ScratchBuf& s = scratch_[static_cast<size_t>(slot)];
  if (s.dev != nullptr && s.bytes >= bytes) return s.dev;
  if (s.dev != nullptr) {
    GX_TRY(sync("growing scratch"));  // kernels may still read the old buffer
    cudaFree(s.dev);
    s.dev = nullptr;
    s.bytes = 0;
  }
  const size_t grown = std::max<size_t>(bytes + bytes / 4, 4096);
  if (cudaError_t e = cudaMalloc(&s.dev, grown); e != cudaSuccess) {
    s.dev = nullptr;
    return make_error(ErrorCode::OutOfMemory, "cuda: cannot allocate " + std::to_string(grown) +
                                                  " bytes of scratch: " + cudaGetErrorString(e));
  }
  s.bytes = grown;
  return s.dev;
}

Result<void*> CudaBackend::staging(Scratch slot, size_t bytes) {
  ScratchBuf& s = scratch_[static_cast<size_t>(slot)];
  if (s.host != nullptr && s.host_bytes >= bytes) return s.host;
  GX_TRY(sync("growing staging memory"));  // copies may still read the old buffer
  if (s.host != nullptr) cudaFreeHost(s.host);
  s.host = nullptr;
  s.host_bytes = 0;
  const size_t grown = std::max<size_t>(bytes + bytes / 4, 4096);
  if (cudaError_t e = cudaHostAlloc(&s.host, grown, cudaHostAllocDefault); e != cudaSuccess) {
    s.host = nullptr;
    return make_error(ErrorCode::OutOfMemory, "cuda: cannot allocate " + std::to_string(grown) +
                                                  " bytes of pinned staging memory: " + cudaGetErrorString(e));
  }
  s.host_bytes = grown;
  return s.host;
}

Result<const float*> CudaBackend::rope_table(std::span<const int32_t> positions, const graph::RopeParams& p,
                                             const float* factors) {
  for (const RopeTable& t : rope_tables_) {
    if (t.factors == factors && t.params.n_rot == p.n_rot && t.params.freq_base == p.freq_base &&
        t.params.freq_scale == p.freq_scale && std::equal(t.positions.begin(), t.positions.end(), positions.begin(), positions.end())) {
      return static_cast<const float*>(t.dev);
    }
  }
  // The CPU op's angles (op_rope.cpp there): float recurrence theta *= base^(-2/n_rot), libm
  // cos/sin, so q and k equal the CPU's.
  const int half = p.n_rot / 2;
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  std::vector<float> cs(positions.size() * static_cast<size_t>(half) * 2);
  for (size_t t = 0; t < positions.size(); ++t) {
    float theta_base = static_cast<float>(positions[t]);
    for (int i = 0; i < half; ++i) {
      const float theta = p.freq_scale * (factors != nullptr ? theta_base / factors[i] : theta_base);
      cs[(t * static_cast<size_t>(half) + static_cast<size_t>(i)) * 2] = std::cos(theta);
      cs[(t * static_cast<size_t>(half) + static_cast<size_t>(i)) * 2 + 1] = std::sin(theta);
      theta_base *= theta_scale;
    }
  }
  constexpr size_t kTables = 4;  // q/k of local and global layers (Gemma 3) fit
  if (rope_tables_.size() < kTables) {
    rope_tables_.emplace_back();
    rope_next_ = rope_tables_.size() - 1;
  }
  RopeTable& t = rope_tables_[rope_next_];  // the oldest entry once all are in use
  rope_next_ = (rope_next_ + 1) % kTables;
  const size_t bytes = std::max<size_t>(cs.size() * sizeof(float), 16);
  if (t.bytes < bytes) {
    GX_TRY(sync("growing a rope table"));
    if (t.dev != nullptr) cudaFree(t.dev);
    t.dev = nullptr;
    t.bytes = 0;
    if (cudaError_t e = cudaMalloc(&t.dev, bytes); e != cudaSuccess) {
      t.dev = nullptr;
      t.positions.clear();
      return make_error(ErrorCode::OutOfMemory, std::string("cuda: rope table: ") + cudaGetErrorString(e));
    }
    t.bytes = bytes;
  }
  // Pageable source: cudaMemcpyAsync has copied it out when it returns.
  GX_TRY(check(cudaMemcpyAsync(t.dev, cs.data(), cs.size() * sizeof(float), cudaMemcpyHostToDevice, stream_),
               "uploading a rope table"));
  t.positions.assign(positions.begin(), positions.end());
  t.params = p;
  t.factors = factors;
  return static_cast<const float*>(t.dev);
}

// ---- execution -------------------------------------------------------------------------------

Status CudaBackend::run_node(const graph::Graph& g, int32_t id, ExecContext& ctx) {
  const graph::Node& node = g.node(id);
  const ops::OpArgs a{*this, g, node, id, ctx};
  switch (node.op) {
    case graph::Op::MatMul: return ops::matmul(a);
    case graph::Op::GetRows: return ops::get_rows(a);
    case graph::Op::RmsNorm: return ops::rms_norm(a);
    case graph::Op::Rope: return ops::rope(a);
    case graph::Op::Attention: return ops::attention(a);
    case graph::Op::Add: return ops::add(a);
    case graph::Op::SwiGlu: return ops::swiglu(a);
    case graph::Op::GeGlu: return ops::geglu(a);
    case graph::Op::Scale: return ops::scale(a);
    case graph::Op::Copy: return ops::copy(a);
    default: return make_error(ErrorCode::Internal, "cuda: node '" + node.name + "' is not a compute op");
  }
}

Status CudaBackend::compute(std::span<const int32_t> nodes, ExecContext& ctx) {
  if (!unusable_.empty()) return make_error(ErrorCode::BackendError, unusable_);
  GX_TRY(check(cudaSetDevice(info_.index), "selecting the device"));
  const graph::Graph& g = *ctx.graph;
  const auto n_nodes = static_cast<size_t>(g.size());
  std::vector<uint8_t> in_call(n_nodes, 0);
  for (const int32_t id : nodes) in_call[static_cast<size_t>(id)] = 1;
  on_device_only_.assign(n_nodes, 0);

  // 1. Upload what the host wrote: inputs of this call's nodes that live in this backend's
  // arenas and are not computed here (Input nodes, results of earlier splits). Sources in
  // other backends' memory are read by the Copy nodes the scheduler inserted.
  std::vector<uint8_t> uploaded(n_nodes, 0);
  for (const int32_t id : nodes) {
    const graph::Node& n = g.node(id);
    for (const int32_t s : n.src) {
      if (s == graph::kNoInput) continue;
      const auto si = static_cast<size_t>(s);
      const graph::Node& src = g.node(s);
      if (src.op == graph::Op::Weight || in_call[si] != 0 || uploaded[si] != 0) continue;
      const void* p = ctx.data[si];
      const Arena* a = arena_of(p);
      if (a == nullptr) {
        if (n.op == graph::Op::Copy) continue;
        return make_error(ErrorCode::Internal, "cuda: input '" + src.name + "' of '" + n.name +
                                                   "' is not in this backend's memory");
      }
      void* d = static_cast<uint8_t*>(a->dev) + (static_cast<const uint8_t*>(p) - static_cast<const uint8_t*>(a->host));
      GX_TRY(check(cudaMemcpyAsync(d, p, static_cast<size_t>(src.nbytes()), cudaMemcpyHostToDevice, stream_),
                   "uploading " + src.name));
      uploaded[si] = 1;
    }
  }

  // 2. The nodes, in order, on the stream.
  Status status = ok_status();
  for (const int32_t id : nodes) {
    status = run_node(g, id, ctx);
    if (!status) {
      const Error& e = status.error();
      status = make_error(e.code, e.message + " (node '" + g.node(id).name + "')");
      break;
    }
    on_device_only_[static_cast<size_t>(id)] = 1;
  }

  // 3. Download what is read outside this call: the graph's output and inputs of nodes that
  // later splits (other backends, or this one again) run.
  if (status) {
    std::vector<uint8_t> needed(n_nodes, 0);
    for (int32_t i = 0; i < g.size(); ++i) {
      if (in_call[static_cast<size_t>(i)] != 0) continue;
      for (const int32_t s : g.node(i).src) {
        if (s != graph::kNoInput && in_call[static_cast<size_t>(s)] != 0) needed[static_cast<size_t>(s)] = 1;
      }
    }
    if (g.output() != graph::kNoInput && in_call[static_cast<size_t>(g.output())] != 0) {
      needed[static_cast<size_t>(g.output())] = 1;
    }
    for (size_t i = 0; i < n_nodes && status; ++i) {
      if (needed[i] == 0 || on_device_only_[i] == 0) continue;
      auto d = dev(ctx, static_cast<int32_t>(i));
      if (!d) {
        status = d.error();
        break;
      }
      status = check(cudaMemcpyAsync(ctx.data[i], *d, static_cast<size_t>(g.node(static_cast<int32_t>(i)).nbytes()),
                                     cudaMemcpyDeviceToHost, stream_),
                     "downloading " + g.node(static_cast<int32_t>(i)).name);
      on_device_only_[i] = 0;
    }
  }
  // Wait whatever happened, so no copy or kernel outlives the step's buffers.
  Status done = sync("running the step");
  if (status && !done) status = std::move(done);
  return status;
}

}  // namespace geniex::backends::cuda
