/* gemm.h -- packed, cache-blocked single-precision GEMM (monolib kernel library).
 *
 * C[M,N] = alpha * A[M,K] B[K,N] (+ row bias, + column bias, or + C), then an optional
 * tile epilogue on each finished block. Follows the GotoBLAS/BLIS structure: loops over
 * NC columns, KC depth, MC rows around a register-blocked micro-kernel of ML_MR rows x
 * ML_NP*ML_NR columns, written with GCC vector extensions so it compiles everywhere and
 * maps to AVX-512 (2 panels of 16 = 12 zmm accumulators), AVX2 (1 panel = 12 ymm) or SSE.
 *
 * Layouts (floats):
 *   packed A  ("full-K"): panel p (rows p*MR..p*MR+MR-1) at a + p*K*MR, element (r, k) at
 *             [k*MR + r]; rows past M are zero. Weights are packed this way at compile time.
 *   packed B  panel q (columns q*NR..q*NR+NR-1): element (k, c) at [k*NR + c]; columns past
 *             N are zero. Either prepacked full-K (panel stride K*NR) or packed per block
 *             at run time from an ml_bsrc (strided matrix or implicit im2col).
 *   unpacked A (a_raw): A[m][k] = a_raw[m*lda + k], broadcast straight from the rows by
 *             the micro-kernel: a run-time A costs no packing pass; with a_cm
 *             column-major, A[m][k] = a_raw[k*lda + m] (an NCHW image as pixels x
 *             channels: conv_pixel_rows.py); with a_cm == 2 channel-blocked,
 *             A[m][k] = a_raw[(k/16)*lda + m*16 + k%16] (an NCHW16c image, lda = 16 *
 *             pixels: a depthwise conv's output, backends/c/layout.py).
 * Fewer than MR rows against a run-time B with unit column stride (a GEMV) skip the
 * tiling: ml_gemm_small_m reads B in place; against a prepacked B they stream each panel
 * pair over the whole K. A packed A against at most ML_GEMV_NMAX columns (ml_sgemv_pa)
 * or a tail of that many past the last whole panel (ml_gemm_tail_cols) is summed as
 * whole vectors of A's panels, not one broadcast per element. ml_sgemm_par splits a
 * GEMM over the pool by the grid of column ranges and row blocks with the least
 * estimated finish time (ml_gemm_split). ml_sgemm_batch runs a batch of equal GEMMs.
 * Everything is re-entrant: a caller may split [n_begin, n_end) across threads, each with
 * its own B block buffer.
 */
#ifndef MONOLIB_GEMM_H
#define MONOLIB_GEMM_H
/* gcc warns about loops it proves dead after inlining constant shapes (a known false
 * positive); keep the generated build quiet. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
#endif
#include <stdint.h>
#include <string.h>

#define ML_MR 6
#define ML_NR 16
/* ML_VW (floats per vector) and ML_NP (16-column panels per micro-tile) follow the ISA;
 * a build may set both (tests run the AVX-512 tiling, ML_NP 2, on AVX2 machines). */
#if defined(ML_VW) && defined(ML_NP)
#elif defined(__AVX512F__)
#define ML_VW 16
#define ML_NP 2
#elif defined(__AVX__)
#define ML_VW 8
#define ML_NP 1
#else
#define ML_VW 4
#define ML_NP 1
#endif
#define ML_NV (ML_NR / ML_VW)
/* KC 128 (the B micro-panel in half of a 32 KB L1d) measured no faster than 256 on
 * Zen 4 (bench/matmul.py, [128,768]x[768,768] and [128,768]x[768,3072]) */
#define ML_KC 256
#define ML_MC 144
#define ML_NC 1024
/* B read in place where it is row-major (ml_sgemm_impl), for K within one KC block and at
 * most ML_B_INPLACE_MAXM rows of A. Measured on Zen 4, 1 thread: 1x1 convs of 16-256
 * input channels into 32-256 outputs (K <= 256) 3-14% faster, 512 -> 512 at 7x7 the same;
 * but over several KC blocks a tile reads 256 rows far apart each pass, which the
 * prefetchers do not follow: [256,512]x[512,2048] 6% and [32,1024]x[1024,8210] 22% slower,
 * 1024^3 12% (there the copy into panels is what keeps B streaming). */
#ifndef ML_B_INPLACE
#define ML_B_INPLACE 1
#endif
/* ... past one KC block too where the columns' K rows fit in L2 (bytes; conv_cost.py's
 * L2_BYTES): their rows are a few KB apart, which the prefetchers follow, and the packing
 * copy is saved. Zen 4, 1 thread, 1x1 convs: 576->96 at 14x14 0.220 -> 0.203 ms, 384->64
 * at 14x14 0.104 -> 0.093, 288->64 at 28x28 0.291 -> 0.256, 512->128 at 20x20 0.489 ->
 * 0.460, 960->320 at 7x7 the same (MobileNetV2's projections). Larger B measured
 * within noise either way (512->256 at 50x50, 1024->256 at 45x45), so it stops here. */
#ifndef ML_B_INPLACE_L2
#define ML_B_INPLACE_L2 (1 << 20)
#endif
#ifndef ML_B_INPLACE_MAXM
#define ML_B_INPLACE_MAXM 256
#endif
/* ... and not where B's rows are a multiple of this many bytes apart: a tile's rows then
 * share a few L1 sets and evict each other (a 64x64 map's 1x1 conv 4%, 128x128 and
 * 160x160 20% slower in place; 80x80, 56x56, 40x40, 28x28 1x1 convs 6-14% faster) */
#ifndef ML_B_INPLACE_ALIAS
#define ML_B_INPLACE_ALIAS 2048
#endif
#define ML_GEMV_NMAX 4 /* most columns ml_sgemv_pa takes */
/* The fused epilogue runs on a block's tiles every this many columns, as they finish
 * (a multiple of ML_NP * ML_NR): over a whole block (up to ML_MC x ML_NC) after it, it
 * read the block back from L2. Zen 4, 1 thread: a 16 -> 32 1x1 conv + Relu at 120x160
 * (2.4 MB out) took 268 us against 240 without the Relu. */
#ifndef ML_EPI_COLS
#define ML_EPI_COLS 128
#endif
#define ML_MIN(a, b) ((a) < (b) ? (a) : (b))
#define ML_MAX(a, b) ((a) > (b) ? (a) : (b))
#define ML_INLINE static inline __attribute__((always_inline))
#define ML_UNUSED __attribute__((unused)) /* not every model calls every kernel */
/* One out-of-line copy of a rarely run path (tile edges, tails) shared by every
 * specialised caller: inlined into each it multiplied gcc's time, not the speed. */
#if defined(__GNUC__) && !defined(__clang__)
#define ML_OUTLINE static __attribute__((noipa, unused))
#else
#define ML_OUTLINE static __attribute__((noinline, unused))
#endif
/* One copy of a hot function, not specialised for its callers' constants. */
#if defined(__GNUC__) && !defined(__clang__)
#define ML_ONE_COPY static __attribute__((noinline, noclone, unused))
#else
#define ML_ONE_COPY static __attribute__((noinline, unused))
#endif

/* aligned(4): the vectors may sit at any float boundary (C rows, bias slices). */
typedef float ml_vf __attribute__((vector_size(ML_VW * 4), aligned(4)));

/* Tile epilogue: applies the fused chain in place to rows m0..m1, columns n0..n1 of
 * batch b of the output viewed as [B, M, N]. */
