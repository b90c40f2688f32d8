/* conv.h -- convolution kernels shared by Conv and ConvTranspose (monolib kernel library).
 *
 * Needs gemm.h (ml_vf, ML_VW, ml_epi_fn) before it.
 *
 * Zero-padded, phase-split rows and planes (ml_dw_fill_row, ml_dw_pad_plane), the direct
 * convolution that reads B straight from the padded image (ml_conv_direct), image padding
 * (ml_pad_image, ml_pad_planes, ml_pad_image_par) and col2im (ml_col2im_add, ml_col2im_exact).
 * The depthwise kernels are in conv_depthwise.h, ConvTranspose's fused GEMM + scatter in
 * conv_transpose.h.
 */
#ifndef MONOLIB_CONV_H
#define MONOLIB_CONV_H
/* gcc warns about loops it proves dead after inlining constant shapes (a known false
 * positive); keep the generated build quiet. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
#endif
#include <stdint.h>
#include <string.h>

/* One input row ih of channel x (H x W) as a zero-padded row split into SW column phases:
 * phase p (Wq floats at dst + p*Wq) holds padded columns p, p+SW, ..., padded column j
 * being input column j - PL. Columns outside the input (and the whole row when ih is
 * outside 0..H-1) are zero; padded columns from Wp on are never read by a window. */
ML_INLINE void ml_dw_fill_row_k(const int SW, const float* restrict x, int64_t H, int64_t W,
                                int64_t ih, int64_t Wp, int64_t Wq, int64_t PL,
                                float* restrict dst) {
    if (ih < 0 || ih >= H) {
        memset(dst, 0, sizeof(float) * (size_t)(SW * Wq));
        return;
    }
    const float* src = x + ih * W;
    int64_t jend = ML_MIN(Wp, W + PL); /* padded columns below jend hold input */
    for (int p = 0; p < SW; ++p) {
        float* d = dst + p * Wq;
        int64_t lo = PL > p ? (PL - p + SW - 1) / SW : 0;
        int64_t hi = jend > p ? (jend - p + SW - 1) / SW : 0;
        if (hi > Wq) hi = Wq;
        if (lo > hi) lo = hi;
        int64_t q = 0;
        for (; q < lo; ++q) d[q] = 0.0f;
        for (; q < hi; ++q) d[q] = src[q * SW + p - PL];
        for (; q < Wq; ++q) d[q] = 0.0f;
    }
}

static inline void ml_dw_fill_row(int64_t SW, const float* restrict x, int64_t H, int64_t W,
                                  int64_t ih, int64_t Wp, int64_t Wq, int64_t PL,
                                  float* restrict dst) {
    if (SW == 1)
        ml_dw_fill_row_k(1, x, H, W, ih, Wp, Wq, PL, dst);
    else if (SW == 2)
        ml_dw_fill_row_k(2, x, H, W, ih, Wp, Wq, PL, dst);
    else
        ml_dw_fill_row_k((int)SW, x, H, W, ih, Wp, Wq, PL, dst);
}

/* Copy channel x (H x W) into the phase-split padded plane: Hp rows of SW*Wq floats, padded
 * row r being input row r - PT (see ml_dw_fill_row_k, also for Wq). */
static inline void ml_dw_pad_plane(const float* restrict x, int64_t H, int64_t W, int64_t Hp,
                                   int64_t Wp, int64_t SW, int64_t Wq, int64_t PT, int64_t PL,
                                   float* restrict plane) {
    for (int64_t r = 0; r < Hp; ++r)
        ml_dw_fill_row(SW, x, H, W, r - PT, Wp, Wq, PL, plane + r * SW * Wq);
}

#ifndef ML_KC_DIRECT
#define ML_KC_DIRECT 128
#endif

/* Micro-kernel reading B straight from the image: row k of the tile starts at
 * base + koff[k] (np panels of NR columns side by side). Same tile as ml_ukernel. */
