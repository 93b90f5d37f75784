// Op-consistency harness: runs every op x dtype x shape (odd sizes included) on each
// non-reference backend and on the CPU reference, and checks the normalized error
// sum((y - ref)^2) / sum(ref^2) against a per-op bound. `--support-matrix` prints the
// capability table instead. Backends come from the build (opencl, cuda); a backend
// without a device is skipped with a message (exit code 77 when none is left to test).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/backend/cpu_backend.hpp"
#include "core/cpu_features.hpp"
#include "kv/kv_cache.hpp"
#include "quant/quant.hpp"
#ifdef GENIEX_HAVE_OPENCL
#include "backends/opencl/opencl_backend.hpp"
#endif
#ifdef GENIEX_HAVE_CUDA
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/ops.hpp"
#endif

namespace {

using namespace geniex;
using graph::Graph;
using graph::Node;
using graph::Op;

constexpr int kSkip = 77;

// Whether attention on this backend must equal the CPU's bit for bit: OpenCL's
// attention_exact_f32 (devices with fp64) reproduces the CPU op as it runs with the AVX2+FMA
// helpers on x86-64 (both use GenieX's exp, src/core/exp.hpp); elsewhere the bound of the case applies. Head sizes
// that are not a multiple of 8 end in the CPU's scalar tails, whose FMA contraction is up to
// the compiler and optimization level (exact with GCC -O2 here, but not demanded).
bool exact_attention(const backends::Backend& be, int32_t head_dim) {
#if defined(GENIEX_HAVE_OPENCL) && defined(__x86_64__) && defined(__GLIBC__)
  if (head_dim % 8 != 0) return false;
  const auto* cl = dynamic_cast<const backends::opencl::OpenClBackend*>(&be);
  const CpuFeatures& f = cpu_features();
  return cl != nullptr && cl->runtime().has_kernel("attention_exact_f32") && f.avx2 && f.fma && f.f16c;
#else
  (void)be;
  (void)head_dim;
  return false;
#endif
}

// The bound for a case on a backend whose arithmetic differs from the CPU's by design: the
// CUDA backend's prefill MatMul on quantized weights multiplies the CPU's int8 activations and
// the weights on fp16 tensor cores (src/backends/cuda/ops.cpp), so both operands carry an fp16
// rounding: normalized error ~1e-7, ~5e-7 for Q4_1, whose CPU dot product rounds the
// activation block sums to fp16 (estimated with numpy; not yet measured on a GPU).
double backend_bound(const backends::Backend& be, Op op, DType dtype, int64_t n_tok, double bound) {
#ifdef GENIEX_HAVE_CUDA
  const bool quantized = dtype != DType::F32 && dtype != DType::F16;
  if (be.name() == "cuda" && op == Op::MatMul && quantized && n_tok >= backends::cuda::ops::kGemmMinTokens) {
    return 1e-5;
  }
#else
  (void)be;
  (void)op;
  (void)dtype;
  (void)n_tok;
#endif
  return bound;
}

// One test case: a graph whose last node is the op under test, its inputs' data, and for
// attention the steps to run (each step appends to a fresh KV cache per backend).
// One run: a graph whose output is the op under test, and its inputs' data (per node id).
// Attention cases have several runs (prefill, then decode steps) over one KV cache.
struct Run {
  Graph graph;
  std::vector<std::vector<uint8_t>> input_data;
  std::vector<int32_t> positions, seq_ids;  // attention only
};
struct Case {
  std::string name;
  Op op = Op::Add;
  DType dtype = DType::F32;
  double bound = 1e-10;
  std::vector<Run> runs = std::vector<Run>(1);
  std::deque<graph::WeightRef> weights;            // referenced by the graphs' Weight nodes
  std::deque<std::vector<uint8_t>> weight_bytes;
  kv::KvConfig kv;                                  // attention only (n_layer > 0)
  Graph& graph() { return runs.back().graph; }
};

std::mt19937& rng() {
  static std::mt19937 r(1234);
  return r;
}
std::vector<float> randn(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng());
  return v;
}
template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

