// OpenClBackend: creation (shared runtime, own queue), capability answers with reasons,
// cost guesses, host-visible arenas with map/unmap hand-over, weight wrapping, and the
// compute loop that dispatches each node to its op file.
#include "backends/opencl/opencl_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "backends/opencl/ops.hpp"

namespace geniex::backends::opencl {

const char* weight_kernel_suffix(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::Q4_0: return "q4_0";
    case DType::Q4_1: return "q4_1";
    case DType::Q8_0: return "q8_0";
    case DType::Q4_K: return "q4_k";
    case DType::Q6_K: return "q6_k";
    default: return nullptr;
  }
}

// ---- arenas ----------------------------------------------------------------------------------

namespace {
// Page alignment satisfies every device's CL_DEVICE_MEM_BASE_ADDR_ALIGN for zero-copy
// (Adreno wants 4 KiB-aligned host pointers for CL_MEM_USE_HOST_PTR without a copy).
constexpr size_t kHostAlign = 4096;
}  // namespace

class ClBuffer;

struct ArenaRegistry {
  std::mutex mutex;
  std::vector<ClBuffer*> live;
};

class ClBuffer final : public Buffer {
 public:
  ClBuffer(std::shared_ptr<ClRuntime> rt, std::shared_ptr<ArenaRegistry> reg, cl_command_queue q)
      : rt_(std::move(rt)), reg_(std::move(reg)), queue_(q) {}
  ~ClBuffer() override {
    if (mem_ != nullptr) {
      if (mapped_) clEnqueueUnmapMemObject(queue_, mem_, host_, 0, nullptr, nullptr);
      clFinish(queue_);
      clReleaseMemObject(mem_);
    }
    std::free(host_);
    std::lock_guard<std::mutex> lock(reg_->mutex);
    reg_->live.erase(std::remove(reg_->live.begin(), reg_->live.end(), this), reg_->live.end());
  }
  ClBuffer(const ClBuffer&) = delete;
  ClBuffer& operator=(const ClBuffer&) = delete;

  Status init(size_t bytes) {
    size_ = bytes;
    const size_t rounded = std::max(kHostAlign, (bytes + kHostAlign - 1) / kHostAlign * kHostAlign);
    host_ = std::aligned_alloc(kHostAlign, rounded);
    if (host_ == nullptr) {
      return make_error(ErrorCode::OutOfMemory, "opencl: cannot allocate " + std::to_string(bytes) + " bytes of host memory for activations");
    }
    GX_ASSIGN_OR_RETURN(mem_, rt_->create_buffer(CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, rounded, host_, "activations"));
    rounded_ = rounded;
    GX_TRY(map());
    std::lock_guard<std::mutex> lock(reg_->mutex);
    reg_->live.push_back(this);
    return ok_status();
  }

  void* data() override { return host_; }
  size_t size() const override { return size_; }
  cl_mem mem() const { return mem_; }
  bool contains(const void* p) const {
    const auto* b = static_cast<const uint8_t*>(host_);
    const auto* q = static_cast<const uint8_t*>(p);
    return q >= b && q < b + rounded_;
  }
  uint64_t offset_of(const void* p) const {
    return static_cast<uint64_t>(static_cast<const uint8_t*>(p) - static_cast<const uint8_t*>(host_));
  }

  // Host takes the memory back (waits for the device); the pointer stays host_.
  Status map() {
    if (mapped_) return ok_status();
    cl_int err = CL_SUCCESS;
    void* p = clEnqueueMapBuffer(queue_, mem_, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, rounded_, 0, nullptr,
                                 nullptr, &err);
    if (err != CL_SUCCESS) return make_error(ErrorCode::BackendError, "opencl: cannot map activations: " + cl_error_name(err));
    if (p != host_) {
      clEnqueueUnmapMemObject(queue_, mem_, p, 0, nullptr, nullptr);
      return make_error(ErrorCode::BackendError, "opencl: the driver mapped a CL_MEM_USE_HOST_PTR buffer elsewhere");
    }
    mapped_ = true;
    return ok_status();
  }
  // The device takes the memory (host writes so far become visible to kernels).
  Status unmap() {
    if (!mapped_) return ok_status();
    const cl_int err = clEnqueueUnmapMemObject(queue_, mem_, host_, 0, nullptr, nullptr);
    if (err != CL_SUCCESS) return make_error(ErrorCode::BackendError, "opencl: cannot unmap activations: " + cl_error_name(err));
    mapped_ = false;
    return ok_status();
  }

