// Builds safetensors files for tests: tensors given as f32 values, stored as F32, F16 or BF16
// (or raw bytes with any dtype name), header written as the reference implementation does.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/fp16.hpp"

namespace geniex::test {

class SafetensorsWriter {
 public:
  // dtype "F32", "F16" or "BF16": values converted; anything else: raw bytes given.
  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
           const std::vector<float>& values) {
    std::vector<uint8_t> bytes;
    for (float v : values) {
      if (dtype == "F32") {
        uint8_t b[4];
        std::memcpy(b, &v, 4);
        bytes.insert(bytes.end(), b, b + 4);
      } else {
        const uint16_t h = dtype == "F16" ? f32_to_fp16(v) : f32_to_bf16(v);
        bytes.push_back(static_cast<uint8_t>(h & 0xFF));
        bytes.push_back(static_cast<uint8_t>(h >> 8));
      }
    }
    add_raw(name, dtype, std::move(shape), std::move(bytes));
  }
  void add_raw(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
               std::vector<uint8_t> bytes) {
    entries_.push_back({name, dtype, std::move(shape), std::move(bytes)});
  }
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  std::vector<uint8_t> bytes() const {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (!metadata_.empty()) h["__metadata__"] = metadata_;
    uint64_t off = 0;
    for (const Entry& e : entries_) {
      h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
      off += e.bytes.size();
    }
    std::string text = h.dump();
    while (text.size() % 8 != 0) text += ' ';  // padded like the reference writer
    std::vector<uint8_t> out;
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i)));
    out.insert(out.end(), text.begin(), text.end());
    for (const Entry& e : entries_) out.insert(out.end(), e.bytes.begin(), e.bytes.end());
    return out;
  }
  void write(const std::string& path) const {
    const std::vector<uint8_t> b = bytes();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }

 private:
  struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace geniex::test
