// GGUF metadata values: type names, typed accessors, display, constructors.
#include <charconv>
#include <cmath>
#include <limits>

#include "formats/gguf.hpp"

namespace geniex::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::Bool: return "bool";
    case ValueType::String: return "string";
    case ValueType::Array: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "unknown";
}

namespace {

bool is_unsigned(ValueType t) {
  return t == ValueType::U8 || t == ValueType::U16 || t == ValueType::U32 || t == ValueType::U64;
}
bool is_signed(ValueType t) {
  return t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32 || t == ValueType::I64;
}
bool is_float(ValueType t) { return t == ValueType::F32 || t == ValueType::F64; }

// The variant alternative may not match the type tag for hand-built values; read whichever
// numeric alternative is present.
std::optional<uint64_t> raw_unsigned(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v.data)) {
    if (*i >= 0) return static_cast<uint64_t>(*i);
  }
  return std::nullopt;
}
std::optional<int64_t> raw_signed(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v.data)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v.data)) {
    if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(*u);
    }
  }
  return std::nullopt;
}

void append_escaped(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (u < 0x20 || u == 0x7f) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\x";
          out += kHex[u >> 4];
          out += kHex[u & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

template <typename F>
void append_float(std::string& out, F v) {
  if (std::isnan(v)) {
    out += "nan";
    return;
  }
  if (std::isinf(v)) {
    out += v < 0 ? "-inf" : "inf";
    return;
  }
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  if (res.ec == std::errc()) out.append(buf, res.ptr);
  else out += "?";
}

void append_display(std::string& out, const Value& v, size_t max_items) {
  switch (v.type) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64: {
      const auto u = raw_unsigned(v);
      out += u ? std::to_string(*u) : std::string("?");
      return;
    }
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64: {
      const auto i = raw_signed(v);
      out += i ? std::to_string(*i) : std::string("?");
      return;
    }
    case ValueType::F32:
    case ValueType::F64: {
      const auto* d = std::get_if<double>(&v.data);
      if (!d) {
        out += "?";
      } else if (v.type == ValueType::F32) {
        append_float(out, static_cast<float>(*d));
      } else {
        append_float(out, *d);
      }
      return;
    }
    case ValueType::Bool: {
      const auto* b = std::get_if<bool>(&v.data);
      out += b ? (*b ? "true" : "false") : "?";
      return;
    }
    case ValueType::String: {
      const auto* s = std::get_if<std::string>(&v.data);
      if (s) append_escaped(out, *s);
      else out += "?";
      return;
    }
    case ValueType::Array: {
      const auto* a = std::get_if<Array>(&v.data);
      if (!a) {
        out += "?";
        return;
      }
      out += '[';
      const size_t shown = a->items.size() < max_items ? a->items.size() : max_items;
      for (size_t i = 0; i < shown; ++i) {
        if (i > 0) out += ", ";
        append_display(out, a->items[i], max_items);
      }
      if (shown < a->items.size()) {
        if (shown > 0) out += ", ";
        out += "... (" + std::to_string(a->items.size()) + " " +
               std::string(value_type_name(a->elem_type)) + " items)";
      }
      out += ']';
      return;
    }
  }
  out += "?";
}

}  // namespace

bool Array::operator==(const Array& other) const {
  return elem_type == other.elem_type && items == other.items;
}

bool Value::operator==(const Value& other) const {
  return type == other.type && data == other.data;
}

std::optional<uint64_t> Value::as_u64() const {
  if (is_unsigned(type) || is_signed(type)) return raw_unsigned(*this);
  return std::nullopt;
}

std::optional<int64_t> Value::as_i64() const {
  if (is_unsigned(type) || is_signed(type)) return raw_signed(*this);
  return std::nullopt;
}

std::optional<double> Value::as_f64() const {
  if (is_float(type)) {
    if (const auto* d = std::get_if<double>(&data)) return *d;
    return std::nullopt;
  }
  if (is_unsigned(type)) {
    if (const auto u = raw_unsigned(*this)) return static_cast<double>(*u);
  }
  if (is_signed(type)) {
    if (const auto i = raw_signed(*this)) return static_cast<double>(*i);
  }
  return std::nullopt;
}

std::optional<bool> Value::as_bool() const {
  if (type != ValueType::Bool) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&data)) return *b;
  return std::nullopt;
}

const std::string* Value::as_string() const {
  if (type != ValueType::String) return nullptr;
  return std::get_if<std::string>(&data);
}

const Array* Value::as_array() const {
  if (type != ValueType::Array) return nullptr;
  return std::get_if<Array>(&data);
}

std::string Value::to_display(size_t max_items) const {
  std::string out;
  append_display(out, *this, max_items);
  return out;
}

Value Value::of_u8(uint8_t v) { return Value{ValueType::U8, uint64_t{v}}; }
Value Value::of_i8(int8_t v) { return Value{ValueType::I8, int64_t{v}}; }
Value Value::of_u16(uint16_t v) { return Value{ValueType::U16, uint64_t{v}}; }
Value Value::of_i16(int16_t v) { return Value{ValueType::I16, int64_t{v}}; }
Value Value::of_u32(uint32_t v) { return Value{ValueType::U32, uint64_t{v}}; }
Value Value::of_i32(int32_t v) { return Value{ValueType::I32, int64_t{v}}; }
Value Value::of_u64(uint64_t v) { return Value{ValueType::U64, v}; }
Value Value::of_i64(int64_t v) { return Value{ValueType::I64, v}; }
Value Value::of_f32(float v) { return Value{ValueType::F32, static_cast<double>(v)}; }
Value Value::of_f64(double v) { return Value{ValueType::F64, v}; }
Value Value::of_bool(bool v) { return Value{ValueType::Bool, v}; }
Value Value::of_string(std::string v) { return Value{ValueType::String, std::move(v)}; }
Value Value::of_array(ValueType elem_type, std::vector<Value> items) {
  return Value{ValueType::Array, Array{elem_type, std::move(items)}};
}

}  // namespace geniex::gguf
