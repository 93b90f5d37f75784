// Paged KV cache: blocks allocated on first use up to a budget; copy_prefix shares blocks and
// begin_batch copies a shared block before anyone writes into it.
#include <algorithm>
#include <map>
#include <cstring>
#include <string>

#include "core/assert.hpp"
#include "core/fp16.hpp"
#include "kv/kv_cache.hpp"

namespace geniex::kv {

Result<std::unique_ptr<PagedKvCache>> PagedKvCache::create(const KvConfig& config) {
  if (config.n_layer <= 0 || config.n_head_kv <= 0 || config.head_dim <= 0 || config.n_ctx <= 0 ||
      config.n_seq_max <= 0 || config.block_size <= 0) {
    return make_error(ErrorCode::InvalidArgument, "kv cache: every dimension must be positive");
  }
  if (config.n_ctx > (1 << 30) || config.block_size > (1 << 20) || config.n_seq_max > (1 << 16)) {
    return make_error(ErrorCode::InvalidArgument, "kv cache: context, block size or sequence count too large");
  }
  // Block bytes = row bytes * block_size * 2 * n_layer must fit comfortably in int64.
  int64_t bytes = 4;
  for (const int64_t f : {int64_t{config.n_head_kv}, int64_t{config.head_dim}, int64_t{config.block_size},
                          int64_t{2}, int64_t{config.n_layer}}) {
    if (__builtin_mul_overflow(bytes, f, &bytes) || bytes > (int64_t{1} << 40)) {
      return make_error(ErrorCode::InvalidArgument, "kv cache: one block would be larger than 1 TiB");
    }
  }
  if (config.type != DType::F16 && config.type != DType::F32) {
    return make_error(ErrorCode::Unsupported,
                      "kv cache: storage type " + std::string(dtype_name(config.type)) +
                          " is not supported yet (f16, f32)");
  }
  return std::unique_ptr<PagedKvCache>(new PagedKvCache(config));
}

PagedKvCache::PagedKvCache(const KvConfig& config) : config_(config) {
  const size_t elem = config.type == DType::F16 ? 2 : 4;
  row_bytes_ = static_cast<size_t>(config.n_head_kv) * static_cast<size_t>(config.head_dim) * elem;
  block_bytes_ = static_cast<int64_t>(row_bytes_) * config.block_size * 2 * config.n_layer;
  const int64_t blocks_per_seq = (int64_t{config.n_ctx} + config.block_size - 1) / config.block_size;
  max_blocks_ = blocks_per_seq * config.n_seq_max;
  if (config.max_bytes > 0) max_blocks_ = std::max<int64_t>(1, config.max_bytes / block_bytes_);
  tables_.resize(static_cast<size_t>(config.n_seq_max));
  lengths_.assign(static_cast<size_t>(config.n_seq_max), 0);
}

int64_t PagedKvCache::allocated_bytes() const {
  return static_cast<int64_t>(blocks_.size()) * block_bytes_;
}

Result<int32_t> PagedKvCache::new_block() {
  if (!free_blocks_.empty()) {
    const int32_t b = free_blocks_.back();
    free_blocks_.pop_back();
    ref_count_[static_cast<size_t>(b)] = 1;
    return b;
  }
  if (static_cast<int64_t>(blocks_.size()) >= max_blocks_) {
    return make_error(ErrorCode::OutOfRange, "kv cache: memory budget of " +
                                                 std::to_string(budget_bytes()) + " bytes is full");
  }
  std::unique_ptr<uint8_t[]> storage(new (std::nothrow) uint8_t[static_cast<size_t>(block_bytes_)]);
  if (!storage) return make_error(ErrorCode::OutOfMemory, "kv cache: cannot allocate a block");
  blocks_.push_back(std::move(storage));
  ref_count_.push_back(1);
  return static_cast<int32_t>(blocks_.size() - 1);
}

void PagedKvCache::release_block(int32_t block) {
  int32_t& rc = ref_count_[static_cast<size_t>(block)];
  GX_ASSERT(rc > 0);
  if (--rc == 0) free_blocks_.push_back(block);
}

uint8_t* PagedKvCache::block_base(int32_t block) const {
  return blocks_[static_cast<size_t>(block)].get();
}

Status PagedKvCache::begin_batch(std::span<const int32_t> seq_ids,
                                 std::span<const int32_t> positions) {
  if (seq_ids.size() != positions.size()) {
    return make_error(ErrorCode::InvalidArgument, "kv cache: seq_ids and positions differ in length");
  }
  // Validate everything first so a failure changes nothing.
  std::vector<int32_t> new_len = lengths_;
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    const int32_t s = seq_ids[i];
    if (s < 0 || s >= config_.n_seq_max) {
      return make_error(ErrorCode::InvalidArgument,
                        "kv cache: sequence id " + std::to_string(s) + " out of range [0, " +
                            std::to_string(config_.n_seq_max) + ")");
    }
    if (positions[i] != new_len[static_cast<size_t>(s)]) {
      return make_error(ErrorCode::InvalidArgument,
                        "kv cache: sequence " + std::to_string(s) + " expects position " +
                            std::to_string(new_len[static_cast<size_t>(s)]) + ", got " +
                            std::to_string(positions[i]));
    }
    if (positions[i] >= config_.n_ctx) {
      return make_error(ErrorCode::OutOfRange, "kv cache: context of " + std::to_string(config_.n_ctx) +
                                                   " tokens is full");
    }
    ++new_len[static_cast<size_t>(s)];
  }
  // Blocks needed: new ones at the tail, plus copies of shared tail blocks about to be
  // written. Copies are counted on simulated reference counts: when two sharers of a block
  // both extend it, the second finds it unshared after the first has copied.
  int64_t needed = 0;
  std::map<int32_t, int32_t> refs;  // block -> simulated ref count, for touched blocks only
  for (size_t s = 0; s < tables_.size(); ++s) {
    if (new_len[s] == lengths_[s]) continue;
    const int64_t have = static_cast<int64_t>(tables_[s].size());
    const int64_t want = (int64_t{new_len[s]} + config_.block_size - 1) / config_.block_size;
    needed += std::max<int64_t>(0, want - have);
    const int32_t tail = lengths_[s] / config_.block_size;
    if (tail < have) {
      const int32_t b = tables_[s][static_cast<size_t>(tail)];
      auto it = refs.try_emplace(b, ref_count_[static_cast<size_t>(b)]).first;
      if (it->second > 1) {
        ++needed;
        --it->second;
      }
    }
  }
  const int64_t available = static_cast<int64_t>(free_blocks_.size()) + max_blocks_ -
                            static_cast<int64_t>(blocks_.size());
  if (needed > available) {
    return make_error(ErrorCode::OutOfRange, "kv cache: needs " + std::to_string(needed) +
                                                 " more blocks, " + std::to_string(available) +
                                                 " left in the budget");
  }
  for (size_t s = 0; s < tables_.size(); ++s) {
    if (new_len[s] == lengths_[s]) continue;
    auto& table = tables_[s];
    const int32_t tail = lengths_[s] / config_.block_size;
    if (tail < static_cast<int32_t>(table.size())) {
      const int32_t old = table[static_cast<size_t>(tail)];
      if (ref_count_[static_cast<size_t>(old)] > 1) {  // copy on write
        GX_ASSIGN_OR_RETURN(const int32_t fresh, new_block());
        std::memcpy(block_base(fresh), block_base(old), static_cast<size_t>(block_bytes_));
        release_block(old);
        table[static_cast<size_t>(tail)] = fresh;
      }
    }
    const auto want = static_cast<size_t>((int64_t{new_len[s]} + config_.block_size - 1) / config_.block_size);
    while (table.size() < want) {
      GX_ASSIGN_OR_RETURN(const int32_t fresh, new_block());
      table.push_back(fresh);
    }
  }
  batch_block_.resize(seq_ids.size());
  batch_row_.resize(seq_ids.size());
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    const auto s = static_cast<size_t>(seq_ids[i]);
    batch_block_[i] = tables_[s][static_cast<size_t>(positions[i] / config_.block_size)];
    batch_row_[i] = positions[i] % config_.block_size;
  }
  lengths_ = std::move(new_len);
  return ok_status();
}

