// GetRows: dst[t][i] = row ids[t] of the table, decoded to f32 (embedding lookup, or the
// selection of output rows from f32 activations). One work-item per output value.
#define GX_GET_ROWS(TYPE)                                                                    \
  kernel void get_rows_##TYPE(global const uchar* table, ulong table_off, ulong row_bytes,   \
                              global const uchar* ids_b, ulong ids_off, global uchar* dst_b, \
                              ulong dst_off, int n_cols) {                                   \
    const int i = get_global_id(0);                                                          \
    const int t = get_global_id(1);                                                          \
    if (i >= n_cols) return;                                                                 \
    const int id = ((global const int*)(ids_b + ids_off))[t];                                \
    global const uchar* row = table + table_off + (ulong)id * row_bytes;                     \
    ((global float*)(dst_b + dst_off))[(ulong)t * n_cols + i] = elem_##TYPE(row, i);         \
  }

GX_GET_ROWS(f32)
GX_GET_ROWS(f16)
GX_GET_ROWS(q4_0)
GX_GET_ROWS(q4_1)
GX_GET_ROWS(q8_0)
GX_GET_ROWS(q4_k)
GX_GET_ROWS(q6_k)
