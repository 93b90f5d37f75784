// GGUF v3 writer: metadata in insertion order, tensor data aligned.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "formats/gguf.hpp"

namespace geniex::gguf {
namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr char kAlignmentKey[] = "general.alignment";

void put_le(std::vector<uint8_t>& out, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put_le(out, s.size(), 8);
  out.insert(out.end(), s.begin(), s.end());
}

uint64_t as_bits_unsigned(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v.data)) return static_cast<uint64_t>(*i);
  if (const auto* d = std::get_if<double>(&v.data)) {
    // Only exactly representable integers convert; anything else writes 0.
    if (*d >= -9.2e18 && *d <= 9.2e18) return static_cast<uint64_t>(static_cast<int64_t>(*d));
  }
  if (const auto* b = std::get_if<bool>(&v.data)) return *b ? 1 : 0;
  return 0;
}

double as_double(const Value& v) {
  if (const auto* d = std::get_if<double>(&v.data)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&v.data)) return static_cast<double>(*i);
  return 0.0;
}

// Writes the payload of a value of type `type` (no type tag). A value whose variant does not
// match `type` is converted as well as possible, so the output is always a well-formed file.
void put_payload(std::vector<uint8_t>& out, ValueType type, const Value& v) {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8: put_le(out, as_bits_unsigned(v), 1); return;
    case ValueType::U16:
    case ValueType::I16: put_le(out, as_bits_unsigned(v), 2); return;
    case ValueType::U32:
    case ValueType::I32: put_le(out, as_bits_unsigned(v), 4); return;
    case ValueType::U64:
    case ValueType::I64: put_le(out, as_bits_unsigned(v), 8); return;
    case ValueType::F32: {
      const auto f = static_cast<float>(as_double(v));
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      put_le(out, bits, 4);
      return;
    }
    case ValueType::F64: {
      const double d = as_double(v);
      uint64_t bits;
      std::memcpy(&bits, &d, 8);
      put_le(out, bits, 8);
      return;
    }
    case ValueType::Bool: {
      const auto* b = std::get_if<bool>(&v.data);
      put_le(out, b ? (*b ? 1 : 0) : (as_bits_unsigned(v) != 0 ? 1 : 0), 1);
      return;
    }
    case ValueType::String: {
      const auto* s = std::get_if<std::string>(&v.data);
      put_string(out, s ? *s : std::string());
      return;
    }
    case ValueType::Array: {
      const auto* a = std::get_if<Array>(&v.data);
      if (!a) {
        put_le(out, static_cast<uint32_t>(ValueType::U8), 4);
        put_le(out, 0, 8);
        return;
      }
      put_le(out, static_cast<uint32_t>(a->elem_type), 4);
      put_le(out, a->items.size(), 8);
      for (const Value& item : a->items) put_payload(out, a->elem_type, item);
      return;
    }
  }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

bool valid_alignment(uint64_t a) { return a != 0 && (a & (a - 1)) == 0 && a <= (1u << 30); }

}  // namespace

void Writer::set_value(const std::string& key, Value v) {
  if (key == kAlignmentKey && v.type == ValueType::U32) {
    // Keep the layout consistent with what the file will claim; an invalid value is written
    // as given (tests use that to build bad files) and the data keeps the last valid alignment.
    if (const auto a = v.as_u64(); a && valid_alignment(*a)) alignment_ = static_cast<uint32_t>(*a);
  }
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  kv_.emplace_back(key, std::move(v));
}

void Writer::set_u32(const std::string& key, uint32_t v) { set_value(key, Value::of_u32(v)); }
void Writer::set_i32(const std::string& key, int32_t v) { set_value(key, Value::of_i32(v)); }
void Writer::set_u64(const std::string& key, uint64_t v) { set_value(key, Value::of_u64(v)); }
void Writer::set_f32(const std::string& key, float v) { set_value(key, Value::of_f32(v)); }
void Writer::set_bool(const std::string& key, bool v) { set_value(key, Value::of_bool(v)); }
void Writer::set_string(const std::string& key, const std::string& v) {
  set_value(key, Value::of_string(v));
}

void Writer::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(Value::of_string(s));
  set_value(key, Value::of_array(ValueType::String, std::move(items)));
}

void Writer::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (const int32_t x : v) items.push_back(Value::of_i32(x));
  set_value(key, Value::of_array(ValueType::I32, std::move(items)));
}

void Writer::set_f32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (const float x : v) items.push_back(Value::of_f32(x));
  set_value(key, Value::of_array(ValueType::F32, std::move(items)));
}