ML_INLINE void ml_ukernel_direct(const int np, int64_t K, const float* restrict a,
                                 const float* restrict base, const int32_t* restrict koff,
                                 float* restrict c, int64_t ldc, int mr, int nr,
                                 const float* bias_m, int load_c) {
    ml_vf acc[ML_MR][ML_NP * ML_NV];
    for (int r = 0; r < ML_MR; ++r)
        for (int j = 0; j < np * ML_NV; ++j) acc[r][j] = (ml_vf){0};
    for (int64_t k = 0; k < K; ++k) {
        const float* b = base + koff[k];
        /* the tap rows are hundreds of short streams the hardware prefetcher does not
         * follow: fetch the same row a few tiles ahead (+30% measured on 3x3 convs) */
        __builtin_prefetch(b + 3 * ML_NP * ML_NR);
        ml_vf bv[ML_NP * ML_NV];
        for (int j = 0; j < np * ML_NV; ++j) bv[j] = *(const ml_vf*)(b + j * ML_VW);
        for (int r = 0; r < ML_MR; ++r) {
            ml_vf av = a[k * ML_MR + r] - (ml_vf){0};
            for (int j = 0; j < np * ML_NV; ++j) acc[r][j] += av * bv[j];
        }
    }
    ml_store_tile(np, ML_MR, acc, c, ldc, mr, nr, 1.0f, load_c, bias_m, 0);
}

/* Convolution of one image (one group) without im2col: x is the image padded and split
 * into SW column phases by ml_dw_pad_plane per channel ([C][Hp][SW][Wq]); koff[k] is the
 * offset of tap k = (ci*KH+ky)*KW+kx: ci*Hp*SW*Wq + ky*DH*SW*Wq + ((kx*DW)%SW)*Wq + kx*DW/SW.
 * Output row oh, columns ow.. read base = x + oh*SH*SW*Wq + ow. Tiles never cross an output
 * row; a short last tile reads up to ML_NP*ML_NR-1 floats past the row (junk columns that
 * are never stored): the buffer needs that much slack after its last row.
 * a: packed A (M x K, full-K); y: [M][OH*OW]; calls epi per finished output row. */
ML_UNUSED static void ml_conv_direct_rows(int64_t oh0, int64_t oh1, int64_t M, int64_t K,
                                          const float* restrict a,
                                          const int32_t* restrict koff,
                                          const float* restrict x, int64_t SH, int64_t SW,
                                          int64_t Wq, int64_t OH, int64_t OW,
                                          const float* restrict bias, float* restrict y,
                                          ml_epi_fn epi, void* epi_out, int64_t epi_b,
                                          int64_t epi_m0) {
    int64_t ohw = OH * OW;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
        const float* row = x + oh * SH * SW * Wq;
        for (int64_t ow = 0; ow < OW; ow += ML_NP * ML_NR) {
            int nr = (int)ML_MIN(ML_NP * ML_NR, OW - ow);
            /* depth blocks keep the tile's B rows in L1 across the row panels */
            for (int64_t k0 = 0; k0 < K; k0 += ML_KC_DIRECT) {
                int64_t kc = ML_MIN(ML_KC_DIRECT, K - k0);
                for (int64_t m = 0; m < M; m += ML_MR) {
                    int mr = (int)ML_MIN(ML_MR, M - m);
                    const float* am = a + (m / ML_MR) * K * ML_MR + k0 * ML_MR;
                    float* c = y + m * ohw + oh * OW + ow;
                    const float* bm = (bias && k0 == 0) ? bias + m : 0;
                    if (nr > ML_NR)
                        ml_ukernel_direct(ML_NP, kc, am, row + ow, koff + k0, c, ohw, mr, nr,
                                          bm, k0 > 0);
                    else
                        ml_ukernel_direct(1, kc, am, row + ow, koff + k0, c, ohw, mr, nr, bm,
                                          k0 > 0);
                }
            }
        }
        if (epi) epi(epi_out, epi_b, epi_m0, epi_m0 + M, oh * OW, (oh + 1) * OW);
    }
}

#ifdef MONOLIB_THREADPOOL_H
typedef struct {
    int64_t M, K, SH, SW, Wq, OH, OW, epi_b, epi_m0, chunk;
    const float* a;
    const int32_t* koff;
    const float *x, *bias;
    float* y;
    ml_epi_fn epi;
    void* epi_out;
} ml_direct_job;