 private:
  std::shared_ptr<ClRuntime> rt_;
  std::shared_ptr<ArenaRegistry> reg_;
  cl_command_queue queue_;
  void* host_ = nullptr;
  cl_mem mem_ = nullptr;
  size_t size_ = 0;
  size_t rounded_ = 0;
  bool mapped_ = false;
};

// ---- creation --------------------------------------------------------------------------------

Result<std::unique_ptr<OpenClBackend>> OpenClBackend::create(const Options& options) {
  Fault fault;
  if (options.fault) {
    fault = *options.fault;
  } else {
    GX_ASSIGN_OR_RETURN(fault, Fault::from_env());
  }
  std::unique_ptr<OpenClBackend> be(new OpenClBackend());
  GX_ASSIGN_OR_RETURN(be->runtime_, ClRuntime::get(fault));
  be->arenas_ = std::make_shared<ArenaRegistry>();
  const ClRuntime& rt = *be->runtime_;
  cl_int err = CL_SUCCESS;
  cl_device_id dev = rt.device();
  be->queue_ = clCreateCommandQueue(rt.context(), dev, 0, &err);
  if (err != CL_SUCCESS || be->queue_ == nullptr) {
    be->queue_ = nullptr;
    return make_error(ErrorCode::BackendError, "opencl: cannot create a command queue on " + rt.info().name + ": " +
                                                   cl_error_name(err));
  }
  if (rt.program() == nullptr) {
    be->unusable_ = rt.build_error();
    return be;
  }
  // A device that cannot allocate a small buffer runs nothing: say so once, here.
  auto probe = rt.create_buffer(CL_MEM_READ_WRITE, 4096, nullptr, "a probe buffer");
  if (!probe) {
    be->unusable_ = probe.error().message;
    return be;
  }
  clReleaseMemObject(*probe);
  return be;
}

OpenClBackend::~OpenClBackend() {
  if (queue_ != nullptr) clFinish(queue_);
  for (auto& [name, k] : kernels_) clReleaseKernel(k);
  for (auto& [ptr, m] : weights_) clReleaseMemObject(m);
  for (ScratchBuf& s : scratch_) {
    if (s.mem != nullptr) clReleaseMemObject(s.mem);
  }
  if (queue_ != nullptr) clReleaseCommandQueue(queue_);
}

// ---- capability ------------------------------------------------------------------------------

Support OpenClBackend::supports(const graph::Graph& g, const graph::Node& n) const {
  using graph::Op;
  if (!unusable_.empty()) return Support::no(unusable_);
  const ClRuntime& rt = *runtime_;
  auto need = [&](const std::string& k) -> std::optional<Support> {
    if (!rt.has_kernel(k)) return Support::no("kernel " + k + " is not in the built program");
    return std::nullopt;
  };
  auto weight_fits = [&](const graph::Node& w) -> std::optional<Support> {
    if (w.op == Op::Weight && w.weight != nullptr && w.weight->nbytes > rt.info().max_alloc) {
      return Support::no("weight " + w.weight->name + " (" + std::to_string(w.weight->nbytes) +
                         " bytes) exceeds the device's largest allocation");
    }
    return std::nullopt;
  };
  if (n.type != DType::F32 && n.op != Op::Copy) {
    return Support::no(std::string(dtype_name(n.type)) + " outputs (kernels write f32)");
  }
  switch (n.op) {
    case Op::MatMul:
    case Op::GetRows: {
      const graph::Node& w = g.node(n.src[0]);
      const char* sfx = weight_kernel_suffix(w.type);
      if (sfx == nullptr) return Support::no("no OpenCL kernel for " + std::string(dtype_name(w.type)) + " weights");
      if (n.op == Op::MatMul) {
        if (w.op != Op::Weight) return Support::no("MatMul of two activations");
        if (w.type != DType::F32 && w.type != DType::F16) {
          const char* act = (w.type == DType::Q4_1) ? "quantize_q8_1"
                            : (w.type == DType::Q4_K || w.type == DType::Q6_K) ? "quantize_q8_k" : "quantize_q8_0";
          if (auto s = need(act)) return *s;
        } else if (w.type == DType::F16) {
          if (auto s = need("quantize_f16")) return *s;
        }
        if (auto s = need(std::string("mul_mv_") + sfx)) return *s;
        if (auto s = need(std::string("mul_mm_") + sfx)) return *s;
      } else {
        if (auto s = need(std::string("get_rows_") + sfx)) return *s;
      }
      if (auto s = weight_fits(w)) return *s;
      return Support::yes();
    }
    case Op::RmsNorm:
      if (g.node(n.src[1]).type != DType::F32) return Support::no("norm weight is not f32");
      if (auto s = need("rms_norm")) return *s;
      return Support::yes();
    case Op::Rope:
      if (n.rope.n_rot % 2 != 0 || n.rope.n_rot > n.rope.head_dim) return Support::no("n_rot odd or over head_dim");
      if (n.src[2] != graph::kNoInput && g.node(n.src[2]).type != DType::F32) return Support::no("frequency factors not f32");
      if (auto s = need("rope_f32")) return *s;
      return Support::yes();
    case Op::Attention:
      if (n.attn.head_dim > 512) return Support::no("head_dim over 512 (the query is kept in local memory)");
      if (n.attn.n_head_kv <= 0 || n.attn.n_head % n.attn.n_head_kv != 0) return Support::no("n_head not a multiple of n_head_kv");
      if (auto s = need("attention_f32")) return *s;
      return Support::yes();
    case Op::Add:
      if (auto s = need("add_f32")) return *s;
      return Support::yes();
    case Op::SwiGlu:
      if (auto s = need("swiglu_f32")) return *s;
      return Support::yes();
    case Op::GeGlu:
      if (auto s = need("geglu_f32")) return *s;
      return Support::yes();
    case Op::Scale:
      if (auto s = need("scale_f32")) return *s;
      return Support::yes();
    case Op::Copy:
      return Support::yes();
    default:
      return Support::no("op " + std::string(graph::op_name(n.op)) + " is not a compute op");
  }
}

