/* resize.h -- nearest upsampling by integer factors, separable two-tap linear resize
 * (monolib kernel library).
 *
 * ONNX Resize / Upsample, mode nearest, when the output index of the last two axes is
 * in // f (an FPN's 2x, asymmetric + floor): each input row of W elements is widened
 * once (every element repeated fx times) into the first of its fy output rows, which
 * are then copies of it. Rows are independent: split over the thread pool when large.
 */
#ifndef MONOLIB_RESIZE_H
#define MONOLIB_RESIZE_H
#include <stdint.h>
#include <string.h>

/* Widen one row: dst[j*fx + k] = src[j], T a type of the element's size (the copy is
 * by bytes, so any dtype of that size). */
#define ML_WIDEN_ROW_(T)                                                                   \
    static inline void ml_widen_row_##T(const T* restrict src, T* restrict dst, int64_t W, \
                                        int fx) {                                          \
        for (int64_t j = 0; j < W; ++j)                                                    \
            for (int k = 0; k < fx; ++k) dst[j * fx + k] = src[j];                         \
    }
ML_WIDEN_ROW_(uint8_t)
ML_WIDEN_ROW_(uint16_t)
ML_WIDEN_ROW_(uint32_t)
ML_WIDEN_ROW_(uint64_t)
#undef ML_WIDEN_ROW_

/* 4-byte elements widened 2x or 4x (PP-OCR det's FPN): 8 elements at a time, repeated
 * by shuffles into 2 or 4 whole vectors (generic vectors: AVX2, or SSE pairs). */
typedef uint32_t ml_rs_v8 __attribute__((vector_size(32), aligned(4)));
typedef int32_t ml_rs_i8 __attribute__((vector_size(32)));
#ifdef __clang__
#define ML_RS_SHUF_(v, ...) __builtin_shufflevector(v, v, __VA_ARGS__)
#else
#define ML_RS_SHUF_(v, ...) __builtin_shuffle(v, (ml_rs_i8){__VA_ARGS__})
#endif
static inline void ml_widen_row_x2(const uint32_t* restrict src, uint32_t* restrict dst,
                                   int64_t W) {
    int64_t j = 0;
    for (; j + 8 <= W; j += 8) {
        ml_rs_v8 v = *(const ml_rs_v8*)(src + j);
        *(ml_rs_v8*)(dst + 2 * j) = ML_RS_SHUF_(v, 0, 0, 1, 1, 2, 2, 3, 3);
        *(ml_rs_v8*)(dst + 2 * j + 8) = ML_RS_SHUF_(v, 4, 4, 5, 5, 6, 6, 7, 7);
    }
    for (; j < W; ++j) dst[2 * j] = dst[2 * j + 1] = src[j];
}

static inline void ml_widen_row_x4(const uint32_t* restrict src, uint32_t* restrict dst,
                                   int64_t W) {
    int64_t j = 0;
    for (; j + 8 <= W; j += 8) {
        ml_rs_v8 v = *(const ml_rs_v8*)(src + j);
        *(ml_rs_v8*)(dst + 4 * j) = ML_RS_SHUF_(v, 0, 0, 0, 0, 1, 1, 1, 1);
        *(ml_rs_v8*)(dst + 4 * j + 8) = ML_RS_SHUF_(v, 2, 2, 2, 2, 3, 3, 3, 3);
        *(ml_rs_v8*)(dst + 4 * j + 16) = ML_RS_SHUF_(v, 4, 4, 4, 4, 5, 5, 5, 5);
        *(ml_rs_v8*)(dst + 4 * j + 24) = ML_RS_SHUF_(v, 6, 6, 6, 6, 7, 7, 7, 7);
    }
    for (; j < W; ++j) dst[4 * j] = dst[4 * j + 1] = dst[4 * j + 2] = dst[4 * j + 3] = src[j];
}

/* Input rows r0..r1-1 (of W elements of esize bytes) -> output rows r*fy..r*fy+fy-1 (of
 * W*fx elements). */
