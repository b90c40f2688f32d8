/* dql.h -- DynamicQuantizeLinear (float32 -> uint8 with a scale and zero point from the
 * data) in two vectorised passes, each split over the thread pool when large
 * (monolib kernel library).
 *
 * Pass 1: min and max of x with NaN skipped (as fminf/fmaxf), both including 0.
 * Pass 2: y = saturate(round_half_even(x / scale) + zp). The division is kept (not a
 * multiply by 1/scale) so every y equals ONNX Runtime's and the scalar reference's.
 * Clamping x / scale to [-zp, 255 - zp] before rounding equals saturating after (the
 * bounds are integers); it maps NaN to the low bound (y = 0, as the reference), and keeps
 * |f| <= 255, where adding and subtracting 1.5 * 2^23 rounds half to even in the default
 * rounding mode. Written with GCC vector extensions in the ISA's vector width
 * (ML_DQ_VL); a vectorised scalar loop the compiler would not give here (a float
 * min/max reduction without -ffast-math). */
#ifndef MONOLIB_DQL_H
#define MONOLIB_DQL_H
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Vectors of the ISA's width (16 floats with AVX-512, 8 with AVX, else 4): gcc lowers
 * a 16-float compare-select it has no register for to scalar compares and branches
 * (AVX2: no vector compare left in ml_dq_minmax). */
#if defined(__AVX512F__)
#define ML_DQ_VL 16
#elif defined(__AVX__)
#define ML_DQ_VL 8
#else
#define ML_DQ_VL 4
#endif
typedef float ml_dqf __attribute__((vector_size(ML_DQ_VL * 4)));
typedef int32_t ml_dqi __attribute__((vector_size(ML_DQ_VL * 4)));
typedef uint8_t ml_dqb __attribute__((vector_size(ML_DQ_VL)));
#define ML_DQ_BLOCK 4096 /* floats per task block (16 KiB) */
#define ML_DQ_MAXT 256   /* most blocks whose partial min/max a split keeps */

/* a < b ? a : b per lane (b where a is NaN); vminps exactly */
static inline __attribute__((always_inline)) ml_dqf ml_dq_sel(ml_dqi m, ml_dqf a, ml_dqf b) {
    return (ml_dqf)((m & (ml_dqi)a) | (~m & (ml_dqi)b));
}

/* min/max over x[0..n) with NaN skipped, starting from *mn, *mx */
static void ml_dq_minmax(const float* restrict x, int64_t n, float* mn, float* mx) {
    /* 16 lanes (16 / ML_DQ_VL vectors), lane j taking x[j], x[j + 16], ...; then the
     * lanes in order j = 0..15 whatever the width */
    ml_dqf lo[16 / ML_DQ_VL], hi[16 / ML_DQ_VL];
    for (int c = 0; c < 16 / ML_DQ_VL; ++c) {
        lo[c] = (ml_dqf){0} + *mn;
        hi[c] = (ml_dqf){0} + *mx;
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int c = 0; c < 16 / ML_DQ_VL; ++c) {
            ml_dqf v;
            memcpy(&v, x + i + c * ML_DQ_VL, sizeof v);
            lo[c] = ml_dq_sel(v < lo[c], v, lo[c]);
            hi[c] = ml_dq_sel(v > hi[c], v, hi[c]);
        }
    float a = *mn, b = *mx;
    for (int j = 0; j < 16; ++j) {
        const float l = lo[j / ML_DQ_VL][j % ML_DQ_VL], h = hi[j / ML_DQ_VL][j % ML_DQ_VL];
        a = l < a ? l : a;
        b = h > b ? h : b;
    }
    for (; i < n; ++i) {
        a = x[i] < a ? x[i] : a;
        b = x[i] > b ? x[i] : b;
    }
    *mn = a;
    *mx = b;
}

