// POSIX mmap of model files.
#include "core/mmap.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace geniex {

Result<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is rejected below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    return make_error(err == ENOENT ? ErrorCode::NotFound : ErrorCode::IoError,
                      "cannot open '" + path + "': " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return make_error(ErrorCode::IoError, "cannot stat '" + path + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(ErrorCode::InvalidArgument, "'" + path + "' is not a regular file");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return make_error(ErrorCode::IoError, "cannot mmap '" + path + "': " + std::strerror(err));
    }
    // Small pages for this mapping: the CPU backend repacks most weights and drops their file
    // pages (MADV_DONTNEED); with the page cache's huge folios mapped whole, one read of a small
    // tensor left in place (a norm) would map its 2 MiB neighbourhood back into the process.
    // Advice only: a kernel without it changes nothing.
#if defined(MADV_NOHUGEPAGE)
    ::madvise(p, file->size_, MADV_NOHUGEPAGE);
#endif
    file->data_ = static_cast<const uint8_t*>(p);
    file->mapped_ = true;
  }
  ::close(fd);
  return file;
}

std::shared_ptr<MappedFile> MappedFile::from_bytes(const void* data, size_t size) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  // Exactly `size` bytes, so that sanitizers catch any read past the end.
  file->owned_.reset(new uint8_t[size == 0 ? 1 : size]);
  if (size > 0) std::memcpy(file->owned_.get(), data, size);
  file->data_ = file->owned_.get();
  file->size_ = size;
  file->path_ = "<memory>";
  return file;
}

std::shared_ptr<MappedFile> MappedFile::view(const uint8_t* data, size_t size, std::string path) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->data_ = data;
  file->size_ = size;
  file->path_ = std::move(path);
  return file;
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace geniex
