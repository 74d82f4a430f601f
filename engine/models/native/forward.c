/* The lean forward's bfloat16 CPU kernel: a whole Llama forward of N new tokens in one call.
 *
 * engine/models/native/__init__.py compiles this file once per machine (gcc -O3 -march=native -fopenmp)
 * and engine/models/fastlm.py calls `forward` for bfloat16 forwards on a CPU with AVX512-BF16 or AVX2 (see
 * the dispatch below the includes). Why it
 * exists: torch's bfloat16 matrix-vector product streams a layer's small weights (0.7–3.5 MB) at
 * half the read bandwidth, and the ~60 small ops a layer needs around its products cost as much
 * again in dispatch (docs/fastpath.md). Here the products are AMX tile products that read each
 * weight once per 64 tokens (where the CPU has no AMX, AVX512-BF16 dot products over weights paired
 * once at load, 12 tokens per pass over a block of 32 rows), the glue runs in place, and the whole
 * forward is one OpenMP parallel region with a barrier between stages. `head_step` runs an EAGLE-3
 * draft head's forward with the same layer code. Both take up to MAX_TOKENS new tokens a call and
 * check what they are asked at the boundary (an error code, never a write out of bounds).
 *
 * Rounding follows Hugging Face's bfloat16 forward: every op's result is rounded to bfloat16 where
 * torch would round it (products, norms, RoPE's two products and their sum, the residual adds,
 * SiLU and its product with up). Only the order of float32 sums differs from torch's kernels, so
 * logits agree with torch's to bfloat16 rounding. Among themselves they agree exactly: every sum
 * runs in an order fixed by its own row and column, never by the tokens beside it or by where a
 * tree put a token's ancestors, so a token verified in a tree gets the bits it gets decoded alone.
 * Float32 models never come here.
 *
 * `forward_batch` runs B sequences in one call, each with its own cache, positions and mask (one
 * `Sequence` each): the products read every weight once for the rows of all, and each sequence's rows
 * attend over its own cache. Since no output depends on the rows beside it, each sequence gets the
 * bits it gets in a call of its own; `forward` is the batch of one.
 *
 * Shapes (row-major, bf16 unless said): x [N, H]; kv [L, 2, kv_heads, C, d]; cos, sin_signed
 * [C, d]; mask [N, M] uint8 over the last M of the S = start + N columns (NULL: all visible);
 * weights per layer: qkv [(h + 2 kv) d, H], o [H, h d], gate_up [2 I, H], down [H, I]; logits
 * [N, V]; features [F, N, H] for the layers `feature_slot` maps to a slot (-1: not wanted).
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
/* One dispatch per instruction set: AVX512-BF16 (with AMX where __AMX_BF16__ says so), else AVX2 and FMA, whose
 * avx2.h computes the AVX-512 intrinsics used here in two 8-lane halves (also on an AVX-512 CPU without BF16),
 * with AVX2 shapes of their own for the three hot loops: the products' block, the scores and the value sums. */
#ifdef __AVX512BF16__
#define AVX512 1
#else
#define AVX512 0
#include "avx2.h"
#endif
#if defined(__AMX_BF16__) && !AVX512
#error "AMX without AVX512-BF16: no such CPU was expected (transpose16 and the tiles' packing need AVX-512)"
#endif

typedef uint16_t bf16;

/* What `forward` and `linear` return: 0, or why they refused (engine/models/native/__init__.py says it in words). */
enum {
    NATIVE_OK, NATIVE_BAD_DIMS, NATIVE_TOO_MANY_TOKENS, NATIVE_PAST_CAPACITY, NATIVE_BAD_POSITION,
    NATIVE_BAD_MASK, NATIVE_NO_MEMORY, NATIVE_NO_PAIRS
};
#define MAX_TOKENS 256 /* new tokens per call */

typedef struct {
    int32_t layers, hidden, heads, kv_heads, head_dim, inter, vocab;
    float eps;
} Dims;

typedef struct {
    const bf16 *qkv, *o, *gate_up, *down, *attn_norm, *mlp_norm;
    const bf16 *qkv_tiles, *o_tiles, *gate_up_tiles, *down_tiles; /* the same weights in AMX's tiles (see
                                                                     matmul_amx); NULL where AMX does not run */
    const uint32_t *qkv_pairs, *o_pairs, *gate_up_pairs, *down_pairs; /* the same weights paired (see
                                                                        matmul_pairs); NULL on the AMX path */
    const void *qkv_int8, *o_int8, *gate_up_int8, *down_int8; /* the same weights as int8 × 2^e rows (see
                                                                matmul_int8), or NULL: a draft head's, on AVX2 */
} LayerWeights;

/* Sixteen lanes at a time: bf16 → float32 is exact (a shift); float32 → bf16 rounds to nearest even. */
static inline __m512 load16(const bf16 *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

static inline __m256i pack16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }

static inline void store16(bf16 *p, __m512 v) { _mm256_storeu_si256((__m256i *)p, pack16(v)); }

static inline __m512 round16(__m512 v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(pack16(v)), 16));
}

/* e^x = 2^i · 2^f with i = round(x log2 e), |f| ≤ 1/2, and 2^f by its Taylor series to f^6 (relative
 * error about 1e-7, far below bfloat16's 4e-3). Inputs below -104 give 0. */
#if AVX512
static inline __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.f)), _mm512_set1_ps(88.7f));
    __m512 y = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
    __m512 i = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_mul_ps(_mm512_sub_ps(y, i), _mm512_set1_ps(0.693147180559945309f)); /* f ln 2 */
    __m512 p = _mm512_set1_ps(1.f / 720);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f / 120));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f / 24));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f / 6));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
    return _mm512_scalef_ps(p, i);
}
#else
/* AVX2: the same on 8 lanes, and exp16 as two of them: avx2.h would compute each half by the same ops, so the same
 * bits lane by lane, without a pair of halves passed through memory. */
static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.f)), _mm256_set1_ps(88.7f));
    const __m256 y = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
    const __m256 i = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_mul_ps(_mm256_sub_ps(y, i), _mm256_set1_ps(0.693147180559945309f));
    __m256 p = _mm256_set1_ps(1.f / 720);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.f / 120));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.f / 24));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.f / 6));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.f));
    return scale_by_power(p, i);
}

static inline __m512 exp16(__m512 x) { return of_halves(exp8(lo_of(x)), exp8(hi_of(x))); }
#endif

/* Without AMX the products are AVX512-BF16 dot products (`vdpbf16ps`: a lane adds two bf16 products
 * to its float32) with 16 output rows in the lanes. The weights are repacked once, by
 * engine/models/native/__init__.py's `pair_rows`, as Wp [⌈R/32⌉][K/2][32] uint32: for each 32 rows, pair p
 * (k = 2p, 2p + 1) of every row side by side, zero rows past R; the activations are read as they lie
 * and each token's pair p is broadcast. So out[t, r] = bf16(((0 + w₀·x₀) + w₁·x₁) + …) over the pairs
 * in order: one chain per output, the same whatever the tokens beside t and however the work is cut,
 * and no sum across lanes at the end.
 *
 * A block is 32 rows × up to 12 tokens: 24 accumulators, 2 weight vectors and a broadcast, 27 of the
 * 32 registers. Why this shape: a weight is read from memory once per block, and a block's arithmetic
 * runs while the next weights stream in. A forward of up to 12 tokens (a chain's verify, a small tree,
 * a few requests' trees together) is one pass over the weights, and where memory bounds it costs about
 * what one token costs; more tokens take one more pass, from cache, per 12. (On a Zen 5 a zmm `vdpbf16ps`
 * issues once a cycle and two broadcasts per four products keep up with it: 2 × 12 runs at that peak,
 * while 4 × 6, the shape this replaced, took two passes for 7–12 tokens.) */
#define PAIR_ROWS 32
#if AVX512
#define PAIR_TOKENS 12
#else
#define PAIR_TOKENS 4 /* AVX2 (avx2.h): 16 ymm registers, 8 of them accumulators (see pairs_block) */
#endif

/* With several tokens a block spends its time on arithmetic, the hardware's prefetch stops asking for the
 * next weights meanwhile, and the memory idles: so from PREFETCH_TOKENS tokens on a block asks for the
 * pairs PREFETCH_PAIRS on (4 KB ahead, into L2). On the Zen 5, weights streamed from memory, 8–16 tokens
 * read 20–45 % faster with it, 1–4 tokens within noise, 2 a little slower (so not below 4);
 * scripts/products_bench.py compares this kernel's products with another revision's. AVX2's 3–4-token shape
 * (below) prefetches from 3 tokens, since it is the shape that leaves the memory idle there. */
#define PREFETCH_TOKENS 4
#define PREFETCH_PAIRS 32

static inline void store_rows(bf16 *out, int r, int R, __m512 v) { /* out[r .. r + 16) ∩ [0, R) */
    if (r + 16 <= R) store16(out + r, v);
    else if (r < R) _mm256_mask_storeu_epi16(out + r, (__mmask16)((1u << (R - r)) - 1), pack16(v));
}

#if AVX512
/* Rows [16 v0, 16 (v0 + VECS)) of one 32-row group (v0 + VECS ≤ 2) for tokens t0 … t0 + TOKENS − 1. */
static inline __attribute__((always_inline)) void pairs_block(const bf16 *x, const float *widened, int K,
                                                              const uint32_t *Wp, int R, int r0, int v0, int t0,
                                                              bf16 *out, const int VECS, const int TOKENS) {
    (void)widened;
    __m512 acc[2][PAIR_TOKENS];
    for (int i = 0; i < VECS; i++)
        for (int j = 0; j < TOKENS; j++) acc[i][j] = _mm512_setzero_ps();
    const uint32_t *w = Wp + (size_t)r0 / PAIR_ROWS * (K / 2) * PAIR_ROWS + 16 * v0;
    const uint32_t *xs = (const uint32_t *)x + (size_t)t0 * (K / 2);
    for (int p = 0; p < K / 2; p++, w += PAIR_ROWS) {
        __m512bh rows[2];
        if (TOKENS >= PREFETCH_TOKENS)
            for (int i = 0; i < VECS; i++) _mm_prefetch((const char *)(w + PREFETCH_PAIRS * PAIR_ROWS + 16 * i), _MM_HINT_T1);
        for (int i = 0; i < VECS; i++) rows[i] = (__m512bh)_mm512_loadu_si512(w + 16 * i);
        for (int j = 0; j < TOKENS; j++) {
            __m512bh token = (__m512bh)_mm512_set1_epi32((int)xs[(size_t)j * (K / 2) + p]);
            for (int i = 0; i < VECS; i++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], rows[i], token);
        }
    }
    for (int j = 0; j < TOKENS; j++)
        for (int i = 0; i < VECS; i++) store_rows(out + (size_t)(t0 + j) * R, r0 + 16 * (v0 + i), R, acc[i][j]);
}
#else
/* The same block on AVX2, in 8-row halves, each `vdpbf16ps` as its two FMAs (avx2.h's dot_pairs, the same
 * order): a weight vector's and a token's pair split into their odd and even elements as float32 (a mask and
 * a shift), then one FMA per element. A token's elements come broadcast from `widened`, its activations
 * widened to float32 once per product (widen_tokens), where a product has 3 tokens or more: split per block,
 * a token's pair cost two vector ops beside its four FMAs, on a Zen 3's pipes that also run the FMAs, and from
 * 8 tokens on the products are bound by the FMAs (docs/fastpath.md; NULL: split here). Three shapes, as 16
 * ymm registers allow, each accumulator a chain of two dependent FMAs per pair (8 cycles on a Zen 3, where
 * two FMAs issue a cycle: 8 chains keep both pipes busy, 4 leave them half idle):
 * - up to 2 tokens: 32 rows (2 × 2 halves) × 2 tokens, every pair's weights used once as they stream in, and
 *   for 2 tokens prefetched as 3 tokens' are (their 8 chains too keep the hardware's prefetch behind: a 2-token
 *   forward on the Zen 3 10.9 → 10.5 ms median, 10.3 → 9.7 min; a lone token's stream was slower with it: 8.4 →
 *   9.2 ms) (a lone token: 64 rows, one_token_groups);
 * - 3 tokens as a product's first block (token_block): 32 rows × 3 tokens in one pass, 12 chains, the
 *   weights prefetched as they stream in (a 3-token forward on the Zen 3 12.3 ms, 13.8 as 2 passes of 16 rows);
 * - 4 tokens (3 in a later block or a lone 16-row vector): 16 rows × 4 tokens at a time, over a run of
 *   CHUNK_PAIRS pairs (8 KB of weights, 32 rows), then the other 16 rows over the same run from L1, the
 *   accumulators kept in memory between runs. So 4 tokens are one pass over the weights, their arithmetic
 *   running while the next run streams in: as 32 × 2 blocks they took a second pass from cache, with the
 *   memory idle (a 4-token forward cost 1.6 one-token forwards on a Zen 3). Each accumulator still takes its
 *   pairs in order, so every sum is unchanged. */
#define CHUNK_PAIRS 64

/* A vector of bf16 pairs as two float32 vectors: the odd (high) elements masked, the even (low) ones shifted. */
static inline __attribute__((always_inline)) void split_pairs(__m256i pairs, __m256 *odd, __m256 *even) {
    *odd = _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32((int)0xffff0000u)));
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
}

