// Tiled matrix-matrix product for prefill: a 16 x 16 work-group computes 16 weight rows x
// 16 tokens. Each step stages MM_KB blocks of the 16 weight rows and of the 16 activation
// rows in local memory, so every weight byte is read from global memory once per 16 tokens
// instead of once per token. Operands as in mul_mv.cl.
// Adreno: local memory is 32 KiB per work-group on A6xx/A7xx; the largest tile here (Q6_K
// weights + Q8_K activations, one block deep) is 8 KiB, leaving room for two work-groups per
// SP. The staging copies bytes because blocks of 18/20/34 bytes are only 2-byte aligned; a
// repacked layout (scales apart) would allow uint4 copies and read_imageui.
#define MM_TILE 16

#define GX_MUL_MM(TYPE, WB, AB, KB)                                                          \
  kernel __attribute__((reqd_work_group_size(MM_TILE, MM_TILE, 1))) void mul_mm_##TYPE(     \
      global const uchar* w, ulong w_off, global const uchar* a_b, ulong a_off, global uchar* dst_b,        \
      ulong dst_off, int n_blocks, int n_rows, int n_tok) {                                  \
    local uint w_tile[(MM_TILE * KB * WB + 3) / 4];                                          \
    local uint a_tile[(MM_TILE * KB * AB + 3) / 4];                                          \
    local uchar* wt = (local uchar*)w_tile;                                                  \
    local uchar* at = (local uchar*)a_tile;                                                  \
    const int lr = get_local_id(0), lt = get_local_id(1);                                    \
    const int lid = lt * MM_TILE + lr;                                                       \
    const int r0 = get_group_id(0) * MM_TILE, t0 = get_group_id(1) * MM_TILE;                \
    const ulong w_row = (ulong)n_blocks * WB, a_row = (ulong)n_blocks * AB;                  \
    float s = 0.0f;                                                                          \
    for (int b0 = 0; b0 < n_blocks; b0 += KB) {                                              \
      const int nb = min(KB, n_blocks - b0);                                                 \
      for (int i = lid; i < MM_TILE * nb * WB; i += MM_TILE * MM_TILE) {                     \
        const int row = i / (nb * WB), byte = i % (nb * WB);                                 \
        const int rr = min(r0 + row, n_rows - 1);                                            \
        wt[row * KB * WB + byte] = w[w_off + rr * w_row + (ulong)b0 * WB + byte];            \
      }                                                                                      \
      for (int i = lid; i < MM_TILE * nb * AB; i += MM_TILE * MM_TILE) {                     \
        const int row = i / (nb * AB), byte = i % (nb * AB);                                 \
        const int tt = min(t0 + row, n_tok - 1);                                             \
        at[row * KB * AB + byte] = a_b[a_off + tt * a_row + (ulong)b0 * AB + byte];                    \
      }                                                                                      \
      barrier(CLK_LOCAL_MEM_FENCE);                                                          \
      for (int b = 0; b < nb; ++b) {                                                         \
        s += dot_##TYPE##_l(wt + (lr * KB + b) * WB, at + (lt * KB + b) * AB);               \
      }                                                                                      \
      barrier(CLK_LOCAL_MEM_FENCE);                                                          \
    }                                                                                        \
    if (r0 + lr < n_rows && t0 + lt < n_tok) {                                               \
      ((global float*)(dst_b + dst_off))[(ulong)(t0 + lt) * n_rows + r0 + lr] = s;            \
    }                                                                                        \
  }

// 32-element block types accumulate in the CPU backend's order (see mul_mv.cl).
inline int q_at_l(local const uchar* blk, int qs_off, int e, int kind) {
  if (kind == 2) return (char)blk[qs_off + e];
  const uchar q = blk[qs_off + (e % 16)];
  const int v = e < 16 ? (q & 15) : (q >> 4);
  return kind == 0 ? v - 8 : v;
}

