/* softmax.h -- float32 Softmax / LogSoftmax over contiguous rows, the rows split over
 * the library's thread pool when threadpool.h precedes it (math_reduce.h must).
 *
 * Each row of n elements: m = max(x); Softmax y = exp(x - m) / sum(exp(x - m)),
 * LogSoftmax y = (x - m) - log(sum(exp(x - m))) (the ONNX operator specs, computed the
 * stable way). The exp loop calls ml_expf (vmath.h) on a contiguous row with no aliasing
 * question left to the compiler (restrict, or one pointer when the output overwrites the
 * input), so gcc vectorizes it.
 */
#ifndef MONOLIB_SOFTMAX_H
#define MONOLIB_SOFTMAX_H
#include <stdint.h>
#include <math.h>

typedef struct {
    const float* x;
    float* y;
    int64_t rows, n;
    int64_t chunk; /* rows per task */
    int log;
} ml_softmax_args;

/* max of x[0..n), -INFINITY for n == 0. NaNs are skipped (a plain compare-select that
   vectorizes; math_reduce.h's ml_rmax_f32 keeps them at ~3x the cost): a NaN in a row
   still makes the whole row NaN, through exp(NaN - m) in the sum. */
static inline float ml_sm_max_f32(const float* x, int64_t n) {
    float acc[ML_RED_LANES];
    for (int j = 0; j < ML_RED_LANES; ++j) acc[j] = -INFINITY;
    int64_t i = 0;
    for (; i + ML_RED_LANES <= n; i += ML_RED_LANES)
        for (int j = 0; j < ML_RED_LANES; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    float m = -INFINITY;
    for (; i < n; ++i) m = x[i] > m ? x[i] : m;
    for (int j = 0; j < ML_RED_LANES; ++j) m = acc[j] > m ? acc[j] : m;
    return m;
}

/* dst[j] = exp(src[j] - m) */
static inline void ml_sm_exp_f32(float* restrict dst, const float* restrict src, int64_t n,
                                 float m) {
    for (int64_t j = 0; j < n; ++j) dst[j] = ml_expf(src[j] - m);
}

static inline void ml_sm_exp_inplace_f32(float* y, int64_t n, float m) {
    for (int64_t j = 0; j < n; ++j) y[j] = ml_expf(y[j] - m);
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
            float* e = (float*)scratch;
            ml_sm_exp_f32(e, x, n, m);
            const float ls = logf(ml_rsum_f32(e, n));
            if (y == x) ml_sm_shift_inplace_f32(y, n, m, ls);
            else ml_sm_shift_f32(y, x, n, m, ls);
        } else {
            if (y == x) ml_sm_exp_inplace_f32(y, n, m);
            else ml_sm_exp_f32(y, x, n, m);
            ml_sm_scale_f32(y, n, 1.0f / ml_rsum_f32(y, n));
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
