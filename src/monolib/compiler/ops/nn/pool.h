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
#include <string.h>
#if defined(__AVX__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(_IMMINTRIN_H_INCLUDED)
/* The AVX/AVX2 intrinsics used below, defined as GCC's <immintrin.h> defines them (same
 * builtins, same code): with -march=native that header is ~0.2 s of gcc in every
 * translation unit that holds pool.h (most of a unit's parse time). Its guard is then
 * set, so a later #include <immintrin.h> is empty: a header that needs other
 * intrinsics includes it before pool.h (then this block is skipped) or adds them here. */
#define _IMMINTRIN_H_INCLUDED
typedef float __v8sf __attribute__((__vector_size__(32)));
typedef int __v8si __attribute__((__vector_size__(32)));
typedef double __v4df __attribute__((__vector_size__(32)));
typedef float __m256 __attribute__((__vector_size__(32), __may_alias__));
typedef long long __m256i __attribute__((__vector_size__(32), __may_alias__));
typedef double __m256d __attribute__((__vector_size__(32), __may_alias__));
typedef float __m256_u __attribute__((__vector_size__(32), __may_alias__, __aligned__(1)));
typedef long long __m256i_u __attribute__((__vector_size__(32), __may_alias__, __aligned__(1)));
#define ML_AVX_FN static inline __attribute__((__always_inline__, __artificial__))
ML_AVX_FN __m256 _mm256_loadu_ps(float const* p) { return *(__m256_u*)p; }
ML_AVX_FN void _mm256_storeu_ps(float* p, __m256 a) { *(__m256_u*)p = a; }
ML_AVX_FN __m256i _mm256_loadu_si256(__m256i_u const* p) { return *p; }
ML_AVX_FN __m256 _mm256_max_ps(__m256 a, __m256 b) {
    return (__m256)__builtin_ia32_maxps256((__v8sf)a, (__v8sf)b);
}
ML_AVX_FN __m256 _mm256_add_ps(__m256 a, __m256 b) { return (__m256)((__v8sf)a + (__v8sf)b); }
ML_AVX_FN __m256 _mm256_mul_ps(__m256 a, __m256 b) { return (__m256)((__v8sf)a * (__v8sf)b); }
ML_AVX_FN __m256 _mm256_div_ps(__m256 a, __m256 b) { return (__m256)((__v8sf)a / (__v8sf)b); }
ML_AVX_FN __m256 _mm256_or_ps(__m256 a, __m256 b) {
    return (__m256)__builtin_ia32_orps256((__v8sf)a, (__v8sf)b);
}
ML_AVX_FN int _mm256_movemask_ps(__m256 a) { return __builtin_ia32_movmskps256((__v8sf)a); }
ML_AVX_FN __m256 _mm256_blendv_ps(__m256 x, __m256 y, __m256 m) {
    return (__m256)__builtin_ia32_blendvps256((__v8sf)x, (__v8sf)y, (__v8sf)m);
}
ML_AVX_FN void _mm256_maskstore_ps(float* p, __m256i m, __m256 a) {
    __builtin_ia32_maskstoreps256((__v8sf*)p, (__v8si)m, (__v8sf)a);
}
ML_AVX_FN __m256 _mm256_set1_ps(float a) { return __extension__(__m256){a, a, a, a, a, a, a, a}; }
ML_AVX_FN __m256 _mm256_setzero_ps(void) {
    return __extension__(__m256){0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
}
ML_AVX_FN __m256d _mm256_castps_pd(__m256 a) { return (__m256d)a; }
ML_AVX_FN __m256 _mm256_castpd_ps(__m256d a) { return (__m256)a; }
ML_AVX_FN __m256 _mm256_castsi256_ps(__m256i a) { return (__m256)a; }
#define _CMP_UNORD_Q 0x03
#define _mm256_shuffle_ps(A, B, N) \
    ((__m256)__builtin_ia32_shufps256((__v8sf)(__m256)(A), (__v8sf)(__m256)(B), (int)(N)))
#define _mm256_cmp_ps(X, Y, P) \
    ((__m256)__builtin_ia32_cmpps256((__v8sf)(__m256)(X), (__v8sf)(__m256)(Y), (int)(P)))
#define _mm256_permute4x64_pd(X, M) \
    ((__m256d)__builtin_ia32_permdf256((__v4df)(__m256d)(X), (int)(M)))
#elif defined(__AVX__)
#include <immintrin.h>
#elif defined(__wasm_simd128__)
#include <wasm_simd128.h>
#endif

#define ML_POOL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define ML_POOL_MAX(a, b) ((a) > (b) ? (a) : (b))

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
    int64_t tasks = ml_par_tasks_mem(4.0 * rows * n, rows);
    if (tasks > 1) {
        j.chunk = (rows + tasks - 1) / tasks;
        ml_parallel_for((rows + j.chunk - 1) / j.chunk, ml_gpool_task, &j, 0, 0);
        return;
    }
#endif
    ml_gpool_task(&j, 0, 0);
}

/* Windowed 2-D max / average pool of float planes (MaxPool without Indices, AveragePool),
 * dilation 1. Per output row, the window's rows inside the input are found once; the
 * columns split into a left border, an interior where every tap is inside the input
 * (no bounds checks: the loop over output columns vectorises, strided loads for stride
 * 2) and a right border. Max: a NaN tap wins (NumPy's max). Average: the divisor is
 * the count of taps inside the input, or (count_include_pad) of window positions
 * inside the padded input [-PT, H + PB) x [-PL, W + PR). */
typedef struct {
    int64_t planes, H, W, OH, OW, KH, KW, SH, SW, PT, PL, PB, PR;
    int is_max, include_pad;
    const float* x;
    float* y;
    int64_t channels;                         /* C: plane p is (n, c) = (p / C, p % C) */
    void (*epi)(void*, int64_t, int64_t, int64_t, int64_t, int64_t); /* may be 0 */
    int64_t chunk;                            /* planes per task */
} ml_pool2d_args;

