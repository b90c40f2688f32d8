/* conv_depthwise.h -- direct depthwise convolution (monolib kernel library).
 *
 * Needs gemm.h (ml_vf, ML_VW, ml_epi_fn) and conv.h (ml_dw_fill_row) before it.
 *
 * Depthwise (ONNX Conv with group == C_in == C_out), NCHW, one image: ml_dwconv2d, direct
 * and vectorised along W, a few output rows per tile.
 */
#ifndef MONOLIB_CONV_DEPTHWISE_H
#define MONOLIB_CONV_DEPTHWISE_H
/* gcc warns about loops it proves dead after inlining constant shapes (a known false
 * positive); keep the generated build quiet. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
#endif
#include <stdint.h>
#include <string.h>

/* ---- depthwise convolution (ml_dwconv2d) ----
 * Fast path (3x3 and 5x5, strides 1 and 2, no dilation, pads up to 4): tiles of R output
 * rows x V vectors (R*V >= 8 sums hide the FMA latency) sweep a channel's input rows, the
 * taps broadcast from the weights. 3x3 windows read the rows in place (a tile whose
 * window reaches a left or right pad zeroes the lanes that read it; rows of the top and
 * bottom pads are zero rows in scratch); 5x5 windows read blocks of rows padded into
 * scratch first (ML_DW_IN_PLACE). Stride 2 along W loads two vectors and de-interleaves them with one in-lane
 * shuffle per tap (vshufps on AVX), which leaves a vector's outputs in a fixed permuted
 * order: one shuffle per sum puts them back before the store. Each shape is its own entry
 * point (ml_dw_units_<K>_<SH><SW>), so a model compiles only the unrolled kernels it
 * uses. Other shapes (ml_dw_units_any): each input row is copied
 * into a zero-padded, phase-split row (ml_dw_fill_row_k) and one output vector at a time
 * is summed with run-time loops. */
#define ML_DW_R 4        /* output rows per fast tile */
#define ML_DW_V 2        /* vectors per fast tile: R*V = 8 sums hide the FMA latency */
#define ML_DW_PAD 4      /* largest left/right pad of the fast path (ML_VW >= 4) */
#define ML_DW_BLOCK 8192 /* floats of a fast path's block of padded input rows (L1) */
/* Output floats a channel's rows gather before the epilogue runs on them (still in L1). */
#define ML_DW_EPI_FLOATS 2048
#define ML_DW_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Stride 2 along W: the even / odd columns of two vectors (in the lane order the pair of
 * loads gives), and FIX puts a tile's outputs back in column order. Constant indices:
 * gcc's __builtin_shuffle takes them as a vector, clang's __builtin_shufflevector as a
 * list (clang has no __builtin_shuffle: zig cc for aarch64 is clang). */
#if ML_VW == 4
#define ML_DW_EVEN_IDX 0, 2, 4, 6
#define ML_DW_ODD_IDX 1, 3, 5, 7
#define ML_DW_FIX_IDX 0, 1, 2, 3
#define ML_DW_IOTA 0, 1, 2, 3
#elif ML_VW == 8
#define ML_DW_EVEN_IDX 0, 2, 8, 10, 4, 6, 12, 14
#define ML_DW_ODD_IDX 1, 3, 9, 11, 5, 7, 13, 15
#define ML_DW_FIX_IDX 0, 1, 4, 5, 2, 3, 6, 7
#define ML_DW_IOTA 0, 1, 2, 3, 4, 5, 6, 7
#elif ML_VW == 16
#define ML_DW_EVEN_IDX 0, 2, 16, 18, 4, 6, 20, 22, 8, 10, 24, 26, 12, 14, 28, 30
#define ML_DW_ODD_IDX 1, 3, 17, 19, 5, 7, 21, 23, 9, 11, 25, 27, 13, 15, 29, 31
#define ML_DW_FIX_IDX 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15
#define ML_DW_IOTA 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
#endif
#define ML_DW_SHUF2(a, b, ...) ML_GSHUF(a, b, __VA_ARGS__) /* gemm.h's */
/* expands the index list first, then passes it on as several arguments */
#define ML_DW_SHUF2_(a, b, idx) ML_DW_SHUF2(a, b, idx)
/* ML_DW_KEEP(v): v goes through a register, opaque to gcc. Without it gcc folds the input
 * loads into the FMAs (reloading a vector for each output row that uses it) and keeps
 * the taps in registers, spilled: twice the loads, load-bound (5x5: 27 -> 40 GMAC/s with
 * it on a cached tile, AVX2). x86 vector registers only; elsewhere a no-op. */
#if (defined(__x86_64__) || defined(__i386__)) && \
    ((ML_VW == 8 && defined(__AVX__)) || (ML_VW == 4 && defined(__SSE__)) || \
     (ML_VW == 16 && defined(__AVX512F__)))
#define ML_DW_KEEP(v) __asm__ volatile("" : "+x"(v))
#else
#define ML_DW_KEEP(v) (void)0
#endif

typedef struct ml_dw_job ml_dw_job;
typedef void (*ml_dw_units_fn)(const ml_dw_job* j, int64_t u0, int64_t u1, float* scratch);
struct ml_dw_job {
    int64_t C, H, W, OH, OW, PT, PL, Wp, Wq, ring, band, nb, chunk, epi_b;
    int64_t blk; /* fast path: output rows per block */
    int KH, KW, SH, SW, DH, DW;
    const float *x, *w, *bias;
    float* y;
    ml_epi_fn epi;
    void* epi_out;
    ml_dw_units_fn units;
    /* where the input rows are: channel c's input row ih (r0 <= ih < H) at
     * x + (c - xc0) * xs + (ih - r0) * W. ml_dwconv2d: the whole image (H * W, 0, 0);
     * conv_band.h: a band of rows r0..H-1 of channels xc0.. in scratch. */
    int64_t xs, xc0, r0;
    /* output rows of the units: unit u is rows ob + (u % nb) * band.., below oe */
    int64_t ob, oe;
    /* where the output rows go: channel c's row oh at y + c * ys + (oh - yr0) * OW, the
     * epilogue given columns from row yr0 (ml_dwconv2d: OH * OW, 0; conv_band.h: a band
     * of rows in scratch, yr0 its first) */
    int64_t ys, yr0;
    /* ml_dwconv2d: images (0 or 1: one), and the floats between them in x and y */
    int64_t nimg, x_img, y_img;
    /* the input that may be read, around x's rows (the fast path reads a few floats past
     * a row's ends); both 0: none, every row is copied */
    const float *xlo, *xhi;
};

/* R x V vectors of outputs: output rows yr[0..R-1], columns yo.. . Input row i of the
 * tile (output row r reads rows r*SH + ky) is rp[i], read from column off (the window
 * of output column yo starts there; negative: a padded row's left pad). Each input vector
 * is multiplied into every output row whose window holds it, by a broadcast tap. Constant
 * shapes: gcc unrolls all of it (the pragmas: at -O2 too, where the sums would otherwise
 * stay in memory, 3-4x slower). */
