// CUDA op implementations (host side): each resolves its tensors' device addresses, prepares
// what the kernels need (activation formats, rope tables, staged KV rows) and launches the
// kernels of its *.cu file on the backend's stream.
#pragma once

#include "backends/cuda/cuda_backend.hpp"

namespace geniex::backends::cuda::ops {

struct OpArgs {
  CudaBackend& be;
  const graph::Graph& graph;
  const graph::Node& node;
  int32_t id;
  ExecContext& ctx;

  const graph::Node& src_node(int i) const { return graph.node(node.src[static_cast<size_t>(i)]); }
  Result<void*> src(int i) const { return be.dev(ctx, node.src[static_cast<size_t>(i)]); }
  Result<void*> dst() const { return be.dev(ctx, id); }
};

// Below this many tokens MatMul runs the matrix-vector kernel (exact int8 dot products as the
// CPU's); from it on, the fp16 tensor-core GEMM of cuBLAS.
constexpr int64_t kGemmMinTokens = 8;

Status matmul(const OpArgs& a);
Status get_rows(const OpArgs& a);
Status rms_norm(const OpArgs& a);
Status rope(const OpArgs& a);
Status attention(const OpArgs& a);
Status add(const OpArgs& a);
Status swiglu(const OpArgs& a);
Status geglu(const OpArgs& a);
Status scale(const OpArgs& a);
Status copy(const OpArgs& a);

}  // namespace geniex::backends::cuda::ops
