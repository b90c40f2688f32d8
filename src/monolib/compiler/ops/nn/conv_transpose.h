/* conv_transpose.h -- ConvTranspose as GEMM tiles scattered into the output (monolib
 * kernel library).
 *
 * Needs gemm.h (ml_ukernel's tile layout, ml_vf, ML_VW, ml_epi_fn) before it.
 */
#ifndef MONOLIB_CONV_TRANSPOSE_H
#define MONOLIB_CONV_TRANSPOSE_H
/* gcc warns about loops it proves dead after inlining constant shapes (a known false
 * positive); keep the generated build quiet. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
#endif
#include <stdint.h>
#include <string.h>

/* ---- ConvTranspose whose kernel tiles the output (stride == kernel, no dilation, no
 * pads): y[co][ih*KH+ky][iw*KW+kx] = bias[co] + sum_ci w[ci][co][ky][kx] * x[ci][ih][iw].
 * It is the GEMM cols[M = CO*KH*KW][H*W] = A x X followed by a depth-to-space scatter;
 * here each register tile (MR GEMM rows x one input row's 16 or 32 pixels, B read
 * straight from the image) is scattered into y as soon as it is computed, so the GEMM
 * result never goes through memory (the separate GEMM + col2im wrote and re-read it:
 * 2.5x slower on PP-OCR det's 24->24 2x2 upsampling). With KW == 2 the two kx rows of a
 * tile are interleaved in registers into contiguous output vectors. */

/* Interleave two vectors: lo = a0 b0 a1 b1 ..., hi = the second halves. */
typedef int32_t ml_vi __attribute__((vector_size(ML_VW * 4)));
#ifdef __clang__
#define ML_SHUF_(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define ML_SHUF_(a, b, ...) __builtin_shuffle(a, b, (ml_vi){__VA_ARGS__})
#endif
#if ML_VW == 16
#define ML_ZIP_LO(a, b) ML_SHUF_(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23)
#define ML_ZIP_HI(a, b) \
    ML_SHUF_(a, b, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)
#elif ML_VW == 8
#define ML_ZIP_LO(a, b) ML_SHUF_(a, b, 0, 8, 1, 9, 2, 10, 3, 11)
#define ML_ZIP_HI(a, b) ML_SHUF_(a, b, 4, 12, 5, 13, 6, 14, 7, 15)
#else
#define ML_ZIP_LO(a, b) ML_SHUF_(a, b, 0, 4, 1, 5)
#define ML_ZIP_HI(a, b) ML_SHUF_(a, b, 2, 6, 3, 7)
#endif

/* The generic scatter of ml_tconv_tile (any KW, partial tiles): t holds the tile's rows
 * (ML_NP*ML_NR floats each), mr rows and nr pixels are stored. One out-of-line copy for
 * all 24 tile instances (inlined into each it was most of the unit's compile time). */
ML_OUTLINE void ml_tconv_scatter(float t[ML_MR][ML_NP * ML_NR], int KH, int KW, int64_t m0,
                                 int mr, int nr, int64_t ih, int64_t iw0, int64_t OHW,
                                 int64_t OW, const float* restrict bias, float* restrict y) {
    for (int r = 0; r < mr; ++r) {
        int64_t m = m0 + r, co = m / (KH * KW), ky = (m / KW) % KH, kx = m % KW;
        float bb = bias ? bias[co] : 0.0f;
        float* d = y + co * OHW + (ih * KH + ky) * OW + iw0 * KW + kx;
        for (int j = 0; j < nr; ++j) d[j * KW] = t[r][j] + bb;
    }
}

/* One tile: `rows` GEMM rows m0.. (a: their packed A panel) x np*NR input pixels
 * (b: row k of B at b + k*ldb, np*NR readable floats), scattered into y; only mr rows
 * and nr pixels are stored. co*OHW + oh*OW + ow addresses y. */
