// Hugging Face model folder (config.json, safetensors, tokenizer.json) -> GGUF, in memory.
//
// The output follows llama.cpp's convert_hf_to_gguf.py, so that GenieX's loaders (and llama.cpp)
// read it like any downloaded GGUF: the same metadata keys, tensor names and layouts (Llama q/k
// rows permuted for adjacent-pair RoPE, Llama 3.1 RoPE scaling as rope_freqs.weight, Gemma's
// RMSNorm weights stored as 1 + w, no output.weight for tied embeddings, norms and biases F32).
// Supported: llama (Llama 2/3/3.1/3.2, SmolLM2), mistral (sliding_window kept as
// llama.attention.sliding_window, which llama.cpp ignores), qwen2, qwen3, gemma3 (text).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/result.hpp"
#include "formats/gguf.hpp"

namespace geniex::convert {

struct ImportOptions {
  // Type of the 2-D weight matrices. nullopt keeps the stored type: F32 and F16 as they are, BF16
  // as F32 (or as BF16 with keep_bf16). F32, F16, BF16 or any type quant::can_quantize accepts
  // (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K); a matrix whose rows do not split into the
  // type's blocks falls back as llama.cpp does (K-quants to Q5_0 / Q5_1 / Q8_0, others to F16).
  // 1-D tensors (norms, biases, rope_freqs) are always F32.
  std::optional<DType> type;
  bool keep_bf16 = false;
  // Called after each tensor with (tensors done, tensors in all, bytes read so far, bytes in all).
  std::function<void(size_t, size_t, uint64_t, uint64_t)> progress;
};

// What the import did, for the CLI's summary line.
struct ImportReport {
  std::string architecture;  // GGUF architecture: "llama", "qwen2", "qwen3", "gemma3"
  size_t n_tensors = 0;
  uint64_t n_params = 0;
  uint64_t source_bytes = 0;  // safetensors data read
  uint64_t output_bytes = 0;  // tensor data written
  bool has_tokenizer = false;
  std::vector<std::string> notes;  // fallbacks and choices worth telling the user
};

// True when `path` is a folder holding config.json (what ModelBuilder treats as a Hugging Face
// model).
bool is_hf_folder(const std::string& path);

// Reads the folder and builds the GGUF. Errors name the file, key or tensor at fault: missing
// config.json, unsupported model_type or configuration, missing tensor, unexpected tensor,
// shape mismatch, malformed or truncated safetensors.
Result<gguf::Writer> import_hf(const std::string& dir, const ImportOptions& options, ImportReport* report = nullptr);

// The folder imported and parsed as a gguf::File, for loading a model straight from a folder.
// The GGUF bytes live in an anonymous in-memory file (memfd) mapped like a file on disk, not in
// MappedFile::from_bytes's heap copy: the CPU backend drops the file pages of weights it
// repacks (MADV_DONTNEED, only in shared file mappings), so resident memory holds one copy.
Result<gguf::File> load_hf_as_gguf(const std::string& dir, const ImportOptions& options = {});

// The output type names of `geniex convert --type`: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,
// q4_k, q5_k, q6_k.
Result<DType> parse_output_type(const std::string& name);

}  // namespace geniex::convert
