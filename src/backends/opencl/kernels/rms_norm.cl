// RmsNorm over groups of n consecutive values (a whole row, or one head): one work-group of
// 64 per group, the sum of squares in a local-memory tree (the CPU sums in double; a tree
// in float stays within a few ulp of it for rows of a few thousand values). Adreno: 64
// work-items = one wave; sub_group_reduce_add would drop the tree where available.
#define NORM_WG 64

kernel __attribute__((reqd_work_group_size(NORM_WG, 1, 1))) void rms_norm(
    global const uchar* x_b, ulong x_off, global const uchar* w_b, ulong w_off,
    global uchar* y_b, ulong y_off, int n, float eps) {
  const int g = get_group_id(0);
  const int lid = get_local_id(0);
  global const float* x = (global const float*)(x_b + x_off) + (ulong)g * n;
  global const float* w = (global const float*)(w_b + w_off);
  global float* y = (global float*)(y_b + y_off) + (ulong)g * n;
  local float part[NORM_WG];
  float s = 0.0f;
  for (int i = lid; i < n; i += NORM_WG) s += x[i] * x[i];
  part[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = NORM_WG / 2; step > 0; step /= 2) {
    if (lid < step) part[lid] += part[lid + step];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#ifdef cl_khr_fp64
  // Where fp64 exists: the CPU's sum, in double and in order, so the result is bit-identical.
  local double dsum;
  if (lid == 0) {
    double d = 0.0;
    for (int i = 0; i < n; ++i) d += (double)x[i] * (double)x[i];
    dsum = d;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const float mean = (float)(dsum / (double)n);
#else
  const float mean = part[0] / (float)n;
#endif
  const float scale = 1.0f / sqrt(mean + eps);
  for (int i = lid; i < n; i += NORM_WG) y[i] = x[i] * scale * w[i];
}