void Writer::set_alignment(uint32_t alignment) {
  if (!valid_alignment(alignment)) return;  // ignored: the writer only builds valid layouts
  alignment_ = alignment;
  bool present = false;
  for (const auto& kv : kv_) present = present || kv.first == kAlignmentKey;
  if (alignment != kDefaultAlignment || present) set_value(kAlignmentKey, Value::of_u32(alignment));
}

Status Writer::check_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                            uint64_t* nbytes) const {
  const std::string where = "gguf writer: tensor '" + name + "'";
  if (name.empty()) return make_error(ErrorCode::InvalidArgument, "gguf writer: empty tensor name");
  for (const auto& t : tensors_) {
    if (t.name == name) return make_error(ErrorCode::InvalidArgument, where + " added twice");
  }
  if (ne.empty() || ne.size() > 4) {
    return make_error(ErrorCode::InvalidArgument,
                      where + ": needs 1..4 dimensions, got " + std::to_string(ne.size()));
  }
  int64_t n = 1;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] <= 0) {
      return make_error(ErrorCode::InvalidArgument, where + ": ne[" + std::to_string(i) +
                                                        "] must be positive, got " +
                                                        std::to_string(ne[i]));
    }
    if (ne[i] > std::numeric_limits<int64_t>::max() / n) {
      return make_error(ErrorCode::InvalidArgument, where + ": element count overflows int64");
    }
    n *= ne[i];
  }
  const DTypeInfo& info = dtype_info(type);
  if (ne[0] % info.block_size != 0) {
    return make_error(ErrorCode::InvalidArgument,
                      where + ": ne[0] = " + std::to_string(ne[0]) +
                          " is not a multiple of the " + std::string(info.name) +
                          " block size " + std::to_string(info.block_size));
  }
  const auto expected = bytes_for_elements(type, static_cast<uint64_t>(n));
  if (!expected) {
    return make_error(ErrorCode::InvalidArgument, where + ": size of " + std::to_string(n) + " " +
                                                      std::string(info.name) +
                                                      " elements overflows");
  }
  *nbytes = *expected;
  return ok_status();
}

Status Writer::add_tensor(const std::string& name, DType type, std::vector<int64_t> ne,
                          const void* data, size_t nbytes) {
  uint64_t expected = 0;
  if (auto st = check_tensor(name, type, ne, &expected); !st) return st;
  const std::string where = "gguf writer: tensor '" + name + "'";
  if (expected != nbytes) {
    int64_t n = 1;
    for (const int64_t d : ne) n *= d;
    return make_error(ErrorCode::InvalidArgument,
                      where + ": " + std::to_string(n) + " " + std::string(dtype_name(type)) +
                          " elements need " + std::to_string(expected) + " bytes, got " +
                          std::to_string(nbytes));
  }
  if (nbytes > 0 && data == nullptr) {
    return make_error(ErrorCode::InvalidArgument, where + ": null data");
  }
  PendingTensor t{name, type, std::move(ne), {}, nbytes, false};
  const auto* bytes = static_cast<const uint8_t*>(data);
  t.bytes.assign(bytes, bytes + nbytes);
  tensors_.push_back(std::move(t));
  return ok_status();
}

Status Writer::add_tensor_info(const std::string& name, DType type, std::vector<int64_t> ne) {
  uint64_t nbytes = 0;
  if (auto st = check_tensor(name, type, ne, &nbytes); !st) return st;
  tensors_.push_back(PendingTensor{name, type, std::move(ne), {}, nbytes, true});
  return ok_status();
}

std::vector<uint8_t> Writer::header_bytes(std::vector<uint64_t>* offsets,
                                          uint64_t* data_size) const {
  std::vector<uint8_t> out;
  out.insert(out.end(), {'G', 'G', 'U', 'F'});
  put_le(out, 3, 4);
  put_le(out, tensors_.size(), 8);
  put_le(out, kv_.size(), 8);
  for (const auto& [key, value] : kv_) {
    put_string(out, key);
    put_le(out, static_cast<uint32_t>(value.type), 4);
    put_payload(out, value.type, value);
  }
  uint64_t offset = 0;
  offsets->clear();
  offsets->reserve(tensors_.size());
  for (const auto& t : tensors_) {
    offset = align_up(offset, alignment_);
    offsets->push_back(offset);
    put_string(out, t.name);
    put_le(out, t.ne.size(), 4);
    for (const int64_t d : t.ne) put_le(out, static_cast<uint64_t>(d), 8);
    put_le(out, static_cast<uint32_t>(t.type), 4);
    put_le(out, offset, 8);
    offset += t.nbytes;
  }
  *data_size = offset;
  return out;
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint64_t> offsets;
  uint64_t data_size = 0;
  std::vector<uint8_t> out = header_bytes(&offsets, &data_size);
  if (tensors_.empty()) return out;
  // Data section: aligned start, each tensor at its aligned offset, no padding after the last.
  const uint64_t data_start = align_up(out.size(), alignment_);
  out.resize(data_start + data_size, 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& b = tensors_[i].bytes;
    if (!b.empty()) std::memcpy(out.data() + data_start + offsets[i], b.data(), b.size());
  }
  return out;
}