static inline void ml_upsample_rows(int64_t r0, int64_t r1, int64_t W, int fx, int fy,
                                    int esize, const uint8_t* x, uint8_t* y) {
    int64_t ib = W * esize, ob = ib * fx;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* src = x + r * ib;
        uint8_t* dst = y + r * fy * ob;
        if (fx == 1) memcpy(dst, src, (size_t)ib);
        else if (esize == 4 && fx == 2)
            ml_widen_row_x2((const uint32_t*)src, (uint32_t*)dst, W);
        else if (esize == 4 && fx == 4)
            ml_widen_row_x4((const uint32_t*)src, (uint32_t*)dst, W);
        else if (esize == 4)
            ml_widen_row_uint32_t((const uint32_t*)src, (uint32_t*)dst, W, fx);
        else if (esize == 8)
            ml_widen_row_uint64_t((const uint64_t*)src, (uint64_t*)dst, W, fx);
        else if (esize == 2)
            ml_widen_row_uint16_t((const uint16_t*)src, (uint16_t*)dst, W, fx);
        else if (esize == 1)
            ml_widen_row_uint8_t(src, dst, W, fx);
        else
            for (int64_t j = 0; j < W; ++j)
                for (int k = 0; k < fx; ++k)
                    memcpy(dst + (j * fx + k) * esize, src + j * esize, (size_t)esize);
        for (int q = 1; q < fy; ++q) memcpy(dst + q * ob, dst, (size_t)ob);
    }
}

typedef struct {
    int64_t rows, W, chunk;
    int fx, fy, esize;
    const uint8_t* x;
    uint8_t* y;
} ml_upsample_job;

static void ml_upsample_task(void* ctx, int64_t t, void* scratch) {
    const ml_upsample_job* j = (const ml_upsample_job*)ctx;
    (void)scratch;
    int64_t r0 = t * j->chunk, r1 = r0 + j->chunk < j->rows ? r0 + j->chunk : j->rows;
    ml_upsample_rows(r0, r1, j->W, j->fx, j->fy, j->esize, j->x, j->y);
}

/* All `rows` input rows (see ml_upsample_rows), split over blocks of rows on the thread
 * pool when threadpool.h is included and the output is large (memory-bound: each
 * 4 bytes written count as a few multiply-adds of work, as for elementwise ops). */
__attribute__((unused)) static void ml_upsample_nearest(int64_t rows, int64_t W, int fx,
                                                        int fy, int esize, const void* x,
                                                        void* y) {
    ml_upsample_job j = {rows, W, rows, fx, fy, esize, (const uint8_t*)x, (uint8_t*)y};
#ifdef MONOLIB_THREADPOOL_H
    int64_t tasks = ml_par_tasks((double)rows * W * fx * fy * esize, rows);
    if (tasks > 1) {
        j.chunk = (rows + tasks - 1) / tasks;
        ml_parallel_for((rows + j.chunk - 1) / j.chunk, ml_upsample_task, &j, 0, 0);
        return;
    }
#endif
    ml_upsample_task(&j, 0, 0);
}

/* Linear resize of the last two axes, two taps per axis (ONNX Resize mode linear, any
 * coordinate transformation: the taps and weights are tables made at compile time;
 * an axis not resized has taps (i, i) and weights (1, 0)):
 *     y[p][oy][ox] = sum_a wy[a][oy] sum_b wx[b][ox] x[p][iy[a][oy]][ix[b][ox]].
 * Separable: each input row an output row reads is first resized along W into a row
 * buffer (kept while the next output rows read the same input rows: a 2x upsample
 * resizes each input row once, not four times), then the output row is the weighted
 * sum of two buffers, contiguous, vectorised. Units are (plane, band of output rows),
 * split over the thread pool by work; the fused epilogue (rows of [planes*OH][OW]) runs
 * on each output row while it is in cache. */
typedef void (*ml_resize_epi_fn)(void* out, int64_t b, int64_t m0, int64_t m1, int64_t n0,
                                 int64_t n1);
typedef struct {
    int64_t planes, H, W, OH, OW, band, chunk;
    const int32_t *iy, *ix; /* [2][OH], [2][OW] */
    const float *wy, *wx;   /* the same layout */
    const float* x;
    float* y;
    ml_resize_epi_fn epi;
    void* epi_out;
} ml_resize2_job;

