// Seeded randomness for tests: one seed per run, printed once, replayable with
// GENIEX_TEST_SEED=<n>; each test mixes in its own salt.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>

namespace geniex::test_support {

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

}  // namespace geniex::test_support
