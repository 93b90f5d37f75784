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

// ---- Exact path (devices with cl_khr_fp64; PoCL in CI) -----------------------------------
// attention_exact_f32 reproduces the CPU backend's arithmetic (op_attention.cpp with the
// AVX2+FMA helpers of kernels_avx2.cpp, as dispatched on x86-64 with AVX2) bit for bit:
//  - scores: dot_f32_f16 / dot_f32's lane structure -- 16 FMA accumulators over elements
//    i = 16b + l, one more block of 8 into lanes 0..7, the lanes 0..7 + 8..15 sum, then
//    hsum8's order ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), then the head_dim % 8 tail one
//    element at a time, not fused, times scale;
//  - e_j = (float)exp((double)(s_j - m)), GenieX's exponential on every backend
//    (src/core/exp.hpp);
//  - the sum of e_j in double in order j by one work-item, inv = (float)(1 / sum);
//  - p_j = e_j * inv rounded to f16 (f16 cache), and the output built as axpy_f16 / axpy_f32
//    do: acc[d] = fma(p_j, v_j[d], acc[d]) in order j, the scalar tail included.
//    (The tails, head_dim % 8 != 0, follow what GCC makes of the CPU's scalar loops -- the
//    dot's is not fused, the axpy's is; another compiler may fuse them differently.)
// Contraction is switched off so that only the fma() calls written here are fused.
// Devices without fp64 (Adreno) run attention_f32 above: same rounding points, float exp and
// tree reductions, so results differ from the CPU in the last bits.
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

// GenieX's exponential (src/core/exp.hpp): exp in double, rounded once to float. The CPU
// backend computes the same, so the float results agree (checked on 11.7M values against the
// host by test_opencl's ExactPathExpMatchesHost).
inline float exp_f32_via_f64(float x) { return (float)exp((double)x); }

// The global sizes are (n_head * ATT_WG, tokens) as for attention_f32.
kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1))) void attention_exact_f32(
    global const uchar* q_b, ulong q_off, global const uchar* k_rows, global const uchar* v_rows,
    int kv_f16, global const int4* info, global float* scores, int score_stride,
    global uchar* out_b, ulong out_off, int t_begin, int n_head, int n_head_kv, int head_dim,
    float scale) {
#pragma OPENCL FP_CONTRACT OFF
  const int h = get_group_id(0);
  const int tl = get_group_id(1);
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
  local float inv_l;

  for (int d = lid; d < head_dim; d += ATT_WG) qh[d] = kv_f16 ? round_f16(q[d]) : q[d];
  barrier(CLK_LOCAL_MEM_FENCE);

  const int n16 = head_dim / 16 * 16;
  const int n8 = head_dim / 8 * 8;
  float m = -INFINITY;
  for (int j = kv0 + lid; j < n_kv; j += ATT_WG) {
    const ulong kr = (ulong)(row0 + j) * kv_width + (ulong)g * head_dim;
    float lane[16];
    for (int l = 0; l < 16; ++l) lane[l] = 0.0f;
    for (int i = 0; i < n16; i += 16) {
      for (int l = 0; l < 16; ++l) lane[l] = fma(qh[i + l], kv_load(k_rows, kr + i + l, kv_f16), lane[l]);
    }
    for (int l = 0; l < n8 - n16; ++l) lane[l] = fma(qh[n16 + l], kv_load(k_rows, kr + n16 + l, kv_f16), lane[l]);
    for (int l = 0; l < 8; ++l) lane[l] = lane[l] + lane[l + 8];
    for (int l = 0; l < 4; ++l) lane[l] = lane[l] + lane[l + 4];
    float s = (lane[0] + lane[2]) + (lane[1] + lane[3]);
    for (int i = n8; i < head_dim; ++i) s = s + qh[i] * kv_load(k_rows, kr + i, kv_f16);
    s = s * scale;
    sc[j] = s;
    m = fmax(m, s);
  }
  // The maximum does not depend on the order.
  red[lid] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = ATT_WG / 2; step > 0; step /= 2) {
    if (lid < step) red[lid] = fmax(red[lid], red[lid + step]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  m = red[0];

  for (int j = kv0 + lid; j < n_kv; j += ATT_WG) sc[j] = exp_f32_via_f64(sc[j] - m);
  barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    double sum = 0.0;
    for (int j = kv0; j < n_kv; ++j) sum += (double)sc[j];
    inv_l = (float)(1.0 / sum);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const float inv = inv_l;
  for (int j = kv0 + lid; j < n_kv; j += ATT_WG) {
    const float p = sc[j] * inv;
    sc[j] = kv_f16 ? round_f16(p) : p;
  }
  barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);

  global float* o = (global float*)(out_b + out_off) + ((ulong)t * n_head + h) * head_dim;
  for (int d = lid; d < head_dim; d += ATT_WG) {
    float acc = 0.0f;
    const ulong vr0 = (ulong)g * head_dim + d;
    for (int j = kv0; j < n_kv; ++j) acc = fma(sc[j], kv_load(v_rows, (ulong)(row0 + j) * kv_width + vr0, kv_f16), acc);
    o[d] = acc;
  }
}

// exp_f32_via_f64 on x[i], for the test that compares it with the host's (test_opencl).
kernel void attention_expf_probe(global const float* x, global float* y) {
  const size_t i = get_global_id(0);
  y[i] = exp_f32_via_f64(x[i]);
}
#endif  // cl_khr_fp64
