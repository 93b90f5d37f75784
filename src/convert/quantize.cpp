// GGUF -> GGUF requantization: llama.cpp's per-tensor type rules, row-parallel conversion on a
// thread pool, streamed to OUT.part and renamed.
#include "convert/quantize.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <thread>

#include "core/thread_pool.hpp"
#include "quant/quant.hpp"

namespace geniex::convert {
namespace {

// llama.cpp's LLAMA_FTYPE values (llama.h), so llama.cpp names the file's type correctly.
constexpr uint32_t kFtypeAllF32 = 0;
constexpr uint32_t kFtypeF16 = 1;
constexpr uint32_t kFtypeQ4_0 = 2;
constexpr uint32_t kFtypeQ4_1 = 3;
constexpr uint32_t kFtypeQ8_0 = 7;
constexpr uint32_t kFtypeQ5_0 = 8;
constexpr uint32_t kFtypeQ5_1 = 9;
constexpr uint32_t kFtypeQ4_K_S = 14;
constexpr uint32_t kFtypeQ4_K_M = 15;
constexpr uint32_t kFtypeQ5_K_S = 16;
constexpr uint32_t kFtypeQ5_K_M = 17;
constexpr uint32_t kFtypeQ6_K = 18;
constexpr uint32_t kFtypeBF16 = 32;
constexpr uint32_t kQuantizationVersion = 2;  // GGML_QNT_VERSION

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// llama.cpp quantizes only weight matrices, and of those not the ones that are small or
// sensitive (norms, positional and token-type embeddings, MoE routers).
bool is_quantizable_matrix(const gguf::TensorInfo& t) {
  const std::string_view name = t.name;
  if (!ends_with(name, "weight") || t.n_dims < 2) return false;
  if (contains(name, "_norm.weight")) return false;
  if (name == "position_embd.weight" || name == "token_types.weight") return false;
  if (contains(name, "ffn_gate_inp.weight")) return false;
  return true;
}

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// The layers llama.cpp's _M mixes give more bits: the first and last eighth, and every third
// layer in between.
bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// N of a "blk.N." tensor name; -1 for tensors outside the layers.
int layer_of(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int n = 0;
  size_t i = 4;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) n = n * 10 + (name[i] - '0');
  return i > 4 && i < name.size() && name[i] == '.' ? n : -1;
}

// A type whose block divides the row, as llama.cpp falls back.
DType fallback_type(DType t, int64_t ne0) {
  DType f = DType::F16;
  switch (t) {
    case DType::Q4_K: f = DType::Q5_0; break;
    case DType::Q5_K: f = DType::Q5_1; break;
    case DType::Q6_K: f = DType::Q8_0; break;
    default: break;
  }
  if (ne0 % dtype_info(f).block_size != 0) f = DType::F16;
  return f;
}

}  // namespace

const std::vector<QuantTarget>& quant_targets() {
  static const std::vector<QuantTarget> targets = {
      {"f32", DType::F32, kFtypeAllF32},
      {"f16", DType::F16, kFtypeF16},
      {"bf16", DType::BF16, kFtypeBF16},
      {"q8_0", DType::Q8_0, kFtypeQ8_0},
      {"q4_0", DType::Q4_0, kFtypeQ4_0},
      {"q4_1", DType::Q4_1, kFtypeQ4_1},
      {"q5_0", DType::Q5_0, kFtypeQ5_0},
      {"q5_1", DType::Q5_1, kFtypeQ5_1},
      // A single K type is llama.cpp's "small" ftype quantized --pure (no per-layer raises).
      {"q4_k", DType::Q4_K, kFtypeQ4_K_S},
      {"q5_k", DType::Q5_K, kFtypeQ5_K_S},
      {"q6_k", DType::Q6_K, kFtypeQ6_K},
      {"q4_k_m", DType::Q4_K, kFtypeQ4_K_M, QuantMix::Q4_K_M},
      {"q5_k_m", DType::Q5_K, kFtypeQ5_K_M, QuantMix::Q5_K_M},
  };
  return targets;
}

Result<QuantTarget> find_quant_target(std::string_view name) {
  const std::string want = lower(name);
  std::string known;
  for (const QuantTarget& t : quant_targets()) {
    if (t.name == want) return t;
    known += known.empty() ? "" : ", ";
    known += t.name;
  }
  return make_error(ErrorCode::InvalidArgument,
                    "unknown quantization type '" + std::string(name) + "' (known: " + known + ")");
}

