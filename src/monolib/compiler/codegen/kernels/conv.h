/* conv.h -- direct depthwise convolution and col2im (monolib kernel library).
 *
 * Needs gemm.h (ml_vf, ML_VW, ml_epi_fn) before it.
 *
 * Depthwise (ONNX Conv with group == C_in == C_out), NCHW, one image:
 *   y[c][oh][ow] = bias[c] + sum_{ky,kx} w[c][ky][kx] * x[c][oh*SH-PT+ky*DH][ow*SW-PL+kx*DW]
 * Each channel is first copied into a zero-padded plane split into SW column phases
 * (phase p holds padded columns p, p+SW, ...), so every tap reads a contiguous run and the
 * inner loop is stride-1 vector loads for any stride. The plane is scratch, reused per
 * channel; the epilogue is applied per finished channel while it is still in cache.
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

/* Copy channel x (H x W) into the phase-split padded plane: Hp rows of SW*Wq floats. */
static inline void ml_dw_pad_plane(const float* restrict x, int64_t H, int64_t W, int64_t Hp,
                                   int64_t Wp, int64_t SW, int64_t Wq, int64_t PT, int64_t PL,
                                   float* restrict plane) {
    for (int64_t r = 0; r < Hp; ++r) {
        float* dst = plane + r * SW * Wq;
        int64_t ih = r - PT;
        if (ih < 0 || ih >= H) {
            for (int64_t i = 0; i < SW * Wq; ++i) dst[i] = 0.0f;
            continue;
        }
        const float* src = x + ih * W;
        if (SW == 1) {
            int64_t j = 0;
            for (; j < PL && j < Wp; ++j) dst[j] = 0.0f;
            for (; j < Wp && j - PL < W; ++j) dst[j] = src[j - PL];
            for (; j < Wq; ++j) dst[j] = 0.0f;
            continue;
        }
        /* phase p holds padded columns j = q*SW + p; input column iw = j - PL */
        int64_t jend = ML_MIN(Wp, W + PL);
        for (int64_t p = 0; p < SW; ++p) {
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
}

/* One output row: OW outputs from the plane rows starting at `in` (row stride rs). */
ML_INLINE void ml_dw_row(const int KH, const int KW, const int SW, const int DH, const int DW,
                         int64_t OW, int64_t Wq, int64_t rs, const float* restrict in,
                         const float* restrict w, float b, float* restrict y) {
    int64_t ow = 0;
    for (; ow + 2 * ML_VW <= OW; ow += 2 * ML_VW) {
        ml_vf a0 = b - (ml_vf){0}, a1 = a0;
        for (int ky = 0; ky < KH; ++ky)
            for (int kx = 0; kx < KW; ++kx) {
                const float* p = in + ky * DH * rs + ((kx * DW) % SW) * Wq + (kx * DW) / SW + ow;
                float wv = w[ky * KW + kx];
                a0 += wv * *(const ml_vf*)p;
                a1 += wv * *(const ml_vf*)(p + ML_VW);
            }
        *(ml_vf*)(y + ow) = a0;
        *(ml_vf*)(y + ow + ML_VW) = a1;
    }
    for (; ow < OW; ++ow) {
        float a = b;
        for (int ky = 0; ky < KH; ++ky)
            for (int kx = 0; kx < KW; ++kx)
                a += w[ky * KW + kx] *
                     in[ky * DH * rs + ((kx * DW) % SW) * Wq + (kx * DW) / SW + ow];
        y[ow] = a;
    }
}

/* One channel: all OH rows (rows of the plane advance by SH). */
ML_INLINE void ml_dw_channel(const int KH, const int KW, const int SH, const int SW,
                             const int DH, const int DW, int64_t OH, int64_t OW, int64_t Wq,
                             const float* restrict plane, const float* restrict w, float b,
                             float* restrict y) {
    int64_t rs = SW * Wq;
    for (int64_t oh = 0; oh < OH; ++oh)
        ml_dw_row(KH, KW, SW, DH, DW, OW, Wq, rs, plane + oh * SH * rs, w, b, y + oh * OW);
}

/* Depthwise conv of channels c0..c1-1 of one NCHW image (a thread pool may split the
 * channels; each part needs its own plane). w: [C][KH][KW]; bias: [C] or NULL; plane:
 * scratch of ml_dw_plane_floats(...) floats. Calls epi(epi_out, epi_b, c, c+1, 0, OH*OW)
 * per channel. */
ML_UNUSED static void ml_dwconv2d_channels(int64_t c0, int64_t c1, int64_t H, int64_t W,
                                           int64_t OH, int64_t OW, int KH, int KW, int SH,
                                           int SW, int64_t PT, int64_t PL, int DH, int DW,
                                           const float* restrict x, const float* restrict w,
                                           const float* restrict bias, float* restrict y,
                                           float* restrict plane, ml_epi_fn epi,
                                           void* epi_out, int64_t epi_b) {
    int64_t Hp = (OH - 1) * SH + (KH - 1) * DH + 1;
    int64_t Wp = (OW - 1) * SW + (KW - 1) * DW + 1;
    int64_t Wq = (Wp + SW - 1) / SW + 2 * ML_VW; /* slack: vector reads stay inside */
    for (int64_t c = c0; c < c1; ++c) {
        const float* wc = w + c * KH * KW;
        float b = bias ? bias[c] : 0.0f;
        float* yc = y + c * OH * OW;
        ml_dw_pad_plane(x + c * H * W, H, W, Hp, Wp, SW, Wq, PT, PL, plane);
        /* constant shapes let the compiler unroll the taps of the common cases */
        if (DH == 1 && DW == 1 && KH == 3 && KW == 3 && SH == 1 && SW == 1)
            ml_dw_channel(3, 3, 1, 1, 1, 1, OH, OW, Wq, plane, wc, b, yc);
        else if (DH == 1 && DW == 1 && KH == 3 && KW == 3 && SW == 2)
            ml_dw_channel(3, 3, SH, 2, 1, 1, OH, OW, Wq, plane, wc, b, yc);
        else if (DH == 1 && DW == 1 && KH == 3 && KW == 3 && SW == 1)
            ml_dw_channel(3, 3, SH, 1, 1, 1, OH, OW, Wq, plane, wc, b, yc);
        else if (DH == 1 && DW == 1 && KH == 5 && KW == 5 && SW == 1)
            ml_dw_channel(5, 5, SH, 1, 1, 1, OH, OW, Wq, plane, wc, b, yc);
        else if (DH == 1 && DW == 1 && KH == 5 && KW == 5 && SW == 2)
            ml_dw_channel(5, 5, SH, 2, 1, 1, OH, OW, Wq, plane, wc, b, yc);
        else
            ml_dw_channel(KH, KW, SH, SW, DH, DW, OH, OW, Wq, plane, wc, b, yc);
        if (epi) epi(epi_out, epi_b, c, c + 1, 0, OH * OW);
    }
}

#ifdef MONOLIB_THREADPOOL_H
typedef struct {
    int64_t C, H, W, OH, OW, PT, PL, chunk, epi_b;
    int KH, KW, SH, SW, DH, DW;
    const float *x, *w, *bias;
    float* y;
    ml_epi_fn epi;
    void* epi_out;
} ml_dw_job;

/* Task t of ml_dwconv2d: channels [t*chunk, +chunk), scratch is the thread's plane. */
static void ml_dw_task(void* ctx, int64_t t, void* scratch) {
    const ml_dw_job* j = (const ml_dw_job*)ctx;
    int64_t c0 = t * j->chunk, c1 = ML_MIN(j->C, c0 + j->chunk);
    ml_dwconv2d_channels(c0, c1, j->H, j->W, j->OH, j->OW, j->KH, j->KW, j->SH, j->SW, j->PT,
                         j->PL, j->DH, j->DW, j->x, j->w, j->bias, j->y, (float*)scratch,
                         j->epi, j->epi_out, j->epi_b);
}
#endif

static inline int64_t ml_dw_plane_floats(int64_t OH, int64_t OW, int KH, int KW, int SH, int SW,
                                         int DH, int DW);

/* Depthwise conv of one NCHW image, all C channels (see ml_dwconv2d_channels); split
 * over channels on the thread pool when threadpool.h is included and the work is large. */
ML_UNUSED static void ml_dwconv2d(int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                  int KH, int KW, int SH, int SW, int64_t PT, int64_t PL,
                                  int DH, int DW, const float* restrict x,
                                  const float* restrict w, const float* restrict bias,
                                  float* restrict y, float* restrict plane, ml_epi_fn epi,
                                  void* epi_out, int64_t epi_b) {
#ifdef MONOLIB_THREADPOOL_H
    int64_t tasks = ml_par_tasks((double)C * OH * OW * KH * KW, C);
    if (tasks > 1) {
        int64_t chunk = (C + tasks - 1) / tasks;
        ml_dw_job j = {C, H, W, OH, OW, PT, PL, chunk, epi_b, KH, KW, SH, SW, DH, DW,
                       x, w, bias, y, epi, epi_out};
        size_t bytes = 4 * (size_t)ml_dw_plane_floats(OH, OW, KH, KW, SH, SW, DH, DW);
        ml_parallel_for((C + chunk - 1) / chunk, ml_dw_task, &j, plane, bytes);
        return;
    }
#endif
    ml_dwconv2d_channels(0, C, H, W, OH, OW, KH, KW, SH, SW, PT, PL, DH, DW, x, w, bias, y,
                         plane, epi, epi_out, epi_b);
}

/* Floats of scratch ml_dwconv2d needs. */
static inline int64_t ml_dw_plane_floats(int64_t OH, int64_t OW, int KH, int KW, int SH, int SW,
                                         int DH, int DW) {
    int64_t Hp = (OH - 1) * SH + (KH - 1) * DH + 1;
    int64_t Wp = (OW - 1) * SW + (KW - 1) * DW + 1;
    return Hp * SW * ((Wp + SW - 1) / SW + 2 * ML_VW);
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
 * threadpool.h is included and the work is large. */
ML_UNUSED static void ml_conv_direct(int64_t M, int64_t K, const float* restrict a,
                                     const int32_t* restrict koff, const float* restrict x,
                                     int64_t SH, int64_t SW, int64_t Wq, int64_t OH, int64_t OW,
                                     const float* restrict bias, float* restrict y,
                                     ml_epi_fn epi, void* epi_out, int64_t epi_b,
                                     int64_t epi_m0) {
#ifdef MONOLIB_THREADPOOL_H
    int64_t tasks = ml_par_tasks((double)M * K * OH * OW, OH);
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

/* Zero-pad a [C][H][W] image into dst [C][Hp][Wp], the input placed at (PT, PL); input
 * rows/columns past Hp/Wp are dropped (no window reads them). For ML_B_IM2COL. */
ML_UNUSED static void ml_pad_image(int64_t C, int64_t H, int64_t W, int64_t Hp, int64_t Wp, int64_t PT,
                         int64_t PL, const float* restrict x, float* restrict dst) {
    int64_t w0 = ML_MIN(PL, Wp), w1 = ML_MIN(Wp, PL + W);
    for (int64_t c = 0; c < C; ++c)
        for (int64_t r = 0; r < Hp; ++r) {
            float* d = dst + (c * Hp + r) * Wp;
            int64_t ih = r - PT;
            if (ih < 0 || ih >= H) {
                memset(d, 0, Wp * sizeof(float));
                continue;
            }
            const float* s = x + (c * H + ih) * W - PL;
            int64_t j = 0;
            for (; j < w0; ++j) d[j] = 0.0f;
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
    tasks = ml_par_tasks(4.0 * j->C * j->plane, j->C);
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
    /* memory-bound: count each output float as a few multiply-adds of work */
    int64_t tasks = ml_par_tasks(8.0 * CO * H * KH * W * KW, CO * H);
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
    for (int r = 0; r < mr; ++r) {
        int64_t m = m0 + r, co = m / (KH * KW), ky = (m / KW) % KH, kx = m % KW;
        float bb = bias ? bias[co] : 0.0f;
        float* d = y + co * OHW + (ih * KH + ky) * OW + iw0 * KW + kx;
        for (int j = 0; j < nr; ++j) d[j * KW] = t[r][j] + bb;
    }
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
#endif /* MONOLIB_CONV_H */
