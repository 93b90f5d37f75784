// Plain driver for the tokenizer fuzz targets when libFuzzer is unavailable (any compiler): calls
// LLVMFuzzerInitialize, feeds the seeds, then seeded random mutations of them (byte edits,
// insertions of text that tokenizers treat specially, splices of two inputs) to
// LLVMFuzzerTestOneInput until -runs or -max_total_time is reached.
//
//   fuzz_tokenizer_<target>_replay [-seed=N] [-runs=N] [-max_total_time=SECONDS] [-max_len=BYTES]
//       [-jsonl=FILE[:N]] [-prefix=HEX] [-artifact_prefix=PATH] [-write_seeds=DIR] [DIR_OR_FILE...]
//
//   -jsonl=FILE:N   N lines spread evenly over a JSON-lines file ({"text": ...} per line, e.g.
//                   tests/data/tokenizer/corpus.jsonl) become seeds; all lines without :N
//   -prefix=HEX     bytes put before each -jsonl seed (the decode target's flag byte)
//   -write_seeds=DIR  write the seeds as files into DIR and exit (a libFuzzer seed corpus)
//   -artifact_prefix=PATH  where the input is written when a property check aborts or the
//                   target crashes (default ./); the file is PATH + "crash-input"
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
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
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::vector<uint8_t>;

// The input being run, for the crash handler.
const Bytes* g_current = nullptr;
char g_artifact[4096] = "./crash-input";

void on_crash(int sig) {
  if (g_current != nullptr) {
    const int fd = ::open(g_artifact, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      const uint8_t* p = g_current->data();
      size_t left = g_current->size();
      while (left > 0) {
        const ssize_t w = ::write(fd, p, left);
        if (w <= 0) break;
        p += w;
        left -= static_cast<size_t>(w);
      }
      ::close(fd);
      static const char msg[] = "fuzz replay: the failing input was written to ";
      (void)!::write(2, msg, sizeof(msg) - 1);
      (void)!::write(2, g_artifact, std::strlen(g_artifact));
      (void)!::write(2, "\n", 1);
    }
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

Bytes read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool parse_hex(std::string_view hex, Bytes* out) {
  if (hex.size() % 2 != 0) return false;
  for (size_t i = 0; i < hex.size(); i += 2) {
    unsigned v = 0;
    for (size_t k = 0; k < 2; ++k) {
      const char c = hex[i + k];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else return false;
    }
    out->push_back(static_cast<uint8_t>(v));
  }
  return true;
}

// N lines spread evenly over a JSON-lines file; false when unreadable.
bool read_jsonl(const std::string& spec, const Bytes& prefix, std::vector<Bytes>* out) {
  std::string path = spec;
  size_t want = 0;
  if (const size_t colon = spec.rfind(':'); colon != std::string::npos && colon + 1 < spec.size() &&
                                            spec.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
    path = spec.substr(0, colon);
    want = std::strtoull(spec.c_str() + colon + 1, nullptr, 10);
  }
  std::ifstream in(path);
  if (!in) return false;
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("text") && j["text"].is_string()) texts.push_back(j["text"].get<std::string>());
  }
  if (want == 0 || want > texts.size()) want = texts.size();
  for (size_t k = 0; k < want; ++k) {
    const std::string& t = texts[k * texts.size() / want];
    Bytes b = prefix;
    b.insert(b.end(), t.begin(), t.end());
    out->push_back(std::move(b));
  }
  return true;
}

// Text that tokenizers treat specially: control-token literals of the common families,
// SentencePiece markers and byte-token spellings, partial and invalid UTF-8, whitespace runs,
// contractions and digits the pre-tokenizers split on.
const std::string_view kTokens[] = {
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<s>", "</s>",
    "<unk>", "<start_of_turn>", "<end_of_turn>", "[INST]", "<0x0A>", "<0xFF>", "\xE2\x96\x81", "\xC4\xA0",
    "<|", "|>", "'s", "'LL", " ", "  ", "\n", "\r\n", "\t", "\n\n", "   \n", "123", "4567", "\xC2\xA0",
    "\xE3\x80\x80", "\xF0\x9F\x98\x80", "\xF0\x9F", "\xE4\xBD", "\xE4\xBD\xA0", "\xCC\x81", "\xE1\x84\x80",
    "\xEF\xBF\xBD", "\xED\xA0\x80", "\xC0\xAF", "\xF4\x90\x80\x80", "\x80", "\xFF", std::string_view("\0", 1),
};