/* 8 bf16 values as float32, exact (a shift): the activations a product broadcasts, the queries a score reads. */
static inline __m256 widen8(const bf16 *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* Each thread's float32 copy of a product's activations, grown as needed and kept: the team's threads live as
 * long as the process (each widens all n tokens for itself, so no barrier waits on it). */
static __thread float *widened_buffer;
static __thread size_t widened_capacity;

/* x [n, K] as float32 [n, K] (exact: a shift) in this thread's buffer; NULL where it could not grow, and the
 * blocks then split each token's pairs themselves (the same values). K is a multiple of 32 (linear checks). */
static const float *widen_tokens(const bf16 *x, int n, int K) {
    const size_t count = (size_t)n * K;
    if (count > widened_capacity) {
        float *grown = aligned_alloc(64, (count * sizeof(float) + 63) / 64 * 64);
        if (grown == NULL) return NULL;
        free(widened_buffer);
        widened_buffer = grown, widened_capacity = count;
    }
    for (size_t i = 0; i < count; i += 8) _mm256_store_ps(widened_buffer + i, widen8(x + i));
    return widened_buffer;
}

/* Token j's elements 2p + 1 (odd) and 2p (even) of pair p, from the widened activations or split here. */
static inline __attribute__((always_inline)) void token_pair(const uint32_t *xs, const float *xw, int K, int j,
                                                             int p, __m256 *odd, __m256 *even) {
    if (xw != NULL) {
        *odd = _mm256_broadcast_ss(xw + (size_t)j * K + 2 * p + 1);
        *even = _mm256_broadcast_ss(xw + (size_t)j * K + 2 * p);
    } else split_pairs(_mm256_set1_epi32((int)xs[(size_t)j * (K / 2) + p]), odd, even);
}

static inline __attribute__((always_inline)) void pairs_block(const bf16 *x, const float *widened, int K,
                                                              const uint32_t *Wp, int R, int r0, int v0, int t0,
                                                              bf16 *out, const int VECS, const int TOKENS) {
    const uint32_t *w = Wp + (size_t)r0 / PAIR_ROWS * (K / 2) * PAIR_ROWS + 16 * v0;
    const uint32_t *xs = (const uint32_t *)x + (size_t)t0 * (K / 2);
    const float *xw = widened != NULL ? widened + (size_t)t0 * K : NULL;
    if (TOKENS <= 2 || (TOKENS == 3 && VECS == 2 && t0 == 0)) { /* one pass over the rows' pairs */
        /* held: up to 2 tokens' pairs stay in registers over the halves; 3 tokens' 12 chains leave no room for
         * them, so each half broadcasts them again (from L1); from 2 tokens the weights are prefetched as they
         * stream */
        const int held = TOKENS <= 2;
        __m256 acc[4][3];
        for (int i = 0; i < 2 * VECS; i++)
            for (int j = 0; j < TOKENS; j++) acc[i][j] = _mm256_setzero_ps();
        for (int p = 0; p < K / 2; p++, w += PAIR_ROWS) {
            __m256 odd_x[3], even_x[3];
            if (TOKENS >= 2) {
                _mm_prefetch((const char *)(w + PREFETCH_PAIRS * PAIR_ROWS), _MM_HINT_T0);
                _mm_prefetch((const char *)(w + PREFETCH_PAIRS * PAIR_ROWS + 16), _MM_HINT_T0);
            }
            if (held)
                for (int j = 0; j < TOKENS; j++) token_pair(xs, xw, K, j, p, &odd_x[j], &even_x[j]);
            for (int i = 0; i < 2 * VECS; i++) {
                __m256 odd, even;
                split_pairs(_mm256_loadu_si256((const __m256i *)(w + 8 * i)), &odd, &even);
                for (int j = 0; j < TOKENS; j++) {
                    if (!held) token_pair(xs, xw, K, j, p, &odd_x[j], &even_x[j]);
                    acc[i][j] = _mm256_fmadd_ps(even, even_x[j], _mm256_fmadd_ps(odd, odd_x[j], acc[i][j]));
                }
            }
        }
        for (int j = 0; j < TOKENS; j++)
            for (int i = 0; i < VECS; i++)
                store_rows(out + (size_t)(t0 + j) * R, r0 + 16 * (v0 + i), R,
                           of_halves(acc[2 * i][j], acc[2 * i + 1][j]));
        return;
    }
    __m256 kept[2][2][4]; /* [vector][half][token]: between runs */
    for (int v = 0; v < VECS; v++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < TOKENS; j++) kept[v][i][j] = _mm256_setzero_ps();
    for (int p0 = 0; p0 < K / 2; p0 += CHUNK_PAIRS) {
        const int p1 = p0 + CHUNK_PAIRS < K / 2 ? p0 + CHUNK_PAIRS : K / 2;
        for (int v = 0; v < VECS; v++) {
            __m256 acc[2][4];
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < TOKENS; j++) acc[i][j] = kept[v][i][j];
            const uint32_t *wv = w + (size_t)p0 * PAIR_ROWS + 16 * v;
            for (int p = p0; p < p1; p++, wv += PAIR_ROWS) {
                __m256 odd[2], even[2];
                /* the next run's pairs, asked for over both passes (one of their two lines each), so the
                 * memory streams while the second pass computes from L1 (4–8 tokens 2–5 % faster) */
                if (VECS == 2) _mm_prefetch((const char *)(wv + CHUNK_PAIRS * PAIR_ROWS), _MM_HINT_T0);
                else {
                    _mm_prefetch((const char *)(wv + CHUNK_PAIRS * PAIR_ROWS), _MM_HINT_T0);
                    _mm_prefetch((const char *)(wv + CHUNK_PAIRS * PAIR_ROWS + 16), _MM_HINT_T0);
                }
                for (int i = 0; i < 2; i++)
                    split_pairs(_mm256_loadu_si256((const __m256i *)(wv + 8 * i)), &odd[i], &even[i]);
                for (int j = 0; j < TOKENS; j++) {
                    __m256 odd_x, even_x;
                    token_pair(xs, xw, K, j, p, &odd_x, &even_x);
                    for (int i = 0; i < 2; i++)
                        acc[i][j] = _mm256_fmadd_ps(even[i], even_x, _mm256_fmadd_ps(odd[i], odd_x, acc[i][j]));
                }
            }
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < TOKENS; j++) kept[v][i][j] = acc[i][j];
        }
    }
    for (int j = 0; j < TOKENS; j++)
        for (int v = 0; v < VECS; v++)
            store_rows(out + (size_t)(t0 + j) * R, r0 + 16 * (v0 + v), R, of_halves(kept[v][0][j], kept[v][1][j]));
}
#endif

#if !AVX512
/* One token over the two 32-row groups from `group` on (rows [32 group, 32 group + 64)), pairs_block's
 * ≤ 2-token chains in their order: 8 chains, where one group gives a lone token 4, which wait on their FMAs'
 * latency half the time. Even a decode step, whose weights stream from memory, showed that wait: on the Zen 3
 * its products 6.9 → 6.0 ms, the step 11.7 → 10.5 (forward_bench medians; the draft head's step, from L3,
 * ~3 % faster by a hand timing). */
static void one_token_groups(const bf16 *x, int K, const uint32_t *Wp, int R, int group, bf16 *out) {
    const uint32_t *w = Wp + (size_t)group * (K / 2) * PAIR_ROWS, *xs = (const uint32_t *)x;
    const size_t next = (size_t)(K / 2) * PAIR_ROWS; /* the second group's pairs */
    __m256 acc[8];
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    for (int p = 0; p < K / 2; p++, w += PAIR_ROWS) {
        __m256 odd_x, even_x;
        split_pairs(_mm256_set1_epi32((int)xs[p]), &odd_x, &even_x);
        for (int i = 0; i < 8; i++) {
            __m256 odd, even;
            split_pairs(_mm256_loadu_si256((const __m256i *)(w + (i / 4) * next + 8 * (i % 4))), &odd, &even);
            acc[i] = _mm256_fmadd_ps(even, even_x, _mm256_fmadd_ps(odd, odd_x, acc[i]));
        }
    }
    for (int v = 0; v < 4; v++) store_rows(out, group * PAIR_ROWS + 16 * v, R, of_halves(acc[2 * v], acc[2 * v + 1]));
}
#endif

#if !AVX512
/* A draft head's products from int8 rows. A head's weights come from memory again after every verify (the
 * target's forward sweeps the caches), and on an AVX2 CPU that read is most of a draft step (on the Zen 3, a
 * head step 0.84 ms after a verify, 0.3 ms warm). A head whose every row is q · 2^e, q an integer in
 * [−127, 127] and e one exponent per row (`specscope train-head --int8-rows`; the shipped head), holds its
 * weights exactly in half the bytes: the int8 q, and each row's 2^e. Laid out as the pairs are, in 32-row
 * groups, pair p of a group is 64 bytes, its 32 rows' even elements then their odd ones: after the
 * ⌈R/32⌉·32 float scales 2^e, [R/32][K/2][2][32] int8 (engine/models/native/__init__.py, `int8_layout`).
 *
 * An element widens to float32 exactly (vpmovsxbd, vcvtdq2ps), and the sums run as pairs_block's do, each
 * `vdpbf16ps` as its two FMAs, odd first, over q in place of q · 2^e; at the end each sum is multiplied by
 * its row's 2^e. A power of two commutes with every rounding of the chain, fma(q·2^e, x, a·2^e) =
 * 2^e · fma(q, x, a), so each output has the bits matmul_pairs gives for the bf16 weights q · 2^e, wherever
 * no partial sum falls below float32's normal range (2^−126, where the two round differently) — sums of a
 * draft head's activations are nowhere near it. tests/test_native.py checks the two, bit for bit. */
