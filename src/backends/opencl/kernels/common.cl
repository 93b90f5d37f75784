// Shared by every GenieX OpenCL kernel (prepended to the program): fp16 loads that need no
// cl_khr_fp16, the GGUF block layouts of src/quant/quant.hpp, element decoders and per-block
// integer dot products against int8 activation blocks (Q8_0 / Q8_1 / Q8_K), written as the
// scalar references in src/quant/ so results agree with the CPU backend to float rounding.
//
// Portability choices (the target is Adreno 6xx/7xx; PoCL runs the same source in CI):
// - OpenCL C 1.2 only: no generic address space, no program-scope globals, no subgroups
//   required. Reductions use local memory and barriers; where cl_khr_subgroups or
//   cl_qcom_reqd_sub_group_size exist (Adreno), sub_group_reduce_add could replace the
//   local-memory trees (not done yet, noted in each kernel).
// - fp16 is read with vload_half/vstore_half, which every device has; on Adreno, half
//   arithmetic (cl_khr_fp16) would double ALU rate for attention and norms, but the CPU
//   reference computes in f32 and the scheduler must see the same numbers on both.
// - Weights stay in GGUF block layout in plain buffers, read byte-wise. Adreno's texture
//   path (image1d_buffer_t, read_imageui) gives a second cache and ~2x bandwidth for
//   weights when they are repacked as struct-of-arrays (scales apart from quants); that
//   repack is the next step for speed and does not change the host side.
// - Float contraction is off so a*b+c rounds like the CPU reference (which is built without
//   -ffp-contract); kernels call fma() explicitly where the reference does.
#pragma OPENCL FP_CONTRACT OFF

inline float ld_half(global const uchar* p) { return vload_half(0, (global const half*)p); }
inline float ld_f32(global const uchar* p) { return *(global const float*)p; }
inline int ld_i16(global const uchar* p) { return (int)(short)(p[0] | (p[1] << 8)); }

// ---- element decoders: value i of a row (row points at the row's first block) ----------------

inline float elem_f32(global const uchar* row, int i) { return ld_f32(row + 4 * i); }
inline float elem_f16(global const uchar* row, int i) { return ld_half(row + 2 * i); }

inline float elem_q4_0(global const uchar* row, int i) {
  global const uchar* b = row + (i / 32) * 18;
  const int j = i % 32;
  const uchar q = b[2 + (j % 16)];
  const int v = j < 16 ? (q & 15) : (q >> 4);
  return (float)(v - 8) * ld_half(b);
}

inline float elem_q4_1(global const uchar* row, int i) {
  global const uchar* b = row + (i / 32) * 20;
  const int j = i % 32;
  const uchar q = b[4 + (j % 16)];
  const int v = j < 16 ? (q & 15) : (q >> 4);
  return (float)v * ld_half(b) + ld_half(b + 2);
}

inline float elem_q8_0(global const uchar* row, int i) {
  global const uchar* b = row + (i / 32) * 34;
  return (float)((char)b[2 + i % 32]) * ld_half(b);
}

// Q4_K's 6-bit (scale, min) pair j of 8, packed in 12 bytes.
inline int2 q4k_scale_min(global const uchar* s, int j) {
  if (j < 4) return (int2)(s[j] & 63, s[j + 4] & 63);
  return (int2)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4));
}

inline float elem_q4_k(global const uchar* row, int i) {
  global const uchar* b = row + (i / 256) * 144;
  const int j = i % 256;
  const int chunk = j / 64, w = j % 64;
  const int2 sm = q4k_scale_min(b + 4, 2 * chunk + (w >= 32));
  const uchar q = b[16 + chunk * 32 + (w % 32)];
  const int v = w < 32 ? (q & 15) : (q >> 4);
  const float d1 = ld_half(b) * (float)sm.x;
  const float m1 = ld_half(b + 2) * (float)sm.y;
  return d1 * (float)v - m1;
}

inline float elem_q6_k(global const uchar* row, int i) {
  global const uchar* b = row + (i / 256) * 210;
  const int j = i % 256;
  const int nn = j / 128, qd = (j % 128) / 32, l = j % 32;
  const uchar lo = b[nn * 64 + l + (qd & 1) * 32];
  const int low = qd >= 2 ? (lo >> 4) : (lo & 15);
  const int high = (b[128 + nn * 32 + l] >> (2 * qd)) & 3;
  const int q = (low | (high << 4)) - 32;
  const float sc = (float)((char)b[192 + nn * 8 + l / 16 + 2 * qd]);
  return ld_half(b + 208) * sc * (float)q;
}

