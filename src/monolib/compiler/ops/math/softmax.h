/* softmax.h -- float32 Softmax / LogSoftmax over contiguous rows, the rows split over
 * the library's thread pool when threadpool.h precedes it (math_reduce.h must).
 *
 * Each row of n elements: m = max(x); Softmax y = exp(x - m) / sum(exp(x - m)),
 * LogSoftmax y = (x - m) - log(sum(exp(x - m))) (the ONNX operator specs, computed the
 * stable way). The exp loop (ml_expf's method for x <= 0 with one scaling, subnormal
 * results flushed to 0) also sums the row, so a row is read three times, not four; it
 * vectorizes in place too (the output may overwrite the input). 1 thread, Zen 4, one
 * C harness (before -> after): 40 rows of 18710 423 -> 236 us, 6144 rows of 64 366 -> 304.
 * Short rows (attention's 64-512) are dominated by each row's reductions and tails:
 * with the lanes reduced pairwise and the last partial block as a whole vector, rows in
 * L1 take 0.64 / 0.46 / 0.57 / 0.35 ns an element at 64 / 128 / 197 / 1000 (were 0.79 /
 * 0.67 / 0.65 / 0.39).
 */
#ifndef MONOLIB_SOFTMAX_H
#define MONOLIB_SOFTMAX_H
#include <stdint.h>
#include <math.h>
#include <string.h>

typedef struct {
    const float* x;
    float* y;
    int64_t rows, n;
    int64_t chunk; /* rows per task */
    int log;
} ml_softmax_args;

/* the ISA's vector (wider ones are split badly: 4.4x slower than scalar code on AVX2) */
#if defined(__AVX512F__)
#define ML_SM_VL 16
#elif defined(__AVX__)
#define ML_SM_VL 8
#else
#define ML_SM_VL 4
#endif
typedef float ml_sm_vf __attribute__((vector_size(ML_SM_VL * 4), aligned(4)));
typedef int32_t ml_sm_vi __attribute__((vector_size(ML_SM_VL * 4), aligned(4)));

/* max of x[0..n), -INFINITY for n == 0. NaNs are skipped (a plain compare-select that
   vectorizes; math_reduce.h's ml_rmax_f32 keeps them at ~3x the cost): a NaN in a row
   still makes the whole row NaN, through exp(NaN - m) in the sum. */
static inline float ml_sm_max_f32(const float* x, int64_t n) {
    /* in explicit vectors, up to four chains: gcc left the lane loop of the array form
     * unvectorized, and one chain waits on each compare-select (40 rows of 18710: 103
     * us, 78 with one vector chain, 42 with four); a row's last partial vector is the
     * one that ends at n, overlapping (a max does not mind). Shorter than a vector:
     * scalar. */
    if (n < ML_SM_VL) {
        float m = -INFINITY;
        for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
        return m;
    }
    ml_sm_vf acc[4];
    for (int c = 0; c < 4; ++c)
        for (int j = 0; j < ML_SM_VL; ++j) acc[c][j] = -INFINITY;
    int64_t i = 0;
    for (; i + 4 * ML_SM_VL <= n; i += 4 * ML_SM_VL)
        for (int c = 0; c < 4; ++c) {
            const ml_sm_vf v = *(const ml_sm_vf*)(x + i + c * ML_SM_VL);
            const ml_sm_vi gt = v > acc[c];
            acc[c] = (ml_sm_vf)(((ml_sm_vi)v & gt) | ((ml_sm_vi)acc[c] & ~gt));
        }
    for (; i < n; i += ML_SM_VL) {
        const ml_sm_vf v = *(const ml_sm_vf*)(x + (i + ML_SM_VL <= n ? i : n - ML_SM_VL));
        const ml_sm_vi gt = v > acc[0];
        acc[0] = (ml_sm_vf)(((ml_sm_vi)v & gt) | ((ml_sm_vi)acc[0] & ~gt));
    }
    /* the chains into one, then its lanes pairwise: 4 levels, not a chain of 64
     * dependent compares (rows of 64-197 floats: 9-30% faster; in-register shuffles
     * measured slower than this) */
    float t[ML_SM_VL];
    for (int j = 0; j < ML_SM_VL; ++j) {
        const float a = acc[1][j] > acc[0][j] ? acc[1][j] : acc[0][j];
        const float b = acc[3][j] > acc[2][j] ? acc[3][j] : acc[2][j];
        t[j] = b > a ? b : a;
    }
    for (int w = ML_SM_VL / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) t[j] = t[j + w] > t[j] ? t[j + w] : t[j];
    return t[0];
}

/* exp(x) for x <= 0 (an element minus its row's max): ml_expf's reduction and
 * polynomial with one power-of-two scaling (n in [-126, 0]), the same bits as ml_expf
 * down to -87.33; below, where exp is subnormal (< 1.2e-38), 0. NaN stays NaN. */
static inline float ml_sm_expneg(float x) {
    const float xc = x < -87.33f ? -87.33f : x;
    int32_t ni;
    const float p = ml_exp_poly(xc, &ni);
    const float e = p * ml_f32_from_bits((uint32_t)(ni + 127) << 23);
    return x < -87.33f ? 0.0f : e;
}

/* dst[j] = exp(src[j] - m); returns their sum (lane sums, then the lanes in order). A
 * row's last partial block is the block that ends at n, its lanes already done computed
 * and stored again (the same values) and left out of the sums, so it runs the same
 * vector code (a row of 197 spent a third of its time on its 5 scalar exps). */