ML_INLINE void ml_tconv_tile(const int np, const int rows, const int KH, const int KW,
                             int64_t K, const float* restrict a, const float* restrict b,
                             int64_t ldb, int64_t m0, int mr, int nr, int64_t ih, int64_t iw0,
                             int64_t OHW, int64_t OW, const float* restrict bias,
                             float* restrict y) {
    ml_vf acc[ML_MR][ML_NP * ML_NV];
    for (int r = 0; r < rows; ++r)
        for (int j = 0; j < np * ML_NV; ++j) acc[r][j] = (ml_vf){0};
    for (int64_t k = 0; k < K; ++k) {
        ml_vf bv[ML_NP * ML_NV];
        /* K input rows are K streams the prefetchers miss: the first panel fetches the
         * pixels two tiles ahead (-25% on det's 24->1 layer, input not in cache) */
        if (m0 == 0) __builtin_prefetch(b + k * ldb + 2 * ML_NP * ML_NR);
        for (int j = 0; j < np * ML_NV; ++j) bv[j] = *(const ml_vf*)(b + k * ldb + j * ML_VW);
        for (int r = 0; r < rows; ++r) {
            ml_vf av = a[k * ML_MR + r] - (ml_vf){0};
            for (int j = 0; j < np * ML_NV; ++j) acc[r][j] += av * bv[j];
        }
    }
    if (KW == 2 && rows % 2 == 0 && mr == rows && nr == np * ML_NR) {
        /* m0 is even (a multiple of MR): rows r, r+1 are kx = 0, 1 of one (co, ky) */
        for (int r = 0; r < rows; r += 2) {
            int64_t m = m0 + r, co = m / (KH * 2), ky = (m / 2) % KH;
            float bb = bias ? bias[co] : 0.0f;
            float* d = y + co * OHW + (ih * KH + ky) * OW + iw0 * 2;
            /* the tile writes short runs of 2*KH*CO output rows at once, more streams than
             * the prefetchers follow: fetch (for writing) the same run of the next input
             * row's output now (-12% on det's 24->24 upsampling, output not in cache) */
            for (int q = 0; q < 2 * np * ML_NR; q += 16)
                __builtin_prefetch(d + KH * OW + q, 1, 3);
            for (int j = 0; j < np * ML_NV; ++j) {
                ml_vf u = acc[r][j] + bb, v = acc[r + 1][j] + bb;
                *(ml_vf*)(d + 2 * j * ML_VW) = ML_ZIP_LO(u, v);
                *(ml_vf*)(d + 2 * j * ML_VW + ML_VW) = ML_ZIP_HI(u, v);
            }
        }
        return;
    }
    float t[ML_MR][ML_NP * ML_NR] __attribute__((aligned(64)));
    for (int r = 0; r < rows; ++r)
        for (int j = 0; j < np * ML_NV; ++j) *(ml_vf*)&t[r][j * ML_VW] = acc[r][j];
    ml_tconv_scatter(t, KH, KW, m0, mr, nr, ih, iw0, OHW, OW, bias, y);
}

/* ml_tconv_tile with the row count specialised (short last panels do not pay for MR). */
ML_INLINE void ml_tconv_tile_rows(const int np, const int KH, const int KW, int64_t K,
                                  const float* restrict a, const float* restrict b,
                                  int64_t ldb, int64_t m0, int mr, int nr, int64_t ih,
                                  int64_t iw0, int64_t OHW, int64_t OW,
                                  const float* restrict bias, float* restrict y) {
#define ML_TT_(rows) \
    ml_tconv_tile(np, rows, KH, KW, K, a, b, ldb, m0, mr, nr, ih, iw0, OHW, OW, bias, y)
    if (mr == 1) ML_TT_(1);
    else if (mr == 2) ML_TT_(2);
    else if (mr <= 4) ML_TT_(4);
    else ML_TT_(ML_MR);
#undef ML_TT_
}

/* Input rows ih0..ih1-1, pixels iw0..iw1-1 (iw0 a multiple of ML_NP*ML_NR) of one image
 * and group: x [K][H][W]; a: packed A of M = CO*KH*KW rows ((co*KH+ky)*KW+kx) by K;
 * y [CO][H*KH][W*KW]; buf: K*ML_NP*ML_NR floats (the zero-padded last, short block of
 * pixels: B reads stay inside x). Calls epi(epi_out, epi_b, epi_m0.., n0, n1) on each
 * finished output row segment. The kernel sizes are fixed for the common ones so the
 * scatter's index arithmetic folds. */
