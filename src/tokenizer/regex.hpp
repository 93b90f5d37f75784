// Thin PCRE2 wrapper (UTF + UCP, JIT when available) for the pre-tokenizer splits.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/result.hpp"

namespace geniex::tok {

class Regex {
 public:
  // Compiles `pattern` (PCRE2 syntax) in UTF + UCP mode and JIT-compiles it when possible.
  static Result<std::shared_ptr<const Regex>> compile(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

  // Per-thread match state (PCRE2 match data); create one per encode call or thread.
  class Matcher {
   public:
    explicit Matcher(const Regex& re);
    ~Matcher();
    Matcher(const Matcher&) = delete;
    Matcher& operator=(const Matcher&) = delete;
    // Finds the first match in subject[start, size) (subject must be well-formed UTF-8; the
    // check is skipped). Returns false when there is none; otherwise [*begin, *end).
    bool find(std::string_view subject, size_t start, size_t* begin, size_t* end);

   private:
    const Regex* re_;
    void* md_ = nullptr;  // pcre2_match_data_8
  };

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

}  // namespace geniex::tok
