// GGUF reader (validating, zero-copy over an mmap) and writer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/dtype.hpp"
#include "core/mmap.hpp"
#include "core/result.hpp"

namespace geniex::gguf {

// GGUF metadata value types (ids as in the file).
enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8,
  Array = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view value_type_name(ValueType t);

struct Value;
// Arrays hold one element type; strings are copied out of the file at parse time
// (metadata is small; tokenizer vocabularies of ~150k strings parse in milliseconds).
struct Array {
  ValueType elem_type = ValueType::U8;
  std::vector<Value> items;

  bool operator==(const Array& other) const;
};

struct Value {
  ValueType type = ValueType::U8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> data;

  // Typed accessors; nullopt when the stored type does not convert losslessly.
  std::optional<uint64_t> as_u64() const;
  std::optional<int64_t> as_i64() const;
  std::optional<double> as_f64() const;
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const Array* as_array() const;
  std::string to_display(size_t max_items = 8) const;  // for `geniex info`

  // Exact equality of type and data (tests, writers).
  bool operator==(const Value& other) const;

  // Constructors with the matching type tag (the data variant holds uint64_t for unsigned
  // types, int64_t for signed ones, double for f32/f64).
  static Value of_u8(uint8_t v);
  static Value of_i8(int8_t v);
  static Value of_u16(uint16_t v);
  static Value of_i16(int16_t v);
  static Value of_u32(uint32_t v);
  static Value of_i32(int32_t v);
  static Value of_u64(uint64_t v);
  static Value of_i64(int64_t v);
  static Value of_f32(float v);
  static Value of_f64(double v);
  static Value of_bool(bool v);
  static Value of_string(std::string v);
  // Every item must have type `elem_type` (nested arrays: each item is itself an Array value).
  static Value of_array(ValueType elem_type, std::vector<Value> items);
};

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;            // relative to the start of the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // points into the mapping
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class File {
 public:
  // Opens and validates a file: header, every key/value, tensor infos, alignment, that every
  // tensor's data lies inside the file and that no two tensors share a name.
  static Result<File> open(const std::string& path);
  static Result<File> parse(std::shared_ptr<MappedFile> mapping);

  // Limits enforced while parsing.
  static constexpr int kMaxArrayDepth = 8;        // arrays nested deeper are rejected
  static constexpr uint64_t kMaxKeyBytes = 65535;  // GGUF's key length limit

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::shared_ptr<MappedFile>& mapping() const { return mapping_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  // Typed look-ups with a clear error naming the key and the types involved: NotFound when
  // the key is absent, InvalidFormat (naming the actual type) when it does not convert.
  // get_u64: any unsigned integer, or a non-negative signed one. get_f64: f32, f64 or any
  // integer. get_f64_array: arrays of any integer or float type. get_i64_array: arrays of
  // integer types whose items fit int64 (float arrays are rejected, not truncated).
  Result<uint64_t> get_u64(std::string_view key) const;
  Result<double> get_f64(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<double>> get_f64_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_i64_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  std::shared_ptr<MappedFile> mapping_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF file in memory or on disk (tests, fixtures, and later convert/quantize).
class Writer {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_value(const std::string& key, Value v);  // any type, including arrays
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_alignment(uint32_t alignment);

  // ne as in TensorInfo (innermost first); bytes must be row_bytes-consistent.
  Status add_tensor(const std::string& name, DType type, std::vector<int64_t> ne,
                    const void* data, size_t nbytes);
  // Declares a tensor whose bytes are produced later, while write_file_streaming writes the
  // file (same checks as add_tensor). to_bytes() and write_file() write such tensors as zeros.
  Status add_tensor_info(const std::string& name, DType type, std::vector<int64_t> ne);

  std::vector<uint8_t> to_bytes() const;
  Status write_file(const std::string& path) const;

  // Produces the bytes of tensor `index` (in the order tensors were added) into `bytes`,
  // which must end up exactly the declared size; an error stops the write.
  using TensorProducer =
      std::function<Status(size_t index, const std::string& name, std::vector<uint8_t>& bytes)>;
  // Writes the file front to back without holding more than one tensor's data: header,
  // metadata and tensor infos, then each tensor's bytes in order (tensors added with
  // add_tensor come from memory, those added with add_tensor_info from `produce`). The result
  // is byte-identical to to_bytes() with the same data.
  Status write_file_streaming(const std::string& path, const TensorProducer& produce) const;

  // The file's header, metadata and tensor infos as written; offsets[i] is tensor i's offset
  // in the data section, which starts at the header's size rounded up to the alignment;
  // *data_size is the data section's size (no padding after the last tensor). For writers that
  // place the tensor bytes themselves (a mapped file).
  std::vector<uint8_t> header_bytes(std::vector<uint64_t>* offsets, uint64_t* data_size) const;
  uint32_t alignment() const { return alignment_; }

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
    uint64_t nbytes = 0;
    bool deferred = false;  // bytes come from a TensorProducer
  };
  Status check_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                      uint64_t* nbytes) const;
  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace geniex::gguf