/* Task t of ml_conv_direct: output rows [t*chunk, +chunk). */
static void ml_direct_task(void* ctx, int64_t t, void* scratch) {
    const ml_direct_job* j = (const ml_direct_job*)ctx;
    (void)scratch;
    int64_t oh0 = t * j->chunk, oh1 = ML_MIN(j->OH, oh0 + j->chunk);
    ml_conv_direct_rows(oh0, oh1, j->M, j->K, j->a, j->koff, j->x, j->SH, j->SW, j->Wq, j->OH,
                        j->OW, j->bias, j->y, j->epi, j->epi_out, j->epi_b, j->epi_m0);
}
#endif

/* ml_conv_direct_rows over all OH output rows, split over rows on the thread pool when
 * threadpool.h is included and the split's modelled time beats one thread's
 * (ml_par_split: a row block repeats no set-up). */
ML_UNUSED static void ml_conv_direct(int64_t M, int64_t K, const float* restrict a,
                                     const int32_t* restrict koff, const float* restrict x,
                                     int64_t SH, int64_t SW, int64_t Wq, int64_t OH, int64_t OW,
                                     const float* restrict bias, float* restrict y,
                                     ml_epi_fn epi, void* epi_out, int64_t epi_b,
                                     int64_t epi_m0) {
#ifdef MONOLIB_THREADPOOL_H
    /* rows share no set-up (the weights are read in place): a task costs its rows */
    int64_t tasks = ml_par_split((double)M * K * OH * OW, OH, ML_PAR_TASK_COST);
    if (tasks > 1) {
        int64_t chunk = (OH + tasks - 1) / tasks;
        ml_direct_job j = {M, K, SH, SW, Wq, OH, OW, epi_b, epi_m0, chunk, a, koff, x,
                           bias, y, epi, epi_out};
        ml_parallel_for((OH + chunk - 1) / chunk, ml_direct_task, &j, 0, 0);
        return;
    }
#endif
    ml_conv_direct_rows(0, OH, M, K, a, koff, x, SH, SW, Wq, OH, OW, bias, y, epi, epi_out,
                        epi_b, epi_m0);
}

/* A grouped convolution's GEMMs, one per group: group t is g with A, B, C, the row bias
 * and the epilogue's channel moved t strides on. Where each group's GEMM alone is too
 * small to split (ShuffleNet's group-4 1x1 convs: some 1M multiply-adds each), or the
 * groups are as many as the threads (AlexNet's two 5x5 groups of 48 -> 128 at 27x27:
 * each split in column chunks, 2 threads ran them 1.5x faster than one), the groups
 * themselves are the pool's tasks when that pays (ml_par_split), each packing B into
 * its own thread's scratch (ml_gemm_bbuf_floats); otherwise the groups run in order,
 * each as ml_sgemm_par would. Group results do not depend on the split: bit-identical
 * at any thread count. */
typedef struct {
    ml_gemm_args g;                          /* group 0's call; g.bbuf is the caller's */
    int64_t groups, a_stride, b_stride, c_stride, m_stride;
} ml_conv_groups_job;

static inline ml_gemm_args ml_conv_group_args(const ml_conv_groups_job* j, int64_t t,
                                              float* bbuf) {
    ml_gemm_args a = j->g;
    a.a += t * j->a_stride;
    a.b.p += t * j->b_stride;
    a.c += t * j->c_stride;
    if (a.bias_m) a.bias_m += t * j->m_stride;
    a.epi_m0 += t * j->m_stride;
    a.bbuf = bbuf;
    return a;
}

#ifdef MONOLIB_THREADPOOL_H
static void ml_conv_groups_task(void* ctx, int64_t t, void* scratch) {
    ml_gemm_args a = ml_conv_group_args((const ml_conv_groups_job*)ctx, t, (float*)scratch);
    ml_sgemm(&a);
}
#endif

ML_UNUSED static void ml_conv_groups(const ml_conv_groups_job* j) {
#ifdef MONOLIB_THREADPOOL_H
    /* a group a task: its GEMM whole on one thread (ml_gemm_task_cost), where one group
     * is too small to split or the groups share out evenly over the threads; else each
     * group split as ml_sgemm_par splits it (3 large groups on 2 threads) */
    double each = ml_gemm_task_cost(&j->g, j->g.M, j->g.N);
    if (ml_par_split(each * j->groups, j->groups, ML_PAR_TASK_COST) > 1 &&
        (each < ML_PAR_MIN_WORK || j->groups % ml_num_threads() == 0)) {
        ml_parallel_for(j->groups, ml_conv_groups_task, (void*)j, j->g.bbuf,
                        (size_t)ml_gemm_bbuf_floats(j->g.K, j->g.N) * sizeof(float));
        return;
    }
#endif
    for (int64_t t = 0; t < j->groups; ++t) {
        ml_gemm_args a = ml_conv_group_args(j, t, j->g.bbuf);
        ml_sgemm_par(&a);
    }
}

