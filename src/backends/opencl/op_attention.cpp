// Attention on OpenCL over the host-memory paged KV cache.
//
// 1. The batch's K and V rows are read back (one read each) and stored with
//    KvCache::write, so the cache stays the single source of truth for every backend and
//    the CPU can take over any later step.
// 2. For each sequence in the batch, the cache blocks that hold visible positions are
//    gathered into two device staging buffers (one write per block plane), in order, so
//    the kernel sees each sequence's keys as contiguous rows.
// 3. One work-group per (head, token): scores, softmax, weighted V sum. Where the device
//    has cl_khr_fp64 the program holds attention_exact_f32, which reproduces the CPU
//    backend's arithmetic bit for bit (see attention.cl), and it is used; elsewhere
//    (Adreno) attention_f32, which rounds at the same points but differs in the last bits.
//
// On a unified-memory SoC the gather is a memcpy of the visible context per layer; that is
// the price of a host-resident cache. A device-resident cache would need: a KvCache
// implementation whose block pool is one cl_mem (or a few) allocated by the backend, with
// write() done by a kernel and block tables uploaded per step (paged attention indexing
// blocks in the kernel instead of gathering); copy-on-write, truncate and save/restore then
// become device copies. The KvCache interface (block_table, k_block/v_block as pointers)
// would have to expose (buffer, offset) pairs instead of host pointers.
#include <algorithm>
#include <climits>
#include <map>
#include <vector>

#include "backends/opencl/ops.hpp"
#include "kv/kv_cache.hpp"

