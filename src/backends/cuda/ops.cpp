// CUDA ops, host side: argument resolution and kernel launches per op (kernels in *.cu).
#include "backends/cuda/ops.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "backends/cuda/attention.cuh"
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/get_rows.cuh"
#include "backends/cuda/kv_staging.hpp"
#include "backends/cuda/matmul.cuh"
#include "backends/cuda/rms_norm.cuh"
#include "backends/cuda/rope.cuh"
#include "kv/kv_cache.hpp"
#include "quant/quant.hpp"

namespace geniex::backends::cuda::ops {

namespace {

Status launched(const OpArgs& a, cudaError_t err, const char* what) {
  return a.be.check(err, std::string(what) + " launch");
}

Status cublas_status(cublasStatus_t st, const std::string& what) {
  if (st == CUBLAS_STATUS_SUCCESS) return ok_status();
  return make_error(ErrorCode::BackendError, "cuda: " + what + ": cuBLAS status " + std::to_string(static_cast<int>(st)));
}

}  // namespace

// ---- MatMul ----------------------------------------------------------------------------------
// Decode (T < kGemmMinTokens): activations are quantized on the device to the weight type's
// partner format exactly as the CPU backend does (Q8_0 / Q8_1 / Q8_K, f16 for F16 weights),
// then the matrix-vector kernel takes integer dot products: the CPU's result up to the order
// of float sums across blocks.
// Prefill: activations are quantized to the same int8 blocks, then decoded to fp16; weights
// are dequantized to fp16 (the reference's value, rounded once); cuBLAS multiplies on tensor
// cores with f32 accumulation (F32 weights: f32 GEMM without TF32; F16: f16 activations as
// the CPU's). For quantized weights the result differs from the CPU's only by the fp16
// rounding of both operands (normalized error ~1e-7, ~5e-7 for Q4_1 where the CPU rounds the
// Q8_1 block sums to fp16; the harness allows 1e-5 on this path).
Status matmul(const OpArgs& a) {
  const graph::Node& w = a.src_node(0);
  const int64_t k = w.ne[0];
  const int64_t n = w.ne[1];
  const int64_t n_tok = a.node.ne[1];
  GX_ASSIGN_OR_RETURN(void* wd, a.src(0));
  GX_ASSIGN_OR_RETURN(void* xd, a.src(1));
  GX_ASSIGN_OR_RETURN(void* od, a.dst());
  cudaStream_t s = a.be.stream();
  const auto* x = static_cast<const float*>(xd);
  auto* out = static_cast<float*>(od);

  if (n_tok < kGemmMinTokens) {
    const DType act_type = quant::vec_dot_type(w.type);
    const void* act = x;
    if (act_type != DType::F32) {
      GX_ASSIGN_OR_RETURN(void* q, a.be.scratch(CudaBackend::Scratch::Act, static_cast<size_t>(row_bytes(act_type, k) * n_tok)));
      GX_TRY(launched(a, kern::quantize_act(act_type, x, q, k, n_tok, s), "activation quantization"));
      act = q;
    }
    return launched(a, kern::mul_mv(w.type, wd, act, out, k, n, n_tok, s), "mul_mv");
  }

  auto handle = static_cast<cublasHandle_t>(a.be.cublas());
  const float alpha = 1.0f, beta = 0.0f;
  const int m_i = static_cast<int>(n), n_i = static_cast<int>(n_tok), k_i = static_cast<int>(k);
  if (n_tok > INT_MAX) return make_error(ErrorCode::Unsupported, "cuda: MatMul batch beyond cuBLAS's int range");
  if (w.type == DType::F32) {
    // out (N x T, column-major) = W^T (N x K) * X (K x T); W is K x N column-major.
    return cublas_status(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m_i, n_i, k_i, &alpha, wd, CUDA_R_32F, k_i, x,
                                      CUDA_R_32F, k_i, &beta, out, CUDA_R_32F, m_i, CUBLAS_COMPUTE_32F_PEDANTIC,
                                      CUBLAS_GEMM_DEFAULT),
                         "f32 GEMM");
  }
  GX_ASSIGN_OR_RETURN(void* xh, a.be.scratch(CudaBackend::Scratch::XHalf, static_cast<size_t>(k * n_tok) * 2));
  const DType act_type = quant::vec_dot_type(w.type);
  if (act_type == DType::F16) {
    GX_TRY(launched(a, kern::quantize_act(DType::F16, x, xh, k, n_tok, s), "f16 activations"));
  } else {
    // The CPU's int8 activations, decoded to fp16: the GEMM then differs from the CPU only by
    // the fp16 rounding of weights and activations.
    GX_ASSIGN_OR_RETURN(void* q, a.be.scratch(CudaBackend::Scratch::Act, static_cast<size_t>(row_bytes(act_type, k) * n_tok)));
    GX_TRY(launched(a, kern::quantize_act(act_type, x, q, k, n_tok, s), "activation quantization"));
    GX_TRY(launched(a, kern::dequant_to_f16(act_type, q, static_cast<uint16_t*>(xh), k, n_tok, s), "f16 activations"));
  }
  const void* wh = wd;
  if (w.type != DType::F16) {
    GX_ASSIGN_OR_RETURN(void* deq, a.be.scratch(CudaBackend::Scratch::Dequant, static_cast<size_t>(k * n) * 2));
    GX_TRY(launched(a, kern::dequant_to_f16(w.type, wd, static_cast<uint16_t*>(deq), k, n, s), "dequantization"));
    wh = deq;
  }
  return cublas_status(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m_i, n_i, k_i, &alpha, wh, CUDA_R_16F, k_i, xh,
                                    CUDA_R_16F, k_i, &beta, out, CUDA_R_32F, m_i, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT),
                       "f16 GEMM");
}