/* Zero-pad a [C][H][W] image into dst [C][Hp][Wp], the input placed at (PT, PL); input
 * rows/columns past Hp/Wp are dropped (no window reads them). For ML_B_IM2COL. The runs
 * stay loops (rows copied by vectors): gcc made them memset / memmove calls, and on a
 * small map those calls, for a float or two of zeros at each row's ends, were most of
 * the time (half of the padding's in 72 -> 72 1x3 at 30x8). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
ML_UNUSED static void ml_pad_image(int64_t C, int64_t H, int64_t W, int64_t Hp, int64_t Wp, int64_t PT,
                         int64_t PL, const float* restrict x, float* restrict dst) {
    int64_t w0 = ML_MIN(PL, Wp), w1 = ML_MIN(Wp, PL + W);
    for (int64_t c = 0; c < C; ++c)
        for (int64_t r = 0; r < Hp; ++r) {
            float* d = dst + (c * Hp + r) * Wp;
            int64_t ih = r - PT, j = 0;
            if (ih < 0 || ih >= H) {
                for (; j + ML_VW <= Wp; j += ML_VW) *(ml_vf*)(d + j) = (ml_vf){0};
                for (; j < Wp; ++j) d[j] = 0.0f;
                continue;
            }
            const float* s = x + (c * H + ih) * W - PL;
            for (; j < w0; ++j) d[j] = 0.0f;
            for (; j + ML_VW <= w1; j += ML_VW) *(ml_vf*)(d + j) = *(const ml_vf*)(s + j);
            for (; j < w1; ++j) d[j] = s[j];
            for (; j < Wp; ++j) d[j] = 0.0f;
        }
}

/* col2im for ConvTranspose: y[co][oh][ow] += col[(co*KH+ky)*KW+kx][ih*W+iw] where
 * oh = ih*SH - PT + ky*DH, ow = iw*SW - PL + kx*DW, skipping positions outside OH x OW. */
ML_UNUSED static void ml_col2im_add(int64_t CO, int64_t KH, int64_t KW, int64_t H, int64_t W, int64_t OH,
                          int64_t OW, int64_t SH, int64_t SW, int64_t PT, int64_t PL,
                          int64_t DH, int64_t DW, const float* restrict col,
                          float* restrict y) {
    for (int64_t co = 0; co < CO; ++co)
        for (int64_t ky = 0; ky < KH; ++ky)
            for (int64_t kx = 0; kx < KW; ++kx) {
                const float* src = col + ((co * KH + ky) * KW + kx) * H * W;
                float* dst = y + co * OH * OW;
                /* valid iw: 0 <= iw*SW - PL + kx*DW < OW, found once instead of per pixel */
                int64_t off = kx * DW - PL;
                int64_t lo = off < 0 ? (-off + SW - 1) / SW : 0;
                int64_t hi = OW - off > 0 ? (OW - off + SW - 1) / SW : 0;
                if (hi > W) hi = W;
                for (int64_t ih = 0; ih < H; ++ih) {
                    int64_t oh = ih * SH - PT + ky * DH;
                    if (oh < 0 || oh >= OH) continue;
                    float* d = dst + oh * OW;
                    const float* sr = src + ih * W;
                    for (int64_t iw = lo; iw < hi; ++iw) d[iw * SW + off] += sr[iw];
                }
            }
}

/* col2im when the kernel tiles the output exactly (stride == kernel, no pads, no
 * dilation): every output pixel gets one tap, so y = col + bias is written once, row by
 * row, with no initialisation pass and no read of y. This one does rows ih0..ih1-1 of
 * channel co (output rows ih0*KH..ih1*KH-1); ml_col2im_exact below does every channel. */