static inline __attribute__((always_inline)) __m256 widen_int8(const int8_t *p) { /* 8 int8 → float32 */
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* Rows [r, r + 8) ∩ [0, R) of a token's output: 8 sums times their rows' 2^e, rounded to bf16. */
static inline void store_scaled8(bf16 *out, int r, int R, __m256 sums, const float *scale) {
    const __m128i rounded = bf16_of(_mm256_mul_ps(sums, _mm256_loadu_ps(scale + r)));
    if (r + 8 <= R) _mm_storeu_si128((__m128i *)(out + r), rounded);
    else if (r < R) {
        bf16 lanes[8];
        _mm_storeu_si128((__m128i *)lanes, rounded);
        memcpy(out + r, lanes, (size_t)(R - r) * sizeof(bf16));
    }
}

/* GROUPS 32-row groups from g0 (2 only for a lone token: 8 chains, as one_token_groups) × TOKENS tokens from
 * t0 (1 or 2), every pair's weights widened once for the block's tokens. */
static inline __attribute__((always_inline)) void int8_block(const bf16 *x, const float *widened, int K,
                                                             const int8_t *q, const float *scale, int R, int g0,
                                                             int t0, bf16 *out, const int GROUPS, const int TOKENS) {
    const size_t group_bytes = (size_t)(K / 2) * 2 * PAIR_ROWS;
    const int8_t *w = q + (size_t)g0 * group_bytes;
    const uint32_t *xs = (const uint32_t *)x + (size_t)t0 * (K / 2);
    const float *xw = widened != NULL ? widened + (size_t)t0 * K : NULL;
    __m256 acc[8][2];
    for (int i = 0; i < 4 * GROUPS; i++)
        for (int j = 0; j < TOKENS; j++) acc[i][j] = _mm256_setzero_ps();
    for (int p = 0; p < K / 2; p++, w += 2 * PAIR_ROWS) {
        __m256 odd_x[2], even_x[2];
        for (int j = 0; j < TOKENS; j++) token_pair(xs, xw, K, j, p, &odd_x[j], &even_x[j]);
        for (int i = 0; i < 4 * GROUPS; i++) {
            const int8_t *half = w + (size_t)(i / 4) * group_bytes + 8 * (i % 4);
            const __m256 even = widen_int8(half), odd = widen_int8(half + PAIR_ROWS);
            for (int j = 0; j < TOKENS; j++)
                acc[i][j] = _mm256_fmadd_ps(even, even_x[j], _mm256_fmadd_ps(odd, odd_x[j], acc[i][j]));
        }
    }
    for (int j = 0; j < TOKENS; j++)
        for (int i = 0; i < 4 * GROUPS; i++)
            store_scaled8(out + (size_t)(t0 + j) * R, (g0 + i / 4) * PAIR_ROWS + 8 * (i % 4), R, acc[i][j], scale);
}

/* Up to how many tokens a product reads the int8 rows (it has the bf16 pairs too). A lone token or two
 * stream the weights from memory, and half the bytes pay: on the Zen 3 a head step of one token 1.18 → 0.77 ms
 * after a sweep of the caches (0.40 → 0.31 warm), of two 1.25 → 0.95. From three on the widening costs more
 * than the bytes save (a warm step of 3 tokens 0.65 → 0.78 ms, of 6 0.76 → 1.15; eagle's steps of wide layers
 * ~25 % slower in all): those read the pairs, the same values (throwaway timings, 2026-12-07). */
#define INT8_TOKENS 2

/* out [N, R] = x [N, K] @ W [R, K]ᵀ from W's int8 rows (above) for N ≤ INT8_TOKENS, called by every thread of
 * the team: each thread takes an equal run of the 32-row groups, two at a time for a lone token (the last one
 * alone where the run is odd), one at a time for two. */
static void matmul_int8(const bf16 *x, int n, int K, const void *Wq, int R, bf16 *out) {
    const int groups = (R + PAIR_ROWS - 1) / PAIR_ROWS, team = omp_get_num_threads(), me = omp_get_thread_num();
    const float *scale = Wq;
    const int8_t *q = (const int8_t *)(scale + (size_t)groups * PAIR_ROWS);
    const float *widened = n == 2 ? widen_tokens(x, n, K) : NULL;
    const int first = (int)((int64_t)groups * me / team), last = (int)((int64_t)groups * (me + 1) / team);
    for (int g = first; g < last;) {
        if (n == 2) int8_block(x, widened, K, q, scale, R, g++, 0, out, 1, 2);
        else if (last - g >= 2) int8_block(x, NULL, K, q, scale, R, g, 0, out, 2, 1), g += 2;
        else int8_block(x, NULL, K, q, scale, R, g++, 0, out, 1, 1);
    }
#pragma omp barrier
}
#endif

/* pairs_block with its bounds as constants, so the accumulators stay in registers. */
static void pairs_block_of(const bf16 *x, const float *widened, int K, const uint32_t *Wp, int R, int r0, int v0,
                           int vecs, int t0, int tokens, bf16 *out) {
/* counts past PAIR_TOKENS never come (matmul_pairs cuts the tokens by it): clamped, they name no larger block */
#define PAIRS_BLOCK(V, T) pairs_block(x, widened, K, Wp, R, r0, v0, t0, out, V, (T) < PAIR_TOKENS ? (T) : PAIR_TOKENS)
#define PAIRS_TOKENS(V)                                                                         \
    switch (tokens) {                                                                           \
    case 1: PAIRS_BLOCK(V, 1); break;                                                           \
    case 2: PAIRS_BLOCK(V, 2); break;                                                           \
    case 3: PAIRS_BLOCK(V, 3); break;                                                           \
    case 4: PAIRS_BLOCK(V, 4); break;                                                           \
    case 5: PAIRS_BLOCK(V, 5); break;                                                           \
    case 6: PAIRS_BLOCK(V, 6); break;                                                           \
    case 7: PAIRS_BLOCK(V, 7); break;                                                           \
    case 8: PAIRS_BLOCK(V, 8); break;                                                           \
    case 9: PAIRS_BLOCK(V, 9); break;                                                           \
    case 10: PAIRS_BLOCK(V, 10); break;                                                         \
    case 11: PAIRS_BLOCK(V, 11); break;                                                         \
    default: PAIRS_BLOCK(V, 12); break;                                                         \
    }
    if (vecs == 1) PAIRS_TOKENS(1)
    else PAIRS_TOKENS(2)
#undef PAIRS_TOKENS
#undef PAIRS_BLOCK
}

/* How many tokens the block from token t0 of n takes. AVX-512: PAIR_TOKENS at a time. AVX2: 4 at a time, but
 * a first block of 3 where n mod 4 is 3, and 3 first and 2 last where it is 1 (5 = 3 + 2): the first block
 * streams the weights from memory, and 3 tokens do that in one pass (pairs_block), while the later blocks
 * read them from cache, where a lone token's 4 chains wait on the FMAs' latency as long as 2 tokens' 8 do. */
static inline int token_block(int n, int t0) {
    const int left = n - t0;
#if AVX512
    return left < PAIR_TOKENS ? left : PAIR_TOKENS;
#else
    if (t0 == 0 && n > 1 && (n % 4 == 3 || n % 4 == 1)) return 3;
    return left < 4 ? left : 4; /* after a first 3, n mod 4 = 1 leaves 2 last */
#endif
}

/* out [N, R] = x [N, K] @ W [R, K]ᵀ from the paired weights, called by every thread of the team. Each
 * thread takes an equal run of the ⌈R/16⌉ 16-row vectors (so a 576-row product leaves neither of two
 * threads idle while the other finishes a block), streams it group by group, and runs every token
 * block over a group while its weights are in L1 or L2. The cut changes no sum (see above). */
static void matmul_pairs(const bf16 *x, int n, int K, const uint32_t *Wp, int R, bf16 *out) {
    const int vectors = (R + 15) / 16, team = omp_get_num_threads(), me = omp_get_thread_num();
#if AVX512
    const float *widened = NULL;
#else
    const float *widened = n >= 3 ? widen_tokens(x, n, K) : NULL;
#endif
    const int first = (int)((int64_t)vectors * me / team), last = (int)((int64_t)vectors * (me + 1) / team);
    for (int v = first; v < last;) {
#if !AVX512
        if (n == 1 && v % 2 == 0 && last - v >= 4) { /* two whole groups: the next 64 rows */
            one_token_groups(x, K, Wp, R, v / 2, out);
            v += 4;
            continue;
        }
#endif
        const int group = v / 2, v0 = v % 2, vecs = (last - v < 2 - v0 ? last - v : 2 - v0);
        for (int t0 = 0, tokens; t0 < n; t0 += tokens) {
            tokens = token_block(n, t0);
            pairs_block_of(x, widened, K, Wp, R, group * PAIR_ROWS, v0, vecs, t0, tokens, out);
        }
        v += vecs;
    }
#pragma omp barrier
}

#if AVX512 /* the dot-product path's scores and AMX (whose CPUs all have AVX512-BF16) */
/* 16 rows of 16 32-bit lanes, transposed in registers: rows[i][j] becomes rows[j][i]. */
static inline void transpose16(__m512i rows[16]) {
    __m512i t[16], u[16], v[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(rows[i], rows[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(rows[i], rows[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* u[i + k]: element k of rows i..i+3, per 128-bit lane */
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int half = 0; half < 16; half += 8) /* v: lanes of rows i..i+7 gathered in pairs */
        for (int k = 0; k < 4; k++) {
            v[half + 2 * k] = _mm512_shuffle_i32x4(u[half + k], u[half + 4 + k], 0x88);
            v[half + 2 * k + 1] = _mm512_shuffle_i32x4(u[half + k], u[half + 4 + k], 0xdd);
        }
    for (int k = 0; k < 4; k++) { /* element k + 4m of all 16 rows */
        rows[k] = _mm512_shuffle_i32x4(v[2 * k], v[8 + 2 * k], 0x88);
        rows[k + 8] = _mm512_shuffle_i32x4(v[2 * k], v[8 + 2 * k], 0xdd);
        rows[k + 4] = _mm512_shuffle_i32x4(v[2 * k + 1], v[8 + 2 * k + 1], 0x88);
        rows[k + 12] = _mm512_shuffle_i32x4(v[2 * k + 1], v[8 + 2 * k + 1], 0xdd);
    }
}
#endif

#ifdef __AMX_BF16__
/* AMX: a tile product C[16 r, 16 t] += A[16 r, 32 k] · B[16 k-pairs, 16 t, 2] takes 16 rows × 32 inputs of
 * the weights (as they lie, or from a copy in tiles: see matmul_amx) and the activations packed in pairs of
 * k ("VNNI"), so a call's tokens (up to AMX_MAX_TOKENS) cost one pass over the weights from memory (from 33
 * tokens on, each 32-row group is read again from cache for every 32 tokens more): a 16-token verify reads
 * what a one-token forward reads. */
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define AMX_MAX_TOKENS MAX_TOKENS /* tokens packed at once: every pass over a weight group is over all of them */

typedef struct __attribute__((aligned(64))) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

static int amx_allowed = 1; /* native_use_amx(0) runs the AVX512-BF16 path, as on a CPU without AMX */

static int amx_ready(void) { /* the kernel asks Linux once for the tile state */
    static int ready = -1;
    if (ready < 0) ready = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    return ready && amx_allowed;
}

/* Tiles 0–3: C; 4–5: A (weights); 6–7: B (tokens), as matmul_amx uses them (score_amx: 0, 4, 5). A constant
 * in the object's data, not a struct filled on the stack: GCC 12 does not count ldtilecfg as reading its 64
 * bytes and, once amx_configure was inlined into forward_batch's parallel region, dropped the stores of rows
 * and colsb as dead, so the instruction read garbage and faulted (#GP) on every AMX forward. */
static const TileConfig AMX_TILES = {.palette = 1, .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
                                     .rows = {16, 16, 16, 16, 16, 16, 16, 16}};

static void amx_configure(void) { _tile_loadconfig(&AMX_TILES); }

/* GCC 12's `_tile_loadd` is an asm with no memory operand: the compiler may move or drop stores into a
 * buffer that only tile loads read (a tile packed on the stack). Called between the stores and the loads,
 * this says memory is read. (Found when a tile of value pairs packed on the stack came out as garbage.) */
static inline void tiles_read_memory(void) { __asm__ __volatile__("" ::: "memory"); }

/* x [N, K] as pairs: packed[block][k / 32][16 pairs][16 tokens], one 1 KB B tile per (block, k / 32):
 * each 16 tokens × 16 pairs is one transpose, shared among the team. */
static void amx_pack(const bf16 *x, int n, int K, uint32_t *packed) {
    const int pairs = K / 2, blocks = (n + 15) / 16;
#pragma omp for schedule(static)
    for (int task = 0; task < blocks * (pairs / 16); task++) {
        int block = task / (pairs / 16), p0 = task % (pairs / 16) * 16;
        __m512i rows[16];
        for (int i = 0; i < 16; i++) {
            int t = block * 16 + i;
            rows[i] = t < n ? _mm512_loadu_si512(x + (size_t)t * K + 2 * p0) : _mm512_setzero_si512();
        }
        transpose16(rows);
        uint32_t *tile = packed + ((size_t)block * pairs + p0) * 16;
        for (int p = 0; p < 16; p++) _mm512_storeu_si512(tile + p * 16, rows[p]);
    }
}

/* out[t, r0 + i] = c[i][t − t0]: the tile transposed, each token's 16 outputs rounded and stored. */
static inline void amx_store(int r0, int t0, int n, int R, bf16 *out, float c[16][16]) {
    __m512i rows[16];
    for (int i = 0; i < 16; i++) rows[i] = _mm512_load_si512(c[i]);
    transpose16(rows);
    for (int t = t0; t < n && t < t0 + 16; t++) store16(out + (size_t)t * R + r0, _mm512_castsi512_ps(rows[t - t0]));
}

/* Where the weights are read from. Below TWO_GROUPS_FROM tokens, as they lie: a group's 16 rows (2K bytes
 * apart) are 16 streams the prefetchers run side by side, and a few tokens' products keep up with them. With
 * more, the tile unit works longer on each tile and those streams fall behind, most where rows are short (576
 * inputs: 18 lines a row, which the prefetchers barely learn before they end); the tiles then come from Wt
 * [R/16][K/32][16][32], W[16g + i, 32j + k] at Wt[g][j][i][k] (engine/models/native/__init__.py's
 * `tile_rows`), each A tile 1 KB in a row and a group's tiles in reading order (a pass reads two groups side
 * by side), each asked into L1 PREFETCH_TILES tiles ahead while the tile unit works on the ones before it.
 * The same tiles either way, so the same bits. `scripts/products_bench.py --amx` on the Xeon measures both
 * (docs/fastpath.md). */
#define PREFETCH_TILES 16

/* From this many tokens on, matmul_amx_pairs (from the copy in tiles); below it, matmul_amx_one (as the weights
 * lie). On the Xeon, whole forwards at a cache of 512: 6–16 tokens 0.5–1.4 ms faster that way, 5 tokens 0.3 ms
 * slower, 2–4 tokens' products 5–10 % slower (`forward_bench.py`, `products_bench.py --amx`). */
#define TWO_GROUPS_FROM 6

/* One token block (up to 16 tokens): each 16-row group's A tiles against the one B tile of each k. */
static void matmul_amx_one(const uint32_t *packed, int n, int K, const bf16 *W, int R, bf16 *out) {
    float c[16][16] __attribute__((aligned(64)));
#pragma omp for schedule(static)
    for (int r0 = 0; r0 < R; r0 += 16) {
        _tile_zero(0);
        for (int k = 0; k < K; k += 32) {
            _tile_loadd(4, W + (size_t)r0 * K + k, K * 2);
            _tile_loadd(6, packed + (size_t)k / 2 * 16, 64);
            _tile_dpbf16ps(0, 4, 6);
        }
        _tile_stored(0, c, 64); amx_store(r0, 0, n, R, out, c);
    }
}

/* Into tile `tile` (a constant: tile instructions name their tiles), the A tile of W's rows [r0, r0 + 16)
 * and inputs [k, k + 32): from the copy in tiles Wt, with `prefetch` asking for the one PREFETCH_TILES
 * ahead (never faulting past the end: a prefetch does not), or, without a copy, from W where it lies. */
#define LOAD_A(tile, W, Wt, K, r0, k, prefetch)                                                                \
    do {                                                                                                       \
        if ((Wt) != NULL) {                                                                                    \
            const bf16 *a = (Wt) + (size_t)(r0) * (K) + (size_t)(k) * 16;                                      \
            if (prefetch)                                                                                      \
                for (int line = 0; line < 16; line++)                                                          \
                    _mm_prefetch((const char *)(a + PREFETCH_TILES * 512) + 64 * line, _MM_HINT_T0);           \
            _tile_loadd(tile, a, 64);                                                                          \
        } else {                                                                                               \
            _tile_loadd(tile, (W) + (size_t)(r0) * (K) + (k), (K) * 2);                                        \
        }                                                                                                      \
    } while (0)

/* TWO_GROUPS_FROM tokens or more: 32 rows × 32 tokens a pass, four C tiles fed by two A and two B tiles, so
 * each tile loaded feeds two products (with one token block, each B tile; with two, every tile) and no load
 * waits for a product to finish reading the tile it replaces (with one A and one B tile, every B load waited
 * on the product before it). Every 32 tokens more take another pass
 * over the 32-row group, from cache (the first pass asks for the next tiles from memory). Each C element
 * still takes its k in order: the same sums. Needs R % 32 = 0. */
static void matmul_amx_pairs(const uint32_t *packed, int n, int K, const bf16 *W, const bf16 *Wt, int R,
                             bf16 *out) {
    const int blocks = (n + 15) / 16;
    const size_t block_size = (size_t)K / 2 * 16;
    float c[16][16] __attribute__((aligned(64)));
#pragma omp for schedule(static)
    for (int r0 = 0; r0 < R; r0 += 32) {
        for (int b0 = 0; b0 < blocks; b0 += 2) {
            const int two = b0 + 1 < blocks;
            const uint32_t *b = packed + b0 * block_size;
            _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
            for (int k = 0; k < K; k += 32, b += 16 * 16) {
                LOAD_A(4, W, Wt, K, r0, k, b0 == 0);
                _tile_loadd(6, b, 64);
                _tile_dpbf16ps(0, 4, 6);
                LOAD_A(5, W, Wt, K, r0 + 16, k, b0 == 0);
                _tile_dpbf16ps(2, 5, 6);
                if (two) {
                    _tile_loadd(7, b + block_size, 64);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(3, 5, 7);
                }
            }
            _tile_stored(0, c, 64); amx_store(r0, 16 * b0, n, R, out, c);
            _tile_stored(2, c, 64); amx_store(r0 + 16, 16 * b0, n, R, out, c);
            if (two) {
                _tile_stored(1, c, 64); amx_store(r0, 16 * b0 + 16, n, R, out, c);
                _tile_stored(3, c, 64); amx_store(r0 + 16, 16 * b0 + 16, n, R, out, c);
            }
        }
    }
}
#undef LOAD_A

static void matmul_amx(const uint32_t *packed, int n, int K, const bf16 *W, const bf16 *Wt, int R, bf16 *out) {
    if (n >= TWO_GROUPS_FROM && R % 32 == 0)
        matmul_amx_pairs(packed, n, K, W, Wt, R, out);
    else /* a block of 16 tokens at a time: R % 32 ≠ 0 never comes from SmolLM2's shapes, kept correct for it */
        for (int t0 = 0; t0 < n; t0 += 16)
            matmul_amx_one(packed + (size_t)t0 / 16 * K / 2 * 16, n - t0 < 16 ? n - t0 : 16, K, W, R,
                           out + (size_t)t0 * R);
}
#endif

/* Shared scratch for the activations in AMX's pairs: AMX_MAX_TOKENS tokens of up to `widest` inputs; NULL
 * without AMX. Not zeroed: amx_pack writes every tile a product reads (zeros past the last token). */
static uint32_t *pairs_scratch(int widest) {
#ifdef __AMX_BF16__
    if (amx_ready()) return aligned_alloc(64, sizeof(uint32_t) * AMX_MAX_TOKENS / 16 * widest / 2 * 16);
#endif
    (void)widest;
    return NULL;
}

/* out [N, R] = x [N, K] @ W [R, K]ᵀ, called by every thread of the team; `packed` is shared scratch
 * (NULL without AMX, where `Wp` holds the weights paired); `Wt`: W in tiles, or NULL (see matmul_amx); `Wq`: a
 * draft head's int8 rows or NULL, read by the AVX2 build for up to INT8_TOKENS tokens (matmul_int8, the bits
 * of the pairs). AMX takes the tokens AMX_MAX_TOKENS at a time (one pass over the weights from memory each);
 * on every path each output is the same sum in the same order whatever N is, so a token's logits do not
 * depend on the tokens beside it. */
static void matmul(const bf16 *x, int n, int K, const bf16 *W, const bf16 *Wt, const uint32_t *Wp, const void *Wq,
                   int R, bf16 *out, uint32_t *packed) {
#if !AVX512
    if (Wq != NULL && n <= INT8_TOKENS) { /* a draft head's int8 rows (matmul_int8) */
        matmul_int8(x, n, K, Wq, R, out);
        return;
    }
#endif
    (void)Wq;
#ifdef __AMX_BF16__
    if (packed != NULL && R % 16 == 0) {
        for (int t0 = 0; t0 < n; t0 += AMX_MAX_TOKENS) {
            int chunk = n - t0 < AMX_MAX_TOKENS ? n - t0 : AMX_MAX_TOKENS;
            amx_pack(x + (size_t)t0 * K, chunk, K, packed);
            matmul_amx(packed, chunk, K, W, Wt, R, out + (size_t)t0 * R);
        }
        return;
    }
#endif
    (void)packed;
    (void)W;
    (void)Wt;
    matmul_pairs(x, n, K, Wp, R, out);
}

/* Lets the tests run the path a CPU without AMX takes, on one with it. */
void native_use_amx(int allowed) {
#ifdef __AMX_BF16__
    amx_allowed = allowed;
#else
    (void)allowed;
#endif
}

/* Whether forwards take the AMX path now (else the paired weights are needed). */
int native_amx_active(void) {
#ifdef __AMX_BF16__
    return amx_ready();
#else
    return 0;
#endif
}

/* The most new tokens one call takes, on both paths (the caller cuts longer forwards into calls of
 * at most this many, which gives the same bits: no output depends on the tokens beside it). */
int native_max_tokens(void) { return MAX_TOKENS; }

/* Whether a cache's key tiles (Sequence) are read here: on both paths without AMX (AMX reads key rows). */
int native_reads_key_tiles(void) { return 1; }

/* Whether a draft head's products read int8 rows here (matmul_int8: the AVX2 build); elsewhere its weights
 * go paired or in tiles, the same values q · 2^e as bf16. */
int native_reads_int8(void) { return !AVX512; }

/* out [N, R] = x [N, K] @ W [R, K]ᵀ alone, for the draft head's products: one parallel region. `Wt`: W in
 * AMX's tiles (matmul_amx) or NULL; `Wp`: W paired (matmul_pairs), needed where AMX is not active. */
int linear(const bf16 *x, int n, int K, const bf16 *W, const bf16 *Wt, const uint32_t *Wp, int R, bf16 *out,
           int threads) {
    if (K % 32 || R % 4 || n < 1) return NATIVE_BAD_DIMS;
    uint32_t *packed = pairs_scratch(K);
    if (packed == NULL && native_amx_active()) return NATIVE_NO_MEMORY;
    if ((packed == NULL || R % 16) && Wp == NULL) { free(packed); return NATIVE_NO_PAIRS; } /* tiles: 16 rows */
#pragma omp parallel num_threads(threads)
    {
#ifdef __AMX_BF16__
        if (packed) amx_configure();
#endif
        matmul(x, n, K, W, Wt, Wp, NULL, R, out, packed);
#ifdef __AMX_BF16__
        if (packed) _tile_release();
#endif
    }
    free(packed);
    return 0;
}

/* Llama's RMSNorm in Hugging Face's order: normalise in float32, round, then scale and round. */
static void rms_norm(const bf16 *x, int n, int H, const bf16 *weight, float eps, bf16 *out) {
    for (int t = 0; t < n; t++) {
        const bf16 *row = x + (size_t)t * H;
        __m512 squares = _mm512_setzero_ps();
        for (int k = 0; k < H; k += 16) squares = _mm512_fmadd_ps(load16(row + k), load16(row + k), squares);
        __m512 scale = _mm512_set1_ps(1.f / sqrtf(_mm512_reduce_add_ps(squares) / H + eps));
        for (int k = 0; k < H; k += 16)
            store16(out + (size_t)t * H + k,
                    _mm512_mul_ps(load16(weight + k), round16(_mm512_mul_ps(load16(row + k), scale))));
    }
}

/* In place on one head vector [d]: x·cos + rotate_half(x)·sin, each product and the sum rounded as
 * torch rounds them (rotate_half's sign lives in sin_signed). */
static void rope(bf16 *x, const bf16 *cos, const bf16 *sin_signed, int d) {
    const int half = d / 2;
    for (int k = 0; k < half; k += 16) {
        __m512 a = load16(x + k), b = load16(x + half + k);
        __m512 first = _mm512_add_ps(round16(_mm512_mul_ps(a, load16(cos + k))),
                                     round16(_mm512_mul_ps(b, load16(sin_signed + k))));
        __m512 second = _mm512_add_ps(round16(_mm512_mul_ps(b, load16(cos + half + k))),
                                      round16(_mm512_mul_ps(a, load16(sin_signed + half + k))));
        store16(x + k, first);
        store16(x + half + k, second);
    }
}

/* x += y [count], rounded: the residual adds. */
static void add_rounded(bf16 *x, const bf16 *y, size_t count) {
    for (size_t k = 0; k < count; k += 16) store16(x + k, _mm512_add_ps(load16(x + k), load16(y + k)));
}

/* out = bf16(bf16(silu(gate)) · up) over I features, SiLU in float32 as torch computes it. */
static void silu_times(const bf16 *gate, const bf16 *up, int I, bf16 *out) {
    for (int k = 0; k < I; k += 16) {
        __m512 a = load16(gate + k);
        __m512 silu = _mm512_div_ps(a, _mm512_add_ps(_mm512_set1_ps(1.f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), a))));
        store16(out + k, _mm512_mul_ps(round16(silu), load16(up + k)));
    }
}

/* Up to 16 query heads of one KV group, attended together: they share every key and value read. */
typedef struct {
    const bf16 *q[16];  /* [d] each, after RoPE */
    int token[16];      /* which new token each belongs to (its mask row) */
    bf16 *out[16];      /* [d] each */
    int count;
} Queries;

#if AVX512
/* Without AMX: the scores of 16 columns at a time for QUERIES queries, the columns in the lanes: `keys`
 * [d / 2 pairs][16 columns] is the 16 keys transposed, each query's pair p is broadcast, and a score is
 * the chain ((0 + q₀·k₀) + q₁·k₁) + … over the pairs in order, whichever block the query sits in. */
static inline __attribute__((always_inline)) void score_block(const Queries *Q, const uint32_t *keys, int d,
                                                              int c0, int S, float *scores, const int QUERIES) {
    __m512 acc[16];
    const uint32_t *q[16];
    for (int i = 0; i < QUERIES; i++) {
        acc[i] = _mm512_setzero_ps();
        q[i] = (const uint32_t *)Q->q[i < Q->count ? i : 0]; /* spare slots repeat the first query */
    }
    for (int p = 0; p < d / 2; p++) {
        __m512bh k = (__m512bh)_mm512_load_si512(keys + p * 16);
        for (int i = 0; i < QUERIES; i++) acc[i] = _mm512_dpbf16_ps(acc[i], k, (__m512bh)_mm512_set1_epi32((int)q[i][p]));
    }
    __mmask16 lanes = S - c0 >= 16 ? 0xffff : (__mmask16)((1u << (S - c0)) - 1);
    for (int i = 0; i < QUERIES && i < Q->count; i++) _mm512_mask_storeu_ps(scores + (size_t)i * S + c0, lanes, acc[i]);
}

/* Keys [c0, c0 + 16) of K [C, d] as score_block reads them, [d / 2 pairs][16 columns]: the 16 rows transposed
 * (rows past the ones written are cache slots whose lanes are dropped). */
static void tile_keys(const bf16 *K, int c0, int d, uint32_t *tile) {
    for (int m = 0; m < d / 32; m++) {
        __m512i rows[16];
        for (int c = 0; c < 16; c++) rows[c] = _mm512_loadu_si512(K + (size_t)(c0 + c) * d + 32 * m);
        transpose16(rows); /* rows[p]: pair 16 m + p of the 16 columns */
        for (int p = 0; p < 16; p++) _mm512_store_si512(tile + (16 * m + p) * 16, rows[p]);
    }
}

/* `tiles`: K's columns already in tiles, [C / 16][d / 2][16] (a cache's key tiles, see Sequence), or NULL:
 * then every block of queries transposes the keys it reads, 16 columns at a time. */
static void score_pairs(const Queries *Q, const bf16 *K, const uint32_t *tiles, int S, int d, float *scores) {
    uint32_t own[128 * 16] __attribute__((aligned(64))); /* [d / 2][16] */
    for (int c0 = 0; c0 < S; c0 += 16) {
        const uint32_t *keys = own;
        if (tiles) keys = tiles + (size_t)c0 * (d / 2);
        else tile_keys(K, c0, d, own);
        if (Q->count <= 4) score_block(Q, keys, d, c0, S, scores, 4);
        else if (Q->count <= 8) score_block(Q, keys, d, c0, S, scores, 8);
        else score_block(Q, keys, d, c0, S, scores, 16);
    }
}
#else
/* Keys [c0, c0 + 16) of K [C, d] as score_block reads them, [d / 2 pairs][16 columns]: each 8 rows × 8 pairs
 * transposed in registers (rows past the ones written are cache slots whose lanes are dropped). */
static void tile_keys(const bf16 *K, int c0, int d, uint32_t *tile) {
    for (int half = 0; half < 2; half++)
        for (int p0 = 0; p0 < d / 2; p0 += 8) {
            __m256i r[8], t[8], u[8];
            for (int c = 0; c < 8; c++)
                r[c] = _mm256_loadu_si256((const __m256i *)(K + (size_t)(c0 + 8 * half + c) * d + 2 * p0));
            for (int c = 0; c < 8; c += 2) {
                t[c] = _mm256_unpacklo_epi32(r[c], r[c + 1]);
                t[c + 1] = _mm256_unpackhi_epi32(r[c], r[c + 1]);
            }
            for (int c = 0; c < 8; c += 4) { /* u[c + m]: pair m (and m + 4 in the high lane) of rows c … c + 3 */
                u[c] = _mm256_unpacklo_epi64(t[c], t[c + 2]), u[c + 1] = _mm256_unpackhi_epi64(t[c], t[c + 2]);
                u[c + 2] = _mm256_unpacklo_epi64(t[c + 1], t[c + 3]);
                u[c + 3] = _mm256_unpackhi_epi64(t[c + 1], t[c + 3]);
            }
            for (int m = 0; m < 4; m++) {
                _mm256_store_si256((__m256i *)(tile + (p0 + m) * 16 + 8 * half), _mm256_permute2x128_si256(u[m], u[m + 4], 0x20));
                _mm256_store_si256((__m256i *)(tile + (p0 + m + 4) * 16 + 8 * half), _mm256_permute2x128_si256(u[m], u[m + 4], 0x31));
            }
        }
}

/* AVX2: the scores of 16 · TILES columns for QUERIES queries, the columns in the lanes (keys in tiles as on
 * AVX-512: [d / 2 pairs][16 columns], TILES of them one after another), each query's dims broadcast from
 * its row widened to float32. A score is the chain ((0 + q₀·k₀) + q₁·k₁) + … over the dims in order: a
 * function of q and k alone, whichever block, column or slot they sit in, as the bit-for-bit argument needs
 * (each product of bf16 values exact). 4 queries × 16 columns are 8 chains, enough to keep both FMA pipes busy
 * through their latency in 16 registers; the last 1–3 queries take 32 columns (4–12 chains). */
static inline __attribute__((always_inline)) void score_block(const float (*q)[256], const uint32_t *keys, int d,
                                                              int c0, int S, float *scores, const int QUERIES,
                                                              const int TILES) {
    __m256 acc[6][4];
    for (int i = 0; i < QUERIES; i++)
        for (int v = 0; v < 2 * TILES; v++) acc[i][v] = _mm256_setzero_ps();
    const __m256i high = _mm256_set1_epi32((int)0xffff0000);
    for (int p = 0; p < d / 2; p++)
        for (int odd = 0; odd < 2; odd++) {
            __m256 k[4];
            for (int v = 0; v < 2 * TILES; v++) {
                const __m256i raw = _mm256_load_si256((const __m256i *)(keys + (v / 2) * 16 * (d / 2) + p * 16 + (v % 2) * 8));
                k[v] = _mm256_castsi256_ps(odd ? _mm256_and_si256(raw, high) : _mm256_slli_epi32(raw, 16));
            }
            for (int i = 0; i < QUERIES; i++) {
                const __m256 x = _mm256_broadcast_ss(&q[i][2 * p + odd]);
                for (int v = 0; v < 2 * TILES; v++) acc[i][v] = _mm256_fmadd_ps(k[v], x, acc[i][v]);
            }
        }
    const int columns = S - c0 < 16 * TILES ? S - c0 : 16 * TILES;
    for (int i = 0; i < QUERIES; i++) {
        float *row = scores + (size_t)i * S + c0;
        if (columns == 16 * TILES)
            for (int v = 0; v < 2 * TILES; v++) _mm256_storeu_ps(row + 8 * v, acc[i][v]);
        else { /* the last, partial block: its lanes past S are slots not yet written, dropped here */
            float all[32] __attribute__((aligned(32)));
            for (int v = 0; v < 2 * TILES; v++) _mm256_store_ps(all + 8 * v, acc[i][v]);
            memcpy(row, all, sizeof(float) * columns);
        }
    }
}

/* `tiles`: K's columns already in tiles, [C / 16][d / 2][16] (a cache's key tiles, see Sequence), or NULL:
 * then the keys are transposed here, 32 columns at a time. Queries go four at a time over 16 columns, and
 * the last one to three over 32. */
static void score_pairs(const Queries *Q, const bf16 *K, const uint32_t *tiles, int S, int d, float *scores) {
    float q[16][256] __attribute__((aligned(32)));
    uint32_t own[2 * 128 * 16] __attribute__((aligned(64))); /* two tiles [d / 2][16] */
    for (int i = 0; i < Q->count; i++)
        for (int k = 0; k < d; k += 8) _mm256_store_ps(q[i] + k, widen8(Q->q[i] + k));
    const int rest = Q->count % 4, whole = Q->count - rest;
    for (int c0 = 0; c0 < S; c0 += 32) {
        const int two = c0 + 16 < S; /* a second tile of columns here */
        const uint32_t *keys = own;
        if (tiles) keys = tiles + (size_t)c0 * (d / 2);
        else for (int t = 0; t <= two; t++) tile_keys(K, c0 + 16 * t, d, own + t * 16 * (d / 2));
        for (int i = 0; i < whole; i += 4)
            for (int t = 0; t <= two; t++)
                score_block(q + i, keys + t * 16 * (d / 2), d, c0 + 16 * t, S, scores + (size_t)i * S, 4, 1);
#define REST(n) (two ? score_block(q + whole, keys, d, c0, S, scores + (size_t)whole * S, n, 2) \
                     : score_block(q + whole, keys, d, c0, S, scores + (size_t)whole * S, n, 1))
        if (rest == 1) REST(1);
        else if (rest == 2) REST(2);
        else if (rest == 3) REST(3);
#undef REST
    }
}
#endif

static inline int up16(int n) { return (n + 15) & ~15; }

/* Scores are laid out as the path makes them: without AMX by query, p[i·S + c]; with AMX by column,
 * p[c·16 + i], as a tile of 16 columns × 16 queries is stored (no transpose), so a column's 16 queries
 * are one vector and soften's maxima and sums run down the columns, lane by lane. */
typedef struct {
    float *p;
    int query_stride, column_stride; /* (S, 1) by query, (1, 16) by column */
} Scores;

#ifdef __AMX_BF16__
/* p[c·16 + i] = q_i · k_c for every cached column k_c of K [S, d] (rows up to S rounded to 16; those past
 * S are cache slots not yet written, never read after): AMX tiles of 16 columns × 16 queries, K's tiles
 * read straight from the cache, the queries packed in pairs. */
static void score_amx(const Queries *Q, const bf16 *K, int S, int d, float *p) {
    uint32_t pairs[128 * 16] __attribute__((aligned(64))) = {0}; /* [d / 32][16 pairs][16 queries] */
    for (int i = 0; i < Q->count; i++) {
        const uint32_t *q = (const uint32_t *)Q->q[i];
        for (int k = 0; k < d / 2; k++) pairs[k * 16 + i] = q[k];
    }
    tiles_read_memory();
    for (int c0 = 0; c0 < S; c0 += 16) {
        _tile_zero(0);
        for (int k = 0; k < d; k += 32) {
            _tile_loadd(4, K + (size_t)c0 * d + k, d * 2);
            _tile_loadd(5, pairs + k / 2 * 16, 64);
            _tile_dpbf16ps(0, 4, 5);
        }
        _tile_stored(0, p + (size_t)c0 * 16, 64);
    }
}
#endif

/* e^((s − top) · factor) lane by lane, masked (−∞) scores exactly 0. */
static inline __m512 soften16(__m512 s, __m512 top, __m512 factor) {
    const __mmask16 seen = _mm512_cmp_ps_mask(s, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
    return _mm512_maskz_mov_ps(seen, exp16(_mm512_mul_ps(_mm512_sub_ps(s, top), factor)));
}

/* Scores by column → e^((s − max) / √d) in place, masked (−∞) entries exactly 0; total[i] = query i's sum,
 * added down the columns in order, one term each (see weigh). */
static void soften_columns(float *p, int S, float scale, float *total) {
    __m512 best = _mm512_set1_ps(-INFINITY), sum = _mm512_setzero_ps(), factor = _mm512_set1_ps(scale);
    for (int c = 0; c < S; c++) best = _mm512_max_ps(best, _mm512_load_ps(p + (size_t)c * 16));
    for (int c = 0; c < S; c++) {
        __m512 e = soften16(_mm512_load_ps(p + (size_t)c * 16), best, factor);
        _mm512_store_ps(p + (size_t)c * 16, e);
        sum = _mm512_add_ps(sum, e);
    }
    _mm512_storeu_ps(total, sum);
}

/* One query's scores [S] → e^((s − max) / √d) in place, masked columns exactly 0. Whole blocks are read and
 * written plainly and only the last, partial one under a mask (AVX-512) or through a padded copy (AVX2, where a
 * masked load or store was avx2.h's `vmaskmov`, slow on a Zen 3: attention at 16 tokens 8.4 → 7.9 ms, at 64
 * 37.0 → 34.2, context 512). Maxima and e^x are lane by lane: the same bits whatever the blocks. */
#if AVX512
static void soften_row(float *row, int S, float scale) {
    const int whole = S & ~15;
    const __mmask16 tail = (__mmask16)((1u << (S - whole)) - 1);
    __m512 best = _mm512_set1_ps(-INFINITY);
    for (int c = 0; c < whole; c += 16) best = _mm512_max_ps(best, _mm512_loadu_ps(row + c));
    if (tail) best = _mm512_max_ps(best, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail, row + whole));
    const __m512 top = _mm512_set1_ps(_mm512_reduce_max_ps(best)), factor = _mm512_set1_ps(scale);
    for (int c = 0; c < whole; c += 16) _mm512_storeu_ps(row + c, soften16(_mm512_loadu_ps(row + c), top, factor));
    if (tail) _mm512_mask_storeu_ps(row + whole, tail, soften16(_mm512_maskz_loadu_ps(tail, row + whole), top, factor));
}
#else
static inline __m256 soften8(__m256 s, __m256 top, __m256 factor) {
    const __m256 seen = _mm256_cmp_ps(s, _mm256_set1_ps(-INFINITY), _CMP_NEQ_OQ);
    return _mm256_and_ps(seen, exp8(_mm256_mul_ps(_mm256_sub_ps(s, top), factor)));
}

/* AVX2: 8 lanes at a time in ymm registers. Written with avx2.h's 16-lane pairs, the running maximum went through
 * memory every iteration (at 64 tokens, context 512, about a third of the attention's perf samples). A maximum is
 * the same whatever the order. */
static void soften_row(float *row, int S, float scale) {
    const int whole = S & ~7;
    __m256 best0 = _mm256_set1_ps(-INFINITY), best1 = best0;
    int c = 0;
    for (; c + 16 <= whole; c += 16)
        best0 = _mm256_max_ps(best0, _mm256_loadu_ps(row + c)), best1 = _mm256_max_ps(best1, _mm256_loadu_ps(row + c + 8));
    if (c < whole) best0 = _mm256_max_ps(best0, _mm256_loadu_ps(row + c));
    float lanes[8] __attribute__((aligned(32))), top = -INFINITY;
    _mm256_store_ps(lanes, _mm256_max_ps(best0, best1));
    for (int i = 0; i < 8; i++) top = lanes[i] > top ? lanes[i] : top;
    for (c = whole; c < S; c++) top = row[c] > top ? row[c] : top;
    const __m256 most = _mm256_set1_ps(top), factor = _mm256_set1_ps(scale);
    for (c = 0; c < whole; c += 8) _mm256_storeu_ps(row + c, soften8(_mm256_loadu_ps(row + c), most, factor));
    if (whole < S) {
        for (int i = 0; i < 8; i++) lanes[i] = whole + i < S ? row[whole + i] : -INFINITY;
        _mm256_store_ps(lanes, soften8(_mm256_load_ps(lanes), most, factor));
        memcpy(row + whole, lanes, sizeof(float) * (S - whole));
    }
}
#endif

#define QUERIES 6
#if AVX512
/* A value row's 32 dims from 32u on, widened to float32 by unpacking each bf16 under a zero half (one
 * instruction per 16 dims, where zero-extending and shifting takes two): `low` gets dims 32u + 8L + m and
 * `high` dims 32u + 8L + 4 + m, lane 4L + m (L, m < 4), as unpacking within 128-bit lanes orders them. */
static inline void widen_unpacked(const bf16 *row, __m512 *low, __m512 *high) {
    const __m512i raw = _mm512_loadu_si512(row);
    *low = _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), raw));
    *high = _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), raw));
}