void PagedKvCache::write(int32_t layer, int32_t batch_index, const float* k, const float* v, RowToF16 to_f16) {
  const auto i = static_cast<size_t>(batch_index);
  uint8_t* base = block_base(batch_block_[i]);
  const size_t plane = row_bytes_ * static_cast<size_t>(config_.block_size);
  uint8_t* kdst = base + (static_cast<size_t>(layer) * 2) * plane + static_cast<size_t>(batch_row_[i]) * row_bytes_;
  uint8_t* vdst = kdst + plane;
  const size_t n = static_cast<size_t>(config_.n_head_kv) * static_cast<size_t>(config_.head_dim);
  if (config_.type == DType::F16) {
    auto* kh = reinterpret_cast<uint16_t*>(kdst);
    auto* vh = reinterpret_cast<uint16_t*>(vdst);
    if (to_f16 != nullptr) {
      to_f16(k, kh, static_cast<int64_t>(n));
      to_f16(v, vh, static_cast<int64_t>(n));
      return;
    }
    for (size_t j = 0; j < n; ++j) {
      kh[j] = f32_to_fp16(k[j]);
      vh[j] = f32_to_fp16(v[j]);
    }
  } else {
    std::memcpy(kdst, k, n * 4);
    std::memcpy(vdst, v, n * 4);
  }
}