static inline void ml_col2im_exact_rows(int64_t co, int64_t ih0, int64_t ih1, int64_t CO,
                                        int64_t KH, int64_t KW, int64_t H, int64_t W,
                                        const float* restrict col, const float* restrict bias,
                                        float* restrict y) {
    (void)CO;
    int64_t OW = W * KW;
    float b = bias ? bias[co] : 0.0f;
    for (int64_t ih = ih0; ih < ih1; ++ih)
        for (int64_t ky = 0; ky < KH; ++ky) {
            float* d = y + (co * H * KH + ih * KH + ky) * OW;
            const float* src = col + ((co * KH + ky) * KW) * H * W + ih * W;
            for (int64_t iw = 0; iw < W; ++iw)
                for (int64_t kx = 0; kx < KW; ++kx) d[iw * KW + kx] = src[kx * H * W + iw] + b;
        }
}

ML_UNUSED static void ml_col2im_exact(int64_t CO, int64_t KH, int64_t KW, int64_t H, int64_t W,
                            const float* restrict col, const float* restrict bias,
                            float* restrict y) {
    for (int64_t co = 0; co < CO; ++co) ml_col2im_exact_rows(co, 0, H, CO, KH, KW, H, W, col, bias, y);
}

/* Padding the input of a convolution: C channels split over the thread pool when large
 * (memory-bound: each float written counts as a few multiply-adds). kind 0: phase-split
 * planes of ml_dw_pad_plane (plane floats apart); kind 1: ml_pad_image. */
typedef struct {
    int kind;
    int64_t C, H, W, Hp, Wp, SW, Wq, PT, PL, plane, chunk;
    const float* x;
    float* dst;
} ml_pad_job;

static void ml_pad_task(void* ctx, int64_t t, void* scratch) {
    const ml_pad_job* j = (const ml_pad_job*)ctx;
    (void)scratch;
    int64_t c0 = t * j->chunk, c1 = ML_MIN(j->C, c0 + j->chunk);
    for (int64_t c = c0; c < c1; ++c)
        if (j->kind == 0)
            ml_dw_pad_plane(j->x + c * j->H * j->W, j->H, j->W, j->Hp, j->Wp, j->SW, j->Wq,
                            j->PT, j->PL, j->dst + c * j->plane);
        else
            ml_pad_image(1, j->H, j->W, j->Hp, j->Wp, j->PT, j->PL, j->x + c * j->H * j->W,
                         j->dst + c * j->Hp * j->Wp);
}

static void ml_pad_run(ml_pad_job* j) {
    int64_t tasks = 1;
#ifdef MONOLIB_THREADPOOL_H
    tasks = ml_par_split(ML_PAR_FLOAT_COST * j->C * j->plane, j->C, ML_PAR_TASK_COST);
#endif
    j->chunk = (j->C + tasks - 1) / tasks;
#ifdef MONOLIB_THREADPOOL_H
    if (tasks > 1) {
        ml_parallel_for((j->C + j->chunk - 1) / j->chunk, ml_pad_task, j, 0, 0);
        return;
    }
#endif
    ml_pad_task(j, 0, 0);
}

/* ml_dw_pad_plane of channels 0..C-1 of x ([C][H][W]) into planes `plane` floats apart. */
ML_UNUSED static void ml_pad_planes(int64_t C, const float* restrict x, int64_t H, int64_t W,
                                    int64_t Hp, int64_t Wp, int64_t SW, int64_t Wq, int64_t PT,
                                    int64_t PL, float* restrict dst, int64_t plane) {
    ml_pad_job j = {0, C, H, W, Hp, Wp, SW, Wq, PT, PL, plane, 0, x, dst};
    ml_pad_run(&j);
}

/* ml_pad_image, channels split over the thread pool when large. */
ML_UNUSED static void ml_pad_image_par(int64_t C, int64_t H, int64_t W, int64_t Hp, int64_t Wp,
                                       int64_t PT, int64_t PL, const float* restrict x,
                                       float* restrict dst) {
    ml_pad_job j = {1, C, H, W, Hp, Wp, 1, 0, PT, PL, Hp * Wp, 0, x, dst};
    ml_pad_run(&j);
}

typedef struct {
    int64_t CO, KH, KW, H, W, pieces, rows, epi_b, epi_m0;
    const float *col, *bias;
    float* y;
    ml_epi_fn epi;
    void* epi_out;
} ml_col2im_job;