static inline float ml_pool_max1(float acc, float v) { return (v > acc || v != v) ? v : acc; }

/* One output of one plane at (oh's rows r0..r1, column ow): the taps inside the input.
 * `nan`: the plane holds a NaN (else a branch-free maxss: random data mispredicts the
 * NaN-aware compare's branch half the time). */
static inline float ml_pool2d_one(const ml_pool2d_args* a, const float* x, int64_t r0,
                                  int64_t r1, int64_t ow, int nan) {
    int64_t c0 = ow * a->SW - a->PL, k0 = c0 < 0 ? -c0 : 0;
    int64_t k1 = a->W - c0 < a->KW ? a->W - c0 : a->KW;
    if (a->is_max) {
        float acc = -INFINITY;
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t k = k0; k < k1; ++k) {
                float v = x[r * a->W + c0 + k];
                acc = nan ? ml_pool_max1(acc, v) : (v > acc ? v : acc);
            }
        return acc;
    }
    float acc = 0.0f;
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t k = k0; k < k1; ++k) acc += x[r * a->W + c0 + k];
    return acc;
}

#if defined(__AVX__)
/* Eight taps at stride s (1 or 2) from p; stride 2 reads p[0..14] only. */
static inline __m256 ml_pool_load8(const float* p, int64_t s) {
    if (s == 1) return _mm256_loadu_ps(p);
    __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 7);
    /* [a0 a2 b1 b3 | a4 a6 b5 b7] -> [a0 a2 a4 a6 b1 b3 b5 b7] */
    __m256 t = _mm256_shuffle_ps(a, b, 0xD8);
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), 0xD8));
}

/* ml_pool_load8 without the lane permute at stride 2 (lanes in the order 0 1 4 5 2 3 6 7
 * for every tap alike): a window reduces in that order, ml_pool_fix8 puts it right once. */
static inline __m256 ml_pool_raw8(const float* p, int64_t s) {
    if (s == 1) return _mm256_loadu_ps(p);
    return _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 7), 0xD8);
}
static inline __m256 ml_pool_fix8(__m256 v, int64_t s) {
    if (s == 1) return v;
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xD8));
}
#endif

/* Interior outputs [lo, hi) of a row (every tap inside the input, s == 1 or 2 with AVX):
 * 32 (then 8) outputs at a time in registers over all their taps, four independent
 * chains hiding maxps/addps latency; the last eight overlap the ones before (the same
 * values written twice). Max is a plain maxps here: a plane holding a NaN takes
 * ml_pool2d_one instead. */
#if defined(__AVX__)
#define ML_POOL_BLOCKS(OP, INIT)                                                              \
    for (; ow + 32 <= hi; ow += 32) {                                                         \
        __m256 c0 = INIT, c1 = INIT, c2 = INIT, c3 = INIT;                                    \
        for (int64_t r = r0; r < r1; ++r)                                                     \
            for (int64_t k = 0; k < KW; ++k) {                                                \
                const float* p = xi + r * W + ow * s + k;                                     \
                c0 = OP(ml_pool_raw8(p, s), c0);                                              \
                c1 = OP(ml_pool_raw8(p + 8 * s, s), c1);                                      \
                c2 = OP(ml_pool_raw8(p + 16 * s, s), c2);                                     \
                c3 = OP(ml_pool_raw8(p + 24 * s, s), c3);                                     \
            }                                                                                 \
        _mm256_storeu_ps(y + ow, ml_pool_fix8(c0, s));                                        \
        _mm256_storeu_ps(y + ow + 8, ml_pool_fix8(c1, s));                                    \
        _mm256_storeu_ps(y + ow + 16, ml_pool_fix8(c2, s));                                   \
        _mm256_storeu_ps(y + ow + 24, ml_pool_fix8(c3, s));                                   \
    }                                                                                         \
    while (ow < hi) {                                                                         \
        if (ow + 8 > hi) ow = hi - 8;                                                         \
        __m256 c0 = INIT;                                                                     \
        for (int64_t r = r0; r < r1; ++r)                                                     \
            for (int64_t k = 0; k < KW; ++k) c0 = OP(ml_pool_raw8(xi + r * W + ow * s + k, s), c0); \
        _mm256_storeu_ps(y + ow, ml_pool_fix8(c0, s));                                        \
        ow += 8;                                                                              \
    }
#endif

static inline void ml_pool2d_interior(const ml_pool2d_args* a, const float* x, float* y,
                                      int64_t r0, int64_t r1, int64_t lo, int64_t hi, int64_t s,
                                      int nan) {
    const int64_t W = a->W, KW = a->KW;
    int64_t ow = lo;
#if defined(__AVX__)
    const float* xi = x - a->PL;
    if (s == 2 && KW == 2 && hi - lo >= 8) {
        /* 2-wide windows at stride 2: two loads give 8 outputs' even and odd taps by
         * one shuffle each (not a shuffle and a permute per tap), the lane order fixed
         * once at the end; taps summed in the generic order (same bits) */
        const int mx = a->is_max;
        for (; ow < hi; ow += 8) {
            if (ow + 8 > hi) ow = hi - 8;
            __m256 acc = _mm256_set1_ps(mx ? -INFINITY : 0.0f);
            for (int64_t r = r0; r < r1; ++r) {
                const float* p = xi + r * W + ow * 2;
                __m256 u = _mm256_loadu_ps(p), v = _mm256_loadu_ps(p + 8);
                __m256 e = _mm256_shuffle_ps(u, v, 0x88), o = _mm256_shuffle_ps(u, v, 0xDD);
                acc = mx ? _mm256_max_ps(o, _mm256_max_ps(e, acc))
                         : _mm256_add_ps(_mm256_add_ps(acc, e), o);
            }
            _mm256_storeu_ps(y + ow, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(acc), 0xD8)));
        }
        return;
    }
    if ((s == 1 || s == 2) && hi - lo >= 8) {
        if (a->is_max) {
            ML_POOL_BLOCKS(_mm256_max_ps, _mm256_set1_ps(-INFINITY))
        } else {
            ML_POOL_BLOCKS(_mm256_add_ps, _mm256_setzero_ps())
        }
        return;
    }