int32_t add_weight(Case& c, const std::string& name, DType t, int64_t k, int64_t n, float scale = 1.0f) {
  const std::vector<float> x = randn(static_cast<size_t>(k * n), scale);
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, k) * n));
  for (int64_t r = 0; r < n; ++r) {
    quant::quantize_row_ref(t, x.data() + r * k, q.data() + static_cast<size_t>(r * row_bytes(t, k)), k);
  }
  c.weight_bytes.push_back(std::move(q));
  graph::WeightRef w;
  w.name = name;
  w.type = t;
  w.ne[0] = k;
  w.ne[1] = n;
  w.data = c.weight_bytes.back().data();
  w.nbytes = c.weight_bytes.back().size();
  c.weights.push_back(w);
  return c.graph().weight(c.weights.back());
}

int32_t add_input(Case& c, DType t, int64_t k, int64_t n, std::vector<uint8_t> data, const std::string& name) {
  Node node;
  node.op = Op::Input;
  node.type = t;
  node.ne = {k, n, 1, 1};
  node.name = name;
  const int32_t id = c.graph().add(std::move(node));
  auto& inputs = c.runs.back().input_data;
  inputs.resize(static_cast<size_t>(id) + 1);
  inputs[static_cast<size_t>(id)] = std::move(data);
  return id;
}
int32_t add_f32(Case& c, int64_t k, int64_t n, const std::string& name, float scale = 1.0f) {
  return add_input(c, DType::F32, k, n, bytes_of(randn(static_cast<size_t>(k * n), scale)), name);
}

const DType kWeightTypes[] = {DType::F32, DType::F16, DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K};

