// KV cache interface and its paged implementation: fixed-size blocks of token rows, a block
// table per sequence, reference-counted blocks for prefix sharing with copy-on-write.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.hpp"
#include "core/result.hpp"

namespace geniex::kv {

struct KvConfig {
  int32_t n_layer = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t n_ctx = 0;        // most tokens one sequence may hold
  int32_t n_seq_max = 1;    // sequences addressable (ids 0..n_seq_max-1)
  int32_t block_size = 32;  // tokens per block
  DType type = DType::F16;  // storage type of K and V rows
  int64_t max_bytes = 0;    // memory budget for blocks; 0: n_ctx * n_seq_max tokens' worth
};

class KvCache {
 public:
  virtual ~KvCache() = default;

  // Makes room for a batch: token i belongs to sequence seq_ids[i] at position positions[i].
  // A sequence's positions must continue it without gaps (0, 1, 2, ...). Fails with
  // OutOfRange when the context or the memory budget would be exceeded, changing nothing.
  virtual Status begin_batch(std::span<const int32_t> seq_ids,
                             std::span<const int32_t> positions) = 0;
  // Stores token i's K and V rows (n_head_kv * head_dim floats each) for a layer. Threads
  // may write different tokens concurrently. An f16 cache rounds with to_f16 where given (a
  // backend's vector conversion, round to nearest even like f32_to_fp16), else element by element.
  using RowToF16 = void (*)(const float* src, uint16_t* dst, int64_t n);
  virtual void write(int32_t layer, int32_t batch_index, const float* k, const float* v,
                     RowToF16 to_f16 = nullptr) = 0;

  // Read access for attention: the sequence's blocks in position order; block j holds
  // positions [j * block_size, (j + 1) * block_size). Rows are n_head_kv * head_dim values
  // of kv_type(), block_size rows per block.
  virtual std::span<const int32_t> block_table(int32_t seq) const = 0;
  virtual const void* k_block(int32_t layer, int32_t block) const = 0;
  virtual const void* v_block(int32_t layer, int32_t block) const = 0;

  virtual int32_t seq_length(int32_t seq) const = 0;
  // Forget positions >= p0 of a sequence.
  virtual void truncate(int32_t seq, int32_t p0) = 0;
  // dst becomes a copy of the first n positions of src (blocks shared, copied on write).
  virtual Status copy_prefix(int32_t src, int32_t dst, int32_t n) = 0;
  virtual void clear() = 0;

  virtual const KvConfig& config() const = 0;
  virtual int64_t allocated_bytes() const = 0;
  virtual int64_t budget_bytes() const = 0;
};

class PagedKvCache final : public KvCache {
 public:
  static Result<std::unique_ptr<PagedKvCache>> create(const KvConfig& config);

  Status begin_batch(std::span<const int32_t> seq_ids, std::span<const int32_t> positions) override;
  void write(int32_t layer, int32_t batch_index, const float* k, const float* v,
             RowToF16 to_f16 = nullptr) override;
  std::span<const int32_t> block_table(int32_t seq) const override;
  const void* k_block(int32_t layer, int32_t block) const override;
  const void* v_block(int32_t layer, int32_t block) const override;
  int32_t seq_length(int32_t seq) const override;
  void truncate(int32_t seq, int32_t p0) override;
  Status copy_prefix(int32_t src, int32_t dst, int32_t n) override;
  void clear() override;
  const KvConfig& config() const override { return config_; }
  int64_t allocated_bytes() const override;
  int64_t budget_bytes() const override { return max_blocks_ * block_bytes_; }

 private:
  explicit PagedKvCache(const KvConfig& config);
  Result<int32_t> new_block();
  void release_block(int32_t block);
  uint8_t* block_base(int32_t block) const;
  size_t row_bytes() const { return row_bytes_; }

  KvConfig config_;
  size_t row_bytes_ = 0;     // one token's K (or V) row for one layer
  int64_t block_bytes_ = 0;  // all layers, K and V
  int64_t max_blocks_ = 0;
  std::vector<std::unique_ptr<uint8_t[]>> blocks_;  // storage, allocated on first use
  std::vector<int32_t> ref_count_;
  std::vector<int32_t> free_blocks_;
  std::vector<std::vector<int32_t>> tables_;  // per sequence
  std::vector<int32_t> lengths_;              // per sequence
  // Current batch: where token i's rows go.
  std::vector<int32_t> batch_block_;
  std::vector<int32_t> batch_row_;
};

}  // namespace geniex::kv