void mutate(Bytes& b, const std::vector<Bytes>& pool, std::mt19937_64& rng, size_t max_len) {
  const int n = 1 + static_cast<int>(rng() % 6);
  for (int i = 0; i < n; ++i) {
    const size_t pos = b.empty() ? 0 : rng() % (b.size() + 1);
    switch (rng() % 9) {
      case 0:
        if (!b.empty()) b[rng() % b.size()] = static_cast<uint8_t>(rng());
        break;
      case 1:
        if (!b.empty()) b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 2:
        if (!b.empty()) b.erase(b.begin() + static_cast<std::ptrdiff_t>(rng() % b.size()));
        break;
      case 3:
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(pos), static_cast<uint8_t>(rng()));
        break;
      case 4:
      case 5: {
        const std::string_view t = kTokens[rng() % (sizeof(kTokens) / sizeof(kTokens[0]))];
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(pos), t.begin(), t.end());
        break;
      }
      case 6:
        if (!b.empty()) b.resize(rng() % b.size());
        break;
      case 7: {  // repeat a chunk (long words, long whitespace runs)
        if (b.empty()) break;
        const size_t from = rng() % b.size();
        const size_t len = 1 + rng() % std::min<size_t>(16, b.size() - from);
        const Bytes chunk(b.begin() + static_cast<std::ptrdiff_t>(from),
                          b.begin() + static_cast<std::ptrdiff_t>(from + len));
        const size_t times = 1 + rng() % 8;
        for (size_t k = 0; k < times; ++k) b.insert(b.begin() + static_cast<std::ptrdiff_t>(from), chunk.begin(), chunk.end());
        break;
      }
      default: {  // splice in part of another input
        const Bytes& other = pool[rng() % pool.size()];
        if (other.empty()) break;
        const size_t from = rng() % other.size();
        const size_t len = 1 + rng() % (other.size() - from);
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(pos), other.begin() + static_cast<std::ptrdiff_t>(from),
                 other.begin() + static_cast<std::ptrdiff_t>(from + len));
        break;
      }
    }
  }
  if (b.size() > max_len) b.resize(max_len);
}

int usage(const std::string& why) {
  std::cerr << "fuzz replay: " << why
            << "\nusage: [-seed=N] [-runs=N] [-max_total_time=S] [-max_len=N] [-jsonl=FILE[:N]] [-prefix=HEX]"
               " [-artifact_prefix=PATH] [-write_seeds=DIR] [DIR_OR_FILE...]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  long runs = 1000000;
  double max_seconds = 0;
  size_t max_len = 4096;
  Bytes prefix;
  std::vector<std::string> jsonl_specs;
  std::string write_seeds;
  std::vector<Bytes> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const size_t n = std::strlen(flag);
      return arg.compare(0, n, flag) == 0 ? arg.c_str() + n : nullptr;
    };
    if (const char* v = value("-seed=")) {
      seed = std::strtoull(v, nullptr, 0);
    } else if (const char* v2 = value("-runs=")) {
      runs = std::strtol(v2, nullptr, 0);
    } else if (const char* v3 = value("-max_total_time=")) {
      max_seconds = std::strtod(v3, nullptr);
    } else if (const char* v4 = value("-max_len=")) {
      max_len = std::strtoull(v4, nullptr, 0);
    } else if (const char* v5 = value("-jsonl=")) {
      jsonl_specs.emplace_back(v5);
    } else if (const char* v6 = value("-prefix=")) {
      prefix.clear();
      if (!parse_hex(v6, &prefix)) return usage("bad -prefix (hex bytes expected): " + arg);
    } else if (const char* v7 = value("-artifact_prefix=")) {
      std::snprintf(g_artifact, sizeof(g_artifact), "%scrash-input", v7);
    } else if (const char* v8 = value("-write_seeds=")) {
      write_seeds = v8;
    } else if (!arg.empty() && arg[0] == '-') {
      return usage("unknown flag " + arg);
    } else if (std::filesystem::is_directory(arg)) {
      for (const auto& e : std::filesystem::directory_iterator(arg)) {
        if (e.is_regular_file()) inputs.push_back(read_all(e.path()));
      }
    } else if (std::filesystem::is_regular_file(arg)) {
      inputs.push_back(read_all(arg));
    } else {
      return usage("no such file or directory: " + arg);
    }
  }
  for (const std::string& spec : jsonl_specs) {
    if (!read_jsonl(spec, prefix, &inputs)) return usage("cannot read -jsonl file " + spec);
  }
  if (!write_seeds.empty()) {
    std::filesystem::create_directories(write_seeds);
    for (size_t k = 0; k < inputs.size(); ++k) {
      char name[32];
      std::snprintf(name, sizeof(name), "seed-%04zu", k);
      std::ofstream out(std::filesystem::path(write_seeds) / name, std::ios::binary);
      out.write(reinterpret_cast<const char*>(inputs[k].data()), static_cast<std::streamsize>(inputs[k].size()));
    }
    std::cout << "fuzz replay: wrote " << inputs.size() << " seeds to " << write_seeds << "\n";
    return 0;
  }
  if (inputs.empty()) inputs.push_back(prefix);  // mutations start from (nearly) nothing

  for (const int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, on_crash);
  LLVMFuzzerInitialize(&argc, &argv);

  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  for (const Bytes& in : inputs) {
    g_current = &in;
    LLVMFuzzerTestOneInput(in.data(), in.size());
  }
  std::mt19937_64 rng(seed);
  long done = 0;
  for (; done < runs; ++done) {
    if (max_seconds > 0 && (done & 63) == 0 && elapsed() > max_seconds) break;
    Bytes b = inputs[static_cast<size_t>(rng() % inputs.size())];
    mutate(b, inputs, rng, max_len);
    g_current = &b;
    LLVMFuzzerTestOneInput(b.data(), b.size());
    g_current = nullptr;
  }
  std::cout << "fuzz replay: " << inputs.size() << " seed inputs, " << done << " mutations with seed " << seed << " in "
            << elapsed() << " s: no crash, every property held\n";
  return 0;
}
