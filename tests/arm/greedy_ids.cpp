// Greedy decoding from a prompt of token ids, without a tokenizer: the end-to-end check of the
// aarch64 build (scripts/test_aarch64.sh runs it natively and under qemu-aarch64 and compares
// the ids). Links only the dependency-free libraries (models, scheduler, CPU backend).
//
//   greedy_ids MODEL.gguf N_GEN N_THREADS ID [ID...]
//
// Prints the CPU features and the kernel ISA chosen for the model's weights, one line
// "ids: ..." with the N_GEN generated ids, and "min_margin: x" (smallest gap between the best
// and second-best logit over the steps, to tell a near-tie from a real divergence).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/backend/cpu_backend.hpp"
#include "backends/cpu/backend/weight_store.hpp"
#include "backends/cpu/kernels.hpp"
#include "core/cpu_features.hpp"
#include "formats/gguf.hpp"
#include "kv/kv_cache.hpp"
#include "models/architecture.hpp"
#include "sched/scheduler.hpp"

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "greedy_ids: error: %s\n", msg.c_str());
  return 1;
}

bool parse_int(const char* s, long lo, long hi, long* out) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace geniex;
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL.gguf N_GEN N_THREADS ID [ID...]\n", argv[0]);
    return 2;
  }
  long n_gen = 0, n_threads = 0;
  if (!parse_int(argv[2], 1, 4096, &n_gen)) return fail(std::string("bad N_GEN '") + argv[2] + "'");
  if (!parse_int(argv[3], 1, 256, &n_threads)) return fail(std::string("bad N_THREADS '") + argv[3] + "'");

  auto file = gguf::File::open(argv[1]);
  if (!file) return fail(file.error().to_string());
  auto arch = models::load_architecture(*file);
  if (!arch) return fail(arch.error().to_string());
  const models::HParams& hp = (*arch)->hparams();

  std::vector<int32_t> tokens;
  for (int i = 4; i < argc; ++i) {
    long id = 0;
    if (!parse_int(argv[i], 0, hp.n_vocab - 1, &id)) {
      return fail(std::string("token id '") + argv[i] + "' is not in [0, " + std::to_string(hp.n_vocab) + ")");
    }
    tokens.push_back(static_cast<int32_t>(id));
  }

  const std::vector<const graph::WeightRef*> weights = (*arch)->weights();
  auto store = backends::CpuWeightStore::create(weights, static_cast<int>(n_threads));
  if (!store) return fail(store.error().to_string());
  backends::CpuBackend cpu(static_cast<int>(n_threads), *store);
  sched::Scheduler scheduler({&cpu});

  kv::KvConfig kc;
  kc.n_layer = hp.n_layer;
  kc.n_head_kv = hp.n_head_kv;
  kc.head_dim = hp.head_dim;
  kc.n_ctx = static_cast<int32_t>(tokens.size() + static_cast<size_t>(n_gen) + 1);
  auto cache = kv::PagedKvCache::create(kc);
  if (!cache) return fail(cache.error().to_string());

  std::printf("cpu: %s\n", cpu_features().to_string().c_str());
  for (const DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16}) {
    const cpu::TypeKernels* k = cpu::kernels_for(t);
    std::printf("kernels %s: %s\n", std::string(dtype_name(t)).c_str(), k != nullptr ? k->isa : "none");
  }

  // The repacked layouts the weight store chose (scripts/test_aarch64.sh checks the i8mm ones).
  std::map<std::string, int> packed;
  for (const graph::WeightRef* w : weights) {
    if (const auto* p = (*store)->find(w->data)) ++packed[p->kernels->name];
  }
  std::printf("packed:");
  for (const auto& [name, count] : packed) std::printf(" %s x%d", name.c_str(), count);
  std::printf("\n");

  std::vector<int32_t> generated;
  float min_margin = 1e30f;
  int32_t pos = 0;
  while (static_cast<long>(generated.size()) < n_gen) {
    std::vector<int32_t> positions(tokens.size()), seqs(tokens.size(), 0);
    for (size_t i = 0; i < tokens.size(); ++i) positions[i] = pos + static_cast<int32_t>(i);
    const std::vector<int32_t> out_rows = {static_cast<int32_t>(tokens.size() - 1)};
    if (auto st = (*cache)->begin_batch(seqs, positions); !st) return fail(st.error().to_string());
    const graph::Graph g = (*arch)->build_graph({static_cast<int32_t>(tokens.size()), 1});
    auto plan = scheduler.plan(g);
    if (!plan) return fail(plan.error().to_string());
    backends::StepData sd{tokens, positions, seqs, out_rows, cache->get()};
    auto out = scheduler.execute(**plan, sd);
    if (!out) return fail(out.error().to_string());
    pos += static_cast<int32_t>(tokens.size());
    const float* logits = *out;
    int32_t best = 0, second = -1;
    for (int32_t v = 1; v < hp.n_vocab; ++v) {
      if (logits[v] > logits[best]) {
        second = best;
        best = v;
      } else if (second < 0 || logits[v] > logits[second]) {
        second = v;
      }
    }
    if (second >= 0 && logits[best] - logits[second] < min_margin) min_margin = logits[best] - logits[second];
    generated.push_back(best);
    tokens = {best};
  }
  std::printf("ids:");
  for (const int32_t id : generated) std::printf(" %d", id);
  std::printf("\nmin_margin: %.6f\n", static_cast<double>(min_margin));
  return 0;
}