// A deque: Cases hold graphs pointing into their own weight lists, so they must never be
// copied (a vector would copy them on growth: deque's move is not noexcept).
std::deque<Case> make_cases() {
  std::deque<Case> cases;
  auto push = [&](Case c) { cases.push_back(std::move(c)); };
  // MatMul: decode (1-3 tokens, matrix-vector kernel) and prefill (tiled kernel), odd row counts.
  for (DType t : kWeightTypes) {
    const bool plain = t == DType::F32 || t == DType::F16;
    const int64_t qk = dtype_info(t).block_size;
    const int64_t k_base = qk == 256 ? 256 : 64;
    const std::vector<std::array<int64_t, 3>> shapes =
        plain ? std::vector<std::array<int64_t, 3>>{{37, 13, 1}, {100, 7, 3}, {67, 45, 19}, {256, 33, 40}}
              : std::vector<std::array<int64_t, 3>>{{k_base, 17, 1}, {2 * k_base, 33, 3}, {k_base * 3, 45, 19}, {k_base, 70, 33}, {k_base * 9, 40, 2}, {k_base * 9, 24, 9}};
    for (const auto& [k, n, tok] : shapes) {
      Case c;
      c.op = Op::MatMul;
      c.dtype = t;
      c.name = "matmul " + std::string(dtype_name(t)) + " K" + std::to_string(k) + " N" + std::to_string(n) + " T" + std::to_string(tok);
      // Same int8 activations on both sides: only float summation order differs.
      c.bound = plain ? 1e-10 : 1e-8;
      const int32_t w = add_weight(c, "w", t, k, n, 0.1f);
      const int32_t x = add_f32(c, k, tok, "x");
      c.graph().set_output(c.graph().matmul(w, x, "y", 0));
      push(std::move(c));
    }
    if (t != DType::F32) {
      // Tiny weights: fp16 scales in the subnormal range (real files have them; a device
      // that flushes fp16 subnormals to zero gets these rows wrong).
      Case c;
      c.op = Op::MatMul;
      c.dtype = t;
      c.name = "matmul " + std::string(dtype_name(t)) + " tiny weights";
      c.bound = 1e-8;
      const int64_t k = plain ? 64 : k_base * 2;
      const int32_t w = add_weight(c, "w", t, k, 21, 2e-6f);
      c.graph().set_output(c.graph().matmul(w, add_f32(c, k, 2, "x"), "y", 0));
      push(std::move(c));
    }
    // GetRows: embedding lookup.
    for (const auto& [k, n_rows, n_ids] : std::vector<std::array<int64_t, 3>>{{plain ? 37 : k_base, 11, 5}, {k_base * 2, 6, 1}}) {
      Case c;
      c.op = Op::GetRows;
      c.dtype = t;
      c.name = "get_rows " + std::string(dtype_name(t)) + " K" + std::to_string(k) + " T" + std::to_string(n_ids);
      c.bound = 0;  // decoding is exact
      const int32_t w = add_weight(c, "table", t, k, n_rows);
      std::vector<int32_t> ids;
      for (int64_t i = 0; i < n_ids; ++i) ids.push_back(static_cast<int32_t>((i * 7 + 3) % n_rows));
      const int32_t idn = add_input(c, DType::I32, n_ids, 1, bytes_of(ids), "ids");
      c.graph().set_output(c.graph().get_rows(w, idn, "rows"));
      push(std::move(c));
    }
  }
  // RmsNorm: whole rows and per-head groups.
  for (const auto& [k, tok, group] : std::vector<std::array<int64_t, 3>>{{37, 3, 37}, {128, 5, 32}, {576, 2, 576}, {1000, 1, 1000}}) {
    Case c;
    c.op = Op::RmsNorm;
    c.name = "rms_norm K" + std::to_string(k) + " G" + std::to_string(group) + " T" + std::to_string(tok);
    c.bound = 1e-11;
    const int32_t x = add_f32(c, k, tok, "x");
    const int32_t w = add_weight(c, "norm", DType::F32, group, 1);
    c.graph().set_output(c.graph().rms_norm(x, w, 1e-6f, "y", 0));
    push(std::move(c));
  }
  // Element-wise.
  for (const auto& [k, tok] : std::vector<std::array<int64_t, 2>>{{37, 5}, {1000, 3}}) {
    const std::string shape = " " + std::to_string(k) + "x" + std::to_string(tok);
    for (int which = 0; which < 5; ++which) {
      Case c;
      c.bound = 1e-11;
      const int32_t a = add_f32(c, k, tok, "a", 2.0f);
      if (which == 0) {
        c.op = Op::Add;
        c.name = "add" + shape;
        c.graph().set_output(c.graph().add(a, add_f32(c, k, tok, "b"), "y", 0));
      } else if (which == 1) {
        c.op = Op::Add;
        c.name = "add bias row" + shape;
        c.graph().set_output(c.graph().add(a, add_weight(c, "bias", DType::F32, k, 1), "y", 0));
      } else if (which == 2) {
        c.op = Op::SwiGlu;
        c.name = "swiglu" + shape;
        c.graph().set_output(c.graph().swiglu(a, add_f32(c, k, tok, "u"), "y", 0));
      } else if (which == 3) {
        c.op = Op::GeGlu;
        c.name = "geglu" + shape;
        c.graph().set_output(c.graph().geglu(a, add_f32(c, k, tok, "u"), "y", 0));
      } else {
        c.op = Op::Scale;
        c.name = "scale" + shape;
        c.graph().set_output(c.graph().scale(a, 0.37f, "y", 0));
      }
      push(std::move(c));
    }
  }
  // Rope: normal and NeoX, partial rotation, frequency factors, positions far apart.
  for (int mode = 0; mode < 2; ++mode) {
    for (const auto& [head_dim, n_rot, n_head, factors] :
         std::vector<std::array<int, 4>>{{64, 64, 3, 0}, {32, 16, 2, 0}, {64, 64, 2, 1}, {128, 128, 1, 0}}) {
      Case c;
      c.op = Op::Rope;
      c.bound = 1e-10;
      c.name = std::string("rope ") + (mode == 0 ? "normal" : "neox") + " hd" + std::to_string(head_dim) + " rot" +
               std::to_string(n_rot) + (factors ? " factors" : "");
      const int tok = 5;
      const int32_t x = add_f32(c, int64_t{head_dim} * n_head, tok, "x");
      const std::vector<int32_t> pos = {0, 1, 17, 300, 4000};
      const int32_t p = add_input(c, DType::I32, tok, 1, bytes_of(pos), "pos");
      graph::RopeParams rp;
      rp.n_rot = n_rot;
      rp.head_dim = head_dim;
      rp.mode = mode == 0 ? graph::RopeMode::Normal : graph::RopeMode::NeoX;
      rp.freq_base = 10000.0f;
      int32_t f = graph::kNoInput;
      if (factors) {
        std::vector<float> fv(static_cast<size_t>(n_rot / 2));
        for (size_t i = 0; i < fv.size(); ++i) fv[i] = 1.0f + static_cast<float>(i % 5);
        c.weight_bytes.push_back(bytes_of(fv));
        graph::WeightRef w;
        w.name = "rope_freqs";
        w.type = DType::F32;
        w.ne[0] = n_rot / 2;
        w.data = c.weight_bytes.back().data();
        w.nbytes = c.weight_bytes.back().size();
        c.weights.push_back(w);
        f = c.graph().weight(c.weights.back());
      }
      c.graph().set_output(c.graph().rope(x, p, rp, "y", 0, f));
      push(std::move(c));
    }
  }
  // Attention: GQA, MQA, sliding window, f16 and f32 caches, a prefill then decode steps,
  // a batch holding two sequences, and head sizes that leave a block of 8 or a tail of 4
  // after the CPU dot product's blocks of 16 (40, 12, 20).
  struct AttCase {
    int n_head, n_head_kv, head_dim, window;
    DType kv;
    bool two_seqs;
  };
  for (const AttCase& ac : {AttCase{4, 2, 32, 0, DType::F16, false}, AttCase{3, 1, 64, 0, DType::F32, false},
                            AttCase{4, 4, 16, 5, DType::F16, false}, AttCase{6, 2, 64, 0, DType::F16, true},
                            AttCase{2, 1, 256, 7, DType::F32, true}, AttCase{2, 1, 40, 0, DType::F16, false},
                            AttCase{3, 3, 12, 0, DType::F32, false}, AttCase{2, 2, 20, 0, DType::F16, false}}) {
    Case c;
    c.op = Op::Attention;
    c.dtype = ac.kv;
    c.bound = 1e-9;
    c.name = "attention h" + std::to_string(ac.n_head) + "/" + std::to_string(ac.n_head_kv) + " hd" +
             std::to_string(ac.head_dim) + (ac.window ? " window" + std::to_string(ac.window) : "") + " kv " +
             std::string(dtype_name(ac.kv)) + (ac.two_seqs ? " 2 seqs" : "");
    c.kv.n_layer = 1;
    c.kv.n_head_kv = ac.n_head_kv;
    c.kv.head_dim = ac.head_dim;
    c.kv.n_ctx = 128;
    c.kv.n_seq_max = 2;
    c.kv.type = ac.kv;
    graph::AttentionParams p;
    p.n_head = ac.n_head;
    p.n_head_kv = ac.n_head_kv;
    p.head_dim = ac.head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(ac.head_dim));
    p.window = ac.window;
    // Runs: 37 prompt tokens (two sequences: 20 + 17), then 2 decode steps.
    c.runs.clear();
    for (int s = 0; s < 3; ++s) {
      c.runs.emplace_back();
      Run& r = c.runs.back();
      if (s == 0) {
        for (int i = 0; i < 37; ++i) {
          const bool second = ac.two_seqs && i >= 20;
          r.seq_ids.push_back(second ? 1 : 0);
          r.positions.push_back(second ? i - 20 : i);
        }
      } else {
        r.seq_ids.push_back(0);
        r.positions.push_back((ac.two_seqs ? 20 : 37) + s - 1);
        if (ac.two_seqs) {
          r.seq_ids.push_back(1);
          r.positions.push_back(17 + s - 1);
        }
      }
      const auto tok = static_cast<int64_t>(r.positions.size());
      const int32_t q = add_f32(c, int64_t{p.n_head} * p.head_dim, tok, "q");
      const int32_t k = add_f32(c, int64_t{p.n_head_kv} * p.head_dim, tok, "k");
      const int32_t v = add_f32(c, int64_t{p.n_head_kv} * p.head_dim, tok, "v");
      c.graph().set_output(c.graph().attention(q, k, v, p, "attn"));
    }
    push(std::move(c));
  }
  return cases;
}