typedef float ml_sm_v8 __attribute__((vector_size(32), aligned(4)));
typedef float ml_sm_v4 __attribute__((vector_size(16), aligned(4)));
#if ML_RED_LANES != 16
#error "ml_sm_hsum adds 16 lanes"
#endif
/* The 16 lanes as ML_SM_VL-float vectors: gcc splits a 16-float vector it has no
 * register for into pieces through the stack (AVX2, 12x128x128: 0.43 ms, ORT 0.17). */
#define ML_SM_NV (ML_RED_LANES / ML_SM_VL)

/* The lanes of v summed pairwise (lane j + lane j + w, w = 8, 4, 2, 1) in registers: the
 * same sums, in the same order, as halving an array of them, which gcc did through the
 * stack (a store and reloads per level). */
static inline float ml_sm_hsum(const ml_sm_vf v[ML_SM_NV]) {
    ml_sm_v8 a, b;
    memcpy(&a, v, sizeof a);
    memcpy(&b, (const char*)v + sizeof a, sizeof b);
    const ml_sm_v8 s8 = a + b;
    ml_sm_v4 c, d;
    memcpy(&c, &s8, sizeof c);
    memcpy(&d, (const char*)&s8 + sizeof c, sizeof d);
    const ml_sm_v4 s4 = c + d;
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

static inline float ml_sm_exp_f32(float* dst, const float* src, int64_t n, float m) {
    /* the lane sums and each block's exps in vector variables: as arrays gcc kept the
     * sums on the stack, a store and a reload every block (12x128x128: 111 -> 98 us);
     * a block's 16 exps in one loop gcc vectorizes (written per ML_SM_VL-float vector it
     * left them scalar) */
    ml_sm_vf sum[ML_SM_NV];
    for (int c = 0; c < ML_SM_NV; ++c) sum[c] = (ml_sm_vf){0};
    int64_t i = 0;
    for (; i + ML_RED_LANES <= n; i += ML_RED_LANES) {
        for (int j = 0; j < ML_RED_LANES; ++j) dst[i + j] = ml_sm_expneg(src[i + j] - m);
        for (int c = 0; c < ML_SM_NV; ++c) sum[c] += *(const ml_sm_vf*)(dst + i + c * ML_SM_VL);
    }
    if (i < n && n >= ML_RED_LANES) {
        /* lanes before i are done (and, in place, src there is already their exp):
         * computed again, stored and summed only from i on */
        const int64_t b = n - ML_RED_LANES;
        float e[ML_RED_LANES];
        for (int j = 0; j < ML_RED_LANES; ++j) e[j] = ml_sm_expneg(src[b + j] - m);
        for (int j = 0; j < ML_RED_LANES; ++j)
            if (b + j >= i) {
                dst[b + j] = e[j];
                sum[j / ML_SM_VL][j % ML_SM_VL] += e[j];
            }
    } else
        for (int j = 0; i + j < n; ++j) {
            dst[i + j] = ml_sm_expneg(src[i + j] - m);
            sum[j / ML_SM_VL][j % ML_SM_VL] += dst[i + j];
        }
    return ml_sm_hsum(sum);
}

static inline void ml_sm_scale_f32(float* y, int64_t n, float s) {
    for (int64_t j = 0; j < n; ++j) y[j] *= s;
}

/* y[j] = (x[j] - m) - ls */
static inline void ml_sm_shift_f32(float* restrict y, const float* restrict x, int64_t n,
                                   float m, float ls) {
    for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) - ls;
}

static inline void ml_sm_shift_inplace_f32(float* y, int64_t n, float m, float ls) {
    for (int64_t j = 0; j < n; ++j) y[j] = (y[j] - m) - ls;
}

/* One task: rows [t * chunk, (t + 1) * chunk). LogSoftmax needs n floats of scratch
   (the exp values; the output may overwrite the input). */
static void ml_softmax_task_f32(void* args, int64_t t, void* scratch) {
    const ml_softmax_args* a = (const ml_softmax_args*)args;
    const int64_t n = a->n;
    int64_t lo = t * a->chunk, hi = lo + a->chunk;
    if (hi > a->rows) hi = a->rows;
    for (int64_t r = lo; r < hi; ++r) {
        const float* x = a->x + r * n;
        float* y = a->y + r * n;
        const float m = ml_sm_max_f32(x, n);
        if (a->log) {
            const float ls = logf(ml_sm_exp_f32((float*)scratch, x, n, m));
            if (y == x) ml_sm_shift_inplace_f32(y, n, m, ls);
            else ml_sm_shift_f32(y, x, n, m, ls);
        } else {
            ml_sm_scale_f32(y, n, 1.0f / ml_sm_exp_f32(y, x, n, m));
        }
    }
}

/* The op: `rows` rows of `n` floats from x to y (y == x allowed; partial overlap is
   not). scratch0: n floats for the calling thread when log is set. */
static void ml_softmax_f32(ml_softmax_args* a, void* scratch0) {
    a->chunk = a->rows;
#ifdef MONOLIB_THREADPOOL_H
    /* some 16 flops per element (max, exp, sum, scale); rows share no set-up: the
     * memory-bound threshold */
    int64_t tasks = ml_par_tasks_mem(16.0 * (double)a->rows * (double)a->n, a->rows);
    if (tasks > 1) {
        a->chunk = (a->rows + tasks - 1) / tasks;
        size_t scratch = a->log ? (size_t)a->n * sizeof(float) : 0;
        ml_parallel_for((a->rows + a->chunk - 1) / a->chunk, ml_softmax_task_f32, a, scratch0,
                        scratch);
        return;
    }
#endif
    ml_softmax_task_f32(a, 0, scratch0);
}
#endif /* MONOLIB_SOFTMAX_H */