namespace {

// A FILE* that remembers the first failure and closes itself.
class OutFile {
 public:
  explicit OutFile(std::string path) : path_(std::move(path)) {}
  ~OutFile() {
    if (fp_) std::fclose(fp_);
  }
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;

  Status open() {
    fp_ = std::fopen(path_.c_str(), "wb");
    if (!fp_) {
      return make_error(ErrorCode::IoError,
                        "gguf writer: cannot create '" + path_ + "': " + std::strerror(errno));
    }
    return ok_status();
  }
  Status write(const void* data, size_t n) {
    if (n == 0) return ok_status();
    if (std::fwrite(data, 1, n, fp_) != n) {
      return make_error(ErrorCode::IoError, "gguf writer: writing '" + path_ + "' failed after " +
                                                std::to_string(written_) + " bytes: " +
                                                std::strerror(errno));
    }
    written_ += n;
    return ok_status();
  }
  Status pad_to(uint64_t pos) {
    static constexpr uint8_t kZeros[64] = {};
    while (written_ < pos) {
      const auto n = static_cast<size_t>(std::min<uint64_t>(sizeof(kZeros), pos - written_));
      if (auto st = write(kZeros, n); !st) return st;
    }
    return ok_status();
  }
  Status close() {
    std::FILE* fp = fp_;
    fp_ = nullptr;
    if (std::fclose(fp) != 0) {
      return make_error(ErrorCode::IoError,
                        "gguf writer: closing '" + path_ + "' failed: " + std::strerror(errno));
    }
    return ok_status();
  }
  uint64_t written() const { return written_; }

 private:
  std::string path_;
  std::FILE* fp_ = nullptr;
  uint64_t written_ = 0;
};

}  // namespace

Status Writer::write_file_streaming(const std::string& path, const TensorProducer& produce) const {
  std::vector<uint64_t> offsets;
  uint64_t data_size = 0;
  const std::vector<uint8_t> header = header_bytes(&offsets, &data_size);
  OutFile out(path);
  if (auto st = out.open(); !st) return st;
  if (auto st = out.write(header.data(), header.size()); !st) return st;
  const uint64_t data_start = align_up(header.size(), alignment_);
  std::vector<uint8_t> produced;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const PendingTensor& t = tensors_[i];
    if (auto st = out.pad_to(data_start + offsets[i]); !st) return st;
    const std::vector<uint8_t>* bytes = &t.bytes;
    if (t.deferred) {
      produced.clear();
      if (!produce) {
        return make_error(ErrorCode::InvalidArgument,
                          "gguf writer: tensor '" + t.name + "' has no data and no producer");
      }
      if (auto st = produce(i, t.name, produced); !st) return st;
      if (produced.size() != t.nbytes) {
        return make_error(ErrorCode::Internal,
                          "gguf writer: tensor '" + t.name + "': producer gave " +
                              std::to_string(produced.size()) + " bytes, declared " +
                              std::to_string(t.nbytes));
      }
      bytes = &produced;
    }
    if (auto st = out.write(bytes->data(), bytes->size()); !st) return st;
  }
  return out.close();
}

Status Writer::write_file(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  std::FILE* fp = std::fopen(path.c_str(), "wb");
  if (!fp) {
    return make_error(ErrorCode::IoError,
                      "gguf writer: cannot create '" + path + "': " + std::strerror(errno));
  }
  const size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), fp);
  const bool write_ok = written == bytes.size();
  const int write_errno = errno;
  const bool close_ok = std::fclose(fp) == 0;
  if (!write_ok || !close_ok) {
    return make_error(ErrorCode::IoError, "gguf writer: writing '" + path + "' failed after " +
                                              std::to_string(written) + " of " +
                                              std::to_string(bytes.size()) + " bytes: " +
                                              std::strerror(write_ok ? errno : write_errno));
  }
  return ok_status();
}

}  // namespace geniex::gguf
