// Pieces of attention shared by the x86 files, included inside an anonymous namespace by
// kernels_avx2.cpp and by attn_avx512.cpp, so each file has its own copy compiled for its
// instruction set: the eight-query horizontal sum of the scores, the queries-as-lanes scores
// driver, and the unit softmax with the exponential as a parameter (AVX2: 8 floats as two 4-lane
// double halves; AVX-512: one zmm of 8 doubles). Both exps give core/exp.hpp's exp_f32 (exp in
// double, rounded once to float) on every input, so the two files give every output the same bits.
//
// Expects <immintrin.h>, <limits>, <type_traits> and <vector> to be included, and KvRun declared.

// Eight horizontal sums at once, each in hsum8's order ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)),
// so every lane has hsum8(v[i])'s bits: lane i of the result = hsum8(v[i]).
inline __m256 hsum8x8(const __m256* v) {
  __m256 t[4];
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                         _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
  }
  // t[i]: [b(v2i) | b(v2i+1)], b_k = a_k + a_k+4
  const __m256 u0 = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 u1 = _mm256_add_ps(_mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // u0: [c0 c1 of v0, c0 c1 of v2 | v1, v3], c0 = b0 + b2, c1 = b1 + b3; u1 likewise for v4..v7
  const __m256 w = _mm256_add_ps(_mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
  // w: [v0 v2 v4 v6 | v1 v3 v5 v7]
  return _mm256_permutevar8x32_ps(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Eight queries' scores from their chains (red[0..ni): s0 + s1 each) into srow[0..ni): the
// horizontal sums, then the scale.
inline void store_scores8(__m256* red, int ni, __m256 vscale, float* srow) {
  if (ni == 8) {
    _mm256_storeu_ps(srow, _mm256_mul_ps(hsum8x8(red), vscale));
    return;
  }
  alignas(32) float out8[8];
  for (int ii = ni; ii < 8; ++ii) red[ii] = _mm256_setzero_ps();
  _mm256_store_ps(out8, _mm256_mul_ps(hsum8x8(red), vscale));
  for (int ii = 0; ii < ni; ++ii) srow[ii] = out8[ii];
}

// attn_scores_f16_multi's choice by head size: chunks(std::integral_constant<int, NC>{}, q, nq,
// scores) for hd = 64 NC <= 256 (where NC > 1, in passes of at most kMaxScorePass queries, whose
// partial chains the caller keeps between chunks), other() for the other sizes.
constexpr int kMaxScorePass = 64;
template <class Chunks, class Other>
void scores_by_head_size(int64_t hd, const float* q, int64_t q_stride, int nq, float* scores, Chunks chunks,
                         Other other) {
  if (hd == 64) {
    chunks(std::integral_constant<int, 1>{}, q, nq, scores);
    return;
  }
  if (hd % 64 != 0 || hd > 256) {
    other();
    return;
  }
  for (int i0 = 0; i0 < nq; i0 += kMaxScorePass) {
    const int ni = nq - i0 < kMaxScorePass ? nq - i0 : kMaxScorePass;
    const float* qi = q + i0 * q_stride;
    if (hd == 128) {
      chunks(std::integral_constant<int, 2>{}, qi, ni, scores + i0);
    } else if (hd == 192) {
      chunks(std::integral_constant<int, 3>{}, qi, ni, scores + i0);
    } else {
      chunks(std::integral_constant<int, 4>{}, qi, ni, scores + i0);
    }
  }
}

// The queries-as-lanes scores driver (kernels_avx2.cpp: W = 8 queries per ymm; attn_avx512.cpp:
// W = 16 per zmm) for keys of D = 64 NC dimensions: passes of 64 queries, each pass's groups of
// W queries transposed once (transpose(q, n, qt): qt[d * W + i] = query i's dimension d, zeros
// past n), then every run's keys in chunks of 32, converted once to f32 rows (convert(f16 row,
// f32 row)) and scored for each group (keys(qt, kf, n keys, out, ld, queries to store, rs)).
template <int W, int D, class Transpose, class Convert, class Keys>
void scores_query_lanes(const float* q, int64_t q_stride, int nq, const KvRun* runs, int n_runs, size_t row_bytes,
                        float* scores, int64_t ld, Transpose transpose, Convert convert, Keys keys) {
  constexpr int kPass = 64, kKeys = 32;
  alignas(64) float qt[kPass * D];
  alignas(64) float kf[kKeys * D];
  alignas(64) float rs[kKeys * 8 * W];
  for (int i0 = 0; i0 < nq; i0 += kPass) {
    const int np = nq - i0 < kPass ? nq - i0 : kPass;
    for (int g = 0; g * W < np; ++g) {
      transpose(q + (i0 + g * W) * q_stride, np - g * W < W ? np - g * W : W, qt + g * D * W);
    }
    float* srun = scores + i0;
    for (int r = 0; r < n_runs; ++r) {
      for (int j0 = 0; j0 < runs[r].n; j0 += kKeys) {
        const int nk = runs[r].n - j0 < kKeys ? runs[r].n - j0 : kKeys;
        for (int j = 0; j < nk; ++j) {
          convert(reinterpret_cast<const uint16_t*>(runs[r].rows + static_cast<size_t>(j0 + j) * row_bytes), kf + j * D);
        }
        for (int g = 0; g * W < np; ++g) {
          keys(qt + g * D * W, kf, nk, srun + j0 * ld + g * W, ld, np - g * W < W ? np - g * W : W, rs);
        }
      }
      srun += static_cast<int64_t>(runs[r].n) * ld;
    }
  }
}

// p = e * inv rounded to f16 and back, where inv <= 1 (a query's sum includes its max key's
// exp(0) = 1). An e in [+0, 2^-25] gives a p <= 2^-25, which F16C rounds to +0, so such lanes are
// zeroed before the product: the same bits, without the product's subnormal operands or
// results, each a microcode assist on Intel cores (scores spread over +-100 or more put most of
// a row there). The test is on the bit pattern, unsigned, so NaN lanes of either sign pass.
inline __m256 prob_f16(__m256 e, __m256 inv) {
  const __m256i flip = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
  const __m256i tiny = _mm256_set1_epi32(static_cast<int32_t>(0x33000000u ^ 0x80000000u));  // 2^-25
  const __m256i keep = _mm256_cmpgt_epi32(_mm256_xor_si256(_mm256_castps_si256(e), flip), tiny);
  const __m256 p = _mm256_mul_ps(_mm256_and_ps(e, _mm256_castsi256_ps(keep)), inv);
  return _mm256_cvtph_ps(_mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
}

// The softmax of a unit (kernels.hpp), with each query's operations and their order those of
// generic_attn_softmax_multi: max, exp_f32 of s - m (exp8, 8 lanes of exp_f32), the sum in
// double in key order over its own keys, 1 / sum in double rounded to float, the product,
// F16C's round to nearest even. Groups of 8 queries go one key row at a time, 8 queries per
// vector (a query's outside keys add +0 to its sum); the queries left over (all of them in
// decode, where a unit has 1-4) one at a time over their own keys, gathered into a contiguous
// run (masked loads and stores across queries are slow on AMD cores, and a group of 8 lanes
// with one query in it wastes the other 7 exps).
template <class Exp8>
void softmax_group8(Exp8 exp8, float* s, int64_t ld, int32_t jlo, int n_keys, const int32_t* kv0,
                    const int32_t* n_kv) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kv0));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(n_kv));
  // Lanes whose query has key j.
  auto has = [&](int32_t j) {
    const __m256i jv = _mm256_set1_epi32(j);
    return _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_cmpgt_epi32(lo, jv), _mm256_cmpgt_epi32(hi, jv)));
  };
  // Keys [c0, c1) are every lane's (no masks there).
  int c0 = 0, c1 = n_keys;
  for (int i = 0; i < 8; ++i) {
    c0 = kv0[i] - jlo > c0 ? kv0[i] - jlo : c0;
    c1 = n_kv[i] - jlo < c1 ? n_kv[i] - jlo : c1;
  }
  if (c1 < c0) c1 = c0;
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int j = 0; j < n_keys; ++j) {
    const __m256 r = _mm256_loadu_ps(s + j * ld);
    const __m256 mx = _mm256_max_ps(r, m);  // r > m ? r : m
    m = j >= c0 && j < c1 ? mx : _mm256_blendv_ps(m, mx, has(jlo + j));
  }
  __m256d sum0 = _mm256_setzero_pd(), sum1 = _mm256_setzero_pd();
  auto add = [&](__m256 em) {
    sum0 = _mm256_add_pd(sum0, _mm256_cvtps_pd(_mm256_castps256_ps128(em)));
    sum1 = _mm256_add_pd(sum1, _mm256_cvtps_pd(_mm256_extractf128_ps(em, 1)));
  };
  auto key = [&](int j, __m256 e) {
    _mm256_storeu_ps(s + j * ld, e);
    add(j >= c0 && j < c1 ? e : _mm256_and_ps(e, has(jlo + j)));
  };
  int j = 0;
  for (; j + 4 <= n_keys; j += 4) {  // four independent exponentials side by side, summed in key order
    const __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j * ld), m));
    const __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + (j + 1) * ld), m));
    const __m256 e2 = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + (j + 2) * ld), m));
    const __m256 e3 = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + (j + 3) * ld), m));
    key(j, e0);
    key(j + 1, e1);
    key(j + 2, e2);
    key(j + 3, e3);
  }
  for (; j < n_keys; ++j) key(j, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j * ld), m)));
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256 inv = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_div_pd(one, sum1)), _mm256_cvtpd_ps(_mm256_div_pd(one, sum0)));
  for (j = 0; j < n_keys; ++j) {
    float* row = s + j * ld;
    _mm256_storeu_ps(row, prob_f16(_mm256_loadu_ps(row), inv));
  }
}

