// Replay driver for fuzz_safetensors without libFuzzer: built-in seed files (written here with
// tests/common/safetensors_writer.hpp, so no binary corpus is committed), plus any files or
// directories given, then seeded random mutations and truncations of them.
//   fuzz_safetensors_replay [-seed=N] [-runs=N] [-write_seeds=DIR] [DIR_OR_FILE...]
// -write_seeds writes the built-in seeds to DIR (the libFuzzer target's seed corpus) and exits.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "common/safetensors_writer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::vector<uint8_t>> seeds() {
  using geniex::test::SafetensorsWriter;
  std::vector<std::vector<uint8_t>> out;
  SafetensorsWriter a;
  a.add("model.embed_tokens.weight", "F32", {4, 3}, std::vector<float>(12, 0.5f));
  a.add("model.norm.weight", "BF16", {3}, {1, 2, 3});
  a.add("lm_head.weight", "F16", {4, 3}, std::vector<float>(12, -0.25f));
  a.set_metadata("format", "pt");
  out.push_back(a.bytes());
  SafetensorsWriter b;
  b.add("scalar", "F32", {}, {7});
  b.add("empty", "F16", {0, 5}, {});
  b.add_raw("ids", "I64", {2}, std::vector<uint8_t>(16, 3));
  out.push_back(b.bytes());
  return out;
}

std::vector<uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void mutate(std::vector<uint8_t>& b, std::mt19937_64& rng) {
  static const char* const kTokens[] = {"\"", "{", "}", "[", "]", ",", ":", "-1", "18446744073709551615",
                                        "1e999", "\"F32\"", "\"data_offsets\"", "\"shape\"", "null", "\\u0000"};
  const int n = 1 + static_cast<int>(rng() % 6);
  for (int i = 0; i < n; ++i) {
    if (b.empty()) {
      b.push_back(static_cast<uint8_t>(rng()));
      continue;
    }
    const size_t pos = rng() % b.size();
    switch (rng() % 6) {
      case 0: b[pos] = static_cast<uint8_t>(rng()); break;
      case 1: b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
      case 2: {  // JSON-ish token, mostly inside the header
        const std::string t = kTokens[rng() % (sizeof(kTokens) / sizeof(kTokens[0]))];
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(pos), t.begin(), t.end());
        break;
      }
      case 3: b.resize(pos); break;  // truncation
      case 4: {                      // header length field
        const uint64_t v = rng() % 3 == 0 ? rng() : rng() % (b.size() + 16);
        for (size_t k = 0; k < 8 && k < b.size(); ++k) b[k] = static_cast<uint8_t>(v >> (8 * k));
        break;
      }
      default: {
        const size_t len = 1 + rng() % 16;
        const size_t end = pos + len < b.size() ? pos + len : b.size();
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(pos), b.begin() + static_cast<std::ptrdiff_t>(end));
        break;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  long runs = 5000;
  std::vector<std::vector<uint8_t>> inputs = seeds();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("-seed=", 0) == 0) {
      seed = std::strtoull(arg.c_str() + 6, nullptr, 0);
    } else if (arg.rfind("-runs=", 0) == 0) {
      runs = std::strtol(arg.c_str() + 6, nullptr, 0);
    } else if (arg.rfind("-write_seeds=", 0) == 0) {
      const std::filesystem::path dir = arg.substr(13);
      std::filesystem::create_directories(dir);
      for (size_t k = 0; k < inputs.size(); ++k) {
        std::ofstream out(dir / ("seed" + std::to_string(k) + ".safetensors"), std::ios::binary);
        out.write(reinterpret_cast<const char*>(inputs[k].data()), static_cast<std::streamsize>(inputs[k].size()));
      }
      std::cout << "fuzz replay: wrote " << inputs.size() << " seeds to " << dir << "\n";
      return 0;
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
  for (const auto& in : inputs) LLVMFuzzerTestOneInput(in.data(), in.size());
  std::cout << "fuzz replay: " << inputs.size() << " inputs; " << runs << " mutations with seed " << seed << "\n";
  std::mt19937_64 rng(seed);
  for (long r = 0; r < runs; ++r) {
    std::vector<uint8_t> b = inputs[static_cast<size_t>(rng() % inputs.size())];
    if (b.size() > 100000 && (rng() % 4) != 0) {
      b.resize(rng() % b.size());
    } else {
      mutate(b, rng);
    }
    LLVMFuzzerTestOneInput(b.data(), b.size());
  }
  std::cout << "fuzz replay: done, no crash\n";
  return 0;
}