/* y[0..n) = saturate(round(x / s) + z), z an integer in [0, 255] */
static void ml_dq_quant(const float* restrict x, int64_t n, float s, float z,
                        uint8_t* restrict y) {
    const float flo = -z, fhi = 255.0f - z;
    ml_dqf vs = {0}, vlo = {0}, vhi = {0}, magic = {0};
    vs += s;
    vlo += flo;
    vhi += fhi;
    magic += 12582912.0f;
    ml_dqi vz = {0};
    vz += (int32_t)z;
    int64_t i = 0;
#if defined(__AVX2__) && ML_DQ_VL == 8 && defined(__GNUC__)
    /* 32 floats at a time, their int32 results narrowed by two saturating packs (exact:
     * every value is in [0, 255] already) and one lane permute: gcc's narrowing of one
     * int32 vector to bytes was a vpextrd and shifts per byte, half the op's time */
    typedef int16_t v16s __attribute__((vector_size(32)));
    const ml_dqi order = {0, 4, 1, 5, 2, 6, 3, 7};
    for (; i + 4 * ML_DQ_VL <= n; i += 4 * ML_DQ_VL) {
        ml_dqi r[4];
        for (int u = 0; u < 4; ++u) {
            ml_dqf v;
            memcpy(&v, x + i + u * ML_DQ_VL, sizeof v);
            v = v / vs;
            v = ml_dq_sel(v > vlo, v, vlo);
            v = ml_dq_sel(v < vhi, v, vhi);
            v = (v + magic) - magic;
            r[u] = __builtin_convertvector(v, ml_dqi) + vz;
        }
        v16s p0 = (v16s)__builtin_ia32_packssdw256(r[0], r[1]);
        v16s p1 = (v16s)__builtin_ia32_packssdw256(r[2], r[3]);
        ml_dqi q = (ml_dqi)__builtin_ia32_packuswb256(p0, p1);
        q = (ml_dqi)__builtin_ia32_permvarsi256(q, order);
        memcpy(y + i, &q, sizeof q);
    }
#endif
    for (; i + ML_DQ_VL <= n; i += ML_DQ_VL) {
        ml_dqf v;
        memcpy(&v, x + i, sizeof v);
        v = v / vs;
        v = ml_dq_sel(v > vlo, v, vlo); /* NaN -> the low bound */
        v = ml_dq_sel(v < vhi, v, vhi);
        v = (v + magic) - magic;
        ml_dqb q = __builtin_convertvector(__builtin_convertvector(v, ml_dqi) + vz, ml_dqb);
        memcpy(y + i, &q, sizeof q);
    }
    for (; i < n; ++i) {
        float f = x[i] / s;
        f = f > flo ? f : flo;
        f = f < fhi ? f : fhi;
        f = (f + 12582912.0f) - 12582912.0f;
        y[i] = (uint8_t)((int32_t)f + (int32_t)z);
    }
}

typedef struct {
    const float* x;
    uint8_t* y;
    int64_t n, block;
    float s, z;
    float mn[ML_DQ_MAXT], mx[ML_DQ_MAXT];
} ml_dq_job;

#ifdef MONOLIB_THREADPOOL_H
static void ml_dq_minmax_task(void* ctx, int64_t t, void* scratch) {
    ml_dq_job* j = (ml_dq_job*)ctx;
    int64_t b = t * j->block, e = b + j->block < j->n ? b + j->block : j->n;
    (void)scratch;
    j->mn[t] = j->mx[t] = 0.0f;
    ml_dq_minmax(j->x + b, e - b, &j->mn[t], &j->mx[t]);
}

static void ml_dq_quant_task(void* ctx, int64_t t, void* scratch) {
    ml_dq_job* j = (ml_dq_job*)ctx;
    int64_t b = t * j->block, e = b + j->block < j->n ? b + j->block : j->n;
    (void)scratch;
    ml_dq_quant(j->x + b, e - b, j->s, j->z, j->y + b);
}
#endif

/* DynamicQuantizeLinear of n floats: y, *scale, *zero_point as the ONNX spec (scale
 * 1 / 255 when max == min, as ONNX's reference evaluator; every y is then 0). */
__attribute__((unused)) static void ml_dynamic_quantize(const float* x, int64_t n, uint8_t* y,
                                                        float* scale, uint8_t* zero_point) {
    ml_dq_job j;
    j.x = x;
    j.y = y;
    j.n = n;
    int64_t blocks = (n + ML_DQ_BLOCK - 1) / ML_DQ_BLOCK;
    /* a float moved counts 4 (threadpool.h's unit); the quantize pass writes a byte too */
#ifdef MONOLIB_THREADPOOL_H
    int64_t tasks = ml_par_tasks_mem(4.0 * (double)n, blocks > ML_DQ_MAXT ? ML_DQ_MAXT : blocks);
#else
    int64_t tasks = 1;
    (void)blocks;
#endif
    j.block = tasks > 1 ? ((n + tasks - 1) / tasks + 15) / 16 * 16 : n;
    if (tasks > 1) tasks = (n + j.block - 1) / j.block;
    float mn = 0.0f, mx = 0.0f;
#ifdef MONOLIB_THREADPOOL_H
    if (tasks > 1) {
        ml_parallel_for(tasks, ml_dq_minmax_task, &j, 0, 0);
        for (int64_t t = 0; t < tasks; ++t) {
            mn = j.mn[t] < mn ? j.mn[t] : mn;
            mx = j.mx[t] > mx ? j.mx[t] : mx;
        }
    } else
#endif
        ml_dq_minmax(x, n, &mn, &mx);
    float s = (mx == mn ? 1.0f : mx - mn) / 255.0f;
    float z = 0.0f - mn / s;
    z = nearbyintf(z < 0.0f ? 0.0f : (z > 255.0f ? 255.0f : z));
    *scale = s;
    *zero_point = (uint8_t)z;
    j.s = s;
    j.z = z;
#ifdef MONOLIB_THREADPOOL_H
    if (tasks > 1) {
        ml_parallel_for(tasks, ml_dq_quant_task, &j, 0, 0);
        return;
    }
#endif
    ml_dq_quant(x, n, s, z, y);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_DQL_H */