static inline void ml_resize2_row(const ml_resize2_job* j, const float* restrict row,
                                  float* restrict out) {
    const int32_t* restrict i0 = j->ix;
    const int32_t* restrict i1 = j->ix + j->OW;
    const float* restrict w0 = j->wx;
    const float* restrict w1 = j->wx + j->OW;
    for (int64_t o = 0; o < j->OW; ++o) out[o] = w0[o] * row[i0[o]] + w1[o] * row[i1[o]];
}

static void ml_resize2_unit(const ml_resize2_job* j, int64_t u, float* restrict buf) {
    const int64_t nb = (j->OH + j->band - 1) / j->band, p = u / nb;
    const int64_t oy0 = (u % nb) * j->band, oy1 = oy0 + j->band < j->OH ? oy0 + j->band : j->OH;
    const float* xp = j->x + p * j->H * j->W;
    float* yp = j->y + p * j->OH * j->OW;
    float* h[2] = {buf, buf + j->OW}; /* resized input rows, which in have[] */
    int64_t have[2] = {-1, -1};
    for (int64_t oy = oy0; oy < oy1; ++oy) {
        const int64_t r[2] = {j->iy[oy], j->iy[j->OH + oy]};
        const float* src[2];
        for (int a = 0; a < 2; ++a) {
            int s = have[0] == r[a] ? 0 : have[1] == r[a] ? 1 : -1;
            if (s < 0) { /* resized into the slot not holding the other tap's row */
                s = have[0] == r[1 - a] ? 1 : 0;
                ml_resize2_row(j, xp + r[a] * j->W, h[s]);
                have[s] = r[a];
            }
            src[a] = h[s];
        }
        const float a0 = j->wy[oy], a1 = j->wy[j->OH + oy];
        float* restrict out = yp + oy * j->OW;
        const float* restrict s0 = src[0];
        const float* restrict s1 = src[1];
        for (int64_t o = 0; o < j->OW; ++o) out[o] = a0 * s0[o] + a1 * s1[o];
        if (j->epi) j->epi(j->epi_out, 0, p * j->OH + oy, p * j->OH + oy + 1, 0, j->OW);
    }
}

#ifdef MONOLIB_THREADPOOL_H
static void ml_resize2_task(void* ctx, int64_t t, void* scratch) {
    const ml_resize2_job* j = (const ml_resize2_job*)ctx;
    const int64_t units = j->planes * ((j->OH + j->band - 1) / j->band);
    for (int64_t u = t * j->chunk; u < units && u < (t + 1) * j->chunk; ++u)
        ml_resize2_unit(j, u, (float*)scratch);
}
#endif

/* The resize of `planes` planes x [H][W] into [OH][OW] by the tables above; scratch:
 * 2 * OW floats. */
__attribute__((unused)) static void ml_resize_linear2(
    int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW, const int32_t* iy,
    const float* wy, const int32_t* ix, const float* wx, const float* x, float* y,
    float* scratch, ml_resize_epi_fn epi, void* epi_out) {
    ml_resize2_job j = {planes, H, W, OH, OW, OH, 1, iy, ix, wy, wx, x, y, epi, epi_out};
#ifdef MONOLIB_THREADPOOL_H
    /* work per output float: its share of the W pass (two taps) and the H pass */
    double work = 4.0 * (double)planes * OH * OW;
    int64_t units = planes;
    if (ml_num_threads() > 1 && planes < 4 * (int64_t)ml_num_threads()) {
        int64_t nb = (4 * (int64_t)ml_num_threads() + planes - 1) / planes;
        j.band = (OH + nb - 1) / nb;
        units = planes * ((OH + j.band - 1) / j.band);
    }
    int64_t tasks = ml_par_tasks_mem(work, units);
    if (tasks > 1) {
        j.chunk = (units + tasks - 1) / tasks;
        ml_parallel_for((units + j.chunk - 1) / j.chunk, ml_resize2_task, &j, scratch,
                        2 * (size_t)OW * sizeof(float));
        return;
    }
    j.band = OH;
#endif
    for (int64_t p = 0; p < planes; ++p) ml_resize2_unit(&j, p, scratch);
}

#endif /* MONOLIB_RESIZE_H */
