// Attention over K/V rows gathered from the KV cache (see op_attention.cpp): one work-group
// per (head, token). Three passes as the CPU op -- scores, an exact softmax, then the
// probability-weighted sum of V rows -- with q and the probabilities rounded to f16 when the
// cache is f16, as llama.cpp's default attention does; the CPU backend rounds the same way.
// kv_f16: rows are halves (else floats). info[t] = (row0, n_kv, kv0, unused): position p of
// t's sequence is staging row row0 + p; positions kv0 .. n_kv - 1 are visible (causal, and
// the sliding window moves kv0). scores: per (token, head) a row of
// score_stride floats of global scratch (contexts are too long for local memory).
// Adreno: 64 work-items = one wave; scores in global memory stay in L2 for contexts up to
// a few thousand tokens. An online-softmax (flash) variant would need no scratch but would
// round probabilities differently from the CPU reference.
#define ATT_WG 64

inline float round_f16(float v) {
  ushort h;
  vstore_half_rte(v, 0, (private half*)&h);
  return vload_half(0, (private const half*)&h);
}

inline float kv_load(global const uchar* base, ulong index, int kv_f16) {
  return kv_f16 ? vload_half(0, (global const half*)base + index) : ((global const float*)base)[index];
}

kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1))) void attention_f32(
    global const uchar* q_b, ulong q_off, global const uchar* k_rows, global const uchar* v_rows,
    int kv_f16, global const int4* info, global float* scores, int score_stride,
    global uchar* out_b, ulong out_off, int t_begin, int n_head, int n_head_kv, int head_dim,
    float scale) {
  const int h = get_group_id(0);
  const int tl = get_group_id(1);  // token within this launch
  const int t = t_begin + tl;
  const int lid = get_local_id(0);
  const int kv_width = n_head_kv * head_dim;
  const int g = h / (n_head / n_head_kv);
  const int4 inf = info[t];
  const int row0 = inf.x, n_kv = inf.y, kv0 = inf.z;
  global const float* q = (global const float*)(q_b + q_off) + ((ulong)t * n_head + h) * head_dim;
  global float* sc = scores + ((ulong)tl * n_head + h) * score_stride;
  local float qh[512];
  local float red[ATT_WG];

  for (int d = lid; d < head_dim; d += ATT_WG) qh[d] = kv_f16 ? round_f16(q[d]) : q[d];
  barrier(CLK_LOCAL_MEM_FENCE);

  float m = -INFINITY;
  for (int j = kv0 + lid; j < n_kv; j += ATT_WG) {
    const ulong kr = (ulong)(row0 + j) * kv_width + (ulong)g * head_dim;
    float s = 0.0f;
    for (int d = 0; d < head_dim; ++d) s = fma(qh[d], kv_load(k_rows, kr + d, kv_f16), s);
    s *= scale;
    sc[j] = s;
    m = fmax(m, s);
  }
  red[lid] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = ATT_WG / 2; step > 0; step /= 2) {
    if (lid < step) red[lid] = fmax(red[lid], red[lid + step]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  m = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);

  float sum = 0.0f;
  for (int j = kv0 + lid; j < n_kv; j += ATT_WG) {
    const float e = exp(sc[j] - m);
    sc[j] = e;
    sum += e;
  }
  red[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = ATT_WG / 2; step > 0; step /= 2) {
    if (lid < step) red[lid] += red[lid + step];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float inv = 1.0f / red[0];
  for (int j = kv0 + lid; j < n_kv; j += ATT_WG) {
    const float p = sc[j] * inv;
    sc[j] = kv_f16 ? round_f16(p) : p;
  }
  barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);

  global float* o = (global float*)(out_b + out_off) + ((ulong)t * n_head + h) * head_dim;
  for (int d = lid; d < head_dim; d += ATT_WG) {
    float acc = 0.0f;
    for (int j = kv0; j < n_kv; ++j) {
      const ulong vr = (ulong)(row0 + j) * kv_width + (ulong)g * head_dim + d;
      acc = fma(sc[j], kv_load(v_rows, vr, kv_f16), acc);
    }
    o[d] = acc;
  }
}
