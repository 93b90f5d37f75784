// MappedFile: contents of real temp files, error codes for missing files and directories,
// empty files; from_bytes copies. Also CPU feature detection against the compiler's own.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.hpp"
#include "core/mmap.hpp"
#include "core_test_seed.hpp"
#include "../common/x86_cpuid.hpp"

namespace geniex {
namespace {

// A fresh temp file holding `bytes`, removed on destruction.
class TempFile {
 public:
  explicit TempFile(const std::vector<uint8_t>& bytes) {
    std::string tmpl = ::testing::TempDir() + "geniex_mmap_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    const int fd = ::mkstemp(buf.data());
    EXPECT_GE(fd, 0) << std::strerror(errno);
    path_ = buf.data();
    size_t off = 0;
    while (fd >= 0 && off < bytes.size()) {
      const ssize_t w = ::write(fd, bytes.data() + off, bytes.size() - off);
      if (w <= 0) {
        ADD_FAILURE() << "write failed";
        break;
      }
      off += static_cast<size_t>(w);
    }
    if (fd >= 0) ::close(fd);
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<uint8_t> random_bytes(size_t n, uint32_t salt) {
  auto rng = core_test::make_rng(salt);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(byte(rng));
  return v;
}

TEST(MappedFile, ContentsMatchFile) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  for (const size_t n : {size_t{1}, size_t{3}, page - 1, page, page + 1, size_t{100003}}) {
    SCOPED_TRACE("size " + std::to_string(n));
    const auto bytes = random_bytes(n, static_cast<uint32_t>(n));
    TempFile f(bytes);
    auto r = MappedFile::open(f.path());
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    const auto& m = *r;
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->size(), n);
    EXPECT_EQ(m->path(), f.path());
    ASSERT_NE(m->data(), nullptr);
    EXPECT_EQ(std::memcmp(m->data(), bytes.data(), n), 0);
  }
}

TEST(MappedFile, MappingOutlivesUnlinkAndIsShared) {
  const auto bytes = random_bytes(5000, 77);
  std::shared_ptr<MappedFile> keep;
  {
    TempFile f(bytes);
    auto r = MappedFile::open(f.path());
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    keep = r.value();
    EXPECT_EQ(keep.use_count(), 2);
  }  // file unlinked, Result gone: the mapping stays valid through the shared_ptr
  EXPECT_EQ(keep.use_count(), 1);
  ASSERT_EQ(keep->size(), bytes.size());
  EXPECT_EQ(std::memcmp(keep->data(), bytes.data(), bytes.size()), 0);
}

TEST(MappedFile, MissingFileIsNotFound) {
  const std::string path = ::testing::TempDir() + "geniex_definitely_missing_file_9f3a1.gguf";
  ::unlink(path.c_str());
  auto r = MappedFile::open(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::NotFound);
  EXPECT_NE(r.error().message.find(path), std::string::npos) << r.error().message;
  // A missing directory component too.
  auto r2 = MappedFile::open(::testing::TempDir() + "geniex_no_such_dir_9f3a1/x.bin");
  ASSERT_FALSE(r2.has_value());
  EXPECT_EQ(r2.error().code, ErrorCode::NotFound);
  auto r3 = MappedFile::open("");
  ASSERT_FALSE(r3.has_value());
  EXPECT_EQ(r3.error().code, ErrorCode::NotFound);
}

TEST(MappedFile, DirectoryIsInvalidArgument) {
  auto r = MappedFile::open(::testing::TempDir());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument);
  auto r2 = MappedFile::open("/");
  ASSERT_FALSE(r2.has_value());
  EXPECT_EQ(r2.error().code, ErrorCode::InvalidArgument);
}

// A FIFO is not a regular file: open() must say so (InvalidArgument) rather than block in
// ::open() waiting for a writer. If it blocks, the test unblocks it by opening the write end.
TEST(MappedFile, FifoIsInvalidArgumentWithoutBlocking) {
  const std::string path = ::testing::TempDir() + "geniex_fifo_" + std::to_string(::getpid());
  ::unlink(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  auto fut = std::async(std::launch::async, [&] { return MappedFile::open(path); });
  const bool finished = fut.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
  EXPECT_TRUE(finished) << "MappedFile::open blocked on a FIFO";
  int writer = -1;
  if (!finished) writer = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);  // releases the reader
  auto r = fut.get();
  if (writer >= 0) ::close(writer);
  ::unlink(path.c_str());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument) << r.error().to_string();
}