ML_INLINE void ml_dw_tile(const int K, const int SH, const int SW, const int R, const int V,
                          const int edge, const float* const* rp, int64_t off, int64_t W,
                          const float* restrict w, float b, float* const* yr, int64_t yo) {
    ml_vf acc[ML_DW_R][ML_DW_V];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[r][v] = b - (ml_vf){0};
#if defined(__wasm__)
/* input rows one at a time: unrolled, clang keeps every row's loads and taps live, more
 * than an engine's 16 vector registers (V8, Node 20: the 5x5/1 tile of PP-OCR cls 0.22
 * -> 0.12 ms, det's 14 depthwise convs 15.8 -> 3.5 ms) */
#pragma GCC unroll 1
#else
#pragma GCC unroll 16
#endif
    for (int i = 0; i < (R - 1) * SH + K; ++i)
#pragma GCC unroll 8
        for (int kx = 0; kx < K; ++kx) {
            ml_vf x[ML_DW_V];
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) {
                const float* p = rp[i] + off + v * SW * ML_VW;
                if (SW == 1) {
                    x[v] = *(const ml_vf*)(p + kx);
                    ML_DW_KEEP(x[v]);
                } else {
                    const float* q = p + (kx & ~1);
                    ml_vf lo = *(const ml_vf*)q, hi = *(const ml_vf*)(q + ML_VW);
                    x[v] = kx & 1 ? ML_DW_SHUF2_(lo, hi, ML_DW_ODD_IDX)
                                  : ML_DW_SHUF2_(lo, hi, ML_DW_EVEN_IDX);
                }
                if (edge) { /* lanes whose column is a pad (read from the rows around) */
                    ml_vi col = SW == 1 ? (ml_vi){ML_DW_IOTA} + (int32_t)(off + v * ML_VW + kx)
                                : (kx & 1 ? (ml_vi){ML_DW_ODD_IDX} : (ml_vi){ML_DW_EVEN_IDX}) +
                                      (int32_t)(off + v * 2 * ML_VW + (kx & ~1));
                    x[v] = (ml_vf)((ml_vi)x[v] & ((col >= 0) & (col < (int32_t)W)));
                }
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                int ky = i - r * SH;
                if (ky < 0 || ky >= K) continue;
                ml_vf wk = w[ky * K + kx] - (ml_vf){0}; /* broadcast per use: one load */
                ML_DW_KEEP(wk);
#pragma GCC unroll 4
                for (int v = 0; v < V; ++v) acc[r][v] += wk * x[v];
            }
        }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v)
            *(ml_vf*)(yr[r] + yo + v * ML_VW) =
                SW == 1 ? acc[r][v] : ML_DW_SHUF2_(acc[r][v], acc[r][v], ML_DW_FIX_IDX);
}

/* The last input column (from the window's first, 0) that a tile of nv vectors reads:
 * stride 1 loads a vector at each tap; stride 2 a pair at each even tap. */
static inline int64_t ml_dw_tile_span(int K, int SW, int nv) {
    return SW == 1 ? (int64_t)nv * ML_VW + K - 2 : 2 * (int64_t)nv * ML_VW + ((K - 1) & ~1) - 1;
}

/* Whether the tile (o, nv) reads only columns 0..W-1 of an unpadded row. */
static inline int ml_dw_tile_inside(int K, int SW, int64_t PL, int64_t W, int64_t o, int nv) {
    return o * SW >= PL && o * SW - PL + ml_dw_tile_span(K, SW, nv) < W;
}

/* Whether the fast path reads a K x K window's input rows in place (else it pads every
 * row into scratch, and no lane needs a mask). 3x3 only: at stride 1 and 2, 0.55-0.7x the
 * time of padded copies over 60 convs of PP-OCR, PP-LCNet, MobileNets and ShuffleNets;
 * 5x5 convs of 7-50-wide rows ran up to 1.4x slower in place (Zen 4): every tile of such
 * a row reaches a pad, and 10 masks a row cost more than the copy. */
#define ML_DW_IN_PLACE(K) ((K) == 3)

/* The tiles of an output row of OW columns, left to right: (o, nv) is nv vectors of
 * outputs from column o. Tiles of V vectors, then single vectors, the last moved back to
 * end at OW (overlapping the one before: values are only stored, so computing some twice
 * is harmless). Returns 0 past the last; start with *nv = 0. (Single vectors wherever a
 * tile reads a pad ran 5x5 convs of 40-wide rows 1.6x slower: 4 sums a tile do not hide
 * the FMA latency.) */
static inline int ml_dw_next_tile(int64_t OW, int V, int64_t* o, int* nv) {
    int64_t n = *nv ? *o + *nv * ML_VW : 0, end = OW > ML_VW ? OW : ML_VW;
    if (n >= end) return 0;
    *nv = n + V * ML_VW <= OW ? V : 1;
    *o = *nv == 1 && n + ML_VW > end ? end - ML_VW : n;
    return 1;
}

/* R whole output rows yr (OW columns) from input rows rp (see ml_dw_tile): the tiles
 * whose windows leave the image's columns (its pads) zero the lanes that read them. An
 * output row narrower than a vector goes through tr (R rows of ML_VW floats). One call
 * site per tile width keeps the code small. */
ML_INLINE void ml_dw_rows(const int K, const int SH, const int SW, const int R, const int V,
                          const float* const* rp, int64_t W, int64_t PL, int64_t OW,
                          const float* restrict w, float b, float* const* yr,
                          float* const* tr) {
    int64_t o = 0;
    int nv = 0;
    while (ml_dw_next_tile(OW, V, &o, &nv)) {
        int64_t off = o * SW - PL;
        int in = !ML_DW_IN_PLACE(K) || ml_dw_tile_inside(K, SW, PL, W, o, nv);
        float* const* out = OW < ML_VW ? tr : yr;
        if (nv == V && in) ml_dw_tile(K, SH, SW, R, V, 0, rp, off, W, w, b, yr, o);
        else if (nv == V) ml_dw_tile(K, SH, SW, R, V, 1, rp, off, W, w, b, yr, o);
        else if (in) ml_dw_tile(K, SH, SW, R, 1, 0, rp, off, W, w, b, out, o);
        else ml_dw_tile(K, SH, SW, R, 1, 1, rp, off, W, w, b, out, o);
    }
    if (OW < ML_VW)
        for (int r = 0; r < R; ++r)
            for (int64_t i = 0; i < OW; ++i) yr[r][i] = tr[r][i];
}

/* How far the tiles of a row read past its ends (floats before column 0, after W - 1):
 * a row read in place needs that much of the input around it (ml_dw_band). */
static inline void ml_dw_overreach(int K, int SW, int V, int64_t W, int64_t PL, int64_t OW,
                                   int64_t* before, int64_t* after) {
    int64_t o = 0;
    int nv = 0;
    *before = 0, *after = 0;
    while (ml_dw_next_tile(OW, V, &o, &nv)) {
        *before = ML_DW_MAX(*before, PL - o * SW);
        *after = ML_DW_MAX(*after, o * SW - PL + ml_dw_tile_span(K, SW, nv) - (W - 1));
    }
}