/* Task t: channel t / pieces, input rows [(t % pieces) * rows, +rows), then the epilogue
 * on the output rows written (disjoint from every other task's). */
static void ml_col2im_task(void* ctx, int64_t t, void* scratch) {
    const ml_col2im_job* j = (const ml_col2im_job*)ctx;
    (void)scratch;
    int64_t co = t / j->pieces, ih0 = (t % j->pieces) * j->rows;
    int64_t ih1 = ML_MIN(j->H, ih0 + j->rows), OW = j->W * j->KW;
    if (ih0 >= ih1) return;
    ml_col2im_exact_rows(co, ih0, ih1, j->CO, j->KH, j->KW, j->H, j->W, j->col, j->bias, j->y);
    if (j->epi)
        j->epi(j->epi_out, j->epi_b, j->epi_m0 + co, j->epi_m0 + co + 1, ih0 * j->KH * OW,
               ih1 * j->KH * OW);
}

/* ml_col2im_exact followed by the tile epilogue on channels epi_m0..epi_m0+CO-1 (view
 * [B, M, OH*OW]), split over channels and row blocks on the thread pool when
 * threadpool.h is included (one task otherwise). */
ML_UNUSED static void ml_col2im_exact_epi(int64_t CO, int64_t KH, int64_t KW, int64_t H,
                                          int64_t W, const float* restrict col,
                                          const float* restrict bias, float* restrict y,
                                          ml_epi_fn epi, void* epi_out, int64_t epi_b,
                                          int64_t epi_m0) {
    int64_t pieces = 1;
#ifdef MONOLIB_THREADPOOL_H
    /* memory-bound: each output float read from col and written (epilogue aside) */
    int64_t tasks = ml_par_split(ML_PAR_FLOAT_COST * CO * H * KH * W * KW, CO * H,
                                 ML_PAR_TASK_COST);
    if (tasks > CO) pieces = (tasks + CO - 1) / CO;
#endif
    ml_col2im_job j = {CO, KH, KW, H, W, pieces, (H + pieces - 1) / pieces, epi_b, epi_m0,
                       col, bias, y, epi, epi_out};
#ifdef MONOLIB_THREADPOOL_H
    if (tasks > 1) {
        ml_parallel_for(CO * pieces, ml_col2im_task, &j, 0, 0);
        return;
    }
#endif
    for (int64_t t = 0; t < CO * pieces; ++t) ml_col2im_task(&j, t, 0);
}

/* Pixels as GEMM rows (small images): gemm.h's packed A (full-K panels of ML_MR rows)
 * straight from an already padded [C][Hp][Wp] image (every read in range): row p = oh*OW +
 * ow, column k = (ci*KH + ky)*KW + kx holds x[ci][oh*SH + ky*DH][ow*SW + kx*DW]; rows past
 * OH*OW are zero. One gather of ML_MR pixels per k through offsets found once per panel
 * (no im2col matrix, no second copy). dst: ceil(OH*OW / ML_MR) * ML_MR * C*KH*KW floats.
 * This one packs the panels of rows [p0, p1) (p0 a multiple of ML_MR). */
static void ml_pack_a_im2col_rows(const float* restrict x, int64_t C, int64_t Hp, int64_t Wp,
                                  int64_t KH, int64_t KW, int64_t SH, int64_t SW, int64_t DH,
                                  int64_t DW, int64_t OH, int64_t OW, int64_t p0, int64_t p1,
                                  float* restrict dst) {
    const int64_t K = C * KH * KW;
    for (; p0 < p1; p0 += ML_MR) {
        float* d = dst + (p0 / ML_MR) * K * ML_MR;
        int64_t off[ML_MR];
        int n = (int)ML_MIN(ML_MR, OH * OW - p0);
        for (int r = 0; r < ML_MR; ++r) {
            int64_t q = p0 + (r < n ? r : 0);
            off[r] = (q / OW) * SH * Wp + (q % OW) * SW;
        }
        /* the panel within one output row, stride 1: ML_MR consecutive floats per k */
        const int run = n == ML_MR && SW == 1 && off[ML_MR - 1] == off[0] + ML_MR - 1;
        for (int64_t ci = 0; ci < C; ++ci)
            for (int64_t ky = 0; ky < KH; ++ky)
                for (int64_t kx = 0; kx < KW; ++kx, d += ML_MR) {
                    const float* s = x + (ci * Hp + ky * DH) * Wp + kx * DW;
                    if (run)
                        for (int r = 0; r < ML_MR; ++r) d[r] = s[off[0] + r];
                    else if (n == ML_MR)
                        for (int r = 0; r < ML_MR; ++r) d[r] = s[off[r]];
                    else
                        for (int r = 0; r < ML_MR; ++r) d[r] = r < n ? s[off[r]] : 0.0f;
                }
    }
}

