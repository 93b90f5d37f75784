// GenieX public C++ API: load a model, generate text, chat, inspect. Errors are values
// (Result<T>); no exception crosses this API.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "geniex/result.hpp"
#include "geniex/tokenizer.hpp"

namespace geniex {

// The compute unit a user asks for. The runtime resolves it to the backends available on
// this machine, falling back npu -> gpu -> cpu, and records why (see Model::info()).
class Device {
 public:
  enum class Kind { Cpu, Gpu, Npu, Auto };
  static Device cpu() { return Device(Kind::Cpu); }
  static Device gpu() { return Device(Kind::Gpu); }
  static Device npu() { return Device(Kind::Npu); }
  static Device auto_select() { return Device(Kind::Auto); }
  // "cpu", "gpu", "npu", "auto"; InvalidArgument otherwise.
  static Result<Device> parse(std::string_view name);

  Kind kind() const { return kind_; }
  std::string_view name() const;

 private:
  explicit Device(Kind kind) : kind_(kind) {}
  Kind kind_;
};

// Storage type of the KV cache's K and V rows. F16 (the default, as llama.cpp) halves its
// memory; F32 keeps attention in full precision (reference comparisons, long contexts where
// f16 rounding matters).
enum class KvCacheType { F16, F32 };

struct ChatMessage {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

struct GenerationStats {
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  int32_t reused_prompt_tokens = 0;  // prefix already in the session's KV cache
  double prefill_ms = 0;             // time to process the prompt
  double time_to_first_token_ms = 0; // prefill + first sampled token
  double decode_ms = 0;              // all tokens after the first
  double prefill_tokens_per_second() const;
  double decode_tokens_per_second() const;
  std::string stop_reason;           // "eos", "stop_string", "max_tokens", "cancelled", "context_full"
};

struct GenerationConfig {
  int32_t max_new_tokens = 256;
  float temperature = 0.8f;  // <= 0: greedy
  int32_t top_k = 40;        // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;
  int32_t repeat_last_n = 64;
  uint64_t seed = UINT64_MAX;  // UINT64_MAX: random
  std::vector<std::string> stop;  // stop strings (not included in the output)
  // Called with each piece of text as soon as it is complete UTF-8; return false to stop.
  std::function<bool(std::string_view piece)> on_text;
  GenerationStats* stats = nullptr;  // filled when set
};

struct ModelInfo {
  std::string path;
  std::string architecture;  // "llama"
  std::string name;
  int64_t n_params = 0;
  int64_t file_bytes = 0;
  int32_t n_vocab = 0;
  int32_t n_layer = 0;
  int32_t n_embd = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t n_ctx_train = 0;
  int32_t n_ctx = 0;          // the context this instance was built with
  int32_t n_threads = 0;
  std::string device;         // declared target
  std::vector<std::string> backends;        // backends in use, in preference order
  std::vector<std::string> device_notes;    // one line per fallback, e.g. "npu: not available ..."
  double load_ms = 0;
  // The packed-weights cache (with_packed_cache): "off", "hit" (packed weights mapped from
  // packed_cache_path), "written" (repacked into a new cache file there) or "unavailable"
  // (repacked in memory; packed_cache_note says why). packed_cache_note also says why a cache
  // file was rebuilt.
  std::string packed_cache = "off";
  std::string packed_cache_path;
  std::string packed_cache_note;
  int64_t kv_cache_bytes = 0;
  std::string kv_cache_type;  // "f16" or "f32"
  std::string profile;          // device profile the cost model uses: its path, or "built-in defaults"
  std::string profile_warning;  // why a profile file was not used (malformed...), else ""
  int32_t gpu_layers = -1;      // forced GPU layers (with_gpu_layers), -1: placed by the cost model
  // GPU memory budget (with_gpu_memory), -1: none. With a budget and a GPU backend, the split
  // chosen at build (for a step of n_batch tokens, kept by every step shape): the GPU backend,
  // its transformer layers of n_layer, whether the embedding / output head go there, and the
  // bytes it holds: weights of those units plus activations and scratch (gpu_overhead_bytes).
  int64_t gpu_memory_budget = -1;
  std::string gpu_backend;
  int32_t gpu_budget_layers = 0;
  bool gpu_budget_embedding = false;
  bool gpu_budget_output = false;
  int64_t gpu_weight_bytes = 0;
  int64_t gpu_overhead_bytes = 0;
  int64_t gpu_memory_bytes = 0;  // weights + overhead, <= the budget; 0 when nothing is on the GPU
};

// One row of the scheduler's placement (see `geniex plan`).
struct PlanRow {
  int32_t node = 0;
  std::string name;      // "blk.3.attn_q"
  std::string op;        // "matmul"
  std::string type;      // weight or output type
  std::string shape;     // "576x1"
  std::string backend;   // "cpu"
  std::string reason;    // why this backend
  int32_t layer = -1;
  double estimated_us = 0;  // cost model's time on that backend (copies: the transfer)
};

struct PlanSummary {
  int32_t n_tokens = 0;
  std::vector<PlanRow> rows;
  int32_t n_splits = 0;
  int32_t n_copies = 0;
  std::vector<std::pair<std::string, int64_t>> activation_bytes;  // per backend arena
  double planning_ms = 0;
  std::vector<std::pair<std::string, double>> estimated_us;  // per backend: its nodes' estimated time
  double estimated_copy_us = 0;  // all copies between backends
  double estimated_switch_us = 0;  // starting each split on its backend (wake-up, enqueue, sync)
  double lookup_ms = 0;          // a later step's plan from the cache (lookup by the step's shape)
  double graph_build_ms = 0;     // building the step's graph (once per shape, with planning)
};

class Model;

// A conversation or completion stream with its own KV cache. Sessions of one Model share
// the weights; a Session is used by one thread at a time.
class Session {
 public:
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  // Continues the session's text with the prompt, then generates.
  Result<std::string> generate(std::string_view prompt, const GenerationConfig& config);
  // Renders the conversation with the model's chat template (reusing the KV cache for the
  // part already seen) and generates the assistant's reply.
  Result<std::string> chat(const std::vector<ChatMessage>& messages, const GenerationConfig& config);