/* The 16 dims 32u + 16·half … of sums kept as widen_unpacked lays them out, back in order. */
static inline __m512 in_order(__m512 low, __m512 high, int half) {
    static const int32_t order[2][16] = {{0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23},
                                         {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31}};
    return _mm512_permutex2var_ps(low, _mm512_loadu_si512(order[half]), high);
}

/* out_j = Σ_c p_j[c] V[c] / Σ_c p_j[c] for up to QUERIES queries at once, each value row read once for all.
 * Both sums run over the columns in order, one term each: a tree node's masked columns add exact zeros,
 * so it gets the same bits as the node decoded alone, whose ancestors sit at other slots. With `SUMS` the
 * denominators are added here, column by column beside the products (scores by query, where a row's own
 * sum would be one long chain of dependent adds); without, `total` holds them (soften_columns) and each
 * weight is broadcast straight from memory, so the FMAs have the vector ports to themselves. The sums'
 * dims sit in lanes as widen_unpacked puts them (the same values, in another order) until the store. */
static inline __attribute__((always_inline)) void weigh(Scores P, int S, const int count, float *total,
                                                        const bf16 *V, int d, bf16 *const *out, const int D16,
                                                        const int SUMS) {
    __m512 acc[QUERIES][16];
    for (int j = 0; j < count; j++) {
        if (SUMS) total[j] = 0.f;
        for (int k = 0; k < D16; k++) acc[j][k] = _mm512_setzero_ps();
    }
    for (int c = 0; c < S; c++) {
        __m512 v[16];
        for (int u = 0; u < D16 / 2; u++) widen_unpacked(V + (size_t)c * d + 32 * u, &v[2 * u], &v[2 * u + 1]);
        const float *w = P.p + (size_t)c * P.column_stride;
        for (int j = 0; j < count; j++) {
            if (SUMS) total[j] += w[(size_t)j * P.query_stride];
            __m512 weight = _mm512_set1_ps(w[(size_t)j * P.query_stride]);
            for (int k = 0; k < D16; k++) acc[j][k] = _mm512_fmadd_ps(weight, v[k], acc[j][k]);
        }
    }
    for (int j = 0; j < count; j++)
        for (int u = 0; u < D16 / 2; u++)
            for (int half = 0; half < 2; half++)
                store16(out[j] + 32 * u + 16 * half,
                        _mm512_mul_ps(in_order(acc[j][2 * u], acc[j][2 * u + 1], half), _mm512_set1_ps(1.f / total[j])));
}
#else
/* AVX2: the same sums, two queries and 32 dims at a time (8 accumulators, a value row's 32 dims widened by
 * unpacking as above, two weights), each (query, dim) still one FMA per column in column order from zero. */