ML_UNUSED static void ml_tconv_exact_block(int64_t ih0, int64_t ih1, int64_t iw0,
                                           int64_t iw1, int64_t M, int64_t K, int KH, int KW,
                                           int64_t H, int64_t W, const float* restrict a,
                                           const float* restrict x, const float* restrict bias,
                                           float* restrict y, float* restrict buf,
                                           ml_epi_fn epi, void* epi_out, int64_t epi_b,
                                           int64_t epi_m0) {
    const int NB = ML_NP * ML_NR;
    int64_t OW = W * KW, OHW = H * KH * OW, CO = M / (KH * KW);
    for (int64_t ih = ih0; ih < ih1; ++ih) {
        for (int64_t iw = iw0; iw < iw1; iw += NB) {
            int nr = (int)ML_MIN(NB, iw1 - iw);
            const float* b = x + ih * W + iw;
            int64_t ldb = H * W;
            if (nr < NB) { /* last block: a zero-padded copy, so full vectors stay inside */
                for (int64_t k = 0; k < K; ++k)
                    for (int j = 0; j < NB; ++j) buf[k * NB + j] = j < nr ? b[k * ldb + j] : 0.0f;
                b = buf;
                ldb = NB;
            }
            for (int64_t m0 = 0; m0 < M; m0 += ML_MR) {
                int mr = (int)ML_MIN(ML_MR, M - m0);
                const float* am = a + (m0 / ML_MR) * K * ML_MR;
#define ML_TB_(np, kh, kw) \
    ml_tconv_tile_rows(np, kh, kw, K, am, b, ldb, m0, mr, nr, ih, iw, OHW, OW, bias, y)
                if (ML_NP > 1 && nr > ML_NR) { /* folds away with one panel a tile */
                    if (KH == 2 && KW == 2) ML_TB_(ML_NP, 2, 2);
                    else if (KH == 1 && KW == 2) ML_TB_(ML_NP, 1, 2);
                    else ML_TB_(ML_NP, KH, KW);
                } else {
                    if (KH == 2 && KW == 2) ML_TB_(1, 2, 2);
                    else if (KH == 1 && KW == 2) ML_TB_(1, 1, 2);
                    else ML_TB_(1, KH, KW);
                }
#undef ML_TB_
            }
        }
        if (epi)
            for (int64_t ky = 0; ky < KH; ++ky) {
                int64_t n0 = (ih * KH + ky) * OW;
                epi(epi_out, epi_b, epi_m0, epi_m0 + CO, n0 + iw0 * KW, n0 + iw1 * KW);
            }
    }
}

typedef struct {
    int64_t M, K, H, W, rows, cols, pieces, epi_b, epi_m0;
    int KH, KW;
    const float *a, *x, *bias;
    float* y;
    ml_epi_fn epi;
    void* epi_out;
} ml_tconv_job;

/* Task t: input rows [(t / pieces) * rows, +rows), pixels [(t % pieces) * cols, +cols);
 * scratch: the thread's padded-block buffer. */
static void ml_tconv_task(void* ctx, int64_t t, void* scratch) {
    const ml_tconv_job* j = (const ml_tconv_job*)ctx;
    int64_t ih0 = (t / j->pieces) * j->rows, iw0 = (t % j->pieces) * j->cols;
    int64_t ih1 = ML_MIN(j->H, ih0 + j->rows), iw1 = ML_MIN(j->W, iw0 + j->cols);
    if (ih0 >= ih1 || iw0 >= iw1) return;
    ml_tconv_exact_block(ih0, ih1, iw0, iw1, j->M, j->K, j->KH, j->KW, j->H, j->W, j->a, j->x,
                         j->bias, j->y, (float*)scratch, j->epi, j->epi_out, j->epi_b,
                         j->epi_m0);
}

/* Floats of scratch ml_tconv_exact needs (the widest pixel block of any ISA). */
static inline int64_t ml_tconv_buf_floats(int64_t K) { return K * 2 * ML_NR; }

/* The whole image and group (see ml_tconv_exact_block), split over blocks of input rows
 * (and of pixels when there are fewer rows than tasks, e.g. 1-D) on the thread pool when
 * threadpool.h is included and the work is large. */
ML_UNUSED static void ml_tconv_exact(int64_t M, int64_t K, int KH, int KW, int64_t H,
                                     int64_t W, const float* restrict a,
                                     const float* restrict x, const float* restrict bias,
                                     float* restrict y, float* restrict buf, ml_epi_fn epi,
                                     void* epi_out, int64_t epi_b, int64_t epi_m0) {
    const int64_t NB = ML_NP * ML_NR, blocks = (W + NB - 1) / NB;
    ml_tconv_job j = {M, K, H, W, H, W, 1, epi_b, epi_m0, KH, KW, a, x, bias, y, epi, epi_out};
    int64_t tasks = 1;
#ifdef MONOLIB_THREADPOOL_H
    /* the scatter is memory-bound: count each output float as a few multiply-adds */
    tasks = ml_par_tasks((double)M * H * W * (K + 8), H * blocks);
#endif
    if (tasks > 1) {
        if (H >= tasks) {
            j.rows = (H + tasks - 1) / tasks;
        } else {
            j.rows = 1;
            int64_t per = (tasks + H - 1) / H; /* pieces of each row */
            j.cols = ((blocks + per - 1) / per) * NB;
            j.pieces = (W + j.cols - 1) / j.cols;
        }
    }
    int64_t n = ((H + j.rows - 1) / j.rows) * j.pieces;
#ifdef MONOLIB_THREADPOOL_H
    if (tasks > 1) {
        ml_parallel_for(n, ml_tconv_task, &j, buf, 4 * (size_t)ml_tconv_buf_floats(K));
        return;
    }
#endif
    for (int64_t t = 0; t < n; ++t) ml_tconv_task(&j, t, buf);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_CONV_TRANSPOSE_H */