/* y[m][p] = t[p][m] (P x M -> M x P) for m in [m0, m1), in 16 x 16 blocks: both sides
 * stay in cache lines. */
static void ml_transpose_pm_cols(int64_t P, int64_t M, int64_t m0, int64_t m1,
                                 const float* restrict t, float* restrict y) {
    for (int64_t p0 = 0; p0 < P; p0 += 16)
        for (int64_t mb = m0; mb < m1; mb += 16) {
            int64_t pe = ML_MIN(P, p0 + 16), me = ML_MIN(m1, mb + 16);
            /* in registers, ML_VW x ML_VW blocks at every width: 4x the scalar copy at
             * 16 floats; on AVX2 the scalar copy made pixels-as-rows' transpose cost 15x
             * Zen 4's per float (conv_cost) */
            if (pe - p0 == 16 && me - mb == 16) {
                for (int pi = 0; pi < 16; pi += ML_VW)
                    for (int mi = 0; mi < 16; mi += ML_VW) {
                        ml_vf r[ML_VW];
                        for (int i = 0; i < ML_VW; ++i)
                            r[i] = *(const ml_vf*)(t + (p0 + pi + i) * M + mb + mi);
                        ml_transpose_vw(r);
                        for (int i = 0; i < ML_VW; ++i)
                            *(ml_vf*)(y + (mb + mi + i) * P + p0 + pi) = r[i];
                    }
                continue;
            }
            for (int64_t m = mb; m < me; ++m)
                for (int64_t p = p0; p < pe; ++p) y[m * P + p] = t[p * M + m];
        }
}

/* The two copies of the pixels-as-rows path split over the thread pool when large
 * (memory-bound: a float counts as a few multiply-adds): the gather by panels, the
 * transpose by 16-channel blocks. Serial, they were what kept a 7x7 map's 3x3 conv
 * from halving on 2 threads (the GEMM between them splits). Copies: same bits at any
 * split. kind 0: gather, 1: transpose (2: into 16-channel blocks; 3: none, the epilogue
 * alone), then the fused epilogue (epi, when not NULL)
 * on the block's channels while they are in L1, in the same task (it ran after the
 * whole transpose, on one thread). */
typedef struct {
    int kind;
    const float* x;
    int64_t C, Hp, Wp, KH, KW, SH, SW, DH, DW, OH, OW, M, chunk;
    float* dst;
    ml_epi_fn epi;
    void* epi_out;
    int64_t epi_b;
} ml_pixrows_job;

static void ml_pixrows_task(void* ctx, int64_t t, void* scratch) {
    const ml_pixrows_job* j = (const ml_pixrows_job*)ctx;
    (void)scratch;
    if (j->kind == 0) {
        int64_t P = j->OH * j->OW, p0 = t * j->chunk, p1 = ML_MIN(P, p0 + j->chunk);
        ml_pack_a_im2col_rows(j->x, j->C, j->Hp, j->Wp, j->KH, j->KW, j->SH, j->SW, j->DH,
                              j->DW, j->OH, j->OW, p0, p1, j->dst);
    } else if (j->kind == 1) {
        int64_t m0 = t * j->chunk, m1 = ML_MIN(j->M, m0 + j->chunk);
        ml_transpose_pm_cols(j->OH, j->M, m0, m1, j->x, j->dst);
        if (j->epi) j->epi(j->epi_out, j->epi_b, m0, m1, 0, j->OH);
    } else if (j->kind == 3) { /* the epilogue alone, on blocks the GEMM wrote */
        int64_t m0 = t * j->chunk, m1 = ML_MIN(j->M, m0 + j->chunk);
        j->epi(j->epi_out, j->epi_b, 0, 1, m0 * j->OH, m1 * j->OH);
    } else { /* channel-blocked: block m/16 of pixel p is row p of t's 16 columns there */
        int64_t P = j->OH, M = j->M, m0 = t * j->chunk, m1 = ML_MIN(M, m0 + j->chunk);
        for (int64_t mb = m0; mb < m1; mb += 16)
            for (int64_t p = 0; p < P; ++p)
                for (int v = 0; v < 16; v += ML_VW)
                    *(ml_vf*)(j->dst + mb * P + p * 16 + v) = *(const ml_vf*)(j->x + p * M + mb + v);
        /* the blocks are one flat run: the chain has no side inputs */
        if (j->epi) j->epi(j->epi_out, j->epi_b, 0, 1, m0 * P, m1 * P);
    }
}