Result<std::vector<TensorChoice>> plan_quantization(const gguf::File& in, const QuantTarget& target,
                                                    bool pure) {
  const bool quantized_target = dtype_info(target.base).quantized;
  // Counters as llama.cpp keeps them: attn_v tensors are counted over the file, ffn_down over
  // the model's layers. llama.cpp visits tensors sorted by layer, so a tensor's position is its
  // layer number whatever the file order (the running count serves names without one).
  bool has_output = false;
  int n_attention_wv = 0;
  int n_ffn_down = 0;
  for (const gguf::TensorInfo& t : in.tensors()) {
    if (contains(t.name, "attn_v.weight") || contains(t.name, "attn_qkv.weight") ||
        contains(t.name, "attn_kv_b.weight")) {
      ++n_attention_wv;
    } else if (t.name == "output.weight") {
      has_output = true;
    }
    if (contains(t.name, "ffn_down")) ++n_ffn_down;
  }
  if (const auto arch = in.get_string("general.architecture")) {
    if (const auto n_layer = in.get_u64(*arch + ".block_count")) n_ffn_down = static_cast<int>(*n_layer);
  }
  int i_attention_wv = 0;
  int i_ffn_down = 0;

  std::vector<TensorChoice> plan;
  plan.reserve(in.tensors().size());
  for (const gguf::TensorInfo& t : in.tensors()) {
    TensorChoice c;
    c.name = t.name;
    c.from = t.type;
    const bool float_source = is_float_type(t.type) || quant::can_dequantize(t.type);
    if (!is_quantizable_matrix(t)) {
      // Vectors (norms, biases, rope factors) are kept in full precision, like every other
      // non-quantized tensor that is floating point; integer tensors are copied.
      c.to = (t.n_dims < 2 && float_source) ? DType::F32 : t.type;
      if (!float_source) c.reason = "copied (not a floating-point type)";
      plan.push_back(std::move(c));
      continue;
    }
    if (!quant::can_dequantize(t.type)) {
      return make_error(ErrorCode::Unsupported,
                        "tensor '" + t.name + "' has type " + std::string(dtype_name(t.type)) +
                            ", which GenieX cannot convert");
    }
    DType type = target.base;
    const int64_t ne0 = t.ne[0];
    if (quantized_target && !pure) {
      const bool is_output = t.name == "output.weight" || (!has_output && t.name == "token_embd.weight");
      if (is_output) {
        if (ne0 % dtype_info(type).block_size != 0) {
          type = DType::Q8_0;
        } else if (type != DType::Q8_0) {
          type = DType::Q6_K;
        }
        c.reason = has_output ? "output tensor" : "token embedding tied to the output";
      } else if (contains(t.name, "attn_v.weight")) {
        const int layer = layer_of(t.name);
        if (target.mix != QuantMix::None && use_more_bits(layer >= 0 ? layer : i_attention_wv, n_attention_wv)) {
          type = DType::Q6_K;
          c.reason = "attn_v of a layer given more bits";
        }
        ++i_attention_wv;
      } else if (contains(t.name, "ffn_down")) {
        const int layer = layer_of(t.name);
        if (target.mix != QuantMix::None && use_more_bits(layer >= 0 ? layer : i_ffn_down, n_ffn_down)) {
          type = DType::Q6_K;
          c.reason = "ffn_down of a layer given more bits";
        }
        ++i_ffn_down;
      } else if (contains(t.name, "attn_qkv.weight")) {
        if (target.mix == QuantMix::Q4_K_M) type = DType::Q5_K;
        if (target.mix == QuantMix::Q5_K_M) type = DType::Q6_K;
        if (target.mix != QuantMix::None) c.reason = "fused qkv";
      }
    }
    const int64_t block = dtype_info(type).block_size;
    if (ne0 % block != 0) {
      const DType preferred = type;
      type = fallback_type(type, ne0);
      c.fallback = true;
      c.preferred = preferred;
      c.reason = std::to_string(ne0) + " columns are not a multiple of the " +
                 std::string(dtype_name(preferred)) + " block (" + std::to_string(block) + ")";
    }
    c.to = type;
    plan.push_back(std::move(c));
  }
  for (TensorChoice& c : plan) {
    if (!c.fallback) c.preferred = c.to;
  }
  return plan;
}

double QuantizeSummary::bits_per_weight_in() const {
  return n_elements ? 8.0 * static_cast<double>(in_tensor_bytes) / static_cast<double>(n_elements) : 0.0;
}
double QuantizeSummary::bits_per_weight_out() const {
  return n_elements ? 8.0 * static_cast<double>(out_tensor_bytes) / static_cast<double>(n_elements) : 0.0;
}

