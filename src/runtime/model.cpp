// ModelBuilder and Model: load a GGUF file into an immutable, shareable model; one-shot
// generation helpers; plans for inspection.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "convert/hf_import.hpp"
#include "runtime/impl.hpp"
#include "runtime/packed_cache.hpp"
#include "sched/cost_model.hpp"
#include "sched/profile.hpp"

namespace geniex {

std::string_view version() { return "0.1.0"; }

double GenerationStats::prefill_tokens_per_second() const {
  const int32_t n = prompt_tokens - reused_prompt_tokens;
  return prefill_ms > 0 ? n * 1000.0 / prefill_ms : 0.0;
}

double GenerationStats::decode_tokens_per_second() const {
  return decode_ms > 0 && generated_tokens > 1 ? (generated_tokens - 1) * 1000.0 / decode_ms : 0.0;
}

namespace {
// CPUs this process may run on (taskset, container cpusets), not all CPUs of the machine:
// more threads than that only wait at barriers for each other.
int32_t usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
}
}  // namespace

Result<const tok::Tokenizer*> Model::Impl::require_tokenizer() const {
  if (tokenizer) return tokenizer.get();
  return tokenizer_error.value_or(make_error(ErrorCode::Internal, "tokenizer missing"));
}

ModelBuilder::ModelBuilder(std::string path) : path_(std::move(path)) {}
ModelBuilder& ModelBuilder::with_device(Device device) {
  device_ = device;
  return *this;
}
ModelBuilder& ModelBuilder::with_threads(int32_t n_threads) {
  n_threads_ = n_threads;
  return *this;
}
ModelBuilder& ModelBuilder::with_context(int32_t n_ctx) {
  n_ctx_ = n_ctx;
  return *this;
}
ModelBuilder& ModelBuilder::with_load_type(std::string type) {
  load_type_ = std::move(type);
  return *this;
}
ModelBuilder& ModelBuilder::with_kv_cache_type(KvCacheType type) {
  kv_type_ = type;
  return *this;
}
ModelBuilder& ModelBuilder::with_gpu_layers(int32_t n) {
  gpu_layers_ = n;
  return *this;
}
ModelBuilder& ModelBuilder::with_gpu_memory(int64_t bytes) {
  gpu_memory_ = bytes;
  return *this;
}
ModelBuilder& ModelBuilder::with_row_split(bool on) {
  row_split_ = on;
  return *this;
}
ModelBuilder& ModelBuilder::with_trace(std::string path) {
  trace_path_ = std::move(path);
  return *this;
}
ModelBuilder& ModelBuilder::with_packed_cache(std::string dir) {
  packed_cache_dir_ = std::move(dir);
  return *this;
}
ModelBuilder& ModelBuilder::with_profile(std::string path) {
  profile_path_ = std::move(path);
  return *this;
}

namespace {
// The device profile for the cost model: the given file, else the default location; a file
// that cannot be used gives a warning and the built-in rates, never a failed build.
sched::LoadedProfile read_profile(const std::string& path) {
  if (path.empty()) return sched::load_profile_or_defaults();
  sched::LoadedProfile out;
  auto loaded = sched::load_profile(path);
  if (loaded) {
    out.profile = std::move(loaded).value();
  } else {
    out.profile = sched::default_profile();
    out.warning = loaded.error().message + "; using built-in defaults";
  }
  return out;
}
}  // namespace

