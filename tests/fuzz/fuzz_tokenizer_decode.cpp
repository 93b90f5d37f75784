// libFuzzer target: Tokenizer::decode, the per-token accessors and StreamDecoder on arbitrary
// token ids, on a real vocabulary (see fuzz_tokenizer_vocab.hpp for which one).
//
// Input: byte 0 holds flags, the rest gives the ids.
//   bit 0     skip_special for decode and the stream decoder
//   bits 1-2  how the rest becomes ids:
//             0  little-endian int32, as is (mostly far out of range, negative ones included)
//             1  little-endian uint32 folded into [-4, n_vocab + 4): mostly valid ids
//             2  little-endian uint32 folded into [-2, 598): byte tokens and the specials
//                that most vocabularies keep at low ids, where partial UTF-8 lives
//             3  the rest is text: its encode ids (parse_special = bit 3) are the ids; seeds
//                made from real text start here, so mutations stay near real token streams
// Properties, any failure aborts with a message:
//   - decode fails with OutOfRange exactly when some id is outside [0, n_vocab), and otherwise
//     returns the concatenated token_bytes of the ids (special ones dropped when skipping; one
//     leading space dropped where strips_leading_space());
//   - token_bytes / token_text / token_type / is_special / is_eog accept any id;
//   - StreamDecoder ignores out-of-range ids, only ever emits well-formed UTF-8, and all of it
//     together is decode(valid ids, skip_special) with each maximal ill-formed subpart replaced
//     by one U+FFFD;
//   - on byte-level vocabularies, decoded bytes encode and decode back to themselves (see
//     check_round_trip for normalizing vocabularies).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_tokenizer_vocab.hpp"

namespace {

using namespace geniex::fuzz;

constexpr const char* kTarget = "fuzz_tokenizer_decode";
constexpr size_t kMaxIds = 4096;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  (void)vocab(kTarget);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace geniex;
  const tok::Tokenizer& t = vocab(kTarget);
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const uint8_t flags = data[0];
  const bool skip = (flags & 1) != 0;
  const int mode = (flags >> 1) & 3;
  const int64_t n_vocab = t.n_vocab();

  std::vector<int32_t> ids;
  if (mode == 3) {
    const std::string_view text = input.substr(1, 4 * kMaxIds);
    Result<std::vector<int32_t>> enc = t.encode(text, /*add_special=*/false, /*parse_special=*/(flags & 8) != 0);
    if (!enc) fail(kTarget, "encode failed: " + enc.error().to_string(), input);
    ids = std::move(enc).value();
    if (ids.size() > kMaxIds) ids.resize(kMaxIds);
  } else {
    for (size_t i = 1; i + 4 <= size && ids.size() < kMaxIds; i += 4) {
      const uint32_t v = static_cast<uint32_t>(data[i]) | static_cast<uint32_t>(data[i + 1]) << 8 |
                         static_cast<uint32_t>(data[i + 2]) << 16 | static_cast<uint32_t>(data[i + 3]) << 24;
      if (mode == 0) {
        int32_t id = 0;
        std::memcpy(&id, &v, 4);
        ids.push_back(id);
      } else if (mode == 1) {
        ids.push_back(static_cast<int32_t>(static_cast<int64_t>(v % static_cast<uint64_t>(n_vocab + 8)) - 4));
      } else {
        ids.push_back(static_cast<int32_t>(v % 600) - 2);
      }
    }
  }

  std::vector<int32_t> valid;
  bool any_out_of_range = false;
  for (const int32_t id : ids) {
    const bool in_range = id >= 0 && id < n_vocab;
    const std::string bytes = t.token_bytes(id);
    const std::string& text = t.token_text(id);
    const tok::TokenType type = t.token_type(id);
    const bool special = t.is_special(id);
    (void)t.is_eog(id);
    if (!in_range) {
      any_out_of_range = true;
      if (!bytes.empty() || !text.empty() || type != tok::TokenType::Undefined || special) {
        fail(kTarget, "accessors of out-of-range id " + std::to_string(id) + " are not empty/Undefined", input);
      }
      continue;
    }
    valid.push_back(id);
  }
  const std::string expected = expected_decode(t, valid, skip);

  Result<std::string> all = t.decode(ids, skip);
  if (any_out_of_range) {
    if (all) fail(kTarget, "decode accepted an out-of-range id", input);
    if (all.error().code != ErrorCode::OutOfRange) {
      fail(kTarget, "decode of an out-of-range id: " + all.error().to_string() + " (expected OutOfRange)", input);
    }
  } else if (!all) {
    fail(kTarget, "decode of in-range ids failed: " + all.error().to_string(), input);
  }
  Result<std::string> dec = t.decode(valid, skip);
  if (!dec) fail(kTarget, "decode of in-range ids failed: " + dec.error().to_string(), input);
  if (*dec != expected) {
    fail(kTarget, "decode '" + show(*dec) + "' != concatenated token_bytes '" + show(expected) + "'", input);
  }

  const std::string streamed = stream_decode(kTarget, t, ids.data(), ids.size(), skip, input);
  if (streamed != replace_ill_formed(*dec)) {
    fail(kTarget, "StreamDecoder output '" + show(streamed) + "' != decode '" + show(*dec) +
                      "' with ill-formed parts replaced",
         input);
  }

  check_round_trip(kTarget, t, *dec, input);
  return 0;
}
