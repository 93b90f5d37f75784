// The explicit list of architectures, and weight loading with shape checks.
#include "models/architecture.hpp"

#include "models/gemma3.hpp"
#include "models/llama.hpp"

namespace geniex::models {

Result<std::unique_ptr<Architecture>> load_architecture(const gguf::File& file) {
  GX_ASSIGN_OR_RETURN(const std::string arch, file.get_string("general.architecture"));
  const LlamaVariant* variant = nullptr;
  static constexpr LlamaVariant kLlama = LlamaVariant::Llama, kQwen2 = LlamaVariant::Qwen2,
                                kQwen3 = LlamaVariant::Qwen3;
  if (arch == "llama") variant = &kLlama;
  if (arch == "qwen2") variant = &kQwen2;
  if (arch == "qwen3") variant = &kQwen3;
  if (arch == "gemma3") {
    GX_ASSIGN_OR_RETURN(auto model, Gemma3Model::load(file));
    return std::unique_ptr<Architecture>(std::move(model));
  }
  if (variant != nullptr) {
    GX_ASSIGN_OR_RETURN(auto model, LlamaModel::load(file, *variant));
    return std::unique_ptr<Architecture>(std::move(model));
  }
  return make_error(ErrorCode::Unsupported,
                    "architecture '" + arch + "' is not supported (supported: llama, qwen2, qwen3, gemma3)");
}

Result<int32_t> get_count(const gguf::File& f, const std::string& key) {
  GX_ASSIGN_OR_RETURN(const uint64_t v, f.get_u64(key));
  if (v == 0 || v > (1u << 30)) {
    return make_error(ErrorCode::InvalidFormat,
                      "metadata '" + key + "' = " + std::to_string(v) + " is out of range");
  }
  return static_cast<int32_t>(v);
}

Result<graph::WeightRef> load_weight(const gguf::File& file, const std::string& name,
                                     std::vector<int64_t> expected_ne) {
  const gguf::TensorInfo* t = file.find_tensor(name);
  if (t == nullptr) {
    return make_error(ErrorCode::NotFound, "model is missing tensor '" + name + "'");
  }
  auto shape_str = [](const int64_t* ne, size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += (i ? "x" : "") + std::to_string(ne[i]);
    return s;
  };
  bool same = true;
  for (size_t i = 0; i < 4; ++i) {
    const int64_t want = i < expected_ne.size() ? expected_ne[i] : 1;
    if (t->ne[i] != want) same = false;
  }
  if (!same) {
    return make_error(ErrorCode::InvalidFormat, "tensor '" + name + "' has shape " +
                                                    shape_str(t->ne, 4) + ", expected " +
                                                    shape_str(expected_ne.data(), expected_ne.size()));
  }
  graph::WeightRef w;
  w.name = name;
  w.type = t->type;
  for (size_t i = 0; i < 4; ++i) w.ne[i] = t->ne[i];
  w.data = t->data;
  w.nbytes = t->nbytes;
  return w;
}

}  // namespace geniex::models