#elif defined(__wasm_simd128__)
    /* 4 outputs at a time (the last 4 overlap the ones before), taps summed in
     * ml_pool2d_one's order; stride 2 takes the even taps of p[0..6] (two loads, one
     * shuffle). Scalar, PP-OCR cls's 2x2/2 max pool took 7% of the model in V8. */
    const float* xi = x - a->PL;
    if ((s == 1 || s == 2) && hi - lo >= 4) {
        const int mx = a->is_max;
        for (; ow < hi; ow += 4) {
            if (ow + 4 > hi) ow = hi - 4;
            v128_t c = wasm_f32x4_splat(mx ? -INFINITY : 0.0f);
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t k = 0; k < KW; ++k) {
                    const float* p = xi + r * W + ow * s + k;
                    v128_t v = s == 1 ? wasm_v128_load(p)
                                      : wasm_i32x4_shuffle(wasm_v128_load(p), wasm_v128_load(p + 3),
                                                           0, 2, 5, 7);
                    c = mx ? wasm_f32x4_pmax(v, c) : wasm_f32x4_add(c, v);
                }
            wasm_v128_store(y + ow, c);
        }
        return;
    }
#endif
    (void)W; (void)KW;
    for (; ow < hi; ++ow) y[ow] = ml_pool2d_one(a, x, r0, r1, ow, nan);
}

/* Whether plane x (n floats) holds a NaN. */
static inline int ml_pool_has_nan(const float* x, int64_t n) {
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) bad |= x[i] != x[i];
    return bad;
}

/* Window columns counted per output column (as ml_pool2d_row counts them), OW rounded
 * up to 8 of them, once a task. */
static inline void ml_pool2d_counts(const ml_pool2d_args* a, float* cw) {
    const int64_t OWv = (a->OW + 7) & ~(int64_t)7;
    for (int64_t ow = 0; ow < OWv; ++ow) {
        int64_t w0 = ow * a->SW - a->PL, w1 = w0 + a->KW;
        int64_t nw = a->include_pad ? ML_POOL_MIN(w1, a->W + a->PR) - w0
                                    : ML_POOL_MIN(w1, a->W) - ML_POOL_MAX(w0, 0);
        cw[ow] = (float)(nw > 0 ? nw : 0);
    }
}

/* Output row `oh` of one plane into y (OW floats). An average divides by its counts:
 * nh rows times cw[ow] columns (ml_pool2d_counts, once a task) where cw is given (a
 * vectorised division), else counted per output (a division and branches a float held
 * AveragePool 2x2/2 at 1.7x ORT's time). */
static inline void ml_pool2d_row(const ml_pool2d_args* a, const float* x, float* y, int64_t oh,
                                 int nan, const float* cw) {
    const int64_t OW = a->OW, W = a->W, KW = a->KW, SW = a->SW, PL = a->PL;
    int64_t h0 = oh * a->SH - a->PT, h1 = h0 + a->KH;
    int64_t r0 = h0 < 0 ? 0 : h0, r1 = h1 > a->H ? a->H : h1;
    /* interior output columns: ow*SW - PL >= 0 and ow*SW - PL + KW <= W */
    int64_t lo = (PL + SW - 1) / SW, hi = W - KW + PL >= 0 ? (W - KW + PL) / SW + 1 : 0;
    if (lo > OW) lo = OW;
    if (hi > OW) hi = OW;
    if (hi < lo) hi = lo;
    for (int64_t ow = 0; ow < lo; ++ow) y[ow] = ml_pool2d_one(a, x, r0, r1, ow, nan);
    if (nan)
        for (int64_t ow = lo; ow < hi; ++ow) y[ow] = ml_pool2d_one(a, x, r0, r1, ow, nan);
    else ml_pool2d_interior(a, x, y, r0, r1, lo, hi, SW, nan);
    for (int64_t ow = hi; ow < OW; ++ow) y[ow] = ml_pool2d_one(a, x, r0, r1, ow, nan);
    if (a->is_max) return;
    int64_t nh = a->include_pad ? ML_POOL_MIN(h1, a->H + a->PB) - h0 : r1 - r0;
    if (cw) { /* n = nh * nw (exact in float), 1 where no tap counts */
        const float fh = (float)(nh > 0 ? nh : 0);
        for (int64_t ow = 0; ow < OW; ++ow) {
            float n = fh * cw[ow];
            y[ow] = y[ow] / (n > 0.0f ? n : 1.0f);
        }
        return;
    }
    for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t w0 = ow * SW - PL, w1 = w0 + KW;
        int64_t nw = a->include_pad ? ML_POOL_MIN(w1, W + a->PR) - w0
                                    : ML_POOL_MIN(w1, W) - ML_POOL_MAX(w0, 0);
        int64_t n = nh > 0 && nw > 0 ? nh * nw : 1;
        y[ow] = y[ow] / (float)n;
    }
}

#if defined(__AVX__)
/* Flat pool of a small plane at stride 1 whose output has the input's size (pads summing
 * to the window less one, as 3x3 pad 1): the plane is one flat vector run instead of
 * rows (a 13-wide row is two vectors with a short loop each; per-row overhead held
 * 512 planes 13x13 3x3/1 at 2.4x ORT's time). Each position's horizontal window takes
 * x[i + k - PL], a lane whose column falls outside its row blended to the pad value by a
 * per-task mask (one per k); the vertical window then reads that row-partial buffer at
 * i + r * W, with PT rows of pad before it and PB after. Max exact (the direct path's
 * bits); an average sums in another order and multiplies by the counts' reciprocals,
 * made once a task (a vdivps an eight outputs was a tenth of a 3x3/1 average: 256 planes
 * 28x28 0.18 -> 0.165 ms, 1024 planes 7x7 0.075 -> 0.067; within an ulp of the
 * quotient). Returns 0 when a max meets a NaN (the NaN-aware direct path runs instead). */
