/* pool.h -- reductions for the global pools (monolib kernel library).
 *
 * Eight independent partial results let the compiler vectorise the loop without
 * -ffast-math (a single running sum is a serial dependency it must keep in order).
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

/* Sum of x[0..n-1]. */
static inline float ml_sum_f32(const float* restrict x, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += x[i + j];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
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

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_POOL_H */