namespace {

// Converts one tensor's rows from its source type to `to`, rows split across the pool.
void convert_tensor(ThreadPool& pool, const gguf::TensorInfo& t, DType to, std::vector<uint8_t>& out) {
  const int64_t ne0 = t.ne[0];
  const int64_t rows = t.n_elements() / ne0;
  const auto in_row = static_cast<size_t>(row_bytes(t.type, ne0));
  const auto out_row = static_cast<size_t>(row_bytes(to, ne0));
  out.resize(out_row * static_cast<size_t>(rows));
  pool.run([&](int ith, int nth) {
    int64_t begin = 0, end = 0;
    // Small tensors are not worth waking every thread for.
    const int64_t min_rows_per_thread = std::max<int64_t>(1, 65536 / ne0);
    const int64_t n_used = std::min<int64_t>(nth, (rows + min_rows_per_thread - 1) / min_rows_per_thread);
    if (ith >= n_used) return;
    ThreadPool::split_range(rows, ith, static_cast<int>(n_used), &begin, &end);
    std::vector<float> row(static_cast<size_t>(ne0));
    for (int64_t r = begin; r < end; ++r) {
      quant::dequantize_row_ref(t.type, t.data + static_cast<size_t>(r) * in_row, row.data(), ne0);
      quant::quantize_row_weights(to, row.data(), out.data() + static_cast<size_t>(r) * out_row, ne0);
    }
  });
}

}  // namespace

Result<QuantizeSummary> quantize_file(const std::string& in_path, const std::string& out_path,
                                      const QuantTarget& target, const QuantizeOptions& options) {
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  if (!fs::exists(in_path, ec)) {
    return make_error(ErrorCode::NotFound, "quantize: input '" + in_path + "' does not exist");
  }
  if (fs::exists(out_path, ec)) {
    if (fs::equivalent(in_path, out_path, ec)) {
      return make_error(ErrorCode::InvalidArgument,
                        "quantize: output '" + out_path + "' is the input file");
    }
    if (!options.force) {
      return make_error(ErrorCode::InvalidArgument, "quantize: output '" + out_path +
                                                        "' exists (use --force to overwrite it)");
    }
  }
  Result<gguf::File> in = gguf::File::open(in_path);
  if (!in) return in.error();
  Result<std::vector<TensorChoice>> plan = plan_quantization(*in, target, options.pure);
  if (!plan) return plan.error();

  gguf::Writer writer;
  writer.set_alignment(in->alignment());
  for (const auto& [key, value] : in->metadata()) writer.set_value(key, value);
  writer.set_u32("general.file_type", target.file_type);
  writer.set_u32("general.quantization_version", kQuantizationVersion);

  QuantizeSummary summary;
  const std::vector<gguf::TensorInfo>& tensors = in->tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const gguf::TensorInfo& t = tensors[i];
    std::vector<int64_t> ne(t.ne, t.ne + std::max(1, t.n_dims));
    if (auto st = writer.add_tensor_info(t.name, (*plan)[i].to, std::move(ne)); !st) return st.error();
    summary.n_elements += static_cast<uint64_t>(t.n_elements());
    summary.in_tensor_bytes += t.nbytes;
    summary.out_tensor_bytes += static_cast<uint64_t>(row_bytes((*plan)[i].to, t.ne[0])) *
                                static_cast<uint64_t>(t.n_elements() / t.ne[0]);
  }

  int n_threads = options.n_threads;
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  summary.n_threads = n_threads;
  ThreadPool pool(n_threads);
  const std::string part_path = out_path + ".part";
  const auto produce = [&](size_t index, const std::string& name, std::vector<uint8_t>& bytes) -> Status {
    if (options.on_tensor) options.on_tensor(index, tensors.size(), name);
    const gguf::TensorInfo& t = tensors[index];
    const DType to = (*plan)[index].to;
    if (t.type == to) {
      bytes.assign(t.data, t.data + t.nbytes);
    } else {
      convert_tensor(pool, t, to, bytes);
    }
    return ok_status();
  };
  if (auto st = writer.write_file_streaming(part_path, produce); !st) {
    fs::remove(part_path, ec);
    return st.error();
  }
  if (options.on_tensor) options.on_tensor(tensors.size(), tensors.size(), "");
  fs::rename(part_path, out_path, ec);
  if (ec) {
    fs::remove(part_path, ec);
    return make_error(ErrorCode::IoError, "quantize: cannot rename '" + part_path + "' to '" + out_path +
                                              "': " + ec.message());
  }
  summary.in_file_bytes = static_cast<uint64_t>(fs::file_size(in_path, ec));
  summary.out_file_bytes = static_cast<uint64_t>(fs::file_size(out_path, ec));
  summary.tensors = std::move(*plan);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace geniex::convert
