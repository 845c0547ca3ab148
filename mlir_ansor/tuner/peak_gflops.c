/* Peak f32 FMA throughput of this machine: independent FMA chains on every core, written
   with GCC vector extensions in the widest vector -march=native allows (__BIGGEST_ALIGNMENT__:
   64 bytes with AVX-512, 32 with AVX2, 16 with NEON), 12 chains: enough to cover the FMA
   latency of two pipes, few enough to stay in 16 registers.
   Built and run by tools/bench_matmul.py (gcc -O3 -march=native -ffp-contract=fast
   -fopenmp; at -O2 gcc kept the accumulators in memory and measured a third of the peak). */
#include <omp.h>
#include <stdio.h>

#define VBYTES __BIGGEST_ALIGNMENT__
#define LANES (VBYTES / 4)
typedef float vf __attribute__((vector_size(VBYTES)));

#define CHAINS 12
#define ITERS 20000000L

int main(void) {
  double best = 0;
  for (int rep = 0; rep < 3; rep++) {
    double t0 = omp_get_wtime();
    float sink = 0;
#pragma omp parallel reduction(+ : sink)
    {
      vf acc[CHAINS];
      const vf a = (vf){0} + 1.0000001f, b = (vf){0} + 0.9999999f;
      for (int c = 0; c < CHAINS; c++) acc[c] = (vf){0} + (float)c;
      for (long i = 0; i < ITERS; i++)
        for (int c = 0; c < CHAINS; c++) acc[c] = acc[c] * a + b;  /* contracted to FMA */
      for (int c = 0; c < CHAINS; c++)
        for (int l = 0; l < LANES; l++) sink += acc[c][l];
    }
    double t = omp_get_wtime() - t0;
    double flops = 2.0 * LANES * CHAINS * ITERS * omp_get_max_threads();
    if (flops / t > best) best = flops / t;
    if (sink == 12345.f) printf(" ");
  }
  printf("%.1f\n", best / 1e9);
  return 0;
}