static inline __attribute__((always_inline)) void weigh_two(Scores P, int S, const int count, const float *total,
                                                            const bf16 *V, int d, bf16 *const *out, int u) {
    __m256 acc[2][4];
    for (int j = 0; j < count; j++)
        for (int k = 0; k < 4; k++) acc[j][k] = _mm256_setzero_ps();
    const __m256i zero = _mm256_setzero_si256();
    for (int c = 0; c < S; c++) {
        const __m256i raw0 = _mm256_loadu_si256((const __m256i *)(V + (size_t)c * d + 32 * u));
        const __m256i raw1 = _mm256_loadu_si256((const __m256i *)(V + (size_t)c * d + 32 * u + 16));
        const __m256 v[4] = {_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, raw0)),
                             _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, raw0)),
                             _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, raw1)),
                             _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, raw1))};
        const float *w = P.p + (size_t)c * P.column_stride;
        for (int j = 0; j < count; j++) {
            const __m256 weight = _mm256_set1_ps(w[(size_t)j * P.query_stride]);
            for (int k = 0; k < 4; k++) acc[j][k] = _mm256_fmadd_ps(weight, v[k], acc[j][k]);
        }
    }
    for (int j = 0; j < count; j++) { /* unpacking put dims 0–3 | 8–11 in one vector, 4–7 | 12–15 in the next */
        const __m256 scale = _mm256_set1_ps(1.f / total[j]);
        for (int half = 0; half < 2; half++) {
            const __m256 lo = acc[j][2 * half], hi = acc[j][2 * half + 1];
            store16(out[j] + 32 * u + 16 * half,
                    of_halves(_mm256_mul_ps(_mm256_permute2f128_ps(lo, hi, 0x20), scale),
                              _mm256_mul_ps(_mm256_permute2f128_ps(lo, hi, 0x31), scale)));
        }
    }
}

