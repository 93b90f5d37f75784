// OpenCL op implementations, one file per op family; each enqueues its kernels on the
// backend's in-order queue (no host waits except where the KV cache needs host data).
#pragma once

#include "backends/opencl/opencl_backend.hpp"

namespace geniex::backends::opencl::ops {

struct OpArgs {
  OpenClBackend& be;
  const graph::Graph& graph;
  const graph::Node& node;
  int32_t id;
  ExecContext& ctx;

  const graph::Node& src_node(int i) const { return graph.node(node.src[static_cast<size_t>(i)]); }
  Result<Mem> src(int i) const { return be.mem_of(ctx, node.src[static_cast<size_t>(i)]); }
  Result<Mem> dst() const { return be.mem_of(ctx, id); }
};

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

}  // namespace geniex::backends::opencl::ops