/* Floats s[0..n) to d (n > 0): whole vectors, the last moved back; under a vector,
 * one at a time. Two vectors a step through temporaries: a plain loop of moves becomes
 * a memmove call, which costs more than these short runs (a third of the conv). */
static inline void ml_dw_copy(const float* restrict s, int64_t n, float* restrict d) {
    if (n < ML_VW) {
        for (int64_t k = 0; k < n; ++k) d[k] = s[k];
        return;
    }
    int64_t q = 0;
    for (; q + 2 * ML_VW <= n; q += 2 * ML_VW) {
        ml_vf a0 = *(const ml_vf*)(s + q), a1 = *(const ml_vf*)(s + q + ML_VW);
        *(ml_vf*)(d + q) = a0, *(ml_vf*)(d + q + ML_VW) = a1;
    }
    if (q + ML_VW < n) *(ml_vf*)(d + q) = *(const ml_vf*)(s + q);
    if (q < n) *(ml_vf*)(d + n - ML_VW) = *(const ml_vf*)(s + n - ML_VW);
}

/* Input row ih of x (H x W) padded into d (Wq floats: PL zeros, the row, zeros): zeros
 * first (whole vectors, the last moved back), then the row over them. */
static inline void ml_dw_pad_row(const float* restrict x, int64_t W, int64_t ih, int64_t PL,
                                 int64_t Wq, float* restrict d) {
    const ml_vf z = {0};
    for (int64_t t = 0; t < Wq; t += ML_VW) *(ml_vf*)(d + ML_MIN(t, Wq - ML_VW)) = z;
    ml_dw_copy(x + ih * W, ML_MIN(W, Wq - PL), d + PL);
}

/* Output rows oh0..oh1-1 of channel c on the fast path (R <= ML_DW_R rows per tile), in
 * blocks of up to j->blk rows. The tiles read the input rows in place (the lanes of a
 * pad zeroed: ml_dw_rows), except rows outside the image, zero rows in scratch, and rows
 * whose reads past their ends (ml_dw_overreach) would leave the input (j->xlo..xhi: the
 * first and last rows of the tensor), padded into scratch (rows Wq apart). Copying every
 * row first cost as much as the taps: 32@120x160 3x3/2 117 -> 82 us, 16@120x160 3x3/1
 * 83 -> 66 (Zen 4, C harness); copying only the pads' columns measured no better (a store read
 * soon after waits for it). A block's short last group is moved up to end with the
 * block (recomputing rows of the group before, whose epilogue then runs again on the
 * fresh values); a band shorter than R writes the rows past it to a junk row. The
 * epilogue runs on the rows just written, every ML_DW_EPI_FLOATS outputs. Scratch: the
 * padded block, the junk row, R tmp rows. */
ML_INLINE void ml_dw_band(const int K, const int SH, const int SW, const int R,
                          const ml_dw_job* j, int64_t c, int64_t oh0, int64_t oh1,
                          float* restrict scratch) {
    const int64_t OW = j->OW, Wq = j->Wq, W = j->W, PL = j->PL, H = j->H - j->r0;
    float* plane = scratch;
    float* junk = plane + ((ML_DW_MAX(j->blk, R) - 1) * SH + K) * Wq;
    float* tr[ML_DW_R];
    for (int r = 0; r < R; ++r) tr[r] = junk + OW + r * ML_VW;
    const float* x = j->x + (c - j->xc0) * j->xs;
    const float* w = j->w + c * K * K;
    float b = j->bias ? j->bias[c] : 0.0f;
    float* y = j->y + c * j->ys; /* row oh at y + (oh - yr0) * OW */
    float* yr[ML_DW_R];
    const float* rp[(ML_DW_R - 1) * 2 + 5];
    int64_t before, after;
    ml_dw_overreach(K, SW, ML_DW_V, W, PL, OW, &before, &after);
    /* the rows ih with lo_ok <= ih < hi_ok are read in place: floats x0 before row 0
     * and x1 from it may be read */
    int64_t lo_ok = 0, hi_ok = 0;
    if (ML_DW_IN_PLACE(K) && j->xlo && j->xhi) {
        const int64_t x0 = x - j->xlo, x1 = j->xhi - x;
        lo_ok = before > x0 ? (before - x0 + W - 1) / W : 0;
        hi_ok = ML_MIN(H, (x1 - after) / W);
    }
    int64_t nblk = (oh1 - oh0 + j->blk - 1) / j->blk, e0 = oh0;
    for (int64_t k = 0; k < nblk; ++k) {
        /* blocks of nearly equal size: each has at least R rows when the band has */
        int64_t ob = oh0 + (oh1 - oh0) * k / nblk, oe = oh0 + (oh1 - oh0) * (k + 1) / nblk;
        int64_t lo = ob * SH - j->PT, rows = (ML_DW_MAX(oe - ob, R) - 1) * SH + K;
        for (int64_t i = 0; i < rows; ++i) {
            int64_t ih = lo + i - j->r0;
            if (ih < 0 || ih >= H) memset(plane + i * Wq, 0, sizeof(float) * (size_t)Wq);
            else if (ih < lo_ok || ih >= hi_ok) ml_dw_pad_row(x, W, ih, PL, Wq, plane + i * Wq);
        }
        for (int64_t oh = ob; oh < oe;) {
            int64_t g = oh + R > oe && oe - ob >= R ? oe - R : oh;
            for (int r = 0; r < R; ++r) yr[r] = g + r < oe ? y + (g + r - j->yr0) * OW : junk;
            for (int i = 0; i < (R - 1) * SH + K; ++i) {
                int64_t ib = (g - ob) * SH + i, ih = lo + ib - j->r0;
                rp[i] = ih >= lo_ok && ih < hi_ok ? x + ih * W : plane + ib * Wq + PL;
            }
            ml_dw_rows(K, SH, SW, R, ML_DW_V, rp, W, PL, OW, w, b, yr, tr);
            if (g < e0) e0 = g;
            oh = ML_MIN(g + R, oe);
            if (j->epi && ((oh - e0) * OW >= ML_DW_EPI_FLOATS || oh == oh1)) {
                j->epi(j->epi_out, j->epi_b, c, c + 1, (e0 - j->yr0) * OW, (oh - j->yr0) * OW);
                e0 = oh;
            }
        }
    }
}

/* Work units u0..u1-1 of a depthwise conv (unit u: output rows band u % nb of channel
 * u / nb) on the fast path with constant shapes. */
ML_INLINE void ml_dw_units_k(const int K, const int SH, const int SW, const int R,
                             const ml_dw_job* j, int64_t u0, int64_t u1,
                             float* restrict scratch) {
    for (int64_t u = u0; u < u1; ++u) {
        int64_t c = u / j->nb, oh0 = j->ob + (u % j->nb) * j->band;
        int64_t oh1 = ML_MIN(j->oe, oh0 + j->band);
        if (oh0 < oh1) ml_dw_band(K, SH, SW, R, j, c, oh0, oh1, scratch);
    }
}