  // Low level: feeds tokens, returns the logits of the last one (n_vocab floats, valid until
  // the next call). all_logits: every position's logits, row after row.
  Result<std::span<const float>> eval(std::span<const int32_t> tokens, bool all_logits = false);
  int32_t n_past() const;
  void reset();  // forget everything (empty KV cache)

 private:
  friend class Model;
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Model {
 public:
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  // One-shot generation in a fresh session.
  Result<std::string> generate(std::string_view prompt, const GenerationConfig& config) const;
  Result<std::string> chat(const std::vector<ChatMessage>& messages, const GenerationConfig& config) const;
  Result<Session> new_session() const;

  Result<std::vector<int32_t>> tokenize(std::string_view text, bool add_special = true,
                                        bool parse_special = true) const;
  Result<std::string> detokenize(std::span<const int32_t> ids) const;
  // The model's tokenizer as a handle of its own (shares the vocabulary; outlives the Model).
  Result<Tokenizer> tokenizer() const;
  Result<std::string> apply_chat_template(const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt = true) const;

  const ModelInfo& info() const;
  // The scheduler's plan for a step of n_tokens tokens (1 = decode).
  Result<PlanSummary> plan(int32_t n_tokens) const;

 private:
  friend class ModelBuilder;
  friend class Session;
  struct Impl;
  explicit Model(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

class ModelBuilder {
 public:
  explicit ModelBuilder(std::string path);
  ModelBuilder& with_device(Device device);
  ModelBuilder& with_threads(int32_t n_threads);  // 0: every CPU this process may use (affinity)
  ModelBuilder& with_context(int32_t n_ctx);      // 0: min(model's trained context, 4096)
  ModelBuilder& with_kv_cache_type(KvCacheType type);  // default F16
  // Hugging Face folders only: convert the weight matrices to this type while loading ("f32",
  // "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"); "" keeps
  // them as stored (BF16 as F32). A GGUF file keeps its types (use `geniex quantize`).
  ModelBuilder& with_load_type(std::string type);
  // Mixed CPU/GPU plans: the first n transformer layers (with the embedding) run on the GPU
  // backend, the others (with the output head when n < n_layer) on the CPU; ops the GPU cannot
  // run still fall back. Applies when the device resolves to a GPU backend (gpu, auto); -1
  // (default): the cost model places every node.
  ModelBuilder& with_gpu_layers(int32_t n);
  // Mixed CPU/GPU plans under a memory budget: the GPU backend holds at most `bytes` (its
  // weights, activations and scratch; the KV cache stays in host memory); the scheduler picks
  // the transformer layers (and embedding / output head) that save the most estimated time per
  // byte, the rest run on the CPU. 0: all on the CPU; -1 (default): no budget. Excludes
  // with_gpu_layers (build() fails when both are set).
  ModelBuilder& with_gpu_memory(int64_t bytes);
  // Device profile for the cost model (see `geniex calibrate`); "" (default): $GENIEX_PROFILE,
  // else $XDG_CACHE_HOME/geniex/profile.json or ~/.cache/geniex/profile.json, else built-in rates.
  ModelBuilder& with_profile(std::string path);
  // Load balancing: a large MatMul (1024+ output rows) is split by rows between the GPU and
  // CPU backends in proportion to their speed, both halves running at once; logits are the
  // same as unsplit where the backends agree bit for bit (default off).
  ModelBuilder& with_row_split(bool on);
  // Writes a Chrome trace (chrome://tracing, Perfetto) of every step run by this Model's
  // sessions to path when the Model and its sessions are gone: one row per backend queue, an
  // event per split and copy. "" (default): off. build() fails if path cannot be written.
  ModelBuilder& with_trace(std::string path);
  // Packed-weights cache: the CPU backend's repacked weights are written once to a file in
  // `dir` (created if missing; about the size of the model's packed weights) and mapped by
  // later loads of the same file on the same kind of CPU, which then skip the repack and the
  // fresh memory it fills (ModelInfo::packed_cache says which happened). The file is checked
  // at every load (model file identity, GenieX's layouts, a checksum of every byte) and
  // rebuilt when anything differs; one file per model path is kept. A cache that cannot be
  // read or written never fails the build: the weights are repacked in memory. "" (default):
  // off.
  ModelBuilder& with_packed_cache(std::string dir);
  Result<Model> build() const;

 private:
  std::string path_;
  Device device_ = Device::auto_select();
  int32_t n_threads_ = 0;
  int32_t n_ctx_ = 0;
  KvCacheType kv_type_ = KvCacheType::F16;
  std::string load_type_;
  int32_t gpu_layers_ = -1;
  int64_t gpu_memory_ = -1;
  std::string profile_path_;
  bool row_split_ = false;
  std::string trace_path_;
  std::string packed_cache_dir_;
};

// Library version, "0.1.0".
std::string_view version();

}  // namespace geniex
