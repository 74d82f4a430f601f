/* The AVX-512 intrinsics forward.c's shared code uses (norms, RoPE, SiLU, the softmax and its exp, the
 * residual adds, top-k, argmax, widening), lane for lane, on a CPU with AVX2 and FMA but no AVX512-BF16 (an
 * AMD EPYC Zen 3, say): each 16-lane vector is two 8-lane halves.
 *
 * forward.c is written once, against AVX-512; where the compiler has no AVX512-BF16 it includes this file
 * after <immintrin.h>, and each `_mm512_…` name it calls becomes the function of that name here (GCC
 * declares the 512-bit vector types on every target; it cannot emit their instructions without AVX-512).
 * Every function computes what its AVX-512 namesake computes in every lane, so each sum runs in the
 * order forward.c gives it and the kernel's bit-for-bit argument holds here unchanged: a token verified
 * in a tree gets the bits it gets decoded alone. float32 → bfloat16 rounds to nearest even as
 * `vcvtneps2bf16` does; masks are the 16-bit integers AVX-512 uses.
 *
 * The three hot loops do not come through here: forward.c has AVX2 shapes of its own for the products'
 * block (each `vdpbf16ps` as two FMAs, the odd element first as Intel's pseudocode orders them; a bf16
 * product is exact in float32, so each step rounds once, as the instruction's do, which unlike this reads
 * denormal inputs as zero), the scores and the value sums: 16 ymm registers cannot hold 24 zmm accumulators. */
#ifndef SPECSCOPE_AVX2_H
#define SPECSCOPE_AVX2_H

/* 64-byte vectors passed between these inline functions: GCC notes that their ABI differs without AVX-512. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef union {
    __m512 f;
    __m512i i;
    __m512bh b;
    __m256 h[2];
    __m256i n[2];
} Halves;

static inline __m512 of_halves(__m256 lo, __m256 hi) { return (Halves){.h = {lo, hi}}.f; }
static inline __m512i of_int_halves(__m256i lo, __m256i hi) { return (Halves){.n = {lo, hi}}.i; }
static inline __m256 lo_of(__m512 v) { return (Halves){.f = v}.h[0]; }
static inline __m256 hi_of(__m512 v) { return (Halves){.f = v}.h[1]; }
static inline __m256i lo_int(__m512i v) { return (Halves){.i = v}.n[0]; }
static inline __m256i hi_int(__m512i v) { return (Halves){.i = v}.n[1]; }

/* Lanes of a 16-bit mask as all-ones / all-zeros 32-bit lanes, and back. */
static inline __m256i lanes_of(unsigned mask, int half) {
    const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)(mask >> (8 * half)) & 0xff), bits), bits);
}
static inline __mmask16 mask_of(__m256 lo, __m256 hi) {
    return (__mmask16)(_mm256_movemask_ps(lo) | _mm256_movemask_ps(hi) << 8);
}

#define FLOAT_OP(name, op)                                                                  \
    static inline __m512 name(__m512 a, __m512 b) {                                         \
        return of_halves(op(lo_of(a), lo_of(b)), op(hi_of(a), hi_of(b)));                   \
    }
FLOAT_OP(avx2_add_ps, _mm256_add_ps)
FLOAT_OP(avx2_sub_ps, _mm256_sub_ps)
FLOAT_OP(avx2_mul_ps, _mm256_mul_ps)
FLOAT_OP(avx2_div_ps, _mm256_div_ps)
FLOAT_OP(avx2_max_ps, _mm256_max_ps)
FLOAT_OP(avx2_min_ps, _mm256_min_ps)
#undef FLOAT_OP

#define INT_OP(name, op)                                                                    \
    static inline __m512i name(__m512i a, __m512i b) {                                      \
        return of_int_halves(op(lo_int(a), lo_int(b)), op(hi_int(a), hi_int(b)));           \
    }
INT_OP(avx2_add_epi32, _mm256_add_epi32)
#undef INT_OP