#define ML_POOL_FLAT 4096
static inline int ml_pool2d_flat_ok(const ml_pool2d_args* a) {
    const int64_t HW = a->H * a->W, HWv = (HW + 7) & ~(int64_t)7;
    return a->SH == 1 && a->SW == 1 && a->OH == a->H && a->OW == a->W &&
           HWv * a->KW <= ML_POOL_FLAT && (a->H + a->KH) * a->W + 16 <= ML_POOL_FLAT &&
           HWv + 2 * a->KW + 8 <= ML_POOL_FLAT;
}

/* Per-task tables: the column masks (KW of HWv lanes) and, for an average, the
 * reciprocals of the counts. */
static inline void ml_pool2d_flat_tables(const ml_pool2d_args* a, int32_t* mask, float* rcp) {
    const int64_t H = a->H, W = a->W, HW = H * W, HWv = (HW + 7) & ~(int64_t)7;
    for (int64_t k = 0; k < a->KW; ++k)
        for (int64_t i = 0; i < HWv; ++i) {
            int64_t c = i % W + k - a->PL;
            mask[k * HWv + i] = i < HW && c >= 0 && c < W ? -1 : 0;
        }
    if (a->is_max) return;
    for (int64_t i = 0; i < HW; ++i) {
        int64_t oh = i / W, ow = i % W, h0 = oh - a->PT, w0 = ow - a->PL;
        int64_t nh = a->include_pad ? ML_POOL_MIN(h0 + a->KH, H + a->PB) - h0
                                    : ML_POOL_MIN(h0 + a->KH, H) - ML_POOL_MAX(h0, 0);
        int64_t nw = a->include_pad ? ML_POOL_MIN(w0 + a->KW, W + a->PR) - w0
                                    : ML_POOL_MIN(w0 + a->KW, W) - ML_POOL_MAX(w0, 0);
        rcp[i] = 1.0f / (float)(nh > 0 && nw > 0 ? nh * nw : 1);
    }
    for (int64_t i = HW; i < HWv; ++i) rcp[i] = 1.0f;
}

static inline int ml_pool2d_flat(const ml_pool2d_args* a, const float* x, float* y,
                                 const int32_t* mask, const float* rcp) {
    static const int32_t ml_pool_fmasks[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t W = a->W, HW = a->H * W, HWv = (HW + 7) & ~(int64_t)7, KW = a->KW, KH = a->KH;
    const int64_t PL = a->PL, front = a->PT * W;
    float xb[ML_POOL_FLAT], hb[ML_POOL_FLAT];
    const int mx = a->is_max;
    const __m256 init = _mm256_set1_ps(mx ? -INFINITY : 0.0f);
    /* xb: PL lanes of slack, the plane, slack to HWv + KW (masked lanes read them) */
    __m256 bad = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= HW; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (mx) bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        _mm256_storeu_ps(xb + PL + i, v);
    }
    int bads = 0;
    for (; i < HW; ++i) {
        bads |= x[i] != x[i];
        xb[PL + i] = x[i];
    }
    if (mx && (bads || _mm256_movemask_ps(bad))) return 0;
    for (int64_t j = 0; j < PL; ++j) xb[j] = 0.0f;
    for (int64_t j = PL + HW; j < PL + HWv + KW; ++j) xb[j] = 0.0f;
    for (int64_t j = 0; j < front; ++j) hb[j] = mx ? -INFINITY : 0.0f;
    for (int64_t j = front + HWv; j < front + HWv + a->PB * W + 8; ++j) hb[j] = mx ? -INFINITY : 0.0f;
    for (i = 0; i < HWv; i += 8) {
        __m256 acc = init;
        for (int64_t k = 0; k < KW; ++k) {
            __m256 m = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i*)(mask + k * HWv + i)));
            __m256 v = _mm256_blendv_ps(init, _mm256_loadu_ps(xb + i + k), m);
            acc = mx ? _mm256_max_ps(v, acc) : _mm256_add_ps(acc, v);
        }
        _mm256_storeu_ps(hb + front + i, acc);
    }
    /* the last HWv - HW partials are pad values (masked): rows below read them as pad */
    const __m256i tail = _mm256_loadu_si256((const __m256i*)(ml_pool_fmasks + 8 - (HW & 7)));
    for (i = 0; i < HWv; i += 8) {
        __m256 acc = init;
        for (int64_t r = 0; r < KH; ++r) {
            __m256 v = _mm256_loadu_ps(hb + i + r * W);
            acc = mx ? _mm256_max_ps(v, acc) : _mm256_add_ps(acc, v);
        }
        if (!mx) acc = _mm256_mul_ps(acc, _mm256_loadu_ps(rcp + i));
        if (i + 8 <= HW) _mm256_storeu_ps(y + i, acc);
        else _mm256_maskstore_ps(y + i, tail, acc);
    }
    return 1;
}
#endif

/* at every ISA level: pool.py's compile-time check of it (_constants) is emitted for any */
#define ML_POOL_SEP_ROW 1024
#if defined(__AVX__)
/* Separable pool of one plane (vertical stride 1 -- rows reused -- horizontal 1 or 2):
 * each input row, padded with -inf (max) or 0 (average), is reduced over KW into a row
 * of window partials (vectors along the output columns), then each output row reduces
 * KH of those rows: KW + KH vector ops an eight outputs instead of KW * KH, no scalar
 * border columns, the last partial vector of a row stored under a mask. Max is exact in
 * any order (the direct path's bits); an average sums rows of partials (a different
 * rounding order, within an ulp or two) and divides by the same counts. A max checks
 * the rows for NaN as it copies them (no separate pass) and returns 0 on one (the
 * caller takes the NaN-aware direct path). */
