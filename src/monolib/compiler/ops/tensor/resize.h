/* resize.h -- nearest upsampling by integer factors (monolib kernel library).
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

#endif /* MONOLIB_RESIZE_H */
