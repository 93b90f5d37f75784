// The packed-weights cache (see packed_cache.hpp): look-up, checks, writing, stale files.
#include "runtime/packed_cache.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/dtype.hpp"
#include "core/log.hpp"
#include "formats/gguf.hpp"

namespace geniex::runtime {
namespace {

namespace fs = std::filesystem;
using backends::CpuWeightStore;

constexpr uint32_t kVersion = 1;
constexpr uint32_t kAlignment = 64;  // the plan's offsets are multiples of 64
constexpr size_t kChecksumChunk = size_t{8} << 20;
constexpr uint64_t kFreeSpaceMargin = uint64_t{256} << 20;  // left free on the cache's disk
constexpr auto kStaleTempAge = std::chrono::hours(1);
constexpr const char* kExt = ".gxpack";
constexpr const char* kKeyVersion = "geniex.pack.version";
constexpr const char* kKeyKey = "geniex.pack.key";
constexpr const char* kKeyChecksum = "geniex.pack.checksum";

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t hash_of(const std::string& s) { return XXH3_64bits(s.data(), s.size()); }

// A layout's fingerprint: the hash of its repack of 8 rows of 256 pseudo-random elements (every
// packed type's block divides 256). Bytes that any GenieX version packs differently change it.
uint64_t layout_fingerprint(const cpu::PackedKernels* k, DType type) {
  const auto rb = static_cast<size_t>(row_bytes(type, 256));
  std::vector<uint8_t> src(rb * 8), dst(rb * 8);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (uint8_t& b : src) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    b = static_cast<uint8_t>((x * 0x2545F4914F6CDD1Dull) >> 56);
  }
  k->repack(src.data(), dst.data(), 256, 8);
  return XXH3_64bits(dst.data(), dst.size());
}

// A mapping owned until released to a store.
struct Mapping {
  uint8_t* base = nullptr;
  size_t bytes = 0;
  uint64_t data_offset = 0;
  int64_t huge = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  Mapping(Mapping&& o) noexcept : base(o.base), bytes(o.bytes), data_offset(o.data_offset), huge(o.huge) { o.base = nullptr; }
  ~Mapping() {
    if (base != nullptr) ::munmap(base, bytes);
  }
  std::shared_ptr<const CpuWeightStore> adopt(const CpuWeightStore::Plan& plan) {
    auto store = CpuWeightStore::adopt(plan, base, bytes, base + data_offset, huge);
    base = nullptr;
    return store;
  }
};

std::string sys_error(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

Result<Mapping> map_cache(const std::string& path, const CpuWeightStore::Plan& plan, const std::string& key,
                          int n_threads) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const bool absent = errno == ENOENT || errno == ENOTDIR;
    return make_error(absent ? ErrorCode::NotFound : ErrorCode::IoError, sys_error("cannot open", path));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    ::close(fd);
    return make_error(ErrorCode::InvalidFormat, "'" + path + "' is not a non-empty regular file");
  }
  Mapping m;
  m.bytes = static_cast<size_t>(st.st_size);
  m.base = CpuWeightStore::map_2mib_aligned(fd, m.bytes, PROT_READ);
  ::close(fd);
  if (m.base == nullptr) return make_error(ErrorCode::IoError, sys_error("cannot map", path));
  m.huge = CpuWeightStore::advise_huge_pages(m.base, m.bytes);
  GX_ASSIGN_OR_RETURN(m.data_offset, check_packed_cache(MappedFile::view(m.base, m.bytes, path), plan, key, n_threads));
  return m;
}

// Removes the cache files of this model file other than `keep` (older versions of the file,
// or another CPU's layouts: one cache per model path), and temporary files left by writers
// that stopped more than an hour ago.
void remove_stale(const fs::path& dir, const std::string& prefix, const std::string& keep) {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == keep || name.rfind(prefix, 0) != 0) continue;
    std::error_code e2;
    if (!it->is_regular_file(e2)) continue;
    const bool done = name.size() > std::strlen(kExt) && name.compare(name.size() - std::strlen(kExt), std::string::npos, kExt) == 0;
    const bool temp = name.find(std::string(kExt) + ".tmp.") != std::string::npos;
    if (temp) {
      const auto t = fs::last_write_time(it->path(), e2);
      if (e2 || now - t < kStaleTempAge) continue;
    } else if (!done) {
      continue;
    }
    if (fs::remove(it->path(), e2)) GX_LOG_INFO("packed cache: removed stale '" + it->path().string() + "'");
  }
}

