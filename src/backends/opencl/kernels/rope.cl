// Rotary embedding, one work-item per (dimension, head, token). cs holds (cos, sin) per
// (token, pair), computed on the host with the CPU op's recurrence and libm (see
// op_rope.cpp): device cos/sin may differ from libm by a few ulp, and SmolLM2's logits move
// visibly with last-bit changes of q and k. The rotation uses fma as the CPU op does.
// mode 0: adjacent pairs (Llama); 1: NeoX halves (Qwen, Gemma).
kernel void rope_f32(global const uchar* x_b, ulong x_off, global const float2* cs, global uchar* y_b,
                     ulong y_off, int head_dim, int n_heads, int n_rot, int mode) {
  const int d = get_global_id(0);
  const int h = get_global_id(1);
  const int t = get_global_id(2);
  if (d >= head_dim) return;
  const ulong base = ((ulong)t * n_heads + h) * head_dim;
  global const float* x = (global const float*)(x_b + x_off) + base;
  global float* y = (global float*)(y_b + y_off) + base;
  if (d >= n_rot) {
    y[d] = x[d];
    return;
  }
  const int half_rot = n_rot / 2;
  const int i = mode == 0 ? d / 2 : d % half_rot;
  const float2 r = cs[(ulong)t * half_rot + i];
  const float x0 = mode == 0 ? x[2 * i] : x[i];
  const float x1 = mode == 0 ? x[2 * i + 1] : x[i + half_rot];
  const bool first = mode == 0 ? (d % 2 == 0) : (d < half_rot);
  y[d] = first ? fma(x0, r.x, -(x1 * r.y)) : fma(x0, r.y, x1 * r.x);
}
