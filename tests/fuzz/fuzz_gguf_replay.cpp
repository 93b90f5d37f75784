// Plain driver for fuzz targets when libFuzzer is unavailable (g++ builds): feeds every file
// of the given directories, then seeded random mutations of them, to LLVMFuzzerTestOneInput.
//   fuzz_gguf_replay [-seed=N] [-runs=N] DIR_OR_FILE...
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void mutate(std::vector<uint8_t>& b, std::mt19937_64& rng) {
  const int n = 1 + static_cast<int>(rng() % 8);
  for (int i = 0; i < n; ++i) {
    if (b.empty()) {
      b.push_back(static_cast<uint8_t>(rng()));
      continue;
    }
    const size_t pos = rng() % b.size();
    switch (rng() % 7) {
      case 0: b[pos] = static_cast<uint8_t>(rng()); break;
      case 1: b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
      case 2: b[pos] = (rng() & 1) ? 0xff : 0x00; break;
      case 3: {
        static constexpr uint64_t kVals[] = {0, 1, 2, 4, 5, 9, 13, 0x7fffffff, 1ull << 32,
                                             1ull << 62, ~0ull};
        const uint64_t v = kVals[rng() % (sizeof(kVals) / sizeof(kVals[0]))];
        for (size_t k = 0; k < 8 && pos + k < b.size(); ++k) b[pos + k] = static_cast<uint8_t>(v >> (8 * k));
        break;
      }
      case 4: b.resize(pos); break;
      case 5: b.insert(b.begin() + static_cast<std::ptrdiff_t>(pos), static_cast<uint8_t>(rng())); break;
      default: {  // duplicate a chunk (repeats kvs / tensor infos)
        const size_t len = 1 + rng() % 32;
        const size_t end = pos + len < b.size() ? pos + len : b.size();
        const std::vector<uint8_t> chunk(b.begin() + static_cast<std::ptrdiff_t>(pos),
                                         b.begin() + static_cast<std::ptrdiff_t>(end));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(rng() % b.size()), chunk.begin(), chunk.end());
        break;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  long runs = 20000;
  std::vector<std::vector<uint8_t>> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("-seed=", 0) == 0) {
      seed = std::strtoull(arg.c_str() + 6, nullptr, 0);
    } else if (arg.rfind("-runs=", 0) == 0) {
      runs = std::strtol(arg.c_str() + 6, nullptr, 0);
    } else if (std::filesystem::is_directory(arg)) {
      for (const auto& e : std::filesystem::directory_iterator(arg)) {
        if (e.is_regular_file()) inputs.push_back(read_all(e.path()));
      }
    } else if (std::filesystem::is_regular_file(arg)) {
      inputs.push_back(read_all(arg));
    } else {
      std::cerr << "fuzz replay: no such file or directory: " << arg << "\n";
      return 2;
    }
  }
  if (inputs.empty()) {
    std::cerr << "fuzz replay: no inputs (pass corpus directories or files)\n";
    return 2;
  }
  for (const auto& in : inputs) LLVMFuzzerTestOneInput(in.data(), in.size());
  std::cout << "fuzz replay: " << inputs.size() << " corpus inputs; " << runs
            << " mutations with seed " << seed << "\n";
  std::mt19937_64 rng(seed);
  for (long r = 0; r < runs; ++r) {
    std::vector<uint8_t> b = inputs[static_cast<size_t>(rng() % inputs.size())];
    mutate(b, rng);
    LLVMFuzzerTestOneInput(b.data(), b.size());
  }
  std::cout << "fuzz replay: done, no crash\n";
  return 0;
}