Result<Mapping> write_cache(const fs::path& dir, const std::string& name, const CpuWeightStore::Plan& plan,
                            const std::string& key, int n_threads) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(ErrorCode::IoError, "cannot create '" + dir.string() + "': " + ec.message());

  gguf::Writer w;
  w.set_u32(kKeyVersion, kVersion);
  w.set_string(kKeyKey, key);
  w.set_u64(kKeyChecksum, 0);  // the real value below: a u64 keeps the header's size
  w.set_alignment(kAlignment);
  for (const CpuWeightStore::PlanItem& item : plan.items) {
    const graph::WeightRef* t = item.weight;
    GX_TRY(w.add_tensor_info(t->name, t->type, {t->ne[0], t->ne[1]}));
  }
  std::vector<uint64_t> offsets;
  uint64_t data_size = 0;
  std::vector<uint8_t> header = w.header_bytes(&offsets, &data_size);
  for (size_t i = 0; i < plan.items.size(); ++i) {
    if (offsets[i] != plan.items[i].offset) {
      return make_error(ErrorCode::Internal, "packed cache: tensor offsets differ from the plan's");
    }
  }
  const uint64_t data_offset = (header.size() + kAlignment - 1) / kAlignment * kAlignment;
  const uint64_t file_bytes = data_offset + data_size;

  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (free_bytes < file_bytes + kFreeSpaceMargin) {
      return make_error(ErrorCode::OutOfMemory, "not enough free space in '" + dir.string() + "' for " +
                                                    std::to_string(file_bytes >> 20) + " MiB of packed weights");
    }
  }

  static std::atomic<uint64_t> counter{0};
  const fs::path final_path = dir / name;
  const fs::path temp_path = dir / (name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++));
  const int fd = ::open(temp_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return make_error(ErrorCode::IoError, sys_error("cannot create", temp_path.string()));
  struct TempFile {
    fs::path path;
    bool keep = false;
    ~TempFile() {
      std::error_code e;
      if (!keep) fs::remove(path, e);
    }
  } temp{temp_path};
  // The blocks first: writing through a mapping of a sparse file on a full disk would SIGBUS.
  if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(file_bytes)); err != 0) {
    ::close(fd);
    return make_error(ErrorCode::IoError,
                      "cannot reserve " + std::to_string(file_bytes >> 20) + " MiB for '" + temp_path.string() +
                          "': " + std::strerror(err));
  }
  Mapping m;
  m.bytes = static_cast<size_t>(file_bytes);
  m.data_offset = data_offset;
  m.base = CpuWeightStore::map_2mib_aligned(fd, m.bytes, PROT_READ | PROT_WRITE);
  ::close(fd);
  if (m.base == nullptr) return make_error(ErrorCode::IoError, sys_error("cannot map", temp_path.string()));
  // Advised before anything is written, so the page cache takes 2 MiB folios for the file and
  // later mappings of it map them whole, as the anonymous arena's huge pages were.
  m.huge = CpuWeightStore::advise_huge_pages(m.base, m.bytes);
  CpuWeightStore::repack_into(plan, m.base + data_offset, n_threads);
  w.set_u64(kKeyChecksum, packed_checksum(m.base + data_offset, static_cast<size_t>(data_size), n_threads));
  const std::vector<uint8_t> final_header = w.header_bytes(&offsets, &data_size);
  if (final_header.size() != header.size()) return make_error(ErrorCode::Internal, "packed cache: header size changed");
  std::memcpy(m.base, final_header.data(), final_header.size());
  ::mprotect(m.base, m.bytes, PROT_READ);  // the kernels only read; a stray write faults here
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    return make_error(ErrorCode::IoError, sys_error("cannot rename to", final_path.string()));
  }
  temp.keep = true;
  return m;
}

}  // namespace

