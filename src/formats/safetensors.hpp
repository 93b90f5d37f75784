// safetensors reader (validating, zero-copy over an mmap) and Hugging Face folder reader
// (model.safetensors, or model.safetensors.index.json naming the shards).
//
// Layout (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}, then the data section; offsets are relative to its start.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.hpp"
#include "core/mmap.hpp"
#include "core/result.hpp"

namespace geniex::safetensors {

struct Tensor {
  std::string name;
  std::string dtype;             // as in the file: "F32", "BF16", "I64", ...
  std::optional<DType> type;     // F32, F16 or BF16; nullopt for dtypes GenieX cannot read
  std::vector<int64_t> shape;    // outermost first (PyTorch order); empty for a scalar
  uint64_t n_elements = 0;
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // points into the mapping
  std::string file;               // path of the file holding it (for messages)

  std::string shape_string() const;  // "[64, 512]"
};

// Element size of a safetensors dtype name; nullopt when the name is not a safetensors dtype.
std::optional<uint64_t> dtype_size(std::string_view dtype);

// The tensor's values as f32 (F32, F16 and BF16 only: others are an Unsupported error naming the
// dtype and the tensor).
Result<std::vector<float>> to_f32(const Tensor& t);

class File {
 public:
  // Limits enforced while parsing.
  static constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // as the reference implementation
  static constexpr int kMaxJsonDepth = 32;                   // a valid header nests 3 deep

  // Opens and validates a file: header length, JSON, every tensor's dtype, shape and offsets
  // (inside the data section, size = elements x dtype size, no two tensors overlapping).
  static Result<File> open(const std::string& path);
  static Result<File> parse(std::shared_ptr<MappedFile> mapping);

  const std::vector<Tensor>& tensors() const { return tensors_; }  // in data-offset order
  const Tensor* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::shared_ptr<MappedFile>& mapping() const { return mapping_; }

 private:
  std::shared_ptr<MappedFile> mapping_;
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// The weights of a Hugging Face model folder: model.safetensors.index.json (weight_map: tensor
// -> shard file) when present, else model.safetensors, else the model*.safetensors files.
class Folder {
 public:
  static Result<Folder> open(const std::string& dir);

  const Tensor* find(std::string_view name) const;
  // Every tensor of every shard, shard by shard.
  std::vector<const Tensor*> tensors() const;
  const std::vector<std::string>& shard_paths() const { return shard_paths_; }

 private:
  std::vector<std::string> shard_paths_;
  std::vector<std::shared_ptr<File>> shards_;
  std::map<std::string, const Tensor*, std::less<>> index_;
};

}  // namespace geniex::safetensors
