// Element-wise ops, one work-item per value: Add (same shape, or one row added to every
// row: b_len == row length), SwiGLU, GeGLU (tanh GELU) and Scale. Written as the CPU ops so
// results agree to the ulp of exp/tanh. Adreno: float4 versions would halve the
// instruction count; these ops are a few percent of a step, so the scalar form stays.

kernel void add_f32(global const uchar* a_b, ulong a_off, global const uchar* b_b, ulong b_off,
                    global uchar* y_b, ulong y_off, int n, int b_len) {
  const int i = get_global_id(0);
  if (i >= n) return;
  global const float* a = (global const float*)(a_b + a_off);
  global const float* b = (global const float*)(b_b + b_off);
  ((global float*)(y_b + y_off))[i] = a[i] + b[i % b_len];
}

kernel void swiglu_f32(global const uchar* g_b, ulong g_off, global const uchar* u_b, ulong u_off,
                       global uchar* y_b, ulong y_off, int n) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const float g = ((global const float*)(g_b + g_off))[i];
  const float u = ((global const float*)(u_b + u_off))[i];
#ifdef cl_khr_fp64
  // GenieX's exponential (attention.cl, earlier in the program), as the CPU op computes it.
  ((global float*)(y_b + y_off))[i] = g / (1.0f + exp_f32_via_f64(-g)) * u;
#else
  ((global float*)(y_b + y_off))[i] = g / (1.0f + exp(-g)) * u;
#endif
}

kernel void geglu_f32(global const uchar* g_b, ulong g_off, global const uchar* u_b, ulong u_off,
                      global uchar* y_b, ulong y_off, int n) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const float x = ((global const float*)(g_b + g_off))[i];
  const float u = ((global const float*)(u_b + u_off))[i];
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  const float gelu = 0.5f * x * (1.0f + tanh(k * x * (1.0f + 0.044715f * x * x)));
  ((global float*)(y_b + y_off))[i] = gelu * u;
}

kernel void scale_f32(global const uchar* x_b, ulong x_off, global uchar* y_b, ulong y_off, int n,
                      float s) {
  const int i = get_global_id(0);
  if (i >= n) return;
  ((global float*)(y_b + y_off))[i] = ((global const float*)(x_b + x_off))[i] * s;
}
