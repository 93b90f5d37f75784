// Minimal leveled logging to stderr; level from GENIEX_LOG (error|warn|info|debug).
#pragma once

#include <string_view>

namespace geniex {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_message(LogLevel level, std::string_view message);

}  // namespace geniex

#define GX_LOG_DEBUG(msg) \
  do { if (::geniex::log_level() >= ::geniex::LogLevel::Debug) ::geniex::log_message(::geniex::LogLevel::Debug, (msg)); } while (0)
#define GX_LOG_INFO(msg) \
  do { if (::geniex::log_level() >= ::geniex::LogLevel::Info) ::geniex::log_message(::geniex::LogLevel::Info, (msg)); } while (0)
#define GX_LOG_WARN(msg) \
  do { if (::geniex::log_level() >= ::geniex::LogLevel::Warn) ::geniex::log_message(::geniex::LogLevel::Warn, (msg)); } while (0)
