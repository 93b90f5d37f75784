// `geniex quantize`: rewrites a GGUF model with its weight matrices in another type, choosing
// per tensor as llama.cpp's quantizer does (so files and mixes are interchangeable with it),
// streaming one tensor at a time to disk.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/result.hpp"
#include "formats/gguf.hpp"

namespace geniex::convert {

// The K-quant mixes that raise some tensors to a higher type.
enum class QuantMix { None, Q4_K_M, Q5_K_M };

// One target of `geniex quantize TYPE`.
struct QuantTarget {
  std::string_view name;  // "q4_k_m", as typed on the command line
  DType base;             // type of most weight matrices
  uint32_t file_type;     // llama.cpp's LLAMA_FTYPE value, written to general.file_type
  QuantMix mix = QuantMix::None;
};

// Every target, in the order `geniex quantize --help` lists them.
const std::vector<QuantTarget>& quant_targets();
// Case-insensitive look-up; InvalidArgument listing the known names otherwise.
Result<QuantTarget> find_quant_target(std::string_view name);

// The type chosen for one tensor, and why when it is not the target's base type.
struct TensorChoice {
  std::string name;
  DType from = DType::F32;
  DType to = DType::F32;
  DType preferred = DType::F32;  // before a fallback for the row length (== to otherwise)
  std::string reason;  // empty, or e.g. "output tensor", "576 columns: q4_k needs multiples of 256"
  bool fallback = false;  // the preferred type did not fit the row length
};

// Chooses every tensor's output type without touching data, following llama.cpp's rules:
// only matrices named *.weight are quantized (not norms, positional or token-type embeddings,
// expert routers); vectors become F32; for quantized targets the output matrix (the token
// embedding when the model ties them) gets Q6_K, and the _M mixes raise attn_v and ffn_down of
// some layers to Q6_K; a type whose block does not divide the row falls back to one that does
// (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16). `pure`: the base type for every
// matrix (fallbacks still apply). Unsupported: a tensor that would need converting from a
// type GenieX cannot dequantize.
Result<std::vector<TensorChoice>> plan_quantization(const gguf::File& in, const QuantTarget& target,
                                                    bool pure);

struct QuantizeOptions {
  int n_threads = 0;   // 0: all hardware threads
  bool force = false;  // overwrite an existing output file
  bool pure = false;   // see plan_quantization
  // Called before each tensor is converted (index, count, name) and once at the end with
  // index == count.
  std::function<void(size_t index, size_t count, const std::string& name)> on_tensor;
};

struct QuantizeSummary {
  uint64_t in_file_bytes = 0;
  uint64_t out_file_bytes = 0;
  uint64_t n_elements = 0;       // over all tensors
  uint64_t in_tensor_bytes = 0;  // data sections
  uint64_t out_tensor_bytes = 0;
  double seconds = 0;
  int n_threads = 1;
  std::vector<TensorChoice> tensors;

  double bits_per_weight_in() const;
  double bits_per_weight_out() const;
};

// Reads `in_path`, writes `out_path` (through out_path + ".part", renamed at the end; an
// existing out_path is an error unless options.force). All metadata is copied;
// general.file_type and general.quantization_version are set for the target.
Result<QuantizeSummary> quantize_file(const std::string& in_path, const std::string& out_path,
                                      const QuantTarget& target, const QuantizeOptions& options);

}  // namespace geniex::convert
