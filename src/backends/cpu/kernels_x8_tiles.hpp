// AVX-512 register tiles over the packed 8-row layouts (Q4_0x8, Q4_1x8, Q8_0x8; see packed.hpp):
// 8 weight rows x C activation columns per tile, each weight block loaded and decoded once per
// tile and each activation block broadcast once per column. Included, inside an anonymous
// namespace, by kernels_avx512.cpp (kVnni = false: maddubs + madd) and by
// kernels_avx512vnni.cpp (kVnni = true: dpbusd), so each file has its own copy compiled for
// its instruction set.
//
// Q4_0 and, with VNNI, Q8_0 multiply unsigned quants (w + 8, w + 128); their offset
// bias * sum(a) is taken off each i32 lane exactly, from a per-lane correction computed once
// per activation block (a float correction would cancel large terms).
//
// Expects <immintrin.h>, <vector>, <cstring> and quant/quant.hpp to be included.

enum class X8Format { Q4_0, Q4_1, Q8_0 };

template <X8Format F>
struct X8Traits;
template <>
struct X8Traits<X8Format::Q4_0> {
  static constexpr size_t kBlockBytes = 144;  // 8 x fp16 d, 8 x 16 quant bytes
  static constexpr size_t kQuantOffset = 16;
  static constexpr size_t kActBytes = sizeof(quant::BlockQ8_0);
  static constexpr size_t kActQuantOffset = 2;
};
template <>
struct X8Traits<X8Format::Q4_1> {
  static constexpr size_t kBlockBytes = 160;  // 8 x fp16 d, 8 x fp16 m, 8 x 16 quant bytes
  static constexpr size_t kQuantOffset = 32;
  static constexpr size_t kActBytes = sizeof(quant::BlockQ8_1);
  static constexpr size_t kActQuantOffset = 4;
};
template <>
struct X8Traits<X8Format::Q8_0> {
  static constexpr size_t kBlockBytes = 272;  // 8 x fp16 d, 8 x 32 quant bytes
  static constexpr size_t kQuantOffset = 16;
  static constexpr size_t kActBytes = sizeof(quant::BlockQ8_0);
  static constexpr size_t kActQuantOffset = 2;
};

