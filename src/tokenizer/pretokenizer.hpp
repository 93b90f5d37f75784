// Pre-tokenization pieces shared by the byte-level BPE loaders: the named split-pattern
// registry (llama.cpp's tokenizer.ggml.pre names), the whitespace rewrite that makes PCRE2 match
// \s as Oniguruma / Rust regex do, and Unicode NFC normalization (utf8proc).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace geniex::tok {

// Split patterns of the known pre-tokenizers (Oniguruma / PCRE2 syntax, before
// expand_whitespace).
inline constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
inline constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
inline constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
inline constexpr const char* kQwen35Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
inline constexpr const char* kDigitsPattern = "\\p{N}";
// Matches a whole (non-empty) piece: "no split" for pipelines without a regex stage.
inline constexpr const char* kWholePattern = "(?s).+";

struct PreSpec {
  std::vector<std::string> splits;  // applied in order, each "isolated" (matches and gaps kept)
  bool ignore_merges = false;       // a word that is a whole token is emitted as is
  std::string normalizer;           // "" or "nfc"
};

// The pre-tokenizer named `pre` (tokenizer.ggml.pre), or nullopt when unknown.
std::optional<PreSpec> named_pre_spec(std::string_view pre);
// The names named_pre_spec accepts, comma separated (for error messages).
const char* supported_pre_names();

// Rewrites \s and \S outside character classes, and \s inside classes, as the explicit Unicode
// White_Space set that Oniguruma and Rust's regex use (PCRE2's UCP \s differs for U+0085 and,
// by version, U+180E). Escapes are copied as they are; [...] nesting is not tracked.
std::string expand_whitespace(std::string_view pattern);

// Unicode NFC of the well-formed UTF-8 runs of `text`; ill-formed bytes are kept unchanged.
// Text made only of code points below U+0300 is returned unchanged without a table lookup.
std::string normalize_nfc(std::string_view text);
// True when normalize_nfc(text) == text is certain without normalizing (fast path).
bool nfc_quick_ok(std::string_view text);

}  // namespace geniex::tok
