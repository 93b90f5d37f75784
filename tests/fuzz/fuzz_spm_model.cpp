// libFuzzer target for the SentencePiece model reader: parse arbitrary bytes as a ModelProto; when
// that succeeds, build the tokenizer and encode/decode a few strings with it.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tokenizer/sentencepiece_model.hpp"
#include "tokenizer/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace geniex;
  using namespace geniex::tok;
  auto parsed = parse_sentencepiece_model(std::span<const uint8_t>(data, size));
  if (!parsed) {
    volatile size_t n = parsed.error().to_string().size();  // messages carry file bytes: usable?
    (void)n;
    return 0;
  }
  if (parsed->pieces.size() > 20000) return 0;  // keep each input fast
  auto cfg = sentencepiece_config(std::move(parsed).value(), "fuzz input");
  if (!cfg) return 0;
  auto tok = Tokenizer::from_config(std::move(cfg).value());
  if (!tok) return 0;
  const Tokenizer& t = **tok;
  size_t acc = 0;
  static const char* const kTexts[] = {"", "Hello world", "  a  b\n\n\tc ", "\xF0\x9F\x98\x80<s>x\xFF\xC3",
                                       "[INST] hi [/INST]</s>"};
  for (const char* text : kTexts) {
    for (int flags = 0; flags < 4; ++flags) {
      auto ids = t.encode(text, (flags & 1) != 0, (flags & 2) != 0);
      if (!ids) continue;
      for (int32_t id : *ids) {
        if (id < 0 || id >= t.n_vocab()) __builtin_trap();  // encode only emits vocabulary ids
      }
      auto text_back = t.decode(*ids, (flags & 1) != 0);
      if (text_back) acc += text_back->size();
      StreamDecoder sd(t);
      for (int32_t id : *ids) acc += sd.push(id).size();
      acc += sd.flush().size();
    }
  }
  volatile size_t sink = acc;
  (void)sink;
  return 0;
}
