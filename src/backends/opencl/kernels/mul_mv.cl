// Matrix-vector product for decode (few tokens): one work-group per (weight row, token);
// work-items stride over the row's blocks and meet in a local-memory tree.
// w: rows of n_blocks weight blocks (wb bytes each); a: per token, n_blocks activation blocks
// (ab bytes each, quantized by quantize_act.cl, or f32 for F32 weights); dst: f32 [T][n_rows].
// Adreno: a work-group of 64 matches one wave (half of a 128-wide wave on A7xx); the
// strided block walk keeps neighbouring work-items on neighbouring blocks, so loads
// coalesce. With cl_khr_subgroups the tree would become sub_group_reduce_add.
#define MV_WG 64

#define GX_MUL_MV(TYPE, WB, AB)                                                              \
  kernel __attribute__((reqd_work_group_size(MV_WG, 1, 1))) void mul_mv_##TYPE(             \
      global const uchar* w, ulong w_off, global const uchar* a_b, ulong a_off, global uchar* dst_b,        \
      ulong dst_off, int n_blocks, int n_rows) {                                             \
    const int r = get_group_id(0);                                                           \
    const int t = get_group_id(1);                                                           \
    const int lid = get_local_id(0);                                                         \
    local float part[MV_WG];                                                                 \
    global const uchar* wr = w + w_off + (ulong)r * (ulong)n_blocks * WB;                   \
    global const uchar* ar = a_b + a_off + (ulong)t * (ulong)n_blocks * AB;                           \
    float s = 0.0f;                                                                          \
    for (int b = lid; b < n_blocks; b += MV_WG) s += dot_##TYPE##_g(wr + b * WB, ar + b * AB); \
    part[lid] = s;                                                                           \
    barrier(CLK_LOCAL_MEM_FENCE);                                                            \
    for (int step = MV_WG / 2; step > 0; step /= 2) {                                        \
      if (lid < step) part[lid] += part[lid + step];                                         \
      barrier(CLK_LOCAL_MEM_FENCE);                                                          \
    }                                                                                        \
    if (lid == 0) ((global float*)(dst_b + dst_off))[(ulong)t * n_rows + r] = part[0];      \
  }

GX_MUL_MV(f32, 4, 4)
GX_MUL_MV(f16, 2, 2)

// 32-element block types: one work-item per (row, token), accumulating in the order of the
// CPU backend's x86 kernels (per block, 8 integer lane sums of 4 products each, each lane
// fma'd into its own float accumulator with d_w * d_a; Q4_1's min term m_w * s_a summed
// apart; lanes reduced as (l0+l4 + l2+l6) + (l1+l5 + l3+l7)). Q4_1 rows cancel a large min
// term against the scaled quants, and SmolLM2's outlier channels make that cancellation
// severe, so a different float order moves logits by ~1e-2 of their range; matching the
// order makes the GPU agree with the CPU to the last bit on these types. On Adreno a
// row-per-work-item walk is also what a struct-of-arrays repack would use.
inline int q_at(global const uchar* blk, int qs_off, int e, int kind) {
  if (kind == 2) return (char)blk[qs_off + e];                  // q8_0
  const uchar q = blk[qs_off + (e % 16)];
  const int v = e < 16 ? (q & 15) : (q >> 4);
  return kind == 0 ? v - 8 : v;                                 // q4_0 : q4_1
}

#define GX_MUL_MV_LANES(TYPE, WB, AB, QS_W, QS_A, KIND, HAS_MIN)                               \
  kernel void mul_mv_##TYPE(global const uchar* w, ulong w_off, global const uchar* a_b,      \
                            ulong a_off, global uchar* dst_b, ulong dst_off, int n_blocks,    \
                            int n_rows) {                                                     \
    const int r = get_global_id(0);                                                           \
    const int t = get_global_id(1);                                                           \
    if (r >= n_rows) return;                                                                  \
    global const uchar* wr = w + w_off + (ulong)r * (ulong)n_blocks * WB;                    \
    global const uchar* ar = a_b + a_off + (ulong)t * (ulong)n_blocks * AB;                  \
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                  \
    float macc = 0.0f;                                                                        \
    for (int b = 0; b < n_blocks; ++b) {                                                      \
      global const uchar* wb = wr + b * WB;                                                   \
      global const uchar* ab = ar + b * AB;                                                   \
      const float scale = ld_half(wb) * ld_half(ab);                                          \
      for (int l = 0; l < 8; ++l) {                                                           \
        int lane = 0;                                                                         \
        for (int e = 4 * l; e < 4 * l + 4; ++e) lane += q_at(wb, QS_W, e, KIND) * (char)ab[QS_A + e]; \
        acc[l] = fma(scale, (float)lane, acc[l]);                                             \
      }                                                                                       \
      if (HAS_MIN) macc += ld_half(wb + 2) * ld_half(ab + 2);                                 \
    }                                                                                         \
    const float s0 = acc[0] + acc[4], s1 = acc[1] + acc[5], s2 = acc[2] + acc[6], s3 = acc[3] + acc[7]; \
    float v = (s0 + s2) + (s1 + s3);                                                          \
    if (HAS_MIN) v += macc;                                                                   \
    ((global float*)(dst_b + dst_off))[(ulong)t * n_rows + r] = v;                           \
  }

GX_MUL_MV_LANES(q4_0, 18, 34, 2, 2, 0, 0)
GX_MUL_MV_LANES(q4_1, 20, 36, 4, 4, 1, 1)
GX_MUL_MV_LANES(q8_0, 34, 34, 2, 2, 2, 0)
GX_MUL_MV(q4_k, 144, 292)
GX_MUL_MV(q6_k, 210, 292)
