// Progress bar for long CLI operations (quantize, convert).
#include "progress.hpp"

#include <algorithm>
#include <cstdio>
#include <unistd.h>

#include <fmt/core.h>

namespace geniex::cli {

ProgressBar::ProgressBar(std::string label, uint64_t total)
    : label_(std::move(label)), total_(std::max<uint64_t>(total, 1)), tty_(::isatty(STDERR_FILENO) != 0) {}

ProgressBar::~ProgressBar() {
  if (!finished_ && last_width_ > 0) finish();
}

std::string ProgressBar::render(std::string_view label, uint64_t done, uint64_t total, std::string_view note,
                                int bar_width) {
  total = std::max<uint64_t>(total, 1);
  done = std::min(done, total);
  const double frac = static_cast<double>(done) / static_cast<double>(total);
  std::string line = fmt::format("{}: ", label);
  if (bar_width > 0) {
    const auto filled = static_cast<int>(frac * bar_width);
    line += '[';
    line.append(static_cast<size_t>(filled), '#');
    line.append(static_cast<size_t>(bar_width - filled), '.');
    line += "] ";
  }
  line += fmt::format("{:3.0f}% ({}/{})", 100.0 * frac, done, total);
  if (!note.empty()) line += fmt::format(" {}", note);
  return line;
}

void ProgressBar::draw(uint64_t done, std::string_view note, bool force) {
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_draw_ < std::chrono::milliseconds(50)) return;
    last_draw_ = now;
    std::string line = render(label_, done, total_, note, 30);
    // Pad over a longer previous line instead of relying on terminal erase codes.
    const size_t width = line.size();
    if (width < last_width_) line.append(last_width_ - width, ' ');
    last_width_ = width;
    fmt::print(stderr, "\r{}", line);
    std::fflush(stderr);
    return;
  }
  const int decile = static_cast<int>(10 * std::min(done, total_) / total_);
  if (!force && decile == last_decile_) return;
  last_decile_ = decile;
  last_width_ = 1;
  fmt::print(stderr, "{}\n", render(label_, done, total_, note, 0));
}

void ProgressBar::update(uint64_t done, std::string_view note) { draw(done, note, false); }

void ProgressBar::finish(std::string_view note) {
  if (finished_) return;
  finished_ = true;
  if (tty_ || last_decile_ != 10) draw(total_, note, true);
  if (tty_) fmt::print(stderr, "\n");
}

}  // namespace geniex::cli