/* Run j over `units` units of `unit` items each (the chunk a multiple of it). */
static void ml_pixrows_run(ml_pixrows_job* j, int64_t units, int64_t unit, double floats) {
    int64_t tasks = 1;
#ifdef MONOLIB_THREADPOOL_H
    tasks = ml_par_split(ML_PAR_FLOAT_COST * floats, units, ML_PAR_TASK_COST);
#endif
    j->chunk = (units + tasks - 1) / tasks * unit;
    int64_t n = (units * unit + j->chunk - 1) / j->chunk;
#ifdef MONOLIB_THREADPOOL_H
    if (n > 1) {
        ml_parallel_for(n, ml_pixrows_task, j, 0, 0);
        return;
    }
#endif
    for (int64_t t = 0; t < n; ++t) ml_pixrows_task(j, t, 0);
}

ML_UNUSED static void ml_pack_a_im2col(const float* restrict x, int64_t C, int64_t Hp,
                                       int64_t Wp, int64_t KH, int64_t KW, int64_t SH,
                                       int64_t SW, int64_t DH, int64_t DW, int64_t OH,
                                       int64_t OW, float* restrict dst) {
    ml_pixrows_job j = {0, x, C, Hp, Wp, KH, KW, SH, SW, DH, DW, OH, OW, 0, 0, dst, 0, 0, 0};
    int64_t panels = (OH * OW + ML_MR - 1) / ML_MR;
    ml_pixrows_run(&j, panels, ML_MR, (double)panels * ML_MR * C * KH * KW);
}

/* t (P x M) into y channel-blocked (NCHW16c: [M/16][P][16], M a multiple of 16; the
 * depthwise conv after reads it so, backends/c/layout.py), then the epilogue on each
 * block's flat run (a chain without side inputs). */
ML_UNUSED static void ml_block_pm(int64_t P, int64_t M, const float* restrict t,
                                  float* restrict y, ml_epi_fn epi, void* epi_out,
                                  int64_t epi_b) {
    ml_pixrows_job j = {2, t, 0, 0, 0, 0, 0, 0, 0, 0, 0, P, 1, M, 0, y, epi, epi_out, epi_b};
    ml_pixrows_run(&j, M / 16, 16, (double)P * M);
}

/* The epilogue on y, channel-blocked [M/16][P][16] (a pixels-as-rows GEMM stored it so
 * itself): on each 16-channel block's flat run, the blocks split over the pool. */
ML_UNUSED static void ml_block_epilogue(int64_t P, int64_t M, float* restrict y,
                                        ml_epi_fn epi, void* epi_out, int64_t epi_b) {
    if (!epi) return;
    ml_pixrows_job j = {3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, P, 1, M, 0, y, epi, epi_out, epi_b};
    ml_pixrows_run(&j, M / 16, 16, (double)P * M);
}

/* y[m][p] = t[p][m] (P x M -> M x P), then epi(epi_out, epi_b, m0, m1, 0, P) on each
 * block of channels just written (epi NULL: none). */
ML_UNUSED static void ml_transpose_pm(int64_t P, int64_t M, const float* restrict t,
                                      float* restrict y, ml_epi_fn epi, void* epi_out,
                                      int64_t epi_b) {
    /* OH carries P; the units are 16-channel blocks */
    ml_pixrows_job j = {1, t, 0, 0, 0, 0, 0, 0, 0, 0, 0, P, 1, M, 0, y, epi, epi_out, epi_b};
    ml_pixrows_run(&j, (M + 15) / 16, 16, (double)P * M);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_CONV_H */