double OpenClBackend::estimate_us(const graph::Graph& g, const graph::Node& n) const {
  // The backend's own rough guess for an Adreno 7xx: 40 GB/s from memory, 300 GFLOP/s with
  // int8 dot products, 15 us per kernel launch (two for quantized MatMul), as the opencl entry
  // of sched::default_backend_profile. The scheduler's cost model uses the device profile's
  // measured rates (geniex calibrate) instead wherever the profile names "opencl".
  constexpr double kBytesPerUs = 40e3;
  constexpr double kFlopsPerUs = 300e3;
  double us = 15.0;
  if (n.op == graph::Op::MatMul) {
    const graph::Node& w = g.node(n.src[0]);
    const double weight_bytes = static_cast<double>(row_bytes(w.type, w.ne[0]) * w.ne[1]);
    const double flops = 2.0 * static_cast<double>(w.ne[0] * w.ne[1] * n.ne[1]);
    us += 15.0 + std::max(weight_bytes / kBytesPerUs, flops / kFlopsPerUs);
  } else if (n.op == graph::Op::Attention) {
    us += 3.0 * static_cast<double>(n.nbytes()) / kBytesPerUs + 50.0;  // plus the KV gather
  } else {
    us += static_cast<double>(n.nbytes()) * 3 / kBytesPerUs;
  }
  return us;
}

// ---- memory ----------------------------------------------------------------------------------

uint64_t OpenClBackend::scratch_bytes() const {
  uint64_t total = 0;
  for (const ScratchBuf& s : scratch_) total += s.bytes;
  if (!runtime_->info().unified_memory) {
    for (const auto& [ptr, m] : weights_) {
      size_t bytes = 0;
      if (clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof bytes, &bytes, nullptr) == CL_SUCCESS) total += bytes;
    }
  }
  return total;
}

Result<std::unique_ptr<Buffer>> OpenClBackend::allocate(size_t bytes) {
  auto buf = std::make_unique<ClBuffer>(runtime_, arenas_, queue_);
  GX_TRY(buf->init(bytes));
  return std::unique_ptr<Buffer>(std::move(buf));
}

Result<Mem> OpenClBackend::weight_mem(const graph::WeightRef& w) {
  auto it = weights_.find(w.data);
  if (it != weights_.end()) return Mem{it->second, 0};
  // Unified memory: the device reads the mapped file in place (no copy, no second resident
  // copy of the model). Otherwise one upload, kept for the backend's life.
  const bool in_place = runtime_->info().unified_memory;
  const cl_mem_flags flags = CL_MEM_READ_ONLY | (in_place ? CL_MEM_USE_HOST_PTR : CL_MEM_COPY_HOST_PTR);
  GX_ASSIGN_OR_RETURN(cl_mem m, runtime_->create_buffer(flags, static_cast<size_t>(w.nbytes),
                                                        const_cast<uint8_t*>(w.data), "weight " + w.name));
  weights_.emplace(w.data, m);
  return Mem{m, 0};
}

