/* conv_ocv.h -- direct convolution vectorised over output channels (monolib kernel library).
 *
 * Needs gemm.h (ml_vf, ML_VW, ml_epi_fn, ml_transpose16) before it.
 *
 * ml_ocv_conv2d: NCHW images, any window, stride, dilation and padding; groups whose
 * outputs are whole blocks of 16 channels (each block reads its group's inputs).
 * The accumulators of a tile are OB vectors of output channels (ML_VW each) x P output
 * pixels of one output row, the bias preloaded. Per input channel, per window row that
 * falls inside the image (rows outside are skipped: no vertical padding) and per window
 * column, the tile loads OB weight vectors and broadcasts P input floats straight from
 * the NCHW image: no im2col packing, no padded copy, and rows never padded to a tile
 * width. The columns whose windows lie wholly inside the image (the interior) run as
 * whole tiles, the last one moved back over pixels already done (the same sums, stored
 * again); the few border columns run one pixel at a time over their valid window columns.
 * Tiles are written pixel-major to per-thread staging ([OB][band pixels][ML_VW]) and a
 * band of rows is transposed into the NCHW planes (16 x 16 register transposes at 16
 * floats a vector), where the fused epilogue then runs.
 *
 * Weights: packed by conv_ocv.py as [M groups][C][KH][KW][G*16] (G blocks of 16 output
 * channels a group, zeros past M), bias as [groups*G*16] (zeros past M, or all zero), so
 * any ML_VW reads a tap of a group as OB = G*16/ML_VW consecutive vectors.
 *
 * Rows wider than the staging (gsz * OW > ML_OCV_STAGE: a 1-D conv over a long signal,
 * [C][1][W]) run in segments of columns, one row a unit, so the staged outputs stay in
 * L2 and a one-row image still splits over threads (a 64 -> 64 3-tap conv over 3200
 * samples was one unit: 800 KB staged, no split at 2 threads).
 *
 * Threads: units are (channel group, band of output rows, segment of columns),
 * group-major so a task keeps its group's weights in cache; a unit repeats no set-up, so
 * the bands may be a few rows.
 * Every output is the same sum in the same order whatever the split: bit-identical at any
 * thread count.
 *
 * Compile cost: one row function per (G, SW) the model uses (ml_ocv_row_<G>_<S>, S = 0
 * for strides other than 1 and 2), each with two unrolled tiles (P pixels and 1).
 */
#ifndef MONOLIB_CONV_OCV_H
#define MONOLIB_CONV_OCV_H
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
#endif
#include <stdint.h>
#include <string.h>

#define ML_OCV_G 16        /* output channels per packed block (a multiple of any ML_VW) */
#define ML_OCV_STAGE 16384 /* floats of a band's staged outputs (64 KiB: in L2) */
#define ML_OCV_ROWS 2      /* fewest output rows of a band split for threads */
#define ML_OCV_SEG_MIN 64  /* fewest columns of a segment (its edges and tail tiles) */
#define ML_OCV_EPI_RUN 256 /* most pixels stored before the epilogue runs on them */
/* Small maps run flat (conv_ocv.py picks it by cost): a band's input rows are copied
 * zero-padded, Wp floats a row, into this many floats after the staging, and its output
 * rows run as ONE span of (rows - 1) * Wp + OW pixels, pixel q reading the padded input
 * at q * SW (SH == SW: row r's pixels start at q = r * Wp), every window whole. The
 * Wp - OW pixels between two rows are computed and dropped. By rows, a 7-wide row has
 * no room for a tile of 24 (16 output channels a tile): all 7 pixels ran one at a time,
 * one accumulator each (RegNetX's 400-channel 3x3 convs in groups of 16 at 7x7: 151 us,
 * ORT 75-93). */
#define ML_OCV_FLAT_PAD 16384
/* An input of more bytes than this (a conv group's channels) has its next output row's
 * new rows prefetched into L2 while a row runs, a share after each tile (ml_ocv_pf_t). A
 * tile reads C*KH rows at once, more streams than the L2 prefetcher follows, so without
 * it each line was a demand miss to L3, and L3 is shared with the VM's neighbours: 24 ->
 * 48 3x3/2 at 208x208 (4.2 MB in) took 2.3-4.3 ms from one process to the next, 2.2-2.6
 * with it (the direct kernel: 2.4-2.7). Inputs that stay in L2 gained nothing (16 -> 32
 * at 160x160, 1.6 MB: 0.580 -> 0.589 ms), hence the floor of twice L2. */
#define ML_OCV_PF_BYTES (2 << 20)
/* accumulators of a tile: 24 of the 32 AVX-512 registers, 12 of 16 elsewhere (the rest
 * hold the weight vectors and a broadcast) */