Result<Model> ModelBuilder::build() const {
  // A lambda inside the friend's member can reach Model's private constructor.
  auto build_model = [](const std::string& path, Device device, int32_t n_threads,
                        int32_t n_ctx, KvCacheType kv_type, const std::string& load_type,
                        int32_t gpu_layers, int64_t gpu_memory, const std::string& profile_path,
                        const std::string& packed_cache_dir) -> Result<Model> {
  const auto t0 = std::chrono::steady_clock::now();
  if (n_threads < 0) return make_error(ErrorCode::InvalidArgument, "threads must be >= 0");
  if (gpu_layers < -1) return make_error(ErrorCode::InvalidArgument, "gpu layers must be >= 0 (or -1: cost model)");
  if (n_ctx < 0) return make_error(ErrorCode::InvalidArgument, "context size must be >= 0");
  if (gpu_memory < -1) return make_error(ErrorCode::InvalidArgument, "gpu memory must be >= 0 bytes (or -1: no budget)");
  if (gpu_memory >= 0 && gpu_layers >= 0) {
    return make_error(ErrorCode::InvalidArgument,
                      "a gpu memory budget and forced gpu layers exclude each other (set one of them)");
  }
  auto impl = std::make_shared<Model::Impl>();
  impl->path = path;
  impl->kv_type = kv_type == KvCacheType::F32 ? DType::F32 : DType::F16;
  if (convert::is_hf_folder(path)) {
    // A Hugging Face folder: imported to an in-memory GGUF (weights as stored, BF16 as F32, or
    // converted to the load type).
    convert::ImportOptions import;
    if (!load_type.empty()) {
      GX_ASSIGN_OR_RETURN(import.type, convert::parse_output_type(load_type));
    }
    GX_ASSIGN_OR_RETURN(impl->file, convert::load_hf_as_gguf(path, import));
  } else {
    if (!load_type.empty()) {
      return make_error(ErrorCode::InvalidArgument,
                        "a load type ('" + load_type + "') applies to Hugging Face folders; '" + path +
                            "' is a GGUF file (geniex quantize rewrites it in another type)");
    }
    GX_ASSIGN_OR_RETURN(impl->file, gguf::File::open(path));
  }
  GX_ASSIGN_OR_RETURN(impl->arch, models::load_architecture(impl->file));
  const models::HParams& hp = impl->arch->hparams();

  auto tokenizer = tok::Tokenizer::from_gguf(impl->file);
  if (tokenizer) {
    impl->tokenizer = std::move(tokenizer).value();
    if (impl->tokenizer->n_vocab() != hp.n_vocab) {
      return make_error(ErrorCode::InvalidFormat,
                        "tokenizer has " + std::to_string(impl->tokenizer->n_vocab()) +
                            " tokens but token_embd.weight has " + std::to_string(hp.n_vocab) + " rows");
    }
    const std::string& tmpl = impl->tokenizer->chat_template();
    if (!tmpl.empty()) {
      auto parsed = tok::ChatTemplate::parse(tmpl);
      if (!parsed) {
        return make_error(parsed.error().code, "chat template: " + parsed.error().message);
      }
      impl->chat_template = std::move(parsed).value();
    }
  } else {
    impl->tokenizer_error = tokenizer.error();
  }

  impl->n_threads = n_threads > 0 ? n_threads : usable_cpus();
  impl->n_ctx = n_ctx > 0 ? n_ctx : std::min(hp.n_ctx_train, 4096);
  impl->device = device;
  DeviceResolution res = resolve_device(device);
  impl->backend_names = res.backend_names;
  {
    const std::vector<const graph::WeightRef*> weights = impl->arch->weights();
    // A Hugging Face folder is imported into memory: no file to key a packed-weights cache.
    const std::string source = convert::is_hf_folder(path) ? std::string() : path;
    GX_ASSIGN_OR_RETURN(runtime::PackedLoad packed,
                        runtime::load_packed_weights(weights, impl->n_threads, source, packed_cache_dir));
    impl->cpu_weights = std::move(packed.store);
    impl->info.packed_cache = std::move(packed.status);
    impl->info.packed_cache_path = std::move(packed.path);
    impl->info.packed_cache_note = std::move(packed.note);
  }

  ModelInfo& info = impl->info;
  info.path = path;
  info.architecture = hp.architecture;
  if (auto name = impl->file.get_string("general.name")) info.name = *name;
  info.file_bytes = static_cast<int64_t>(impl->file.mapping()->size());
  for (const graph::WeightRef* w : impl->arch->weights()) {
    info.n_params += w->ne[0] * w->ne[1] * w->ne[2] * w->ne[3];
  }
  info.n_vocab = hp.n_vocab;
  info.n_layer = hp.n_layer;
  info.n_embd = hp.n_embd;
  info.n_head = hp.n_head;
  info.n_head_kv = hp.n_head_kv;
  info.n_ctx_train = hp.n_ctx_train;
  info.n_ctx = impl->n_ctx;
  info.n_threads = impl->n_threads;
  info.device = std::string(device.name());
  info.backends = res.backend_names;
  info.device_notes = res.notes;
  if (impl->n_ctx > hp.n_ctx_train) {
    info.device_notes.push_back("context " + std::to_string(impl->n_ctx) +
                                " exceeds the trained context " + std::to_string(hp.n_ctx_train));
  }
  const int64_t kv_elem = impl->kv_type == DType::F32 ? 4 : 2;
  info.kv_cache_bytes = int64_t{2} * hp.n_layer * impl->n_ctx * hp.n_head_kv * hp.head_dim * kv_elem;
  info.kv_cache_type = impl->kv_type == DType::F32 ? "f32" : "f16";

  // Placement: the profile's rates for the cost model; forced layers when a GPU backend is in use.
  sched::LoadedProfile profile = read_profile(profile_path);
  info.profile = profile.profile.source;
  info.profile_warning = profile.warning;
  impl->placement.profile = std::make_shared<const sched::DeviceProfile>(std::move(profile.profile));
  if (gpu_layers >= 0) {
    const bool has_gpu = std::any_of(impl->backend_names.begin(), impl->backend_names.end(),
                                     [](const std::string& b) { return b != "cpu"; });
    if (has_gpu) {
      impl->placement.gpu_layers = gpu_layers;
      info.gpu_layers = gpu_layers;
    } else {
      info.device_notes.push_back("gpu layers: no GPU backend in use; all " + std::to_string(hp.n_layer) +
                                  " layers run on the cpu");
    }
  }
  if (gpu_memory >= 0) {
    info.gpu_memory_budget = gpu_memory;
    const bool has_gpu = std::any_of(impl->backend_names.begin(), impl->backend_names.end(),
                                     [](const std::string& b) { return b != "cpu"; });
    if (!has_gpu) {
      info.device_notes.push_back("gpu memory budget: no GPU backend in use; all " + std::to_string(hp.n_layer) +
                                  " layers run on the cpu");
    } else {
      // Chosen once, for the largest step (n_batch tokens: the most activations), with the
      // attention scratch for the whole context; every Session and step shape keeps it.
      impl->placement.gpu_memory_bytes = gpu_memory;
      const graph::Graph g = impl->arch->build_graph({impl->n_batch, 1});
      impl->placement.gpu_overhead_bytes = sched::estimate_gpu_overhead_bytes(g, impl->n_ctx, kv_elem);
      impl->placement.budget_memo = std::make_shared<sched::GpuBudgetMemo>();
      GX_ASSIGN_OR_RETURN(auto backends, create_backends(impl->backend_names, 1, impl->cpu_weights));
      std::vector<backends::Backend*> ptrs;
      for (auto& b : backends) ptrs.push_back(b.get());
      sched::Placement placed;
      GX_TRY(sched::place(g, ptrs, impl->placement, placed));
      for (const backends::Backend* b : ptrs) {
        if (b->kind() != backends::DeviceKind::Cpu) {
          info.gpu_backend = std::string(b->name());
          break;
        }
      }
      if (placed.budget) {
        const sched::GpuBudgetChoice& c = *placed.budget;
        info.gpu_budget_layers = c.n_layers_gpu;
        for (const sched::GpuUnit& u : c.units) {
          if (u.key == sched::kEmbeddingUnit) info.gpu_budget_embedding = u.on_gpu;
          if (u.key == sched::kOutputUnit) info.gpu_budget_output = u.on_gpu;
        }
        info.gpu_weight_bytes = c.weight_bytes;
        info.gpu_overhead_bytes = c.overhead;
        info.gpu_memory_bytes = c.used;
      }
    }
  }
  info.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return Model(std::move(impl));
  };
  try {
    GX_ASSIGN_OR_RETURN(Model model, build_model(path_, device_, n_threads_, n_ctx_, kv_type_, load_type_,
                                                 gpu_layers_, gpu_memory_, profile_path_, packed_cache_dir_));
    model.impl_->row_split = row_split_;
    if (!trace_path_.empty()) {
      GX_TRY(sched::TraceRecorder().write(trace_path_));  // fail now, not when the trace is due
      model.impl_->trace = std::make_shared<sched::TraceRecorder>(trace_path_);
    }
    return model;
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::OutOfMemory, "out of memory while loading '" + path_ + "'");
  } catch (const std::exception& e) {
    return make_error(ErrorCode::Internal, std::string("unexpected exception: ") + e.what());
  }
}

