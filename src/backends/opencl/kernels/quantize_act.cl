// Activation quantizers for integer dot products, one work-item per block; the rounding
// follows quant::quantize_activations_ref (ggml's x86 path: scale 127/amax, ties to even),
// so MatMul on the GPU sees the same int8 activations as the CPU backend.
// x: f32 rows of n values (n a multiple of the block), y: blocks, rows packed.

inline void st_half(global uchar* p, float v) { vstore_half_rte(v, 0, (global half*)p); }

kernel void quantize_q8_0(global const uchar* xb, ulong x_off, global uchar* y, int n_blocks) {
  const int b = get_global_id(0);
  if (b >= n_blocks) return;
  global const float* x = (global const float*)(xb + x_off) + 32 * b;
  global uchar* o = y + 34 * b;
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = fmax(amax, fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  st_half(o, d);
  for (int j = 0; j < 32; ++j) o[2 + j] = (uchar)(char)(int)rint(x[j] * id);
}

kernel void quantize_q8_1(global const uchar* xb, ulong x_off, global uchar* y, int n_blocks) {
  const int b = get_global_id(0);
  if (b >= n_blocks) return;
  global const float* x = (global const float*)(xb + x_off) + 32 * b;
  global uchar* o = y + 36 * b;
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = fmax(amax, fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int sum = 0;
  for (int j = 0; j < 32; ++j) {
    const int q = (int)rint(x[j] * id);
    o[4 + j] = (uchar)(char)q;
    sum += q;
  }
  st_half(o, d);
  st_half(o + 2, (float)sum * d);
}

// Q8_K: d = max / -127 with max the signed element of largest magnitude (first on ties).
kernel void quantize_q8_k(global const uchar* xb, ulong x_off, global uchar* y, int n_blocks) {
  const int b = get_global_id(0);
  if (b >= n_blocks) return;
  global const float* x = (global const float*)(xb + x_off) + 256 * b;
  global uchar* o = y + 292 * b;
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 256; ++j) {
    const float ax = fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax == 0.0f) {
    for (int j = 0; j < 292; ++j) o[j] = 0;
    return;
  }
  const float iscale = -127.0f / max;
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int j = 16 * g; j < 16 * g + 16; ++j) {
      const int q = min(127, (int)rint(iscale * x[j]));
      o[4 + j] = (uchar)(char)q;
      sum += q;
    }
    o[260 + 2 * g] = (uchar)(sum & 255);
    o[261 + 2 * g] = (uchar)((sum >> 8) & 255);
  }
  *(global float*)o = 1.0f / iscale;
}

// F16 weights are dotted with f16 activations, as the CPU backend does.
kernel void quantize_f16(global const uchar* xb, ulong x_off, global uchar* y, int n) {
  const int i = get_global_id(0);
  if (i >= n) return;
  st_half(y + 2 * i, ((global const float*)(xb + x_off))[i]);
}
