#include "tokenizer/pretokenizer.hpp"

#include <utf8proc.h>

#include <cstdlib>

#include "tokenizer/utf8.hpp"

namespace geniex::tok {

std::optional<PreSpec> named_pre_spec(std::string_view pre) {
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2" || pre.empty()) return PreSpec{{kGpt2Pattern}, false, ""};
  if (pre == "smollm" || pre == "starcoder" || pre == "refact") {
    return PreSpec{{kDigitsPattern, kGpt2Pattern}, false, ""};
  }
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "dbrx" || pre == "smaug-bpe" ||
      pre == "falcon3") {
    return PreSpec{{kLlama3Pattern}, true, ""};
  }
  // Qwen2/2.5/3 and Qwen3.5/3.6: tokenizer.json has an NFC normalizer (llama.cpp does not
  // normalize; GenieX follows Hugging Face).
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return PreSpec{{kQwen2Pattern}, false, "nfc"};
  if (pre == "qwen35") return PreSpec{{kQwen35Pattern}, false, "nfc"};
  return std::nullopt;
}

const char* supported_pre_names() {
  return "default, gpt2, smollm, starcoder, refact, llama-bpe, llama3, dbrx, smaug-bpe, falcon3, qwen2, "
         "deepseek-r1-qwen, qwen35";
}

#define GX_WS \
  "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

std::string expand_whitespace(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char n = pattern[i + 1];
      ++i;
      if (n == 's') {
        out += in_class ? GX_WS : "[" GX_WS "]";
      } else if (n == 'S' && !in_class) {
        out += "[^" GX_WS "]";
      } else {
        out += c;
        out += n;
      }
      continue;
    }
    if (c == '[') in_class = true;
    if (c == ']') in_class = false;
    out += c;
  }
  return out;
}
#undef GX_WS

bool nfc_quick_ok(std::string_view text) {
  // Every code point below U+0300 is NFC and composes with nothing before it; their UTF-8 bytes
  // are all below 0xCC (0xCC 0x80 is U+0300).
  for (unsigned char c : text) {
    if (c >= 0xCC) return false;
  }
  return true;
}

namespace {

void append_nfc_run(std::string_view run, std::string& out) {
  if (run.empty()) return;
  if (nfc_quick_ok(run)) {
    out.append(run);
    return;
  }
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()), static_cast<utf8proc_ssize_t>(run.size()),
                   &dst, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0 || dst == nullptr) {
    out.append(run);  // cannot happen for well-formed input; keep the text rather than fail
  } else {
    out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  }
  std::free(dst);
}

}  // namespace

std::string normalize_nfc(std::string_view text) {
  if (nfc_quick_ok(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0, run = 0;
  while (i < text.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const utf8::Step st = utf8::next(p + i, text.size() - i);
    if (st.status == utf8::Status::Valid) {
      i += st.len;
      continue;
    }
    append_nfc_run(text.substr(run, i - run), out);
    out.append(text.substr(i, st.len));  // ill-formed bytes pass through
    i += st.len;
    run = i;
  }
  append_nfc_run(text.substr(run), out);
  return out;
}

}  // namespace geniex::tok