// ---- block dot products: weight block . activation block ------------------------------------
// Plain types have one-element "blocks" so every kernel can be written over blocks.
// Written once as a macro: OpenCL C 1.2 has no generic address space, and the tiled
// MatMul reads blocks from local memory while the matrix-vector kernel reads them from global.
#define GX_BLOCK_DOTS(AS, SFX) \
inline float ld_half##SFX(AS const uchar* p) { return vload_half(0, (AS const half*)p); } \
inline float ld_f32##SFX(AS const uchar* p) { return *(AS const float*)p; } \
inline int ld_i16##SFX(AS const uchar* p) { return (int)(short)(p[0] | (p[1] << 8)); } \
inline int2 q4k_scale_min##SFX(AS const uchar* s, int j) { \
  if (j < 4) return (int2)(s[j] & 63, s[j + 4] & 63); \
  return (int2)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)); \
} \
inline float dot_f32##SFX(AS const uchar* w, AS const uchar* a) { return ld_f32##SFX(w) * ld_f32##SFX(a); } \
inline float dot_f16##SFX(AS const uchar* w, AS const uchar* a) { return ld_half##SFX(w) * ld_half##SFX(a); } \
inline float dot_q4_0##SFX(AS const uchar* w, AS const uchar* a) { \
  int s = 0; \
  for (int j = 0; j < 16; ++j) { \
    const uchar q = w[2 + j]; \
    s += ((q & 15) - 8) * (char)a[2 + j] + ((q >> 4) - 8) * (char)a[18 + j]; \
  } \
  return (float)s * (ld_half##SFX(w) * ld_half##SFX(a)); \
} \
inline float dot_q4_1##SFX(AS const uchar* w, AS const uchar* a) { \
  int s = 0; \
  for (int j = 0; j < 16; ++j) { \
    const uchar q = w[4 + j]; \
    s += (q & 15) * (char)a[4 + j] + (q >> 4) * (char)a[20 + j]; \
  } \
  return (float)s * (ld_half##SFX(w) * ld_half##SFX(a)) + ld_half##SFX(w + 2) * ld_half##SFX(a + 2); \
} \
inline float dot_q8_0##SFX(AS const uchar* w, AS const uchar* a) { \
  int s = 0; \
  for (int j = 0; j < 32; ++j) s += (char)w[2 + j] * (char)a[2 + j]; \
  return (float)s * (ld_half##SFX(w) * ld_half##SFX(a)); \
} \
inline float dot_q4_k##SFX(AS const uchar* w, AS const uchar* a) { \
  AS const uchar* q4 = w + 16; \
  AS const uchar* q8 = a + 4; \
  AS const uchar* bsums = a + 260; \
  int sumi = 0, summs = 0; \
  for (int j = 0; j < 4; ++j, q4 += 32, q8 += 64) { \
    const int2 sm0 = q4k_scale_min##SFX(w + 4, 2 * j); \
    const int2 sm1 = q4k_scale_min##SFX(w + 4, 2 * j + 1); \
    int s0 = 0, s1 = 0; \
    for (int l = 0; l < 32; ++l) { \
      s0 += (q4[l] & 15) * (char)q8[l]; \
      s1 += (q4[l] >> 4) * (char)q8[l + 32]; \
    } \
    sumi += sm0.x * s0 + sm1.x * s1; \
    summs += sm0.y * (ld_i16##SFX(bsums + 8 * j) + ld_i16##SFX(bsums + 8 * j + 2)) + \
             sm1.y * (ld_i16##SFX(bsums + 8 * j + 4) + ld_i16##SFX(bsums + 8 * j + 6)); \
  } \
  const float da = ld_f32##SFX(a); \
  const float d = ld_half##SFX(w) * da; \
  const float dmin = ld_half##SFX(w + 2) * da; \
  return d * (float)sumi - dmin * (float)summs; \
} \
inline float dot_q6_k##SFX(AS const uchar* w, AS const uchar* a) { \
  AS const uchar* ql = w; \
  AS const uchar* qh = w + 128; \
  AS const uchar* sc = w + 192; \
  AS const uchar* q8 = a + 4; \
  int sumi = 0; \
  for (int nn = 0; nn < 2; ++nn, ql += 64, qh += 32, sc += 8, q8 += 128) { \
    int s[8] = {0, 0, 0, 0, 0, 0, 0, 0}; \
    for (int l = 0; l < 32; ++l) { \
      const int is = l / 16; \
      const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32; \
      const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32; \
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32; \
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32; \
      s[is] += q1 * (char)q8[l]; \
      s[is + 2] += q2 * (char)q8[l + 32]; \
      s[is + 4] += q3 * (char)q8[l + 64]; \
      s[is + 6] += q4 * (char)q8[l + 96]; \
    } \
    for (int k = 0; k < 8; ++k) sumi += (char)sc[k] * s[k]; \
  } \
  return ld_half##SFX(w + 208) * ld_f32##SFX(a) * (float)sumi; \
} \

GX_BLOCK_DOTS(global, _g)
GX_BLOCK_DOTS(local, _l)
