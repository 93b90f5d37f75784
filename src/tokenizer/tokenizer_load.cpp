// Tokenizer::from_path: one entry point for every tokenizer file GenieX reads, told apart by
// content rather than by name (a renamed GGUF still loads; a text file named .gguf is refused
// with a message that says what was expected).
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "formats/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace geniex::tok {
namespace {

enum class Kind { Gguf, HfJson, SentencePiece, Unknown };

Kind sniff(const std::string& path, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot open";
    return Kind::Unknown;
  }
  std::array<char, 64> head{};
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  const std::streamsize n = in.gcount();
  if (n >= 4 && std::string_view(head.data(), 4) == "GGUF") return Kind::Gguf;
  for (std::streamsize i = 0; i < n; ++i) {  // JSON: first non-blank byte is '{'
    const char c = head[static_cast<size_t>(i)];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    if (c == '{') return Kind::HfJson;
    break;
  }
  // SentencePiece ModelProto: field 1 (pieces), wire type 2 -> first byte 0x0a.
  if (n >= 1 && static_cast<unsigned char>(head[0]) == 0x0a) return Kind::SentencePiece;
  error = n == 0 ? "empty file"
                 : "not a tokenizer file (expected a GGUF, a Hugging Face tokenizer.json or folder, "
                   "or a SentencePiece .model)";
  return Kind::Unknown;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_path(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return make_error(ErrorCode::NotFound, path + ": no such file or folder");
  }
  Result<std::unique_ptr<Tokenizer>> t = make_error(ErrorCode::Internal, "unreachable");
  if (std::filesystem::is_directory(status)) {
    t = from_hf(path);
  } else {
    std::string why;
    switch (sniff(path, why)) {
      case Kind::Gguf: {
        Result<gguf::File> file = gguf::File::open(path);
        if (!file) return file.take_error();  // gguf errors name the file
        t = from_gguf(*file);
        break;
      }
      case Kind::HfJson:
        t = from_hf(path);
        break;
      case Kind::SentencePiece:
        t = from_sentencepiece(path);
        break;
      case Kind::Unknown:
        return make_error(ErrorCode::InvalidFormat, path + ": " + why);
    }
  }
  if (!t) return make_error(t.error().code, path + ": " + t.error().message);
  return t;
}

}  // namespace geniex::tok