static inline __m512 avx2_fmadd_ps(__m512 a, __m512 b, __m512 c) {
    return of_halves(_mm256_fmadd_ps(lo_of(a), lo_of(b), lo_of(c)), _mm256_fmadd_ps(hi_of(a), hi_of(b), hi_of(c)));
}
static inline __m512 avx2_set1_ps(float x) { return of_halves(_mm256_set1_ps(x), _mm256_set1_ps(x)); }
static inline __m512 avx2_setzero_ps(void) { return avx2_set1_ps(0.f); }
static inline __m512i avx2_set1_epi32(int x) { return of_int_halves(_mm256_set1_epi32(x), _mm256_set1_epi32(x)); }
static inline __m512i avx2_setzero_si512(void) { return avx2_set1_epi32(0); }
static inline __m512i avx2_setr_epi32(int a, int b, int c, int d, int e, int f, int g, int h, int i, int j, int k,
                                      int l, int m, int n, int o, int p) {
    return of_int_halves(_mm256_setr_epi32(a, b, c, d, e, f, g, h), _mm256_setr_epi32(i, j, k, l, m, n, o, p));
}
static inline __m512 avx2_castsi512_ps(__m512i v) { return (Halves){.i = v}.f; }
static inline __m512i avx2_slli_epi32(__m512i v, int count) {
    return of_int_halves(_mm256_slli_epi32(lo_int(v), count), _mm256_slli_epi32(hi_int(v), count));
}
static inline __m512i avx2_cvtepu16_epi32(__m256i v) {
    return of_int_halves(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v)),
                         _mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1)));
}

static inline __m512 avx2_loadu_ps(const void *p) {
    return of_halves(_mm256_loadu_ps((const float *)p), _mm256_loadu_ps((const float *)p + 8));
}
static inline void avx2_storeu_ps(void *p, __m512 v) {
    _mm256_storeu_ps((float *)p, lo_of(v));
    _mm256_storeu_ps((float *)p + 8, hi_of(v));
}
static inline __m512i avx2_loadu_si512(const void *p) {
    return of_int_halves(_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)p + 1));
}
static inline void avx2_storeu_si512(void *p, __m512i v) {
    _mm256_storeu_si256((__m256i *)p, lo_int(v));
    _mm256_storeu_si256((__m256i *)p + 1, hi_int(v));
}

/* Masked loads and stores touch only the lanes the mask names (the rest may lie past an array's end). */
static inline __m512 avx2_maskz_loadu_ps(__mmask16 mask, const void *p) {
    return of_halves(_mm256_maskload_ps((const float *)p, lanes_of(mask, 0)),
                     _mm256_maskload_ps((const float *)p + 8, lanes_of(mask, 1)));
}
static inline __m512 avx2_mask_mov_ps(__m512 src, __mmask16 mask, __m512 v) {
    return of_halves(_mm256_blendv_ps(lo_of(src), lo_of(v), _mm256_castsi256_ps(lanes_of(mask, 0))),
                     _mm256_blendv_ps(hi_of(src), hi_of(v), _mm256_castsi256_ps(lanes_of(mask, 1))));
}
static inline __m512i avx2_mask_mov_epi32(__m512i src, __mmask16 mask, __m512i v) {
    return of_int_halves(_mm256_blendv_epi8(lo_int(src), lo_int(v), lanes_of(mask, 0)),
                         _mm256_blendv_epi8(hi_int(src), hi_int(v), lanes_of(mask, 1)));
}
static inline __m512 avx2_maskz_mov_ps(__mmask16 mask, __m512 v) { return avx2_mask_mov_ps(avx2_setzero_ps(), mask, v); }
static inline __m512 avx2_mask_loadu_ps(__m512 src, __mmask16 mask, const void *p) {
    return avx2_mask_mov_ps(src, mask, avx2_maskz_loadu_ps(mask, p));
}
static inline void avx2_mask_storeu_ps(void *p, __mmask16 mask, __m512 v) {
    _mm256_maskstore_ps((float *)p, lanes_of(mask, 0), lo_of(v));
    _mm256_maskstore_ps((float *)p + 8, lanes_of(mask, 1), hi_of(v));
}
static inline void avx2_mask_storeu_epi16(void *p, __mmask16 mask, __m256i v) {
    uint16_t lanes[16];
    _mm256_storeu_si256((__m256i *)lanes, v);
    for (int i = 0; i < 16; i++)
        if (mask >> i & 1) ((uint16_t *)p)[i] = lanes[i];
}

#define avx2_cmp_ps_mask(a, b, predicate)                                                                  \
    mask_of(_mm256_cmp_ps(lo_of(a), lo_of(b), predicate), _mm256_cmp_ps(hi_of(a), hi_of(b), predicate))
#define avx2_mask_cmp_ps_mask(mask, a, b, predicate) ((__mmask16)((mask) & avx2_cmp_ps_mask(a, b, predicate)))
#define avx2_roundscale_ps(v, how) of_halves(_mm256_round_ps(lo_of(v), how), _mm256_round_ps(hi_of(v), how))

