// TraceRecorder: collects events under a mutex and writes them as Chrome trace JSON.
#include "sched/trace.hpp"

#include <cstdio>
#include <fstream>

#include "core/log.hpp"

namespace geniex::sched {

std::string json_quote(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

namespace {
std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}
}  // namespace

TraceRecorder::TraceRecorder(std::string path) : path_(std::move(path)) {}

TraceRecorder::~TraceRecorder() {
  if (path_.empty()) return;
  const Status s = write(path_);
  if (!s) log_message(LogLevel::Error, "trace: " + s.error().message);
}

int32_t TraceRecorder::add_process(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int32_t pid = next_pid_++;
  meta_.push_back(R"({"name":"process_name","ph":"M","pid":)" + std::to_string(pid) +
                  R"(,"tid":0,"args":{"name":)" + json_quote(name) + "}}");
  meta_.push_back(R"({"name":"process_sort_index","ph":"M","pid":)" + std::to_string(pid) +
                  R"(,"tid":0,"args":{"sort_index":)" + std::to_string(pid) + "}}");
  return pid;
}

void TraceRecorder::name_row(int32_t pid, int32_t tid, const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  meta_.push_back(R"({"name":"thread_name","ph":"M","pid":)" + std::to_string(pid) + R"(,"tid":)" +
                  std::to_string(tid) + R"(,"args":{"name":)" + json_quote(name) + "}}");
  meta_.push_back(R"({"name":"thread_sort_index","ph":"M","pid":)" + std::to_string(pid) + R"(,"tid":)" +
                  std::to_string(tid) + R"(,"args":{"sort_index":)" + std::to_string(tid) + "}}");
}

void TraceRecorder::add(TraceEvent event) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(event));
}

double TraceRecorder::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - epoch_).count();
}

size_t TraceRecorder::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

std::string TraceRecorder::to_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (const std::string& m : meta_) {
    sep();
    out += m;
  }
  for (const TraceEvent& e : events_) {
    sep();
    out += "{\"name\":" + json_quote(e.name) + ",\"cat\":" + json_quote(e.cat) + ",\"ph\":\"X\",\"pid\":" +
           std::to_string(e.pid) + ",\"tid\":" + std::to_string(e.tid) + ",\"ts\":" + number(e.ts_us) +
           ",\"dur\":" + number(e.dur_us) + ",\"args\":{";
    bool first_arg = true;
    for (const auto& [k, v] : e.args) {
      if (!first_arg) out += ',';
      first_arg = false;
      out += json_quote(k) + ':' + json_quote(v);
    }
    for (const auto& [k, v] : e.num_args) {
      if (!first_arg) out += ',';
      first_arg = false;
      out += json_quote(k) + ':' + number(v);
    }
    out += "}}";
  }
  out += "\n]}\n";
  return out;
}

Status TraceRecorder::write(const std::string& path) const {
  const std::string json = to_json();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return make_error(ErrorCode::IoError, "cannot write the trace file '" + path + "'");
  f.write(json.data(), static_cast<std::streamsize>(json.size()));
  f.close();
  if (!f) return make_error(ErrorCode::IoError, "cannot write the trace file '" + path + "'");
  return ok_status();
}

}  // namespace geniex::sched