#define GX_MUL_MM_LANES(TYPE, WB, AB, KB, QS_W, QS_A, KIND, HAS_MIN)                                                          \
  kernel __attribute__((reqd_work_group_size(MM_TILE, MM_TILE, 1))) void mul_mm_##TYPE(     \
      global const uchar* w, ulong w_off, global const uchar* a_b, ulong a_off, global uchar* dst_b,        \
      ulong dst_off, int n_blocks, int n_rows, int n_tok) {                                  \
    local uint w_tile[(MM_TILE * KB * WB + 3) / 4];                                          \
    local uint a_tile[(MM_TILE * KB * AB + 3) / 4];                                          \
    local uchar* wt = (local uchar*)w_tile;                                                  \
    local uchar* at = (local uchar*)a_tile;                                                  \
    const int lr = get_local_id(0), lt = get_local_id(1);                                    \
    const int lid = lt * MM_TILE + lr;                                                       \
    const int r0 = get_group_id(0) * MM_TILE, t0 = get_group_id(1) * MM_TILE;                \
    const ulong w_row = (ulong)n_blocks * WB, a_row = (ulong)n_blocks * AB;                  \
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                 \
    float macc = 0.0f;                                                                       \
    for (int b0 = 0; b0 < n_blocks; b0 += KB) {                                              \
      const int nb = min(KB, n_blocks - b0);                                                 \
      for (int i = lid; i < MM_TILE * nb * WB; i += MM_TILE * MM_TILE) {                     \
        const int row = i / (nb * WB), byte = i % (nb * WB);                                 \
        const int rr = min(r0 + row, n_rows - 1);                                            \
        wt[row * KB * WB + byte] = w[w_off + rr * w_row + (ulong)b0 * WB + byte];            \
      }                                                                                      \
      for (int i = lid; i < MM_TILE * nb * AB; i += MM_TILE * MM_TILE) {                     \
        const int row = i / (nb * AB), byte = i % (nb * AB);                                 \
        const int tt = min(t0 + row, n_tok - 1);                                             \
        at[row * KB * AB + byte] = a_b[a_off + tt * a_row + (ulong)b0 * AB + byte];                    \
      }                                                                                      \
      barrier(CLK_LOCAL_MEM_FENCE);                                                          \
      for (int b = 0; b < nb; ++b) {                                                         \
        local const uchar* wb = wt + (lr * KB + b) * WB;                                     \
        local const uchar* ab = at + (lt * KB + b) * AB;                                     \
        const float scale = ld_half_l(wb) * ld_half_l(ab);                                   \
        for (int l = 0; l < 8; ++l) {                                                        \
          int lane = 0;                                                                      \
          for (int e = 4 * l; e < 4 * l + 4; ++e) lane += q_at_l(wb, QS_W, e, KIND) * (char)ab[QS_A + e]; \
          acc[l] = fma(scale, (float)lane, acc[l]);                                          \
        }                                                                                    \
        if (HAS_MIN) macc += ld_half_l(wb + 2) * ld_half_l(ab + 2);                          \
      }                                                                                      \
      barrier(CLK_LOCAL_MEM_FENCE);                                                          \
    }                                                                                        \
    float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7])); \
    if (HAS_MIN) s += macc;                                                                  \
    if (r0 + lr < n_rows && t0 + lt < n_tok) {                                               \
      ((global float*)(dst_b + dst_off))[(ulong)(t0 + lt) * n_rows + r0 + lr] = s;            \
    }                                                                                        \
  }

GX_MUL_MM(f32, 4, 4, 32)
GX_MUL_MM(f16, 2, 2, 32)
GX_MUL_MM_LANES(q4_0, 18, 34, 4, 2, 2, 0, 0)
GX_MUL_MM_LANES(q4_1, 20, 36, 4, 4, 4, 1, 1)
GX_MUL_MM_LANES(q8_0, 34, 34, 4, 2, 2, 2, 0)
GX_MUL_MM(q4_k, 144, 292, 1)
GX_MUL_MM(q6_k, 210, 292, 1)