/* ml_dw_units_<K>_<SH><SW>: tiles of 4 output rows; ..._r3: of 3, for 3, 6, 9 rows. */
#define ML_DW_UNITS(K, SH, SW)                                                                 \
    ML_UNUSED static void ml_dw_units_##K##_##SH##SW(const ml_dw_job* j, int64_t u0, int64_t u1, \
                                                     float* scratch) {                         \
        ml_dw_units_k(K, SH, SW, 4, j, u0, u1, scratch);                                       \
    }                                                                                          \
    ML_UNUSED static void ml_dw_units_##K##_##SH##SW##_r3(const ml_dw_job* j, int64_t u0,      \
                                                          int64_t u1, float* scratch) {        \
        ml_dw_units_k(K, SH, SW, 3, j, u0, u1, scratch);                                       \
    }
ML_DW_UNITS(3, 1, 1)
ML_DW_UNITS(3, 1, 2)
ML_DW_UNITS(3, 2, 1)
ML_DW_UNITS(3, 2, 2)
ML_DW_UNITS(5, 1, 1)
ML_DW_UNITS(5, 1, 2)
ML_DW_UNITS(5, 2, 1)
ML_DW_UNITS(5, 2, 2)
#undef ML_DW_UNITS

/* Output rows oh0..oh1-1 of channel c, any shape: input rows copied into a ring of
 * zero-padded, phase-split rows (j->ring rows of SW*Wq floats, then their pointers). */
static void ml_dw_band_any(const ml_dw_job* j, int64_t c, int64_t oh0, int64_t oh1,
                           float* restrict scratch) {
    const int KH = j->KH, KW = j->KW, SH = j->SH, SW = j->SW, DH = j->DH, DW = j->DW;
    const int64_t rs = SW * j->Wq, OW = j->OW, nring = j->ring, need = (KH - 1) * DH + 1;
    float* ring = scratch;
    const float** rp = (const float**)(ring + (nring * rs + 1) / 2 * 2);
    const float* x = j->x + (c - j->xc0) * j->xs;
    const float* w = j->w + c * KH * KW;
    float b = j->bias ? j->bias[c] : 0.0f;
    int64_t lo = oh0 * SH - j->PT, filled = lo, head = 0, e0 = oh0;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
        int64_t nlo = oh * SH - j->PT;
        head = (head + nlo - lo) % nring;
        lo = nlo;
        if (filled < lo) filled = lo;
        for (; filled < lo + need; ++filled)
            ml_dw_fill_row(SW, x, j->H - j->r0, j->W, filled - j->r0, j->Wp, j->Wq, j->PL,
                           ring + ((head + filled - lo) % nring) * rs);
        for (int64_t i = 0; i < need; ++i) rp[i] = ring + ((head + i) % nring) * rs;
        float* y = j->y + c * j->ys + (oh - j->yr0) * OW;
        for (int64_t ow0 = 0; ow0 < OW; ow0 += ML_VW) {
            int64_t ow = ML_MIN(ow0, OW - ML_VW), n = ML_VW;
            if (ow < 0) ow = 0, n = OW; /* narrower than a vector: the row's slack is read */
            ml_vf acc = b - (ml_vf){0};
            for (int ky = 0; ky < KH; ++ky)
                for (int kx = 0; kx < KW; ++kx)
                    acc += w[ky * KW + kx] *
                           *(const ml_vf*)(rp[ky * DH] + ((kx * DW) % SW) * j->Wq +
                                           (kx * DW) / SW + ow);
            for (int64_t i = 0; i < n; ++i) y[ow + i] = acc[i];
        }
        if (j->epi && ((oh + 1 - e0) * OW >= ML_DW_EPI_FLOATS || oh + 1 == oh1)) {
            j->epi(j->epi_out, j->epi_b, c, c + 1, (e0 - j->yr0) * OW, (oh + 1 - j->yr0) * OW);
            e0 = oh + 1;
        }
    }
}

/* Work units u0..u1-1 of any depthwise conv (see ml_dw_units_k). */
static void ml_dw_units_any(const ml_dw_job* j, int64_t u0, int64_t u1, float* scratch) {
    for (int64_t u = u0; u < u1; ++u) {
        int64_t c = u / j->nb, oh0 = j->ob + (u % j->nb) * j->band;
        int64_t oh1 = ML_MIN(j->oe, oh0 + j->band);
        if (oh0 < oh1) ml_dw_band_any(j, c, oh0, oh1, scratch);
    }
}

/* Units u0..u1-1 of a job j (of type T, with nimg, x_img, y_img) over nimg images of
 * `per` units each (image u / per): each image's run of them by RUN(one-image job, its
 * first and end unit) on a copy of the job moved to that image. */
#define ML_IMAGE_UNITS(T, j, per, u0, u1, RUN)                                  \
    do {                                                                       \
        for (int64_t u_ = (u0); u_ < (u1);) {                                  \
            const int64_t img_ = u_ / (per), e_ = ML_MIN((u1), (img_ + 1) * (per)); \
            T one_ = *(j);                                                     \
            one_.nimg = 1;                                                     \
            one_.x += img_ * (j)->x_img;                                       \
            one_.y += img_ * (j)->y_img;                                       \
            one_.epi_b += img_;                                                \
            RUN(&one_, u_ - img_ * (per), e_ - img_ * (per));                  \
            u_ = e_;                                                           \
        }                                                                      \
    } while (0)

/* Units u0..u1-1 of a job over nimg images (image u / (C * nb)), each by units(). */
static void ml_dw_images(const ml_dw_job* j, int64_t u0, int64_t u1, float* scratch) {
#define ML_DW_RUN_(one, a, b) j->units(one, a, b, scratch)
    if (j->nimg <= 1) j->units(j, u0, u1, scratch);
    else ML_IMAGE_UNITS(ml_dw_job, j, j->C * j->nb, u0, u1, ML_DW_RUN_);
#undef ML_DW_RUN_
}

#ifdef MONOLIB_THREADPOOL_H
/* Task t of ml_dwconv2d: units [t*chunk, +chunk), scratch is the thread's. */
static void ml_dw_task(void* ctx, int64_t t, void* scratch) {
    const ml_dw_job* j = (const ml_dw_job*)ctx;
    int64_t u0 = t * j->chunk, nu = j->C * j->nb * (j->nimg > 1 ? j->nimg : 1);
    ml_dw_images(j, u0, ML_MIN(nu, u0 + j->chunk), (float*)scratch);
}
#endif

/* Whether a shape may take the fast path (ml_dw_units_<K>_<SH><SW>); PR: the pad the last
 * window reads past the input (negative when it stops short). conv.py mirrors it. */
static inline int ml_dw_is_fast(int KH, int KW, int SH, int SW, int DH, int DW, int64_t PL,
                                int64_t PR) {
    return DH == 1 && DW == 1 && KH == KW && (KH == 3 || KH == 5) && (SH == 1 || SH == 2) &&
           (SW == 1 || SW == 2) && PL >= 0 && PL <= ML_DW_PAD && PR <= ML_DW_PAD;
}

/* Fast path: floats per padded input row (a whole vector of outputs past OW, for rows
 * narrower than a vector, plus the one float stride 2's pair loads read past the window),
 * a multiple of ML_VW; and output rows per block (a multiple of ML_DW_R, at least
 * 2 * ML_DW_R so that blocks of nearly equal size keep ML_DW_R rows each). */