/* With `SUMS` the denominators are added first, each over the columns in order from zero, the queries' chains
 * side by side: inside the value loop the compiler kept them in memory (`total` might alias the weights), a
 * chain of store-to-load waits beside the FMAs. */
static inline __attribute__((always_inline)) void weigh(Scores P, int S, const int count, float *total,
                                                        const bf16 *V, int d, bf16 *const *out, const int D16,
                                                        const int SUMS) {
    if (SUMS) {
        float sum[QUERIES] = {0.f};
        for (int c = 0; c < S; c++)
            for (int j = 0; j < count; j++) sum[j] += P.p[(size_t)j * P.query_stride + (size_t)c * P.column_stride];
        for (int j = 0; j < count; j++) total[j] = sum[j];
    }
    for (int j = 0; j < count; j += 2) {
        const Scores from = {P.p + (size_t)j * P.query_stride, P.query_stride, P.column_stride};
        for (int u = 0; u < D16 / 2; u++)
            if (count - j >= 2) weigh_two(from, S, 2, total + j, V, d, out + j, u);
            else weigh_two(from, S, 1, total + j, V, d, out + j, u);
    }
}
#endif

/* softmax(q·Kᵀ / √d) V for a block of queries over S columns, float32 throughout, each output rounded
 * once; `mask` [N, M] (or NULL) says which of the last M columns each query's token sees; `tiles`: K's
 * columns in tiles (score_pairs) or NULL. `scores`: this thread's scratch, 16 × S rounded up to 16. */
static void attend(const Queries *Q, const bf16 *K, const uint32_t *tiles, const bf16 *V, int S, int d, int M,
                   const uint8_t *mask, int amx, float *scores) {
    const float scale = 1.f / sqrtf((float)d);
    const int by_column = amx; /* the AMX path's layout; weigh adds the denominators only by query */
    const Scores P = by_column ? (Scores){scores, 1, 16} : (Scores){scores, S, 1};
    float total[16];
#ifdef __AMX_BF16__
    if (by_column) score_amx(Q, K, S, d, scores);
#endif
    if (!by_column) score_pairs(Q, K, tiles, S, d, scores);
    if (mask != NULL)
        for (int i = 0; i < Q->count; i++)
            for (int c = 0; c < M; c++)
                if (!mask[(size_t)Q->token[i] * M + c])
                    P.p[(size_t)i * P.query_stride + (size_t)(S - M + c) * P.column_stride] = -INFINITY;
    if (by_column)
        soften_columns(scores, S, scale, total);
    else
        for (int i = 0; i < Q->count; i++) soften_row(scores + (size_t)i * S, S, scale);
    for (int j = 0; j < Q->count; j += QUERIES) {
        const int count = Q->count - j < QUERIES ? Q->count - j : QUERIES;
        const Scores from = {P.p + (size_t)j * P.query_stride, P.query_stride, P.column_stride};
/* constant counts and loop bounds keep the accumulators in registers */
#define WEIGH(n, D16) (by_column ? weigh(from, S, n, total + j, V, d, Q->out + j, D16, 0) \
                                 : weigh(from, S, n, total + j, V, d, Q->out + j, D16, 1))
        if (d == 64)
            switch (count) {
            case 1: WEIGH(1, 4); break;
            case 2: WEIGH(2, 4); break;
            case 3: WEIGH(3, 4); break;
            case 4: WEIGH(4, 4); break;
            case 5: WEIGH(5, 4); break;
            default: WEIGH(6, 4); break;
            }
        else
            WEIGH(count, d / 16);
#undef WEIGH
    }
}

/* Everything `forward` reads and writes; buffers come from the caller (torch tensors). */
typedef struct {
    const Dims *dims;
    int n, start, capacity, masked_columns, threads, tiled;
    const int64_t *positions;          /* [N] rotary positions */
    const bf16 *cos, *sin_signed;      /* [C, d] */
    bf16 *kv;                          /* [L, 2, kv, C, d] */
    uint32_t *key_tiles;               /* [L, kv, C / 16, d / 2, 16] or NULL: see Sequence */
    const uint8_t *mask;               /* [N, M] or NULL */
    const LayerWeights *layers;        /* [L] */
    const bf16 *final_norm, *lm_head;  /* [H], [V, H] */
    const bf16 *lm_head_tiles;         /* lm_head in AMX's tiles, or NULL (see matmul_amx) */
    const uint32_t *lm_head_pairs;     /* lm_head paired, or NULL on the AMX path */
    bf16 *x;                           /* [N, H]: the embeddings in, the residual stream through */
    bf16 *normed, *qkv, *heads_out, *projected, *gate_up, *mlp; /* scratch */
    bf16 *logits;                      /* [N, V], or NULL: no output head (a prefill's cache and features only) */
    bf16 *features;                    /* [F, N, H] or NULL */
    const int32_t *feature_slot;       /* [L + 1] */
    double *timings;                   /* [4] seconds added per stage: glue, products, attention, output; or NULL */
} Forward;

/* One sequence of a batched forward: its rows of x are the next n after the sequences before it.
 *
 * Its key tiles: without AMX a score reads 16 keys at a time transposed ([d / 2 pairs][16 columns], see
 * score_block), and transposing every cached key again for every block of queries cost every forward about
 * 0.5 ms at cache 512 on the Zen 5 (a decode step takes 9–10), a tree's several blocks more. So a cache
 * may keep its keys in tiles beside it, `key_tiles` [L, kv, C / 16, d / 2, 16] (64-byte aligned), of which columns [0, tiled) match the cache;
 * each call tiles again the 16-column tiles from min(tiled, start) through its own rows, in every layer
 * before its attention, and the caller then counts columns [0, start + n) as tiled (and lowers `tiled` where
 * it moves or drops cached rows). The same keys in the same order: the same bits as transposing each time. */
typedef struct {
    int n, start, capacity, masked_columns, tiled;
    const int64_t *positions;          /* [n] rotary positions */
    const bf16 *cos, *sin_signed;      /* [C, d] */
    bf16 *kv;                          /* [L, 2, kv, C, d] */
    uint32_t *key_tiles;               /* [L, kv, C / 16, d / 2, 16] or NULL (transposed as read) */
    const uint8_t *mask;               /* [n, M] or NULL */
} Sequence;

void native_sequence_struct_size(int64_t *size) { *size = sizeof(Sequence); }

/* Where each row of a batch belongs, and how much attention each sequence asks, laid out once per call.
 * Sequence s has n_s · group query slots per KV head (slot i: token i / group, query head i % group of
 * the KV head's group), and a slot costs S_s = start_s + n_s columns. */
typedef struct {
    int count, rows, columns;          /* columns: the most cached columns a sequence attends over */
    int64_t work;                      /* Σ over sequences and KV heads of slots × columns */
    int row_sequence[MAX_TOKENS];
    int first_row[MAX_TOKENS];
    int first_tile[MAX_TOKENS], tiles[MAX_TOKENS]; /* each sequence's key tiles to make again, per KV head */
    int tile_units;                    /* Σ over sequences of kv × tiles: a layer's tiling work */
} Layout;

static void lay_out(const Sequence *seqs, int count, int g, int group, Layout *layout) {
    layout->count = count, layout->rows = 0, layout->columns = 0, layout->work = 0, layout->tile_units = 0;
    for (int s = 0; s < count; s++) {
        const Sequence *q = &seqs[s];
        const int S = q->start + q->n, stale = q->tiled < q->start ? q->tiled : q->start;
        layout->first_row[s] = layout->rows;
        for (int t = 0; t < q->n; t++) layout->row_sequence[layout->rows + t] = s;
        layout->rows += q->n;
        layout->work += (int64_t)g * q->n * group * S;
        if (S > layout->columns) layout->columns = S;
        layout->first_tile[s] = stale / 16;
        layout->tiles[s] = q->key_tiles ? up16(S) / 16 - stale / 16 : 0;
        layout->tile_units += g * layout->tiles[s];
    }
}

static void save_feature(const Forward *f, int layer, const bf16 *x) {
    if (f->features == NULL || f->feature_slot[layer] < 0) return;
    size_t size = (size_t)f->n * f->dims->hidden;
    memcpy(f->features + (size_t)f->feature_slot[layer] * size, x, size * sizeof(bf16));
}

/* The sizes of the structs ctypes mirrors, so a stale mirror is caught at load, not by a crash. */
void native_struct_sizes(int64_t sizes[3]) {
    sizes[0] = sizeof(Dims), sizes[1] = sizeof(LayerWeights), sizes[2] = sizeof(Forward);
}

/* What one sequence of a call may ask: its rows fit its cache, its positions its rotary table, its mask
 * its columns. */
static int check_sequence(const Sequence *q) {
    if (q->capacity % 16) return NATIVE_BAD_DIMS;
    if (q->n < 1 || q->n > MAX_TOKENS) return NATIVE_TOO_MANY_TOKENS;
    if (q->start < 0 || q->start + q->n > q->capacity) return NATIVE_PAST_CAPACITY;
    for (int t = 0; t < q->n; t++)
        if (q->positions[t] < 0 || q->positions[t] >= q->capacity) return NATIVE_BAD_POSITION;
    if (q->masked_columns < 0 || q->masked_columns > q->start + q->n || (q->masked_columns > 0) != (q->mask != NULL))
        return NATIVE_BAD_MASK;
    if (q->key_tiles && ((uintptr_t)q->key_tiles % 64 || q->tiled < 0 || q->tiled > q->capacity))
        return NATIVE_BAD_DIMS;
    return NATIVE_OK;
}

/* The call's own sequence (`forward`, `head_step`): its fields of Forward. */
static Sequence sequence_of(const Forward *f) {
    return (Sequence){.n = f->n, .start = f->start, .capacity = f->capacity, .masked_columns = f->masked_columns,
                      .tiled = f->tiled, .positions = f->positions, .cos = f->cos, .sin_signed = f->sin_signed,
                      .kv = f->kv, .key_tiles = f->key_tiles, .mask = f->mask};
}

/* What a call may ask, checked before anything is read or written: the dimensions, the paired weights
 * the path needs, the rows of all its sequences together, then each sequence. */
static int check_batch(const Forward *f, const Sequence *seqs, int count) {
    const Dims *D = f->dims;
    const int d = D->head_dim, h = D->heads, g = D->kv_heads, width = (h + 2 * g) * d;
    if (D->hidden % 32 || D->inter % 32 || d % 32 || d > 256 || width % 4 || D->vocab % 4
        || g < 1 || h % g || D->layers < 1) return NATIVE_BAD_DIMS;
    if (count < 1 || count > MAX_TOKENS || f->n < 1 || f->n > MAX_TOKENS) return NATIVE_TOO_MANY_TOKENS;
    int rows = 0;
    for (int s = 0; s < count; s++) {
        const int refused = check_sequence(&seqs[s]);
        if (refused) return refused;
        rows += seqs[s].n;
    }
    if (rows != f->n) return NATIVE_BAD_DIMS;
    if (native_amx_active() && D->vocab % 16 && f->lm_head_pairs == NULL) return NATIVE_NO_PAIRS; /* tiles: 16 rows */
    if (!native_amx_active()) {
        if (f->lm_head_pairs == NULL) return NATIVE_NO_PAIRS;
        for (int l = 0; l < D->layers; l++) {
            const LayerWeights *w = &f->layers[l];
            if (!w->qkv_pairs || !w->o_pairs || !w->gate_up_pairs || !w->down_pairs) return NATIVE_NO_PAIRS;
        }
    }
    return NATIVE_OK;
}

/* Stage times, read on the master thread after a barrier: glue 0, products 1, attention 2, output 3. */
typedef struct {
    double *timings, last;
} Clock;

static inline void mark(Clock *clock, int stage) {
    if (clock->timings == NULL) return;
#pragma omp master
    {
        double now = omp_get_wtime();
        clock->timings[stage] += now - clock->last;
        clock->last = now;
    }
}

