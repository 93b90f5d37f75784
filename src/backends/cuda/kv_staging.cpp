// plan_kv_staging: the visible range of every token and the staged layout per sequence.
#include "backends/cuda/kv_staging.hpp"

#include <algorithm>
#include <climits>
#include <map>

namespace geniex::backends::cuda {

KvStagingPlan plan_kv_staging(std::span<const int32_t> positions, std::span<const int32_t> seq_ids, int32_t window,
                              int32_t block_size) {
  KvStagingPlan plan;
  struct Range {
    int32_t lo = INT32_MAX, hi = 0;
  };
  std::map<int32_t, Range> ranges;  // by sequence id: staging order is ascending ids
  plan.info.resize(positions.size());
  for (size_t t = 0; t < positions.size(); ++t) {
    const int32_t n_kv = positions[t] + 1;  // causal: keys at positions 0 .. p
    const int32_t kv0 = window > 0 ? std::max(0, n_kv - window) : 0;
    Range& r = ranges[seq_ids[t]];
    r.lo = std::min(r.lo, kv0 / block_size * block_size);
    r.hi = std::max(r.hi, n_kv);
    plan.max_kv = std::max(plan.max_kv, n_kv);
    plan.info[t] = {0, n_kv, kv0, 0};
  }
  for (const auto& [seq, r] : ranges) {
    StagedSeq s;
    s.seq = seq;
    s.lo = r.lo;
    s.hi = r.hi;
    s.row0 = static_cast<int32_t>(plan.rows) - r.lo;
    plan.rows += (r.hi + block_size - 1) / block_size * block_size - r.lo;  // whole blocks
    plan.seqs.push_back(s);
  }
  for (size_t t = 0; t < positions.size(); ++t) {
    for (const StagedSeq& s : plan.seqs) {
      if (s.seq == seq_ids[t]) plan.info[t].row0 = s.row0;
    }
  }
  return plan;
}

}  // namespace geniex::backends::cuda
