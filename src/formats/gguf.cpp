// GGUF reader: validates every byte it relies on and never reads outside the mapping.
#include "formats/gguf.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace geniex::gguf {
namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr char kAlignmentKey[] = "general.alignment";
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8;
// Smallest possible encodings, used to bound counts before anything is reserved.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;                // key len, 1-byte key, type, u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;     // name len, n_dims, ne[0], type, offset

bool known_value_type(uint32_t id) { return id <= static_cast<uint32_t>(ValueType::F64); }

// Bytes an element of the type occupies at least (strings: their length field; arrays: their
// element type and count).
uint64_t min_encoded_bytes(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::Bool: return 1;
    case ValueType::U16:
    case ValueType::I16: return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32: return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
    case ValueType::String: return 8;
    case ValueType::Array: return 12;
  }
  return 1;
}

std::string type_description(const Value& v) {
  if (const Array* a = v.as_array()) {
    return "array of " + std::string(value_type_name(a->elem_type));
  }
  return std::string(value_type_name(v.type));
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == 0) return false;
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1fu;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0fu;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07u;
    } else {
      return false;
    }
    if (len > s.size() - i) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    static constexpr uint32_t kMinForLen[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLen[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

// A printable form of a name taken from the file (it may hold any bytes).
std::string quoted(std::string_view s) {
  std::string out = "'";
  const size_t limit = 80;
  for (size_t i = 0; i < s.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\\') {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > limit) out += "...";
  out += "'";
  return out;
}

class Parser {
 public:
  explicit Parser(const MappedFile& file)
      : data_(file.data()), size_(file.size()), path_(file.path()) {}

  Error fail(ErrorCode code, const std::string& msg) const {
    return make_error(code, "gguf '" + path_ + "': " + msg);
  }
  Error truncated(const std::string& what, uint64_t need) const {
    return fail(ErrorCode::InvalidFormat,
                "truncated: " + what + " needs " + std::to_string(need) + " bytes at offset " +
                    std::to_string(pos_) + " but only " + std::to_string(remaining()) +
                    " remain (file size " + std::to_string(size_) + ")");
  }

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename T>
  Result<T> read_le(std::string_view what) {
    if (remaining() < sizeof(T)) return truncated(std::string(what), sizeof(T));
    return static_cast<T>(take(sizeof(T)));
  }

  // Like read_le, for metadata values: the context (key, array indices) is only formatted on
  // failure, since vocabularies hold hundreds of thousands of values.
  template <typename T>
  Result<T> read_value(const char* type_name) {
    if (remaining() < sizeof(T)) {
      return truncated(value_context() + " " + type_name + " value", sizeof(T));
    }
    return static_cast<T>(take(sizeof(T)));
  }

  // Reads a length-prefixed string; `what` is built lazily, only when reporting a failure.
  template <typename What>
  Result<std::string> read_string(const What& what) {
    if (remaining() < 8) return truncated(what() + " length", 8);
    uint64_t len = 0;
    for (size_t i = 0; i < 8; ++i) len |= static_cast<uint64_t>(data_[pos_ + i]) << (8 * i);
    if (len > remaining() - 8) {
      return fail(ErrorCode::InvalidFormat,
                  what() + " has length " + std::to_string(len) + " at offset " +
                      std::to_string(pos_) + " but only " + std::to_string(remaining() - 8) +
                      " bytes remain in the file");
    }
    pos_ += 8;
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

  Status parse_value(ValueType type, int depth, Value* out);

  // Context for messages from parse_value: key and array indices.
  std::string value_context() const {
    std::string s = "key " + quoted(key_);
    for (const uint64_t i : index_path_) s += "[" + std::to_string(i) + "]";
    return s;
  }
  void set_key(std::string key) {
    key_ = std::move(key);
    index_path_.clear();
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  std::string path_;
  uint64_t take(size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(data_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }

  uint64_t pos_ = 0;
  std::string key_;
  std::vector<uint64_t> index_path_;
};

Status Parser::parse_value(ValueType type, int depth, Value* out) {
  out->type = type;
  switch (type) {
    case ValueType::U8: {
      GX_ASSIGN_OR_RETURN(const auto v, read_value<uint8_t>("u8"));
      out->data = uint64_t{v};
      return ok_status();
    }
    case ValueType::I8: {
      GX_ASSIGN_OR_RETURN(const auto v, read_value<uint8_t>("i8"));
      out->data = static_cast<int64_t>(static_cast<int8_t>(v));
      return ok_status();
    }
    case ValueType::U16: {
      GX_ASSIGN_OR_RETURN(const auto v, read_value<uint16_t>("u16"));
      out->data = uint64_t{v};
      return ok_status();
    }
    case ValueType::I16: {
      GX_ASSIGN_OR_RETURN(const auto v, read_value<uint16_t>("i16"));
      out->data = static_cast<int64_t>(static_cast<int16_t>(v));
      return ok_status();
    }
    case ValueType::U32: {
      GX_ASSIGN_OR_RETURN(const auto v, read_value<uint32_t>("u32"));
      out->data = uint64_t{v};
      return ok_status();
    }
    case ValueType::I32: {
      GX_ASSIGN_OR_RETURN(const auto v, read_value<uint32_t>("i32"));
      out->data = static_cast<int64_t>(static_cast<int32_t>(v));
      return ok_status();
    }
    case ValueType::U64: {
      GX_ASSIGN_OR_RETURN(const auto v, read_value<uint64_t>("u64"));
      out->data = uint64_t{v};
      return ok_status();
    }
    case ValueType::I64: {
      GX_ASSIGN_OR_RETURN(const auto v, read_value<uint64_t>("i64"));
      out->data = static_cast<int64_t>(v);
      return ok_status();
    }
    case ValueType::F32: {
      GX_ASSIGN_OR_RETURN(const auto v, read_value<uint32_t>("f32"));
      float f;
      static_assert(sizeof(f) == sizeof(v));
      std::memcpy(&f, &v, sizeof(f));
      out->data = static_cast<double>(f);
      return ok_status();
    }
    case ValueType::F64: {
      GX_ASSIGN_OR_RETURN(const auto v, read_value<uint64_t>("f64"));
      double d;
      static_assert(sizeof(d) == sizeof(v));
      std::memcpy(&d, &v, sizeof(d));
      out->data = d;
      return ok_status();
    }
    case ValueType::Bool: {
      const uint64_t at = pos();
      GX_ASSIGN_OR_RETURN(const auto v, read_value<uint8_t>("bool"));
      if (v > 1) {
        return fail(ErrorCode::InvalidFormat, value_context() + ": bool value at offset " +
                                                  std::to_string(at) + " must be 0 or 1, got " +
                                                  std::to_string(v));
      }
      out->data = v != 0;
      return ok_status();
    }
    case ValueType::String: {
      GX_ASSIGN_OR_RETURN(out->data, read_string([&] { return value_context() + " string"; }));
      return ok_status();
    }
    case ValueType::Array: {
      if (depth >= File::kMaxArrayDepth) {
        return fail(ErrorCode::InvalidFormat,
                    value_context() + ": arrays nested deeper than " +
                        std::to_string(File::kMaxArrayDepth) + " levels at offset " +
                        std::to_string(pos()));
      }
      const uint64_t at = pos();
      GX_ASSIGN_OR_RETURN(const uint32_t elem_id, read_value<uint32_t>("array element type"));
      if (!known_value_type(elem_id)) {
        return fail(ErrorCode::InvalidFormat,
                    value_context() + ": unknown array element type " + std::to_string(elem_id) +
                        " at offset " + std::to_string(at) + " (expected 0..12)");
      }
      const auto elem = static_cast<ValueType>(elem_id);
      GX_ASSIGN_OR_RETURN(const uint64_t count, read_value<uint64_t>("array length"));
      const uint64_t min_bytes = min_encoded_bytes(elem);
      if (count > remaining() / min_bytes) {
        return fail(ErrorCode::InvalidFormat,
                    value_context() + ": array of " + std::to_string(count) + " " +
                        std::string(value_type_name(elem)) + " items needs at least " +
                        (count > std::numeric_limits<uint64_t>::max() / min_bytes
                             ? std::string("more than 2^64")
                             : std::to_string(count * min_bytes)) +
                        " bytes but only " + std::to_string(remaining()) +
                        " remain after offset " + std::to_string(pos()));
      }
      Array arr;
      arr.elem_type = elem;
      arr.items.resize(static_cast<size_t>(count));
      index_path_.push_back(0);
      for (uint64_t i = 0; i < count; ++i) {
        index_path_.back() = i;
        GX_TRY(parse_value(elem, depth + 1, &arr.items[static_cast<size_t>(i)]));
      }
      index_path_.pop_back();
      out->data = std::move(arr);
      return ok_status();
    }
  }
  return fail(ErrorCode::Internal, "unhandled value type");
}

std::string shape_string(const TensorInfo& t) {
  std::string s = "{";
  for (int i = 0; i < t.n_dims; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(t.ne[i]);
  }
  return s + "}";
}

}  // namespace

Result<File> File::open(const std::string& path) {
  GX_ASSIGN_OR_RETURN(auto mapping, MappedFile::open(path));
  return parse(std::move(mapping));
}

Result<File> File::parse(std::shared_ptr<MappedFile> mapping) {
  if (!mapping) return make_error(ErrorCode::InvalidArgument, "gguf: null mapping");
  Parser p(*mapping);
  File f;

  // Header.
  if (mapping->size() < 4) return p.truncated("magic", 4);
  const uint8_t* d = mapping->data();
  if (!(d[0] == 'G' && d[1] == 'G' && d[2] == 'U' && d[3] == 'F')) {
    std::string got;
    for (int i = 0; i < 4; ++i) got += static_cast<char>(d[i]);
    return p.fail(ErrorCode::InvalidFormat,
                  "bad magic: expected 'GGUF', got " + quoted(got) + " (not a GGUF file)");
  }
  (void)p.read_le<uint32_t>("magic");
  GX_ASSIGN_OR_RETURN(f.version_, p.read_le<uint32_t>("version"));
  if (f.version_ != 2 && f.version_ != 3) {
    std::string hint;
    if (f.version_ == 1) hint = " (GGUF v1 uses 32-bit counts and is obsolete; re-convert the model)";
    else if ((f.version_ & 0xffffu) == 0) hint = " (the file looks big-endian, which is unsupported)";
    return p.fail(ErrorCode::InvalidFormat, "unsupported version " + std::to_string(f.version_) +
                                                ": expected 2 or 3" + hint);
  }
  GX_ASSIGN_OR_RETURN(const uint64_t tensor_count, p.read_le<uint64_t>("tensor count"));
  GX_ASSIGN_OR_RETURN(const uint64_t kv_count, p.read_le<uint64_t>("metadata kv count"));

  const uint64_t body = mapping->size() - kHeaderBytes;
  if (kv_count > body / kMinKvBytes) {
    return p.fail(ErrorCode::InvalidFormat,
                  "metadata kv count " + std::to_string(kv_count) + " cannot fit: each kv needs at least " +
                      std::to_string(kMinKvBytes) + " bytes, but only " + std::to_string(body) +
                      " bytes follow the header");
  }
  if (tensor_count > body / kMinTensorInfoBytes) {
    return p.fail(ErrorCode::InvalidFormat,
                  "tensor count " + std::to_string(tensor_count) + " cannot fit: each tensor info needs at least " +
                      std::to_string(kMinTensorInfoBytes) + " bytes, but only " +
                      std::to_string(body) + " bytes follow the header");
  }
  if (kv_count * kMinKvBytes + tensor_count * kMinTensorInfoBytes > body) {
    return p.fail(ErrorCode::InvalidFormat,
                  std::to_string(kv_count) + " kvs and " + std::to_string(tensor_count) +
                      " tensor infos need at least " +
                      std::to_string(kv_count * kMinKvBytes + tensor_count * kMinTensorInfoBytes) +
                      " bytes, but only " + std::to_string(body) + " bytes follow the header");
  }

  // Metadata.
  f.kv_.reserve(static_cast<size_t>(kv_count));
  for (uint64_t i = 0; i < kv_count; ++i) {
    const uint64_t key_at = p.pos();
    GX_ASSIGN_OR_RETURN(std::string key, p.read_string([&] {
      return "key of metadata kv #" + std::to_string(i);
    }));
    if (key.empty()) {
      return p.fail(ErrorCode::InvalidFormat, "metadata kv #" + std::to_string(i) +
                                                  " at offset " + std::to_string(key_at) +
                                                  " has an empty key");
    }
    if (key.size() > kMaxKeyBytes) {
      return p.fail(ErrorCode::InvalidFormat,
                    "metadata kv #" + std::to_string(i) + " key " + quoted(key) + " is " +
                        std::to_string(key.size()) + " bytes long (at most " +
                        std::to_string(kMaxKeyBytes) + " allowed)");
    }
    if (!valid_utf8(key)) {
      return p.fail(ErrorCode::InvalidFormat, "metadata kv #" + std::to_string(i) + " key " +
                                                  quoted(key) + " at offset " +
                                                  std::to_string(key_at) +
                                                  " is not valid UTF-8");
    }
    if (const auto it = f.kv_index_.find(key); it != f.kv_index_.end()) {
      return p.fail(ErrorCode::InvalidFormat, "duplicate metadata key " + quoted(key) +
                                                  " (kv #" + std::to_string(it->second) +
                                                  " and kv #" + std::to_string(i) + ")");
    }
    p.set_key(key);
    const uint64_t type_at = p.pos();
    GX_ASSIGN_OR_RETURN(const uint32_t type_id,
                        p.read_le<uint32_t>("value type of key " + quoted(key)));
    if (!known_value_type(type_id)) {
      return p.fail(ErrorCode::InvalidFormat,
                    "key " + quoted(key) + ": unknown value type " + std::to_string(type_id) +
                        " at offset " + std::to_string(type_at) + " (expected 0..12)");
    }
    Value value;
    GX_TRY(p.parse_value(static_cast<ValueType>(type_id), 0, &value));
    f.kv_index_.emplace(key, f.kv_.size());
    f.kv_.emplace_back(std::move(key), std::move(value));
  }

  // Alignment.
  if (const Value* a = f.find(kAlignmentKey)) {
    if (a->type != ValueType::U32) {
      return p.fail(ErrorCode::InvalidFormat, std::string("key '") + kAlignmentKey +
                                                  "' must be u32, got " + type_description(*a));
    }
    const uint64_t v = a->as_u64().value_or(0);
    if (v == 0 || (v & (v - 1)) != 0) {
      return p.fail(ErrorCode::InvalidFormat, std::string("key '") + kAlignmentKey +
                                                  "' must be a nonzero power of two, got " +
                                                  std::to_string(v));
    }
    f.alignment_ = static_cast<uint32_t>(v);
  } else {
    f.alignment_ = kDefaultAlignment;
  }

  // Tensor infos.
  if (tensor_count > p.remaining() / kMinTensorInfoBytes) {
    return p.fail(ErrorCode::InvalidFormat,
                  "tensor count " + std::to_string(tensor_count) + " cannot fit: each tensor info needs at least " +
                      std::to_string(kMinTensorInfoBytes) + " bytes, but only " +
                      std::to_string(p.remaining()) + " bytes remain after the metadata at offset " +
                      std::to_string(p.pos()));
  }
  f.tensors_.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    TensorInfo t;
    GX_ASSIGN_OR_RETURN(t.name, p.read_string([&] {
      return "name of tensor #" + std::to_string(i);
    }));
    const std::string tname = "tensor " + quoted(t.name);
    if (t.name.empty()) {
      return p.fail(ErrorCode::InvalidFormat, "tensor #" + std::to_string(i) + " has an empty name");
    }
    if (const auto it = f.tensor_index_.find(t.name); it != f.tensor_index_.end()) {
      return p.fail(ErrorCode::InvalidFormat, "duplicate " + tname + " (tensor #" +
                                                  std::to_string(it->second) + " and tensor #" +
                                                  std::to_string(i) + ")");
    }
    GX_ASSIGN_OR_RETURN(const uint32_t n_dims, p.read_le<uint32_t>(tname + " n_dims"));
    if (n_dims < 1 || n_dims > 4) {
      return p.fail(ErrorCode::InvalidFormat, tname + ": n_dims must be 1..4, got " +
                                                  std::to_string(n_dims));
    }
    t.n_dims = static_cast<int>(n_dims);
    for (uint32_t k = 0; k < n_dims; ++k) {
      GX_ASSIGN_OR_RETURN(const uint64_t ne,
                          p.read_le<uint64_t>(tname + " ne[" + std::to_string(k) + "]"));
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return p.fail(ErrorCode::InvalidFormat,
                      tname + ": ne[" + std::to_string(k) + "] must be positive, got " +
                          (ne == 0 ? std::string("0")
                                   : std::to_string(static_cast<int64_t>(ne))));
      }
      t.ne[k] = static_cast<int64_t>(ne);
    }
    GX_ASSIGN_OR_RETURN(const uint32_t type_id, p.read_le<uint32_t>(tname + " type"));
    const auto type = dtype_from_id(type_id);
    if (!type) {
      return p.fail(ErrorCode::Unsupported,
                    tname + ": unknown ggml tensor type id " + std::to_string(type_id));
    }
    t.type = *type;
    const uint64_t offset_at = p.pos();
    GX_ASSIGN_OR_RETURN(t.offset, p.read_le<uint64_t>(tname + " data offset"));

    int64_t n = 1;
    for (int k = 0; k < t.n_dims; ++k) {
      if (t.ne[k] > std::numeric_limits<int64_t>::max() / n) {
        return p.fail(ErrorCode::InvalidFormat,
                      tname + ": element count of shape " + shape_string(t) +
                          " overflows int64");
      }
      n *= t.ne[k];
    }
    const DTypeInfo& info = dtype_info(t.type);
    if (t.ne[0] % info.block_size != 0) {
      return p.fail(ErrorCode::InvalidFormat,
                    tname + " (" + std::string(info.name) + ", shape " + shape_string(t) +
                        "): ne[0] = " + std::to_string(t.ne[0]) +
                        " is not a multiple of the block size " +
                        std::to_string(info.block_size));
    }
    const auto nbytes = bytes_for_elements(t.type, static_cast<uint64_t>(n));
    if (!nbytes) {
      return p.fail(ErrorCode::InvalidFormat,
                    tname + " (" + std::string(info.name) + ", shape " + shape_string(t) +
                        "): size of " + std::to_string(n) + " elements is invalid or overflows");
    }
    t.nbytes = *nbytes;
    if (t.offset % f.alignment_ != 0) {
      return p.fail(ErrorCode::InvalidFormat,
                    tname + ": data offset " + std::to_string(t.offset) + " (at file offset " +
                        std::to_string(offset_at) + ") is not a multiple of the alignment " +
                        std::to_string(f.alignment_));
    }
    if (t.offset > std::numeric_limits<uint64_t>::max() - t.nbytes) {
      return p.fail(ErrorCode::InvalidFormat, tname + ": data offset " + std::to_string(t.offset) +
                                                  " + size " + std::to_string(t.nbytes) +
                                                  " overflows");
    }
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // Data section.
  const uint64_t end_of_infos = p.pos();
  const uint64_t pad = (f.alignment_ - end_of_infos % f.alignment_) % f.alignment_;
  f.data_offset_ = end_of_infos + pad;  // cannot overflow: end_of_infos <= file size
  if (!f.tensors_.empty() && f.data_offset_ > mapping->size()) {
    return p.fail(ErrorCode::InvalidFormat,
                  "truncated: data section starts at offset " + std::to_string(f.data_offset_) +
                      " (alignment " + std::to_string(f.alignment_) +
                      ") but the file has only " + std::to_string(mapping->size()) + " bytes");
  }
  const uint64_t data_size = f.tensors_.empty() ? 0 : mapping->size() - f.data_offset_;
  for (TensorInfo& t : f.tensors_) {
    if (t.offset + t.nbytes > data_size) {
      return p.fail(ErrorCode::InvalidFormat,
                    "tensor " + quoted(t.name) + " data [" + std::to_string(t.offset) + ", " +
                        std::to_string(t.offset + t.nbytes) + ") (" + std::to_string(t.nbytes) +
                        " bytes of " + std::string(dtype_name(t.type)) + " " + shape_string(t) +
                        ") ends past the end of the data section, which has " +
                        std::to_string(data_size) + " bytes");
    }
    t.data = mapping->data() + f.data_offset_ + t.offset;
  }
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(f.tensors_.size());
  for (const TensorInfo& t : f.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->offset < b->offset;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    if (b.offset < a.offset + a.nbytes) {
      return p.fail(ErrorCode::InvalidFormat,
                    "tensors " + quoted(a.name) + " [" + std::to_string(a.offset) + ", " +
                        std::to_string(a.offset + a.nbytes) + ") and " + quoted(b.name) + " [" +
                        std::to_string(b.offset) + ", " + std::to_string(b.offset + b.nbytes) +
                        ") overlap");
    }
  }

  f.mapping_ = std::move(mapping);
  return f;
}

const Value* File::find(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

std::string file_label(const File& f) {
  return f.mapping() ? f.mapping()->path() : std::string("<none>");
}

Error not_found(const File& f, std::string_view key) {
  return make_error(ErrorCode::NotFound,
                    "gguf '" + file_label(f) + "': metadata key " + quoted(key) + " not found");
}

Error wrong_type(const File& f, std::string_view key, const Value& v, std::string_view expected) {
  return make_error(ErrorCode::InvalidFormat, "gguf '" + file_label(f) + "': metadata key " +
                                                  quoted(key) + " has type " +
                                                  type_description(v) + ", expected " +
                                                  std::string(expected));
}

}  // namespace

Result<uint64_t> File::get_u64(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  if (const auto u = v->as_u64()) return *u;
  if (const auto i = v->as_i64()) {
    return make_error(ErrorCode::InvalidFormat, "gguf '" + file_label(*this) + "': metadata key " +
                                                    quoted(key) + " (" + type_description(*v) +
                                                    ") is " + std::to_string(*i) +
                                                    ", expected a non-negative integer");
  }
  return wrong_type(*this, key, *v, "an unsigned or non-negative integer");
}

Result<double> File::get_f64(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  if (const auto d = v->as_f64()) return *d;
  return wrong_type(*this, key, *v, "a number (f32, f64 or integer)");
}

Result<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  if (const std::string* s = v->as_string()) return *s;
  return wrong_type(*this, key, *v, "string");
}

Result<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  if (const auto b = v->as_bool()) return *b;
  return wrong_type(*this, key, *v, "bool");
}

Result<std::vector<std::string>> File::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  const Array* a = v->as_array();
  if (!a || a->elem_type != ValueType::String) return wrong_type(*this, key, *v, "array of string");
  std::vector<std::string> out;
  out.reserve(a->items.size());
  for (const Value& item : a->items) {
    const std::string* s = item.as_string();
    if (!s) return wrong_type(*this, key, *v, "array of string");
    out.push_back(*s);
  }
  return out;
}

Result<std::vector<double>> File::get_f64_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  const Array* a = v->as_array();
  const char* expected = "array of numbers";
  if (!a || a->elem_type == ValueType::String || a->elem_type == ValueType::Array ||
      a->elem_type == ValueType::Bool) {
    return wrong_type(*this, key, *v, expected);
  }
  std::vector<double> out;
  out.reserve(a->items.size());
  for (const Value& item : a->items) {
    const auto d = item.as_f64();
    if (!d) return wrong_type(*this, key, *v, expected);
    out.push_back(*d);
  }
  return out;
}

Result<std::vector<int64_t>> File::get_i64_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  const Array* a = v->as_array();
  const char* expected = "array of integers";
  if (!a || a->elem_type == ValueType::String || a->elem_type == ValueType::Array ||
      a->elem_type == ValueType::Bool || a->elem_type == ValueType::F32 ||
      a->elem_type == ValueType::F64) {
    return wrong_type(*this, key, *v, expected);
  }
  std::vector<int64_t> out;
  out.reserve(a->items.size());
  for (size_t i = 0; i < a->items.size(); ++i) {
    const auto n = a->items[i].as_i64();
    if (!n) {
      return make_error(ErrorCode::InvalidFormat,
                        "gguf '" + file_label(*this) + "': metadata key " + quoted(key) +
                            " item " + std::to_string(i) + " (" +
                            a->items[i].to_display() + ") does not fit in int64");
    }
    out.push_back(*n);
  }
  return out;
}

}  // namespace geniex::gguf
