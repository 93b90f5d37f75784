// Architecture interface: hyperparameters common to every model family, the weights, and a
// graph builder per step. One file per architecture implements it; load_architecture picks
// one from the GGUF's general.architecture through an explicit list.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "formats/gguf.hpp"
#include "graph/graph.hpp"

namespace geniex::models {

struct HParams {
  std::string architecture;
  int32_t n_vocab = 0;
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t n_ff = 0;
  int32_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_scale = 1.0f;
  int32_t n_rot = 0;
  bool tied_output = false;
};

// What one step processes: n_tokens tokens, logits for n_outputs of them.
struct StepShape {
  int32_t n_tokens = 1;
  int32_t n_outputs = 1;
};

// A step's graph depends only on its shape: the key under which its plan is cached.
inline uint64_t shape_key(const StepShape& s) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(s.n_tokens)) << 32) | static_cast<uint32_t>(s.n_outputs);
}

class Architecture {
 public:
  virtual ~Architecture() = default;
  virtual const HParams& hparams() const = 0;
  // Graph of one step: inputs Tokens [n_tokens], Positions [n_tokens], OutputRows
  // [n_outputs]; output: logits f32 [n_vocab, n_outputs].
  virtual graph::Graph build_graph(const StepShape& shape) const = 0;
  // Every weight the architecture uses (for memory estimates and backends that upload).
  virtual std::vector<const graph::WeightRef*> weights() const = 0;
};

Result<std::unique_ptr<Architecture>> load_architecture(const gguf::File& file);

// Shared loader helpers: a positive count from the metadata (1 .. 2^30), or a clear error.
Result<int32_t> get_count(const gguf::File& file, const std::string& key);

// Shared loader helpers: a weight with its expected shape, or a clear error naming it.
Result<graph::WeightRef> load_weight(const gguf::File& file, const std::string& name,
                                     std::vector<int64_t> expected_ne);

}  // namespace geniex::models