#if ML_VW == 16
#define ML_OCV_ACC 24
#else
#define ML_OCV_ACC 12
#endif
/* output-channel vectors of a G-block group, and pixels of its tile */
#define ML_OCV_OB(G) ((G) * ML_OCV_G / ML_VW)
#define ML_OCV_P(G) (ML_OCV_OB(G) >= ML_OCV_ACC ? 1 : ML_OCV_ACC / ML_OCV_OB(G))
/* sizes of the register arrays: constant, so that gcc keeps them in registers (an array
 * sized by the inlined OB and P would be a VLA, kept in memory) */
#define ML_OCV_NACC (ML_OCV_OB(4) > ML_OCV_ACC ? ML_OCV_OB(4) : ML_OCV_ACC)

typedef struct ml_ocv_job_s ml_ocv_job;
/* Columns ow0..ow1-1 of output row oh of channel group g into staging st (vector o's
 * pixel ow at st + o * ss + (ow - ow0) * ML_VW). */
typedef void (*ml_ocv_row_fn)(const ml_ocv_job* j, int64_t g, int64_t oh, int64_t ow0,
                              int64_t ow1, float* st, int64_t ss);
/* Output rows oh0..oh1-1 of channel group g as one flat run (see ML_OCV_FLAT_PAD): the
 * rows' inputs copied zero-padded into pad, pixel q of the run staged at st + q * ML_VW. */
typedef void (*ml_ocv_flat_fn)(const ml_ocv_job* j, int64_t g, int64_t oh0, int64_t oh1,
                               float* st, int64_t ss, float* pad);

struct ml_ocv_job_s {
    int64_t C, H, W, M, OH, OW, PT, PL, i0, i1, gsz, bpg, ngroups, band, nb, chunk, epi_b;
    int64_t seg, ns; /* columns per segment (OW: whole rows) and segments per row */
    int64_t xpl;     /* floats between two input channels (H * W; flat: ml_ocv_flat_plane) */
    int KH, KW, SH, SW, DH, DW;
    const float *x, *wp, *bias;
    float* y;
    ml_epi_fn epi;
    void* epi_out;
    ml_ocv_row_fn row;
    ml_ocv_flat_fn flat; /* set: bands run flat (ML_OCV_FLAT_PAD), Wp floats a padded row */
    int64_t Wp;
    int prefetch; /* the input outgrows ML_OCV_PF_BYTES */
    int64_t nimg, x_img, y_img; /* images, and the floats between them in x and y */
};

/* Floats between two channels of a flat band's padded rows (rows x Wp): an odd number
 * of 64-byte lines, so that the channels a tile reads fall in different L1 sets. At
 * 16 rows of 16 (1 KiB a channel) every fourth channel shared a set and 32 channels
 * overflowed its 8 ways: 1024 -> 1024 3x3 in groups of 32 at 14x14 ran 1.34 ms flat,
 * 1.12 by rows. */
static inline int64_t ml_ocv_flat_plane(int64_t rows, int64_t Wp) {
    return ((rows * Wp + 15) / 16 | 1) * 16;
}

/* Sums of P pixels (SW apart) x OB channel vectors over every input channel and the
 * window rows ky0..ky0+nky-1, columns kx0..kx0+nkx-1, from the bias b: xs is channel 0's
 * input at (ky0, kx0) of the first pixel, w the group's weights at that tap of channel 0.
 * (Chunks of input channels whose weights fit L1, the sums carried in memory, measured
 * 3-15% slower on Zen 4: the weights stream from L2 fast enough.) */
ML_INLINE void ml_ocv_tile(const int OB, const int P, const int SW, const ml_ocv_job* j,
                           const float* restrict xs, const float* restrict w, int nky,
                           int nkx, const float* restrict b, float* restrict st, int64_t ss) {
    ml_vf acc[ML_OCV_NACC];
#pragma GCC unroll 16
    for (int o = 0; o < OB; ++o) {
        ml_vf bv = *(const ml_vf*)(b + o * ML_VW);
#pragma GCC unroll 32
        for (int p = 0; p < P; ++p) acc[o * P + p] = bv;
    }
    const int64_t plane = j->xpl, xrow = (int64_t)j->DH * j->W;
    const int64_t wc = (int64_t)j->KH * j->KW * OB * ML_VW, wrow = (int64_t)j->KW * OB * ML_VW;
    const int DW = j->DW;
    for (int64_t c = 0; c < j->C; ++c, xs += plane, w += wc) {
        const float* xk = xs;
        const float* wk = w;
        for (int ky = 0; ky < nky; ++ky, xk += xrow, wk += wrow) {
            const float* xp = xk;
            const float* wt = wk;
            for (int kx = 0; kx < nkx; ++kx, xp += DW, wt += OB * ML_VW) {
                /* the weight vectors read in the FMAs (an array of them was kept in
                 * memory): gcc loads each once per tap where registers are free */
                const ml_vf* wv = (const ml_vf*)wt;
#pragma GCC unroll 32
                for (int p = 0; p < P; ++p) {
                    ml_vf xv = xp[p * SW] - (ml_vf){0}; /* a splat (x - 0 is x, folded) */
#pragma GCC unroll 16
                    for (int o = 0; o < OB; ++o) acc[o * P + p] += wv[o] * xv;
                }
            }
        }
    }
#pragma GCC unroll 16
    for (int o = 0; o < OB; ++o)
#pragma GCC unroll 32
        for (int p = 0; p < P; ++p) *(ml_vf*)(st + o * ss + p * ML_VW) = acc[o * P + p];
}