#define ML_POOL_SEP_PLANE 16384
static inline int ml_pool2d_sep_ok(const ml_pool2d_args* a) {
    const int64_t s = a->SW, OWv = (a->OW + 7) & ~(int64_t)7, len = OWv * s + a->KW + 8;
    if (!(s == 1 || s == 2) || len > ML_POOL_SEP_ROW || a->H * OWv > ML_POOL_SEP_PLANE)
        return 0;
    if (a->SH == 1) return 1; /* rows reused KH times: measured ahead everywhere */
    if (a->KH <= a->SH) return 0;
    /* Overlapping windows at a vertical stride of 2 or more: vector ops of each path, the
     * direct one with its scalar border columns (3 a tap) and, for a max, its NaN scan of
     * the plane (3 an eight), the separable one with its row copies (4 an eight with the
     * NaN check, else 2). Measured (3x3/2, 1 thread, direct -> separable): max
     * 192x56x56 223 -> 201 us, 64x112x112 pad 1 223 -> 182-206, avg 136x28x28 pad 1
     * 75 -> 62, but max 256x27x27 (no border, 13 wide in 16 lanes) 75 -> 109, which this
     * count keeps direct. */
    const int64_t OH = a->OH, OW = a->OW, KH = a->KH, KW = a->KW;
    int64_t lo = (a->PL + s - 1) / s, hi = a->W - KW + a->PL >= 0 ? (a->W - KW + a->PL) / s + 1 : 0;
    lo = ML_POOL_MIN(lo, OW);
    hi = ML_POOL_MAX(ML_POOL_MIN(hi, OW), lo);
    int64_t rh = ML_POOL_MIN(a->H, (OH - 1) * a->SH - a->PT + KH);
    int64_t direct = OH * (((hi - lo) + 7) / 8 * KH * KW + 3 * (OW - (hi - lo)) * KH * KW) +
                     (a->is_max ? 3 * a->H * a->W / 8 : 0);
    int64_t sep = rh * (OWv / 8 * KW + (a->is_max ? 4 : 2) * a->W / 8) + OH * OWv / 8 * KH;
    return sep < direct;
}

/* Row partials of pr over KW at stride s into h (OWv floats). */
static inline void ml_pool_sep_hrow(const float* pr, float* h, int64_t OWv, int64_t KW,
                                    int64_t s, int mx, __m256 init) {
    for (int64_t ow = 0; ow < OWv; ow += 8) {
        __m256 acc = init;
        for (int64_t k = 0; k < KW; ++k) {
            __m256 v = ml_pool_raw8(pr + ow * s + k, s);
            acc = mx ? _mm256_max_ps(v, acc) : _mm256_add_ps(acc, v);
        }
        _mm256_storeu_ps(h + ow, ml_pool_fix8(acc, s));
    }
}

static inline int ml_pool2d_separable(const ml_pool2d_args* a, const float* x, float* y,
                                      const float* cw) {
    static const int32_t ml_pool_masks[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t H = a->H, W = a->W, OH = a->OH, OW = a->OW, KW = a->KW, s = a->SW;
    const int64_t OWv = (OW + 7) & ~(int64_t)7, len = OWv * s + KW + 8;
    float pr[ML_POOL_SEP_ROW], hb[ML_POOL_SEP_PLANE];
    const int mx = a->is_max;
    const float pad = mx ? -INFINITY : 0.0f;
    const __m256 init = _mm256_set1_ps(pad);
    /* columns of x that land in pr: [PL, PL + W); rows any output reads: [0, rh) */
    int64_t c0 = a->PL < len ? a->PL : len, c1 = a->PL + W < len ? a->PL + W : len;
    int64_t n = c1 - c0, rh = ML_POOL_MIN(H, (OH - 1) * a->SH - a->PT + a->KH);
    for (int64_t c = 0; c < c0; ++c) pr[c] = pad;
    for (int64_t c = c1; c < len; ++c) pr[c] = pad;
    __m256 bad = _mm256_setzero_ps();
    int bads = 0;
    for (int64_t r = 0; r < rh; ++r) {
        const float* xr = x + r * W;
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            __m256 v = _mm256_loadu_ps(xr + j);
            if (mx) bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            _mm256_storeu_ps(pr + c0 + j, v);
        }
        for (; j < n; ++j) {
            bads |= xr[j] != xr[j];
            pr[c0 + j] = xr[j];
        }
        if (s == 1) ml_pool_sep_hrow(pr, hb + r * OWv, OWv, KW, 1, mx, init);
        else ml_pool_sep_hrow(pr, hb + r * OWv, OWv, KW, 2, mx, init);
    }
    if (mx && (bads || _mm256_movemask_ps(bad))) return 0;
    const __m256i tail = _mm256_loadu_si256((const __m256i*)(ml_pool_masks + 8 - (OW & 7)));
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t oh = 0; oh < OH; ++oh) {
        int64_t h0 = oh * a->SH - a->PT, r0 = h0 < 0 ? 0 : h0;
        int64_t r1 = h0 + a->KH > H ? H : h0 + a->KH;
        int64_t nh = a->include_pad ? ML_POOL_MIN(h0 + a->KH, H + a->PB) - h0 : r1 - r0;
        const __m256 fh = _mm256_set1_ps((float)(nh > 0 ? nh : 0));
        float* yr = y + oh * OW;
        for (int64_t ow = 0; ow < OWv; ow += 8) {
            __m256 acc = init;
            for (int64_t r = r0; r < r1; ++r) {
                __m256 v = _mm256_loadu_ps(hb + r * OWv + ow);
                acc = mx ? _mm256_max_ps(v, acc) : _mm256_add_ps(acc, v);
            }
            if (!mx) /* n = nh * nw (exact in float), 1 where no tap counts */
                acc = _mm256_div_ps(acc, _mm256_max_ps(_mm256_mul_ps(fh, _mm256_loadu_ps(cw + ow)), one));
            if (ow + 8 <= OW) _mm256_storeu_ps(yr + ow, acc);
            else _mm256_maskstore_ps(yr + ow, tail, acc);
        }
    }
    return 1;
}
#endif

#if defined(__AVX__)
/* Whether plane x (n floats) holds a NaN, eight lanes at a time (an unordered compare
 * of two vectors checks both). */
