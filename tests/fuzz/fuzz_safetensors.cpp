// libFuzzer target for the safetensors reader: parse arbitrary bytes, then read every tensor
// the parser accepted (so out-of-bounds offsets would show under ASan).
#include <cstddef>
#include <cstdint>

#include "formats/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace geniex;
  auto result = safetensors::File::parse(MappedFile::from_bytes(data, size));
  if (!result.has_value()) {
    volatile size_t n = result.error().to_string().size();  // messages carry file bytes: usable?
    (void)n;
    return 0;
  }
  size_t acc = result->metadata().size();
  for (const safetensors::Tensor& t : result->tensors()) {
    acc += t.shape_string().size() + (result->find(t.name) != nullptr ? 1 : 0);
    if (t.nbytes > 0) acc += t.data[0] + t.data[t.nbytes - 1];
    if (t.n_elements <= (1u << 20)) {
      auto v = safetensors::to_f32(t);
      if (v && v->size() != t.n_elements) __builtin_trap();
    }
  }
  volatile size_t sink = acc;
  (void)sink;
  return 0;
}
