// Where end-to-end tests find the real model (GENIEX_MODEL, else the fetch script's cache).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace geniex::test_support {

inline std::string default_model_path() {
  if (const char* env = std::getenv("GENIEX_MODEL")) return env;
  std::string cache;
  if (const char* c = std::getenv("GENIEX_CACHE")) cache = c;
  else if (const char* home = std::getenv("HOME")) cache = std::string(home) + "/.cache/geniex";
  return cache + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline bool model_available() { return std::filesystem::exists(default_model_path()); }

}  // namespace geniex::test_support

// The end-to-end tests need the real model; CI fetches it first (scripts/fetch_model.sh), so
// its absence is reported loudly. GENIEX_REQUIRE_MODEL=1 turns the skip into a failure.
#define GX_REQUIRE_MODEL()                                                                   \
  do {                                                                                       \
    if (!::geniex::test_support::model_available()) {                                             \
      if (std::getenv("GENIEX_REQUIRE_MODEL") != nullptr) {                                  \
        FAIL() << "model missing: " << ::geniex::test_support::default_model_path();              \
      }                                                                                      \
      GTEST_SKIP() << "model missing: " << ::geniex::test_support::default_model_path()          \
                   << " (run scripts/fetch_model.sh)";                                       \
    }                                                                                        \
  } while (0)
