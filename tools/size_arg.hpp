// Byte sizes on the command line (--gpu-memory): "512M", "1.5G", "2GiB", "300MB", "4096".
// Suffixes K, M, G, T (optionally followed by "B" or "iB", any case) are powers of 1024; a
// plain number is bytes; the error names `flag` unless it is empty. Kept apart from common.hpp (no CLI11) so the tests can use it.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/result.hpp"

namespace geniex::cli {

inline Result<int64_t> parse_size(std::string_view text, std::string_view flag) {
  const auto bad = [&](const std::string& why) -> Result<int64_t> {
    return make_error(ErrorCode::InvalidArgument,
                      (flag.empty() ? std::string() : std::string(flag) + ": ") + "'" + std::string(text) +
                          "' is not a size (" + why +
                          "; e.g. 512M, 1.5G, 2GiB or plain bytes)");
  };
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  const size_t start = i;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string number = s.substr(start, i - start);
  if (number.empty() || number.find_first_of("0123456789") == std::string::npos ||
      number.find('.') != number.rfind('.')) {
    return bad("no number");
  }
  std::string unit;
  for (size_t j = i; j < s.size(); ++j) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(s[j])));
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double scale = 1;
  if (!unit.empty() && unit != "b") {
    const char* const prefixes = "kmgt";
    const size_t p = std::string_view(prefixes).find(unit[0]);
    const std::string rest = unit.substr(1);
    if (p == std::string_view::npos || !(rest.empty() || rest == "b" || rest == "ib")) return bad("unknown unit");
    scale = std::pow(1024.0, static_cast<double>(p + 1));
  }
  const double value = std::strtod(number.c_str(), nullptr) * scale;
  if (!std::isfinite(value) || value >= 9.2e18) return bad("too large");
  const auto bytes = static_cast<int64_t>(std::llround(value));
  if (unit.empty() || unit == "b") {
    if (number.find('.') != std::string::npos) return bad("a byte count is a whole number");
  }
  return bytes;
}

}  // namespace geniex::cli