static inline int64_t ml_dw_row_floats(int64_t OW, int KW, int SW) {
    return ((OW - 1) * SW + KW + ML_VW * SW + 2 + ML_VW - 1) / ML_VW * ML_VW;
}
static inline int64_t ml_dw_block_rows(int64_t OH, int64_t OW, int KW, int SH, int SW) {
    int64_t rows = ML_DW_BLOCK / ml_dw_row_floats(OW, KW, SW);
    int64_t b = rows > KW ? (rows - KW) / SH + 1 : 1;
    b = b / ML_DW_R * ML_DW_R;
    if (b < 2 * ML_DW_R) b = 2 * ML_DW_R;
    return ML_MIN(b, OH);
}

/* Floats of scratch ml_dwconv2d needs per thread (conv.py's _dw_scratch_floats mirrors it
 * and reserves the most over the vector widths): fast path: a block of padded rows, the
 * junk row, the tmp rows; otherwise a ring of padded rows and their pointers (two floats
 * each). */
static inline int64_t ml_dw_scratch_floats(int64_t W, int64_t OH, int64_t OW, int KH, int KW,
                                           int SH, int SW, int64_t PL, int DH, int DW) {
    int64_t wp = (OW - 1) * SW + (KW - 1) * DW + 1;
    if (ml_dw_is_fast(KH, KW, SH, SW, DH, DW, PL, wp - W - PL)) {
        int64_t blk = ML_DW_MAX(ml_dw_block_rows(OH, OW, KW, SH, SW), ML_DW_R);
        return ((blk - 1) * SH + KH) * ml_dw_row_floats(OW, KW, SW) + OW + ML_DW_R * ML_VW;
    }
    int64_t hp = (OH - 1) * SH + (KH - 1) * DH + 1, ring = ML_MIN(hp, (KH - 1) * DH + 1);
    return (ring * SW * ((wp + SW - 1) / SW + 2 * ML_VW) + 1) / 2 * 2 + 2 * ring;
}

/* Depthwise conv of one NCHW image (ONNX Conv, group == C_in == C_out):
 *   y[c][oh][ow] = bias[c] + sum_{ky,kx} w[c][ky][kx] * x[c][oh*SH-PT+ky*DH][ow*SW-PL+kx*DW]
 * w: [C][KH][KW]; bias: [C] or NULL; scratch: ml_dw_scratch_floats(...) floats; units:
 * ml_dw_units_<K>_<SH><SW> for a fast shape (ml_dw_units_any runs if ml_dw_is_fast
 * disagrees), else ml_dw_units_any. The epilogue epi(epi_out, epi_b, c, c+1, n0, n1) runs on
 * each channel's outputs n0..n1-1 as soon as they are written. Channels (and, when there
 * are few, bands of output rows) are split over the thread pool when threadpool.h is
 * included and the work is large. */
ML_UNUSED static void ml_dwconv2d(int64_t nimg, int64_t C, int64_t H, int64_t W, int64_t OH,
                                  int64_t OW, int KH, int KW, int SH, int SW, int64_t PT,
                                  int64_t PL, int DH, int DW, const float* restrict x,
                                  const float* restrict w, const float* restrict bias,
                                  float* restrict y, float* restrict scratch, ml_epi_fn epi,
                                  void* epi_out, int64_t epi_b, ml_dw_units_fn units) {
    if (nimg <= 0) return; /* a run-time batch of none */
    int64_t Wp = (OW - 1) * SW + (KW - 1) * DW + 1, hp = (OH - 1) * SH + (KH - 1) * DH + 1;
    int fast = units != ml_dw_units_any &&
               ml_dw_is_fast(KH, KW, SH, SW, DH, DW, PL, Wp - W - PL);
    ml_dw_job j = {C, H, W, OH, OW, PT, PL, Wp,
                   fast ? ml_dw_row_floats(OW, KW, SW) : (Wp + SW - 1) / SW + 2 * ML_VW,
                   ML_MIN(hp, (KH - 1) * DH + 1), OH, 1, C, epi_b,
                   fast ? ml_dw_block_rows(OH, OW, KW, SH, SW) : 0, KH, KW, SH, SW, DH, DW,
                   x, w, bias, y, epi, epi_out, fast ? units : ml_dw_units_any, H * W, 0, 0,
                   0, OH, OH * OW, 0, nimg, C * H * W, C * OH * OW, x,
                   x + nimg * C * H * W};
#ifdef MONOLIB_THREADPOOL_H
    int64_t want = (int64_t)ml_num_threads() * 4;
    if (nimg * C < want) { /* few channels: bands of at least 8 output rows as well */
        j.nb = ML_MIN((want + nimg * C - 1) / (nimg * C), (OH + 7) / 8);
        if (j.nb < 1) j.nb = 1;
        j.band = (OH + j.nb - 1) / j.nb;
    }
    /* multiply-adds, and the floats read and written (4 each: these run 5-10x slower than
     * a GEMM's, det's 1.4-2M ones take 0.15 ms). A unit repeats no set-up (its own rows
     * padded, halo rows once per band), so it splits from the memory-bound threshold: on
     * 2 cores (Zen 4, the worker spinning) 128@28x28 3x3 (1.7M) 39 -> 20 us, 24@12x96 3x3
     * stride (2, 1) (0.29M) 7.6 -> 4.1 us; they stayed serial under ML_PAR_MIN_WORK while
     * the ops around them split. */
    double work = (double)nimg * C * (OH * OW * KH * KW + 4 * (H * W + OH * OW));
    int64_t units_all = nimg * C * j.nb, tasks = ml_par_tasks_mem(work, units_all);
    if (tasks > 1) {
        j.chunk = (units_all + tasks - 1) / tasks;
        size_t bytes = sizeof(float) * (size_t)ml_dw_scratch_floats(W, OH, OW, KH, KW, SH, SW,
                                                                     PL, DH, DW);
        ml_parallel_for((units_all + j.chunk - 1) / j.chunk, ml_dw_task, &j, scratch, bytes);
        return;
    }
#endif
    ml_dw_images(&j, 0, nimg * C * j.nb, scratch);
}

/* ---- channel-blocked depthwise convolution (ml_dwcb_conv2d) ----
 * Vectorised over channels instead of W: for each block of ML_VW channels, a band of input
 * rows is transposed into zero-padded scratch [rows][Wa][ML_VW] (one pixel's channels per
 * vector; register transposes of ML_VW pixels at a time, taken over the band's rows as one
 * flat run of pixels, so maps narrower than a vector transpose at full width), tiles of
 * ML_DWCB_P output pixels x ML_VW channels are summed in registers (P independent sums
 * hide the FMA latency; each tap is one weight vector times input vectors read as memory
 * operands, the taps in run-time loops: one kernel for every window, stride, dilation),
 * and the band's outputs are transposed back into the NCHW planes, where the epilogue
 * runs on them. Every lane does useful work whatever the image width (a 7-wide row leaves
 * 9 of 16 lanes idle along W) and stride 2 needs no shuffles; the transposes in and out
 * are the price, so conv.py picks this path per signature by cost or measurement.
 * Weights: packed by conv.py as [ceil(C/16)][KH*KW][16] (zeros past C), so any ML_VW
 * (4, 8, 16) reads its block's taps as one vector. Channels past C in the last block read
 * a real channel (clamped) and are never stored. */