uint64_t packed_checksum(const uint8_t* data, size_t bytes, int n_threads) {
  const size_t n_chunks = (bytes + kChecksumChunk - 1) / kChecksumChunk;
  std::vector<uint64_t> sums(n_chunks);
  const auto run = [&](size_t t, size_t nt) {
    for (size_t c = t; c < n_chunks; c += nt) {
      const size_t begin = c * kChecksumChunk;
      sums[c] = XXH3_64bits(data + begin, std::min(kChecksumChunk, bytes - begin));
    }
  };
  const size_t nt = std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(std::max(1, n_threads)), n_chunks));
  std::vector<std::thread> pool;
  size_t started = 1;
  try {
    for (; started < nt; ++started) pool.emplace_back(run, started, nt);
  } catch (const std::system_error&) {
  }
  run(0, nt);
  for (auto& th : pool) th.join();
  for (size_t t = started; t < nt; ++t) run(t, nt);  // shares whose thread did not start
  uint8_t le[8];
  std::vector<uint8_t> all;
  all.reserve(n_chunks * 8);
  for (const uint64_t s : sums) {
    for (int b = 0; b < 8; ++b) le[b] = static_cast<uint8_t>(s >> (8 * b));
    all.insert(all.end(), le, le + 8);
  }
  return XXH3_64bits_withSeed(all.data(), all.size(), static_cast<uint64_t>(bytes));
}

Result<SourceIdentity> identify_source(const std::string& path) {
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  if (ec) return make_error(ErrorCode::IoError, "cannot resolve '" + path + "': " + ec.message());
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) return make_error(ErrorCode::IoError, sys_error("cannot stat", real.string()));
  if (!S_ISREG(st.st_mode)) return make_error(ErrorCode::InvalidArgument, "'" + real.string() + "' is not a regular file");
  SourceIdentity id;
  id.path = real.string();
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + static_cast<uint64_t>(st.st_mtim.tv_nsec);
  id.inode = static_cast<uint64_t>(st.st_ino);
  id.device = static_cast<uint64_t>(st.st_dev);
  return id;
}

std::string packed_cache_key(const CpuWeightStore::Plan& plan, const SourceIdentity& source) {
  std::string key = "geniex packed weights " + std::to_string(kVersion) + "\nsource " + source.path + " size " +
                    std::to_string(source.size) + " mtime " + std::to_string(source.mtime_ns) + " inode " +
                    std::to_string(source.inode) + " device " + std::to_string(source.device) + "\n";
  std::unordered_map<const cpu::PackedKernels*, uint64_t> prints;
  for (const CpuWeightStore::PlanItem& item : plan.items) {
    const graph::WeightRef* t = item.weight;
    auto it = prints.find(item.kernels);
    if (it == prints.end()) it = prints.emplace(item.kernels, layout_fingerprint(item.kernels, t->type)).first;
    key += t->name + " " + std::string(dtype_name(t->type)) + " " + std::to_string(t->ne[0]) + "x" +
           std::to_string(t->ne[1]) + " @" + std::to_string(item.offset) + " " + item.kernels->name + " " +
           hex16(it->second) + "\n";
  }
  return key;
}

std::string packed_cache_file_name(const SourceIdentity& source, const std::string& key) {
  std::string stem = fs::path(source.path).stem().string();
  for (char& c : stem) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                       c == '_' || c == '-';
    if (!plain) c = '_';
  }
  if (stem.size() > 64) stem.resize(64);
  return stem + "-" + hex16(hash_of(source.path)) + "-" + hex16(hash_of(key)) + kExt;
}

