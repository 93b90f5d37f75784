// MatMul on the CPU: activations are quantized once to the weight type's partner format
// (e.g. Q8_1 for Q4_1; once for consecutive matmuls of one input), then every thread runs the
// gemm kernel on its share of weight rows.
#include <algorithm>

#include "backends/cpu/backend/ops.hpp"
#include "backends/cpu/kernels.hpp"

namespace geniex::backends::cpu_ops {

void matmul(const OpArgs& a) {
  const graph::Node& w = a.src_node(0);
  const graph::Node& x = a.src_node(1);
  const cpu::TypeKernels* k = cpu::kernels_for(w.type);
  const int64_t n_in = w.ne[0];    // K
  const int64_t n_out = w.ne[1];   // N
  const int64_t n_tok = x.ne[1];   // T
  const auto* xf = static_cast<const float*>(a.src(1));
  auto* out = static_cast<float*>(a.dst());  // (T, N)

  const void* act = xf;
  size_t act_stride = static_cast<size_t>(n_in) * sizeof(float);
  if (k->act_type != DType::F32) {
    act_stride = static_cast<size_t>(row_bytes(k->act_type, n_in));
    // One token (decode): every thread quantizes it into its own part, no barrier; more: the
    // tokens are shared out, then a barrier. Skipped when the work buffer already holds this
    // input in this format (the previous matmul read the same one).
    const bool own_part = n_tok == 1;
    uint8_t* dst = own_part ? a.work + a.work_part * static_cast<size_t>(a.ith) : a.work;
    if (matmul_quantizes(a.graph, a.node, *a.act)) {
      if (own_part) {
        k->quantize_act(xf, dst, n_in);
      } else {
        int64_t t0, t1;
        ThreadPool::split_range(n_tok, a.ith, a.nth, &t0, &t1);
        for (int64_t t = t0; t < t1; ++t) {
          k->quantize_act(xf + t * n_in, a.work + static_cast<size_t>(t) * act_stride, n_in);
        }
        a.pool.barrier();
      }
      a.act->src = a.node.src[1];
      a.act->quantize = k->quantize_act;
    }
    act = dst;
  }

  // Rows in chunks of 16 so kernels see whole micro-tiles. A part of a row split computes only
  // its rows (the scheduler starts them at a multiple of 16). With several threads the chunks
  // go out in pieces taken on demand: a thread slowed down (a shared VM's other tenants, a
  // busier core) takes fewer, and the others do not wait for it at the next barrier. Decode
  // takes 16 pieces per thread (1B Q4_0 tg on a 2-vCPU VM: barrier share 5-10% -> 2-4% of the
  // samples); batches 2, since every gemm call prepares its activation terms again (at 16 that
  // was ~8% of a 64-row piece's time). Which thread computes a row does not change its bits.
  constexpr int64_t kRowAlign = 16;
  const int64_t pieces_per_thread = n_tok == 1 ? 16 : 2;
  const RowRange part = a.ctx.rows_of(static_cast<int32_t>(&a.node - a.graph.nodes().data()), n_out);
  const int64_t n_chunks = (part.end - part.begin + kRowAlign - 1) / kRowAlign;
  const size_t w_stride = static_cast<size_t>(row_bytes(w.type, n_in));
  const auto* wdata = static_cast<const uint8_t*>(a.src(0));
  auto gemm = k->gemm;
  // A packed copy keeps row r at r * w_stride for r a multiple of 8 (r0 is a multiple of 16).
  if (const CpuWeightStore::Packed* packed = a.weights ? a.weights->find(wdata) : nullptr) {
    wdata = packed->data;
    gemm = packed->kernels->gemm;
  }
  auto run = [&](int64_t c0, int64_t c1) {
    const int64_t r0 = part.begin + c0 * kRowAlign;
    const int64_t r1 = std::min(part.end, part.begin + c1 * kRowAlign);
    if (r0 < r1) {
      gemm(n_in, wdata + static_cast<size_t>(r0) * w_stride, w_stride, r1 - r0, act, act_stride, n_tok, out + r0,
           n_out);
    }
  };
  if (a.nth == 1) {
    int64_t c0, c1;
    ThreadPool::split_range(n_chunks, a.ith, a.nth, &c0, &c1);
    run(c0, c1);
    return;
  }
  // At least kMinPieceBytes of weights per piece: on small matrices (SmolLM2's 576 rows) one
  // piece per 16-row chunk made the counter's cache line and the calls cost more than they saved.
  constexpr size_t kMinPieceBytes = size_t{64} << 10;
  const int64_t min_chunks =
      static_cast<int64_t>((kMinPieceBytes + kRowAlign * w_stride - 1) / (kRowAlign * w_stride));
  const int64_t piece = std::max({int64_t{1}, min_chunks, n_chunks / (pieces_per_thread * a.nth)});
  // A count of pieces that the threads share evenly: rounded up to a multiple of the thread
  // count (a lone piece stays whole, so that consecutive small matmuls such as k and v go to
  // different threads), piece i being chunks [i n / p, (i + 1) n / p). SmolLM2's 576-row q and
  // attn_out made 3 pieces of 12 chunks, 2 : 1 between two threads; now 4 of 9.
  int64_t n_pieces = (n_chunks + piece - 1) / piece;
  if (n_pieces > 1) n_pieces = std::min(n_chunks, (n_pieces + a.nth - 1) / a.nth * a.nth);
  for (int64_t i = a.rows->next.fetch_add(1, std::memory_order_relaxed); i < n_pieces;
       i = a.rows->next.fetch_add(1, std::memory_order_relaxed)) {
    run(i * n_chunks / n_pieces, (i + 1) * n_chunks / n_pieces);
  }
}

}  // namespace geniex::backends::cpu_ops