// ---- GetRows, RmsNorm, Rope ------------------------------------------------------------------

Status get_rows(const OpArgs& a) {
  const graph::Node& table = a.src_node(0);
  GX_ASSIGN_OR_RETURN(void* td, a.src(0));
  GX_ASSIGN_OR_RETURN(void* ids, a.src(1));
  GX_ASSIGN_OR_RETURN(void* od, a.dst());
  const int64_t k = table.ne[0];
  return launched(a,
                  kern::get_rows(table.type, td, static_cast<size_t>(row_bytes(table.type, k)), table.ne[1],
                                 static_cast<const int32_t*>(ids), static_cast<float*>(od), k, a.node.ne[1],
                                 a.be.stream()),
                  "get_rows");
}

Status rms_norm(const OpArgs& a) {
  const int64_t group = a.src_node(1).ne[0];
  GX_ASSIGN_OR_RETURN(void* xd, a.src(0));
  GX_ASSIGN_OR_RETURN(void* wd, a.src(1));
  GX_ASSIGN_OR_RETURN(void* yd, a.dst());
  return launched(a,
                  kern::rms_norm(static_cast<const float*>(xd), static_cast<const float*>(wd), static_cast<float*>(yd),
                                 group, a.node.n_elements() / group, a.node.eps, a.be.stream()),
                  "rms_norm");
}

Status rope(const OpArgs& a) {
  const graph::RopeParams& p = a.node.rope;
  const int64_t n_heads = a.node.ne[0] / p.head_dim;
  const int64_t n_tok = a.node.ne[1];
  GX_ASSIGN_OR_RETURN(void* xd, a.src(0));
  GX_ASSIGN_OR_RETURN(void* yd, a.dst());
  // Positions and frequency factors on the host: Input and Weight nodes are there already.
  GX_ASSIGN_OR_RETURN(const void* pos, a.be.host(a.ctx, a.node.src[1]));
  const float* factors = nullptr;
  if (a.node.src[2] != graph::kNoInput) {
    GX_ASSIGN_OR_RETURN(const void* f, a.be.host(a.ctx, a.node.src[2]));
    factors = static_cast<const float*>(f);
  }
  const std::span<const int32_t> positions(static_cast<const int32_t*>(pos), static_cast<size_t>(n_tok));
  GX_ASSIGN_OR_RETURN(const float* cs, a.be.rope_table(positions, p, factors));
  return launched(a,
                  kern::rope(static_cast<const float*>(xd), cs, static_cast<float*>(yd), p.head_dim, n_heads, n_tok,
                             p.n_rot, p.mode == graph::RopeMode::NeoX, a.be.stream()),
                  "rope");
}

