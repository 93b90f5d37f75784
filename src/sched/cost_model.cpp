// Cost model: rates of a device profile turned into microseconds per node and per copy.
#include "sched/cost_model.hpp"

#include <algorithm>
#include <cmath>

namespace geniex::sched {

using graph::Graph;
using graph::Node;
using graph::Op;

namespace {

// GB/s -> bytes per microsecond; GFLOP/s -> flops per microsecond (both x1e3).
double per_us(double giga) { return giga * 1e3; }

// Matmul rate at T tokens: decode at 1, prefill from 128 on, log-linear between.
double matmul_rate(const BackendProfile& p, DType w, int64_t tokens) {
  const double dec = p.matmul_gflops(w, Phase::Decode);
  const double pre = p.matmul_gflops(w, Phase::Prefill);
  if (tokens <= 1) return dec;
  const double f = std::min(1.0, std::log2(static_cast<double>(tokens)) / 7.0);
  return dec + (pre - dec) * f;
}

bool is_host(const BackendProfile& p) { return p.transfer_latency_us <= 0.0; }

}  // namespace

double node_cost_us(const BackendProfile& p, const Graph& g, const Node& n) {
  const double bw = per_us(p.memory_gbps);
  double us = p.launch_us;
  switch (n.op) {
    case Op::Input:
    case Op::Weight:
      return 0.0;
    case Op::MatMul: {
      const Node& w = g.node(n.src[0]);
      const double weight_bytes = static_cast<double>(row_bytes(w.type, w.ne[0]) * w.ne[1]);
      const double flops = 2.0 * static_cast<double>(w.ne[0]) * static_cast<double>(w.ne[1]) * static_cast<double>(n.ne[1]);
      us += std::max(weight_bytes / bw, flops / per_us(matmul_rate(p, w.type, n.ne[1])));
      return us;
    }
    case Op::Attention: {
      const int64_t T = n.ne[1];
      const int64_t n_kv = std::max<int64_t>(T, kAssumedKvTokens);
      const double kv_bytes = 2.0 * static_cast<double>(n_kv) * n.attn.n_head_kv * n.attn.head_dim * 2.0;  // f16 K and V
      const double flops = 4.0 * n.attn.n_head * n.attn.head_dim * static_cast<double>(T) * static_cast<double>(n_kv);
      us += std::max(kv_bytes / bw, flops / per_us(p.matmul_gflops(DType::F32, T > 1 ? Phase::Prefill : Phase::Decode)));
      if (!is_host(p)) us += kv_bytes / per_us(p.upload_gbps);
      us += 2.0 * static_cast<double>(n.nbytes()) / bw;  // q in, output out
      return us;
    }
    default: {
      double bytes = static_cast<double>(n.nbytes());
      for (int32_t s : n.src) {
        if (s != graph::kNoInput) {
          const Node& src = g.node(s);
          bytes += src.op == Op::Weight ? static_cast<double>(row_bytes(src.type, src.ne[0]) * (n.op == Op::GetRows ? n.ne[1] : 1))
                                        : static_cast<double>(src.nbytes());
        }
      }
      us += bytes / bw;
      return us;
    }
  }
}

double copy_cost_us(const BackendProfile& from, const BackendProfile& to, uint64_t bytes) {
  const auto b = static_cast<double>(bytes);
  return from.transfer_latency_us + b / per_us(from.download_gbps) + to.transfer_latency_us + b / per_us(to.upload_gbps);
}

CostModel::CostModel(std::shared_ptr<const DeviceProfile> profile, std::vector<backends::Backend*> backends)
    : profile_(std::move(profile)), backends_(std::move(backends)) {
  for (const backends::Backend* b : backends_) {
    const BackendProfile* entry = profile_ ? profile_->find(b->name()) : nullptr;
    named_.push_back(entry != nullptr);
    entries_.push_back(entry != nullptr ? *entry : default_backend_profile("cpu"));
    if (entry == nullptr) entries_.back().name = std::string(b->name());
  }
}

double CostModel::node_us(size_t backend, const Graph& g, const Node& n) const {
  if (n.op == Op::Input || n.op == Op::Weight) return 0.0;
  // A profile entry without matmul rates (transfers only) leaves node costs to the backend.
  if (named_[backend] && !entries_[backend].matmul_decode_gflops.empty()) return node_cost_us(entries_[backend], g, n);
  return backends_[backend]->estimate_us(g, n);
}

double CostModel::copy_us(size_t from, size_t to, uint64_t bytes) const {
  if (from == to) return 0.0;
  return copy_cost_us(entries_[from], entries_[to], bytes);
}

double CostModel::planned_node_us(const Graph& g, const std::vector<int32_t>& backend_of, int32_t id) const {
  const Node& n = g.node(id);
  const int32_t b = backend_of[static_cast<size_t>(id)];
  if (b < 0) return 0.0;
  if (n.op == Op::Copy) {
    const int32_t from = backend_of[static_cast<size_t>(n.src[0])];
    return from < 0 ? 0.0 : copy_us(static_cast<size_t>(from), static_cast<size_t>(b), n.nbytes());
  }
  return node_us(static_cast<size_t>(b), g, n);
}

}  // namespace geniex::sched