std::span<const int32_t> PagedKvCache::block_table(int32_t seq) const {
  return tables_[static_cast<size_t>(seq)];
}

const void* PagedKvCache::k_block(int32_t layer, int32_t block) const {
  const size_t plane = row_bytes_ * static_cast<size_t>(config_.block_size);
  return block_base(block) + static_cast<size_t>(layer) * 2 * plane;
}

const void* PagedKvCache::v_block(int32_t layer, int32_t block) const {
  const size_t plane = row_bytes_ * static_cast<size_t>(config_.block_size);
  return block_base(block) + (static_cast<size_t>(layer) * 2 + 1) * plane;
}

int32_t PagedKvCache::seq_length(int32_t seq) const {
  if (seq < 0 || seq >= config_.n_seq_max) return 0;
  return lengths_[static_cast<size_t>(seq)];
}

void PagedKvCache::truncate(int32_t seq, int32_t p0) {
  if (seq < 0 || seq >= config_.n_seq_max) return;
  const auto s = static_cast<size_t>(seq);
  p0 = std::clamp(p0, 0, lengths_[s]);
  const size_t keep = static_cast<size_t>((p0 + config_.block_size - 1) / config_.block_size);
  while (tables_[s].size() > keep) {
    release_block(tables_[s].back());
    tables_[s].pop_back();
  }
  lengths_[s] = p0;
}

Status PagedKvCache::copy_prefix(int32_t src, int32_t dst, int32_t n) {
  if (src < 0 || src >= config_.n_seq_max || dst < 0 || dst >= config_.n_seq_max) {
    return make_error(ErrorCode::InvalidArgument, "kv cache: sequence id out of range");
  }
  if (src == dst) {
    truncate(dst, n);
    return ok_status();
  }
  n = std::clamp(n, 0, lengths_[static_cast<size_t>(src)]);
  truncate(dst, 0);
  const size_t blocks = static_cast<size_t>((n + config_.block_size - 1) / config_.block_size);
  for (size_t j = 0; j < blocks; ++j) {
    const int32_t b = tables_[static_cast<size_t>(src)][j];
    ++ref_count_[static_cast<size_t>(b)];
    tables_[static_cast<size_t>(dst)].push_back(b);
  }
  lengths_[static_cast<size_t>(dst)] = n;
  return ok_status();
}

void PagedKvCache::clear() {
  for (size_t s = 0; s < tables_.size(); ++s) truncate(static_cast<int32_t>(s), 0);
}

}  // namespace geniex::kv