// A float of the includer's own, so that std::vector<Lane> is an internal-linkage instantiation:
// a std::vector<float> compiled with -mavx2 would be a weak symbol the linker may keep for every
// other file's (see packed_tiles_avx2.cpp).
struct Lane {
  float v;
};

// One query over its keys [a, b) (rows of s, ld apart); the other rows are left alone.
template <class Exp8>
void softmax_one(Exp8 exp8, float* s, int64_t ld, int a, int b, std::vector<Lane>* buf) {
  const int n = b - a;
  if (buf->size() < static_cast<size_t>(n + 8)) buf->resize(static_cast<size_t>(n + 8));
  float* t = &(*buf)[0].v;
  for (int k = 0; k < n; ++k) t[k] = s[(a + k) * ld];
  float m = -std::numeric_limits<float>::infinity();
  for (int k = 0; k < n; ++k) m = t[k] > m ? t[k] : m;
  for (int k = n; k < n + 8; ++k) t[k] = m;  // a whole last vector (exp(0), never read)
  const __m256 mv = _mm256_set1_ps(m);
  for (int k = 0; k < n; k += 8) _mm256_storeu_ps(t + k, exp8(_mm256_sub_ps(_mm256_loadu_ps(t + k), mv)));
  double sum = 0.0;
  for (int k = 0; k < n; ++k) sum += static_cast<double>(t[k]);
  const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
  for (int k = 0; k < n; k += 8) {
    _mm256_storeu_ps(t + k, prob_f16(_mm256_loadu_ps(t + k), inv));
  }
  for (int k = 0; k < n; ++k) s[(a + k) * ld] = t[k];
}

template <class Exp8>
void softmax_multi(Exp8 exp8, float* s, int64_t ld, int nq, int32_t jlo, int n_keys, const int32_t* kv0,
                   const int32_t* n_kv) {
  int i0 = 0;
  for (; i0 + 8 <= nq; i0 += 8) softmax_group8(exp8, s + i0, ld, jlo, n_keys, kv0 + i0, n_kv + i0);
  thread_local std::vector<Lane> buf;
  for (int i = i0; i < nq; ++i) {
    const int a = kv0[i] - jlo > 0 ? kv0[i] - jlo : 0;
    const int b = n_kv[i] - jlo < n_keys ? n_kv[i] - jlo : n_keys;
    if (b > a) softmax_one(exp8, s + i, ld, a, b, &buf);
  }
}