/* A tile instance (see ML_OCV_ROW_FN): out of line, so that its accumulators get the
 * registers (inlined into the row loop, gcc kept the bias vectors live across tiles and
 * spilled a weight vector on every tap). */
typedef void (*ml_ocv_tile_fn)(const ml_ocv_job* j, const float* xs, const float* w, int nky,
                               int nkx, const float* b, float* st, int64_t ss);

/* The next output row's new input rows (every channel, the columns this row's outputs
 * read), prefetched into L2 a few lines after each tile of the row (ML_OCV_PF_BYTES):
 * issued all at once at the row's start, most of a row's thousands of prefetches were
 * dropped (the miss queue is tens of lines deep): 64 -> 64 3x3/2 at 256x256 (16.8 MB in)
 * ran at 81 GFLOP/s against 106 at 128x128. Line `o` of row `r` of channel `c` next. */
typedef struct {
    const char* base;
    int64_t C, r0, r1, o0, o1, plane, row; /* bytes: plane, row, columns [o0, o1) */
    int64_t c, r, o, per;                  /* the cursor; lines per tile */
} ml_ocv_pf_t;

/* Prefetch up to n more lines of p (none left: nothing), a row's run at a time. */
static inline void ml_ocv_pf_run(ml_ocv_pf_t* p, int64_t n) {
    while (n > 0 && p->c < p->C) {
        const char* row = p->base + p->c * p->plane + p->r * p->row;
        const int64_t left = (p->o1 - p->o + 63) / 64; /* lines left in this row */
        const int64_t k = n < left ? n : left;        /* n may be INT64_MAX: no n * 64 */
        const int64_t e = ML_MIN(p->o1, p->o + k * 64);
        n -= k;
        for (; p->o < e; p->o += 64) __builtin_prefetch(row + p->o, 0, 2);
        if (p->o >= p->o1) {
            p->o = p->o0;
            if (++p->r >= p->r1) p->r = p->r0, ++p->c;
        }
    }
}

/* The window columns kx0..kx1-1 of output column ow that fall inside the image. */
ML_INLINE void ml_ocv_cols(const ml_ocv_job* j, int SW, int64_t ow, int* kx0, int* kx1) {
    const int64_t iw = ow * SW - j->PL;
    int a = 0, b = j->KW;
    while (a < b && iw + (int64_t)a * j->DW < 0) ++a;
    while (b > a && iw + (int64_t)(b - 1) * j->DW >= j->W) --b;
    *kx0 = a, *kx1 = b;
}

/* Columns a..b-1 of a row, all with the same valid window columns kx0..kx0+nkx-1 (xi:
 * column 0's window start, its input row ky0; w: the weights at (ky0, 0)): tiles of P
 * pixels, then the remainder r < P by cost (pixels computed, a one-pixel tile counting
 * about 2: its loads equal its FMAs): r >= H + 2 by `tile` moved back over pixels already
 * done (the same sums, stored again), else `half` (H = P / 2 pixels) where it fits, moved
 * back for r < H, and `one` for what is left. st: the staging of column ow0 (an address
 * only formed for columns of the span); pf: the row's prefetches, a share after each
 * tile. */
ML_INLINE void ml_ocv_span(const int P, const int SW, ml_ocv_tile_fn tile, ml_ocv_tile_fn half,
                           ml_ocv_tile_fn one, const ml_ocv_job* j, const float* restrict xi,
                           const float* restrict w, int nky, int kx0, int nkx,
                           const float* restrict bias, int64_t a, int64_t b, float* st,
                           int64_t ow0, int64_t ss, ml_ocv_pf_t* pf) {
    const int H = P / 2;
    xi += (int64_t)kx0 * j->DW;
    w += kx0 * j->gsz;
#define ML_OCV_AT(fn, ow) \
    (fn(j, xi + (ow) * SW, w, nky, nkx, bias, st + ((ow) - ow0) * ML_VW, ss), \
     ml_ocv_pf_run(pf, pf->per))
    int64_t ow = a;
    for (; ow + P <= b; ow += P) ML_OCV_AT(tile, ow);
    const int64_t r = b - ow;
    if (r >= H + 2 && b - a >= P) {
        ML_OCV_AT(tile, b - P);
        ow = b;
    } else if (H > 1 && r >= H) {
        ML_OCV_AT(half, ow);
        ow += H;
    } else if (H > 1 && r >= 2 && b - a >= H) {
        ML_OCV_AT(half, b - H);
        ow = b;
    }
    for (; ow < b; ++ow) ML_OCV_AT(one, ow);
#undef ML_OCV_AT
}

