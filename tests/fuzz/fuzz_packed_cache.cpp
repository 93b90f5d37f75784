// Fuzz target for the packed-weights cache's reader (runtime/packed_cache.hpp): a cache file's
// bytes checked against a fixed plan of two weights and a fixed key. The input is either a whole
// file (first byte even) or a patch of a valid cache file built here (first byte odd: the next
// two bytes give an offset, the rest overwrites the file from there; a patch past the end
// truncates or extends it), so mutations reach the checks behind the GGUF parser (version, key,
// tensors, checksum) without a committed binary seed. The valid file itself must pass.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/mmap.hpp"
#include "formats/gguf.hpp"
#include "runtime/packed_cache.hpp"

namespace {

using geniex::backends::CpuWeightStore;

struct Fixture {
  uint8_t a[288] = {};  // 8 rows of 64 Q4_0 elements
  uint8_t b[544] = {};  // 16 rows of 32 Q8_0 elements
  geniex::graph::WeightRef wa, wb;
  CpuWeightStore::Plan plan;
  std::string key = "geniex packed weights 1\nsource /fuzz/model.gguf\nfuzz 1\n";
  std::vector<uint8_t> valid;

  Fixture() {
    const auto set = [](geniex::graph::WeightRef& w, const char* name, geniex::DType type, int64_t n, int64_t rows,
                        const uint8_t* bytes, size_t nbytes) {
      w.name = name;
      w.type = type;
      w.ne[0] = n;
      w.ne[1] = rows;
      w.data = bytes;
      w.nbytes = nbytes;
    };
    set(wa, "blk.0.attn_q.weight", geniex::DType::Q4_0, 64, 8, a, sizeof a);
    set(wb, "blk.0.ffn_down.weight", geniex::DType::Q8_0, 32, 16, b, sizeof b);
    plan.items.push_back({&wa, nullptr, 0});
    plan.items.push_back({&wb, nullptr, 320});
    plan.bytes = 320 + 576;
    // The file as the cache writes it: version, key, checksum, 64-byte alignment, the tensors.
    std::vector<uint8_t> data(320 + sizeof b);
    for (size_t i = 0; i < data.size(); ++i) data[i] = i < 288 || i >= 320 ? static_cast<uint8_t>(i * 131 + 7) : 0;
    geniex::gguf::Writer w;
    w.set_u32("geniex.pack.version", 1);
    w.set_string("geniex.pack.key", key);
    w.set_u64("geniex.pack.checksum", geniex::runtime::packed_checksum(data.data(), data.size(), 1));
    w.set_alignment(64);
    if (!w.add_tensor(wa.name, wa.type, {64, 8}, data.data(), sizeof a) ||
        !w.add_tensor(wb.name, wb.type, {32, 16}, data.data() + 320, sizeof b)) {
      std::abort();
    }
    valid = w.to_bytes();
    auto ok = geniex::runtime::check_packed_cache(geniex::MappedFile::from_bytes(valid.data(), valid.size()), plan,
                                                  key, 1);
    if (!ok) {
      std::fprintf(stderr, "fuzz_packed_cache: the valid file fails: %s\n", ok.error().to_string().c_str());
      std::abort();
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture fx;
  std::vector<uint8_t> file;
  if (size == 0 || (data[0] & 1) == 0) {
    file.assign(data + (size > 0 ? 1 : 0), data + size);
  } else {
    file = fx.valid;
    const size_t off = size >= 3 ? (static_cast<size_t>(data[1]) | static_cast<size_t>(data[2]) << 8) : 0;
    const size_t n = size >= 3 ? size - 3 : 0;
    if (off > file.size()) file.resize(off);
    if (off + n > file.size()) file.resize(off + n);
    for (size_t i = 0; i < n; ++i) file[off + i] = data[3 + i];
    if (n == 0 && off < file.size()) file.resize(off);  // no patch: a truncation
  }
  auto r = geniex::runtime::check_packed_cache(geniex::MappedFile::from_bytes(file.data(), file.size()), fx.plan,
                                               fx.key, 1 + static_cast<int>(size % 3));
  volatile size_t sink = r ? static_cast<size_t>(*r) : r.error().to_string().size();
  (void)sink;
  return 0;
}
