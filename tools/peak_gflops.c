/* Peak f32 FMA throughput of this machine: independent AVX-512 FMA chains on every core.
   Built and run by tools/bench_matmul.py (gcc -O3 -funroll-all-loops -mavx512f -fopenmp;
   at -O2 gcc keeps the accumulators in memory and measures about a third of the peak). */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>

#define CHAINS 12
#define ITERS 20000000L

int main(void) {
  double best = 0;
  for (int rep = 0; rep < 3; rep++) {
    double t0 = omp_get_wtime();
    float sink = 0;
#pragma omp parallel reduction(+ : sink)
    {
      __m512 acc[CHAINS];
      const __m512 a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(0.9999999f);
      for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
      for (long i = 0; i < ITERS; i++)
        for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
      for (int c = 0; c < CHAINS; c++) sink += _mm512_reduce_add_ps(acc[c]);
    }
    double t = omp_get_wtime() - t0;
    double flops = 2.0 * 16 * CHAINS * ITERS * omp_get_max_threads();
    if (flops / t > best) best = flops / t;
    if (sink == 12345.f) printf(" ");
  }
  printf("%.1f\n", best / 1e9);
  return 0;
}