struct Output {
  std::vector<float> values;  // every run's output, concatenated
  std::string error;
};

Output run_case(backends::Backend& be, Case& c) {
  Output out;
  std::unique_ptr<kv::KvCache> cache;
  if (c.kv.n_layer > 0) {
    auto made = kv::PagedKvCache::create(c.kv);
    if (!made) return {{}, made.error().to_string()};
    cache = std::move(made).value();
  }
  for (Run& r : c.runs) {
    const Graph& g = r.graph;
    std::vector<int64_t> offset(static_cast<size_t>(g.size()), -1);
    int64_t total = 0;
    for (int32_t i = 0; i < g.size(); ++i) {
      if (g.node(i).op == Op::Weight) continue;
      offset[static_cast<size_t>(i)] = total;
      total += (static_cast<int64_t>(g.node(i).nbytes()) + 63) / 64 * 64;
    }
    auto arena = be.allocate(static_cast<size_t>(total));
    if (!arena) return {{}, arena.error().to_string()};
    auto* base = static_cast<uint8_t*>((*arena)->data());
    backends::ExecContext ctx;
    ctx.graph = &g;
    ctx.data.assign(static_cast<size_t>(g.size()), nullptr);
    std::vector<int32_t> compute;
    for (int32_t i = 0; i < g.size(); ++i) {
      const Node& n = g.node(i);
      const auto si = static_cast<size_t>(i);
      if (n.op == Op::Weight) {
        ctx.data[si] = const_cast<uint8_t*>(n.weight->data);
        continue;
      }
      ctx.data[si] = base + offset[si];
      if (n.op == Op::Input) {
        std::memcpy(ctx.data[si], r.input_data[si].data(), r.input_data[si].size());
      } else {
        // Poison: an element the kernel does not write shows up as NaN.
        auto* f = static_cast<float*>(ctx.data[si]);
        for (int64_t j = 0; j < n.n_elements(); ++j) f[j] = std::nanf("");
        compute.push_back(i);
      }
    }
    backends::StepData step;
    step.positions = r.positions;
    step.seq_ids = r.seq_ids;
    step.kv = cache.get();
    if (cache) {
      if (Status s = cache->begin_batch(r.seq_ids, r.positions); !s) return {{}, s.error().to_string()};
    }
    ctx.step = &step;
    if (Status s = be.compute(compute, ctx); !s) return {{}, s.error().to_string()};
    const auto* y = static_cast<const float*>(ctx.data[static_cast<size_t>(g.output())]);
    out.values.insert(out.values.end(), y, y + g.node(g.output()).n_elements());
  }
  return out;
}

