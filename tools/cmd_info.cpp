// geniex info: what a GGUF file holds (metadata, tensors, parameter count) and a memory
// estimate. Reads the file with the GGUF reader directly, so it also describes files the
// runtime cannot run (another architecture, an unsupported tensor type).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "formats/gguf.hpp"

namespace geniex::cli {
namespace {

struct InfoOptions {
  std::string path = default_model_path();
  int32_t ctx_size = 0;
  int32_t batch = 512;
  bool tensors = false;
  bool full = false;
  bool json = false;
};

constexpr size_t kMaxArrayItems = 8;
constexpr size_t kMaxStringChars = 160;

std::string type_label(const gguf::Value& v) {
  if (const gguf::Array* a = v.as_array()) {
    return fmt::format("arr[{},{}]", gguf::value_type_name(a->elem_type), a->items.size());
  }
  return std::string(gguf::value_type_name(v.type));
}

std::string display_value(const gguf::Value& v, bool full) {
  const gguf::Array* a = v.as_array();
  std::string text = v.to_display(full ? (a ? a->items.size() : kMaxArrayItems) : kMaxArrayItems);
  if (!full && text.size() > kMaxStringChars) {
    const size_t total = text.size();
    text.resize(kMaxStringChars);
    text += fmt::format("... ({} chars; --full shows all)", total);
  }
  return text;
}

nlohmann::json to_json(const gguf::Value& v, bool full) {
  if (const gguf::Array* a = v.as_array()) {
    nlohmann::json arr = nlohmann::json::array();
    const size_t n = full ? a->items.size() : std::min(a->items.size(), kMaxArrayItems);
    for (size_t i = 0; i < n; ++i) arr.push_back(to_json(a->items[i], full));
    if (n == a->items.size()) return arr;
    return nlohmann::json{{"type", std::string(gguf::value_type_name(a->elem_type))},
                          {"length", a->items.size()},
                          {"head", arr}};
  }
  if (const std::string* s = v.as_string()) return *s;
  if (const auto b = v.as_bool()) return *b;
  if (v.type == gguf::ValueType::F32 || v.type == gguf::ValueType::F64) {
    if (const auto d = v.as_f64()) return *d;
  }
  if (v.type == gguf::ValueType::I8 || v.type == gguf::ValueType::I16 ||
      v.type == gguf::ValueType::I32 || v.type == gguf::ValueType::I64) {
    if (const auto i = v.as_i64()) return *i;
  }
  if (const auto u = v.as_u64()) return *u;
  return nullptr;
}

std::string shape_of(const gguf::TensorInfo& t) {
  std::string s;
  for (int d = 0; d < std::max(t.n_dims, 1); ++d) {
    s += (d ? " x " : "") + std::to_string(t.ne[d]);
  }
  return s;
}

std::optional<int64_t> meta_int(const gguf::File& file, const std::string& key) {
  if (const gguf::Value* v = file.find(key)) {
    if (const auto i = v->as_i64()) return *i;
  }
  return std::nullopt;
}

struct Hparams {
  std::string arch;
  int64_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0;
  int64_t n_ctx_train = 0, n_vocab = 0;
};

Hparams read_hparams(const gguf::File& file) {
  Hparams h;
  if (const gguf::Value* v = file.find("general.architecture"); v && v->as_string()) h.arch = *v->as_string();
  const std::string a = h.arch.empty() ? "llama" : h.arch;
  h.n_layer = meta_int(file, a + ".block_count").value_or(0);
  h.n_embd = meta_int(file, a + ".embedding_length").value_or(0);
  h.n_head = meta_int(file, a + ".attention.head_count").value_or(0);
  h.n_head_kv = meta_int(file, a + ".attention.head_count_kv").value_or(h.n_head);
  h.n_ff = meta_int(file, a + ".feed_forward_length").value_or(0);
  h.n_ctx_train = meta_int(file, a + ".context_length").value_or(0);
  h.head_dim = meta_int(file, a + ".attention.key_length").value_or(h.n_head > 0 ? h.n_embd / h.n_head : 0);
  if (const gguf::Value* v = file.find("tokenizer.ggml.tokens"); v && v->as_array()) {
    h.n_vocab = static_cast<int64_t>(v->as_array()->items.size());
  } else if (const gguf::TensorInfo* t = file.find_tensor("token_embd.weight")) {
    h.n_vocab = t->ne[1];
  }
  return h;
}

struct TypeSummary {
  int64_t count = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
};

int run(const InfoOptions& opts) {
  Result<gguf::File> opened = gguf::File::open(opts.path);
  if (!opened) return report_error(opened.error());
  const gguf::File& file = *opened;

  int64_t n_params = 0;
  int64_t weight_bytes = 0;
  std::map<std::string, TypeSummary> by_type;
  for (const gguf::TensorInfo& t : file.tensors()) {
    n_params += t.n_elements();
    weight_bytes += static_cast<int64_t>(t.nbytes);
    TypeSummary& s = by_type[std::string(dtype_name(t.type))];
    s.count += 1;
    s.elements += t.n_elements();
    s.bytes += static_cast<int64_t>(t.nbytes);
  }

  const Hparams h = read_hparams(file);
  int64_t n_ctx = opts.ctx_size;
  if (n_ctx <= 0) n_ctx = h.n_ctx_train > 0 ? std::min<int64_t>(h.n_ctx_train, 4096) : 4096;
  const int64_t n_batch = std::min<int64_t>(opts.batch, n_ctx);
  // f16 K and V for every layer and position.
  const int64_t kv_bytes = 2 * h.n_layer * n_ctx * h.n_head_kv * h.head_dim * 2;
  // Rough f32 working set of one prefill batch: residual, normed, q/k/v and attention output
  // (~4 x n_embd), the FFN's gate and up (2 x n_ff), one layer's attention scores, last logits.
  const int64_t act_bytes = n_batch * (4 * h.n_embd + 2 * h.n_ff) * 4 + n_batch * h.n_head * n_ctx * 4 +
                            h.n_vocab * 4;
  const int64_t file_bytes = static_cast<int64_t>(file.mapping()->size());

  if (opts.json) {
    nlohmann::json j;
    j["path"] = opts.path;
    j["file_bytes"] = file_bytes;
    j["gguf_version"] = file.version();
    j["alignment"] = file.alignment();
    j["data_offset"] = file.data_offset();
    nlohmann::json meta = nlohmann::json::object();
    for (const auto& [key, value] : file.metadata()) meta[key] = to_json(value, opts.full);
    j["metadata"] = meta;
    nlohmann::json types = nlohmann::json::object();
    for (const auto& [name, s] : by_type) {
      types[name] = {{"tensors", s.count}, {"elements", s.elements}, {"bytes", s.bytes}};
    }
    j["tensor_types"] = types;
    j["n_tensors"] = file.tensors().size();
    if (opts.tensors) {
      nlohmann::json list = nlohmann::json::array();
      for (const gguf::TensorInfo& t : file.tensors()) {
        list.push_back({{"name", t.name},
                        {"type", std::string(dtype_name(t.type))},
                        {"shape", std::vector<int64_t>(t.ne, t.ne + std::max(t.n_dims, 1))},
                        {"bytes", t.nbytes},
                        {"offset", t.offset}});
      }
      j["tensors"] = list;
    }
    j["n_params"] = n_params;
    j["memory"] = {{"n_ctx", n_ctx},
                   {"weights_bytes", weight_bytes},
                   {"kv_cache_bytes", kv_bytes},
                   {"activations_bytes", act_bytes},
                   {"total_bytes", weight_bytes + kv_bytes + act_bytes}};
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }

  fmt::print("file: {}\n", opts.path);
  fmt::print("  {} ({} bytes), GGUF v{}, alignment {}, data at offset {}\n", format_bytes(static_cast<double>(file_bytes)),
             file_bytes, file.version(), file.alignment(), file.data_offset());

  fmt::print("\nmetadata ({} keys):\n", file.metadata().size());
  size_t key_width = 0, type_width = 0;
  for (const auto& [key, value] : file.metadata()) {
    key_width = std::max(key_width, key.size());
    type_width = std::max(type_width, type_label(value).size());
  }
  for (const auto& [key, value] : file.metadata()) {
    fmt::print("  {:<{}}  {:<{}}  {}\n", key, key_width, type_label(value), type_width,
               display_value(value, opts.full));
  }

  fmt::print("\ntensors ({}):\n", file.tensors().size());
  if (opts.tensors) {
    size_t name_width = 4, shape_width = 5;
    for (const gguf::TensorInfo& t : file.tensors()) {
      name_width = std::max(name_width, t.name.size());
      shape_width = std::max(shape_width, shape_of(t).size());
    }
    fmt::print("  {:<{}}  {:<6}  {:<{}}  {:>12}\n", "name", name_width, "type", "shape", shape_width, "bytes");
    for (const gguf::TensorInfo& t : file.tensors()) {
      fmt::print("  {:<{}}  {:<6}  {:<{}}  {:>12}\n", t.name, name_width, dtype_name(t.type), shape_of(t),
                 shape_width, t.nbytes);
    }
  } else {
    fmt::print("  {:<6}  {:>7}  {:>14}  {:>12}\n", "type", "tensors", "parameters", "size");
    for (const auto& [name, s] : by_type) {
      fmt::print("  {:<6}  {:>7}  {:>14}  {:>12}\n", name, s.count, s.elements,
                 format_bytes(static_cast<double>(s.bytes)));
    }
    fmt::print("  (--tensors lists every tensor)\n");
  }

  fmt::print("\nparameters: {} ({})\n", n_params, format_count(static_cast<double>(n_params)));
  if (h.n_layer <= 0 || h.n_head_kv <= 0 || h.head_dim <= 0) {
    fmt::print("weights: {}\nmemory estimate: unavailable (no {}.block_count / attention head metadata)\n",
               format_bytes(static_cast<double>(weight_bytes)), h.arch.empty() ? "<arch>" : h.arch);
    return 0;
  }
  if (!h.arch.empty()) {
    fmt::print("architecture: {}: {} layers, n_embd {}, {} heads ({} kv, head dim {}), n_ff {}, vocab {}, trained ctx {}\n",
               h.arch, h.n_layer, h.n_embd, h.n_head, h.n_head_kv, h.head_dim, h.n_ff, h.n_vocab, h.n_ctx_train);
  }
  fmt::print("\nmemory estimate at n_ctx = {}:\n", n_ctx);
  fmt::print("  weights              {:>12}\n", format_bytes(static_cast<double>(weight_bytes)));
  fmt::print("  KV cache (f16)       {:>12}   2 x {} layers x {} ctx x {} kv heads x {} dim x 2 B\n",
             format_bytes(static_cast<double>(kv_bytes)), h.n_layer, n_ctx, h.n_head_kv, h.head_dim);
  fmt::print("  activations (rough) {:>13}   prefill batch of {}\n", format_bytes(static_cast<double>(act_bytes)), n_batch);
  fmt::print("  total                {:>12}\n", format_bytes(static_cast<double>(weight_bytes + kv_bytes + act_bytes)));
  return 0;
}

}  // namespace

Command make_info_command(CLI::App& root) {
  auto opts = std::make_shared<InfoOptions>();
  CLI::App* app = root.add_subcommand("info", "show a GGUF file's metadata, tensors and memory needs");
  app->add_option("-m,--model,model", opts->path, "GGUF file")->capture_default_str();
  app->add_option("-c,--ctx-size", opts->ctx_size, "context for the KV cache estimate (0: min(trained, 4096))")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("-b,--batch", opts->batch, "prefill batch for the activation estimate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_flag("--tensors", opts->tensors, "list every tensor (default: a summary by type)");
  app->add_flag("--full", opts->full, "do not abbreviate long arrays and strings");
  app->add_flag("--json", opts->json, "machine-readable output");
  return Command{app, [opts] { return run(*opts); }};
}

}  // namespace geniex::cli
