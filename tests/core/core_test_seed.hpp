// Seeded randomness for the core tests: the seed is printed once and can be replayed with
// GENIEX_TEST_SEED=<n>.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>

namespace geniex::core_test {

inline uint32_t test_seed() {
  static const uint32_t seed = [] {
    if (const char* s = std::getenv("GENIEX_TEST_SEED")) {
      return static_cast<uint32_t>(std::strtoul(s, nullptr, 10));
    }
    return std::random_device{}();
  }();
  return seed;
}

inline std::mt19937 make_rng(uint32_t salt) {
  static bool printed = false;
  if (!printed) {
    std::cout << "[ seed     ] GENIEX_TEST_SEED=" << test_seed() << "\n";
    printed = true;
  }
  return std::mt19937(test_seed() ^ (salt * 0x9e3779b9u));
}

}  // namespace geniex::core_test
