// Writes the GGUF fuzz seed corpus: make_gguf_corpus OUT_DIR (tests/data/gguf/corpus).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "fuzz/gguf_seeds.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_gguf_corpus OUT_DIR\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  for (const auto& seed : geniex::gguf::seeds::all()) {
    std::ofstream out(dir / seed.name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(seed.bytes.data()),
              static_cast<std::streamsize>(seed.bytes.size()));
    if (!out) {
      std::cerr << "make_gguf_corpus: cannot write " << (dir / seed.name) << "\n";
      return 1;
    }
    std::cout << (dir / seed.name).string() << ": " << seed.bytes.size() << " bytes\n";
  }
  return 0;
}