// ---- Attention -------------------------------------------------------------------------------
// The KV cache is host memory (see attention.cuh): 1. the batch's K/V rows are downloaded and
// stored with KvCache::write, so the cache stays the one source of truth for every backend;
// 2. each sequence's visible blocks are copied in position order into pinned staging memory and
// uploaded with one copy for K and one for V; 3. the kernel, in token chunks that bound the
// score scratch.
Status attention(const OpArgs& a) {
  const graph::AttentionParams& p = a.node.attn;
  const StepData& step = *a.ctx.step;
  if (step.kv == nullptr) return make_error(ErrorCode::Internal, "cuda: attention without a KV cache");
  kv::KvCache& cache = *step.kv;
  const kv::KvConfig& cfg = cache.config();
  const int64_t n_tok = a.node.ne[1];
  const int64_t kv_width = int64_t{p.n_head_kv} * p.head_dim;
  if (cfg.n_head_kv != p.n_head_kv || cfg.head_dim != p.head_dim) {
    return make_error(ErrorCode::Internal, "cuda: attention shape differs from the KV cache's");
  }
  if (cfg.type != DType::F16 && cfg.type != DType::F32) {
    return make_error(ErrorCode::Unsupported, "cuda: KV cache type " + std::string(dtype_name(cfg.type)));
  }
  GX_ASSIGN_OR_RETURN(void* qd, a.src(0));
  GX_ASSIGN_OR_RETURN(void* kd, a.src(1));
  GX_ASSIGN_OR_RETURN(void* vd, a.src(2));
  GX_ASSIGN_OR_RETURN(void* od, a.dst());
  cudaStream_t s = a.be.stream();

  // 1. This batch's K/V into the cache.
  const size_t batch_bytes = static_cast<size_t>(kv_width * n_tok) * sizeof(float);
  GX_ASSIGN_OR_RETURN(void* k_host, a.be.staging(CudaBackend::Scratch::KRows, batch_bytes));
  GX_ASSIGN_OR_RETURN(void* v_host, a.be.staging(CudaBackend::Scratch::VRows, batch_bytes));
  GX_TRY(a.be.check(cudaMemcpyAsync(k_host, kd, batch_bytes, cudaMemcpyDeviceToHost, s), "attention: reading K"));
  GX_TRY(a.be.check(cudaMemcpyAsync(v_host, vd, batch_bytes, cudaMemcpyDeviceToHost, s), "attention: reading V"));
  GX_TRY(a.be.sync("attention: reading K/V"));
  for (int64_t t = 0; t < n_tok; ++t) {
    cache.write(p.layer, static_cast<int32_t>(t), static_cast<const float*>(k_host) + t * kv_width,
                static_cast<const float*>(v_host) + t * kv_width);
  }

  // 2. Visible range per token and per sequence; stage the sequences' blocks.
  const int32_t bs = cfg.block_size;
  const KvStagingPlan plan = plan_kv_staging(step.positions.first(static_cast<size_t>(n_tok)),
                                             step.seq_ids.first(static_cast<size_t>(n_tok)), p.window, bs);
  const std::vector<kern::AttnTokenInfo>& info = plan.info;
  const int32_t max_kv = plan.max_kv;
  const size_t elem = cfg.type == DType::F16 ? 2 : 4;
  const size_t row_bytes = static_cast<size_t>(kv_width) * elem;
  const size_t plane = row_bytes * static_cast<size_t>(bs);
  const size_t staged = static_cast<size_t>(plan.rows) * row_bytes;
  GX_ASSIGN_OR_RETURN(void* k_stage, a.be.staging(CudaBackend::Scratch::KRows, staged));
  GX_ASSIGN_OR_RETURN(void* v_stage, a.be.staging(CudaBackend::Scratch::VRows, staged));
  for (const StagedSeq& r : plan.seqs) {
    const std::span<const int32_t> table = cache.block_table(r.seq);
    for (int32_t start = r.lo; start < r.hi; start += bs) {
      const auto j = static_cast<size_t>(start / bs);
      if (j >= table.size()) return make_error(ErrorCode::Internal, "cuda: attention: block table too short");
      const size_t off = static_cast<size_t>(r.row0 + start) * row_bytes;
      std::memcpy(static_cast<uint8_t*>(k_stage) + off, cache.k_block(p.layer, table[j]), plane);
      std::memcpy(static_cast<uint8_t*>(v_stage) + off, cache.v_block(p.layer, table[j]), plane);
    }
  }
  GX_ASSIGN_OR_RETURN(void* k_rows, a.be.scratch(CudaBackend::Scratch::KRows, staged));
  GX_ASSIGN_OR_RETURN(void* v_rows, a.be.scratch(CudaBackend::Scratch::VRows, staged));
  GX_TRY(a.be.check(cudaMemcpyAsync(k_rows, k_stage, staged, cudaMemcpyHostToDevice, s), "attention: staging K"));
  GX_TRY(a.be.check(cudaMemcpyAsync(v_rows, v_stage, staged, cudaMemcpyHostToDevice, s), "attention: staging V"));
  GX_ASSIGN_OR_RETURN(void* info_dev, a.be.scratch(CudaBackend::Scratch::Info, info.size() * sizeof(kern::AttnTokenInfo)));
  // Pageable source: the copy has taken the bytes when cudaMemcpyAsync returns.
  GX_TRY(a.be.check(cudaMemcpyAsync(info_dev, info.data(), info.size() * sizeof(kern::AttnTokenInfo),
                                    cudaMemcpyHostToDevice, s),
                    "attention: token info"));

  // 3. The kernel, in token chunks that keep the score scratch at most 256 MiB.
  constexpr size_t kMaxScoreBytes = size_t{256} << 20;
  const size_t per_token = static_cast<size_t>(p.n_head) * static_cast<size_t>(max_kv) * sizeof(float);
  constexpr int64_t kMaxGridY = 65535;  // tokens are the grid's y dimension
  const int64_t chunk = std::max<int64_t>(
      1, std::min<int64_t>({n_tok, static_cast<int64_t>(kMaxScoreBytes / per_token), kMaxGridY}));
  GX_ASSIGN_OR_RETURN(void* scores, a.be.scratch(CudaBackend::Scratch::Scores, per_token * static_cast<size_t>(chunk)));
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    kern::AttentionArgs args{};
    args.q = static_cast<const float*>(qd);
    args.k_rows = k_rows;
    args.v_rows = v_rows;
    args.f16 = cfg.type == DType::F16;
    args.info = static_cast<const kern::AttnTokenInfo*>(info_dev);
    args.scores = static_cast<float*>(scores);
    args.max_kv = max_kv;
    args.out = static_cast<float*>(od);
    args.t0 = t0;
    args.n_tok = std::min(chunk, n_tok - t0);
    args.n_head = p.n_head;
    args.n_head_kv = p.n_head_kv;
    args.head_dim = p.head_dim;
    args.scale = p.scale;
    GX_TRY(launched(a, kern::attention(args, s), "attention"));
  }
  return ok_status();
}

