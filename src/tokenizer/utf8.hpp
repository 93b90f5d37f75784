// UTF-8 helpers shared by the tokenizer, the stream decoder and the tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace geniex::tok::utf8 {

enum class Status { Valid, Incomplete, Invalid };

struct Step {
  Status status;
  size_t len;  // Valid: sequence length; Invalid: length of the maximal ill-formed subpart (>=1);
               // Incomplete: bytes present (all of p[0..n))
};

// Classifies the sequence starting at p[0] (n >= 1) using the well-formed byte sequences of
// the Unicode standard (Table 3-7): no overlongs, no surrogates, nothing above U+10FFFF.
inline Step next(const unsigned char* p, size_t n) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {Status::Valid, 1};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Status::Invalid, 1};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= n) return {Status::Incomplete, n};
    const unsigned char b = p[i];
    const unsigned char l = i == 1 ? lo : 0x80;
    const unsigned char h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return {Status::Invalid, i};
  }
  return {Status::Valid, need};
}

inline bool is_valid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    const Step st = next(p + i, s.size() - i);
    if (st.status != Status::Valid) return false;
    i += st.len;
  }
  return true;
}

inline void append_codepoint(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes a sequence already known to be Valid.
inline uint32_t decode_valid(const unsigned char* p, size_t len) {
  switch (len) {
    case 1: return p[0];
    case 2: return (static_cast<uint32_t>(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3:
      return (static_cast<uint32_t>(p[0] & 0x0F) << 12) | (static_cast<uint32_t>(p[1] & 0x3F) << 6) |
             (p[2] & 0x3F);
    default:
      return (static_cast<uint32_t>(p[0] & 0x07) << 18) | (static_cast<uint32_t>(p[1] & 0x3F) << 12) |
             (static_cast<uint32_t>(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
}

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace geniex::tok::utf8