static inline int ml_pool_nan8(const float* x, int64_t n) {
    __m256 bad = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
        bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q),
                                             _mm256_cmp_ps(c, d, _CMP_UNORD_Q)));
    }
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_loadu_ps(x + i);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    }
    int b = _mm256_movemask_ps(bad);
    for (; i < n; ++i) b |= x[i] != x[i];
    return b;
}

/* Max pool at horizontal stride 2 and vertical stride 2 or more (3x3/2, 2x2/2, pads, ceil_mode),
 * a plane free of NaN: per output row, the max over its input rows, column by column
 * (unit-stride vectors), into a row buffer with PL columns of -inf before and -inf
 * after; then eight outputs from that row at once: per pair of taps two loads, an even
 * and an odd shuffle, the lane order (0 1 4 5 2 3 6 7) fixed once per result. No scalar
 * border columns, no masked stores (the last vector overlaps the one before). A NaN is
 * looked for as the rows are read and sends the plane to the direct NaN-aware path.
 * 3x3/2, 1 thread, C harness (loaded machine), direct or separable -> this: 192x56x56
 * pads 0,1 ~200 -> 87-91 us, 64x112x112 ~200 -> 97-104, 512x27x27 ~150 -> 75, 96x54x54
 * ~80 -> 41-48, 320x28x28 pads 1 ~135 -> 45-52, 256x26x26 ~66 -> 30; 2x2/2 (VGG, U-Nets)
 * through the same path: 256x56x56 187 -> 148 us (ORT's NCHW kernel: 151-155), 512x28x28
 * 91 -> 89. Exact: the direct path's taps, and a max does not depend on their order. */
static inline int ml_pool2d_s2_ok(const ml_pool2d_args* a) {
    const int64_t OWv = (a->OW + 7) & ~(int64_t)7, len = 2 * OWv + a->KW + 16;
    return a->is_max && a->SW == 2 && a->SH >= 2 && a->KW >= 2 && a->KW <= 8 && a->W >= 8 &&
           a->PL < a->KW && a->PT < a->KH && a->PL + a->W <= len && 2 * len <= ML_POOL_SEP_ROW &&
           (a->OH - 1) * a->SH - a->PT < a->H && (a->OW - 1) * 2 - a->PL < a->W;
}

/* Eight stride-2 window maxima of row buffer p (KW taps from p[2 ow]), lanes 0 1 4 5 2 3 6 7. */
static inline __m256 ml_pool_s2_row8(const float* p, int64_t KW) {
    __m256 u = _mm256_loadu_ps(p), w = _mm256_loadu_ps(p + 8);
    __m256 m = _mm256_max_ps(_mm256_shuffle_ps(u, w, 0xDD), _mm256_shuffle_ps(u, w, 0x88));
    for (int64_t k = 2; k < KW; k += 2) {
        u = _mm256_loadu_ps(p + k), w = _mm256_loadu_ps(p + k + 8);
        m = _mm256_max_ps(_mm256_shuffle_ps(u, w, 0x88), m);
        if (k + 1 < KW) m = _mm256_max_ps(_mm256_shuffle_ps(u, w, 0xDD), m);
    }
    return m;
}

/* Output row oh's window rows: the first (returned) and their count (*nr); the rows not
 * yet checked for NaN (*seen on) checked into *bads, but the window's last two, which
 * the column pass compares as it reads them. */
static inline const float* ml_pool_s2_window(const ml_pool2d_args* a, const float* x, int64_t oh,
                                             int64_t* nr, int64_t* seen, int* bads) {
    const int64_t h0 = oh * a->SH - a->PT, r0 = h0 < 0 ? 0 : h0;
    const int64_t r1 = h0 + a->KH > a->H ? a->H : h0 + a->KH;
    for (int64_t r = *seen > r0 ? *seen : r0; r < r1 - 2; ++r) *bads |= ml_pool_nan8(x + r * a->W, a->W);
    *seen = r1 > *seen ? r1 : *seen;
    *nr = r1 - r0;
    return x + r0 * a->W;
}

/* The column maxima of rows xr[0..nr) (W >= 8 floats each) into v, eight wide; the
 * last two rows' unordered compares or'ed into bad (returned). */
static inline __m256 ml_pool_s2_cols8(const float* xr, int64_t W, int64_t nr, float* v, __m256 bad) {
    for (int64_t j = 0; j < W; j += 8) {
        if (j + 8 > W) j = W - 8;
        __m256 m = _mm256_loadu_ps(xr + j), t = m;
        for (int64_t r = 1; r < nr - 1; ++r) {
            t = _mm256_loadu_ps(xr + r * W + j);
            m = _mm256_max_ps(t, m);
        }
        __m256 u = nr > 1 ? _mm256_loadu_ps(xr + (nr - 1) * W + j) : m;
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(t, u, _CMP_UNORD_Q));
        _mm256_storeu_ps(v + j, _mm256_max_ps(u, m));
    }
    return bad;
}

/* The same with AVX-512 (gcc), sixteen columns a vector: planes at least 16 wide whose
 * row buffer takes 16-wide output vectors (ml_pool_s2_len16). Half the instructions of
 * the eight-wide path, each tap's sixteen outputs one two-source permute of two loads
 * (in order: no lane fix). The max operands in the eight-wide path's order: the same
 * bits, signed zeros included. Timings: ml_pool2d_s2_w16. */
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
typedef float ml_pv16 __attribute__((vector_size(64), aligned(4)));
typedef int ml_pi16 __attribute__((vector_size(64)));
#define ML_PMAX16(a, b) ((ml_pv16)__builtin_ia32_maxps512_mask((a), (b), (a), (unsigned short)-1, 4))
#define ML_PEVEN16 ((ml_pi16){0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30})
#define ML_PODD16 ((ml_pi16){1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31})

/* Row buffer floats the sixteen-wide path reads: 2 * OW rounded to 16, the taps, a
 * vector past. */
static inline int64_t ml_pool_s2_len16(const ml_pool2d_args* a) {
    return 2 * ((a->OW + 15) & ~(int64_t)15) + a->KW + 32;
}