#define ML_DWCB_G 16     /* channels per packed weight group (a multiple of any ML_VW) */
#define ML_DWCB_P 8      /* output pixels per tile */
#define ML_DWCB_IN 4096  /* pixel slots of a band's transposed input rows (256 KiB at 16) */
#define ML_DWCB_ROWS 4   /* fewest output rows of a band split for threads */

typedef struct {
    int64_t C, H, W, OH, OW, PT, PL, Wa, OWa, band, nb, chunk, epi_b;
    int KH, KW, SH, SW, DH, DW;
    const float *x, *wp, *bias;
    float* y;
    ml_epi_fn epi;
    void* epi_out;
    /* x / y channel-blocked (NCHW16c: [C/16][H][W][16], C a multiple of 16) instead of
     * NCHW: the pixel-rows conv before or after keeps that layout (backends/c/layout.py) */
    int in_blk, out_blk;
    int64_t nimg, x_img, y_img; /* images, and the floats between them in x and y */
} ml_dwcb_job;


/* Padded input row width (pixels) and tile-rounded output width. */
static inline int64_t ml_dwcb_owa(int64_t OW) {
    return (OW + ML_DWCB_P - 1) / ML_DWCB_P * ML_DWCB_P;
}
static inline int64_t ml_dwcb_wa(int64_t W, int64_t OW, int KW, int SW, int64_t PL, int DW) {
    int64_t need = (ml_dwcb_owa(OW) - 1) * SW + (int64_t)(KW - 1) * DW + 1;
    return ML_DW_MAX(need, PL + W);
}
/* Channels per unit: one vector, or a whole 16-channel block where the output is
 * channel-blocked (its epilogue then runs on one flat run of the block's rows). */
static inline int64_t ml_dwcb_cw(const ml_dwcb_job* j) { return j->out_blk ? 16 : ML_VW; }
/* Output rows per band: as many as keep the band's input rows within ML_DWCB_IN slots. */
static inline int64_t ml_dwcb_band_rows(int64_t OH, int64_t Wa, int KH, int SH, int DH) {
    int64_t rows = ML_DWCB_IN / Wa, span = (int64_t)(KH - 1) * DH + 1;
    int64_t b = rows > span ? (rows - span) / SH + 1 : 1;
    return ML_MIN(b, OH);
}
/* Floats of scratch per thread at ML_VW = 16 (the most): a band's input rows and outputs
 * (conv.py's _dwcb_scratch_floats mirrors it). */
static inline int64_t ml_dwcb_scratch_floats(int64_t W, int64_t OH, int64_t OW, int KH,
                                             int KW, int SH, int SW, int64_t PL, int DH,
                                             int DW) {
    int64_t wa = ml_dwcb_wa(W, OW, KW, SW, PL, DW), band = ml_dwcb_band_rows(OH, wa, KH, SH, DH);
    return (((band - 1) * SH + (int64_t)(KH - 1) * DH + 1) * wa + band * ml_dwcb_owa(OW)) *
           ML_DWCB_G;
}

/* Input rows r0..r1-1 of channels c0.. (clamped to C) into d (row r0's padded row), pixel
 * (ih, iw) at ((ih - r0) * Wa + PL + iw) * ML_VW. */
static void ml_dwcb_fill(const ml_dwcb_job* j, int64_t c0, int64_t r0, int64_t r1,
                         float* restrict d) {
    const int64_t W = j->W, Wa = j->Wa, PL = j->PL, n = (r1 - r0) * W;
    if (j->in_blk) { /* channel-blocked: a pixel's ML_VW channels are one vector already */
        const float* s = j->x + (c0 / 16) * j->H * W * 16 + c0 % 16 + r0 * W * 16;
        for (int64_t i = 0; i < r1 - r0; ++i)
            for (int64_t iw = 0; iw < W; ++iw)
                *(ml_vf*)(d + (i * Wa + PL + iw) * ML_VW) = *(const ml_vf*)(s + (i * W + iw) * 16);
        return;
    }
    const float* xs[ML_VW];
    for (int i = 0; i < ML_VW; ++i)
        xs[i] = j->x + ML_MIN(c0 + i, j->C - 1) * j->H * W + r0 * W;
    if (n < ML_VW) {
        for (int64_t p = 0; p < n; ++p)
            for (int i = 0; i < ML_VW; ++i) d[((p / W) * Wa + PL + p % W) * ML_VW + i] = xs[i][p];
        return;
    }
    for (int64_t s = 0; s < n; s += ML_VW) {
        int64_t s0 = ML_MIN(s, n - ML_VW), ih = s0 / W, iw = s0 % W; /* last moved back */
        ml_vf r[ML_VW];
        for (int i = 0; i < ML_VW; ++i) r[i] = *(const ml_vf*)(xs[i] + s0);
        ml_transpose_vw(r);
        for (int k = 0; k < ML_VW; ++k) {
            *(ml_vf*)(d + (ih * Wa + PL + iw) * ML_VW) = r[k];
            if (++iw == W) iw = 0, ++ih;
        }
    }
}

/* Output rows oh0..oh1-1 (o: rows OWa pixels apart) into channels c0..c0+nc-1 of y. */
static void ml_dwcb_store(const ml_dwcb_job* j, int64_t c0, int64_t nc, int64_t oh0,
                          int64_t oh1, const float* restrict o) {
    const int64_t OW = j->OW, OWa = j->OWa, n = (oh1 - oh0) * OW;
    if (j->out_blk) { /* channel-blocked: each pixel's vector copied as it is */
        float* yb = j->y + (c0 / 16) * j->OH * OW * 16 + c0 % 16 + oh0 * OW * 16;
        for (int64_t r = 0; r < oh1 - oh0; ++r)
            for (int64_t ow = 0; ow < OW; ++ow)
                *(ml_vf*)(yb + (r * OW + ow) * 16) = *(const ml_vf*)(o + (r * OWa + ow) * ML_VW);
        return;
    }
    float* ys = j->y + c0 * j->OH * OW + oh0 * OW;
    const int64_t plane = j->OH * OW;
    if (n < ML_VW) {
        for (int64_t p = 0; p < n; ++p)
            for (int64_t i = 0; i < nc; ++i)
                ys[i * plane + p] = o[((p / OW) * OWa + p % OW) * ML_VW + i];
        return;
    }
    for (int64_t s = 0; s < n; s += ML_VW) {
        int64_t s0 = ML_MIN(s, n - ML_VW), oh = s0 / OW, ow = s0 % OW;
        ml_vf r[ML_VW];
        for (int k = 0; k < ML_VW; ++k) {
            r[k] = *(const ml_vf*)(o + (oh * OWa + ow) * ML_VW);
            if (++ow == OW) ow = 0, ++oh;
        }
        ml_transpose_vw(r);
        if (nc == ML_VW)
            for (int i = 0; i < ML_VW; ++i) *(ml_vf*)(ys + i * plane + s0) = r[i];
        else
            for (int64_t i = 0; i < nc; ++i) *(ml_vf*)(ys + i * plane + s0) = r[i];
    }
}

