// safetensors parsing and validation; Hugging Face folder (single file or sharded) lookup.
#include "formats/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/fp16.hpp"

namespace geniex::safetensors {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

Error bad(const std::string& where, const std::string& what) {
  return make_error(ErrorCode::InvalidFormat, "safetensors: " + where + ": " + what);
}

// Deepest nesting of [ and { outside strings. Checked before parsing, so a hostile header
// cannot make the JSON parser or the destructor of its result recurse without bound.
int json_depth(const uint8_t* p, size_t n) {
  int depth = 0;
  int max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = p[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

std::string short_text(const std::string& s) { return s.size() > 64 ? s.substr(0, 64) + "..." : s; }

Result<uint64_t> as_count(const json& j, const std::string& where, const char* what) {
  if (!j.is_number_unsigned()) {
    // nlohmann keeps non-negative integers as unsigned; anything else (negative, float, string)
    // is not a count.
    return bad(where, std::string(what) + " " + short_text(j.dump()) + " is not a non-negative integer");
  }
  return j.get<uint64_t>();
}

}  // namespace

std::optional<uint64_t> dtype_size(std::string_view dtype) {
  static const std::pair<std::string_view, uint64_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},
  };
  for (const auto& [name, size] : kSizes) {
    if (name == dtype) return size;
  }
  return std::nullopt;
}

std::string Tensor::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Result<std::vector<float>> to_f32(const Tensor& t) {
  if (!t.type) {
    return make_error(ErrorCode::Unsupported, "safetensors: tensor '" + t.name + "' in " + t.file + " has dtype " +
                                                  t.dtype + " (supported: F32, F16, BF16)");
  }
  std::vector<float> out(t.n_elements);
  switch (*t.type) {
    case DType::F32:
      if (t.nbytes > 0) std::memcpy(out.data(), t.data, t.nbytes);
      break;
    case DType::F16:
    case DType::BF16:
      for (uint64_t i = 0; i < t.n_elements; ++i) {
        const auto h = static_cast<uint16_t>(t.data[2 * i] | (t.data[2 * i + 1] << 8));
        out[i] = *t.type == DType::F16 ? fp16_to_f32(h) : bf16_to_f32(h);
      }
      break;
    default:
      return make_error(ErrorCode::Internal, "safetensors: unexpected type for '" + t.name + "'");
  }
  return out;
}

Result<File> File::open(const std::string& path) {
  GX_ASSIGN_OR_RETURN(auto mapping, MappedFile::open(path));
  return parse(std::move(mapping));
}

