// Session: a sequence with its own KV cache, backends and scheduler; eval of token batches
// and the generation loop (prefill, sample, stream-decode, stop strings).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>

#include "runtime/chunking.hpp"
#include "runtime/impl.hpp"
#include "sampling/sampler.hpp"

namespace geniex {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

template <typename F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::OutOfMemory, "out of memory");
  } catch (const std::exception& e) {
    return make_error(ErrorCode::Internal, std::string("unexpected exception: ") + e.what());
  }
}
}  // namespace

Result<std::unique_ptr<Session::Impl>> Session::Impl::create(std::shared_ptr<const Model::Impl> model) {
  auto s = std::make_unique<Impl>();
  s->model = std::move(model);
  GX_ASSIGN_OR_RETURN(s->backends, create_backends(s->model->backend_names, s->model->n_threads, s->model->cpu_weights));
  std::vector<backends::Backend*> ptrs;
  for (auto& b : s->backends) ptrs.push_back(b.get());
  s->static_tokens = runtime::static_step_tokens(ptrs);
  sched::SchedulerOptions sched_options;
  sched_options.placement = s->model->placement;
  sched_options.row_split = s->model->row_split;
  sched_options.trace = s->model->trace;
  s->scheduler = std::make_unique<sched::Scheduler>(ptrs, sched_options);
  const models::HParams& hp = s->model->arch->hparams();
  kv::KvConfig cfg;
  cfg.n_layer = hp.n_layer;
  cfg.n_head_kv = hp.n_head_kv;
  cfg.head_dim = hp.head_dim;
  cfg.n_ctx = s->model->n_ctx;
  cfg.n_seq_max = 1;
  cfg.type = s->model->kv_type;
  GX_ASSIGN_OR_RETURN(auto cache, kv::PagedKvCache::create(cfg));
  s->kv = std::move(cache);
  return s;
}

Result<std::span<const float>> Session::Impl::eval(std::span<const int32_t> tokens, bool all_logits) {
  const models::HParams& hp = model->arch->hparams();
  if (tokens.empty()) return make_error(ErrorCode::InvalidArgument, "eval: no tokens");
  for (const int32_t t : tokens) {
    if (t < 0 || t >= hp.n_vocab) {
      return make_error(ErrorCode::InvalidArgument, "eval: token id " + std::to_string(t) +
                                                        " is outside the vocabulary [0, " +
                                                        std::to_string(hp.n_vocab) + ")");
    }
  }
  const auto n_past = static_cast<int32_t>(history.size());
  if (static_cast<int64_t>(n_past) + static_cast<int64_t>(tokens.size()) > model->n_ctx) {
    return make_error(ErrorCode::OutOfRange,
                      "context full: " + std::to_string(n_past) + " tokens in the cache + " +
                          std::to_string(tokens.size()) + " new exceed the context of " +
                          std::to_string(model->n_ctx) + " (raise it with -c / with_context)");
  }
  const size_t n_vocab = static_cast<size_t>(hp.n_vocab);
  logits.resize(all_logits ? n_vocab * tokens.size() : n_vocab);
  // An error in any step undoes the steps before it: the eval happens whole or not at all.
  auto fail = [&](Error e) -> Result<std::span<const float>> {
    kv->truncate(0, n_past);
    history.resize(static_cast<size_t>(n_past));
    return e;
  };
  std::vector<int32_t> padded_tokens, positions, seq_ids, out_rows;
  const std::vector<runtime::StepChunk> steps = runtime::plan_steps(
      static_cast<int32_t>(tokens.size()), n_past, model->n_ctx, model->n_batch, static_tokens);
  for (const runtime::StepChunk& c : steps) {
    const auto start = static_cast<size_t>(c.start);
    const auto n_real = static_cast<size_t>(c.n_real);
    const auto n = static_cast<size_t>(c.n_padded);
    const bool last_chunk = start + n_real == tokens.size();
    std::span<const int32_t> chunk = tokens.subspan(start, n_real);
    if (n > n_real) {
      // Static shapes: pad tokens (the last real token repeated) follow the real ones, at the
      // next positions. Causal attention keeps them out of the real rows; their outputs are
      // not read and their KV rows are dropped after the step.
      padded_tokens.assign(chunk.begin(), chunk.end());
      padded_tokens.resize(n, chunk.back());
      chunk = padded_tokens;
    }
    positions.resize(n);
    seq_ids.assign(n, 0);
    for (size_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(history.size() + i);
    const size_t n_out = all_logits ? n_real : 1;
    out_rows.resize(n_out);
    for (size_t i = 0; i < n_out; ++i) out_rows[i] = static_cast<int32_t>(all_logits ? i : n_real - 1);

    if (auto st = kv->begin_batch(seq_ids, positions); !st) return fail(st.take_error());
    const models::StepShape shape{static_cast<int32_t>(n), static_cast<int32_t>(n_out)};
    auto plan = scheduler->plan_for_shape(models::shape_key(shape), [&] { return model->arch->build_graph(shape); });
    if (!plan) return fail(plan.take_error());
    backends::StepData step;
    step.tokens = chunk;
    step.positions = positions;
    step.seq_ids = seq_ids;
    step.output_rows = out_rows;
    step.kv = kv.get();
    auto out = scheduler->execute(**plan, step);
    if (!out) return fail(out.take_error());
    if (n > n_real) kv->truncate(0, static_cast<int32_t>(history.size() + n_real));
    history.insert(history.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n_real));
    if (all_logits) {
      std::memcpy(logits.data() + start * n_vocab, *out, n_real * n_vocab * sizeof(float));
    } else if (last_chunk) {
      std::memcpy(logits.data(), *out, n_vocab * sizeof(float));
    }
  }
  return std::span<const float>(logits);
}