/* One row of taps (ky) into the tile's ML_DWCB_P sums, run-time window: one FMA per tap
 * and pixel with the input as a memory operand. 64@56 3x3 sums at ~0.9 vector FMA per
 * cycle on Zen 4 (its peak is 1 at 16 floats), so tiles of two rows sharing input loads
 * (tried) gained nothing. */
ML_INLINE void ml_dwcb_taps(const int SW, int KW, int DW, const float* restrict row,
                            const float* restrict wk, ml_vf acc[ML_DWCB_P]) {
    for (int kx = 0; kx < KW; ++kx) {
        ml_vf t = *(const ml_vf*)(wk + kx * ML_DWCB_G);
        const float* p = row + (int64_t)kx * DW * ML_VW;
#pragma GCC unroll 8
        for (int q = 0; q < ML_DWCB_P; ++q) acc[q] += t * *(const ml_vf*)(p + q * SW * ML_VW);
    }
}

/* The same with KW (up to 5) and SW (1, 2) constants and no dilation along W: the inputs
 * a tile row shares between its taps are loaded once into registers. Taps are taken by
 * phase (kx = SW * t + ph), so tap t of phase ph reads input vector q + t of that
 * phase's columns: per row of taps, P + KW/SW loads feed P * KW FMAs. The memory-operand
 * FMAs above read one input vector per FMA plus a weight per tap, load-bound on Zen 4
 * (one 16-float load per cycle); here the FMAs set the pace (the whole conv, 1 thread,
 * Zen 4: 1152@7x7 5x5 75 -> 62 us, 240@14x14 5x5 stride 2 15.8 -> 14.5). At most 8 sums
 * + 12 inputs + 5 taps live: 25 of 32 vector registers (AVX-512). */
ML_INLINE void ml_dwcb_taps_r(const int SW, const int KW, const float* restrict row,
                              const float* restrict wk, ml_vf acc[ML_DWCB_P]) {
#pragma GCC unroll 2
    for (int ph = 0; ph < SW; ++ph) {
        const int nt = (KW - ph + SW - 1) / SW; /* taps of this phase */
        ml_vf x[ML_DWCB_P + 4];
#pragma GCC unroll 12
        for (int m = 0; m < ML_DWCB_P + nt - 1; ++m) {
            x[m] = *(const ml_vf*)(row + (int64_t)(SW * m + ph) * ML_VW);
            ML_DW_KEEP(x[m]);
        }
#pragma GCC unroll 5
        for (int t = 0; t < nt; ++t) {
            ml_vf wt = *(const ml_vf*)(wk + (SW * t + ph) * ML_DWCB_G);
            ML_DW_KEEP(wt);
#pragma GCC unroll 8
            for (int q = 0; q < ML_DWCB_P; ++q) acc[q] += wt * x[q + t];
        }
    }
}

/* Output rows oh0..oh1-1 of the block at in (the band's padded input rows, the first at
 * input row oh0 * SH - PT) into o: ML_DWCB_P pixels per tile, SW a constant where the
 * caller makes it one, KWC the window's width as a constant (3, 5: ml_dwcb_taps_r) or 0
 * (run-time loops). w: the block's taps, ML_DWCB_G floats apart. */
ML_INLINE void ml_dwcb_sums(const int SW, const int KWC, const ml_dwcb_job* j, int64_t rows,
                            const float* restrict in, const float* restrict w, ml_vf b,
                            float* restrict o) {
    const int KH = j->KH, KW = KWC ? KWC : j->KW, DH = j->DH, DW = j->DW;
    const int64_t rs = j->Wa * ML_VW, OWa = j->OWa, ostep = (int64_t)j->SH * rs;
    for (int64_t r = 0; r < rows; ++r, in += ostep, o += OWa * ML_VW)
        for (int64_t ow = 0; ow < OWa; ow += ML_DWCB_P) {
            ml_vf acc[ML_DWCB_P];
#pragma GCC unroll 8
            for (int q = 0; q < ML_DWCB_P; ++q) acc[q] = b;
            const float* base = in + ow * SW * ML_VW;
            for (int ky = 0; ky < KH; ++ky) {
                const float* row = base + (int64_t)ky * DH * rs;
                const float* wk = w + (int64_t)ky * KW * ML_DWCB_G;
                if (KWC)
                    ml_dwcb_taps_r(SW, KWC, row, wk, acc);
                else
                    ml_dwcb_taps(SW, KW, DW, row, wk, acc);
            }
#pragma GCC unroll 8
            for (int q = 0; q < ML_DWCB_P; ++q) *(ml_vf*)(o + (ow + q) * ML_VW) = acc[q];
        }
}

/* Unit u: channel block u / nb, output rows band u % nb. Scratch: the band's padded
 * input rows, then its outputs. KW: the window's width as a constant (3, 5) for
 * ml_dwcb_taps_r, 0 for the run-time loops. */
ML_INLINE void ml_dwcb_unit(const int SW, const int KW, const ml_dwcb_job* j, int64_t u,
                            float* restrict scratch) {
    const int64_t cb = u / j->nb, oh0 = (u % j->nb) * j->band;
    const int64_t oh1 = ML_MIN(j->OH, oh0 + j->band);
    if (oh0 >= oh1) return;
    const int64_t cw = ml_dwcb_cw(j), c0 = cb * cw, Wa = j->Wa;
    const int64_t lo = oh0 * j->SH - j->PT;
    const int64_t rows = (oh1 - oh0 - 1) * j->SH + (int64_t)(j->KH - 1) * j->DH + 1;
    float* in = scratch;
    float* out = in + ((j->band - 1) * j->SH + (int64_t)(j->KH - 1) * j->DH + 1) * Wa * ML_VW;
    ml_vf z = {0};
    /* zero through a register gcc cannot see into: it turned the short pad loops into a
     * memset call each (5% of a 1152-channel 7x7 5x5 conv, whose rows are 12 pixels) */
    ML_DW_KEEP(z);
    for (int64_t i = 0; i < rows; ++i) { /* the zero padding around the rows */
        float* d = in + i * Wa * ML_VW;
        int64_t ih = lo + i;
        if (ih < 0 || ih >= j->H) {
            for (int64_t k = 0; k < Wa; ++k) *(ml_vf*)(d + k * ML_VW) = z;
        } else {
            for (int64_t k = 0; k < j->PL; ++k) *(ml_vf*)(d + k * ML_VW) = z;
            for (int64_t k = j->PL + j->W; k < Wa; ++k) *(ml_vf*)(d + k * ML_VW) = z;
        }
    }
    int64_t r0 = ML_DW_MAX(lo, 0), r1 = ML_MIN(lo + rows, j->H);
    /* one vector of channels, or (blocked output) each vector of a 16-channel block:
     * the fill rewrites only the rows' insides, the padding stays */
    for (int64_t cv = c0; cv < ML_MIN(c0 + cw, j->C); cv += ML_VW) {
        const int64_t nc = ML_MIN(ML_VW, j->C - cv);
        if (r1 > r0) ml_dwcb_fill(j, cv, r0, r1, in + (r0 - lo) * Wa * ML_VW);
        ml_vf b = z;
        if (j->bias)
            for (int64_t i = 0; i < nc; ++i) b[i] = j->bias[cv + i];
        const float* w = j->wp + (cv / ML_DWCB_G) * j->KH * j->KW * ML_DWCB_G + cv % ML_DWCB_G;
        ml_dwcb_sums(SW, KW, j, oh1 - oh0, in, w, b, out);
        ml_dwcb_store(j, cv, nc, oh0, oh1, out);
    }
    if (!j->epi) return;
    if (j->out_blk) /* the block's rows are one flat run: the chain has no side inputs */
        j->epi(j->epi_out, j->epi_b, 0, 1, (c0 * j->OH + oh0 * 16) * j->OW,
               (c0 * j->OH + oh1 * 16) * j->OW);
    else
        j->epi(j->epi_out, j->epi_b, c0, ML_MIN(c0 + cw, j->C), oh0 * j->OW, oh1 * j->OW);
}

