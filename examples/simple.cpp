// The README example: load a model for the NPU (GenieX falls back to the GPU, then the CPU,
// where a unit is missing), generate a short answer, print it.
//   build/examples/simple [model.gguf]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "geniex/geniex.hpp"

int main(int argc, char** argv) {
  std::string path;
  if (argc > 1) {
    path = argv[1];
  } else if (const char* env = std::getenv("GENIEX_MODEL")) {
    path = env;
  } else {
    const char* cache = std::getenv("GENIEX_CACHE");
    const char* home = std::getenv("HOME");
    path = (cache ? std::string(cache) : std::string(home ? home : ".") + "/.cache/geniex") +
           "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  }

  geniex::Result<geniex::Model> model =
      geniex::ModelBuilder(path).with_device(geniex::Device::npu()).build();
  if (!model) {
    std::fprintf(stderr, "error: %s\n", model.error().to_string().c_str());
    return 1;
  }
  for (const std::string& note : model->info().device_notes) {
    std::fprintf(stderr, "note: %s\n", note.c_str());
  }

  geniex::GenerationConfig config;
  config.max_new_tokens = 48;
  config.seed = 42;
  geniex::Result<std::string> text = model->generate(
      "Extract the anomalies: sensor A reads 21.5 C, 21.7 C, 98.2 C, 21.6 C; "
      "sensor B reads 40 %, 41 %, 0 %, 40 %.\nAnomalies:",
      config);
  if (!text) {
    std::fprintf(stderr, "error: %s\n", text.error().to_string().c_str());
    return 1;
  }
  std::printf("%s\n", text->c_str());
  return 0;
}
