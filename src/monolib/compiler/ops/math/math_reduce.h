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
#include <string.h>

#define ML_RED_LANES 16 /* ml_rext_f32 halves exactly 16 */

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

/* Max (MAX 1) or min (0) of x[0..n), -INFINITY / INFINITY for n == 0; a NaN anywhere
 * gives NaN (as NumPy, ORT). Branchless on vectors: a compare and a blend per vector,
 * NaNs tracked apart (an OR of `v != v`), so rows of random data run at one vector a
 * cycle; the select-or-NaN form this replaces compiled to a compare and two branches
 * per float (3 ns a float on random data, 5x slower). Lane j of the ML_RED_LANES (16)
 * holds the extremum of x[j], x[j + 16], ...; the lanes are then halved 16 -> 8 -> 4 in
 * registers and the 4 taken in order, the same for any vector width: in vectors of the
 * ISA's own width (ML_RED_VL), since gcc splits a 16-lane compare it has no register
 * for into scalar compares and branches (AVX2, ReduceMax over rows of 64: 0.51 ms for
 * 64x64 rows, ORT 0.07). */
#if defined(__AVX512F__)
#define ML_RED_VL 16
#elif defined(__AVX__)
#define ML_RED_VL 8
#else
#define ML_RED_VL 4
#endif
#define ML_RED_NV (ML_RED_LANES / ML_RED_VL)
typedef float ml_red_vf __attribute__((vector_size(ML_RED_VL * 4)));
typedef float ml_red_vfu __attribute__((vector_size(ML_RED_VL * 4), aligned(4)));
typedef int32_t ml_red_vi __attribute__((vector_size(ML_RED_VL * 4)));

static inline float ml_rext_f32(const float* x, int64_t n, const int MAX) {
    const float init = MAX ? -INFINITY : INFINITY;
    ml_red_vf acc[ML_RED_NV];
    ml_red_vi nan[ML_RED_NV];
    for (int c = 0; c < ML_RED_NV; ++c) {
        acc[c] = (ml_red_vf){0} + init;
        nan[c] = (ml_red_vi){0};
    }
    int64_t i = 0;
    for (; i + ML_RED_LANES <= n; i += ML_RED_LANES)
        for (int c = 0; c < ML_RED_NV; ++c) {
            ml_red_vf v = *(const ml_red_vfu*)(x + i + c * ML_RED_VL);
            ml_red_vi take = MAX ? v > acc[c] : v < acc[c];
            acc[c] = (ml_red_vf)(((ml_red_vi)v & take) | ((ml_red_vi)acc[c] & ~take));
            nan[c] |= v != v;
        }
    /* the lanes halved in registers (16 -> 8 -> 4, then 4 scalars): a lane at a time
     * through the stack was most of a row of 64 (ReduceMax 64x64x64: 45 -> 37 us) */
    typedef float vf8 __attribute__((vector_size(32)));
    typedef int32_t vi8 __attribute__((vector_size(32)));
    typedef float vf4 __attribute__((vector_size(16)));
    typedef int32_t vi4 __attribute__((vector_size(16)));
    vf8 a8, b8;
    vi8 n8, o8;
    memcpy(&a8, acc, 32), memcpy(&b8, (const char*)acc + 32, 32);
    memcpy(&n8, nan, 32), memcpy(&o8, (const char*)nan + 32, 32);
    vi8 t8 = MAX ? b8 > a8 : b8 < a8;
    a8 = (vf8)(((vi8)b8 & t8) | ((vi8)a8 & ~t8));
    n8 |= o8;
    vf4 a4, b4;
    vi4 n4, o4;
    memcpy(&a4, &a8, 16), memcpy(&b4, (const char*)&a8 + 16, 16);
    memcpy(&n4, &n8, 16), memcpy(&o4, (const char*)&n8 + 16, 16);
    vi4 t4 = MAX ? b4 > a4 : b4 < a4;
    a4 = (vf4)(((vi4)b4 & t4) | ((vi4)a4 & ~t4));
    n4 |= o4;
    float m = init;
    int32_t any = n4[0] | n4[1] | n4[2] | n4[3];
    for (; i < n; ++i) {
        m = (MAX ? x[i] > m : x[i] < m) ? x[i] : m;
        any |= x[i] != x[i];
    }
    for (int j = 0; j < 4; ++j) m = (MAX ? a4[j] > m : a4[j] < m) ? a4[j] : m;
    return any ? NAN : m;
}

/* max of x[0..n), -INFINITY for n == 0; NaN if any */
static inline float ml_rmax_f32(const float* x, int64_t n) { return ml_rext_f32(x, n, 1); }

/* min of x[0..n), INFINITY for n == 0; NaN if any */
static inline float ml_rmin_f32(const float* x, int64_t n) { return ml_rext_f32(x, n, 0); }

#endif
