// Logging implementation: one line per message, prefixed with the level.
#include "core/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace geniex {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("GENIEX_LOG");
  if (env == nullptr) return LogLevel::Warn;
  if (std::strcmp(env, "error") == 0) return LogLevel::Error;
  if (std::strcmp(env, "info") == 0) return LogLevel::Info;
  if (std::strcmp(env, "debug") == 0) return LogLevel::Debug;
  return LogLevel::Warn;
}

std::atomic<int>& level_store() {
  static std::atomic<int> level{static_cast<int>(initial_level())};
  return level;
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_store().load(std::memory_order_relaxed)); }
void set_log_level(LogLevel level) { level_store().store(static_cast<int>(level)); }

void log_message(LogLevel level, std::string_view message) {
  static const char* names[] = {"error", "warn", "info", "debug"};
  std::fprintf(stderr, "geniex %s: %.*s\n", names[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

}  // namespace geniex