Result<Mem> OpenClBackend::mem_of(const ExecContext& ctx, int32_t node_id) {
  const graph::Node& n = ctx.graph->node(node_id);
  if (n.op == graph::Op::Weight) return weight_mem(*n.weight);
  const void* p = ctx.data[static_cast<size_t>(node_id)];
  std::lock_guard<std::mutex> lock(arenas_->mutex);
  for (ClBuffer* b : arenas_->live) {
    if (b->contains(p)) return Mem{b->mem(), b->offset_of(p)};
  }
  return make_error(ErrorCode::Internal, "opencl: tensor '" + n.name + "' is not in this backend's memory");
}

Result<cl_mem> OpenClBackend::scratch(Scratch slot, size_t bytes) {
  ScratchBuf& s = scratch_[static_cast<size_t>(slot)];
  if (s.mem != nullptr && s.bytes >= bytes) return s.mem;
  if (s.mem != nullptr) {
    clFinish(queue_);  // kernels still reading the old buffer keep it alive, but be plain
    clReleaseMemObject(s.mem);
    s = {};
  }
  const size_t grown = std::max<size_t>(bytes + bytes / 4, 4096);
  GX_ASSIGN_OR_RETURN(s.mem, runtime_->create_buffer(CL_MEM_READ_WRITE, grown, nullptr, "scratch"));
  s.bytes = grown;
  return s.mem;
}

Result<cl_kernel> OpenClBackend::kernel(const std::string& name) {
  auto it = kernels_.find(name);
  if (it != kernels_.end()) return it->second;
  if (!runtime_->has_kernel(name)) {
    return make_error(ErrorCode::BackendError, "opencl: kernel " + name + " is not in the built program");
  }
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCreateKernel(runtime_->program(), name.c_str(), &err);
  if (err != CL_SUCCESS || k == nullptr) {
    return make_error(ErrorCode::BackendError, "opencl: cannot create kernel " + name + ": " + cl_error_name(err));
  }
  kernels_.emplace(name, k);
  return k;
}

Status OpenClBackend::launch(cl_kernel k, const std::string& what, cl_uint dims, const size_t* global,
                             const size_t* local) {
  size_t g[3] = {1, 1, 1};
  for (cl_uint i = 0; i < dims; ++i) {
    g[i] = global[i];
    if (local != nullptr) g[i] = (g[i] + local[i] - 1) / local[i] * local[i];
    if (g[i] == 0) return ok_status();  // nothing to do
  }
  const cl_int err = clEnqueueNDRangeKernel(queue_, k, dims, nullptr, g, local, 0, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    return make_error(ErrorCode::BackendError, "opencl: " + what + ": launch failed: " + cl_error_name(err));
  }
  return ok_status();
}

// ---- execution -------------------------------------------------------------------------------

Status OpenClBackend::run_node(const graph::Graph& g, int32_t id, ExecContext& ctx) {
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
    default: return make_error(ErrorCode::Internal, "opencl: node '" + node.name + "' is not a compute op");
  }
}

Status OpenClBackend::compute(std::span<const int32_t> nodes, ExecContext& ctx) {
  if (!unusable_.empty()) return make_error(ErrorCode::BackendError, unusable_);
  std::vector<ClBuffer*> arenas;
  {
    std::lock_guard<std::mutex> lock(arenas_->mutex);
    arenas = arenas_->live;
  }
  Status status = ok_status();
  for (ClBuffer* b : arenas) {
    if (status) status = b->unmap();
  }
  for (const int32_t id : nodes) {
    if (!status) break;
    status = run_node(*ctx.graph, id, ctx);
    if (!status) {
      const Error& e = status.error();
      status = make_error(e.code, e.message + " (node '" + ctx.graph->node(id).name + "')");
    }
  }
  // Hand the arenas back to the host whatever happened, so the next writer finds them mapped.
  for (ClBuffer* b : arenas) {
    Status m = b->map();
    if (status && !m) status = std::move(m);
  }
  const cl_int err = clFinish(queue_);
  if (status && err != CL_SUCCESS) {
    status = make_error(ErrorCode::BackendError, "opencl: queue failed: " + cl_error_name(err));
  }
  return status;
}

}  // namespace geniex::backends::opencl