/* Units u0..u1-1: 3- and 5-wide windows at strides 1 and 2 along W (no dilation) with
 * their inputs in registers, other strides along W as constants, the rest at run time. */
static void ml_dwcb_units(const ml_dwcb_job* j, int64_t u0, int64_t u1, float* scratch) {
    const int kw = j->DW == 1 && (j->KW == 3 || j->KW == 5) ? j->KW : 0;
    for (int64_t u = u0; u < u1; ++u) {
        if (j->SW == 1 && kw == 3)
            ml_dwcb_unit(1, 3, j, u, scratch);
        else if (j->SW == 1 && kw == 5)
            ml_dwcb_unit(1, 5, j, u, scratch);
        else if (j->SW == 2 && kw == 3)
            ml_dwcb_unit(2, 3, j, u, scratch);
        else if (j->SW == 2 && kw == 5)
            ml_dwcb_unit(2, 5, j, u, scratch);
        else if (j->SW == 1)
            ml_dwcb_unit(1, 0, j, u, scratch);
        else if (j->SW == 2)
            ml_dwcb_unit(2, 0, j, u, scratch);
        else
            ml_dwcb_unit(j->SW, 0, j, u, scratch);
    }
}

/* Units u0..u1-1 of a job over nimg images (image u / (blocks * nb)). */
static void ml_dwcb_images(const ml_dwcb_job* j, int64_t u0, int64_t u1, float* scratch) {
#define ML_DWCB_RUN_(one, a, b) ml_dwcb_units(one, a, b, scratch)
    const int64_t cw = ml_dwcb_cw(j);
    if (j->nimg <= 1) ml_dwcb_units(j, u0, u1, scratch);
    else ML_IMAGE_UNITS(ml_dwcb_job, j, (j->C + cw - 1) / cw * j->nb, u0, u1, ML_DWCB_RUN_);
#undef ML_DWCB_RUN_
}

#ifdef MONOLIB_THREADPOOL_H
static void ml_dwcb_task(void* ctx, int64_t t, void* scratch) {
    const ml_dwcb_job* j = (const ml_dwcb_job*)ctx;
    int64_t cw = ml_dwcb_cw(j), u0 = t * j->chunk;
    int64_t nu = (j->C + cw - 1) / cw * j->nb * (j->nimg > 1 ? j->nimg : 1);
    ml_dwcb_images(j, u0, ML_MIN(nu, u0 + j->chunk), (float*)scratch);
}
#endif

/* Depthwise conv of one NCHW image, vectorised over channels (same sums as ml_dwconv2d;
 * see above). wp: the packed weights; scratch: ml_dwcb_scratch_floats(...) floats;
 * layout: bit 0 x, bit 1 y channel-blocked (NCHW16c, C a multiple of 16). Channel
 * blocks (and bands of rows when the blocks are few) are split over the thread pool from
 * ML_PAR_MIN_MEM: a unit repeats no set-up but its halo rows (on 2 cores, Zen 4, the
 * worker spinning: 128@28x28 3x3 stride 2 18.7 -> 10.0 us, 88@3x96 5x5 22.6 -> 11.7,
 * 8@24x96 3x3 stride 2 at 0.15M of work 5.7 -> 4.5). */
ML_UNUSED static void ml_dwcb_conv2d(int64_t nimg, int64_t C, int64_t H, int64_t W,
                                     int64_t OH, int64_t OW, int KH, int KW, int SH, int SW,
                                     int64_t PT, int64_t PL,
                                     int DH, int DW, const float* restrict x,
                                     const float* restrict wp, const float* restrict bias,
                                     float* restrict y, float* restrict scratch,
                                     ml_epi_fn epi, void* epi_out, int64_t epi_b,
                                     int layout) {
    if (nimg <= 0) return; /* a run-time batch of none */
    int64_t Wa = ml_dwcb_wa(W, OW, KW, SW, PL, DW), band = ml_dwcb_band_rows(OH, Wa, KH, SH, DH);
    ml_dwcb_job j = {C, H, W, OH, OW, PT, PL, Wa, ml_dwcb_owa(OW), band, (OH + band - 1) / band,
                     1, epi_b, KH, KW, SH, SW, DH, DW, x, wp, bias, y, epi, epi_out,
                     layout & 1, (layout >> 1) & 1, nimg, C * H * W, C * OH * OW};
    int64_t cw = ml_dwcb_cw(&j), nblk = nimg * ((C + cw - 1) / cw); /* every image's */
#ifdef MONOLIB_THREADPOOL_H
    int64_t want = (int64_t)ml_num_threads() * 4;
    if (want > 4 && nblk * j.nb < want) { /* few blocks: more bands, of a few rows each */
        int64_t nb = ML_MIN((want + nblk - 1) / nblk, (OH + ML_DWCB_ROWS - 1) / ML_DWCB_ROWS);
        if (nb > j.nb) j.band = (OH + nb - 1) / nb, j.nb = (OH + j.band - 1) / j.band;
    }
    /* multiply-adds plus the floats moved (transposed in and out, 4 each) */
    double work = (double)nimg * C * (OH * OW * KH * KW + 4 * (H * W + 2 * OH * OW));
    int64_t tasks = ml_par_tasks_mem(work, nblk * j.nb);
    if (tasks > 1) {
        j.chunk = (nblk * j.nb + tasks - 1) / tasks;
        size_t bytes = sizeof(float) * (size_t)ml_dwcb_scratch_floats(W, OH, OW, KH, KW, SH,
                                                                       SW, PL, DH, DW);
        ml_parallel_for((nblk * j.nb + j.chunk - 1) / j.chunk, ml_dwcb_task, &j, scratch, bytes);
        return;
    }
#endif
    ml_dwcb_images(&j, 0, nblk * j.nb, scratch);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_CONV_DEPTHWISE_H */
