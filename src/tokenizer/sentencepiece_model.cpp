// Protobuf wire-format reader for sentencepiece's ModelProto (see sentencepiece_model.hpp).
#include "tokenizer/sentencepiece_model.hpp"

#include <cstring>
#include <string_view>

namespace geniex::tok {

namespace {

// A bounded cursor over one message; every read checks the remaining length first.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n, std::string_view what) : p_(p), end_(p + n), what_(what) {}
  bool done() const { return p_ >= end_; }
  size_t offset_in(const uint8_t* base) const { return static_cast<size_t>(p_ - base); }

  Result<uint64_t> varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p_ >= end_) return fail("truncated varint");
      const uint8_t b = *p_++;
      if (shift == 63 && (b & 0x7E) != 0) return fail("varint overflows 64 bits");
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    return fail("varint longer than 10 bytes");
  }
  Result<uint32_t> fixed32() {
    if (end_ - p_ < 4) return fail("truncated fixed32");
    uint32_t v = static_cast<uint32_t>(p_[0]) | (static_cast<uint32_t>(p_[1]) << 8) |
                 (static_cast<uint32_t>(p_[2]) << 16) | (static_cast<uint32_t>(p_[3]) << 24);
    p_ += 4;
    return v;
  }
  Result<std::span<const uint8_t>> bytes() {
    GX_ASSIGN_OR_RETURN(uint64_t len, varint());
    if (len > static_cast<uint64_t>(end_ - p_)) {
      return fail("length-delimited field of " + std::to_string(len) + " bytes runs past the end (" +
                  std::to_string(end_ - p_) + " bytes left)");
    }
    std::span<const uint8_t> s(p_, static_cast<size_t>(len));
    p_ += len;
    return s;
  }
  Result<bool> skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0: {
        GX_TRY(varint());
        return true;
      }
      case 1:
        if (end_ - p_ < 8) return fail("truncated fixed64");
        p_ += 8;
        return true;
      case 2: {
        GX_TRY(bytes());
        return true;
      }
      case 5: {
        GX_TRY(fixed32());
        return true;
      }
      default:
        return fail("unsupported wire type " + std::to_string(wire_type));
    }
  }
  Error fail(const std::string& msg) const {
    return make_error(ErrorCode::InvalidFormat,
                      "sentencepiece model: " + std::string(what_) + ": " + msg);
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  std::string_view what_;
};

struct Tag {
  uint32_t field;
  uint32_t wire;
};

Result<Tag> read_tag(Reader& r) {
  GX_ASSIGN_OR_RETURN(uint64_t key, r.varint());
  const uint64_t field = key >> 3;
  if (field == 0 || field > (1u << 29) - 1) return r.fail("invalid field number " + std::to_string(field));
  return Tag{static_cast<uint32_t>(field), static_cast<uint32_t>(key & 7)};
}

// Reads a varint field expecting wire type 0.
Result<uint64_t> want_varint(Reader& r, const Tag& t, const char* name) {
  if (t.wire != 0) return r.fail(std::string("field '") + name + "' has wire type " + std::to_string(t.wire));
  return r.varint();
}

int32_t as_int32(uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v & 0xFFFFFFFFu)); }

Result<SentencePieceModel::Piece> parse_piece(std::span<const uint8_t> b) {
  Reader r(b.data(), b.size(), "piece");
  SentencePieceModel::Piece p;
  while (!r.done()) {
    GX_ASSIGN_OR_RETURN(Tag t, read_tag(r));
    if (t.field == 1 && t.wire == 2) {
      GX_ASSIGN_OR_RETURN(auto s, r.bytes());
      p.piece.assign(reinterpret_cast<const char*>(s.data()), s.size());
    } else if (t.field == 2 && t.wire == 5) {
      GX_ASSIGN_OR_RETURN(uint32_t bits, r.fixed32());
      std::memcpy(&p.score, &bits, sizeof(bits));
    } else if (t.field == 3) {
      GX_ASSIGN_OR_RETURN(uint64_t v, want_varint(r, t, "type"));
      p.type = as_int32(v);
    } else {
      GX_TRY(r.skip(t.wire));
    }
  }
  return p;
}