TEST(MappedFile, CharacterDeviceIsInvalidArgument) {
  auto r = MappedFile::open("/dev/null");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::InvalidArgument);
}

TEST(MappedFile, FileUnderARegularFileIsAnError) {
  TempFile f({1, 2, 3});
  auto r = MappedFile::open(f.path() + "/inner");  // ENOTDIR
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::IoError);
}

TEST(MappedFile, UnreadableFileIsIoError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root can read any file";
  TempFile f({1, 2, 3});
  ASSERT_EQ(::chmod(f.path().c_str(), 0), 0);
  auto r = MappedFile::open(f.path());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::IoError);
}

TEST(MappedFile, EmptyFileIsOk) {
  TempFile f({});
  auto r = MappedFile::open(f.path());
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_EQ((*r)->size(), 0u);
  EXPECT_EQ((*r)->path(), f.path());
}

TEST(MappedFile, FromBytesCopies) {
  std::vector<uint8_t> bytes = random_bytes(1000, 5);
  const std::vector<uint8_t> original = bytes;
  auto m = MappedFile::from_bytes(bytes.data(), bytes.size());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->size(), bytes.size());
  EXPECT_EQ(m->path(), "<memory>");
  EXPECT_NE(m->data(), bytes.data());
  std::fill(bytes.begin(), bytes.end(), 0);  // the copy must not follow the source
  EXPECT_EQ(std::memcmp(m->data(), original.data(), original.size()), 0);
  auto empty = MappedFile::from_bytes(nullptr, 0);
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->size(), 0u);
}

// The tiers above AVX2 use AVX2, FMA and F16C, so a mask that takes those away
// (GENIEX_CPU_DISABLE=avx2, run by ctest as test_core_masked_avx2) takes the tiers too.
TEST(CpuFeatures, UpperTiersImplyAvx2) {
  const CpuFeatures& f = cpu_features();
  if (f.avx512f || f.avx512bw || f.avx512vnni || f.avxvnni || f.amx_int8) {
    EXPECT_TRUE(f.avx2 && f.fma && f.f16c) << f.to_string();
  }
  if (f.amx_int8) {
    EXPECT_TRUE(f.avx512f && f.avx512bw) << f.to_string();
  }
}

TEST(CpuFeatures, AgreeWithCompilerDetection) {
  const CpuFeatures& f = cpu_features();
  EXPECT_EQ(&f, &cpu_features());  // detected once
  const std::string s = f.to_string();
  EXPECT_FALSE(s.empty());
  if (s == "none") {
    EXPECT_FALSE(f.avx2 || f.fma || f.f16c || f.avx512f || f.neon);
  }
  auto listed = [&](const char* name) {
    const std::string padded = " " + s + " ";
    return padded.find(std::string(" ") + name + " ") != std::string::npos;
  };
  EXPECT_EQ(listed("avx2"), f.avx2);
  EXPECT_EQ(listed("fma"), f.fma);
  EXPECT_EQ(listed("f16c"), f.f16c);
  EXPECT_EQ(listed("avx512f"), f.avx512f);
  EXPECT_EQ(listed("neon"), f.neon);
#if defined(__x86_64__) || defined(__i386__)
  if (std::getenv("GENIEX_CPU_DISABLE") != nullptr) GTEST_SKIP() << "features masked by env";
  EXPECT_EQ(f.avx2, __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(f.fma, __builtin_cpu_supports("fma") != 0);
  EXPECT_EQ(f.f16c, geniex::test::x86_f16c_usable());
  EXPECT_EQ(f.avx512f, __builtin_cpu_supports("avx512f") != 0);
  EXPECT_EQ(f.avx512bw, __builtin_cpu_supports("avx512bw") != 0);
  EXPECT_FALSE(f.neon);
#endif
}

}  // namespace
}  // namespace geniex