/* (OW >= 8: narrower rows are the eight-wide path's) */
static inline int ml_pool2d_s2_16(const ml_pool2d_args* a) {
    return a->W >= 16 && a->OW >= 8 && 2 * ml_pool_s2_len16(a) <= ML_POOL_SEP_ROW;
}

/* Sixteen stride-2 window maxima of row buffer p (KW taps from p[2 ow]), in order. */
static inline ml_pv16 ml_pool_s2_row16(const float* p, int64_t KW) {
    ml_pv16 u = *(const ml_pv16*)p, w = *(const ml_pv16*)(p + 16);
    ml_pv16 m = ML_PMAX16(__builtin_shuffle(u, w, ML_PODD16), __builtin_shuffle(u, w, ML_PEVEN16));
    for (int64_t k = 2; k < KW; k += 2) {
        u = *(const ml_pv16*)(p + k), w = *(const ml_pv16*)(p + k + 16);
        m = ML_PMAX16(__builtin_shuffle(u, w, ML_PEVEN16), m);
        if (k + 1 < KW) m = ML_PMAX16(__builtin_shuffle(u, w, ML_PODD16), m);
    }
    return m;
}

/* ml_pool_s2_cols8 sixteen wide (W >= 16); the compares' mask or'ed into bad. */
static inline unsigned short ml_pool_s2_cols16(const float* xr, int64_t W, int64_t nr, float* v,
                                               unsigned short bad) {
    for (int64_t j = 0; j < W; j += 16) {
        if (j + 16 > W) j = W - 16;
        ml_pv16 m = *(const ml_pv16*)(xr + j), t = m;
        for (int64_t r = 1; r < nr - 1; ++r) {
            t = *(const ml_pv16*)(xr + r * W + j);
            m = ML_PMAX16(t, m);
        }
        ml_pv16 u = nr > 1 ? *(const ml_pv16*)(xr + (nr - 1) * W + j) : m;
        bad |= __builtin_ia32_cmpps512_mask(t, u, 3 /* unordered */, (unsigned short)-1, 4);
        *(ml_pv16*)(v + j) = ML_PMAX16(u, m);
    }
    return bad;
}

/* ml_pool2d_s2 sixteen columns a vector (its comments hold); the column maxima sixteen
 * (v16) or eight wide, a copy each. */
static inline __attribute__((always_inline)) int ml_pool2d_s2_w16_(const ml_pool2d_args* a, const float* x,
                                                                   float* y, float* vb, const int v16) {
    const int64_t W = a->W, OW = a->OW, KW = a->KW;
    const int64_t OWv = (OW + 15) & ~(int64_t)15, half = ML_POOL_SEP_ROW / 2;
    __m256 bad8 = _mm256_setzero_ps();
    unsigned short bad = 0;
    int bads = 0;
    int64_t seen = 0;
    for (int64_t oh = 0; oh <= a->OH; ++oh) {
        if (oh < a->OH) {
            int64_t nr;
            const float* xr = ml_pool_s2_window(a, x, oh, &nr, &seen, &bads);
            float* v = vb + (oh & 1) * half + a->PL;
            if (v16) bad = ml_pool_s2_cols16(xr, W, nr, v, bad);
            else bad8 = ml_pool_s2_cols8(xr, W, nr, v, bad8);
        }
        if (oh == 0) continue;
        const float* vr = vb + ((oh - 1) & 1) * half;
        float* yr = y + (oh - 1) * OW;
        for (int64_t ow = 0; ow < OWv; ow += 16) {
            int64_t o = OW >= 16 && ow + 16 > OW ? OW - 16 : ow;
            ml_pv16 m = KW == 3 ? ml_pool_s2_row16(vr + 2 * o, 3) : ml_pool_s2_row16(vr + 2 * o, KW);
            if (o + 16 <= OW || (oh - 1) * OW + o + 16 <= a->OH * OW) *(ml_pv16*)(yr + o) = m;
            else {
                float t[16];
                *(ml_pv16*)t = m;
                for (int64_t i = 0; i < OW - o; ++i) yr[o + i] = t[i];
            }
        }
    }
    return !(bads || bad || _mm256_movemask_ps(bad8));
}

/* The column maxima sixteen wide where the rows start on cache lines or a window has
 * two rows, else eight wide: measured (a sixteen-wide load of an unaligned row spans
 * two lines; 128x55x55 3x3/2 68 us sixteen wide, 60 eight; 64x112x112 102 against 114;
 * 256x56x56 2x2/2 105 against 134). */
__attribute__((noinline)) static int ml_pool2d_s2_w16c8(const ml_pool2d_args* a, const float* x,
                                                        float* y, float* vb) {
    return ml_pool2d_s2_w16_(a, x, y, vb, 0);
}
__attribute__((noinline)) static int ml_pool2d_s2_w16c16(const ml_pool2d_args* a, const float* x,
                                                         float* y, float* vb) {
    return ml_pool2d_s2_w16_(a, x, y, vb, 1);
}
static inline int ml_pool2d_s2_w16(const ml_pool2d_args* a, const float* x, float* y, float* vb) {
    return a->W % 16 == 0 || a->KH == 2 ? ml_pool2d_s2_w16c16(a, x, y, vb)
                                        : ml_pool2d_s2_w16c8(a, x, y, vb);
}
#else
static inline int ml_pool2d_s2_16(const ml_pool2d_args* a) { (void)a; return 0; }
static inline int64_t ml_pool_s2_len16(const ml_pool2d_args* a) { (void)a; return 0; }
#endif

/* The row buffers' -inf columns (before PL and from PL + W), once a task: the planes
 * write only the columns between. Two buffers of ML_POOL_SEP_ROW / 2 floats. */
static inline void ml_pool2d_s2_pad(const ml_pool2d_args* a, float* vb) {
    const int64_t len = ml_pool2d_s2_16(a) ? ml_pool_s2_len16(a)
                                           : 2 * ((a->OW + 7) & ~(int64_t)7) + a->KW + 16;
    for (float* b = vb; b < vb + ML_POOL_SEP_ROW; b += ML_POOL_SEP_ROW / 2) {
        for (int64_t c = 0; c < a->PL; ++c) b[c] = -INFINITY;
        for (int64_t c = a->PL + a->W; c < len; ++c) b[c] = -INFINITY;
    }
}

