/* math_reduce.h -- row reductions over contiguous float32 data for monolib's
 * generated code (ReduceSum/Mean/Max/Min/L2, Softmax, LayerNormalization).
 *
 * Sums use 16 independent partial accumulators so the compiler vectorizes them
 * without -ffast-math (C forbids reassociating one float accumulator); the result
 * differs from a sequential sum by normal float rounding only.
 * All functions are static inline: this header is pasted into one generated file.
 */
#ifndef MONOLIB_MATH_REDUCE_H
#define MONOLIB_MATH_REDUCE_H
#include <stdint.h>
#include <math.h>

#define ML_RED_LANES 16

/* sum of x[0..n) */
static inline float ml_rsum_f32(const float* x, int64_t n) {
    float acc[ML_RED_LANES] = {0};
    int64_t i = 0;
    for (; i + ML_RED_LANES <= n; i += ML_RED_LANES)
        for (int j = 0; j < ML_RED_LANES; ++j) acc[j] += x[i + j];
    float s = 0.0f;
    for (; i < n; ++i) s += x[i];
    for (int j = 0; j < ML_RED_LANES; ++j) s += acc[j];
    return s;
}

/* sum of (x[i] - c)^2 over [0..n) */
static inline float ml_rsumsq_f32(const float* x, int64_t n, float c) {
    float acc[ML_RED_LANES] = {0};
    int64_t i = 0;
    for (; i + ML_RED_LANES <= n; i += ML_RED_LANES)
        for (int j = 0; j < ML_RED_LANES; ++j) {
            float d = x[i + j] - c;
            acc[j] += d * d;
        }
    float s = 0.0f;
    for (; i < n; ++i) { float d = x[i] - c; s += d * d; }
    for (int j = 0; j < ML_RED_LANES; ++j) s += acc[j];
    return s;
}

/* max of x[0..n), -INFINITY for n == 0 */
/* (a NaN anywhere gives NaN: `x != x` keeps it once met) */
static inline float ml_rmax_f32(const float* x, int64_t n) {
    float acc[ML_RED_LANES];
    for (int j = 0; j < ML_RED_LANES; ++j) acc[j] = -INFINITY;
    int64_t i = 0;
    for (; i + ML_RED_LANES <= n; i += ML_RED_LANES)
        for (int j = 0; j < ML_RED_LANES; ++j) acc[j] = (x[i + j] > acc[j] || x[i + j] != x[i + j]) ? x[i + j] : acc[j];
    float m = -INFINITY;
    for (; i < n; ++i) m = (x[i] > m || x[i] != x[i]) ? x[i] : m;
    for (int j = 0; j < ML_RED_LANES; ++j) m = (acc[j] > m || acc[j] != acc[j]) ? acc[j] : m;
    return m;
}

/* min of x[0..n), INFINITY for n == 0; a NaN anywhere gives NaN (as NumPy, ORT) */
static inline float ml_rmin_f32(const float* x, int64_t n) {
    float acc[ML_RED_LANES];
    for (int j = 0; j < ML_RED_LANES; ++j) acc[j] = INFINITY;
    int64_t i = 0;
    for (; i + ML_RED_LANES <= n; i += ML_RED_LANES)
        for (int j = 0; j < ML_RED_LANES; ++j) acc[j] = (x[i + j] < acc[j] || x[i + j] != x[i + j]) ? x[i + j] : acc[j];
    float m = INFINITY;
    for (; i < n; ++i) m = (x[i] < m || x[i] != x[i]) ? x[i] : m;
    for (int j = 0; j < ML_RED_LANES; ++j) m = (acc[j] < m || acc[j] != acc[j]) ? acc[j] : m;
    return m;
}

#endif