/* Sums and maxima across the 16 lanes, in one fixed order (a row's sum is the same whatever its neighbours). */
static inline float avx2_reduce_add_ps(__m512 v) {
    float lanes[16], sum = 0.f;
    avx2_storeu_ps(lanes, v);
    for (int i = 0; i < 16; i++) sum += lanes[i];
    return sum;
}
static inline float avx2_reduce_max_ps(__m512 v) {
    float lanes[16], most;
    avx2_storeu_ps(lanes, v);
    most = lanes[0];
    for (int i = 1; i < 16; i++) most = lanes[i] > most ? lanes[i] : most;
    return most;
}

/* p · 2^i for integral i in [-150, 128] (exp16's range): two exact powers of two, each a normal float. */
static inline __m256 scale_by_power(__m256 p, __m256 i) {
    const __m256i k = _mm256_cvtps_epi32(i), k1 = _mm256_srai_epi32(k, 1), k2 = _mm256_sub_epi32(k, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 two_k1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    const __m256 two_k2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, two_k1), two_k2);
}
static inline __m512 avx2_scalef_ps(__m512 p, __m512 i) {
    return of_halves(scale_by_power(lo_of(p), lo_of(i)), scale_by_power(hi_of(p), hi_of(i)));
}

/* float32 → bfloat16, round to nearest even, NaN kept quiet: what `vcvtneps2bf16` computes. */
static inline __m128i bf16_of(__m256 v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(x, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i quiet = _mm256_or_si256(x, _mm256_set1_epi32(0x400000));
    const __m256i bits = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
    /* eight 32-bit lanes < 2^16 → eight 16-bit ones: packus works per 128-bit lane, so gather its halves */
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08));
}
static inline __m256bh avx2_cvtneps_pbh(__m512 v) {
    return (__m256bh)_mm256_set_m128i(bf16_of(hi_of(v)), bf16_of(lo_of(v)));
}

#define _mm512_add_ps avx2_add_ps
#define _mm512_sub_ps avx2_sub_ps
#define _mm512_mul_ps avx2_mul_ps
#define _mm512_div_ps avx2_div_ps
#define _mm512_max_ps avx2_max_ps
#define _mm512_min_ps avx2_min_ps
#define _mm512_fmadd_ps avx2_fmadd_ps
#define _mm512_set1_ps avx2_set1_ps
#define _mm512_setzero_ps avx2_setzero_ps
#define _mm512_set1_epi32 avx2_set1_epi32
#define _mm512_setzero_si512 avx2_setzero_si512
#undef _mm512_setr_epi32 /* a macro in GCC's header */
#define _mm512_setr_epi32 avx2_setr_epi32
#define _mm512_add_epi32 avx2_add_epi32
#define _mm512_slli_epi32 avx2_slli_epi32
#define _mm512_cvtepu16_epi32 avx2_cvtepu16_epi32
#define _mm512_castsi512_ps avx2_castsi512_ps
#define _mm512_loadu_ps avx2_loadu_ps
#define _mm512_load_ps avx2_loadu_ps
#define _mm512_storeu_ps avx2_storeu_ps
#define _mm512_store_ps avx2_storeu_ps
#define _mm512_loadu_si512 avx2_loadu_si512
#define _mm512_load_si512 avx2_loadu_si512
#define _mm512_storeu_si512 avx2_storeu_si512
#define _mm512_store_si512 avx2_storeu_si512
#define _mm512_maskz_loadu_ps avx2_maskz_loadu_ps
#define _mm512_mask_loadu_ps avx2_mask_loadu_ps
#define _mm512_mask_storeu_ps avx2_mask_storeu_ps
#define _mm512_mask_mov_ps avx2_mask_mov_ps
#define _mm512_maskz_mov_ps avx2_maskz_mov_ps
#define _mm512_mask_mov_epi32 avx2_mask_mov_epi32
#define _mm256_mask_storeu_epi16 avx2_mask_storeu_epi16
#define _mm512_cmp_ps_mask avx2_cmp_ps_mask
#define _mm512_mask_cmp_ps_mask avx2_mask_cmp_ps_mask
#define _mm512_roundscale_ps avx2_roundscale_ps
#define _mm512_reduce_add_ps avx2_reduce_add_ps
#define _mm512_reduce_max_ps avx2_reduce_max_ps
#define _mm512_scalef_ps avx2_scalef_ps
#define _mm512_cvtneps_pbh avx2_cvtneps_pbh

#endif