Result<File> File::parse(std::shared_ptr<MappedFile> mapping) {
  if (!mapping) return make_error(ErrorCode::InvalidArgument, "safetensors: no file");
  const std::string where = mapping->path();
  const uint8_t* p = mapping->data();
  const uint64_t size = mapping->size();
  if (size < 8) return bad(where, "file of " + std::to_string(size) + " bytes is too short for the header length");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(p[i]) << (8 * i);
  if (header_len < 2 || header_len > kMaxHeaderBytes) {
    return bad(where, "header length " + std::to_string(header_len) + " is outside 2.." +
                          std::to_string(kMaxHeaderBytes) + " (not a safetensors file?)");
  }
  if (header_len > size - 8) {
    return bad(where, "header of " + std::to_string(header_len) + " bytes runs past the end of the file (" +
                          std::to_string(size) + " bytes; truncated?)");
  }
  const uint8_t* hdr = p + 8;
  if (hdr[0] != '{') return bad(where, "header does not start with '{'");
  if (json_depth(hdr, header_len) > kMaxJsonDepth) {
    return bad(where, "header JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  json j;
  try {
    j = json::parse(hdr, hdr + header_len);
  } catch (const json::exception& e) {
    return bad(where, std::string("header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return bad(where, "header is not a JSON object");

  File f;
  f.mapping_ = std::move(mapping);
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  const uint8_t* data = p + data_start;
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return bad(where, "__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) return bad(where, "__metadata__['" + short_text(k) + "'] is not a string");
        f.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string tw = "tensor '" + short_text(name) + "'";
    if (!entry.is_object()) return bad(where, tw + " is not an object");
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(key)) return bad(where, tw + " has no \"" + key + "\"");
    }
    Tensor t;
    t.name = name;
    t.file = where;
    const json& dtype = entry.at("dtype");
    if (!dtype.is_string()) return bad(where, tw + ": dtype is not a string");
    t.dtype = dtype.get<std::string>();
    const std::optional<uint64_t> elem_size = dtype_size(t.dtype);
    if (!elem_size) return bad(where, tw + " has unknown dtype '" + short_text(t.dtype) + "'");
    if (t.dtype == "F32") t.type = DType::F32;
    if (t.dtype == "F16") t.type = DType::F16;
    if (t.dtype == "BF16") t.type = DType::BF16;

    const json& shape = entry.at("shape");
    if (!shape.is_array()) return bad(where, tw + ": shape is not an array");
    if (shape.size() > 8) return bad(where, tw + " has " + std::to_string(shape.size()) + " dimensions (at most 8)");
    uint64_t n = 1;
    bool overflow = false;
    for (const json& d : shape) {
      GX_ASSIGN_OR_RETURN(const uint64_t dim, as_count(d, where, (tw + " dimension").c_str()));
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
      if (dim != 0 && n > std::numeric_limits<uint64_t>::max() / dim) overflow = true;
      if (!overflow) n *= dim;
      t.shape.push_back(static_cast<int64_t>(std::min<uint64_t>(dim, std::numeric_limits<int64_t>::max())));
    }
    if (overflow || n > std::numeric_limits<uint64_t>::max() / *elem_size) {
      return bad(where, tw + ": element count of shape " + t.shape_string() + " overflows");
    }
    t.n_elements = n;

    const json& offs = entry.at("data_offsets");
    if (!offs.is_array() || offs.size() != 2) return bad(where, tw + ": data_offsets is not [begin, end]");
    GX_ASSIGN_OR_RETURN(const uint64_t begin, as_count(offs[0], where, (tw + " data_offsets begin").c_str()));
    GX_ASSIGN_OR_RETURN(const uint64_t end, as_count(offs[1], where, (tw + " data_offsets end").c_str()));
    if (begin > end) {
      return bad(where, tw + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                            "] end before they begin");
    }
    if (end > data_size) {
      return bad(where, tw + ": data ends at " + std::to_string(end) + ", past the data section of " +
                            std::to_string(data_size) + " bytes (truncated file?)");
    }
    t.nbytes = end - begin;
    if (t.nbytes != n * *elem_size) {
      return bad(where, tw + ": " + std::to_string(t.nbytes) + " bytes of data, but " + t.dtype + " " +
                            t.shape_string() + " needs " + std::to_string(n * *elem_size));
    }
    t.data = data + begin;
    f.tensors_.push_back(std::move(t));
  }
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const Tensor& a, const Tensor& b) {
    return a.data != b.data ? a.data < b.data : a.nbytes < b.nbytes;
  });
  for (size_t i = 0; i < f.tensors_.size(); ++i) {
    const Tensor& t = f.tensors_[i];
    if (i > 0) {
      const Tensor& prev = f.tensors_[i - 1];
      if (t.nbytes > 0 && prev.nbytes > 0 && t.data < prev.data + prev.nbytes) {
        return bad(where, "tensors '" + short_text(prev.name) + "' and '" + short_text(t.name) + "' overlap");
      }
    }
    f.index_.emplace(t.name, i);
  }
  return f;
}

const Tensor* File::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Result<std::string> read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return make_error(ErrorCode::IoError, "safetensors: cannot open " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return make_error(ErrorCode::IoError, "safetensors: read error on " + p.string());
  return ss.str();
}

// Shard names from an index file: plain file names in the folder (no paths, so an index cannot
// point outside it), in order of first appearance.
Result<std::vector<std::string>> shards_from_index(const fs::path& index_path,
                                                   std::map<std::string, std::string>& weight_map) {
  const std::string where = index_path.string();
  GX_ASSIGN_OR_RETURN(const std::string text, read_text(index_path));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return bad(where, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object()) {
    return bad(where, "has no \"weight_map\" object");
  }
  std::vector<std::string> shards;
  for (const auto& [name, file] : j.at("weight_map").items()) {
    if (!file.is_string()) return bad(where, "weight_map['" + short_text(name) + "'] is not a string");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." ||
        f == "..") {
      return bad(where, "weight_map['" + short_text(name) + "'] = '" + short_text(f) +
                            "' is not a file name in the model folder");
    }
    if (std::find(shards.begin(), shards.end(), f) == shards.end()) shards.push_back(f);
    weight_map[name] = f;
  }
  if (shards.empty()) return bad(where, "weight_map is empty");
  return shards;
}

}  // namespace

Result<Folder> Folder::open(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  if (!fs::is_directory(d, ec)) return make_error(ErrorCode::NotFound, "safetensors: '" + dir + "' is not a folder");
  std::vector<std::string> names;
  std::map<std::string, std::string> weight_map;
  const fs::path index = d / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    GX_ASSIGN_OR_RETURN(names, shards_from_index(index, weight_map));
  } else if (fs::exists(d / "model.safetensors", ec)) {
    names.push_back("model.safetensors");
  } else {
    for (const auto& e : fs::directory_iterator(d, ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("model", 0) == 0 && n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0) {
        names.push_back(n);
      }
    }
    std::sort(names.begin(), names.end());
  }
  if (names.empty()) {
    const bool bin = fs::exists(d / "pytorch_model.bin", ec) || fs::exists(d / "pytorch_model.bin.index.json", ec);
    return make_error(bin ? ErrorCode::Unsupported : ErrorCode::NotFound,
                      "safetensors: '" + dir + "' has no model.safetensors, model.safetensors.index.json or " +
                          "model*.safetensors" + (bin ? " (PyTorch .bin checkpoints are not supported)" : ""));
  }
  Folder f;
  for (const std::string& n : names) {
    const std::string path = (d / n).string();
    GX_ASSIGN_OR_RETURN(File shard, File::open(path));
    auto owned = std::make_shared<File>(std::move(shard));
    for (const Tensor& t : owned->tensors()) {
      auto [it, inserted] = f.index_.emplace(t.name, &t);
      if (!inserted) {
        return bad(path, "tensor '" + short_text(t.name) + "' is also in " + it->second->file);
      }
    }
    f.shard_paths_.push_back(path);
    f.shards_.push_back(std::move(owned));
  }
  for (const auto& [name, file] : weight_map) {
    const Tensor* t = f.find(name);
    if (t == nullptr || fs::path(t->file).filename() != file) {
      return bad(index.string(), "tensor '" + short_text(name) + "' is listed in shard " + file + " but is not in it");
    }
  }
  return f;
}

const Tensor* Folder::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<const Tensor*> Folder::tensors() const {
  std::vector<const Tensor*> out;
  for (const auto& s : shards_) {
    for (const Tensor& t : s->tensors()) out.push_back(&t);
  }
  return out;
}

}  // namespace geniex::safetensors