typedef void (*ml_epi_fn)(void* out, int64_t b, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

enum { ML_B_PACKED = 0, ML_B_STRIDED = 1, ML_B_IM2COL = 2 };

/* Where B comes from. PACKED: p is full-K packed (k_total rows). STRIDED: B[k][n] =
 * p[k*ldk + n*ldn]. IM2COL: B[(ci*KH+ky)*KW+kx][oh*OW+ow] = x[ci][oh*SH+ky*DH][ow*SW+kx*DW]
 * with x = p an already zero-padded [C][H][W] image (every read in range; conv.h's
 * ml_pad_image makes one), so packing is plain copies of runs along the output rows.
 * With img > 0 the columns run over several images img floats apart (n*OH*OW + oh*OW + ow),
 * so a batch of small images makes one wide GEMM. With Wq > 0 (a column stride SW > 1)
 * p is instead the padded image split into SW column phases (conv.h's ml_pad_planes:
 * [C][H][SW][Wq], H the padded rows): a tap's columns are then contiguous in its phase,
 * so packing copies whole vectors instead of gathering every SW-th float. */
typedef struct {
    int kind;
    const float* p;
    int64_t k_total, ldk, ldn;
    int64_t H, W, KH, KW, SH, SW, DH, DW, OH, OW, img, Wq;
} ml_bsrc;

/* One GEMM call: see ml_sgemm. */
typedef struct ml_gemm_args_s {
    int64_t M, N, K;
    const float* a;        /* packed A, full-K layout */
    ml_bsrc b;
    float* c;
    int64_t ldc;
    float alpha;
    int accumulate;        /* add to the existing C instead of overwriting it */
    const float* bias_m;   /* per-row bias (M) or NULL */
    const float* bias_n;   /* per-column bias (N) or NULL */
    float* bbuf;           /* B block buffer, ml_gemm_bbuf_floats() floats, 64-aligned */
    ml_epi_fn epi;         /* NULL: none */
    void* epi_out;
    int64_t epi_b, epi_m0, epi_mrows, epi_n0; /* view offsets; epi_mrows>0 folds batches in M */
    int64_t epi_mfold0;   /* with epi_mrows>0: the global GEMM row of this call's row 0 */
    int64_t n_begin, n_end;                   /* column range to compute (n_begin % 32 == 0) */
    /* Unpacked A (a_raw != NULL, then `a` is unused): A[m][k] = a_raw[m*lda + k]. The
     * micro-kernel broadcasts straight from the rows, so a run-time A costs no packing
     * pass (for a batch of small matrices that pass was a fifth of the time). */
    const float* a_raw;
    int64_t lda;
    /* C channel-blocked (NCHW16c, a pixels-as-rows conv's output): column block j of row m
     * at c + j*ldc_blk + m*16, ldc = 16, columns a multiple of 16; 0: row-major. The tiled
     * path only: M >= MR. */
    int64_t ldc_blk;
    /* a_raw column-major (1): A[m][k] = a_raw[k*lda + m] (the micro-kernel broadcasts a
     * tile's MR rows from one run of MR floats per k); channel-blocked (2): A[m][k] =
     * a_raw[(k/16)*lda + m*16 + k%16]. The tiled path only: M >= MR. */
    int a_cm;
    /* Columns past the last whole panel of a packed A (ml_gemm_tail_cols, set by
     * gemm_call where N % 16 <= 4 so that only those libraries compile it) or NULL. */
    void (*tail)(const struct ml_gemm_args_s* g, int64_t ic, int64_t mc, int64_t pc,
                 int64_t kc, int64_t n0, int rem, const float* b, int load_c);
    /* 1 (gemm_call, M a run-time size such as a batch): never the few-row path for a
     * run-time B, whose sums run in another order, so a row's bits do not depend on
     * how many rows came with it */
    int fixed_order;
} ml_gemm_args;

/* Pack rows m0..m0+M-1 of a strided A (A[m][k] = a[m*ldm + k*ldk]) into full-K panels,
 * zero-padding the last panel. dst holds ceil(M/MR)*MR*K floats. */
static inline void ml_pack_a(int64_t M, int64_t K, const float* a, int64_t ldm, int64_t ldk,
                             float* restrict dst) {
    for (int64_t p = 0; p < M; p += ML_MR) {
        float* d = dst + (p / ML_MR) * K * ML_MR;
        int64_t mr = ML_MIN(ML_MR, M - p);
        for (int64_t k = 0; k < K; ++k) {
            for (int64_t r = 0; r < mr; ++r) d[k * ML_MR + r] = a[(p + r) * ldm + k * ldk];
            for (int64_t r = mr; r < ML_MR; ++r) d[k * ML_MR + r] = 0.0f;
        }
    }
}

#ifdef MONOLIB_THREADPOOL_H
typedef struct {
    int64_t M, K, ldm, ldk, panels_per_task;
    const float* a;
    float* dst;
} ml_pack_a_job;

static void ml_pack_a_task(void* ctx, int64_t t, void* scratch) {
    (void)scratch;
    const ml_pack_a_job* j = (const ml_pack_a_job*)ctx;
    int64_t p0 = t * j->panels_per_task * ML_MR;
    int64_t rows = ML_MIN(j->M - p0, j->panels_per_task * ML_MR);
    ml_pack_a(rows, j->K, j->a + p0 * j->ldm, j->ldm, j->ldk, j->dst + p0 * j->K);
}
#endif

/* ml_pack_a split over panels on the thread pool (an activation A packed at run time
 * is a memory-bound copy as large as the GEMM's input). */
ML_UNUSED static void ml_pack_a_par(int64_t M, int64_t K, const float* a, int64_t ldm,
                                    int64_t ldk, float* restrict dst) {
#ifdef MONOLIB_THREADPOOL_H
    int64_t panels = (M + ML_MR - 1) / ML_MR;
    int64_t tasks = ml_par_split(ML_PAR_FLOAT_COST * (double)M * K, panels, ML_PAR_TASK_COST);
    if (tasks > 1) {
        ml_pack_a_job j = {M, K, ldm, ldk, (panels + tasks - 1) / tasks, a, dst};
        ml_parallel_for((panels + j.panels_per_task - 1) / j.panels_per_task, ml_pack_a_task,
                        &j, 0, 0);
        return;
    }
#endif
    ml_pack_a(M, K, a, ldm, ldk, dst);
}

/* Where im2col row k's taps start: *x at output pixel (0, 0) of image 0, *rs floats per
 * output row, *sw per output column (1 on phase-split planes: a tap's columns are
 * contiguous in its phase). */
static inline void ml_im2col_tap(const ml_bsrc* s, int64_t k, const float** x, int64_t* rs,
                                 int64_t* sw) {
    int64_t kx = k % s->KW, ky = (k / s->KW) % s->KH, ci = k / (s->KW * s->KH);
    if (s->Wq > 0) { /* phase-split planes: tap column c sits in phase c % SW */
        int64_t pw = s->SW * s->Wq, c = kx * s->DW;
        *x = s->p + (ci * s->H + ky * s->DH) * pw + (c % s->SW) * s->Wq + c / s->SW;
        *rs = s->SH * pw;
        *sw = 1;
        return;
    }
    *x = s->p + ci * s->H * s->W + ky * s->DH * s->W + kx * s->DW;
    *rs = s->SH * s->W;
    *sw = s->SW;
}

/* im2col row k of columns n0..n0+nc-1 into dst (panels of NR, kc*NR floats apart),
 * run by run along the output rows (ml_pack_b's whole blocks take ml_pack_im2col_block). */
static inline void ml_pack_im2col_row(const ml_bsrc* s, int64_t k, int64_t n0, int64_t nc,
                                      float* restrict dst, int64_t kc) {
    const float* x;
    int64_t rs, SW;
    ml_im2col_tap(s, k, &x, &rs, &SW);
    int64_t ohw = s->OH * s->OW, img = n0 / ohw;
    int64_t oh = (n0 % ohw) / s->OW, ow = n0 % s->OW;
    for (int64_t j = 0; j < nc;) {
        int64_t run = ML_MIN(s->OW - ow, nc - j); /* stays in one output row */
        if (oh == s->OH) { oh = 0; ++img; }
        const float* src = x + img * s->img + oh * rs + ow * SW;
        for (int64_t t = 0; t < run;) {
            int64_t jj = j + t, r = jj % ML_NR;
            int64_t len = ML_MIN(ML_NR - r, run - t); /* stays in one panel */
            float* d = dst + (jj / ML_NR) * kc * ML_NR + r;
            if (SW == 1 && len == ML_NR) /* the common case: one whole panel row */
                for (int v = 0; v < ML_NV; ++v)
                    *(ml_vf*)(d + v * ML_VW) = *(const ml_vf*)(src + t + v * ML_VW);
            else if (SW == 1)
                for (int64_t i = 0; i < len; ++i) d[i] = src[t + i];
            else
                for (int64_t i = 0; i < len; ++i) d[i] = src[(t + i) * SW];
            t += len;
        }
        j += run;
        ow = 0;
        ++oh;
    }
}

/* Masked vector loads (lanes outside the mask are not read, so a piece at an image's
 * edge reads nothing past it): AVX-512's k masks, AVX2's vmaskmovps. */
#if defined(__AVX512F__) && ML_VW == 16 && defined(__GNUC__)
#define ML_HAVE_MLOAD 1
typedef unsigned short ml_vmask;
static inline ml_vmask ml_vmask_lanes(int lo, int hi) {
    return (ml_vmask)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}
/* v with the lanes of m read from p (v's other lanes kept) */
static inline ml_vf ml_vmask_load(ml_vf v, const float* p, ml_vmask m) {
    return __builtin_ia32_loadups512_mask(p, v, m);
}
#elif defined(__AVX2__) && ML_VW == 8 && defined(__GNUC__)
#define ML_HAVE_MLOAD 1
typedef int32_t ml_vmask __attribute__((vector_size(32)));
static inline ml_vmask ml_vmask_lanes(int lo, int hi) {
    const ml_vmask ix = {0, 1, 2, 3, 4, 5, 6, 7};
    return (ix >= lo) & (ix < hi);
}
static inline ml_vf ml_vmask_load(ml_vf v, const float* p, ml_vmask m) {
    typedef float v8f __attribute__((vector_size(32)));
    return (ml_vf)((ml_vmask)v | (ml_vmask)__builtin_ia32_maskloadps256((const v8f*)p, m));
}
#endif

#ifdef ML_HAVE_MLOAD
/* A block whose rows span more than ML_IM2COL_PF_BYTES of the image streams it from L3
 * or memory: each k row of a panel reads a line of another channel's plane, more streams
 * than the L2 prefetcher follows, so the packing prefetches each row ML_IM2COL_PF floats
 * (two panels) ahead. 48 -> 24 3x3/2 at 320x320 (a 20 MB image) through the GEMM 22.1 ->
 * 17.7 ms on Zen 3; where the rows are in L2 the prefetches cost 2-3%, hence the
 * threshold. */
#ifndef ML_IM2COL_PF
#define ML_IM2COL_PF 32
#endif
#ifndef ML_IM2COL_PF_BYTES
#define ML_IM2COL_PF_BYTES (1 << 20)
#endif
/* ml_pack_b of an im2col B with unit column steps (SW 1 or phase-split planes), panel by
 * panel: each vector of a panel row is the same pieces of output rows for every k (at
 * most ML_VW; lanes past nc are none, so zero), found once, then read at each row's tap
 * offset (one load for a whole vector in one row, else one masked load a piece) and
 * stored in order into the panel. Row by row (ml_pack_im2col_row, with masked loads),
 * the pieces were found again for every k, their branches mispredicted and each row's
 * stores went to every panel kc*NR floats apart: on Zen 3 the packing was 31% of
 * AlexNet's 48 -> 128 5x5 group convs at 27x27 (about 30 cycles per 8 floats). Now
 * that conv 7.1 -> 6.0 ms at 1 thread, 5.2 -> 3.4 at 2; 64 -> 64 3x3 at 56x56
 * 4.0 -> 3.3; 24 -> 12 2x2 at 320x320 (planes far apart: kc pages a panel) 13 -> 11. */
static inline void ml_pack_im2col_block(const ml_bsrc* s, int64_t k0, int64_t kc, int64_t n0,
                                        int64_t nc, float* restrict dst) {
    const float* x0 = s->p;
    int64_t koff[ML_KC], rs = 0, sw;
    for (int64_t k = 0; k < kc; ++k) { /* (rs, the floats per output row, is the same) */
        const float* x;
        ml_im2col_tap(s, k0 + k, &x, &rs, &sw);
        koff[k] = x - x0;
    }
    const int64_t ohw = s->OH * s->OW, nv = (nc + ML_NR - 1) / ML_NR * ML_NV;
    /* the floats this block's rows read span (their planes and rows) */
    const int pf = 4.0 * (double)(koff[kc - 1] - koff[0] + s->OH * rs) > ML_IM2COL_PF_BYTES;
    for (int64_t v = 0; v < nv; ++v) {
        int64_t j0 = v * ML_VW;
        float* d = dst + (j0 / ML_NR) * kc * ML_NR + j0 % ML_NR;
        int64_t off[ML_VW];
        ml_vmask msk[ML_VW];
        int np = 0, lanes = (int)ML_MAX(0, ML_MIN(ML_VW, nc - j0)); /* none: zeros */
        int64_t n = n0 + j0, img = n / ohw, oh = (n % ohw) / s->OW, ow = n % s->OW;
        for (int lane = 0; lane < lanes; ++np) {
            if (oh == s->OH) { oh = 0; ++img; }
            int len = (int)ML_MIN(lanes - lane, s->OW - ow);
            off[np] = img * s->img + oh * rs + ow - lane; /* lane 0 of the vector's load */
            msk[np] = ml_vmask_lanes(lane, lane + len);
            lane += len;
            ow += len;
            if (ow == s->OW) { ow = 0; ++oh; }
        }
        if (np == 1 && lanes == ML_VW) {
            for (int64_t k = 0; k < kc; ++k) {
                const float* b = x0 + koff[k] + off[0];
                if (pf) __builtin_prefetch(b + ML_IM2COL_PF);
                *(ml_vf*)(d + k * ML_NR) = *(const ml_vf*)b;
            }
        } else if (np == 2) {
            for (int64_t k = 0; k < kc; ++k) {
                const float* b = x0 + koff[k];
                if (pf) __builtin_prefetch(b + off[1] + ML_IM2COL_PF);
                ml_vf t = ml_vmask_load((ml_vf){0}, b + off[0], msk[0]);
                *(ml_vf*)(d + k * ML_NR) = ml_vmask_load(t, b + off[1], msk[1]);
            }
        } else {
            for (int64_t k = 0; k < kc; ++k) {
                ml_vf t = {0};
                for (int p = 0; p < np; ++p) t = ml_vmask_load(t, x0 + koff[k] + off[p], msk[p]);
                *(ml_vf*)(d + k * ML_NR) = t;
            }
        }
    }
}
#endif

/* Two-source lane shuffle with constant indices: gcc's __builtin_shuffle takes them as
 * a vector, clang's __builtin_shufflevector (zig cc cross builds) as a list. */
typedef int32_t ml_vi __attribute__((vector_size(ML_VW * 4)));
#ifdef __clang__
#define ML_GSHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define ML_GSHUF(a, b, ...) __builtin_shuffle(a, b, (ml_vi){__VA_ARGS__})
#endif

#if ML_VW == 16
/* r[i][j] -> r[j][i] for a 16 x 16 block in 16 vectors: four stages, each swapping the
 * off-diagonal h x h blocks of every 2h x 2h block (two-source lane shuffles). */
ML_INLINE void ml_transpose16(ml_vf r[16]) {
    for (int i = 0; i < 16; ++i) /* h = 8 */
        if (!(i & 8)) {
            ml_vf a = r[i], b = r[i + 8];
            r[i] = ML_GSHUF(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
            r[i + 8] = ML_GSHUF(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
        }
    for (int i = 0; i < 16; ++i) /* h = 4 */
        if (!(i & 4)) {
            ml_vf a = r[i], b = r[i + 4];
            r[i] = ML_GSHUF(a, b, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
            r[i + 4] = ML_GSHUF(a, b, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
        }
    for (int i = 0; i < 16; ++i) /* h = 2 */
        if (!(i & 2)) {
            ml_vf a = r[i], b = r[i + 2];
            r[i] = ML_GSHUF(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
            r[i + 2] = ML_GSHUF(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
        }
    for (int i = 0; i < 16; ++i) /* h = 1 */
        if (!(i & 1)) {
            ml_vf a = r[i], b = r[i + 1];
            r[i] = ML_GSHUF(a, b, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
            r[i + 1] = ML_GSHUF(a, b, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
        }
}
#endif

/* r[i][j] -> r[j][i] for an ML_VW x ML_VW block of vectors, any vector width (at 16,
 * ml_transpose16; an in-lane unpack formulation measured no faster there). */
ML_INLINE void ml_transpose_vw(ml_vf r[ML_VW]) {
#if ML_VW == 16
    ml_transpose16(r);
#elif ML_VW == 8
    for (int i = 0; i < 4; ++i) {
        ml_vf a = r[i], b = r[i + 4];
        r[i] = ML_GSHUF(a, b, 0, 1, 2, 3, 8, 9, 10, 11);
        r[i + 4] = ML_GSHUF(a, b, 4, 5, 6, 7, 12, 13, 14, 15);
    }
    for (int i = 0; i < 8; ++i)
        if (!(i & 2)) {
            ml_vf a = r[i], b = r[i + 2];
            r[i] = ML_GSHUF(a, b, 0, 1, 8, 9, 4, 5, 12, 13);
            r[i + 2] = ML_GSHUF(a, b, 2, 3, 10, 11, 6, 7, 14, 15);
        }
    for (int i = 0; i < 8; i += 2) {
        ml_vf a = r[i], b = r[i + 1];
        r[i] = ML_GSHUF(a, b, 0, 8, 2, 10, 4, 12, 6, 14);
        r[i + 1] = ML_GSHUF(a, b, 1, 9, 3, 11, 5, 13, 7, 15);
    }
#else
    for (int i = 0; i < 2; ++i) {
        ml_vf a = r[i], b = r[i + 2];
        r[i] = ML_GSHUF(a, b, 0, 1, 4, 5);
        r[i + 2] = ML_GSHUF(a, b, 2, 3, 6, 7);
    }
    for (int i = 0; i < 4; i += 2) {
        ml_vf a = r[i], b = r[i + 1];
        r[i] = ML_GSHUF(a, b, 0, 4, 2, 6);
        r[i + 1] = ML_GSHUF(a, b, 1, 5, 3, 7);
    }
#endif
}

/* Pack B rows k0..k0+kc-1, columns n0..n0+nc-1 into panels of NR (stride kc*NR). */
static inline void ml_pack_b(const ml_bsrc* s, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                             float* restrict dst) {
    int64_t npan = (nc + ML_NR - 1) / ML_NR;
    if (s->kind == ML_B_STRIDED && s->ldk == 1 && s->ldn != 1) {
        /* a transposed B (each column contiguous along k): copy column by column, reads
         * in order and writes into the panel block, which stays in L1 (row by row, every
         * k touched nc cache lines) */
        int64_t j0 = 0;
        /* whole panels by ML_VW x ML_VW blocks transposed in registers (4x the scalar
         * copy at 16 floats a vector) */
        for (; j0 + ML_NR <= nc; j0 += ML_NR) {
            const float* src = s->p + k0 + (n0 + j0) * s->ldn;
            float* d = dst + (j0 / ML_NR) * kc * ML_NR;
            int64_t k = 0;
            for (; k + ML_VW <= kc; k += ML_VW)
                for (int c0 = 0; c0 < ML_NR; c0 += ML_VW) {
                    ml_vf r[ML_VW];
                    for (int c = 0; c < ML_VW; ++c)
                        r[c] = *(const ml_vf*)(src + (c0 + c) * s->ldn + k);
                    ml_transpose_vw(r);
                    for (int u = 0; u < ML_VW; ++u) *(ml_vf*)(d + (k + u) * ML_NR + c0) = r[u];
                }
            for (; k < kc; ++k)
                for (int c = 0; c < ML_NR; ++c) d[k * ML_NR + c] = src[c * s->ldn + k];
        }
        for (int64_t j = j0; j < nc; ++j) {
            const float* src = s->p + k0 + (n0 + j) * s->ldn;
            float* d = dst + (j / ML_NR) * kc * ML_NR + (j % ML_NR);
            for (int64_t k = 0; k < kc; ++k) d[k * ML_NR] = src[k];
        }
        if (nc % ML_NR)
            for (int64_t k = 0; k < kc; ++k)
                for (int64_t j = nc % ML_NR; j < ML_NR; ++j)
                    dst[(npan - 1) * kc * ML_NR + k * ML_NR + j] = 0.0f;
        return;
    }
#ifdef ML_HAVE_MLOAD
    if (s->kind == ML_B_IM2COL && (s->Wq > 0 || s->SW == 1) && kc <= ML_KC) {
        ml_pack_im2col_block(s, k0, kc, n0, nc, dst);
        return;
    }
#endif
    for (int64_t k = 0; k < kc; ++k) {
        float* d = dst + k * ML_NR;
        if (s->kind == ML_B_IM2COL) {
            ml_pack_im2col_row(s, k0 + k, n0, nc, d, kc);
        } else if (s->ldn == 1) {
            const float* src = s->p + (k0 + k) * s->ldk + n0;
            for (int64_t q = 0; q < nc / ML_NR; ++q)
                memcpy(d + q * kc * ML_NR, src + q * ML_NR, ML_NR * sizeof(float));
        } else {
            const float* src = s->p + (k0 + k) * s->ldk + n0 * s->ldn;
            for (int64_t j = 0; j < (nc / ML_NR) * ML_NR; ++j)
                d[(j / ML_NR) * kc * ML_NR + (j % ML_NR)] = src[j * s->ldn];
        }
        int64_t tail = (nc / ML_NR) * ML_NR;
        if (s->kind != ML_B_IM2COL && tail < nc) {
            const float* src = s->p + (k0 + k) * s->ldk + (n0 + tail) * s->ldn;
            for (int64_t j = 0; j < nc - tail; ++j)
                d[(tail / ML_NR) * kc * ML_NR + j] = src[j * s->ldn];
        }
        if (nc % ML_NR) /* zero the unused columns of the last panel */
            for (int64_t j = nc % ML_NR; j < ML_NR; ++j) d[(npan - 1) * kc * ML_NR + j] = 0.0f;
    }
}

/* Pack a whole B (K x N) from s into full-K panels (panel stride K*NR): for weights
 * packed at run time once, e.g. an LSTM or a MatMul with a runtime right operand. */
static inline void ml_pack_b_full(const ml_bsrc* s, int64_t K, int64_t N, float* restrict dst) {
    for (int64_t q = 0; q < N; q += ML_NR) {
        int64_t nc = ML_MIN(ML_NR, N - q);
        ml_pack_b(s, 0, K, q, nc, dst + (q / ML_NR) * K * ML_NR);
    }
}

/* The stored part (mr x nr) of a partial tile t (ML_NP*ML_NR floats a row) of
 * ml_store_tile: one copy for every micro-kernel instance (inlined into the 16 of
 * ml_gemm_block it was half of the GEMM unit's compile time; run time unchanged). */
ML_OUTLINE void ml_store_part(float t[ML_MR][ML_NP * ML_NR], float* restrict c,
                              int64_t ldc, int64_t cbs, int mr, int nr, float alpha,
                              int load_c, const float* bias_m, const float* bias_n) {
    for (int r = 0; r < mr; ++r)
        for (int j = 0; j < nr; ++j) {
            float* cp = c + r * ldc + (j >> 4) * cbs + (j & 15);
            float v = t[r][j] * alpha;
            if (load_c) v += *cp;
            else {
                if (bias_m) v += bias_m[r];
                if (bias_n) v += bias_n[j];
            }
            *cp = v;
        }
}

/* Finish one tile of `rows` computed rows: C = alpha*acc + (C | bias), with vectors where
 * every computed row is stored, else (a last panel of fewer rows) with scalars. Element (r, j) of the tile at c[r*ldc + (j/16)*cbs +
 * j%16]: cbs = 16 row-major, or C channel-blocked (ldc 16, cbs a block's floats). */
ML_INLINE void ml_store_tile_b(const int np, const int rows, ml_vf acc[ML_MR][ML_NP * ML_NV],
                               float* restrict c, int64_t ldc, int64_t cbs, int mr, int nr,
                               float alpha, int load_c, const float* bias_m,
                               const float* bias_n) {
    /* Whole rows: whole vectors, then, in a tile cut by the matrix's last columns (N = 24
     * in attention heads: 32 computed, 24 stored), the last vector's lanes (one masked
     * store on AVX-512). Through the scalar ml_store_part such tiles ran 15-20% below
     * full ones (16 x [256,256]x[256,24]: 0.77 ms, ORT's masked stores 0.68). */
    if (mr == rows && nr == np * ML_NR) {
        /* a whole tile: C or the bias chosen once a tile, not per vector (with the
         * checks per vector the stores took 22% of a 34 x 34 x 784 GEMM on AVX2) */
#define ML_STORE_WHOLE_(ADD)                                                               \
    for (int r = 0; r < rows; ++r)                                                         \
        for (int j = 0; j < np * ML_NV; ++j) {                                             \
            float* cp = c + r * ldc + (j * ML_VW >> 4) * cbs + (j * ML_VW & 15);           \
            ml_vf v = acc[r][j] * alpha;                                                   \
            ADD;                                                                           \
            *(ml_vf*)cp = v;                                                               \
        }
        if (load_c) {
            ML_STORE_WHOLE_(v += *(ml_vf*)cp)
        } else if (bias_m && bias_n) {
            ML_STORE_WHOLE_(v += bias_m[r]; v += *(const ml_vf*)(bias_n + j * ML_VW))
        } else if (bias_m) {
            ML_STORE_WHOLE_(v += bias_m[r])
        } else if (bias_n) {
            ML_STORE_WHOLE_(v += *(const ml_vf*)(bias_n + j * ML_VW))
        } else {
            ML_STORE_WHOLE_((void)0)
        }
#undef ML_STORE_WHOLE_
        return;
    }
    if (mr == rows) {
        for (int r = 0; r < rows; ++r)
            for (int j = 0; j < np * ML_NV && j * ML_VW < nr; ++j) {
                float* cp = c + r * ldc + (j * ML_VW >> 4) * cbs + (j * ML_VW & 15);
                const int lanes = nr - j * ML_VW;
                ml_vf v = acc[r][j] * alpha;
                if (lanes >= ML_VW) {
                    if (load_c) v += *(ml_vf*)cp;
                    else {
                        if (bias_m) v += bias_m[r];
                        if (bias_n) v += *(const ml_vf*)(bias_n + j * ML_VW);
                    }
                    *(ml_vf*)cp = v;
                    continue;
                }
#if defined(__AVX512F__) && ML_VW == 16 && defined(__GNUC__)
                const unsigned short mk = (unsigned short)((1u << lanes) - 1u);
                if (load_c) v += __builtin_ia32_loadups512_mask(cp, (ml_vf){0}, mk);
                else {
                    if (bias_m) v += bias_m[r];
                    if (bias_n) v += __builtin_ia32_loadups512_mask(bias_n + j * ML_VW, (ml_vf){0}, mk);
                }
                __builtin_ia32_storeups512_mask(cp, v, mk);
#else
                for (int l = 0; l < lanes; ++l) {
                    float e = v[l];
                    if (load_c) e += cp[l];
                    else {
                        if (bias_m) e += bias_m[r];
                        if (bias_n) e += bias_n[j * ML_VW + l];
                    }
                    cp[l] = e;
                }
#endif
            }
        return;
    }
    float t[ML_MR][ML_NP * ML_NR] __attribute__((aligned(64)));
    for (int r = 0; r < rows; ++r)
        for (int j = 0; j < np * ML_NV; ++j) *(ml_vf*)&t[r][j * ML_VW] = acc[r][j];
    ml_store_part(t, c, ldc, cbs, mr, nr, alpha, load_c, bias_m, bias_n);
}

/* ml_store_tile_b on a row-major C. */
ML_INLINE void ml_store_tile(const int np, const int rows, ml_vf acc[ML_MR][ML_NP * ML_NV],
                             float* restrict c, int64_t ldc, int mr, int nr, float alpha,
                             int load_c, const float* bias_m, const float* bias_n) {
    ml_store_tile_b(np, rows, acc, c, ldc, 16, mr, nr, alpha, load_c, bias_m, bias_n);
}

/* WebAssembly engines give 16 128-bit registers (V8 on x86-64): a 6 x 16 tile is 24
 * accumulators and spilled, as did the 4 k steps of B an unrolled k loop keeps in flight.
 * There the micro-kernel computes a tile ML_UK_ROWS rows a pass over the B panel (which
 * stays in L1), k not unrolled: 8 accumulators + 4 of B + a broadcast. PP-OCR rec's
 * 480 x 480 x 480 1x1 conv in Node 20: 11-20 -> ~30 GFLOP/s. */
#if defined(__wasm__) && !defined(ML_UK_ROWS)
#define ML_UK_ROWS 2
#endif

/* AVX2 + FMA (16 vector registers): the full 6 x 16 tile's k loop in inline assembly.
 * Given the C loop of ml_ukernel_pass unrolled, gcc kept several k steps of B in
 * registers and spilled accumulators to the stack: 1024^3 ran at 34 GFLOP/s, 37% of a
 * Zen 3 core (not unrolled: 59). Here the 12 sums stay in ymm0-11, B's two vectors and
 * the broadcast take three more, and k runs 4 steps an iteration; the sums go to t
 * (6 x 16 floats) at the end. Each sum is the C loop's FMA chain over k in the same
 * order: the same bits. */
#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && ML_VW == 8 && ML_NP == 1 && \
    defined(__GNUC__) && !defined(ML_NO_ASM)
#define ML_UK_ASM 1
#define ML_ASM_ZERO                                                                        \
    "vxorps %%xmm0, %%xmm0, %%xmm0\n\tvxorps %%xmm1, %%xmm1, %%xmm1\n\t"                   \
    "vxorps %%xmm2, %%xmm2, %%xmm2\n\tvxorps %%xmm3, %%xmm3, %%xmm3\n\t"                   \
    "vxorps %%xmm4, %%xmm4, %%xmm4\n\tvxorps %%xmm5, %%xmm5, %%xmm5\n\t"                   \
    "vxorps %%xmm6, %%xmm6, %%xmm6\n\tvxorps %%xmm7, %%xmm7, %%xmm7\n\t"                   \
    "vxorps %%xmm8, %%xmm8, %%xmm8\n\tvxorps %%xmm9, %%xmm9, %%xmm9\n\t"                   \
    "vxorps %%xmm10, %%xmm10, %%xmm10\n\tvxorps %%xmm11, %%xmm11, %%xmm11\n\t"
#define ML_ASM_STORE                                                                       \
    "vmovups %%ymm0, (%[t])\n\tvmovups %%ymm1, 32(%[t])\n\t"                               \
    "vmovups %%ymm2, 64(%[t])\n\tvmovups %%ymm3, 96(%[t])\n\t"                             \
    "vmovups %%ymm4, 128(%[t])\n\tvmovups %%ymm5, 160(%[t])\n\t"                           \
    "vmovups %%ymm6, 192(%[t])\n\tvmovups %%ymm7, 224(%[t])\n\t"                           \
    "vmovups %%ymm8, 256(%[t])\n\tvmovups %%ymm9, 288(%[t])\n\t"                           \
    "vmovups %%ymm10, 320(%[t])\n\tvmovups %%ymm11, 352(%[t])\n\t"
/* one k step: B's 16 floats, then per row r a broadcast of A and two FMAs into the
 * row's sums ymm(2r), ymm(2r+1) */
#define ML_ASM_B "vmovups (%[b]), %%ymm12\n\tvmovups 32(%[b]), %%ymm13\n\tadd %[bs], %[b]\n\t"
#define ML_ASM_ROW(src, c0, c1)                                                            \
    "vbroadcastss " src ", %%ymm14\n\t"                                                    \
    "vfmadd231ps %%ymm12, %%ymm14, %%ymm" #c0 "\n\t"                                       \
    "vfmadd231ps %%ymm13, %%ymm14, %%ymm" #c1 "\n\t"
#define ML_ASM_CLOBBER                                                                     \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",        \
        "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "cc", "memory"
/* A's 6 floats of step k consecutive at a, the next step's `as` bytes on (packed A: 24;
 * a column-major A: 4 * lda) */
#define ML_ASM_STEP_C                                                                      \
    ML_ASM_B ML_ASM_ROW("(%[a])", 0, 1) ML_ASM_ROW("4(%[a])", 2, 3)                        \
    ML_ASM_ROW("8(%[a])", 4, 5) ML_ASM_ROW("12(%[a])", 6, 7)                               \
    ML_ASM_ROW("16(%[a])", 8, 9) ML_ASM_ROW("20(%[a])", 10, 11) "add %[as], %[a]\n\t"
/* A's rows at r0..r5, step k at byte i */
#define ML_ASM_STEP_R(o)                                                                   \
    ML_ASM_B ML_ASM_ROW(#o "(%[r0],%[i])", 0, 1) ML_ASM_ROW(#o "(%[r1],%[i])", 2, 3)       \
    ML_ASM_ROW(#o "(%[r2],%[i])", 4, 5) ML_ASM_ROW(#o "(%[r3],%[i])", 6, 7)                \
    ML_ASM_ROW(#o "(%[r4],%[i])", 8, 9) ML_ASM_ROW(#o "(%[r5],%[i])", 10, 11)
/* the loop: n4 iterations of 4 steps, then n1 single steps (labels numbered by %=, one
 * number per asm instance: GAS numeric labels and their b/f suffixes would read as float
 * literals to the C checks) */
#define ML_ASM_LOAD                                                                        \
    "vmovups (%[t]), %%ymm0\n\tvmovups 32(%[t]), %%ymm1\n\t"                               \
    "vmovups 64(%[t]), %%ymm2\n\tvmovups 96(%[t]), %%ymm3\n\t"                             \
    "vmovups 128(%[t]), %%ymm4\n\tvmovups 160(%[t]), %%ymm5\n\t"                           \
    "vmovups 192(%[t]), %%ymm6\n\tvmovups 224(%[t]), %%ymm7\n\t"                           \
    "vmovups 256(%[t]), %%ymm8\n\tvmovups 288(%[t]), %%ymm9\n\t"                           \
    "vmovups 320(%[t]), %%ymm10\n\tvmovups 352(%[t]), %%ymm11\n\t"
/* the sums start from zero (ML_ASM_ZERO) or from t (ML_ASM_LOAD: a kc split in pieces) */
#define ML_ASM_LOOP_FROM(start, step4, step1)                                              \
    start "test %[n4], %[n4]\n\tjz .Lml_one%=\n\t"                                         \
    ".Lml_four%=:\n\t" step4 "dec %[n4]\n\tjnz .Lml_four%=\n\t"                            \
    ".Lml_one%=:\n\ttest %[n1], %[n1]\n\tjz .Lml_end%=\n\t"                                \
    ".Lml_step%=:\n\t" step1 "dec %[n1]\n\tjnz .Lml_step%=\n\t"                            \
    ".Lml_end%=:\n\t" ML_ASM_STORE
#define ML_ASM_LOOP(step4, step1) ML_ASM_LOOP_FROM(ML_ASM_ZERO, step4, step1)

/* t = A[6, kc] B[kc, 16]: A's step k at a + k * as floats, B's at b + k * bks. */
ML_INLINE void ml_uk_asm_cols(int64_t kc, const float* a, int64_t as, const float* b,
                              int64_t bks, float* t) {
    int64_t n4 = kc >> 2, n1 = kc & 3;
    __asm__ volatile(ML_ASM_LOOP(ML_ASM_STEP_C ML_ASM_STEP_C ML_ASM_STEP_C ML_ASM_STEP_C,
                                 ML_ASM_STEP_C)
                     : [a] "+r"(a), [b] "+r"(b), [n4] "+r"(n4), [n1] "+r"(n1)
                     : [as] "r"(as * 4), [bs] "r"(bks * 4), [t] "r"(t)
                     : ML_ASM_CLOBBER);
}

/* t = A[6, kc] B[kc, 16] (acc: t += that): A's row r at ar[r] (k consecutive), B's step k
 * at b + k * bks. */
#define ML_ASM_ROWS_STEP4                                                                  \
    ML_ASM_STEP_R(0) ML_ASM_STEP_R(4) ML_ASM_STEP_R(8) ML_ASM_STEP_R(12) "add $16, %[i]\n\t"
#define ML_ASM_ROWS_STEP1 ML_ASM_STEP_R(0) "add $4, %[i]\n\t"
#define ML_ASM_ROWS_OPERANDS                                                               \
    : [b] "+r"(b), [n4] "+r"(n4), [n1] "+r"(n1), [i] "+r"(i)                               \
    : [r0] "r"(ar[0]), [r1] "r"(ar[1]), [r2] "r"(ar[2]), [r3] "r"(ar[3]), [r4] "r"(ar[4]),  \
      [r5] "r"(ar[5]), [bs] "r"(bks * 4), [t] "r"(t)                                       \
    : ML_ASM_CLOBBER
ML_INLINE void ml_uk_asm_rows(int64_t kc, const float* const ar[ML_MR], const float* b,
                              int64_t bks, float* t, int acc) {
    int64_t n4 = kc >> 2, n1 = kc & 3, i = 0;
    if (acc)
        __asm__ volatile(ML_ASM_LOOP_FROM(ML_ASM_LOAD, ML_ASM_ROWS_STEP4, ML_ASM_ROWS_STEP1)
                             ML_ASM_ROWS_OPERANDS);
    else
        __asm__ volatile(ML_ASM_LOOP_FROM(ML_ASM_ZERO, ML_ASM_ROWS_STEP4, ML_ASM_ROWS_STEP1)
                             ML_ASM_ROWS_OPERANDS);
}
#else
#define ML_UK_ASM 0
#endif

/* One pass of the micro-kernel: a rows x np*NR tile (rows <= MR, the first rows of an A
 * panel) over kc; b points at np panels bps floats apart, whose rows are bks floats apart
 * (NR in a packed panel; a row stride of B itself when it is read in place). araw: 0
 * packed A, 1 rows of A lda apart, 2 columns of A lda apart (a_cm), 3 blocks of 16
 * columns lda apart, rows 16 floats apart in a block (a_cm == 2; kc blocks start at
 * multiples of 16). */
ML_INLINE void ml_ukernel_pass(const int np, const int rows, const int araw, int64_t kc,
                          const float* restrict a, int64_t lda, const float* restrict b,
                          int64_t bps, int64_t bks, float* restrict c, int64_t ldc, int64_t cbs,
                          int mr, int nr, float alpha, int load_c, const float* bias_m,
                          const float* bias_n) {
    ml_vf acc[ML_MR][ML_NP * ML_NV];
    /* unpacked A: rows past mr re-read row mr-1 (in bounds; their sums are not stored) */
    const float* ar[ML_MR];
    if (araw == 1)
        for (int r = 0; r < rows; ++r) ar[r] = a + (r < mr ? r : mr - 1) * lda;
#if ML_UK_ASM
    /* (a column-major A's rows past mr would read past its last column: C loop) */
    if (rows == ML_MR && np == 1 && (araw != 2 || mr == ML_MR)) {
        float t[ML_MR * ML_NR] __attribute__((aligned(32)));
        if (araw == 1) ml_uk_asm_rows(kc, ar, b, bks, t, 0);
        else if (araw == 3) {
            /* channel-blocked A: each block of 16 k is 6 rows of consecutive k, the sums
             * carried in t from one block to the next (the same FMA chains: the same
             * bits). In the C loop instead, which spills on AVX2, a 1x1 conv reading a
             * blocked input ran 256 -> 256 at 14x14 in 0.33 ms more than the GEMM. */
            for (int64_t k0 = 0; k0 < kc; k0 += 16) {
                const float* a3[ML_MR];
                for (int r = 0; r < ML_MR; ++r)
                    a3[r] = a + (k0 >> 4) * lda + (r < mr ? r : mr - 1) * 16;
                ml_uk_asm_rows(ML_MIN(16, kc - k0), a3, b + k0 * bks, bks, t, k0 > 0);
            }
        } else ml_uk_asm_cols(kc, a, araw == 2 ? lda : ML_MR, b, bks, t);
        for (int r = 0; r < ML_MR; ++r)
            for (int j = 0; j < ML_NV; ++j) acc[r][j] = *(const ml_vf*)(t + r * ML_NR + j * ML_VW);
        ml_store_tile_b(np, rows, acc, c, ldc, cbs, mr, nr, alpha, load_c, bias_m, bias_n);
        return;
    }
#endif
    for (int r = 0; r < rows; ++r)
        for (int j = 0; j < np * ML_NV; ++j) acc[r][j] = (ml_vf){0};
#if defined(ML_UK_ROWS) && defined(__clang__)
#pragma clang loop unroll(disable)
#elif !defined(ML_UK_ROWS)
#pragma GCC unroll 4
#endif
    for (int64_t k = 0; k < kc; ++k) {
        ml_vf bv[ML_NP * ML_NV];
        for (int p = 0; p < np; ++p)
            for (int v = 0; v < ML_NV; ++v)
                bv[p * ML_NV + v] = *(const ml_vf*)(b + p * bps + k * bks + v * ML_VW);
        for (int r = 0; r < rows; ++r) {
            /* x - 0.0f folds to a plain broadcast (x + 0.0f would not: -0.0f). */
            ml_vf av = (araw == 1   ? ar[r][k]
                        : araw == 2 ? a[k * lda + (r < mr ? r : mr - 1)]
                        : araw == 3 ? a[(k >> 4) * lda + (r < mr ? r : mr - 1) * 16 + (k & 15)]
                                    : a[k * ML_MR + r]) -
                       (ml_vf){0};
            for (int j = 0; j < np * ML_NV; ++j) acc[r][j] += av * bv[j];
        }
    }
    ml_store_tile_b(np, rows, acc, c, ldc, cbs, mr, nr, alpha, load_c, bias_m, bias_n);
}

/* The micro-kernel: a rows x np*NR tile, in passes of ML_UK_ROWS rows where defined
 * (passes wholly past mr skipped: their rows are not stored). */
ML_INLINE void ml_ukernel(const int np, const int rows, const int araw, int64_t kc,
                          const float* restrict a, int64_t lda, const float* restrict b,
                          int64_t bps, int64_t bks, float* restrict c, int64_t ldc, int64_t cbs,
                          int mr, int nr, float alpha, int load_c, const float* bias_m,
                          const float* bias_n) {
#ifdef ML_UK_ROWS
    if (rows > ML_UK_ROWS) {
        for (int r0 = 0; r0 < rows && r0 < mr; r0 += ML_UK_ROWS)
            ml_ukernel_pass(np, ML_UK_ROWS, araw, kc,
                            araw == 1 ? a + r0 * lda : araw == 3 ? a + r0 * 16 : a + r0, lda, b, bps, bks,
                            c + r0 * ldc, ldc, cbs, ML_MIN(mr - r0, ML_UK_ROWS), nr, alpha, load_c,
                            bias_m ? bias_m + r0 : bias_m, bias_n);
        return;
    }
#endif
    ml_ukernel_pass(np, rows, araw, kc, a, lda, b, bps, bks, c, ldc, cbs, mr, nr, alpha, load_c,
                    bias_m, bias_n);
}

/* The micro-kernel specialised for the row count of the tile (short last panels do not
 * pay for MR rows: M = 1 is a GEMV at full width). */
ML_INLINE void ml_ukernel_rows_a(const int np, const int araw, int64_t kc, const float* restrict a,
                                 int64_t lda, const float* restrict b, int64_t bps, int64_t bks,
                                 float* restrict c, int64_t ldc, int64_t cbs, int mr, int nr,
                                 float alpha, int load_c, const float* bias_m,
                                 const float* bias_n) {
#define ML_UK_(rows) ml_ukernel(np, rows, araw, kc, a, lda, b, bps, bks, c, ldc, cbs, mr, nr, alpha, load_c, bias_m, bias_n)
    /* 1, 2, 4 or MR rows: enough for GEMV-like shapes, few instances to compile */
    if (mr == 1) ML_UK_(1);
    else if (mr == 2) ML_UK_(2);
    else if (mr <= 4) ML_UK_(4);
    else ML_UK_(ML_MR);
#undef ML_UK_
}

/* ml_ukernel_rows_a on packed A (the entry point other kernels call). */
ML_INLINE void ml_ukernel_rows(const int np, int64_t kc, const float* restrict a,
                               const float* restrict b, int64_t bps, float* restrict c,
                               int64_t ldc, int mr, int nr, float alpha, int load_c,
                               const float* bias_m, const float* bias_n) {
    ml_ukernel_rows_a(np, 0, kc, a, 0, b, bps, ML_NR, c, ldc, 16, mr, nr, alpha, load_c, bias_m,
                      bias_n);
}

/* Half-width tiles (AVX-512 only): the last 1-8 columns past the whole panels as 2*MR x 8
 * tiles of 256-bit vectors, not a 16-lane tile mostly masked off. Zen 4 issues two
 * 256-bit FMAs a cycle against one 512-bit: 1000 x 512 x 8 154 -> 88 us (6 x 8 tiles:
 * 122, their six FMA chains short of the latency). The sums run in the micro-kernel's
 * order (one FMA chain per element over k): the same bits. */
#if defined(__AVX512F__) && defined(__AVX512VL__) && ML_VW == 16 && defined(__GNUC__) && \
    (!defined(ML_HALF_TAIL) || ML_HALF_TAIL) /* a build may set 0 (tests compare the bits) */
#undef ML_HALF_TAIL
#define ML_HALF_TAIL 8
typedef float ml_vh __attribute__((vector_size(32), aligned(4)));
/* The 256-bit masked load/store builtins take float pointers in gcc, vector pointers in
 * clang (zig cc cross builds). */
#ifdef __clang__
#define ML_VH_P(p) ((ml_vh*)(p))
#define ML_VH_CP(p) ((const ml_vh*)(p))
#else
#define ML_VH_P(p) (p)
#define ML_VH_CP(p) (p)
#endif

/* A[row r of a half-width tile][k] for the micro-kernel's A layouts (araw as
 * ml_ukernel_pass; packed A: rows past MR in the next panel, ps floats on). */
ML_INLINE float ml_a_elem(const int araw, const float* restrict a, int64_t lda, int64_t ps,
                          int64_t k, int r, int mr) {
    const int rr = r < mr ? r : mr - 1; /* rows past mr re-read row mr-1: not stored */
    return araw == 1   ? a[rr * lda + k]
           : araw == 2 ? a[k * lda + rr]
           : araw == 3 ? a[(k >> 4) * lda + rr * 16 + (k & 15)]
                       : a[(r / ML_MR) * ps + k * ML_MR + r % ML_MR];
}

/* A rows x 8 tile over kc (rows <= 2*MR: two panels of A, twelve FMA chains to cover the
 * FMA's latency), nr <= 8 columns stored; b one panel (bks NR). */
ML_INLINE void ml_ukernel_h(const int rows, const int araw, int64_t kc, const float* restrict a,
                            int64_t lda, int64_t ps, const float* restrict b, float* restrict c,
                            int64_t ldc, int mr, int nr, float alpha, int load_c,
                            const float* bias_m, const float* bias_n) {
    ml_vh acc[2 * ML_MR];
    for (int r = 0; r < rows; ++r) acc[r] = (ml_vh){0};
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; ++k) {
        const ml_vh bv = *(const ml_vh*)(b + k * ML_NR);
        for (int r = 0; r < rows; ++r)
            acc[r] += (ml_a_elem(araw, a, lda, ps, k, r, mr) - (ml_vh){0}) * bv;
    }
    const unsigned char mk = (unsigned char)((1u << nr) - 1u);
    for (int r = 0; r < mr; ++r) {
        float* cp = c + r * ldc;
        ml_vh v = acc[r] * alpha;
        if (load_c) v += __builtin_ia32_loadups256_mask(ML_VH_CP(cp), (ml_vh){0}, mk);
        else {
            if (bias_m) v += bias_m[r];
            if (bias_n) v += __builtin_ia32_loadups256_mask(ML_VH_CP(bias_n), (ml_vh){0}, mk);
        }
        __builtin_ia32_storeups256_mask(ML_VH_P(cp), v, mk);
    }
}

/* ml_ukernel_h at 2, 4, MR or 2*MR rows (mr <= 2*MR). */
ML_INLINE void ml_ukernel_h_rows(const int araw, int64_t kc, const float* restrict a, int64_t lda,
                                 int64_t ps, const float* restrict b, float* restrict c,
                                 int64_t ldc, int mr, int nr, float alpha, int load_c,
                                 const float* bias_m, const float* bias_n) {
#define ML_UKH_(rows) ml_ukernel_h(rows, araw, kc, a, lda, ps, b, c, ldc, mr, nr, alpha, load_c, bias_m, bias_n)
    if (mr <= 2) ML_UKH_(2);
    else if (mr <= 4) ML_UKH_(4);
    else if (mr <= ML_MR) ML_UKH_(ML_MR);
    else ML_UKH_(2 * ML_MR);
#undef ML_UKH_
}
#else
#undef ML_HALF_TAIL
#define ML_HALF_TAIL 0
#endif

/* Call the epilogue on rows m0..m1 (GEMM rows), columns n0..n1, splitting folded batches. */
static inline void ml_gemm_epilogue(const ml_gemm_args* g, int64_t m0, int64_t m1, int64_t n0,
                                    int64_t n1) {
    n0 += g->epi_n0;
    n1 += g->epi_n0;
    if (g->epi_mrows <= 0) {
        g->epi(g->epi_out, g->epi_b, g->epi_m0 + m0, g->epi_m0 + m1, n0, n1);
        return;
    }
    /* rows in global GEMM coordinates: a row block of ml_sgemm_par starts mid-way */
    m0 += g->epi_mfold0;
    m1 += g->epi_mfold0;
    for (int64_t m = m0; m < m1;) {
        int64_t b = m / g->epi_mrows, e = ML_MIN(m1, (b + 1) * g->epi_mrows);
        g->epi(g->epi_out, g->epi_b + b, m - b * g->epi_mrows, e - b * g->epi_mrows, n0, n1);
        m = e;
    }
}

/* Floats of B block buffer ml_sgemm needs for K and N (0 when B is prepacked). */
static inline int64_t ml_gemm_bbuf_floats(int64_t K, int64_t N) {
    int64_t n = ((N + 31) / 32) * 32, f = ML_MIN(K, ML_KC) * ML_MIN(n, ML_NC);
    /* ml_sgemv_pa's expanded x: MR floats per k and column */
    int64_t gv = (K * ML_MR + 15) / 16 * 16 * N;
    return N <= ML_GEMV_NMAX && gv > f ? gv : f;
}

/* Few columns (N <= ML_GEMV_NMAX) against a packed A: a 1x1 conv on a 1x1 map, a
 * squeeze-excitation FC written as a conv. The micro-kernel would compute 16 columns to
 * keep one and load each A element alone (a 512 -> 1280 conv ran at 7 GFLOP/s); here A's
 * panels stream as whole vectors against x expanded to A's panel layout once per call
 * (xe[k*MR + r] = B[k][c]), 8 k (48 floats) per step; lane q*MR + r of a step's sums
 * belongs to row r, summed in a fixed order (any thread split gives the same result).
 * gemm_call (_gemm.py) emits ml_sgemv_pa for such static shapes only, so other
 * libraries do not compile it. */
#define ML_GV_L (8 * ML_MR / ML_VW) /* vectors per step of 8 k: 3, 6 or 12 */

/* Floats of x expanded for one column (xe's column stride), a multiple of 16. */
static inline int64_t ml_gemv_xs(int64_t K) { return (K * ML_MR + 15) / 16 * 16; }

/* y[c][r] = sum_k A[k*MR + r] xe[c*xs + k*MR] for one panel a (K x MR), nc columns. */
ML_INLINE void ml_gemv_pa_panel(const int nc, int64_t K, const float* restrict a,
                                const float* restrict xe, int64_t xs,
                                float y[ML_GEMV_NMAX][ML_MR]) {
    ml_vf acc[ML_GEMV_NMAX][ML_GV_L];
    for (int c = 0; c < nc; ++c)
        for (int l = 0; l < ML_GV_L; ++l) acc[c][l] = (ml_vf){0};
    const int64_t end = K / 8 * 8 * ML_MR;
    for (int64_t f = 0; f < end; f += 8 * ML_MR)
        for (int l = 0; l < ML_GV_L; ++l) {
            ml_vf av = *(const ml_vf*)(a + f + l * ML_VW);
            for (int c = 0; c < nc; ++c)
                acc[c][l] += av * *(const ml_vf*)(xe + c * xs + f + l * ML_VW);
        }
    for (int c = 0; c < nc; ++c) {
        float t[8 * ML_MR] __attribute__((aligned(64)));
        for (int l = 0; l < ML_GV_L; ++l) *(ml_vf*)(t + l * ML_VW) = acc[c][l];
        for (int r = 0; r < ML_MR; ++r) {
            float v = 0.0f;
            for (int q = 0; q < 8; ++q) v += t[q * ML_MR + r];
            for (int64_t k = K / 8 * 8; k < K; ++k) v += a[k * ML_MR + r] * xe[c * xs + k * ML_MR];
            y[c][r] = v;
        }
    }
}

/* Columns [n0, n0 + rem) (rem <= ML_GEMV_NMAX: the tail past the last whole 16-column
 * panel, e.g. 1 of a 7x7 map's 49) of rows ic..ic+mc over the K block [pc, pc + kc),
 * against a packed A: the panel kernel of ml_sgemv_pa on x expanded from B's last panel
 * b. The micro-kernel would compute a whole panel for these few columns (a 2048 x 49
 * conv GEMM ran at 85 GFLOP/s, 107 at 48 columns). */
ML_UNUSED static void ml_gemm_tail_cols(const ml_gemm_args* g, int64_t ic, int64_t mc,
                                        int64_t pc, int64_t kc, int64_t n0, int rem,
                                        const float* b, int load_c) {
    float xe[ML_GEMV_NMAX * ML_KC * ML_MR];
    const int nx = rem == 1 ? 1 : ML_GEMV_NMAX; /* the two instances compiled */
    for (int c = 0; c < nx; ++c)
        for (int64_t k = 0; k < kc; ++k)
            for (int r = 0; r < ML_MR; ++r)
                xe[(c * kc + k) * ML_MR + r] = c < rem ? b[k * ML_NR + c] : 0.0f;
    for (int64_t m0 = ic; m0 < ic + mc; m0 += ML_MR) {
        float y[ML_GEMV_NMAX][ML_MR];
        const float* a = g->a + (m0 / ML_MR) * g->K * ML_MR + pc * ML_MR;
        if (nx == 1) ml_gemv_pa_panel(1, kc, a, xe, kc * ML_MR, y);
        else ml_gemv_pa_panel(ML_GEMV_NMAX, kc, a, xe, kc * ML_MR, y);
        for (int64_t m = m0; m < ML_MIN(m0 + ML_MR, ic + mc); ++m)
            for (int c = 0; c < rem; ++c) {
                float* o = g->c + m * g->ldc + n0 + c;
                float v = g->alpha * y[c][m - m0];
                if (load_c) v += *o;
                else {
                    if (g->bias_m) v += g->bias_m[m];
                    if (g->bias_n) v += g->bias_n[n0 + c];
                }
                *o = v;
            }
    }
}

/* The macro-kernel over one packed MC x KC block of A and KC x NC block of B: packed
 * panels bps floats apart (bks = NR), or B read in place (bps = NR, bks its row stride;
 * nc a multiple of NP*NR then: no tail reads past the rows). One copy (noclone): gcc
 * cloned it for bks = NR, doubling the GEMM unit's compile (Zen 3: 11.5 -> 6.5 s of
 * gcc) for no measured speed (min of 8 runs: 1024^3, 512x169x512, 128x784x1152,
 * 64x3136x64 within 1%). */
ML_ONE_COPY void ml_gemm_block_s(const ml_gemm_args* g, int64_t ic, int64_t mc, int64_t pc,
                                 int64_t kc, int64_t jc, int64_t nc, const float* bp,
                                 int64_t bps, int64_t bks, int epi) {
    int first = pc == 0;
    int load_c = g->accumulate || !first;
    int rem = (int)(nc % ML_NR);
    const int64_t cbs = g->ldc_blk ? g->ldc_blk : 16; /* C's column blocks (ml_store_tile_b) */
    /* The columns past the whole panels, after them (A's block is in L2 by then; before,
     * the tail paid its trip from L3: 1000 x 512 x 161 1.54 -> 1.52 ms). On every column
     * range: a thread's range that holds only such a tail sums it the same way, so any
     * split gives the same result. 1-4 columns: ml_gemm_tail_cols where compiled, else
     * (and 5-8) half-width tiles; 9-15 a masked whole panel (8 + a tail of 1-4 measured
     * no faster). */
    const int gv = g->tail && !g->a_raw && rem <= ML_GEMV_NMAX ? rem : 0;
    const int hr = ML_HALF_TAIL && !g->ldc_blk && bks == ML_NR && rem - gv <= ML_HALF_TAIL
                       ? rem - gv
                       : 0;
    const int64_t n_h = nc - gv - hr, n_g = nc - gv; /* where the two tails start */
    nc = n_h;
    int64_t ep0 = 0; /* the first column the epilogue has yet to run on */
    for (int64_t jr = 0; jr < nc; jr += ML_NP * ML_NR) {
        int nr = (int)ML_MIN(ML_NP * ML_NR, nc - jr);
        const float* b = bp + (jr / ML_NR) * bps;
        const float* bn = (first && g->bias_n) ? g->bias_n + jc + jr : 0;
        for (int64_t ir = 0; ir < mc; ir += ML_MR) {
            int mr = (int)ML_MIN(ML_MR, mc - ir);
            int64_t m = ic + ir;
            float* c = g->ldc_blk ? g->c + m * 16 + ((jc + jr) >> 4) * cbs
                                  : g->c + m * g->ldc + jc + jr;
            const float* bm = (first && g->bias_m) ? g->bias_m + m : 0;
#ifndef ML_NO_BPREFETCH
            /* packed B (weights) of the next column group into L2, a slice per row tile:
             * in a model the weights come from DRAM, and the first row tile of a group
             * otherwise waits for all of them at once */
            if (bks == ML_NR && jr + ML_NP * ML_NR < nc) {
                const int64_t tiles = (mc + ML_MR - 1) / ML_MR, t = ir / ML_MR;
                const float* nb = bp + ((jr + ML_NP * ML_NR) / ML_NR) * bps;
                const int64_t lines = kc * ML_NR / 16, l0 = lines * t / tiles,
                              l1 = lines * (t + 1) / tiles;
                for (int p = 0; p < ML_NP; ++p)
                    for (int64_t l = l0; l < l1; ++l) __builtin_prefetch(nb + p * bps + l * 16, 0, 2);
            }
#endif
#define ML_UKR_(np, araw, a, lda) \
    ml_ukernel_rows_a(np, araw, kc, a, lda, b, bps, bks, c, g->ldc, cbs, mr, nr, g->alpha, load_c, bm, bn)
            if (g->a_raw && g->a_cm == 2) {
                const float* a = g->a_raw + (pc >> 4) * g->lda + m * 16;
                if (nr > ML_NR) ML_UKR_(ML_NP, 3, a, g->lda);
                else ML_UKR_(1, 3, a, g->lda);
            } else if (g->a_raw && g->a_cm) {
                const float* a = g->a_raw + pc * g->lda + m;
                if (nr > ML_NR) ML_UKR_(ML_NP, 2, a, g->lda);
                else ML_UKR_(1, 2, a, g->lda);
            } else if (g->a_raw) {
                const float* a = g->a_raw + m * g->lda + pc;
                if (nr > ML_NR) ML_UKR_(ML_NP, 1, a, g->lda);
                else ML_UKR_(1, 1, a, g->lda);
            } else {
                const float* a = g->a + (m / ML_MR) * g->K * ML_MR + pc * ML_MR;
                if (nr > ML_NR) ML_UKR_(ML_NP, 0, a, 0);
                else ML_UKR_(1, 0, a, 0);
            }
#undef ML_UKR_
            /* The next tile's lines of C, fetched for writing: a tile's rows are ldc
             * floats apart (a pointwise conv's output channels), more streams than the
             * prefetchers follow, and in a model C is a region last written a run
             * before, out of the caches: each store waited for its line from DRAM.
             * MobileNetV3's 16 -> 64 1x1 conv at 112x112 (3.2 MB out): 0.53 -> 0.38 ms
             * in the model (alone, caches warm: 0.33 either way); whole models 1-5%. */
            if (jr + ML_NP * ML_NR < nc && !g->ldc_blk) /* blocked: one run per block */
                for (int r = 0; r < mr; ++r)
                    for (int l = 0; l < ML_NP * ML_NR; l += 16) /* a 64-byte line */
                        __builtin_prefetch(c + r * g->ldc + ML_NP * ML_NR + l, 1, 3);
        }
        /* the fused epilogue on each ML_EPI_COLS columns as they are done, still in L1 */
        if (epi && (jr + nr >= nc || jr + nr - ep0 >= ML_EPI_COLS)) {
            ml_gemm_epilogue(g, ic, ic + mc, jc + ep0, jc + jr + nr);
            ep0 = jr + nr;
        }
    }
#if ML_HALF_TAIL
    if (hr) {
        const float* b = bp + (n_h / ML_NR) * bps;
        const float* bn = (first && g->bias_n) ? g->bias_n + jc + n_h : 0;
        for (int64_t ir = 0; ir < mc; ir += 2 * ML_MR) {
            const int mr = (int)ML_MIN(2 * ML_MR, mc - ir);
            const int64_t m = ic + ir;
            float* c = g->c + m * g->ldc + jc + n_h;
            const float* bm = (first && g->bias_m) ? g->bias_m + m : 0;
#define ML_UKH_(araw, a, lda) \
    ml_ukernel_h_rows(araw, kc, a, lda, g->K * ML_MR, b, c, g->ldc, mr, hr, g->alpha, load_c, bm, bn)
            if (g->a_raw && g->a_cm == 2) ML_UKH_(3, g->a_raw + (pc >> 4) * g->lda + m * 16, g->lda);
            else if (g->a_raw && g->a_cm) ML_UKH_(2, g->a_raw + pc * g->lda + m, g->lda);
            else if (g->a_raw) ML_UKH_(1, g->a_raw + m * g->lda + pc, g->lda);
            else ML_UKH_(0, g->a + (m / ML_MR) * g->K * ML_MR + pc * ML_MR, 0);
#undef ML_UKH_
        }
        if (epi) ml_gemm_epilogue(g, ic, ic + mc, jc + n_h, jc + n_g);
    }
#endif
    if (gv) {
        g->tail(g, ic, mc, pc, kc, jc + n_g, gv, bp + (n_g / ML_NR) * bps + n_g % ML_NR, load_c);
        if (epi) ml_gemm_epilogue(g, ic, ic + mc, jc + n_g, jc + n_g + gv);
    }
}

/* ml_gemm_block_s on packed panels. */
static inline void ml_gemm_block(const ml_gemm_args* g, int64_t ic, int64_t mc, int64_t pc,
                                 int64_t kc, int64_t jc, int64_t nc, const float* bp,
                                 int64_t bps, int epi) {
    ml_gemm_block_s(g, ic, mc, pc, kc, jc, nc, bp, bps, ML_NR, epi);
}

/* K == 0: C = bias (or unchanged when accumulating). */
static inline void ml_gemm_k0(const ml_gemm_args* g) {
    for (int64_t m = 0; m < g->M; ++m)
        for (int64_t n = g->n_begin; n < g->n_end; ++n)
            if (!g->accumulate)
                g->c[m * g->ldc + n] = (g->bias_m ? g->bias_m[m] : 0.0f) +
                                       (g->bias_n ? g->bias_n[n] : 0.0f);
    if (g->epi && g->M > 0 && g->n_end > g->n_begin)
        ml_gemm_epilogue(g, 0, g->M, g->n_begin, g->n_end);
}

/* Columns per pass of ml_gemm_small_m: at most ML_SMALL_NC (the sums, up to MR-1 rows
 * of 16 KB, stay in L2 while B streams by; a narrower pass reads each row of B in
 * shorter pieces, which the prefetcher follows less well: 4096 columns ran a
 * [1,4096]x[4096,4096] GEMV in 4.0 ms, 512 in 9.3 ms), in the B block buffer; without
 * room there ML_SMALL_NC0 on the stack. */
#define ML_SMALL_NC 4096
#define ML_SMALL_NC0 256

/* A of element (m, k) for a GEMM of fewer than MR rows (packed: one panel). */
ML_INLINE float ml_a_small(const ml_gemm_args* g, int64_t m, int64_t k) {
    return g->a_raw ? g->a_raw[g->a_cm == 2 ? (k >> 4) * g->lda + m * 16 + (k & 15)
                               : g->a_cm   ? k * g->lda + m
                                           : m * g->lda + k]
                    : g->a[k * ML_MR + m];
}

/* Fewer than MR rows against a run-time B with unit column stride (a GEMV, a decode
 * step): B is read in place, eight rows of B per pass over the sums (eight streams in
 * order, which the prefetcher follows; four ran 30% slower). Packing B first would copy all of B to use each
 * element fewer than MR times. */
static void ml_gemm_small_m(const ml_gemm_args* g) {
    const int64_t M = g->M, K = g->K, ldk = g->b.ldk;
    float local[(ML_MR - 1) * ML_SMALL_NC0] __attribute__((aligned(64)));
    /* the buffer is ml_gemm_bbuf_floats(K, columns) floats (ml_sgemm_task's too) */
    int64_t cap = g->bbuf ? ml_gemm_bbuf_floats(K, g->n_end - g->n_begin) / M / ML_VW * ML_VW : 0;
    int64_t ldacc = cap >= ML_SMALL_NC0 ? ML_MIN(cap, ML_SMALL_NC) : ML_SMALL_NC0;
    float* accbuf = cap >= ML_SMALL_NC0 ? g->bbuf : local;
    for (int64_t n0 = g->n_begin; n0 < g->n_end; n0 += ldacc) {
        const int64_t nc = ML_MIN(ldacc, g->n_end - n0), nv = nc / ML_VW * ML_VW;
        const float* bp = g->b.p + n0;
        for (int64_t m = 0; m < M; ++m) memset(accbuf + m * ldacc, 0, (size_t)nc * sizeof(float));
        int64_t k = 0;
        for (; k + 8 <= K; k += 8) {
            const float* b0 = bp + k * ldk;
            for (int64_t m = 0; m < M; ++m) {
                ml_vf av[8];
                for (int u = 0; u < 8; ++u) av[u] = ml_a_small(g, m, k + u) - (ml_vf){0};
                float* y = accbuf + m * ldacc;
                int64_t j = 0;
                for (; j < nv; j += ML_VW) {
                    ml_vf s0 = *(ml_vf*)(y + j), s1 = av[1] * *(const ml_vf*)(b0 + ldk + j);
                    for (int u = 0; u < 8; u += 2) {
                        s0 += av[u] * *(const ml_vf*)(b0 + u * ldk + j);
                        if (u) s1 += av[u + 1] * *(const ml_vf*)(b0 + (u + 1) * ldk + j);
                    }
                    *(ml_vf*)(y + j) = s0 + s1;
                }
                for (; j < nc; ++j) { /* the vector lanes' order: same sums on any split */
                    float s0 = y[j], s1 = av[1][0] * b0[ldk + j];
                    for (int u = 0; u < 8; u += 2) {
                        s0 += av[u][0] * b0[u * ldk + j];
                        if (u) s1 += av[u + 1][0] * b0[(u + 1) * ldk + j];
                    }
                    y[j] = s0 + s1;
                }
            }
        }
        for (; k < K; ++k) {
            const float* b0 = bp + k * ldk;
            for (int64_t m = 0; m < M; ++m) {
                float a0 = ml_a_small(g, m, k);
                for (int64_t j = 0; j < nc; ++j) accbuf[m * ldacc + j] += a0 * b0[j];
            }
        }
        for (int64_t m = 0; m < M; ++m) {
            float* c = g->c + m * g->ldc + n0;
            for (int64_t j = 0; j < nc; ++j) {
                float v = g->alpha * accbuf[m * ldacc + j];
                if (g->accumulate) v += c[j];
                else {
                    if (g->bias_m) v += g->bias_m[m];
                    if (g->bias_n) v += g->bias_n[n0 + j];
                }
                c[j] = v;
            }
        }
        if (g->epi) ml_gemm_epilogue(g, 0, M, n0, n0 + nc);
    }
}

/* ml_sgemm; small_ok: the few-row path may be taken (its sums run in another order
 * than the micro-kernel's, so a row block of a larger GEMM must not take it: the
 * result would change with the thread count). */
static void ml_sgemm_impl(const ml_gemm_args* g, int small_ok) {
    if (g->K == 0) {
        ml_gemm_k0(g);
        return;
    }
    if (small_ok && !g->fixed_order && g->M < ML_MR && g->b.kind == ML_B_STRIDED && g->b.ldn == 1) {
        ml_gemm_small_m(g);
        return;
    }
    /* few rows against prepacked weights (a batch-1 FC layer) are memory-bound: each
     * pair of panels streams over the whole K in one pass (KC blocks read 16 KB pieces
     * K*64 bytes apart, which the prefetcher follows poorly: 4096 x 4096 2.5 -> 2.0 ms),
     * still summed in KC blocks into C: the same bits as the loop below for any M, so a
     * row's result does not depend on the batch it came in */
    if (small_ok && g->M < ML_MR && g->b.kind == ML_B_PACKED && g->K > ML_KC) {
        const int64_t bps = g->b.k_total * ML_NR;
        for (int64_t jc = g->n_begin; jc < g->n_end; jc += ML_NP * ML_NR) {
            int64_t nc = ML_MIN(ML_NP * ML_NR, g->n_end - jc);
            for (int64_t pc = 0; pc < g->K; pc += ML_KC)
                ml_gemm_block(g, 0, g->M, pc, ML_MIN(ML_KC, g->K - pc), jc, nc,
                              g->b.p + (jc / ML_NR) * bps + pc * ML_NR, bps, 0);
            if (g->epi) ml_gemm_epilogue(g, 0, g->M, jc, jc + nc);
        }
        return;
    }
    for (int64_t jc = g->n_begin; jc < g->n_end; jc += ML_NC) {
        int64_t nc = ML_MIN(ML_NC, g->n_end - jc);
        for (int64_t pc = 0; pc < g->K; pc += ML_KC) {
            int64_t kc = ML_MIN(ML_KC, g->K - pc);
            const float* bp;
            int64_t bps;
            /* B row-major in memory (a pointwise conv's input, an activation MatMul):
             * its whole tiles are read in place, the packing copy saved (one float
             * copied per M multiply-adds: 5-20% of a conv of 16-64 output channels);
             * the same sums in the same order, so the same bits */
            int64_t full = ML_B_INPLACE && g->b.kind == ML_B_STRIDED && g->b.ldn == 1 &&
                                   g->M <= ML_B_INPLACE_MAXM &&
                                   (g->K <= ML_KC || g->K * nc * 4 <= ML_B_INPLACE_L2) &&
                                   (g->b.ldk * 4) % ML_B_INPLACE_ALIAS != 0
                               ? nc / (ML_NP * ML_NR) * (ML_NP * ML_NR)
                               : 0;
            /* the last K block: the epilogue runs on its tiles as they finish */
            const int epi = g->epi && pc + kc == g->K;
            if (full) {
                const float* src = g->b.p + pc * g->b.ldk + jc;
                for (int64_t ic = 0; ic < g->M; ic += ML_MC)
                    ml_gemm_block_s(g, ic, ML_MIN(ML_MC, g->M - ic), pc, kc, jc, full, src,
                                    ML_NR, g->b.ldk, epi);
                if (full == nc) continue;
                ml_pack_b(&g->b, pc, kc, jc + full, nc - full, g->bbuf);
                for (int64_t ic = 0; ic < g->M; ic += ML_MC)
                    ml_gemm_block(g, ic, ML_MIN(ML_MC, g->M - ic), pc, kc, jc + full, nc - full,
                                  g->bbuf, kc * ML_NR, epi);
                continue;
            }
            if (g->b.kind == ML_B_PACKED) {
                bps = g->b.k_total * ML_NR;
                bp = g->b.p + (jc / ML_NR) * bps + pc * ML_NR;
            } else {
                ml_pack_b(&g->b, pc, kc, jc, nc, g->bbuf);
                bp = g->bbuf;
                bps = kc * ML_NR;
            }
            for (int64_t ic = 0; ic < g->M; ic += ML_MC)
                ml_gemm_block(g, ic, ML_MIN(ML_MC, g->M - ic), pc, kc, jc, nc, bp, bps, epi);
        }
    }
}

/* C[:, n_begin:n_end] of the GEMM described by g. */
ML_UNUSED static void ml_sgemm(const ml_gemm_args* g) { ml_sgemm_impl(g, 1); }

/* Full-range call with the common defaults filled in. */
static inline ml_gemm_args ml_gemm_defaults(int64_t M, int64_t N, int64_t K, const float* a,
                                            float* c) {
    ml_gemm_args g;
    memset(&g, 0, sizeof g);
    g.M = M; g.N = N; g.K = K; g.a = a; g.c = c; g.ldc = N; g.alpha = 1.0f;
    g.n_begin = 0; g.n_end = N;
    return g;
}

#ifdef MONOLIB_THREADPOOL_H
typedef struct {
    const ml_gemm_args* g;
    int64_t chunk_n, chunk_m, tasks_n;
} ml_sgemm_job;

/* Task t of ml_sgemm_par: columns [n_begin + (t % tasks_n)*chunk_n, +chunk_n) of rows
 * [(t / tasks_n)*chunk_m, +chunk_m), with its own B block buffer. */
static void ml_sgemm_task(void* ctx, int64_t t, void* scratch) {
    const ml_sgemm_job* j = (const ml_sgemm_job*)ctx;
    ml_gemm_args a = *j->g;
    int64_t m0 = (t / j->tasks_n) * j->chunk_m;
    a.n_begin = j->g->n_begin + (t % j->tasks_n) * j->chunk_n;
    a.n_end = ML_MIN(j->g->n_end, a.n_begin + j->chunk_n);
    a.bbuf = (float*)scratch;
    if (m0 > 0 || j->chunk_m < a.M) { /* a block of rows: chunk_m is a multiple of MR */
        a.M = ML_MIN(j->chunk_m, j->g->M - m0);
        if (a.a_raw) a.a_raw += a.a_cm == 2 ? m0 * 16 : a.a_cm ? m0 : m0 * a.lda;
        else a.a += (m0 / ML_MR) * a.K * ML_MR;
        a.c += m0 * a.ldc;
        if (a.bias_m) a.bias_m += m0;
        if (a.epi_mrows > 0) a.epi_mfold0 += m0; /* folded batches: global row of m0 */
        else a.epi_m0 += m0;
    }
    ml_sgemm_impl(&a, j->g->M < ML_MR);
}
#endif

#ifndef ML_SPLIT_MODEL
#define ML_SPLIT_MODEL 1
#endif
/* Multiply-adds a thread-pool task costs beyond its sums (handing it out, its first
 * cache misses), and per float of A it reads and of B it packs. With them the split
 * ran ResNet-50's 1x1 GEMMs on 2 cores (Xeon) 1024x196x256 in 0.42 ms (ORT 0.45) where
 * the former rule's column chunks of 96, 96 and 4 by row blocks took 0.91, 256x196x1024
 * 0.39 (0.44) where it took 0.44. */
#define ML_TASK_COST 50000.0
#define ML_A_READ_COST 4.0
#define ML_B_PACK_COST 8.0

/* Estimated cost (multiply-adds) of a task of `rows` x `cols` of g: the micro-kernel's
 * columns (32-column tiles; a last group of <= 16 at one panel; a tail of <= 4 past the
 * panels (ml_gemm_tail_cols) at its own width, or <= 8 (half-width tiles) as 10), its rows in
 * whole MR panels, reading A's rows, packing its block of a run-time B. */
static inline double ml_gemm_task_cost(const ml_gemm_args* g, int64_t rows, int64_t cols) {
    int64_t rem = cols % ML_NR, tail = 0;
    if (g->tail && !g->a_raw && rem <= ML_GEMV_NMAX) {
        tail = rem == 0 ? 0 : rem == 1 ? 1 : ML_GEMV_NMAX;
        cols -= rem;
    } else if (ML_HALF_TAIL && rem <= ML_HALF_TAIL && !g->ldc_blk) {
        tail = rem == 0 ? 0 : 10; /* half-width tiles (conv_cost.py's HALF_COLS) */
        cols -= rem;
    }
    int64_t w = ML_NP * ML_NR, r = cols % w;
    double eff = (double)(cols - r + (r == 0 ? 0 : r <= ML_NR ? ML_NR : w) + tail);
    double k = (double)g->K;
    double c = (double)((rows + ML_MR - 1) / ML_MR * ML_MR) * eff * k;
    c += ML_A_READ_COST * rows * k + ML_TASK_COST;
    if (g->b.kind != ML_B_PACKED) c += ML_B_PACK_COST * cols * k;
    return c;
}

#if ML_SPLIT_MODEL && defined(MONOLIB_THREADPOOL_H)
/* Modelled finish time of g split into column chunks of cn by row blocks of cm on the
 * pool's threads: tasks handed out in order to the first free thread, plus the job's
 * overhead (threadpool.h's ML_PAR_JOB_COST). */
static double ml_gemm_span(const ml_gemm_args* g, int64_t cn, int64_t cm) {
    const int64_t n = g->n_end - g->n_begin;
    const int nt = ml_num_threads() < 64 ? ml_num_threads() : 64;
    const int64_t tasks_n = (n + cn - 1) / cn, tasks_m = (g->M + cm - 1) / cm;
    double fin[64] = {0};
    for (int64_t t = 0; t < tasks_n * tasks_m; ++t) {
        int64_t i = t / tasks_n, jn = t % tasks_n;
        int64_t rows = ML_MIN(cm, g->M - i * cm), cols = ML_MIN(cn, n - jn * cn);
        int f = 0;
        for (int u = 1; u < nt; ++u)
            if (fin[u] < fin[f]) f = u;
        fin[f] += ml_gemm_task_cost(g, rows, cols);
    }
    double span = 0.0;
    for (int u = 0; u < nt; ++u) span = fin[u] > span ? fin[u] : span;
    return span + ML_PAR_JOB_COST;
}

/* The split of g into column chunks (multiples of 32) by row blocks (multiples of MR),
 * at most max_tasks tasks, with the least estimated finish time on the pool's threads
 * (ml_gemm_span; among near ties, fewer tasks). Returns chunk_n, chunk_m and that
 * finish time. */
static double ml_gemm_split(const ml_gemm_args* g, int64_t max_tasks, int64_t* chunk_n,
                            int64_t* chunk_m) {
    const int64_t n = g->n_end - g->n_begin, un = (n + 31) / 32;
    const int64_t um = (g->M + ML_MR - 1) / ML_MR;
    double best = -1.0;
    int64_t best_tasks = 0;
    for (int64_t tn = 1; tn <= ML_MIN(un, max_tasks); ++tn)
        for (int64_t tm = 1; tm <= ML_MIN(um, max_tasks / tn); ++tm) {
            int64_t cn = (un + tn - 1) / tn * 32, cm = (um + tm - 1) / tm * ML_MR;
            int64_t tasks_n = (n + cn - 1) / cn, tasks_m = (g->M + cm - 1) / cm;
            if ((tn > 1 && tasks_n != tn) || (tm > 1 && tasks_m != tm)) continue; /* same split as a smaller tn/tm */
            double span = ml_gemm_span(g, cn, cm);
            int64_t tasks = tasks_n * tasks_m;
            if (best < 0 || span < 0.98 * best || (span < 1.02 * best && tasks < best_tasks)) {
                best = span;
                best_tasks = tasks;
                *chunk_n = cn;
                *chunk_m = cm;
            }
        }
    return best;
}
#endif /* ML_SPLIT_MODEL && MONOLIB_THREADPOOL_H */

/* ml_sgemm on the thread pool (threadpool.h, when included before): the columns are
 * split into chunks of a multiple of 32 and the rows into blocks of a multiple of MR, the
 * grid ml_gemm_split estimates finishes first (fewer than MR rows: column chunks of at
 * least 64); each block is computed (and its epilogue applied) by one thread with its
 * own B block buffer. The split runs when its modelled finish time (ml_gemm_span, the
 * job's overhead in it) beats the GEMM's on one thread (ml_gemm_task_cost of all of it),
 * not above a fixed size: a column split against packed weights repeats no packing, so
 * a 56x96x216 GEMM (20 us) ran 1.86x faster on 2 threads, where a row split that
 * repacks B in each task is modelled (and measured) to lose on small GEMMs. */
ML_UNUSED static void ml_sgemm_par(const ml_gemm_args* g) {
#ifdef MONOLIB_THREADPOOL_H
    int64_t n = g->n_end - g->n_begin;
    int64_t units_n = (n + 31) / 32;
    int64_t units_m = (g->M + ML_MR - 1) / ML_MR;
#if ML_SPLIT_MODEL
    double serial = ml_gemm_task_cost(g, g->M, n);
    int64_t tasks = g->K > 0 && n > 0 ? ml_par_most(serial, units_n * units_m) : 1;
#else
    /* B's floats count 4 each when there are fewer rows (a GEMV streams B: 2048 x 1000
     * weights, 2M multiply-adds, ran 1.6x faster on 2 threads) */
    double work = (double)(g->M < 4 ? 4 : g->M) * n * g->K;
    int64_t tasks = g->K > 0 ? ml_par_tasks(work, units_n * units_m) : 1;
#endif
    /* the few-row path streams B: one wide column range per thread (narrow ranges
     * read each row of B in short pieces, which the prefetcher follows poorly) */
    if (g->M < ML_MR && g->b.kind == ML_B_STRIDED && g->b.ldn == 1 && tasks > ml_num_threads())
        tasks = ml_num_threads();
    if (tasks > 1) {
        ml_sgemm_job j = {g, 0, 0, 0};
#if ML_SPLIT_MODEL
        if (g->M >= ML_MR) {
            if (!ml_par_pays(serial, ml_gemm_split(g, tasks, &j.chunk_n, &j.chunk_m))) {
                ml_sgemm(g);
                return;
            }
        } else
#endif
        {
        /* column chunks of at least 64 (a lone 32-column chunk beside a full one halves
         * the speed); what the columns cannot feed goes to row blocks */
        int64_t cn = ML_MIN(tasks, n / 64 > 1 ? n / 64 : 1);
        int64_t cm = ML_MIN(units_m, (tasks + cn - 1) / cn);
        j.chunk_n = (((n + cn - 1) / cn) + 31) / 32 * 32;
        j.chunk_m = (((g->M + cm - 1) / cm) + ML_MR - 1) / ML_MR * ML_MR;
#if ML_SPLIT_MODEL
            if (!ml_par_pays(serial, ml_gemm_span(g, j.chunk_n, j.chunk_m))) {
                ml_sgemm(g);
                return;
            }
#endif
        }
        j.tasks_n = (n + j.chunk_n - 1) / j.chunk_n;
        int64_t tasks_m = (g->M + j.chunk_m - 1) / j.chunk_m;
        size_t bytes = g->b.kind == ML_B_PACKED ? 0 : 4 * ml_gemm_bbuf_floats(g->K, j.chunk_n);
        ml_parallel_for(j.tasks_n * tasks_m, ml_sgemm_task, &j, g->bbuf, bytes);
        return;
    }
#endif
    ml_sgemm(g);
}

/* Fewer than MR rows of an unpacked A against a run-time B with unit k stride (B^T
 * row-major: a Gemm with transB and a run-time weight, a decode step's q K^T): each
 * output is a dot product of an A row with a contiguous row of B^T, four at a time, so B
 * streams once in order (packing it first transposed all of it per block: a 9216 x 4096
 * weight took 11.4 ms, now 5.3; ORT 5.8).
 * Lanes and the k tail are summed in a fixed order: any column split, same result.
 * gemm_call (_gemm.py) emits ml_sgemm_t_par for such static shapes only, so other
 * libraries do not compile it. */
ML_INLINE void ml_gemm_small_m_t(const ml_gemm_args* g) {
    const int64_t K = g->K, kv = K / ML_VW * ML_VW, ldn = g->b.ldn;
    for (int64_t n = g->n_begin; n < g->n_end; n += 4) {
        const int nr = (int)ML_MIN(4, g->n_end - n);
        const float* b[4];
        for (int j = 0; j < 4; ++j) b[j] = g->b.p + (n + (j < nr ? j : nr - 1)) * ldn;
        for (int64_t m = 0; m < g->M; ++m) { /* the 4 rows of B^T stay in cache */
            const float* a = g->a_raw + m * g->lda;
            ml_vf acc[4] = {{0}, {0}, {0}, {0}};
            for (int64_t k = 0; k < kv; k += ML_VW) {
                ml_vf av = *(const ml_vf*)(a + k);
                for (int j = 0; j < 4; ++j) acc[j] += av * *(const ml_vf*)(b[j] + k);
            }
            for (int j = 0; j < nr; ++j) {
                float v = 0.0f;
                for (int l = 0; l < ML_VW; ++l) v += acc[j][l];
                for (int64_t k = kv; k < K; ++k) v += a[k] * b[j][k];
                float* o = g->c + m * g->ldc + n + j;
                v *= g->alpha;
                if (g->accumulate) v += *o;
                else {
                    if (g->bias_m) v += g->bias_m[m];
                    if (g->bias_n) v += g->bias_n[n + j];
                }
                *o = v;
            }
        }
    }
    if (g->epi) ml_gemm_epilogue(g, 0, g->M, g->n_begin, g->n_end);
}

#ifdef MONOLIB_THREADPOOL_H
static void ml_sgemm_t_task(void* ctx, int64_t t, void* scratch) {
    (void)scratch;
    const ml_sgemm_job* j = (const ml_sgemm_job*)ctx;
    ml_gemm_args a = *j->g;
    a.n_begin = j->g->n_begin + t * j->chunk_n;
    a.n_end = ML_MIN(j->g->n_end, a.n_begin + j->chunk_n);
    ml_gemm_small_m_t(&a);
}
#endif

/* ml_gemm_small_m_t (M < MR, an unpacked A, B strided with ldk == 1) on the thread pool
 * by column ranges of a multiple of 32 when B is large (its floats count 4 each). */
ML_UNUSED static void ml_sgemm_t_par(const ml_gemm_args* g) {
    if (g->K == 0) {
        ml_gemm_k0(g);
        return;
    }
#ifdef MONOLIB_THREADPOOL_H
    int64_t n = g->n_end - g->n_begin;
    /* streams B: each float of it read once, a multiply-add per row */
    double cost = (ML_PAR_FLOAT_COST + (double)g->M) * (double)n * g->K;
    int64_t tasks = ml_par_split(cost, (n + 31) / 32, ML_PAR_TASK_COST);
    if (tasks > 1) {
        ml_sgemm_job j = {g, ((n + tasks - 1) / tasks + 31) / 32 * 32, 0, 0};
        ml_parallel_for((n + j.chunk_n - 1) / j.chunk_n, ml_sgemm_t_task, &j, 0, 0);
        return;
    }
#endif
    ml_gemm_small_m_t(g);
}

typedef struct {
    const ml_gemm_args* g;
    const float* xe;
    int64_t panels_per_task;
} ml_gemv_job;

/* Panels [t*ppt, (t+1)*ppt) of ml_sgemv_pa for nc columns: sums, the store (alpha, bias
 * or C), the epilogue on those rows. */
ML_INLINE void ml_gemv_pa_rows(const int nc, const ml_gemv_job* j, int64_t t) {
    const ml_gemm_args* g = j->g;
    const int64_t K = g->K, n0 = g->n_begin, xs = ml_gemv_xs(K);
    const int64_t p0 = t * j->panels_per_task;
    const int64_t p1 = ML_MIN((g->M + ML_MR - 1) / ML_MR, p0 + j->panels_per_task);
    for (int64_t p = p0; p < p1; ++p) {
        float y[ML_GEMV_NMAX][ML_MR];
        ml_gemv_pa_panel(nc, K, g->a + p * K * ML_MR, j->xe, xs, y);
        for (int64_t r = 0; r < ML_MR && p * ML_MR + r < g->M; ++r) {
            int64_t m = p * ML_MR + r;
            for (int c = 0; c < nc; ++c) {
                float* o = g->c + m * g->ldc + n0 + c;
                float v = g->alpha * y[c][r];
                if (g->accumulate) v += *o;
                else {
                    if (g->bias_m) v += g->bias_m[m];
                    if (g->bias_n) v += g->bias_n[n0 + c];
                }
                *o = v;
            }
        }
    }
    if (g->epi && p0 < p1) ml_gemm_epilogue(g, p0 * ML_MR, ML_MIN(g->M, p1 * ML_MR), n0, n0 + nc);
}

/* ml_gemv_pa_task_<nc>: the thread-pool task for nc columns (a constant, so the sums
 * stay in registers); only the column counts a library calls with are compiled. */
#define ML_GEMV_TASK_(nc)                                                          \
    ML_UNUSED static void ml_gemv_pa_task_##nc(void* ctx, int64_t t, void* scratch) { \
        (void)scratch;                                                             \
        ml_gemv_pa_rows(nc, (const ml_gemv_job*)ctx, t);                           \
    }
ML_GEMV_TASK_(1)
ML_GEMV_TASK_(2)
ML_GEMV_TASK_(3)
ML_GEMV_TASK_(4)
#undef ML_GEMV_TASK_

/* C[:, n_begin:n_end] = A B for a packed A, K > 0 and the n_end - n_begin (at most
 * ML_GEMV_NMAX) columns of a run-time B (strided or im2col) that task (the matching
 * ml_gemv_pa_task_<nc>) is for; on the thread pool by blocks of panels when A is large
 * (the work is streaming A: its floats count 4). g->bbuf holds ml_gemm_bbuf_floats(K,
 * N) floats, enough for x expanded. */
ML_UNUSED static void ml_sgemv_pa(const ml_gemm_args* g, void (*task)(void*, int64_t, void*)) {
    const int64_t K = g->K, nc = g->n_end - g->n_begin, xs = ml_gemv_xs(K);
    float* xe = g->bbuf;
    for (int64_t k = 0; k < K; ++k) {
        float x[ML_NR];
        if (g->b.kind == ML_B_IM2COL) ml_pack_im2col_row(&g->b, k, g->n_begin, nc, x, 1);
        else
            for (int64_t c = 0; c < nc; ++c)
                x[c] = g->b.p[k * g->b.ldk + (g->n_begin + c) * g->b.ldn];
        for (int64_t c = 0; c < nc; ++c)
            for (int r = 0; r < ML_MR; ++r) xe[c * xs + k * ML_MR + r] = x[c];
    }
    int64_t panels = (g->M + ML_MR - 1) / ML_MR, tasks = 1;
#ifdef MONOLIB_THREADPOOL_H
    /* streams A: each float of it read once for up to ML_GEMV_NMAX columns */
    tasks = ml_par_split((ML_PAR_FLOAT_COST + (double)nc) * panels * ML_MR * K, panels,
                         ML_PAR_TASK_COST);
#endif
    ml_gemv_job j = {g, xe, (panels + tasks - 1) / tasks};
    tasks = (panels + j.panels_per_task - 1) / j.panels_per_task;
#ifdef MONOLIB_THREADPOOL_H
    if (tasks > 1) {
        ml_parallel_for(tasks, task, &j, 0, 0);
        return;
    }
#endif
    for (int64_t t = 0; t < tasks; ++t) task(&j, t, 0);
}

/* A batch of GEMMs of one shape (MatMul / FusedMatMul on [.., M, K] x [.., K, N]):
 * batch bi is g with A, B and C moved to that batch's matrices. */
typedef struct {
    ml_gemm_args g;          /* batch 0's call (offsets are added to its pointers) */
    int64_t nb;              /* batches */
    const int64_t* off;      /* 2*nb element offsets: batch bi's A (of a_raw or a_src)
                              * and B (of a strided B) */
    int64_t a_pstride;       /* packed A (g.a): floats between batches' packed matrices */
    int64_t b_pstride;       /* prepacked B: floats between batches' packed matrices */
    int64_t c_stride;        /* C: floats between batches */
    const float* a_src;      /* non-NULL: A[m][k] = a_src[off + m*a_ldm + k*a_ldk], packed
                              * per batch into the scratch after the B block buffer */
    int64_t a_ldm, a_ldk;
} ml_gemm_batch;

/* Floats of scratch ml_sgemm_batch needs per thread: the B block buffer (a strided B),
 * then A packed (a_src), each a multiple of 16 floats. */
static inline int64_t ml_gemm_batch_floats(const ml_gemm_batch* j) {
    int64_t f = j->g.b.kind == ML_B_PACKED ? 0 : (ml_gemm_bbuf_floats(j->g.K, j->g.N) + 15) / 16 * 16;
    if (j->a_src) f += (j->g.M + ML_MR - 1) / ML_MR * ML_MR * j->g.K;
    return f;
}

/* g moved to batch bi; scratch as ml_gemm_batch_floats lays it out. */
static inline ml_gemm_args ml_gemm_batch_args(const ml_gemm_batch* j, int64_t bi, float* scratch,
                                              int par) {
    ml_gemm_args a = j->g;
    if (j->a_src) {
        float* pa = scratch + (a.b.kind == ML_B_PACKED ? 0 : (ml_gemm_bbuf_floats(a.K, a.N) + 15) / 16 * 16);
        if (par) ml_pack_a_par(a.M, a.K, j->a_src + j->off[2 * bi], j->a_ldm, j->a_ldk, pa);
        else ml_pack_a(a.M, a.K, j->a_src + j->off[2 * bi], j->a_ldm, j->a_ldk, pa);
        a.a = pa;
    } else if (a.a_raw) {
        a.a_raw += j->off[2 * bi];
    } else {
        a.a += bi * j->a_pstride;
    }
    if (a.b.kind == ML_B_PACKED) a.b.p += bi * j->b_pstride;
    else a.b.p += j->off[2 * bi + 1];
    a.bbuf = scratch;
    a.c += bi * j->c_stride;
    a.epi_b += bi;
    return a;
}

#ifdef MONOLIB_THREADPOOL_H
static void ml_sgemm_batch_task(void* ctx, int64_t t, void* scratch) {
    ml_gemm_args a = ml_gemm_batch_args((const ml_gemm_batch*)ctx, t, (float*)scratch, 0);
    ml_sgemm(&a);
}
#endif

/* Every batch of j; scratch holds ml_gemm_batch_floats(j) floats (64-aligned). With at
 * least as many batches as threads each thread takes whole batches (one pool round trip
 * for the op, no split of a small GEMM); else each batch is split as ml_sgemm_par
 * splits one GEMM. */
ML_UNUSED static void ml_sgemm_batch(const ml_gemm_batch* j, float* scratch) {
#ifdef MONOLIB_THREADPOOL_H
    /* whole batches a task: each batch one GEMM on its thread (its A packed there) */
    double each = ml_gemm_task_cost(&j->g, j->g.M, j->g.n_end - j->g.n_begin);
    if (j->a_src) each += ML_PAR_FLOAT_COST * (double)j->g.M * j->g.K;
    if (j->nb >= ml_num_threads() && ml_par_most(each * j->nb, j->nb) > 1 &&
        ml_par_pays(each * j->nb, ml_par_span(j->nb, each, each, ml_num_threads()))) {
        ml_parallel_for(j->nb, ml_sgemm_batch_task, (void*)j, scratch,
                        (size_t)ml_gemm_batch_floats(j) * sizeof(float));
        return;
    }
#endif
    for (int64_t bi = 0; bi < j->nb; ++bi) {
        ml_gemm_args a = ml_gemm_batch_args(j, bi, scratch, 1);
        ml_sgemm_par(&a);
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_GEMM_H */