/* Columns ow0..ow1-1 of output row oh of group g, in spans of columns whose windows have
 * the same columns inside the image (ml_ocv_span): the interior (i0..i1-1, every window
 * column inside) and, on each side, runs of edge columns. A 3x3 window padded by 1 has
 * one edge column a side; a dilated window has as many as its dilation (DeepLab's 3x3
 * at dilation 18 on a 64-wide map: 36 of 64 columns, once run one pixel at a time at a
 * third of the tiles' speed). */
ML_INLINE void ml_ocv_row_k(const int P, const int SW, ml_ocv_tile_fn tile,
                            ml_ocv_tile_fn half, ml_ocv_tile_fn one, const ml_ocv_job* j,
                            int64_t g, int64_t oh, int64_t ow0, int64_t ow1,
                            float* restrict st, int64_t ss) {
    const int64_t ih = oh * j->SH - j->PT;
    int ky0 = 0, ky1 = j->KH;
    while (ky0 < ky1 && ih + (int64_t)ky0 * j->DH < 0) ++ky0;
    while (ky1 > ky0 && ih + (int64_t)(ky1 - 1) * j->DH >= j->H) --ky1;
    const int64_t gsz = j->gsz;
    const float* b = j->bias + g * gsz;
    const float* w = j->wp + g * j->C * j->KH * j->KW * gsz + ky0 * j->KW * gsz;
    const int nky = ky1 - ky0;
    if (nky == 0) { /* the window misses the image: the bias alone */
        for (int64_t ow = ow0; ow < ow1; ++ow)
            for (int64_t o = 0; o < gsz / ML_VW; ++o)
                *(ml_vf*)(st + o * ss + (ow - ow0) * ML_VW) = *(const ml_vf*)(b + o * ML_VW);
        return;
    }
    const float* xr = j->x + (g / j->bpg) * j->C * j->H * j->W /* its conv group's input */
                      + (ih + (int64_t)ky0 * j->DH) * j->W;
    const float* xi = xr - j->PL;
    ml_ocv_pf_t pf = {0};
    if (j->prefetch) { /* the next output row's new input rows, every channel, into L2 */
        int64_t r0 = ih + (int64_t)(j->KH - 1) * j->DH + 1, r1 = ML_MIN(r0 + j->SH, j->H);
        /* the input columns these output columns read */
        int64_t c0 = ML_MAX(ow0 * SW - j->PL, 0) * 4;
        int64_t c1 = ML_MIN((ow1 - 1) * SW - j->PL + (int64_t)(j->KW - 1) * j->DW + 1, j->W) * 4;
        r0 = r0 < 0 ? 0 : r0;
        if (r1 > r0 && c1 > c0) {
            pf.base = (const char*)(j->x + (g / j->bpg) * j->C * j->H * j->W);
            pf.C = j->C, pf.r0 = pf.r = r0, pf.r1 = r1, pf.o0 = pf.o = c0, pf.o1 = c1;
            pf.plane = j->H * j->W * 4, pf.row = j->W * 4;
            const int64_t lines = j->C * (r1 - r0) * ((c1 - c0 + 63) / 64);
            pf.per = (lines + (ow1 - ow0) / P) / ((ow1 - ow0) / P + 1) + 1;
        }
    }
    for (int64_t ow = ow0; ow < ow1;) {
        int64_t end;
        int kx0 = 0, kx1 = j->KW;
        if (ow >= j->i0 && ow < j->i1) {
            end = ML_MIN(j->i1, ow1);
        } else { /* the run of edge columns with this column's window columns */
            ml_ocv_cols(j, SW, ow, &kx0, &kx1);
            end = ow + 1;
            int a, c;
            while (end < ow1 && !(end >= j->i0 && end < j->i1)) {
                ml_ocv_cols(j, SW, end, &a, &c);
                if (a != kx0 || c != kx1) break;
                ++end;
            }
        }
        ml_ocv_span(P, SW, tile, half, one, j, xi, w, nky, kx0, kx1 - kx0, b, ow, end, st,
                    ow0, ss, &pf);
        ow = end;
    }
    ml_ocv_pf_run(&pf, INT64_MAX); /* what the tiles left */
}

/* Output rows oh0..oh1-1 of group g flat (ML_OCV_FLAT_PAD): the band's input rows of
 * every channel copied zero-padded into pad ([C][rows][Wp]), then one span over the
 * padded band (a job whose image is the band: H rows, Wp wide), every window whole. */