// ---- element-wise and Copy -------------------------------------------------------------------

Status add(const OpArgs& a) {
  GX_ASSIGN_OR_RETURN(void* xd, a.src(0));
  GX_ASSIGN_OR_RETURN(void* yd, a.src(1));
  GX_ASSIGN_OR_RETURN(void* od, a.dst());
  return launched(a,
                  kern::add(static_cast<const float*>(xd), static_cast<const float*>(yd), static_cast<float*>(od),
                            a.node.n_elements(), a.src_node(1).n_elements(), a.be.stream()),
                  "add");
}

Status swiglu(const OpArgs& a) {
  GX_ASSIGN_OR_RETURN(void* gd, a.src(0));
  GX_ASSIGN_OR_RETURN(void* ud, a.src(1));
  GX_ASSIGN_OR_RETURN(void* od, a.dst());
  return launched(a,
                  kern::swiglu(static_cast<const float*>(gd), static_cast<const float*>(ud), static_cast<float*>(od),
                               a.node.n_elements(), a.be.stream()),
                  "swiglu");
}

Status geglu(const OpArgs& a) {
  GX_ASSIGN_OR_RETURN(void* gd, a.src(0));
  GX_ASSIGN_OR_RETURN(void* ud, a.src(1));
  GX_ASSIGN_OR_RETURN(void* od, a.dst());
  return launched(a,
                  kern::geglu(static_cast<const float*>(gd), static_cast<const float*>(ud), static_cast<float*>(od),
                              a.node.n_elements(), a.be.stream()),
                  "geglu");
}

Status scale(const OpArgs& a) {
  GX_ASSIGN_OR_RETURN(void* xd, a.src(0));
  GX_ASSIGN_OR_RETURN(void* od, a.dst());
  return launched(a,
                  kern::scale(static_cast<const float*>(xd), static_cast<float*>(od), a.node.n_elements(), a.node.scalar,
                              a.be.stream()),
                  "scale");
}

Status copy(const OpArgs& a) {
  GX_ASSIGN_OR_RETURN(void* od, a.dst());
  const auto bytes = static_cast<size_t>(a.node.nbytes());
  const int32_t src_id = a.node.src[0];
  if (auto own = a.be.dev(a.ctx, src_id)) {  // already on this device (uploaded or computed here)
    return a.be.check(cudaMemcpyAsync(od, *own, bytes, cudaMemcpyDeviceToDevice, a.be.stream()), "copy");
  }
  // Another backend's host memory: one upload (pageable: taken when the call returns).
  const void* src = a.ctx.data[static_cast<size_t>(src_id)];
  return a.be.check(cudaMemcpyAsync(od, src, bytes, cudaMemcpyHostToDevice, a.be.stream()), "copy to device");
}

}  // namespace geniex::backends::cuda::ops
