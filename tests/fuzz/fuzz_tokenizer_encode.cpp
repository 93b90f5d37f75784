// libFuzzer target: Tokenizer::encode on arbitrary bytes, with and without parse_special and
// add_special, on a real vocabulary (see fuzz_tokenizer_vocab.hpp for which one).
// Properties, any failure aborts with a message:
//   - encode never fails and never crashes, whatever the bytes (invalid UTF-8 included);
//   - every id is in [0, n_vocab), and without parse_special none is a control token (HF and
//     llama.cpp never turn text into one);
//   - add_special only adds BOS / EOS around the ids of add_special = false, as the metadata says;
//   - decode of the ids succeeds and is the concatenated token bytes (less the dummy-prefix
//     space of SentencePiece vocabularies); on byte-level vocabularies with parse_special =
//     false it gives back the input exactly (documented for every byte string, well-formed or
//     not), or, where the vocabulary normalizes (Qwen2's NFC), what normalizing gives: the same
//     ids when encoded again;
//   - StreamDecoder over the ids only ever emits well-formed UTF-8, and all of it together is
//     decode(ids, skip_special) with each maximal ill-formed subpart replaced by one U+FFFD.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_tokenizer_vocab.hpp"

namespace {

using namespace geniex::fuzz;

constexpr const char* kTarget = "fuzz_tokenizer_encode";
constexpr size_t kMaxInput = 16384;  // longer inputs are cut: time per input stays bounded

std::string ids_to_string(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size() && i < 64; ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  if (ids.size() > 64) s += ",...";
  return s + "]";
}

// GENIEX_FUZZ_ALLOW_CONTROL=1 turns off the check that text never turns into control tokens
// without parse_special (for a vocabulary with a known failure, until it is fixed).
bool allow_control() {
  static const bool value = [] {
    const char* env = std::getenv("GENIEX_FUZZ_ALLOW_CONTROL");
    return env != nullptr && std::string_view(env) == "1";
  }();
  return value;
}

void check_one(const geniex::tok::Tokenizer& t, std::string_view text, bool parse_special) {
  using namespace geniex;
  const std::string mode = std::string(" (parse_special=") + (parse_special ? "true" : "false") + ")";
  Result<std::vector<int32_t>> plain = t.encode(text, /*add_special=*/false, parse_special);
  if (!plain) fail(kTarget, "encode failed: " + plain.error().to_string() + mode, text);
  const std::vector<int32_t>& ids = *plain;
  for (const int32_t id : ids) {
    if (id < 0 || id >= t.n_vocab()) {
      fail(kTarget, "encode returned id " + std::to_string(id) + " outside [0, " + std::to_string(t.n_vocab()) + ")" +
                        mode,
           text);
    }
    if (!parse_special && t.token_type(id) == tok::TokenType::Control && !allow_control()) {
      fail(kTarget, "encode with parse_special=false returned control token " + std::to_string(id) + " '" +
                        show(t.token_text(id)) + "' in " + ids_to_string(ids),
           text);
    }
  }

  Result<std::vector<int32_t>> full = t.encode(text, /*add_special=*/true, parse_special);
  if (!full) fail(kTarget, "encode with add_special failed: " + full.error().to_string() + mode, text);
  std::vector<int32_t> expected;
  if (t.add_bos() && t.bos_id() >= 0) expected.push_back(t.bos_id());
  expected.insert(expected.end(), ids.begin(), ids.end());
  if (t.add_eos() && t.eos_id() >= 0) expected.push_back(t.eos_id());
  if (*full != expected) {
    fail(kTarget, "encode(add_special=true) = " + ids_to_string(*full) + " is not BOS/EOS around " +
                      ids_to_string(ids) + mode,
         text);
  }

  if (!parse_special) check_round_trip(kTarget, t, text, text);

  for (const bool skip : {false, true}) {
    Result<std::string> ref = t.decode(ids, skip);
    if (!ref) fail(kTarget, "decode of encode's ids failed: " + ref.error().to_string() + mode, text);
    if (*ref != expected_decode(t, ids, skip)) {
      fail(kTarget, "decode '" + show(*ref) + "' is not the concatenated token bytes '" +
                        show(expected_decode(t, ids, skip)) + "'" + mode,
           text);
    }
    const std::string streamed = stream_decode(kTarget, t, ids.data(), ids.size(), skip, text);
    if (streamed != replace_ill_formed(*ref)) {
      fail(kTarget,
           std::string("StreamDecoder output '") + show(streamed) + "' != decode(ids, skip_special=" +
               (skip ? "true" : "false") + ") '" + show(*ref) + "' with ill-formed parts replaced" + mode,
           text);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  (void)geniex::fuzz::vocab(kTarget);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const geniex::tok::Tokenizer& t = geniex::fuzz::vocab(kTarget);
  const std::string_view text(reinterpret_cast<const char*>(data), size < kMaxInput ? size : kMaxInput);
  check_one(t, text, /*parse_special=*/false);
  check_one(t, text, /*parse_special=*/true);
  return 0;
}
