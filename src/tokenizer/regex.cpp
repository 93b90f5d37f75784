#include "tokenizer/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace geniex::tok {

Result<std::shared_ptr<const Regex>> Regex::compile(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return make_error(ErrorCode::InvalidArgument,
                      "tokenizer: cannot compile regex '" + pattern + "' at offset " +
                          std::to_string(err_off) + ": " + reinterpret_cast<const char*>(buf));
  }
  std::shared_ptr<Regex> re(new Regex());
  re->pattern_ = pattern;
  re->code_ = code;
  re->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::shared_ptr<const Regex>(std::move(re));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Regex::Matcher::Matcher(const Regex& re) : re_(&re) {
  md_ = pcre2_match_data_create_from_pattern(static_cast<const pcre2_code*>(re.code_), nullptr);
}

Regex::Matcher::~Matcher() { pcre2_match_data_free(static_cast<pcre2_match_data*>(md_)); }

bool Regex::Matcher::find(std::string_view subject, size_t start, size_t* begin, size_t* end) {
  if (md_ == nullptr || start > subject.size()) return false;
  auto* md = static_cast<pcre2_match_data*>(md_);
  const auto* code = static_cast<const pcre2_code*>(re_->code_);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const int rc = re_->jit_ ? pcre2_jit_match(code, s, subject.size(), start, 0, md, nullptr)
                           : pcre2_match(code, s, subject.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc < 0) return false;  // no match, or a matching error (treated as no match)
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  if (ov[0] > ov[1] || ov[1] > subject.size()) return false;
  *begin = ov[0];
  *end = ov[1];
  return true;
}

}  // namespace geniex::tok
