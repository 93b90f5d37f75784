// Helpers for GGUF tests: a raw little-endian byte builder for crafting malformed files.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf.hpp"

namespace geniex::gguf::testing {

class Bytes {
 public:
  Bytes& u8(uint8_t x) { return le(x, 1); }
  Bytes& u16(uint16_t x) { return le(x, 2); }
  Bytes& u32(uint32_t x) { return le(x, 4); }
  Bytes& u64(uint64_t x) { return le(x, 8); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    v.insert(v.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(std::string_view s) {
    v.insert(v.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& zeros(size_t n) {
    v.insert(v.end(), n, 0);
    return *this;
  }
  Bytes& pad_to(size_t align) {
    while (v.size() % align != 0) v.push_back(0);
    return *this;
  }
  // GGUF header.
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    raw("GGUF");
    u32(version);
    u64(n_tensors);
    return u64(n_kv);
  }
  Bytes& kv_u32(std::string_view key, uint32_t x) { return str(key).u32(4).u32(x); }
  Bytes& kv_string(std::string_view key, std::string_view s) { return str(key).u32(8).str(s); }
  Bytes& tensor(std::string_view name, std::initializer_list<uint64_t> ne, uint32_t type,
                uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (const uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  size_t size() const { return v.size(); }

  std::vector<uint8_t> v;

 private:
  Bytes& le(uint64_t x, int n) {
    for (int i = 0; i < n; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
    return *this;
  }
};

inline Result<File> parse_bytes(const std::vector<uint8_t>& b) {
  return File::parse(MappedFile::from_bytes(b.data(), b.size()));
}

// Expects an error with `code` whose message contains every one of `parts`.
inline void expect_error(const Result<File>& r, ErrorCode code,
                         std::initializer_list<std::string_view> parts) {
  ASSERT_FALSE(r.has_value()) << "expected an error containing '"
                              << (parts.size() ? *parts.begin() : "") << "'";
  EXPECT_EQ(r.error().code, code) << r.error().to_string();
  for (const auto part : parts) {
    EXPECT_NE(r.error().message.find(part), std::string::npos)
        << "message '" << r.error().message << "' lacks '" << part << "'";
  }
}

}  // namespace geniex::gguf::testing