size_t Session::Impl::reuse_prefix(const std::vector<int32_t>& tokens) {
  size_t common = 0;
  while (common < history.size() && common < tokens.size() && history[common] == tokens[common]) ++common;
  // At least one token must be evaluated to get fresh logits.
  if (common == tokens.size() && common > 0) --common;
  if (common < history.size()) {
    kv->truncate(0, static_cast<int32_t>(common));
    history.resize(common);
  }
  return common;
}

Result<std::string> Session::Impl::generate_from(const std::vector<int32_t>& prompt, size_t reused,
                                                 const GenerationConfig& config) {
  GX_ASSIGN_OR_RETURN(const tok::Tokenizer* tokenizer, model->require_tokenizer());
  if (config.max_new_tokens < 0) {
    return make_error(ErrorCode::InvalidArgument, "max_new_tokens must be >= 0");
  }
  GenerationStats stats;
  stats.prompt_tokens = static_cast<int32_t>(prompt.size());
  stats.reused_prompt_tokens = static_cast<int32_t>(reused);

  sampling::SamplerConfig sc;
  sc.temperature = config.temperature;
  sc.top_k = config.top_k;
  sc.top_p = config.top_p;
  sc.min_p = config.min_p;
  sc.repeat_penalty = config.repeat_penalty;
  sc.repeat_last_n = config.repeat_last_n;
  sc.seed = config.seed;
  sampling::Sampler sampler(sc);
  const size_t from = prompt.size() > static_cast<size_t>(std::max(0, config.repeat_last_n))
                          ? prompt.size() - static_cast<size_t>(std::max(0, config.repeat_last_n))
                          : 0;
  for (size_t i = from; i < prompt.size(); ++i) sampler.accept(prompt[i]);

  const auto t_start = Clock::now();
  const std::span<const int32_t> fresh(prompt.data() + reused, prompt.size() - reused);
  GX_ASSIGN_OR_RETURN(std::span<const float> logits_now, eval(fresh, false));
  stats.prefill_ms = ms_since(t_start);

  tok::StreamDecoder decoder(*tokenizer, true);
  sampling::StopMatcher stops(config.stop);
  std::string text;
  bool cancelled = false;
  auto emit = [&](const std::string& piece) {
    if (piece.empty() || cancelled) return;
    text += piece;
    if (config.on_text && !config.on_text(piece)) cancelled = true;
  };

  stats.stop_reason = "max_tokens";
  Clock::time_point t_first{};
  for (int32_t i = 0; i < config.max_new_tokens; ++i) {
    GX_ASSIGN_OR_RETURN(const int32_t id, sampler.sample(logits_now));
    if (i == 0) {
      stats.time_to_first_token_ms = ms_since(t_start);
      t_first = Clock::now();
    }
    if (tokenizer->is_eog(id)) {
      stats.stop_reason = "eos";
      break;
    }
    sampler.accept(id);
    ++stats.generated_tokens;
    emit(stops.push(decoder.push(id)));
    if (stops.stopped()) {
      stats.stop_reason = "stop_string";
      break;
    }
    if (cancelled) {
      stats.stop_reason = "cancelled";
      break;
    }
    if (i + 1 == config.max_new_tokens) break;
    if (static_cast<int32_t>(history.size()) >= model->n_ctx) {
      stats.stop_reason = "context_full";
      break;
    }
    const int32_t next[1] = {id};
    GX_ASSIGN_OR_RETURN(logits_now, eval(next, false));
  }
  if (stats.stop_reason != "stop_string" && !cancelled) {
    emit(stops.push(decoder.flush()));
    if (!stops.stopped()) emit(stops.flush());
  }
  if (stats.generated_tokens > 0) stats.decode_ms = ms_since(t_first);
  if (config.stats != nullptr) *config.stats = stats;
  return text;
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

int32_t Session::n_past() const { return static_cast<int32_t>(impl_->history.size()); }

void Session::reset() {
  impl_->kv->clear();
  impl_->history.clear();
}

Result<std::span<const float>> Session::eval(std::span<const int32_t> tokens, bool all_logits) {
  return guarded([&]() -> Result<std::span<const float>> { return impl_->eval(tokens, all_logits); });
}

Result<std::string> Session::generate(std::string_view prompt, const GenerationConfig& config) {
  return guarded([&]() -> Result<std::string> {
    GX_ASSIGN_OR_RETURN(const tok::Tokenizer* t, impl_->model->require_tokenizer());
    GX_ASSIGN_OR_RETURN(std::vector<int32_t> fresh, t->encode(prompt, impl_->history.empty(), true));
    if (fresh.empty()) return make_error(ErrorCode::InvalidArgument, "generate: empty prompt");
    std::vector<int32_t> all = impl_->history;
    all.insert(all.end(), fresh.begin(), fresh.end());
    const size_t reused = impl_->reuse_prefix(all);
    return impl_->generate_from(all, reused, config);
  });
}

Result<std::string> Session::chat(const std::vector<ChatMessage>& messages, const GenerationConfig& config) {
  return guarded([&]() -> Result<std::string> {
    if (messages.empty()) return make_error(ErrorCode::InvalidArgument, "chat: no messages");
    Model model(std::const_pointer_cast<Model::Impl>(impl_->model));
    GX_ASSIGN_OR_RETURN(const std::string prompt, model.apply_chat_template(messages, true));
    GX_ASSIGN_OR_RETURN(const tok::Tokenizer* t, impl_->model->require_tokenizer());
    GX_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, t->encode(prompt, true, true));
    const size_t reused = impl_->reuse_prefix(tokens);
    return impl_->generate_from(tokens, reused, config);
  });
}

}  // namespace geniex