ML_INLINE void ml_ocv_flat_k(const int P, const int SW, ml_ocv_tile_fn tile,
                             ml_ocv_tile_fn half, ml_ocv_tile_fn one, const ml_ocv_job* j,
                             int64_t g, int64_t oh0, int64_t oh1, float* restrict st,
                             int64_t ss, float* restrict pad) {
    const int64_t W = j->W, Wp = j->Wp, PL = j->PL, lo = oh0 * j->SH - j->PT;
    const int64_t rows = (oh1 - oh0 - 1) * j->SH + (int64_t)(j->KH - 1) * j->DH + 1;
    const int64_t pl = ml_ocv_flat_plane(rows, Wp);
    const float* xg = j->x + (g / j->bpg) * j->C * j->H * W; /* its conv group's input */
    /* zeros, then the rows inside the image: a few calls, not three per row (a 7-wide
     * row's memcpy and memsets cost more than its floats) */
    memset(pad, 0, sizeof(float) * (size_t)(j->C * pl));
    const int64_t i0 = ML_MAX(-lo, 0), i1 = ML_MIN(rows, j->H - lo);
    for (int64_t c = 0; c < j->C; ++c)
        for (int64_t i = i0; i < i1; ++i) {
            float* restrict d = pad + c * pl + i * Wp + PL;
            const float* restrict sr = xg + (c * j->H + lo + i) * W;
            for (int64_t k = 0; k < W; ++k) d[k] = sr[k];
        }
    ml_ocv_job f = *j;
    f.H = rows, f.W = Wp, f.xpl = pl;
    ml_ocv_pf_t pf = {0}; /* no prefetch: the band is in L1/L2 */
    ml_ocv_span(P, SW, tile, half, one, &f, pad, j->wp + g * j->C * j->KH * j->KW * j->gsz,
                j->KH, 0, j->KW, j->bias + g * j->gsz, 0, (oh1 - oh0 - 1) * Wp + j->OW, st,
                0, ss, &pf);
}

/* ml_ocv_row_<G>_<S> and ml_ocv_flat_<G>_<S>: G blocks of 16 channels, column stride S
 * (0: any, read at run time), with their two tiles; only those a model names are
 * compiled. */
#if defined(__GNUC__) && !defined(__clang__)
#define ML_OCV_NOINLINE __attribute__((noinline, noipa, unused))
#else
#define ML_OCV_NOINLINE __attribute__((noinline, unused))
#endif
#define ML_OCV_TILE_FN(NAME, G, S, P)                                                       \
    ML_OCV_NOINLINE static void NAME(const ml_ocv_job* j, const float* xs, const float* w,     \
                                     int nky, int nkx, const float* b, float* st, int64_t ss) { \
        ml_ocv_tile(ML_OCV_OB(G), P, (S) ? (S) : j->SW, j, xs, w, nky, nkx, b, st, ss);        \
    }