Result<bool> parse_trainer(std::span<const uint8_t> b, SentencePieceModel& m) {
  Reader r(b.data(), b.size(), "trainer_spec");
  while (!r.done()) {
    GX_ASSIGN_OR_RETURN(Tag t, read_tag(r));
    int32_t* dst = nullptr;
    const char* name = "";
    switch (t.field) {
      case 3: dst = &m.model_type; name = "model_type"; break;
      case 40: dst = &m.unk_id; name = "unk_id"; break;
      case 41: dst = &m.bos_id; name = "bos_id"; break;
      case 42: dst = &m.eos_id; name = "eos_id"; break;
      case 43: dst = &m.pad_id; name = "pad_id"; break;
      default: break;
    }
    if (dst != nullptr) {
      GX_ASSIGN_OR_RETURN(uint64_t v, want_varint(r, t, name));
      *dst = as_int32(v);
    } else if (t.field == 35) {
      GX_ASSIGN_OR_RETURN(uint64_t v, want_varint(r, t, "byte_fallback"));
      m.byte_fallback = v != 0;
    } else {
      GX_TRY(r.skip(t.wire));
    }
  }
  return true;
}

Result<bool> parse_normalizer(std::span<const uint8_t> b, SentencePieceModel& m) {
  Reader r(b.data(), b.size(), "normalizer_spec");
  while (!r.done()) {
    GX_ASSIGN_OR_RETURN(Tag t, read_tag(r));
    if (t.field == 1 && t.wire == 2) {
      GX_ASSIGN_OR_RETURN(auto s, r.bytes());
      m.normalizer_name.assign(reinterpret_cast<const char*>(s.data()), s.size());
    } else if (t.field == 2 && t.wire == 2) {
      GX_ASSIGN_OR_RETURN(auto s, r.bytes());
      m.precompiled_charsmap_size = s.size();
    } else if (t.field >= 3 && t.field <= 5) {
      GX_ASSIGN_OR_RETURN(uint64_t v, want_varint(r, t, "normalizer flag"));
      bool* dst = t.field == 3 ? &m.add_dummy_prefix
                  : t.field == 4 ? &m.remove_extra_whitespaces
                                 : &m.escape_whitespaces;
      *dst = v != 0;
    } else {
      GX_TRY(r.skip(t.wire));
    }
  }
  return true;
}

}  // namespace

Result<SentencePieceModel> parse_sentencepiece_model(std::span<const uint8_t> bytes) {
  SentencePieceModel m;
  Reader r(bytes.data(), bytes.size(), "ModelProto");
  bool have_trainer = false;
  while (!r.done()) {
    const size_t at = r.offset_in(bytes.data());
    GX_ASSIGN_OR_RETURN(Tag t, read_tag(r));
    if (t.field >= 1 && t.field <= 3 && t.wire != 2) {
      return r.fail("field " + std::to_string(t.field) + " at byte " + std::to_string(at) +
                    " must be a message, has wire type " + std::to_string(t.wire));
    }
    if (t.field == 1) {
      GX_ASSIGN_OR_RETURN(auto b, r.bytes());
      auto piece = parse_piece(b);
      if (!piece) {
        return make_error(ErrorCode::InvalidFormat, piece.error().message + " (piece " +
                                                        std::to_string(m.pieces.size()) + ")");
      }
      m.pieces.push_back(std::move(piece).value());
    } else if (t.field == 2) {
      GX_ASSIGN_OR_RETURN(auto b, r.bytes());
      GX_TRY(parse_trainer(b, m));
      have_trainer = true;
    } else if (t.field == 3) {
      GX_ASSIGN_OR_RETURN(auto b, r.bytes());
      GX_TRY(parse_normalizer(b, m));
    } else {
      GX_TRY(r.skip(t.wire));
    }
  }
  if (m.pieces.empty()) return r.fail("no pieces (not a SentencePiece model file?)");
  if (!have_trainer) return r.fail("no trainer_spec (not a SentencePiece model file?)");
  return m;
}

}  // namespace geniex::tok