/* What one decoder layer reads and writes besides its weights. */
typedef struct {
    int n, layer, in_width;                            /* n: every sequence's rows; in_width: H (2H for a head) */
    const Sequence *seqs;                              /* each with its cache [layers, 2, kv, C, d] */
    const Layout *layout;
    const bf16 *attn_in;                               /* [N, in_width], normed */
    bf16 *x;                                           /* [N, H]: the residual stream, updated in place */
    bf16 *normed, *qkv, *heads_out, *projected, *gate_up, *mlp;
    uint32_t *packed;                                  /* AMX's shared scratch, or NULL */
    float *scores;                                     /* this thread's 16 × S (S rounded up to 16) */
} LayerCall;

/* A sequence's keys for this layer, [kv, C, d]; its values follow them. */
static inline bf16 *layer_keys(const Sequence *q, int layer, int g, int d) {
    return q->kv + (size_t)layer * 2 * g * q->capacity * d;
}

/* A sequence's key tiles for this layer's KV head j, [C / 16][d / 2][16], or NULL. */
static inline uint32_t *head_tiles(const Sequence *q, int layer, int g, int j, int d) {
    return q->key_tiles ? q->key_tiles + ((size_t)layer * g + j) * q->capacity * (d / 2) : NULL;
}

/* This layer's stale key tiles made again from the cache (Sequence), shared over the team; the keys of this
 * call's rows are in the cache already. */
static void tile_share(const LayerCall *c, int g, int d) {
    const Layout *layout = c->layout;
#pragma omp for schedule(static)
    for (int u = 0; u < layout->tile_units; u++) {
        int s = 0, unit = u;
        while (unit >= g * layout->tiles[s]) unit -= g * layout->tiles[s++];
        const Sequence *q = &c->seqs[s];
        const int j = unit / layout->tiles[s], tile = layout->first_tile[s] + unit % layout->tiles[s];
        tile_keys(layer_keys(q, c->layer, g, d) + (size_t)j * q->capacity * d, 16 * tile, d,
                  head_tiles(q, c->layer, g, j, d) + (size_t)tile * 16 * (d / 2));
    }
}

/* This thread's share of a layer's attention. The work is every sequence's query slots, KV head by KV
 * head, weighed by the columns each reads; each thread takes an equal run of it and attends it in
 * blocks of up to 16 slots of one KV head, which share every key and value read. (A decode step has one
 * block per KV head, three for SmolLM2, and whole blocks per thread gave one of two threads two of
 * them; now the KV head the cut falls in is read by both. On the Zen 5, cache 512: 0.8 → 0.7 ms a
 * decode step, 1.5 → 1.3 ms for 4 tokens.) A query's sums never depend on the queries beside it in a
 * block (see score_block, weigh), so any cut gives the same bits. */
static void attend_share(const Dims *D, const LayerCall *c, const Layout *layout, int group, int width, int amx) {
    const int d = D->head_dim, h = D->heads, g = D->kv_heads, team = omp_get_num_threads(), me = omp_get_thread_num();
    const int64_t lo = layout->work * me / team, hi = layout->work * (me + 1) / team;
    int64_t before = 0; /* the work of the segments (sequence, KV head) before this one */
    for (int s = 0; s < layout->count; s++) {
        const Sequence *q = &c->seqs[s];
        const int S = q->start + q->n, slots = q->n * group, row0 = layout->first_row[s];
        bf16 *keys = layer_keys(q, c->layer, g, d);
        for (int j = 0; j < g; j++, before += (int64_t)slots * S) {
            /* the slots whose work starts in [lo, hi) */
            int first = lo <= before ? 0 : (int)((lo - before + S - 1) / S);
            int end = hi <= before ? 0 : (int)((hi - before + S - 1) / S);
            if (end > slots) end = slots;
            for (; first < end; first += 16) {
                Queries Q = {.count = end - first < 16 ? end - first : 16};
                for (int i = 0; i < Q.count; i++) {
                    int t = (first + i) / group, head = j * group + (first + i) % group;
                    Q.q[i] = c->qkv + (size_t)(row0 + t) * width + head * d;
                    Q.token[i] = t;
                    Q.out[i] = c->heads_out + ((size_t)(row0 + t) * h + head) * d;
                }
                attend(&Q, keys + (size_t)j * q->capacity * d, head_tiles(q, c->layer, g, j, d),
                       keys + ((size_t)g + j) * q->capacity * d, S, d, q->masked_columns, q->mask, amx, c->scores);
            }
        }
    }
#pragma omp barrier
}

/* One Llama decoder layer from its normed attention input on, called by every thread of the team: q/k/v
 * and RoPE over every sequence's rows, each row's keys and values into its sequence's cache at slot
 * start + t, attention per sequence over its own cache, the output product and the residual, the MLP
 * and its residual. */
static void decoder_layer(const Dims *D, const LayerWeights *w, const LayerCall *c, Clock *clock) {
    const int n = c->n, H = D->hidden, d = D->head_dim, h = D->heads, g = D->kv_heads, I = D->inter;
    const int width = (h + 2 * g) * d, group = h / g;
    const int amx = c->packed != NULL;
    const Layout *layout = c->layout;
    matmul(c->attn_in, n, c->in_width, w->qkv, w->qkv_tiles, w->qkv_pairs, w->qkv_int8, width, c->qkv, c->packed);
    mark(clock, 1);
#pragma omp for schedule(static)
    for (int row = 0; row < n; row++) { /* RoPE on q and k; k and v into the sequence's cache at slot start + t */
        const int s = layout->row_sequence[row], t = row - layout->first_row[s];
        const Sequence *q = &c->seqs[s];
        bf16 *keys = layer_keys(q, c->layer, g, d), *values = keys + (size_t)g * q->capacity * d;
        bf16 *qkv = c->qkv + (size_t)row * width;
        const int64_t position = q->positions[t];
        for (int head = 0; head < h + g; head++)
            rope(qkv + head * d, q->cos + position * d, q->sin_signed + position * d, d);
        for (int j = 0; j < g; j++) {
            size_t slot = ((size_t)j * q->capacity + q->start + t) * d;
            memcpy(keys + slot, qkv + (h + j) * d, d * sizeof(bf16));
            memcpy(values + slot, qkv + (h + g + j) * d, d * sizeof(bf16));
        }
    }
    mark(clock, 0);
    if (layout->tile_units) tile_share(c, g, d); /* the same count on every thread: all of the team, or none */
    attend_share(D, c, layout, group, width, amx);
    mark(clock, 2);
    matmul(c->heads_out, n, h * d, w->o, w->o_tiles, w->o_pairs, w->o_int8, H, c->projected, c->packed);
    mark(clock, 1);
#pragma omp for schedule(static)
    for (int t = 0; t < n; t++) { /* row by row over the team: each row's sums as on one thread */
        add_rounded(c->x + (size_t)t * H, c->projected + (size_t)t * H, H);
        rms_norm(c->x + (size_t)t * H, 1, H, w->mlp_norm, D->eps, c->normed + (size_t)t * H);
    }
    mark(clock, 0);
    matmul(c->normed, n, H, w->gate_up, w->gate_up_tiles, w->gate_up_pairs, w->gate_up_int8, 2 * I, c->gate_up,
           c->packed);
    mark(clock, 1);
#pragma omp for schedule(static)
    for (int t = 0; t < n; t++)
        silu_times(c->gate_up + (size_t)t * 2 * I, c->gate_up + (size_t)t * 2 * I + I, I, c->mlp + (size_t)t * I);
    mark(clock, 0);
    matmul(c->mlp, n, I, w->down, w->down_tiles, w->down_pairs, w->down_int8, H, c->projected, c->packed);
    mark(clock, 1);
#pragma omp for schedule(static)
    for (int t = 0; t < n; t++) add_rounded(c->x + (size_t)t * H, c->projected + (size_t)t * H, H);
}

/* AMX's pair scratch for products of inputs up to `widest` and each thread's score rows for S columns;
 * NATIVE_NO_MEMORY (both freed) where an allocation failed. */
static int team_scratch(int widest, int S, int threads, uint32_t **packed, float **scores) {
    *packed = pairs_scratch(widest);
    *scores = aligned_alloc(64, sizeof(float) * 16 * (size_t)up16(S) * threads); /* [threads][16, S to 16] */
    if ((*packed == NULL && native_amx_active()) || *scores == NULL) {
        free(*packed);
        free(*scores);
        return NATIVE_NO_MEMORY;
    }
    return NATIVE_OK;
}

/* The forward of every sequence's rows, x [Σn, H] in f->x; f's own per-sequence fields are not read. */
int forward_batch(const Forward *f, const Sequence *seqs, int count) {
    const int refused = check_batch(f, seqs, count);
    if (refused) return refused;
    const Dims *D = f->dims;
    const int n = f->n, H = D->hidden, d = D->head_dim, h = D->heads, g = D->kv_heads, I = D->inter;
    int widest = H > I ? H : I; /* the longest input of a product */
    if (h * d > widest) widest = h * d;
    Layout layout;
    lay_out(seqs, count, g, h / g, &layout);
    uint32_t *packed;
    float *all_scores;
    if (team_scratch(widest, layout.columns, f->threads, &packed, &all_scores)) return NATIVE_NO_MEMORY;
    Clock clock = {f->timings, omp_get_wtime()};
#pragma omp parallel num_threads(f->threads)
    {
#ifdef __AMX_BF16__
        if (packed) amx_configure();
#endif
        LayerCall call = {.n = n, .in_width = H, .seqs = seqs, .layout = &layout, .attn_in = f->normed, .x = f->x,
                          .normed = f->normed, .qkv = f->qkv, .heads_out = f->heads_out, .projected = f->projected,
                          .gate_up = f->gate_up, .mlp = f->mlp, .packed = packed,
                          .scores = all_scores + (size_t)16 * up16(layout.columns) * omp_get_thread_num()};
        for (int l = 0; l < D->layers; l++) {
            const LayerWeights *w = &f->layers[l];
            call.layer = l;
#pragma omp single nowait /* it reads x, as the norm does; the norm writes only `normed` */
            save_feature(f, l, f->x);
#pragma omp for schedule(static)
            for (int t = 0; t < n; t++)
                rms_norm(f->x + (size_t)t * H, 1, H, w->attn_norm, D->eps, f->normed + (size_t)t * H);
            mark(&clock, 0);
            decoder_layer(D, w, &call, &clock);
        }
#pragma omp single
        {
            rms_norm(f->x, n, H, f->final_norm, D->eps, f->normed);
            save_feature(f, D->layers, f->normed);
        }
        mark(&clock, 0);
        if (f->logits) /* the same pointer on every thread: all of the team skips it, or none */
            matmul(f->normed, n, H, f->lm_head, f->lm_head_tiles, f->lm_head_pairs, NULL, D->vocab, f->logits, packed);
        mark(&clock, 3);
#ifdef __AMX_BF16__
        if (packed) _tile_release();
#endif
    }
    free(packed);
    free(all_scores);
    return NATIVE_OK;
}

/* One sequence's forward: the batch of one. */
int forward(const Forward *f) {
    const Sequence only = sequence_of(f);
    return forward_batch(f, &only, 1);
}

/* One step of an EAGLE-3 draft head (engine/models/head.py): a Llama decoder layer whose attention reads
 * [input_norm(embedding) | hidden_norm(state)], 2H wide, with the state (or its hidden_norm) as the
 * residual, then the final norm and the draft vocabulary's logits for rows first_logit … N − 1. */
typedef struct {
    const Dims *dims;                   /* layers 1; vocab: the draft vocabulary */
    int n, start, capacity, masked_columns, threads, first_logit, norm_before_residual;
    const int64_t *positions;
    const bf16 *cos, *sin_signed;       /* [C, d] */
    bf16 *kv;                           /* [2, kv, C, d] */
    const uint8_t *mask;                /* [N, M] or NULL */
    const LayerWeights *layer;          /* attn_norm: input_layernorm (of the embeddings) */
    const bf16 *hidden_norm, *final_norm, *lm_head;
    const bf16 *lm_head_tiles;          /* lm_head in AMX's tiles, or NULL (see matmul_amx) */
    const uint32_t *lm_head_pairs;
    const void *lm_head_int8;           /* lm_head as int8 × 2^e rows (see matmul_int8), or NULL */
    const bf16 *embeds, *state;         /* [N, H] each */
    bf16 *attn_in;                      /* [N, 2H] scratch */
    bf16 *x;                            /* [N, H]: the output state */
    bf16 *normed, *qkv, *heads_out, *projected, *gate_up, *mlp; /* scratch */
    bf16 *logits;                       /* [N − first_logit, V] */
} HeadStep;

void native_head_struct_size(int64_t *size) { *size = sizeof(HeadStep); }

/* Several drafts' head steps in one call, as `forward_batch` is for the target: sequence i's rows of
 * embeds, state, x are the next seqs[i].n after those before it, each attends over its own cache, and its
 * logits are those of its rows first_logits[i] … n_i − 1, after the rows of the sequences before it. s's own
 * per-sequence fields (start, capacity, positions, cos, sin, kv, mask, first_logit) are not read; s->n is
 * every sequence's rows together. No output depends on the rows beside it, so each sequence gets the bits of
 * a call of its own. */