// sum((y - ref)^2) / sum(ref^2); infinity when y has a non-finite value where ref has not.
double nmse(const std::vector<float>& y, const std::vector<float>& ref) {
  if (y.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(y[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  return den > 0 ? num / den : num;
}

struct Named {
  std::string name;
  std::unique_ptr<backends::Backend> backend;
};

// Rows of the capability table: one per (op, dtype) from the cases, plus weight types
// without OpenCL kernels so their refusals show.
void print_support_matrix(std::deque<Case>& cases, const std::vector<backends::Backend*>& all) {
  std::printf("%-10s %-6s %-14s", "op", "dtype", "shape");
  for (auto* b : all) std::printf(" | %-40s", std::string(b->name()).c_str());
  std::printf("\n");
  std::vector<std::string> seen;
  auto row = [&](const Graph& g, const Node& n, DType t) {
    const std::string key = std::string(graph::op_name(n.op)) + std::string(dtype_name(t));
    for (const auto& s : seen) if (s == key) return;
    seen.push_back(key);
    std::printf("%-10s %-6s %-14s", std::string(graph::op_name(n.op)).c_str(), std::string(dtype_name(t)).c_str(),
                graph::shape_string(n).c_str());
    for (auto* b : all) {
      const backends::Support s = b->supports(g, n);
      std::printf(" | %-40s", s.ok ? "yes" : ("no: " + s.reason).c_str());
    }
    std::printf("\n");
  };
  for (Case& c : cases) {
    const Graph& g = c.runs.front().graph;
    row(g, g.node(g.output()), c.dtype);
  }
  for (DType t : {DType::BF16, DType::Q5_0, DType::Q5_1, DType::Q5_K}) {
    Case c;
    const int32_t w = add_weight(c, "w", t, 256, 4);
    const int32_t x = add_f32(c, 256, 1, "x");
    const int32_t y = c.graph().matmul(w, x, "y", 0);
    row(c.graph(), c.graph().node(y), t);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool matrix = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--support-matrix") {
      matrix = true;
    } else if (a == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--support-matrix] [--filter SUBSTRING]\n", argv[0]);
      return 2;
    }
  }
  backends::CpuBackend cpu(2);
  std::vector<Named> tested;
#ifdef GENIEX_HAVE_OPENCL
  {
    auto cl = backends::opencl::OpenClBackend::create();
    if (!cl) {
      std::printf("SKIP opencl: %s\n", cl.error().to_string().c_str());
    } else {
      const auto& info = (*cl)->device_info();
      std::printf("opencl: %s (%s), unified memory %s%s\n", info.name.c_str(), info.platform.c_str(),
                  info.unified_memory ? "yes" : "no",
                  (*cl)->unusable_reason().empty() ? "" : (", unusable: " + (*cl)->unusable_reason()).c_str());
      tested.push_back({"opencl", std::move(cl).value()});
    }
  }
#else
  std::printf("SKIP opencl: built without OpenCL (GENIEX_OPENCL=OFF)\n");
#endif
#ifdef GENIEX_HAVE_CUDA
  {
    auto cu = backends::cuda::CudaBackend::create();
    if (!cu) {
      std::printf("SKIP cuda: %s\n", cu.error().to_string().c_str());
    } else {
      const auto& info = (*cu)->device_info();
      std::printf("cuda: %s (compute capability %d.%d)%s\n", info.name.c_str(), info.cc_major, info.cc_minor,
                  (*cu)->unusable_reason().empty() ? "" : (", unusable: " + (*cu)->unusable_reason()).c_str());
      tested.push_back({"cuda", std::move(cu).value()});
    }
  }
#else
  std::printf("SKIP cuda: built without CUDA (GENIEX_CUDA=OFF or no nvcc)\n");
#endif
  std::deque<Case> cases = make_cases();
  if (matrix) {
    std::vector<backends::Backend*> all{&cpu};
    for (auto& t : tested) all.push_back(t.backend.get());
    print_support_matrix(cases, all);
    return 0;
  }
  if (tested.empty()) {
    std::printf("SKIP: no backend besides the cpu reference is available\n");
    return kSkip;
  }
  int failures = 0, run = 0;
  for (Named& t : tested) {
    for (Case& c : cases) {
      if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
      const Graph& g = c.runs.front().graph;
      const backends::Support s = t.backend->supports(g, g.node(g.output()));
      if (!s.ok) {
        std::printf("%-8s %-52s unsupported: %s\n", t.name.c_str(), c.name.c_str(), s.reason.c_str());
        continue;
      }
      ++run;
      const Output ref = run_case(cpu, c);
      const Output got = run_case(*t.backend, c);
      if (!ref.error.empty() || !got.error.empty()) {
        std::printf("%-8s %-52s FAIL: %s\n", t.name.c_str(), c.name.c_str(),
                    (ref.error.empty() ? got.error : "cpu: " + ref.error).c_str());
        ++failures;
        continue;
      }
      const double e = nmse(got.values, ref.values);
      const double bound = c.op == Op::Attention && exact_attention(*t.backend, c.kv.head_dim)
                               ? 0.0
                               : backend_bound(*t.backend, c.op, c.dtype, g.node(g.output()).ne[1], c.bound);
      const bool ok = e <= bound;
      std::printf("%-8s %-52s nmse %.3e (bound %.0e) %s\n", t.name.c_str(), c.name.c_str(), e, bound,
                  ok ? "ok" : "FAIL");
      failures += ok ? 0 : 1;
    }
  }
  std::printf("%d cases, %d failures\n", run, failures);
  return failures == 0 ? 0 : 1;
}