Model::Model(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

const ModelInfo& Model::info() const { return impl_->info; }

Result<Session> Model::new_session() const {
  GX_ASSIGN_OR_RETURN(auto s, Session::Impl::create(impl_));
  return Session(std::move(s));
}

Result<std::string> Model::generate(std::string_view prompt, const GenerationConfig& config) const {
  GX_ASSIGN_OR_RETURN(Session s, new_session());
  return s.generate(prompt, config);
}

Result<std::string> Model::chat(const std::vector<ChatMessage>& messages,
                                const GenerationConfig& config) const {
  GX_ASSIGN_OR_RETURN(Session s, new_session());
  return s.chat(messages, config);
}

Result<std::vector<int32_t>> Model::tokenize(std::string_view text, bool add_special,
                                             bool parse_special) const {
  GX_ASSIGN_OR_RETURN(const tok::Tokenizer* t, impl_->require_tokenizer());
  return t->encode(text, add_special, parse_special);
}

Result<std::string> Model::detokenize(std::span<const int32_t> ids) const {
  GX_ASSIGN_OR_RETURN(const tok::Tokenizer* t, impl_->require_tokenizer());
  return t->decode(ids, false);
}

Result<std::string> Model::apply_chat_template(const std::vector<ChatMessage>& messages,
                                               bool add_generation_prompt) const {
  GX_ASSIGN_OR_RETURN(const tok::Tokenizer* t, impl_->require_tokenizer());
  if (!impl_->chat_template) {
    return make_error(ErrorCode::NotFound, "model has no chat template (tokenizer.chat_template)");
  }
  std::vector<tok::ChatMessage> msgs;
  msgs.reserve(messages.size());
  for (const ChatMessage& m : messages) msgs.push_back({m.role, m.content});
  return impl_->chat_template->render(msgs, add_generation_prompt, t->token_bytes(t->bos_id()),
                                      t->token_bytes(t->eos_id()));
}

Result<PlanSummary> Model::plan(int32_t n_tokens) const {
  if (n_tokens <= 0 || n_tokens > impl_->n_batch) {
    return make_error(ErrorCode::InvalidArgument, "plan: n_tokens must be in [1, " +
                                                      std::to_string(impl_->n_batch) + "]");
  }
  GX_ASSIGN_OR_RETURN(auto backends, create_backends(impl_->backend_names, 1, impl_->cpu_weights));
  std::vector<backends::Backend*> ptrs;
  for (auto& b : backends) ptrs.push_back(b.get());
  sched::SchedulerOptions options;
  options.placement = impl_->placement;
  options.row_split = impl_->row_split;
  sched::Scheduler scheduler(ptrs, options);
  using Clock = std::chrono::steady_clock;
  const auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  const models::StepShape shape{n_tokens, 1};
  auto t = Clock::now();
  const graph::Graph g = impl_->arch->build_graph(shape);
  const double build_ms = ms_since(t);
  GX_ASSIGN_OR_RETURN(auto plan, scheduler.plan_for_shape(models::shape_key(shape), [&] { return g; }));
  // What every later step of this shape pays, as a Session does it: the lookup of the plan by
  // the step's shape (best of a few); the graph is built only once per shape.
  double lookup_ms = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    t = Clock::now();
    GX_ASSIGN_OR_RETURN(auto again, scheduler.plan_for_shape(models::shape_key(shape), [&] { return g; }));
    lookup_ms = std::min(lookup_ms, ms_since(t));
    if (again.get() != plan.get()) return make_error(ErrorCode::Internal, "plan: the cache missed a planned graph");
  }
  PlanSummary out;
  out.n_tokens = n_tokens;
  out.n_splits = static_cast<int32_t>(plan->splits.size());
  out.n_copies = plan->n_copies;
  out.planning_ms = plan->planning_ms;
  out.lookup_ms = lookup_ms;
  out.graph_build_ms = build_ms;
  for (size_t b = 0; b < ptrs.size(); ++b) {
    out.activation_bytes.emplace_back(std::string(ptrs[b]->name()), plan->arena_bytes[b]);
    out.estimated_us.emplace_back(std::string(ptrs[b]->name()), 0.0);
  }
  const sched::CostModel costs(impl_->placement.profile, ptrs);
  for (const sched::Split& split : plan->splits) out.estimated_switch_us += costs.switch_us(static_cast<size_t>(split.backend));
  const graph::Graph& pg = plan->graph;
  for (int32_t i = 0; i < pg.size(); ++i) {
    const graph::Node& n = pg.node(i);
    if (n.op == graph::Op::Weight) continue;
    PlanRow row;
    row.node = i;
    row.name = n.name;
    row.op = std::string(graph::op_name(n.op));
    const DType shown = (n.op == graph::Op::MatMul || n.op == graph::Op::GetRows)
                            ? pg.node(n.src[0]).type
                            : n.type;
    row.type = std::string(dtype_name(shown));
    row.shape = graph::shape_string(n);
    const int32_t b = plan->backend_of[static_cast<size_t>(i)];
    row.backend = b >= 0 ? std::string(ptrs[static_cast<size_t>(b)]->name()) : "-";
    row.reason = plan->reason[static_cast<size_t>(i)];
    if ((n.op == graph::Op::MatMul || n.op == graph::Op::GetRows) && impl_->cpu_weights &&
        pg.node(n.src[0]).op == graph::Op::Weight && row.backend == "cpu") {
      if (const auto* packed = impl_->cpu_weights->find(pg.node(n.src[0]).weight->data)) {
        row.reason += "; weights repacked to " + std::string(packed->kernels->name) + " at load";
      }
    }
    row.layer = n.layer;
    row.estimated_us = costs.planned_node_us(pg, plan->backend_of, i);
    if (n.op == graph::Op::Copy) {
      out.estimated_copy_us += row.estimated_us;
    } else if (b >= 0) {
      out.estimated_us[static_cast<size_t>(b)].second += row.estimated_us;
    }
    out.rows.push_back(std::move(row));
  }
  return out;
}

}  // namespace geniex