int head_step_batch(const HeadStep *s, const Sequence *seqs, int count, const int32_t *first_logits) {
    const Dims *D = s->dims;
    const int n = s->n, H = D->hidden, d = D->head_dim, h = D->heads, g = D->kv_heads, I = D->inter;
    const Forward as_forward = {.dims = D, .n = n, .layers = s->layer, .lm_head_tiles = s->lm_head_tiles,
                                .lm_head_pairs = s->lm_head_pairs};
    const int refused = check_batch(&as_forward, seqs, count);
    if (refused) return refused;
    for (int i = 0; i < count; i++)
        if (first_logits[i] < 0 || first_logits[i] >= seqs[i].n) return NATIVE_BAD_DIMS;
    Layout layout;
    lay_out(seqs, count, g, h / g, &layout);
    int widest = 2 * H > I ? 2 * H : I;
    if (h * d > widest) widest = h * d;
    uint32_t *packed;
    float *all_scores;
    if (team_scratch(widest, layout.columns, s->threads, &packed, &all_scores)) return NATIVE_NO_MEMORY;
    Clock clock = {NULL, 0};
    int rows = 0; /* the rows whose logits are asked, every sequence's together */
    for (int i = 0; i < count; i++) rows += seqs[i].n - first_logits[i];
#pragma omp parallel num_threads(s->threads)
    {
#ifdef __AMX_BF16__
        if (packed) amx_configure();
#endif
#pragma omp single
        {
            for (int t = 0; t < n; t++) {
                rms_norm(s->embeds + (size_t)t * H, 1, H, s->layer->attn_norm, D->eps, s->attn_in + (size_t)t * 2 * H);
                rms_norm(s->state + (size_t)t * H, 1, H, s->hidden_norm, D->eps, s->attn_in + (size_t)t * 2 * H + H);
                if (s->norm_before_residual)
                    memcpy(s->x + (size_t)t * H, s->attn_in + (size_t)t * 2 * H + H, H * sizeof(bf16));
            }
            if (!s->norm_before_residual) memcpy(s->x, s->state, (size_t)n * H * sizeof(bf16));
        }
        LayerCall call = {.n = n, .layer = 0, .in_width = 2 * H, .seqs = seqs, .layout = &layout,
                          .attn_in = s->attn_in, .x = s->x, .normed = s->normed, .qkv = s->qkv,
                          .heads_out = s->heads_out, .projected = s->projected, .gate_up = s->gate_up,
                          .mlp = s->mlp, .packed = packed,
                          .scores = all_scores + (size_t)16 * up16(layout.columns) * omp_get_thread_num()};
        decoder_layer(D, s->layer, &call, &clock);
#pragma omp single
        { /* the asked rows' final norms, side by side in `normed` (one output product for them all) */
            bf16 *out = s->normed;
            for (int i = 0; i < count; i++) {
                const int first = layout.first_row[i] + first_logits[i], asked = seqs[i].n - first_logits[i];
                rms_norm(s->x + (size_t)first * H, asked, H, s->final_norm, D->eps, out);
                out += (size_t)asked * H;
            }
        }
        matmul(s->normed, rows, H, s->lm_head, s->lm_head_tiles, s->lm_head_pairs, s->lm_head_int8, D->vocab,
               s->logits, packed);
#ifdef __AMX_BF16__
        if (packed) _tile_release();
#endif
    }
    free(packed);
    free(all_scores);
    return NATIVE_OK;
}

/* One draft's head step: the batch of one. */
int head_step(const HeadStep *s) {
    const Forward as_forward = {.n = s->n, .start = s->start, .capacity = s->capacity,
                                .masked_columns = s->masked_columns, .positions = s->positions, .cos = s->cos,
                                .sin_signed = s->sin_signed, .kv = s->kv, .mask = s->mask};
    const Sequence only = sequence_of(&as_forward);
    const int32_t first_logit = s->first_logit;
    return head_step_batch(s, &only, 1, &first_logit);
}

/* ------------------------------------------------------------------ what a drafter reads of its logits */

#define TOP_K_MAX 64

/* Puts (x, at) among the k best so far, `top` kept largest first; an equal value stays behind the one
 * already there (rows are scanned in index order, so ties go to the lower index). */
static inline void keep_best(float *top, int64_t *index, int *have, int k, float x, int64_t at) {
    int pos;
    if (*have < k) pos = (*have)++;
    else if (x > top[k - 1]) pos = k - 1;
    else return;
    while (pos > 0 && top[pos - 1] < x) {
        top[pos] = top[pos - 1];
        index[pos] = index[pos - 1];
        pos--;
    }
    top[pos] = x;
    index[pos] = at;
}

static inline float bf16_to_float(bf16 b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* For each of `rows` rows of V bfloat16 logits: the k largest and their indices, largest first, ties to
 * the lower index; and the log-sum-exp, max + log Σ e^(x − max), the exponentials in float lanes (exp16)
 * summed in double. One pass over the row for the top-k and the max, one for the sum: no float copy of
 * the row and no call into torch, whose every op on two cores is an OpenMP region of its own. */
int top_k_lse(const bf16 *logits, int rows, int V, int k, float *lse, int64_t *index, float *value) {
    if (rows < 0 || V < 16 || k < 1 || k > TOP_K_MAX || k > V) return NATIVE_BAD_DIMS;
    for (int r = 0; r < rows; r++) {
        const bf16 *x = logits + (size_t)r * V;
        float top[TOP_K_MAX], lanes[16];
        int64_t at[TOP_K_MAX];
        int have = 0, v = 0;
        __m512 most = _mm512_set1_ps(-INFINITY);
        for (; v + 16 <= V; v += 16) {
            const __m512 s = load16(x + v);
            most = _mm512_max_ps(most, s);
            __mmask16 better = have < k ? (__mmask16)0xFFFF
                                        : _mm512_cmp_ps_mask(s, _mm512_set1_ps(top[k - 1]), _CMP_GT_OQ);
            if (!better) continue;
            _mm512_storeu_ps(lanes, s);
            for (; better; better &= better - 1) {
                const int lane = __builtin_ctz(better);
                keep_best(top, at, &have, k, lanes[lane], v + lane);
            }
        }
        float m = _mm512_reduce_max_ps(most);
        for (int t = v; t < V; t++) {
            const float xt = bf16_to_float(x[t]);
            m = xt > m ? xt : m;
            keep_best(top, at, &have, k, xt, t);
        }
        __m512 sum = _mm512_setzero_ps();
        const __m512 shift = _mm512_set1_ps(m);
        for (v = 0; v + 16 <= V; v += 16) sum = _mm512_add_ps(sum, exp16(_mm512_sub_ps(load16(x + v), shift)));
        double total = 0;
        for (int t = v; t < V; t++) total += exp((double)bf16_to_float(x[t]) - m);
        _mm512_storeu_ps(lanes, sum);
        for (int i = 0; i < 16; i++) total += lanes[i];
        lse[r] = isinf(m) ? m : (float)(m + log(total));
        for (int i = 0; i < k; i++) {
            value[(size_t)r * k + i] = top[i];
            index[(size_t)r * k + i] = at[i];
        }
    }
    return NATIVE_OK;
}

/* out = x widened to float32, exact (a shift), on `threads` threads: the logits the engine reads come out of a
 * forward as bfloat16, and torch's own copy runs on the one thread the engine leaves it beside the kernel's
 * team (engine/models/device.py): 2 ms for a 61-node tree's 3 M logits on the Xeon, a fifth of that here. */
void native_widen(const bf16 *x, int64_t n, float *out, int threads) {
    const int64_t vectors = n / 16;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < vectors; i++) _mm512_storeu_ps(out + 16 * i, load16(x + 16 * i));
    for (int64_t i = 16 * vectors; i < n; i++) out[i] = bf16_to_float(x[i]);
}

/* Row `row` of logits [·, V], float32 or (`narrow`) bfloat16 as the output head wrote them: the index of its
 * largest value, the first where several tie and the first NaN where there is one, as torch's argmax answers
 * (which takes ~60 µs over a row of 49 152 on this machine's torch, a fiftieth of that here): greedy
 * acceptance reads one such index per node it visits. bf16 widens to float32 exactly, so a bf16 row answers
 * what its widened copy would. Each lane keeps its first strict maximum; the lanes then give the largest
 * value's lowest index. */
static inline __attribute__((always_inline)) float logit_at(const void *x, int t, const int narrow) {
    return narrow ? bf16_to_float(((const bf16 *)x)[t]) : ((const float *)x)[t];
}

static inline __attribute__((always_inline)) int64_t argmax_of(const void *x, int V, const int narrow) {
    __m512 most = _mm512_set1_ps(-INFINITY);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i at = lane; /* a lane that never beats −∞ answers its first index */
    int nan = 0, v = 0;
#if AVX512
    for (; v + 16 <= V; v += 16) {
        const __m512 s = narrow ? load16((const bf16 *)x + v) : _mm512_loadu_ps((const float *)x + v);
        const __mmask16 better = _mm512_cmp_ps_mask(s, most, _CMP_GT_OQ);
        nan |= _mm512_cmp_ps_mask(s, s, _CMP_UNORD_Q);
        most = _mm512_mask_mov_ps(most, better, s);
        at = _mm512_mask_mov_epi32(at, better, _mm512_add_epi32(lane, _mm512_set1_epi32(v)));
    }
#else /* the same lanes in two halves, the comparisons kept as vectors (avx2.h's masks go through 16-bit integers) */
    __m256 best_half[2] = {lo_of(most), hi_of(most)}, unordered = _mm256_setzero_ps();
    __m256i at_half[2] = {lo_int(at), hi_int(at)};
    for (; v + 16 <= V; v += 16) {
        const __m512 s = narrow ? load16((const bf16 *)x + v) : _mm512_loadu_ps((const float *)x + v);
        const __m256 half[2] = {lo_of(s), hi_of(s)};
        for (int h = 0; h < 2; h++) {
            const __m256 better = _mm256_cmp_ps(half[h], best_half[h], _CMP_GT_OQ);
            unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(half[h], half[h], _CMP_UNORD_Q));
            best_half[h] = _mm256_blendv_ps(best_half[h], half[h], better);
            at_half[h] = _mm256_blendv_epi8(at_half[h], _mm256_add_epi32(lo_int(lane), _mm256_set1_epi32(v + 8 * h)),
                                            _mm256_castps_si256(better));
        }
    }
    nan = _mm256_movemask_ps(unordered);
    most = of_halves(best_half[0], best_half[1]), at = of_int_halves(at_half[0], at_half[1]);
#endif
    float values[16];
    int32_t indices[16];
    _mm512_storeu_ps(values, most);
    _mm512_storeu_si512(indices, at);
    float best = -INFINITY;
    int64_t index = 0;
    if (v > 0) {
        best = values[0], index = indices[0];
        for (int i = 1; i < 16; i++)
            if (values[i] > best || (values[i] == best && indices[i] < index)) best = values[i], index = indices[i];
    }
    for (int t = v; t < V; t++) {
        const float value = logit_at(x, t, narrow);
        if (isnan(value)) nan = 1;
        if (value > best) best = value, index = t;
    }
    if (nan)
        for (int t = 0; t < V; t++)
            if (isnan(logit_at(x, t, narrow))) return t;
    return index;
}

int64_t argmax_row(const float *logits, int64_t row, int V) { return argmax_of(logits + row * (int64_t)V, V, 0); }

int64_t argmax_row_bf16(const bf16 *logits, int64_t row, int V) { return argmax_of(logits + row * (int64_t)V, V, 1); }

/* ------------------------------------------------------------------ a line of top-1 children after a head step */

/* A chain drafts each layer as the best child of the layer before, so after a head step the next pairs are
 * known without the Python between two draft forwards: the last row's top-1 draft token (argmax_of, the
 * first of equal logits), mapped to its target id and embedding, paired with that row's output state. Each
 * pair is run as the drafter would run it alone (`head_step` of one pair at the next column and position,
 * seeing every column up to its own, as its ancestry mask lets it: the step's and the line's before it), so
 * it has the bits of that call; the drafter takes a pair where the chain drafted its token and drops the
 * rest (engine/drafters/eagle_head.py). */
typedef struct {
    int count;                /* pairs after the step's last row */
    int vocab_rows;           /* rows of embed_table (the target's vocabulary) */
    const bf16 *embed_table;  /* [vocab_rows, H]: the target's input embeddings, the head's dtype */
    const int64_t *to_target; /* [Vd] draft id -> target id, or NULL (the same ids) */
    int64_t *tokens;          /* [count]: the line's target ids */
    bf16 *x;                  /* [count, H]: their output states */
    bf16 *logits;             /* [count, Vd]: their draft logits */
} HeadLine;

void native_line_struct_size(int64_t *size) { *size = sizeof(HeadLine); }

int head_step_line(const HeadStep *s, const HeadLine *line) {
    const int H = s->dims->hidden, V = s->dims->vocab;
    if (line->count < 0 || line->embed_table == NULL) return NATIVE_BAD_DIMS;
    if (s->start + s->n + line->count > s->capacity) return NATIVE_PAST_CAPACITY;
    int code = head_step(s);
    const bf16 *state = s->x + (size_t)(s->n - 1) * H, *logits = s->logits + (size_t)(s->n - 1 - s->first_logit) * V;
    for (int l = 0; l < line->count && code == NATIVE_OK; l++) {
        const int64_t draft = argmax_of(logits, V, 1);
        const int64_t token = line->to_target != NULL ? line->to_target[draft] : draft;
        if (token < 0 || token >= line->vocab_rows) return NATIVE_BAD_DIMS;
        const int64_t position = s->positions[s->n - 1] + 1 + l;
        line->tokens[l] = token;
        HeadStep pair = *s; /* the pair's embedding is the table's row as it lies: the head step only reads it */
        pair.n = 1, pair.first_logit = 0, pair.start = s->start + s->n + l, pair.masked_columns = 0, pair.mask = NULL;
        pair.positions = &position, pair.embeds = line->embed_table + (size_t)token * H, pair.state = state;
        pair.x = line->x + (size_t)l * H, pair.logits = line->logits + (size_t)l * V;
        code = head_step(&pair);
        state = pair.x, logits = pair.logits;
    }
    return code;
}