// Per activation column and block (column-major): d_a, Q4_1's s_a, and for Q4_0 / Q8_0 (VNNI)
// the per-lane correction -bias * (sum of the activation bytes feeding the lane).
//
// Not std::vector<float> / std::vector<int32_t>: their member functions instantiated in an
// AVX-512 translation unit are weak symbols, and the linker may keep this copy for every other
// translation unit too, putting AVX-512 instructions into code that runs on any CPU (SIGILL on
// AVX2-only CPUs, seen in the ASan build). X8Buffer, a class of this file's anonymous
// namespace, has internal linkage.
template <class T>
class X8Buffer {
 public:
  X8Buffer() = default;
  ~X8Buffer() { delete[] p_; }
  X8Buffer(const X8Buffer&) = delete;
  X8Buffer& operator=(const X8Buffer&) = delete;
  // At least n elements (contents unspecified after growth).
  void reserve(size_t n) {
    if (n <= n_) return;
    delete[] p_;
    p_ = new T[n];
    n_ = n;
  }
  size_t size() const { return n_; }
  T* data() { return p_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

struct X8ActTerms {
  X8Buffer<float> d, t;
  X8Buffer<int32_t> corr;
};

template <X8Format F, bool kVnni>
constexpr int x8_corr_lanes() {
  return F == X8Format::Q4_0 || (F == X8Format::Q8_0 && kVnni) ? 8 : 0;
}

template <X8Format F, bool kVnni>
void x8_prepare(const uint8_t* a, size_t a_stride, int64_t n_cols, int64_t nb, X8ActTerms* out) {
  constexpr int kLanes = x8_corr_lanes<F, kVnni>();
  const size_t n = static_cast<size_t>(n_cols * nb);
  out->d.reserve(n);
  out->t.reserve(n);
  out->corr.reserve(n * kLanes);
  for (int64_t c = 0; c < n_cols; ++c) {
    const uint8_t* row = a + static_cast<size_t>(c) * a_stride;
    float* d = out->d.data() + c * nb;
    float* t = out->t.data() + c * nb;
    for (int64_t b = 0; b < nb; ++b) {
      if constexpr (F == X8Format::Q4_1) {
        const auto& blk = reinterpret_cast<const quant::BlockQ8_1*>(row)[b];
        d[b] = _cvtsh_ss(blk.d);
        t[b] = _cvtsh_ss(blk.s);
      } else {
        const auto& blk = reinterpret_cast<const quant::BlockQ8_0*>(row)[b];
        d[b] = _cvtsh_ss(blk.d);
        t[b] = 0.0f;
        int32_t* corr = out->corr.data() + (c * nb + b) * kLanes;
        // Lane l covers elements 4l..4l+3 (for Q4_0 lanes 0..3 meet the low nibbles, 4..7 the high).
        for (int l = 0; l < kLanes; ++l) {
          int32_t sum = 0;
          for (int i = 0; i < 4; ++i) sum += blk.qs[4 * l + i];
          corr[l] = -(F == X8Format::Q4_0 ? 8 : 128) * sum;
        }
      }
    }
  }
}

// u8 x s8 dot products of 4 consecutive bytes into i32 lanes, added to init.
template <bool kVnni>
inline __m512i x8_dot(__m512i init, __m512i u, __m512i s) {
  if constexpr (kVnni) {
    return _mm512_dpbusd_epi32(init, u, s);
  } else {
    return _mm512_add_epi32(init, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
  }
}

// The AVX2 kernels' horizontal sum of a row's 8 lanes a0..a7, ((a0+a4)+(a2+a6))+((a1+a5)+(a3+a7)),
// given t = (a0+a4, a1+a5, a2+a6, a3+a7) in each 128-bit lane: the row total lands in lane 4k.
inline __m512 x8_finish4(__m512 t) {
  const __m512 u = _mm512_add_ps(t, _mm512_shuffle_ps(t, t, _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(u, _mm512_shuffle_ps(u, u, _MM_SHUFFLE(1, 1, 1, 1)));
}

// One group of 8 rows (nb blocks from grp) times C columns (activation rows a, a_stride apart;
// their terms at ad/at/corr + c * nb), written to out[c * os + 0..7].
//
// Every row's products are summed exactly as in the AVX2 tiles (kernels_avx2.cpp, themselves
// as llama.cpp's vec_dot): 8 i32 lanes per row and block, lane i holding elements 4i..4i+3,
// acc_i += (d_w d_a) * lane_i, the same final horizontal sum, plus m_w s_a summed in block
// order. So results do not depend on repacking, bit for bit. For the 4-bit formats the low
// nibbles (elements 0..15, lanes 0..3) and the high ones (16..31, lanes 4..7) of register z
// (rows 4z..4z+3, 4 lanes each) are kept in separate accumulators; for Q8_0 register z holds
// rows 2z (lanes 0..7) and 2z+1 (lanes 8..15).
template <X8Format F, bool kVnni, int C>
void x8_tile(int64_t nb, const uint8_t* grp, const uint8_t* a, size_t a_stride, const float* ad,
             const float* at, const int32_t* corr, float* out, int64_t os) {
  using T = X8Traits<F>;
  constexpr int kLanes = x8_corr_lanes<F, kVnni>();
  constexpr bool kQ8 = F == X8Format::Q8_0;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  (void)corr;
  (void)at;
  (void)flip;
  (void)low4;
  // Scale spreads: per accumulator k, the row of each lane.
  __m512i spread[4];
  for (int k = 0; k < 4; ++k) {
    int idx[16];
    for (int l = 0; l < 16; ++l) idx[l] = kQ8 ? 2 * k + l / 8 : 4 * (k / 2) + l / 4;
    spread[k] = _mm512_loadu_si512(idx);
  }
  __m512 acc[C][4];
  __m256 off[C];
  for (int c = 0; c < C; ++c) {
    for (int k = 0; k < 4; ++k) acc[c][k] = _mm512_setzero_ps();
    off[c] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = grp + static_cast<size_t>(b) * T::kBlockBytes;
    if constexpr (C == 1) {
      _mm_prefetch(reinterpret_cast<const char*>(blk + 8 * T::kBlockBytes), _MM_HINT_T0);
      if constexpr (T::kBlockBytes > 192) {
        _mm_prefetch(reinterpret_cast<const char*>(blk + 8 * T::kBlockBytes + 192), _MM_HINT_T0);
      }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    __m512 sw[4];
    for (int k = 0; k < 4; ++k) sw[k] = _mm512_permutexvar_ps(spread[k], _mm512_castps256_ps512(dw));
    __m256 mw = _mm256_setzero_ps();
    if constexpr (F == X8Format::Q4_1) mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
    const uint8_t* qs = blk + T::kQuantOffset;
    // u[k]: unsigned (or, Q8_0 without VNNI, |w|) quants of accumulator k; w[k]: Q8_0's signs.
    __m512i u[4], w[4];
    if constexpr (kQ8) {
      for (int k = 0; k < 4; ++k) {
        w[k] = _mm512_loadu_si512(qs + 64 * k);
        u[k] = kVnni ? _mm512_xor_si512(w[k], flip) : _mm512_abs_epi8(w[k]);  // w + 128 or |w|
      }
    } else {
      for (int z = 0; z < 2; ++z) {
        const __m512i q = _mm512_loadu_si512(qs + 64 * z);
        u[2 * z] = _mm512_and_si512(q, low4);
        u[2 * z + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
        w[2 * z] = w[2 * z + 1] = q;
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const uint8_t* ap = a + static_cast<size_t>(c) * a_stride + static_cast<size_t>(b) * T::kActBytes + T::kActQuantOffset;
      const __m512 da = _mm512_set1_ps(ad[c * nb + b]);
      __m512i av[2], cv[2];
      cv[0] = cv[1] = _mm512_setzero_si512();
      if constexpr (kQ8) {
        av[0] = av[1] = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ap)));
        if constexpr (kLanes == 8) {
          cv[0] = cv[1] = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr + (c * nb + b) * 8)));
        }
      } else {
        av[0] = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ap)));
        av[1] = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ap + 16)));
        if constexpr (kLanes == 8) {
          cv[0] = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(corr + (c * nb + b) * 8)));
          cv[1] = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(corr + (c * nb + b) * 8 + 4)));
        }
      }
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const int h = kQ8 ? 0 : k % 2;
        __m512i dot;
        if constexpr (kQ8 && !kVnni) {
          // |w| * (a * sign(w)): maddubs' unsigned-by-signed form, as the AVX2 Q8_0 kernel.
          const __m512i as = _mm512_mask_sub_epi8(av[h], _mm512_movepi8_mask(w[k]), _mm512_setzero_si512(), av[h]);
          dot = x8_dot<false>(cv[h], u[k], as);
        } else {
          dot = x8_dot<kVnni>(cv[h], u[k], av[h]);
        }
        acc[c][k] = _mm512_fmadd_ps(_mm512_mul_ps(sw[k], da), _mm512_cvtepi32_ps(dot), acc[c][k]);
      }
      if constexpr (F == X8Format::Q4_1) off[c] = _mm256_add_ps(off[c], _mm256_mul_ps(mw, _mm256_set1_ps(at[c * nb + b])));
    }
  }
  for (int c = 0; c < C; ++c) {
    __m256 r;
    if constexpr (kQ8) {
      __m512 v[4];
      for (int z = 0; z < 4; ++z) {
        // Within each 256-bit half: lane i + lane i+4.
        const __m512 t = _mm512_add_ps(acc[c][z], _mm512_shuffle_f32x4(acc[c][z], acc[c][z], _MM_SHUFFLE(2, 3, 0, 1)));
        v[z] = x8_finish4(t);  // row 2z in lane 0, row 2z+1 in lane 8
      }
      const __m512i pick = _mm512_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24, 0, 0, 0, 0, 0, 0, 0, 0);
      const __m512 r0 = _mm512_permutex2var_ps(v[0], pick, v[1]);
      const __m512 r1 = _mm512_permutex2var_ps(v[2], pick, v[3]);
      r = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm512_castps512_ps128(r0)), _mm512_castps512_ps128(r1), 1);
    } else {
      const __m512 v0 = x8_finish4(_mm512_add_ps(acc[c][0], acc[c][1]));  // rows 0..3 in lanes 0, 4, 8, 12
      const __m512 v1 = x8_finish4(_mm512_add_ps(acc[c][2], acc[c][3]));
      const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
      r = _mm512_castps512_ps256(_mm512_permutex2var_ps(v0, pick, v1));
    }
    if constexpr (F == X8Format::Q4_1) r = _mm256_add_ps(r, off[c]);
    _mm256_storeu_ps(out + c * os, r);
  }
}

