// libFuzzer target for the GGUF reader: parse arbitrary bytes, then touch everything parsed.
#include <cstddef>
#include <cstdint>

#include "formats/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace geniex;
  auto result = gguf::File::parse(MappedFile::from_bytes(data, size));
  if (!result.has_value()) {
    // Error messages are built from file bytes too: make sure they are usable.
    volatile size_t n = result.error().to_string().size();
    (void)n;
    return 0;
  }
  const gguf::File& f = *result;
  size_t acc = 0;
  for (const auto& [key, value] : f.metadata()) {
    acc += key.size() + value.to_display().size() + value.to_display(1000).size();
    acc += f.find(key) == &value ? 1 : 0;
    if (value.as_u64()) acc += 1;
    if (value.as_i64()) acc += 1;
    if (value.as_f64()) acc += 1;
    // Exercise the typed getters on every key, whatever its type.
    acc += f.get_u64(key).has_value() + f.get_f64(key).has_value() +
           f.get_string(key).has_value() + f.get_bool(key).has_value() +
           f.get_string_array(key).has_value() + f.get_f64_array(key).has_value() +
           f.get_i64_array(key).has_value();
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    acc += static_cast<size_t>(t.n_elements()) + (f.find_tensor(t.name) == &t ? 1 : 0);
    if (t.nbytes > 0) acc += t.data[0] + t.data[t.nbytes - 1];  // in bounds, or ASan says so
  }
  volatile size_t sink = acc;
  (void)sink;
  return 0;
}
