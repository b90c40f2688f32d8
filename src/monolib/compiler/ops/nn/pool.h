/* pool.h -- reductions for the global pools (monolib kernel library).
 *
 * Independent partial results let the compiler vectorise the loop without -ffast-math
 * (a single running sum is a serial dependency it must keep in order). The sum keeps
 * four vectors of eight: with one, each add waits for the previous one (3-4 cycles of
 * latency), which held a cache-resident sum to ~25 GB/s.
 */
#ifndef MONOLIB_POOL_H
#define MONOLIB_POOL_H
/* gcc warns about loops it proves dead after inlining constant shapes (a known false
 * positive); keep the generated build quiet. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
#endif
#include <math.h>
#include <stdint.h>

/* Eight floats, any alignment (generic vector extension: SSE pairs without AVX). */
typedef float ml_pool_v8 __attribute__((vector_size(32), aligned(4)));

/* Sum of x[0..n-1]. */
static inline float ml_sum_f32(const float* restrict x, int64_t n) {
    ml_pool_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 += *(const ml_pool_v8*)(x + i);
        a1 += *(const ml_pool_v8*)(x + i + 8);
        a2 += *(const ml_pool_v8*)(x + i + 16);
        a3 += *(const ml_pool_v8*)(x + i + 24);
    }
    for (; i + 8 <= n; i += 8) a0 += *(const ml_pool_v8*)(x + i);
    ml_pool_v8 a = (a0 + a1) + (a2 + a3);
    float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (; i < n; ++i) s += x[i];
    return s;
}

/* Max of x[0..n-1] (n >= 1; -INFINITY for n == 0). */
static inline float ml_max_f32(const float* restrict x, int64_t n) {
    float acc[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                    -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    float m = -INFINITY;
    for (int j = 0; j < 8; ++j) m = acc[j] > m ? acc[j] : m;
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

/* Global pool of `rows` planes of n floats each: y[r] = sum(x_r) / div (is_max == 0) or
 * max(x_r), for rows r0..r1-1. */
static inline void ml_global_pool_rows(int64_t r0, int64_t r1, int64_t n, const float* x,
                                       float* y, int is_max, float div) {
    for (int64_t r = r0; r < r1; ++r)
        y[r] = is_max ? ml_max_f32(x + r * n, n) : ml_sum_f32(x + r * n, n) / div;
}

typedef struct {
    int64_t rows, n, chunk;
    const float* x;
    float* y;
    int is_max;
    float div;
} ml_gpool_job;

static void ml_gpool_task(void* ctx, int64_t t, void* scratch) {
    const ml_gpool_job* j = (const ml_gpool_job*)ctx;
    (void)scratch;
    int64_t r0 = t * j->chunk, r1 = r0 + j->chunk < j->rows ? r0 + j->chunk : j->rows;
    ml_global_pool_rows(r0, r1, j->n, j->x, j->y, j->is_max, j->div);
}

/* ml_global_pool_rows over all rows, split over rows (channels) on the thread pool when
 * threadpool.h is included and the input is large (memory-bound: a float read counts as
 * a few multiply-adds of work). */
__attribute__((unused)) static void ml_global_pool(int64_t rows, int64_t n, const float* x,
                                                   float* y, int is_max, float div) {
    ml_gpool_job j = {rows, n, rows, x, y, is_max, div};
#ifdef MONOLIB_THREADPOOL_H
    int64_t tasks = ml_par_tasks(4.0 * rows * n, rows);
    if (tasks > 1) {
        j.chunk = (rows + tasks - 1) / tasks;
        ml_parallel_for((rows + j.chunk - 1) / j.chunk, ml_gpool_task, &j, 0, 0);
        return;
    }
#endif
    ml_gpool_task(&j, 0, 0);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_POOL_H */