Result<uint64_t> check_packed_cache(std::shared_ptr<MappedFile> file, const CpuWeightStore::Plan& plan,
                                    const std::string& key, int n_threads) {
  GX_ASSIGN_OR_RETURN(gguf::File f, gguf::File::parse(std::move(file)));
  const auto bad = [](const std::string& what) { return make_error(ErrorCode::InvalidFormat, what); };
  auto version = f.get_u64(kKeyVersion);
  if (!version) return bad("not a packed-weights file (" + version.error().message + ")");
  if (*version != kVersion) {
    return bad("packed-weights format " + std::to_string(*version) + ", this GenieX reads " + std::to_string(kVersion));
  }
  GX_ASSIGN_OR_RETURN(std::string stored_key, f.get_string(kKeyKey));
  if (stored_key != key) return bad("made for another model file, GenieX version or CPU (its key differs)");
  if (f.alignment() != kAlignment) return bad("alignment " + std::to_string(f.alignment()));
  const auto& tensors = f.tensors();
  if (tensors.size() != plan.items.size()) {
    return bad(std::to_string(tensors.size()) + " tensors, the model packs " + std::to_string(plan.items.size()));
  }
  uint64_t data_size = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const gguf::TensorInfo& t = tensors[i];
    const graph::WeightRef* w = plan.items[i].weight;
    if (t.name != w->name || t.type != w->type || t.ne[0] != w->ne[0] || t.ne[1] != w->ne[1] || t.ne[2] != 1 ||
        t.ne[3] != 1 || t.offset != plan.items[i].offset || t.nbytes != w->nbytes) {
      return bad("tensor " + std::to_string(i) + " ('" + t.name + "') does not match the model's '" + w->name + "'");
    }
    data_size = std::max(data_size, t.offset + t.nbytes);
  }
  GX_ASSIGN_OR_RETURN(uint64_t stored_sum, f.get_u64(kKeyChecksum));
  const uint64_t sum = packed_checksum(f.mapping()->data() + f.data_offset(), static_cast<size_t>(data_size), n_threads);
  if (sum != stored_sum) return bad("checksum mismatch (a torn write or a corrupted file)");
  return f.data_offset();
}

Result<PackedLoad> load_packed_weights(std::span<const graph::WeightRef* const> weights, int n_threads,
                                       const std::string& source, const std::string& cache_dir) {
  PackedLoad out;
  const auto in_memory = [&](std::string status, std::string note) -> Result<PackedLoad> {
    GX_ASSIGN_OR_RETURN(out.store, CpuWeightStore::create(weights, n_threads));
    out.status = std::move(status);
    out.note = std::move(note);
    if (!out.note.empty()) GX_LOG_INFO("packed cache: " + out.note);
    return std::move(out);
  };
  if (cache_dir.empty()) return in_memory("off", "");
  if (source.empty()) return in_memory("unavailable", "the model was built in memory, with no file to key a cache");
  const CpuWeightStore::Plan plan = CpuWeightStore::plan(weights);
  if (plan.items.empty()) return in_memory("unavailable", "no weight of this model has a packed layout on this CPU");
  auto id = identify_source(source);
  if (!id) return in_memory("unavailable", id.error().message);
  const std::string key = packed_cache_key(plan, *id);
  const std::string name = packed_cache_file_name(*id, key);
  const fs::path dir(cache_dir);
  out.path = (dir / name).string();

  // The originals' file pages out of this process first (a hit never reads them; a miss
  // repacks them again, dropping them as it goes), before the cache's pages come in: the peak
  // is then the larger of the two, not their sum.
  CpuWeightStore::release_originals(plan);
  auto hit = map_cache(out.path, plan, key, n_threads);
  if (hit) {
    out.store = hit->adopt(plan);
    out.status = "hit";
    GX_LOG_INFO("packed cache: mapped " + std::to_string(out.store->size()) + " packed weights from '" + out.path + "'");
    return out;
  }
  std::string note;
  if (hit.error().code != ErrorCode::NotFound) {
    note = "'" + out.path + "' not used (" + hit.error().message + "); rebuilt";
    GX_LOG_WARN("packed cache: " + note);
  }
  auto written = write_cache(dir, name, plan, key, n_threads);
  if (!written) {
    out.path.clear();
    return in_memory("unavailable", (note.empty() ? "" : note + "; ") + "no cache file written (" +
                                        written.error().message + ")");
  }
  out.store = written->adopt(plan);
  out.status = "written";
  out.note = std::move(note);
  GX_LOG_INFO("packed cache: wrote " + std::to_string(out.store->size()) + " packed weights to '" + out.path + "'");
  const std::string prefix = name.substr(0, name.size() - std::strlen(kExt) - 16);
  remove_stale(dir, prefix, name);
  return out;
}

}  // namespace geniex::runtime
