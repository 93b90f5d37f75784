// Read-only memory-mapped file, shared by every Model that loads it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/result.hpp"

namespace geniex {

class MappedFile {
 public:
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path);
  // A copy of bytes owned by the object (for tests, fuzzing and in-memory files).
  static std::shared_ptr<MappedFile> from_bytes(const void* data, size_t size);
  // Bytes owned and kept alive by the caller, not copied (a mapping made elsewhere, parsed
  // while it lives).
  static std::shared_ptr<MappedFile> view(const uint8_t* data, size_t size, std::string path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::unique_ptr<uint8_t[]> owned_;
  std::string path_;
};

}  // namespace geniex