static inline int ml_pool2d_s2(const ml_pool2d_args* a, const float* x, float* y, float* vb) {
    const int64_t W = a->W, OW = a->OW, KW = a->KW;
    const int64_t OWv = (OW + 7) & ~(int64_t)7, half = ML_POOL_SEP_ROW / 2;
    __m256 bad = _mm256_setzero_ps();
    int bads = 0;
    int64_t seen = 0; /* rows [0, seen) were checked for NaN */
    /* row oh's column maxima go to one buffer while row oh - 1's outputs read the other:
     * a load spanning two stores just made waits for them to reach the cache (narrow
     * rows: 256x26x26 44 -> 35 us, 512x27x27 96 -> 77, 256x13x13 24 -> 16) */
    for (int64_t oh = 0; oh <= a->OH; ++oh) {
        if (oh < a->OH) {
            int64_t nr;
            const float* xr = ml_pool_s2_window(a, x, oh, &nr, &seen, &bads);
            float* v = vb + (oh & 1) * half + a->PL;
            /* the last vector overlaps the one before (W >= 8): same values stored twice,
             * no masked load or store (a masked store costs ~10x a plain one on some CPUs) */
            bad = ml_pool_s2_cols8(xr, W, nr, v, bad);
        }
        if (oh == 0) continue;
        const float* vr = vb + ((oh - 1) & 1) * half;
        float* yr = y + (oh - 1) * OW;
        for (int64_t ow = 0; ow < OWv; ow += 8) {
            int64_t o = OW >= 8 && ow + 8 > OW ? OW - 8 : ow;
            __m256 m = KW == 3 ? ml_pool_s2_row8(vr + 2 * o, 3) : ml_pool_s2_row8(vr + 2 * o, KW);
            m = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(m), 0xD8));
            /* a row under eight wide spills into the rows after it, written after it, but
             * never past the plane: the next plane may be another thread's, written
             * already (outputs 1-3 wide: 2x8 windows on 8 columns raced at 2 threads),
             * and the last plane's spill would leave the tensor */
            if (o + 8 <= OW || (oh - 1) * OW + o + 8 <= a->OH * OW) _mm256_storeu_ps(yr + o, m);
            else {
                float t[8];
                _mm256_storeu_ps(t, m);
                for (int64_t i = 0; i < OW; ++i) yr[i] = t[i];
            }
        }
    }
    /* a NaN: the caller runs the NaN-aware direct path over this plane */
    return !(bads || _mm256_movemask_ps(bad));
}
#endif

static void ml_pool2d_task(void* ctx, int64_t t, void* scratch) {
    const ml_pool2d_args* a = (const ml_pool2d_args*)ctx;
    (void)scratch;
    int64_t p0 = t * a->chunk, p1 = p0 + a->chunk < a->planes ? p0 + a->chunk : a->planes;
    int sep = 0, flat = 0, s2 = 0, s2w16 = 0;
    /* an average's column counts (the separable and direct paths), else the stride-2
     * max path's two row buffers */
    float cw[ML_POOL_SEP_ROW] __attribute__((aligned(64)));
    const float* counts = 0;
    if (!a->is_max && ((a->OW + 7) & ~(int64_t)7) <= ML_POOL_SEP_ROW) {
        ml_pool2d_counts(a, cw);
        counts = cw;
    }
#if defined(__AVX__)
    float rcp[ML_POOL_FLAT];
    int32_t mask[ML_POOL_FLAT];
    flat = ml_pool2d_flat_ok(a);
    s2 = !flat && ml_pool2d_s2_ok(a);
    sep = !flat && !s2 && ml_pool2d_sep_ok(a);
    s2w16 = s2 && ml_pool2d_s2_16(a);
    (void)s2w16;
    if (s2) ml_pool2d_s2_pad(a, cw);
    if (flat) ml_pool2d_flat_tables(a, mask, rcp);
#endif
    for (int64_t p = p0; p < p1; ++p) {
        const float* x = a->x + p * a->H * a->W;
        float* y = a->y + p * a->OH * a->OW;
        int done = 0, nan = 0;
#if defined(__AVX__)
        if (flat) done = ml_pool2d_flat(a, x, y, mask, rcp);
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
        else if (s2 && s2w16) done = ml_pool2d_s2_w16(a, x, y, cw);
#endif
        else if (s2) done = ml_pool2d_s2(a, x, y, cw);
        else if (sep) done = ml_pool2d_separable(a, x, y, cw);
        /* a flat, stride-2 or separable pass that did nothing met a NaN */
        nan = a->is_max && (flat || s2 || sep || ml_pool_nan8(x, a->H * a->W));
#else
        nan = a->is_max && ml_pool_has_nan(x, a->H * a->W);
#endif
        if (!done)
            for (int64_t oh = 0; oh < a->OH; ++oh) ml_pool2d_row(a, x, y + oh * a->OW, oh, nan, counts);
        if (a->epi) a->epi(a->y, p / a->channels, p % a->channels, p % a->channels + 1, 0,
                           a->OH * a->OW);
    }
}

/* The pool over all planes, split over planes on the thread pool when large (work: a
 * tap counts one unit, a float read or written four). */
__attribute__((unused)) static void ml_pool2d(ml_pool2d_args* a) {
    a->chunk = a->planes;
#ifdef MONOLIB_THREADPOOL_H
    double work = (double)a->planes * (double)(a->OH * a->OW * (a->KH * a->KW + 4) + 4 * a->H * a->W);
    int64_t tasks = ml_par_tasks_mem(work, a->planes);
    if (tasks > 1) {
        a->chunk = (a->planes + tasks - 1) / tasks;
        ml_parallel_for((a->planes + a->chunk - 1) / a->chunk, ml_pool2d_task, a, 0, 0);
        return;
    }
#endif
    ml_pool2d_task(a, 0, 0);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_POOL_H */
