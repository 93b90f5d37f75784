// Replay driver for fuzz_spm_model without libFuzzer: built-in seed models (written as protobuf
// here, so no committed binary corpus is needed), plus any files or directories given (e.g. real
// tokenizer.model files), then seeded random mutations and truncations of them.
//   fuzz_spm_model_replay [-seed=N] [-runs=N] [-write_seeds=DIR] [DIR_OR_FILE...]
// -write_seeds writes the built-in seeds to DIR (the libFuzzer target's seed corpus) and exits.
#include <cstdint>
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

struct Pb {
  std::string b;
  void varint(uint64_t v) {
    while (v >= 0x80) {
      b.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    b.push_back(static_cast<char>(v));
  }
  void tag(uint32_t field, uint32_t wire) { varint((static_cast<uint64_t>(field) << 3) | wire); }
  void var(uint32_t field, uint64_t v) {
    tag(field, 0);
    varint(v);
  }
  void bytes(uint32_t field, const std::string& s) {
    tag(field, 2);
    varint(s.size());
    b += s;
  }
  void f32(uint32_t field, float f) {
    tag(field, 5);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
  }
};

// A small BPE model: <unk> <s> </s>, the 256 byte pieces, letters and a few merges.
std::string seed_model(int model_type, bool dummy_prefix, bool user_defined) {
  Pb m;
  auto piece = [&](const std::string& p, float score, int type) {
    Pb x;
    x.bytes(1, p);
    x.f32(2, score);
    if (type != 1) x.var(3, static_cast<uint64_t>(type));
    m.bytes(1, x.b);
  };
  piece("<unk>", 0, 2);
  piece("<s>", 0, 3);
  piece("</s>", 0, 3);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    piece(buf, 0, 6);
  }
  const std::string sp = "\xE2\x96\x81";
  float score = -1;
  for (const std::string& p : {sp, std::string("a"), std::string("b"), std::string("c"), std::string("H"),
                               std::string("e"), std::string("l"), std::string("o"), sp + "a", std::string("ll"),
                               std::string("He"), std::string("llo"), sp + "He", sp + "Hello", sp + sp}) {
    piece(p, score, 1);
    score -= 1;
  }
  if (user_defined) {
    piece("[INST]", 0, 4);
    piece("\n\n", 0, 4);
  }
  Pb trainer;
  trainer.var(3, static_cast<uint64_t>(model_type));
  trainer.var(35, 1);
  trainer.var(43, static_cast<uint64_t>(-1));
  m.bytes(2, trainer.b);
  Pb norm;
  norm.bytes(1, "identity");
  norm.var(3, dummy_prefix ? 1 : 0);
  norm.var(4, 0);
  m.bytes(3, norm.b);
  return m.b;
}

std::vector<uint8_t> to_vec(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

std::vector<uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void mutate(std::vector<uint8_t>& b, std::mt19937_64& rng) {
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
      case 2: b[pos] = (rng() & 1) ? 0xff : 0x80; break;  // long / unterminated varints
      case 3: b.resize(pos); break;                        // truncation
      case 4: b.insert(b.begin() + static_cast<std::ptrdiff_t>(pos), static_cast<uint8_t>(rng())); break;
      default: {
        const size_t len = 1 + rng() % 32;
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
  std::vector<std::vector<uint8_t>> inputs = {
      to_vec(seed_model(2, true, false)), to_vec(seed_model(2, false, true)), to_vec(seed_model(1, true, false))};
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
        std::ofstream out(dir / ("seed" + std::to_string(k) + ".model"), std::ios::binary);
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
      b.resize(rng() % b.size());  // large real models: mostly truncations (cheap to parse)
    } else {
      mutate(b, rng);
    }
    LLVMFuzzerTestOneInput(b.data(), b.size());
  }
  std::cout << "fuzz replay: done, no crash\n";
  return 0;
}