#define ML_OCV_HALF(G) (ML_OCV_P(G) / 2 > 1 ? ML_OCV_P(G) / 2 : 1)
#define ML_OCV_ROW_FN(G, S)                                                                   \
    ML_OCV_TILE_FN(ml_ocv_tile_##G##_##S, G, S, ML_OCV_P(G))                                  \
    ML_OCV_TILE_FN(ml_ocv_half_##G##_##S, G, S, ML_OCV_HALF(G))                               \
    ML_UNUSED static void ml_ocv_row_##G##_##S(const ml_ocv_job* j, int64_t g, int64_t oh,   \
                                               int64_t ow0, int64_t ow1, float* st,          \
                                               int64_t ss) {                                 \
        ml_ocv_row_k(ML_OCV_P(G), (S) ? (S) : j->SW, ml_ocv_tile_##G##_##S,                   \
                     ml_ocv_half_##G##_##S, ml_ocv_one_##G, j, g, oh, ow0, ow1, st, ss);      \
    }                                                                                         \
    ML_UNUSED static void ml_ocv_flat_##G##_##S(const ml_ocv_job* j, int64_t g, int64_t oh0,  \
                                                int64_t oh1, float* st, int64_t ss,          \
                                                float* pad) {                                \
        ml_ocv_flat_k(ML_OCV_P(G), (S) ? (S) : j->SW, ml_ocv_tile_##G##_##S,                  \
                      ml_ocv_half_##G##_##S, ml_ocv_one_##G, j, g, oh0, oh1, st, ss, pad);   \
    }
ML_OCV_TILE_FN(ml_ocv_one_1, 1, 1, 1) ML_OCV_TILE_FN(ml_ocv_one_2, 2, 1, 1)
ML_OCV_TILE_FN(ml_ocv_one_3, 3, 1, 1) ML_OCV_TILE_FN(ml_ocv_one_4, 4, 1, 1)
ML_OCV_ROW_FN(1, 1) ML_OCV_ROW_FN(1, 2) ML_OCV_ROW_FN(1, 0)
ML_OCV_ROW_FN(2, 1) ML_OCV_ROW_FN(2, 2) ML_OCV_ROW_FN(2, 0)
ML_OCV_ROW_FN(3, 1) ML_OCV_ROW_FN(3, 2) ML_OCV_ROW_FN(3, 0)
ML_OCV_ROW_FN(4, 1) ML_OCV_ROW_FN(4, 2) ML_OCV_ROW_FN(4, 0)

/* n staged pixels of one channel vector (src: [n][ML_VW]) into nc channel planes of y
 * (ys: channel c0's first pixel, planes `plane` floats apart). */
static void ml_ocv_store(const float* restrict src, int64_t n, int64_t nc, float* restrict ys,
                         int64_t plane) {
    /* ML_VW x ML_VW register transposes at every width: the scalar loop below, which gcc
     * 12 turned into a gather of vpermd + blend per output vector, was 40% of a 3 -> 64
     * 3x3/2 first layer on AVX2 (more than its FMAs) */
    if (n >= ML_VW) {
        for (int64_t s = 0; s < n; s += ML_VW) {
            int64_t s0 = ML_MIN(s, n - ML_VW); /* the last block moved back */
            ml_vf r[ML_VW];
            for (int k = 0; k < ML_VW; ++k) r[k] = *(const ml_vf*)(src + (s0 + k) * ML_VW);
            ml_transpose_vw(r);
            for (int64_t i = 0; i < nc; ++i) memcpy(ys + i * plane + s0, &r[i], sizeof(ml_vf));
        }
        return;
    }
    for (int64_t i = 0; i < nc; ++i)
        for (int64_t p = 0; p < n; ++p) ys[i * plane + p] = src[p * ML_VW + i];
}

/* rows x OW staged pixels of one channel vector, row r's at src + r * Wp * ML_VW (a flat
 * band), into nc channel planes of y (ys: channel c0's first pixel). AVX-512: 16 staged
 * pixels a transpose from each row's start, stored masked to the row (pixels past it
 * are the next row's padding or staging past the run, read and dropped; the scratch
 * holds ML_OCV_FLAT_PAD floats past the staging); one row at a time through
 * ml_ocv_store, a 14-wide row went scalar: 15% of a 160 -> 160 3x3 in groups of 16 at
 * 14x14. */
static void ml_ocv_store_flat(const float* restrict src, int64_t rows, int64_t Wp, int64_t OW,
                              int64_t nc, float* restrict ys, int64_t plane) {
#if ML_VW == 16 && defined(__AVX512F__) && defined(__GNUC__)
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t s = 0; s < OW; s += 16) {
            const unsigned n = (unsigned)ML_MIN(16, OW - s);
            const unsigned short mk = (unsigned short)((1u << n) - 1u);
            ml_vf v[16];
            for (int k = 0; k < 16; ++k) v[k] = *(const ml_vf*)(src + (r * Wp + s + k) * ML_VW);
            ml_transpose16(v);
            for (int64_t i = 0; i < nc; ++i)
                __builtin_ia32_storeups512_mask(ys + i * plane + r * OW + s, v[i], mk);
        }
#else
    for (int64_t r = 0; r < rows; ++r)
        ml_ocv_store(src + r * Wp * ML_VW, OW, nc, ys + r * OW, plane);
#endif
}

/* Unit u: image u / (ngroups * nb * ns), channel group, then band of rows, then segment
 * of columns (a segment narrower than a row comes with bands of one row), staged in st. */
static void ml_ocv_unit(const ml_ocv_job* j, int64_t u, float* restrict st) {
    if (j->nimg > 1) { /* the image's unit of a one-image job */
        const int64_t units = j->ngroups * j->nb * j->ns, img = u / units;
        ml_ocv_job one = *j;
        one.nimg = 1;
        one.x += img * j->x_img;
        one.y += img * j->y_img;
        one.epi_b += img;
        ml_ocv_unit(&one, u % units, st);
        return;
    }
    const int64_t per = j->nb * j->ns, g = u / per, rb = (u % per) / j->ns;
    const int64_t oh0 = rb * j->band, ow0 = (u % j->ns) * j->seg;
    const int64_t oh1 = ML_MIN(j->OH, oh0 + j->band), ow1 = ML_MIN(j->OW, ow0 + j->seg);
    if (oh0 >= oh1 || ow0 >= ow1) return;
    const int64_t c0 = g * j->gsz, c1 = ML_MIN(j->M, c0 + j->gsz), plane = j->OH * j->OW;
    if (j->flat) { /* whole rows, staged Wp pixels apart */
        const int64_t OW = j->OW, Wp = j->Wp, ss = ((oh1 - oh0 - 1) * Wp + OW) * ML_VW;
        j->flat(j, g, oh0, oh1, st, ss, st + ML_OCV_STAGE);
        for (int64_t v = 0; c0 + v * ML_VW < c1; ++v) {
            const int64_t cv = c0 + v * ML_VW, nc = ML_MIN(ML_VW, c1 - cv);
            ml_ocv_store_flat(st + v * ss, oh1 - oh0, Wp, OW, nc, j->y + cv * plane + oh0 * OW,
                              plane);
            if (j->epi) j->epi(j->epi_out, j->epi_b, cv, cv + nc, oh0 * OW, oh1 * OW);
        }
        return;
    }
    const int64_t OW = j->OW, w = ow1 - ow0, n = (oh1 - oh0) * w, ss = n * ML_VW;
    for (int64_t oh = oh0; oh < oh1; ++oh)
        j->row(j, g, oh, ow0, ow1, st + (oh - oh0) * w * ML_VW, ss);
    /* whole rows are one run of n pixels in each plane; a segment a run per row */
    const int64_t runs = w == OW ? 1 : oh1 - oh0, rn = w == OW ? n : w;
    /* the epilogue on each vector's channels as they are stored, still in L1 (after the
     * whole group, up to 64 channels' band, it read them back from L2) */
    for (int64_t v = 0; c0 + v * ML_VW < c1; ++v) {
        const int64_t cv = c0 + v * ML_VW, nc = ML_MIN(ML_VW, c1 - cv);
        for (int64_t q = 0; q < runs; ++q)
            /* in pieces of ML_OCV_EPI_RUN pixels, so that the epilogue reads what the
             * store just wrote from L1 (a band's run of 8 channels x 999 pixels, 32 KB,
             * had left it: the epilogue was 10% of a 3 -> 64 3x3/2 first layer on AVX2);
             * a piece never leaves fewer than ML_VW pixels after it */
            for (int64_t s0 = 0; s0 < rn;) {
                int64_t len = ML_MIN(ML_OCV_EPI_RUN, rn - s0);
                if (rn - s0 - len < ML_VW) len = rn - s0;
                const int64_t p0 = (oh0 + q) * OW + ow0 + s0;
                ml_ocv_store(st + v * ss + (q * rn + s0) * ML_VW, len, nc, j->y + cv * plane + p0,
                             plane);
                if (j->epi) j->epi(j->epi_out, j->epi_b, cv, cv + nc, p0, p0 + len);
                s0 += len;
            }
    }
}

#ifdef MONOLIB_THREADPOOL_H
static void ml_ocv_task(void* ctx, int64_t t, void* scratch) {
    const ml_ocv_job* j = (const ml_ocv_job*)ctx;
    int64_t u0 = t * j->chunk, u1 = ML_MIN(j->nimg * j->ngroups * j->nb * j->ns, u0 + j->chunk);
    for (int64_t u = u0; u < u1; ++u) ml_ocv_unit(j, u, (float*)scratch);
}
#endif

/* Columns per segment: a whole row when its staged outputs fit ML_OCV_STAGE floats,
 * else as many as do (at least ML_OCV_SEG_MIN). */
static inline int64_t ml_ocv_seg_cols(int64_t OW, int64_t gsz) {
    if (gsz * OW <= ML_OCV_STAGE) return OW;
    return ML_MIN(OW, ML_MAX(ML_OCV_SEG_MIN, ML_OCV_STAGE / gsz));
}

/* Output rows per band: as many as keep the staged outputs within ML_OCV_STAGE floats
 * (one row of segments when a row is wider). */
static inline int64_t ml_ocv_band_rows(int64_t OH, int64_t OW, int64_t gsz) {
    int64_t b = ML_OCV_STAGE / (gsz * OW);
    return b < 1 ? 1 : ML_MIN(b, OH);
}

/* Floats of staging per thread (conv_ocv.py's ocv_scratch_floats mirrors it): flat, the
 * staging's most and the padded rows after it. */
static inline int64_t ml_ocv_scratch_floats(int64_t OH, int64_t OW, int64_t gsz, int flat) {
    if (flat) return ML_OCV_STAGE + ML_OCV_FLAT_PAD;
    return ml_ocv_band_rows(OH, OW, gsz) * ml_ocv_seg_cols(OW, gsz) * gsz;
}

/* Output rows per band run flat: as many as keep the staged run within ML_OCV_STAGE
 * floats and the padded input rows within ML_OCV_FLAT_PAD; 0 when one row does not fit
 * (conv_ocv.py's flat_band mirrors it). */
static inline int64_t ml_ocv_flat_band(int64_t C, int64_t OH, int64_t OW, int64_t Wp, int KH,
                                       int SH, int DH, int64_t gsz) {
    int64_t b = OH;
    while (b > 0 && (((b - 1) * Wp + OW) * gsz > ML_OCV_STAGE ||
                     C * ml_ocv_flat_plane((b - 1) * SH + (int64_t)(KH - 1) * DH + 1, Wp) >
                         ML_OCV_FLAT_PAD))
        --b;
    return b;
}

/* Conv of nimg NCHW images x (x_img floats apart; the conv group's share of one image)
 * into y [nimg][..][M][OH][OW] (y_img floats apart; see above); wp, bias: packed by
 * conv_ocv.py for groups of gsz = G*16 channels; row: ml_ocv_row_<G>_<S>; scratch:
 * ml_ocv_scratch_floats floats; flat: ml_ocv_flat_<G>_<S> to run bands flat (SH == SW,
 * conv_ocv.py's choice by cost), or 0. A grouped conv: C input channels per conv group, each
 * group's outputs bpg whole blocks; one group: C all of them, bpg >= the blocks. Units
 * (the images' units one job: a batch made a job per image) split over the pool from
 * ML_PAR_MIN_WORK; epi_b is image 0's and counts up. */
ML_UNUSED static void ml_ocv_conv2d(int64_t nimg, int64_t x_img, int64_t y_img,
                                    int64_t C, int64_t H, int64_t W, int64_t M, int64_t OH,
                                    int64_t OW, int KH, int KW, int SH, int SW, int64_t PT,
                                    int64_t PL, int DH, int DW, int64_t gsz, int64_t bpg,
                                    const float* restrict x, const float* restrict wp,
                                    const float* restrict bias, float* restrict y,
                                    float* restrict scratch, ml_ocv_row_fn row,
                                    ml_ocv_flat_fn flat, ml_epi_fn epi, void* epi_out,
                                    int64_t epi_b) {
    if (nimg <= 0) return; /* a run-time batch of none */
    /* interior columns: every window column inside the image */
    int64_t i0 = (PL + SW - 1) / SW, last = W - 1 - (int64_t)(KW - 1) * DW + PL;
    int64_t i1 = last < 0 ? 0 : last / SW + 1;
    i0 = ML_MIN(i0, OW);
    i1 = ML_MIN(i1, OW);
    if (i1 < i0) i1 = i0;
    int64_t band = ml_ocv_band_rows(OH, OW, gsz), ngroups = (M + gsz - 1) / gsz;
    int64_t seg = ml_ocv_seg_cols(OW, gsz);
    /* the padded width: every window of a row inside it */
    const int64_t Wp = ML_MAX(PL + W, (OW - 1) * SW + (int64_t)(KW - 1) * DW + 1);
    const int64_t fband = flat && SH == SW ? ml_ocv_flat_band(C, OH, OW, Wp, KH, SH, DH, gsz) : 0;
    if (fband > 0) band = fband, seg = OW;
    else flat = 0;
    ml_ocv_job j = {C, H, W, M, OH, OW, PT, PL, i0, i1, gsz, bpg, ngroups, band,
                    (OH + band - 1) / band, 1, epi_b, seg, (OW + seg - 1) / seg, H * W,
                    KH, KW, SH, SW, DH, DW, x, wp, bias, y, epi, epi_out, row, flat, Wp,
                    (double)C * H * W * 4 > ML_OCV_PF_BYTES, nimg, x_img, y_img};
#ifdef MONOLIB_THREADPOOL_H
    double work = (double)nimg * M * C * KH * KW * OH * OW;
    int64_t want = (int64_t)ml_num_threads() * 4;
    if (ml_num_threads() > 1 && nimg * ngroups * j.nb * j.ns < want) { /* few units */
        int64_t per_img = (want + nimg - 1) / nimg; /* thinner bands */
        int64_t nb = ML_MIN((per_img + ngroups - 1) / ngroups,
                            (OH + ML_OCV_ROWS - 1) / ML_OCV_ROWS);
        if (j.ns == 1 && nb > j.nb) j.band = (OH + nb - 1) / nb, j.nb = (OH + j.band - 1) / j.band;
        /* still few (a 1-D conv): narrower segments of one row, within the staging */
        int64_t per = ngroups * j.nb, ns = (per_img + per - 1) / per;
        int64_t sw = ML_MAX(ML_OCV_SEG_MIN, (OW + ns - 1) / ns);
        if (!flat && per * j.ns < per_img && sw < j.seg) {
            j.band = 1, j.nb = OH, j.seg = sw, j.ns = (OW + sw - 1) / sw;
        }
    }
    /* units repeat no set-up (weights packed at compile time, input read in place): the
     * split pays by threadpool.h's span model, as conv.h's direct rows do */
    int64_t units = nimg * ngroups * j.nb * j.ns;
    int64_t tasks = ml_par_split(work, units, ML_PAR_TASK_COST);
    if (tasks > 1) {
        j.chunk = (units + tasks - 1) / tasks;
        size_t bytes = sizeof(float) * (size_t)ml_ocv_scratch_floats(OH, OW, gsz, flat != 0);
        ml_parallel_for((units + j.chunk - 1) / j.chunk, ml_ocv_task, &j, scratch, bytes);
        return;
    }
    /* one task: the bands and segments as planned for staging */
    j.band = band, j.nb = (OH + band - 1) / band, j.seg = seg, j.ns = (OW + seg - 1) / seg;
#endif
    for (int64_t u = 0; u < nimg * ngroups * j.nb * j.ns; ++u) ml_ocv_unit(&j, u, scratch);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_CONV_OCV_H */