namespace geniex::backends::opencl::ops {

namespace {
// Scores scratch per launch; longer batches are cut into several launches.
constexpr size_t kMaxScoreBytes = size_t{64} << 20;
}  // namespace

Status attention(const OpArgs& a) {
  const graph::AttentionParams& p = a.node.attn;
  const StepData& step = *a.ctx.step;
  if (step.kv == nullptr) return make_error(ErrorCode::Internal, "opencl: attention without a KV cache");
  kv::KvCache& cache = *step.kv;
  const kv::KvConfig& cfg = cache.config();
  const int64_t n_tok = a.node.ne[1];
  const int64_t kv_width = int64_t{p.n_head_kv} * p.head_dim;
  if (cfg.n_head_kv != p.n_head_kv || cfg.head_dim != p.head_dim) {
    return make_error(ErrorCode::Internal, "opencl: attention shape differs from the KV cache's");
  }
  if (cfg.type != DType::F16 && cfg.type != DType::F32) {
    return make_error(ErrorCode::Unsupported, "opencl: KV cache type " + std::string(dtype_name(cfg.type)));
  }
  GX_ASSIGN_OR_RETURN(Mem qm, a.src(0));
  GX_ASSIGN_OR_RETURN(Mem km, a.src(1));
  GX_ASSIGN_OR_RETURN(Mem vm, a.src(2));
  GX_ASSIGN_OR_RETURN(Mem om, a.dst());
  cl_command_queue q = a.be.queue();

  // 1. K/V of this batch into the cache.
  std::vector<float> k_host(static_cast<size_t>(kv_width * n_tok));
  std::vector<float> v_host(k_host.size());
  const size_t kv_bytes = k_host.size() * sizeof(float);
  cl_int err = clEnqueueReadBuffer(q, km.mem, CL_TRUE, km.offset, kv_bytes, k_host.data(), 0, nullptr, nullptr);
  if (err == CL_SUCCESS) err = clEnqueueReadBuffer(q, vm.mem, CL_TRUE, vm.offset, kv_bytes, v_host.data(), 0, nullptr, nullptr);
  if (err != CL_SUCCESS) return make_error(ErrorCode::BackendError, "opencl: attention: reading K/V: " + cl_error_name(err));
  for (int64_t t = 0; t < n_tok; ++t) {
    cache.write(p.layer, static_cast<int32_t>(t), k_host.data() + t * kv_width, v_host.data() + t * kv_width);
  }

  // 2. Visible range per token and per sequence; gather the sequences' blocks.
  const int32_t bs = cfg.block_size;
  struct SeqRange {
    int32_t lo = INT32_MAX, hi = 0;  // positions [lo, hi) are needed
    int32_t row0 = 0;                // staging row of position 0
  };
  std::map<int32_t, SeqRange> seqs;
  std::vector<cl_int4> info(static_cast<size_t>(n_tok));
  int32_t max_kv = 1;
  for (int64_t t = 0; t < n_tok; ++t) {
    const int32_t n_kv = step.positions[static_cast<size_t>(t)] + 1;
    const int32_t kv0 = p.window > 0 ? std::max(0, n_kv - p.window) : 0;
    SeqRange& r = seqs[step.seq_ids[static_cast<size_t>(t)]];
    r.lo = std::min(r.lo, kv0 / bs * bs);
    r.hi = std::max(r.hi, n_kv);
    max_kv = std::max(max_kv, n_kv);
    info[static_cast<size_t>(t)].s[1] = n_kv;
    info[static_cast<size_t>(t)].s[2] = kv0;
    info[static_cast<size_t>(t)].s[3] = 0;
  }
  int64_t rows = 0;
  for (auto& [seq, r] : seqs) {
    r.row0 = static_cast<int32_t>(rows) - r.lo;
    rows += (r.hi + bs - 1) / bs * bs - r.lo;
  }
  const size_t elem = cfg.type == DType::F16 ? 2 : 4;
  const size_t row_bytes = static_cast<size_t>(kv_width) * elem;
  const size_t plane = row_bytes * static_cast<size_t>(bs);
  GX_ASSIGN_OR_RETURN(cl_mem k_rows, a.be.scratch(OpenClBackend::Scratch::KRows, static_cast<size_t>(rows) * row_bytes));
  GX_ASSIGN_OR_RETURN(cl_mem v_rows, a.be.scratch(OpenClBackend::Scratch::VRows, static_cast<size_t>(rows) * row_bytes));
  for (const auto& [seq, r] : seqs) {
    const std::span<const int32_t> table = cache.block_table(seq);
    for (int32_t start = r.lo; start < r.hi; start += bs) {
      const auto j = static_cast<size_t>(start / bs);
      if (j >= table.size()) return make_error(ErrorCode::Internal, "opencl: attention: block table too short");
      const size_t dst = static_cast<size_t>(r.row0 + start) * row_bytes;
      // Non-blocking: the cache's blocks are not written again before this step ends
      // (the next write is the next step's, after compute() waits on the queue).
      err = clEnqueueWriteBuffer(q, k_rows, CL_FALSE, dst, plane, cache.k_block(p.layer, table[j]), 0, nullptr, nullptr);
      if (err == CL_SUCCESS) {
        err = clEnqueueWriteBuffer(q, v_rows, CL_FALSE, dst, plane, cache.v_block(p.layer, table[j]), 0, nullptr, nullptr);
      }
      if (err != CL_SUCCESS) return make_error(ErrorCode::BackendError, "opencl: attention: gathering K/V: " + cl_error_name(err));
    }
  }
  for (int64_t t = 0; t < n_tok; ++t) {
    info[static_cast<size_t>(t)].s[0] = seqs[step.seq_ids[static_cast<size_t>(t)]].row0;
  }
  GX_ASSIGN_OR_RETURN(cl_mem info_mem, a.be.scratch(OpenClBackend::Scratch::Info, info.size() * sizeof(cl_int4)));
  err = clEnqueueWriteBuffer(q, info_mem, CL_TRUE, 0, info.size() * sizeof(cl_int4), info.data(), 0, nullptr, nullptr);
  if (err != CL_SUCCESS) return make_error(ErrorCode::BackendError, "opencl: attention: token info: " + cl_error_name(err));

  // 3. The kernel, in token chunks that keep the score scratch bounded.
  const size_t per_token = static_cast<size_t>(p.n_head) * static_cast<size_t>(max_kv) * sizeof(float);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(n_tok, static_cast<int64_t>(kMaxScoreBytes / per_token)));
  GX_ASSIGN_OR_RETURN(cl_mem scores, a.be.scratch(OpenClBackend::Scratch::Scores, per_token * static_cast<size_t>(chunk)));
  const char* name = a.be.runtime().has_kernel("attention_exact_f32") ? "attention_exact_f32" : "attention_f32";
  GX_ASSIGN_OR_RETURN(cl_kernel k, a.be.kernel(name));
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t n = std::min(chunk, n_tok - t0);
    GX_TRY(set_args(k, name, qm.mem, cl_ulong{qm.offset}, k_rows, v_rows,
                    cl_int{cfg.type == DType::F16 ? 1 : 0}, info_mem, scores, cl_int{max_kv}, om.mem,
                    cl_ulong{om.offset}, static_cast<cl_int>(t0), cl_int{p.n_head}, cl_int{p.n_head_kv},
                    cl_int{p.head_dim}, cl_float{p.scale}));
    const size_t global[2] = {static_cast<size_t>(p.n_head) * 64, static_cast<size_t>(n)};
    const size_t local[2] = {64, 1};
    GX_TRY(a.be.launch(k, name, 2, global, local));
  }
  return ok_status();
}

}  // namespace geniex::backends::opencl::ops
