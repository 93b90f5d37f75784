// A terminal progress bar on stderr: redrawn in place when stderr is a terminal, otherwise a
// plain line every tenth of the way (logs and CI stay readable).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace geniex::cli {

class ProgressBar {
 public:
  // `label` leads every line ("quantize"); `total` is the count that means done.
  ProgressBar(std::string label, uint64_t total);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Reports `done` of total, with a short note (the item in progress). Terminal redraws are
  // limited to ~20 per second.
  void update(uint64_t done, std::string_view note = {});
  // Draws 100% and ends the line (also done by the destructor if not called).
  void finish(std::string_view note = {});

  // The line drawn for a state, without escape codes (tests).
  static std::string render(std::string_view label, uint64_t done, uint64_t total, std::string_view note,
                            int bar_width);

 private:
  void draw(uint64_t done, std::string_view note, bool force);

  std::string label_;
  uint64_t total_;
  bool tty_;
  bool finished_ = false;
  int last_decile_ = -1;
  size_t last_width_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace geniex::cli