// Columns in tiles of kCols (the last 1..kCols-1 by smaller tiles) for each group of 8 rows.
// Prefill keeps each group's weights (8 rows, a few KiB) in L1 across all column tiles.
template <X8Format F, bool kVnni>
void x8_gemm(int64_t n, const void* w, size_t /*w_stride*/, int64_t n_rows, const void* a, size_t a_stride,
             int64_t n_cols, float* out, int64_t out_stride) {
  using T = X8Traits<F>;
  constexpr int kCols = 4;
  constexpr int kLanes = x8_corr_lanes<F, kVnni>();
  const int64_t nb = n / 32;
  thread_local X8ActTerms terms;
  const auto* ab = static_cast<const uint8_t*>(a);
  x8_prepare<F, kVnni>(ab, a_stride, n_cols, nb, &terms);
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t g = 0; g < n_rows / 8; ++g) {
    const uint8_t* grp = wb + static_cast<size_t>(g * nb) * T::kBlockBytes;
    int64_t c = 0;
    for (; c + kCols <= n_cols; c += kCols) {
      x8_tile<F, kVnni, kCols>(nb, grp, ab + static_cast<size_t>(c) * a_stride, a_stride, terms.d.data() + c * nb,
                               terms.t.data() + c * nb, terms.corr.data() + c * nb * kLanes,
                               out + c * out_stride + g * 8, out_stride);
    }
    for (; c < n_cols; ++c) {
      x8_tile<F, kVnni, 1>(nb, grp, ab + static_cast<size_t>(c) * a_stride, a_stride, terms.d.data() + c * nb,
                           terms.t.data() + c * nb, terms.corr.data() + c * nb * kLanes,
                           out + c * out_stride + g * 8, out_stride);
    }
  }
}
