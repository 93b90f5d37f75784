// Private state behind the public Model and Session handles.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cpu/backend/weight_store.hpp"
#include "formats/gguf.hpp"
#include "geniex/geniex.hpp"
#include "kv/kv_cache.hpp"
#include "models/architecture.hpp"
#include "sched/scheduler.hpp"
#include "tokenizer/tokenizer.hpp"

namespace geniex {

// Backends chosen for a declared device, in preference order, with one note per fallback.
struct DeviceResolution {
  std::vector<std::string> notes;
  // Factories, so each Session gets backends of its own (they own thread pools and queues).
  std::vector<std::string> backend_names;
};
DeviceResolution resolve_device(Device device);
Result<std::vector<std::unique_ptr<backends::Backend>>> create_backends(
    const std::vector<std::string>& names, int32_t n_threads,
    std::shared_ptr<const backends::CpuWeightStore> cpu_weights);

// Test hook (internal, not public API): a backend that a test registers under a name of its
// own. While the registration lives, resolve_device lists it first, ahead of the declared
// device's backends (with a note), and create_backends builds it with the factory, so a
// Model built then runs its Sessions through the same code users run, with the test's
// backend in front (e.g. a static-shape test double). Several are listed in registration
// order; a name registered twice is built by the newest registration.
using BackendFactory = std::function<Result<std::unique_ptr<backends::Backend>>(int32_t n_threads)>;
class ScopedTestBackend {
 public:
  ScopedTestBackend(std::string name, BackendFactory factory);
  ~ScopedTestBackend();
  ScopedTestBackend(const ScopedTestBackend&) = delete;
  ScopedTestBackend& operator=(const ScopedTestBackend&) = delete;

 private:
  std::string name_;
};

struct Model::Impl {
  std::string path;
  gguf::File file;
  std::unique_ptr<models::Architecture> arch;
  std::shared_ptr<const tok::Tokenizer> tokenizer;  // shared with public geniex::Tokenizer handles
  std::optional<Error> tokenizer_error;  // models without a supported tokenizer can still eval
  std::optional<tok::ChatTemplate> chat_template;
  ModelInfo info;
  Device device = Device::auto_select();
  std::vector<std::string> backend_names;
  std::shared_ptr<const backends::CpuWeightStore> cpu_weights;  // packed layouts, shared
  int32_t n_threads = 1;
  int32_t n_ctx = 0;
  DType kv_type = DType::F16;  // KV cache rows
  int32_t n_batch = 512;  // most tokens per step; longer prompts are split
  // Placement: the device profile read at build (cost model) and forced GPU layers; every
  // Session's scheduler gets these (SchedulerOptions::placement).
  sched::PlaceOptions placement;
  // Execution (SchedulerOptions::row_split, ::trace): shared by every Session's scheduler.
  bool row_split = false;
  std::shared_ptr<sched::TraceRecorder> trace;

  Result<const tok::Tokenizer*> require_tokenizer() const;
};

struct Session::Impl {
  std::shared_ptr<const Model::Impl> model;
  std::vector<std::unique_ptr<backends::Backend>> backends;
  std::unique_ptr<sched::Scheduler> scheduler;
  std::unique_ptr<kv::KvCache> kv;
  std::vector<int32_t> history;  // tokens whose K/V are in the cache, in order
  std::vector<float> logits;     // last eval's logits (n_vocab * rows)
  int32_t static_tokens = 0;     // T when a backend runs only T-token steps (runtime/chunking.hpp)

  static Result<std::unique_ptr<Impl>> create(std::shared_ptr<const Model::Impl> model);
  // Runs tokens after the history; on an error the history and the KV cache are as before.
  Result<std::span<const float>> eval(std::span<const int32_t> tokens, bool all_logits);
  // Keeps the longest common prefix of history and tokens; returns how many tokens are new.
  size_t reuse_prefix(const std::vector<int32_t>& tokens);
  Result<std::string> generate_from(const std::vector<int32_t>& prompt, size_t reused,
                                    const GenerationConfig& config);
};

}  // namespace geniex
