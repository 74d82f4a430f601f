/* How many AVX512 vectors one core retires per second in a register-only loop: vdpbf16ps (the kernel's
 * dot-product path) and vfmadd (its value sums), 24 independent accumulators each. The products' ceiling
 * quoted in docs/fastpath.md is 2 · 16 · 2 FLOPs × this rate × the cores.
 *
 *     gcc -O3 -march=native -fopenmp scripts/peak_rate.c -o /tmp/peak_rate && /tmp/peak_rate
 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>

#define ACCUMULATORS 24
#define ROUNDS 50000000L

int main(void) {
    __m512 acc[ACCUMULATORS];
    const __m512 tiny = _mm512_set1_ps(1e-20f);
    const __m512bh pair = (__m512bh)_mm512_set1_epi32(0x00010001);
    for (int kind = 0; kind < 2; kind++) {
        for (int i = 0; i < ACCUMULATORS; i++) acc[i] = _mm512_setzero_ps();
        double start = omp_get_wtime();
        for (long round = 0; round < ROUNDS; round++) {
#pragma GCC unroll 24
            for (int i = 0; i < ACCUMULATORS; i++)
                acc[i] = kind ? _mm512_fmadd_ps(tiny, tiny, acc[i]) : _mm512_dpbf16_ps(acc[i], pair, pair);
            __asm__ volatile("" ::"v"(acc[0])); /* keep the loop */
        }
        double seconds = omp_get_wtime() - start;
        float sum = 0;
        for (int i = 0; i < ACCUMULATORS; i++) sum += _mm512_reduce_add_ps(acc[i]);
        printf("%-9s %.2f G vectors/s on one core (%g)\n", kind ? "vfmadd" : "vdpbf16ps",
               ROUNDS * ACCUMULATORS / seconds / 1e9, sum);
    }
    return 0;
}
