// Execution traces in the Chrome trace event format (chrome://tracing, Perfetto): one
// complete event ("ph":"X") per split or copy a queue ran, one row (tid) per backend queue,
// one process (pid) per scheduler, rows named by metadata events. The recorder is shared by
// every scheduler that traces into one file; it writes the file when the last owner lets go
// (or on write()). Recording is off unless a scheduler is given a recorder.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/result.hpp"

namespace geniex::sched {

struct TraceEvent {
  std::string name;
  std::string cat;      // "split", "copy", "step"
  int32_t pid = 0;
  int32_t tid = 0;
  double ts_us = 0;     // since the recorder's creation
  double dur_us = 0;
  // Arguments shown with the event: (key, value) pairs; numbers are written unquoted.
  std::vector<std::pair<std::string, std::string>> args;
  std::vector<std::pair<std::string, double>> num_args;
};

class TraceRecorder {
 public:
  // path: the file written when the recorder is destroyed ("" : only on write()).
  explicit TraceRecorder(std::string path = {});
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // A new process row group named `name` (one per scheduler); returns its pid.
  int32_t add_process(const std::string& name);
  // Names row tid of process pid (a backend queue, or the host).
  void name_row(int32_t pid, int32_t tid, const std::string& name);
  void add(TraceEvent event);  // thread-safe
  double now_us() const;       // microseconds since the recorder's creation

  size_t size() const;
  std::string to_json() const;
  Status write(const std::string& path) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
  mutable std::mutex mutex_;
  std::vector<TraceEvent> events_;
  std::vector<std::string> meta_;  // metadata events, already as JSON
  int32_t next_pid_ = 1;
};

// A JSON string literal for s (quotes and escapes).
std::string json_quote(const std::string& s);

}  // namespace geniex::sched
