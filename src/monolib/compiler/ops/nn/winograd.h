/* winograd.h -- Winograd / Cook-Toom convolution (monolib kernel library).
 *
 * Needs gemm.h (ml_vf, ML_VW, ML_MR, ML_NR, ml_ukernel_rows, ml_epi_fn) before it.
 *
 * Stride-1 convolution of one NCHW image by minimal filtering F(mh x mw, rh x rw)
 * (Lavin & Gray 2016, "Fast Algorithms for Convolutional Neural Networks"): the output
 * is cut into tiles of mh x mw pixels, each computed from an ah x aw input tile
 * (a = m + r - 1) as
 *     Y = AT [ sum_ci U[co][ci] (.) (BT d[ci] BT^T) ] AT^T,  U = G g G^T (compile time).
 * Per element xi of the ah x aw transformed tile the sum over ci is a GEMM
 *     M[xi] (C_out x tiles) = U[xi] (C_out x C_in) V[xi] (C_in x tiles),
 * run with gemm.h's micro-kernel: U is packed full-K per xi at compile time, V is written
 * by the input transform straight into the packed-B layout (panels of ML_NR tiles).
 *
 * The transforms are generated C (ops/nn/winograd.py) with the matrices as constants:
 *   in(b, rs, ps, v, xs): loads d[i][j] = *(ml_vf*)(b + i*rs + (j%mw)*ps + j/mw) for
 *       ML_VW tiles side by side and stores V element xi at v + xi*xs;
 *   out(m, xs, bias, y): loads M element xi at m + xi*xs and writes the mh*mw output
 *       vectors y[a*mw + b] (bias added).
 * Tiles are vectorised along a row of tiles: per channel, the input rows a block reads
 * are copied into a zero-padded buffer split into mw column phases (phase p holds padded
 * columns q*mw + p: a de-interleave by vector shuffles), so column q*mw + j of ML_VW
 * consecutive tiles is one vector load at phase j%mw, offset j/mw.
 *
 * Narrow images (pack != 0) put several rows of tiles in one vector instead: lane l of a
 * block is tile (row l / ls, column l % ls), ls = TW + (aw-1)/mw (the columns a row's last
 * tile reads past it: the lanes between rows are computed, never stored), the input rows
 * of each row of tiles copied side by side (ml_wino_input_packed), so a 7-tile-wide image
 * fills 14 of 16 lanes instead of 7.
 *
 * Work is split into blocks of bh x bw tiles (whole rows of tiles where they are narrow
 * enough); each block, times `co_split` ranges of output channels, is one task of the
 * thread pool with its own scratch: tasks never synchronise. Per task: the input
 * transform of every channel into V, then per `mb` output channels the ah*aw GEMMs into
 * M and the output transform, stores and the fused epilogue while M is in cache.
 *
 * Raw-weight mode (wt != NULL; the size budget's choice where the library has no room
 * for U, 4x the raw 3x3 weights): u holds the raw taps instead, tap t of the packed-A
 * layout at u + t*u_stride, and each pass of mb output channels transforms its taps,
 * one row k of the ah x aw elements at a time, into the task's scratch U (u_floats:
 * aw matrices, small enough for L2) with the generated
 *   wt(g, ts, u, xs, k, n): for j < n in steps of ML_VW, loads tap t of the ML_VW packed
 *       floats at g + j + t*ts and stores element (k, l) of their transforms at
 *       u + j + l*xs (one call per row: a call per vector cost 3-8% of a 64-channel conv),
 * then runs the same GEMMs on them: aw stores per vector of (channel, row) pairs and
 * row, against aw * (block lanes) multiply-adds per pair in the GEMMs; blocks may be
 * larger in this mode (winograd.py _raw_plan) to serve more lanes per transform.
 */
#ifndef MONOLIB_WINOGRAD_H
#define MONOLIB_WINOGRAD_H
#include <stdint.h>
#include <string.h>

typedef void (*ml_wino_in_fn)(const float* b, int64_t rs, int64_t ps, float* v, int64_t xs);
typedef void (*ml_wino_out_fn)(const float* m, int64_t xs, float bias, ml_vf* y);
typedef void (*ml_wino_w_fn)(const float* g, int64_t ts, float* u, int64_t xs, int64_t k,
                             int64_t n);

/* One Winograd convolution of one image. A block is bh x bw tiles of the grid (fewer at
 * the bottom and right edges); its tiles are GEMM columns r*bwp + c, each block row
 * padded to bwp = bw rounded up to ML_VW (the padding lanes are computed, never
 * stored), ntp = nh*bwp rounded up to ML_NR columns. Scratch per task (floats): V
 * (v_floats >= ah*aw*ml_wino_stride(C*ntp)), M (m_floats >= ah*aw*ml_wino_stride(mb*ntp)),
 * the phase buffer of one channel (p_floats, a multiple of 16) and in raw-weight mode
 * one row of U of one pass (u_floats >= aw*ml_wino_stride(mb*C)). */
typedef struct {
    int64_t C, M, H, W, OH, OW, PT, PL;
    int64_t mh, mw, ah, aw;  /* output tile, input tile */
    int64_t TH, TW;          /* tile grid */
    int64_t bh, bw;          /* tiles per block */
    int64_t mb;              /* output channels per GEMM + output pass, a multiple of ML_MR */
    int64_t co_split;        /* tasks per block, each a range of output channels */
    int64_t pack;            /* 1: lanes run across rows of tiles (needs bw >= TW) */
    int64_t v_floats, m_floats, p_floats, u_floats;
    const float* x;          /* [C][H][W] */
    const float* u;          /* ah*aw packed A (C_out x C_in, full-K), u_stride floats apart;
                              * raw-weight mode: the rh*rw raw taps so laid out */
    int64_t u_stride;
    const float* bias;       /* [M] or NULL */
    float* y;                /* [M][OH][OW] */
    ml_wino_in_fn in;
    ml_wino_out_fn out;
    ml_wino_w_fn wt;         /* NULL: u is transformed; else the raw-weight mode */
    ml_epi_fn epi;
    void* epi_out;
    int64_t epi_b;
} ml_wino_args;

/* Two-source lane shuffles (GCC and clang spell them differently; others: plain loops). */
#if defined(__clang__)
#define ML_WSHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#elif defined(__GNUC__)
typedef int32_t ml_wino_vi __attribute__((vector_size(ML_VW * 4)));
#define ML_WSHUF(a, b, ...) __builtin_shuffle(a, b, (ml_wino_vi){__VA_ARGS__})
#endif
#if defined(ML_WSHUF) && ML_VW == 4
#define ML_WEVEN(a, b) ML_WSHUF(a, b, 0, 2, 4, 6)
#define ML_WODD(a, b) ML_WSHUF(a, b, 1, 3, 5, 7)
#elif defined(ML_WSHUF) && ML_VW == 16
#define ML_WEVEN(a, b) ML_WSHUF(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
#define ML_WODD(a, b) ML_WSHUF(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)
#endif

/* dst[p*Q + q] = s[4*q + p] for q < n, p < 4: the de-interleave of 4 column phases.
 * A last partial vector is redone overlapping the one before (same values): scalars only
 * when n is below one vector. */
static inline void ml_wino_split4(const float* restrict s, int64_t n, int64_t Q,
                                  float* restrict dst) {
    int64_t q = 0;
#if defined(ML_WSHUF) && ML_VW == 8
    /* AVX2: 128-bit halves regrouped, then a 4x4 transpose within each half (12
     * shuffles per 8 tiles, 8 of them in-lane; even/odd splits would take 24) */
    for (; q < n && n >= 8; q += 8) {
        if (q + 8 > n) q = n - 8;
        const float* x = s + 4 * q;
        ml_vf a0 = *(const ml_vf*)x, a1 = *(const ml_vf*)(x + 8);
        ml_vf a2 = *(const ml_vf*)(x + 16), a3 = *(const ml_vf*)(x + 24);
        ml_vf b0 = ML_WSHUF(a0, a2, 0, 1, 2, 3, 8, 9, 10, 11);
        ml_vf b1 = ML_WSHUF(a0, a2, 4, 5, 6, 7, 12, 13, 14, 15);
        ml_vf b2 = ML_WSHUF(a1, a3, 0, 1, 2, 3, 8, 9, 10, 11);
        ml_vf b3 = ML_WSHUF(a1, a3, 4, 5, 6, 7, 12, 13, 14, 15);
        ml_vf t0 = ML_WSHUF(b0, b1, 0, 8, 1, 9, 4, 12, 5, 13);
        ml_vf t1 = ML_WSHUF(b0, b1, 2, 10, 3, 11, 6, 14, 7, 15);
        ml_vf t2 = ML_WSHUF(b2, b3, 0, 8, 1, 9, 4, 12, 5, 13);
        ml_vf t3 = ML_WSHUF(b2, b3, 2, 10, 3, 11, 6, 14, 7, 15);
        *(ml_vf*)(dst + q) = ML_WSHUF(t0, t2, 0, 1, 8, 9, 4, 5, 12, 13);
        *(ml_vf*)(dst + Q + q) = ML_WSHUF(t0, t2, 2, 3, 10, 11, 6, 7, 14, 15);
        *(ml_vf*)(dst + 2 * Q + q) = ML_WSHUF(t1, t3, 0, 1, 8, 9, 4, 5, 12, 13);
        *(ml_vf*)(dst + 3 * Q + q) = ML_WSHUF(t1, t3, 2, 3, 10, 11, 6, 7, 14, 15);
    }
#elif defined(ML_WEVEN)
    /* two rounds of even/odd splits (one two-source permute each with AVX-512) */
    for (; q < n && n >= ML_VW; q += ML_VW) {
        if (q + ML_VW > n) q = n - ML_VW;
        const float* x = s + 4 * q;
        ml_vf a0 = *(const ml_vf*)x, a1 = *(const ml_vf*)(x + ML_VW);
        ml_vf a2 = *(const ml_vf*)(x + 2 * ML_VW), a3 = *(const ml_vf*)(x + 3 * ML_VW);
        ml_vf e01 = ML_WEVEN(a0, a1), o01 = ML_WODD(a0, a1);
        ml_vf e23 = ML_WEVEN(a2, a3), o23 = ML_WODD(a2, a3);
        *(ml_vf*)(dst + q) = ML_WEVEN(e01, e23);
        *(ml_vf*)(dst + Q + q) = ML_WEVEN(o01, o23);
        *(ml_vf*)(dst + 2 * Q + q) = ML_WODD(e01, e23);
        *(ml_vf*)(dst + 3 * Q + q) = ML_WODD(o01, o23);
    }
#endif
    for (; q < n; ++q)
        for (int p = 0; p < 4; ++p) dst[p * Q + q] = s[4 * q + p];
}

/* Copy padded columns c0 + q*mw + p (q < Q, p < mw) of one input row (W floats) into
 * dst[p*PS + q] (phases PS >= Q floats apart), zero outside the row. */
static inline void ml_wino_split_row_ps(const float* restrict src, int64_t W, int64_t c0,
                                        int64_t mw, int64_t Q, int64_t PS,
                                        float* restrict dst) {
    /* q in [lo, hi): every phase in range */
    int64_t lo = c0 < 0 ? (-c0 + mw - 1) / mw : 0;
    int64_t hi = W - c0 - mw >= 0 ? (W - c0 - mw) / mw + 1 : 0;
    if (hi > Q) hi = Q;
    if (lo > hi) lo = hi;
    for (int64_t p = 0; p < mw; ++p) { /* the edges, partly or wholly padding */
        for (int64_t q = 0; q < lo; ++q) {
            int64_t c = c0 + q * mw + p;
            dst[p * PS + q] = c >= 0 && c < W ? src[c] : 0.0f;
        }
        for (int64_t q = hi; q < Q; ++q) {
            int64_t c = c0 + q * mw + p;
            dst[p * PS + q] = c >= 0 && c < W ? src[c] : 0.0f;
        }
    }
    const float* s = src + c0 + lo * mw;
    if (mw == 4) {
        ml_wino_split4(s, hi - lo, PS, dst + lo);
    } else {
        for (int64_t p = 0; p < mw; ++p)
            for (int64_t q = lo; q < hi; ++q) dst[p * PS + q] = s[(q - lo) * mw + p];
    }
}

static inline void ml_wino_split_row(const float* restrict src, int64_t W, int64_t c0,
                                     int64_t mw, int64_t Q, float* restrict dst) {
    ml_wino_split_row_ps(src, W, c0, mw, Q, Q, dst);
}

/* The stride of the ah*aw matrices V[xi] (or M[xi]) of n floats: an odd number of
 * 64-byte lines, so the 36 or 64 rows a transform reads or writes at once fall in
 * different L1 sets (a multiple of 4 KiB would put them all in one). */
static inline int64_t ml_wino_stride(int64_t n) {
    int64_t lines = (n + 15) / 16;
    return (lines | 1) * 16;
}

/* Block geometry: tiles (ty0 + r, tx0 + c) for r < nh, c < nw; GEMM columns ntp. */
typedef struct {
    int64_t ty0, tx0, nh, nw, bwp, ntp;
} ml_wino_block;

/* In pack mode bwp is the lane stride of a row of tiles (ls) and nh*bwp lanes are used. */
static inline ml_wino_block ml_wino_block_of(const ml_wino_args* a, int64_t blk) {
    int64_t nbx = (a->TW + a->bw - 1) / a->bw;
    ml_wino_block b;
    b.ty0 = (blk / nbx) * a->bh;
    b.tx0 = (blk % nbx) * a->bw;
    b.nh = ML_MIN(a->bh, a->TH - b.ty0);
    b.nw = ML_MIN(a->bw, a->TW - b.tx0);
    b.bwp = a->pack ? b.nw + (a->aw - 1) / a->mw : (b.nw + ML_VW - 1) / ML_VW * ML_VW;
    b.ntp = (b.nh * b.bwp + ML_NR - 1) / ML_NR * ML_NR;
    return b;
}

/* Lanes of a packed block rounded up to whole vectors, plus the phase columns the last
 * vector's taps read past them: the length of one phase row of the packed buffer. */
static inline int64_t ml_wino_packed_row(const ml_wino_args* a, const ml_wino_block* b) {
    return (b->nh * b->bwp + ML_VW - 1) / ML_VW * ML_VW + (a->aw - 1) / a->mw;
}

/* Input transform of a packed block: per channel, buffer P holds for each input row
 * offset i < ah and phase p a row of lanes, lane r*ls + q being padded column
 * (tx0 + q)*mw + p of input row (ty0 + r)*mh + i; then the generated transform reads
 * it as one long row of tiles (rs = mw*L, ps = L). */
static void ml_wino_input_packed(const ml_wino_args* a, const ml_wino_block* b,
                                 float* restrict V, float* restrict P) {
    const int64_t mh = a->mh, mw = a->mw, C = a->C, ntp = b->ntp, ls = b->bwp;
    const int64_t L = ml_wino_packed_row(a, b), used = b->nh * ls;
    const int64_t nv = (used + ML_VW - 1) / ML_VW * ML_VW;
    int64_t rs = mw * L, xs = ml_wino_stride(C * ntp);
    for (int64_t ci = 0; ci < C; ++ci) {
        const float* xc = a->x + ci * a->H * a->W;
        for (int64_t i = 0; i < a->ah; ++i) {
            float* pi = P + i * rs;
            for (int64_t r = 0; r < b->nh; ++r) {
                int64_t ih = (b->ty0 + r) * mh + i - a->PT;
                if (ih < 0 || ih >= a->H) {
                    for (int64_t p = 0; p < mw; ++p)
                        memset(pi + p * L + r * ls, 0, ls * sizeof(float));
                } else {
                    ml_wino_split_row_ps(xc + ih * a->W, a->W, b->tx0 * mw - a->PL, mw, ls, L,
                                         pi + r * ls);
                }
            }
            for (int64_t p = 0; p < mw; ++p) /* lanes past the last row: finite, unused */
                memset(pi + p * L + used, 0, (L - used) * sizeof(float));
        }
        for (int64_t t = 0; t < nv; t += ML_VW)
            a->in(P + t, rs, L, V + (t / ML_NR) * C * ML_NR + ci * ML_NR + t % ML_NR, xs);
        if (nv < ntp)
            for (int64_t xi = 0; xi < a->ah * a->aw; ++xi)
                memset(V + xi * xs + (nv / ML_NR) * C * ML_NR + ci * ML_NR + nv % ML_NR, 0,
                       (ntp - nv) * sizeof(float));
    }
}

/* Input transform of a block into V (packed B panels: ntp columns per xi). */
static void ml_wino_input(const ml_wino_args* a, const ml_wino_block* b, float* restrict V,
                          float* restrict P) {
    const int64_t mh = a->mh, mw = a->mw, C = a->C, ntp = b->ntp;
    int64_t Q = b->bwp + (a->aw - 1) / mw; /* phase columns read */
    int64_t R = (b->nh - 1) * mh + a->ah;  /* padded rows read */
    int64_t rs = mw * Q, xs = ml_wino_stride(C * ntp), n = b->nh * b->bwp;
    for (int64_t ci = 0; ci < C; ++ci) {
        const float* xc = a->x + ci * a->H * a->W;
        for (int64_t r = 0; r < R; ++r) {
            int64_t ih = b->ty0 * mh + r - a->PT;
            if (ih < 0 || ih >= a->H) memset(P + r * rs, 0, rs * sizeof(float));
            else
                ml_wino_split_row(xc + ih * a->W, a->W, b->tx0 * mw - a->PL, mw, Q, P + r * rs);
        }
        for (int64_t r = 0; r < b->nh; ++r)
            for (int64_t c = 0; c < b->bwp; c += ML_VW) {
                int64_t t = r * b->bwp + c;
                a->in(P + r * mh * rs + c, rs, Q,
                      V + (t / ML_NR) * C * ML_NR + ci * ML_NR + t % ML_NR, xs);
            }
        if (n < ntp) /* columns no tile uses: zeros, not stale scratch */
            for (int64_t xi = 0; xi < a->ah * a->aw; ++xi)
                memset(V + xi * xs + (n / ML_NR) * C * ML_NR + ci * ML_NR + n % ML_NR, 0,
                       (ntp - n) * sizeof(float));
    }
}

/* Store the output vectors y[i*mw + j] of tiles (ty, tx..tx+cnt-1) of channel co. */
static inline void ml_wino_store(const ml_wino_args* a, int64_t co, int64_t ty, int64_t tx,
                                 int64_t cnt, const float* restrict y) {
    const int64_t mh = a->mh, mw = a->mw, OH = a->OH, OW = a->OW;
    float* yc = a->y + co * OH * OW;
    int64_t rows = ML_MIN(mh, OH - ty * mh);
    if (cnt == ML_VW && (tx + cnt) * mw <= OW && mw == 4) {
        for (int64_t i = 0; i < rows; ++i) { /* constant shape: a vectorised interleave */
            float* d = yc + (ty * mh + i) * OW + tx * 4;
            const float* s = y + i * 4 * ML_VW;
            for (int64_t l = 0; l < ML_VW; ++l)
                for (int64_t j = 0; j < 4; ++j) d[l * 4 + j] = s[j * ML_VW + l];
        }
        return;
    }
    int64_t cols = ML_MIN(cnt * mw, OW - tx * mw);
    /* fewer tiles than a vector (a row of tiles narrower than ML_VW, the rest of a wider
     * one): the common tile widths with mw a constant, so no division per float (with
     * a run-time mw, an idiv a float took 2/3 of a 16 -> 64 channel 56x56 conv) */
    if (mw == 4 || mw == 2) {
        for (int64_t i = 0; i < rows; ++i) {
            float* d = yc + (ty * mh + i) * OW + tx * mw;
            const float* s = y + i * mw * ML_VW;
            if (mw == 4)
                for (int64_t k = 0; k < cols; ++k) d[k] = s[(k & 3) * ML_VW + (k >> 2)];
            else
                for (int64_t k = 0; k < cols; ++k) d[k] = s[(k & 1) * ML_VW + (k >> 1)];
        }
        return;
    }
    for (int64_t i = 0; i < rows; ++i) {
        float* d = yc + (ty * mh + i) * OW + tx * mw;
        const float* s = y + i * mw * ML_VW;
        for (int64_t k = 0; k < cols; ++k) d[k] = s[(k % mw) * ML_VW + k / mw];
    }
}

/* Store lanes t0..t0+ML_VW-1 of a packed block (output vectors y, see the transform) of
 * channel co: lane t is tile (ty0 + t / ls, tx0 + t % ls), those past nw or nh skipped. */
static inline void ml_wino_store_packed(const ml_wino_args* a, const ml_wino_block* b,
                                        int64_t co, int64_t t0, const float* restrict y) {
    const int64_t mh = a->mh, mw = a->mw, OH = a->OH, OW = a->OW, ls = b->bwp;
    float* yc = a->y + co * OH * OW;
    for (int64_t l = 0; l < ML_VW; ++l) {
        int64_t t = t0 + l, r = t / ls, q = t % ls;
        if (r >= b->nh) break;
        if (q >= b->nw) continue;
        int64_t oy = (b->ty0 + r) * mh, ox = (b->tx0 + q) * mw;
        int64_t rows = ML_MIN(mh, OH - oy), cols = ML_MIN(mw, OW - ox);
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j)
                yc[(oy + i) * OW + ox + j] = y[(i * mw + j) * ML_VW + l];
    }
}

/* The epilogue on output channels [c0, c1) of the pixels of block b. */
static void ml_wino_epilogue(const ml_wino_args* a, const ml_wino_block* b, int64_t c0,
                             int64_t c1) {
    const int64_t OW = a->OW;
    int64_t h0 = b->ty0 * a->mh, h1 = ML_MIN(a->OH, (b->ty0 + b->nh) * a->mh);
    int64_t w0 = b->tx0 * a->mw, w1 = ML_MIN(OW, (b->tx0 + b->nw) * a->mw);
    if (w0 == 0 && w1 == OW) { /* whole rows: one call */
        a->epi(a->epi_out, a->epi_b, c0, c1, h0 * OW, h1 * OW);
        return;
    }
    for (int64_t oh = h0; oh < h1; ++oh)
        a->epi(a->epi_out, a->epi_b, c0, c1, oh * OW + w0, oh * OW + w1);
}

/* Task t: the tiles of block t / co_split, output channels of range t % co_split. */
static void ml_wino_task(void* ctx, int64_t task, void* scratch) {
    const ml_wino_args* a = (const ml_wino_args*)ctx;
    const int64_t C = a->C, M = a->M, xi_n = a->ah * a->aw;
    int64_t part = task % a->co_split;
    int64_t panels = (M + ML_MR - 1) / ML_MR;
    int64_t per = (panels + a->co_split - 1) / a->co_split;
    int64_t co0 = part * per * ML_MR, co1 = ML_MIN(M, co0 + per * ML_MR);
    if (co0 >= co1) return;
    ml_wino_block b = ml_wino_block_of(a, task / a->co_split);
    int64_t ntp = b.ntp;
    float* V = (float*)scratch;
    float* Mb = V + a->v_floats;
    float* P = Mb + a->m_floats;
    float* Ut = P + a->p_floats; /* raw-weight mode: one row of U of one pass */
    const int64_t uxs = a->wt ? ml_wino_stride(a->mb * C) : 0;
    if (a->pack)
        ml_wino_input_packed(a, &b, V, P);
    else
        ml_wino_input(a, &b, V, P);
    float y[64 * ML_VW] __attribute__((aligned(64))); /* mh*mw <= 64 output vectors */
    int64_t mxs = ml_wino_stride(a->mb * ntp);
    for (int64_t cb = co0; cb < co1; cb += a->mb) {
        int64_t ce = ML_MIN(co1, cb + a->mb);
        /* whole panels of rows cb..ce (raw mode: the last vector may read past them) */
        const int64_t n = (ce - cb + ML_MR - 1) / ML_MR * ML_MR * C;
        for (int64_t xi = 0; xi < xi_n; ++xi) {
            const float* u = a->u + xi * a->u_stride; /* panel p at u + (p - u0)*C */
            int64_t u0 = 0;
            if (a->wt) {
                if (xi % a->aw == 0) /* the next row of U */
                    a->wt(a->u + cb * C, a->u_stride, Ut, uxs, xi / a->aw, n);
                u = Ut + (xi % a->aw) * uxs;
                u0 = cb;
            }
            const float* v = V + xi * ml_wino_stride(C * ntp);
            float* m = Mb + xi * mxs;
            for (int64_t p = cb; p < ce; p += ML_MR) {
                int mr = (int)ML_MIN(ML_MR, ce - p);
                const float* up = u + (p - u0) * C; /* p, u0: multiples of ML_MR */
                float* mp = m + (p - cb) * ntp;
                int64_t q = 0;
                /* the GEMM's wide tile (ML_NP panels, C*ML_NR floats apart) where it fits:
                 * one A broadcast feeds twice the FMAs with AVX-512 */
                for (; q + ML_NP * ML_NR <= ntp; q += ML_NP * ML_NR)
                    ml_ukernel_rows(ML_NP, C, up, v + q * C, C * ML_NR, mp + q, ntp, mr,
                                    ML_NP * ML_NR, 1.0f, 0, 0, 0);
                for (; q < ntp; q += ML_NR)
                    ml_ukernel_rows(1, C, up, v + q * C, 0, mp + q, ntp, mr, ML_NR, 1.0f, 0,
                                    0, 0);
            }
        }
        for (int64_t co = cb; co < ce && a->pack; ++co) {
            float bias = a->bias ? a->bias[co] : 0.0f;
            for (int64_t t = 0; t < b.nh * b.bwp; t += ML_VW) {
                a->out(Mb + (co - cb) * ntp + t, mxs, bias, (ml_vf*)y);
                ml_wino_store_packed(a, &b, co, t, y);
            }
        }
        for (int64_t co = cb; co < ce && !a->pack; ++co) {
            float bias = a->bias ? a->bias[co] : 0.0f;
            for (int64_t r = 0; r < b.nh; ++r)
                for (int64_t c = 0; c < b.nw; c += ML_VW) {
                    a->out(Mb + (co - cb) * ntp + r * b.bwp + c, mxs, bias, (ml_vf*)y);
                    ml_wino_store(a, co, b.ty0 + r, b.tx0 + c, ML_MIN(ML_VW, b.nw - c), y);
                }
        }
        if (a->epi) ml_wino_epilogue(a, &b, cb, ce);
    }
}

/* Output-channel ranges per block for nt threads: the plan's co_split at most, one
 * where the blocks alone share out evenly (each further range repeats its block's input
 * transform), else the fewest that make the tasks a multiple of the threads. */
static inline int64_t ml_wino_parts(int64_t blocks, int64_t most, int64_t nt) {
    if (nt <= 1 || blocks % nt == 0 || blocks >= 4 * nt) return 1;
    for (int64_t s = 2; s < most; ++s)
        if ((blocks * s) % nt == 0) return s;
    return most;
}

/* The whole image: blocks (times output-channel ranges, ml_wino_parts) on the thread
 * pool when their modelled finish time beats one thread's (ml_par_span: each range
 * repeats its block's input transform); on one thread one task per block (the plan's two ranges
 * a block, each repeating the input transform, ran ResNet-50's 128-channel 3x3 at 28x28
 * in 1301 us, one range in 1048). A channel's sums do not depend on its range: any
 * split gives the same bits. */
ML_UNUSED static void ml_winograd(const ml_wino_args* a, void* scratch) {
    int64_t blocks = ((a->TH + a->bh - 1) / a->bh) * ((a->TW + a->bw - 1) / a->bw);
    ml_wino_args r = *a;
    r.co_split = 1;
#ifdef MONOLIB_THREADPOOL_H
    /* the GEMMs plus the transforms (some 16 operations per element and channel); a
     * task does its block's input transform whole, its range's share of the rest */
    double xt = (double)a->ah * a->aw * a->TH * a->TW / blocks; /* per block */
    double in_t = xt * 16 * a->C, rest = xt * (a->C * a->M + 16 * a->M);
    double work = blocks * (in_t + rest);
    int64_t parts = ml_wino_parts(blocks, a->co_split, ml_num_threads());
    double task = in_t + rest / parts + ML_PAR_TASK_COST;
    if (ml_par_most(work, blocks * parts) > 1 &&
        ml_par_pays(work, ml_par_span(blocks * parts, task, task, ml_num_threads()))) {
        r.co_split = parts;
        size_t bytes = 4 * (size_t)(a->v_floats + a->m_floats + a->p_floats + a->u_floats);
        ml_parallel_for(blocks * r.co_split, ml_wino_task, &r, scratch, bytes);
        return;
    }
#endif
    for (int64_t t = 0; t < blocks; ++t) ml_wino_task(&r, t, scratch);
}

/* A dilated convolution (dilations ph x pw, stride 1) as one undilated one
 * (space-to-batch, the standard way to run atrous convolutions): output pixel
 * (r + i*ph, s + j*pw) reads only inputs (r + i'*ph, s + j'*pw), so phase (r, s) of the
 * output is the undilated conv of phase (r, s) of the input, pads top and left divided
 * by the dilations (winograd.py asks them multiples). The ph x pw input phases are
 * gathered side by side into one image `a->x` ([C][ph*pr][pw*pc]): phase (r, s) at rows
 * r*pr.. and columns s*pc.., with its pads (pt rows, pl columns) before it and zeros
 * after it to the period: the windows of a phase's outputs never reach the next, and
 * the image keeps about the shape of the input (Winograd's rows of tiles stay as
 * wide). One ml_winograd call convolves it unpadded (blocks and threads as for any
 * image); its output `a->y` ([M][a->OH][a->OW], phase (r, s) at rows r*pr.. and columns
 * s*pc..) is scattered into y, each channel's fused epilogue right after its plane. The
 * copies move each float once, in tasks over channels on the thread pool. */
typedef struct {
    const ml_wino_args* a;
    const float* x;
    float* y;
    int64_t H, W, OH, OW, ph, pw, pr, pt, pc, pl;
    ml_epi_fn epi;
    void* epi_out;
    int64_t epi_b;
} ml_wino_phase_job;

/* Input channel c into the phases' image: per row, the pw column phases of one input
 * row (two: an even/odd split gcc vectorises) with zeros around each. */
static void ml_wino_gather(void* ctx, int64_t c, void* scratch) {
    const ml_wino_phase_job* j = (const ml_wino_phase_job*)ctx;
    const ml_wino_args* a = j->a;
    const int64_t SW = a->W, W = j->W, pw = j->pw, pc = j->pc, pl = j->pl;
    const float* xc = j->x + c * j->H * W;
    float* dc = (float*)a->x + c * a->H * SW;
    (void)scratch;
    for (int64_t r = 0; r < j->ph; ++r) {
        const int64_t Hr = (j->H - r + j->ph - 1) / j->ph;
        for (int64_t i = 0; i < j->pr; ++i) {
            float* d = dc + (r * j->pr + i) * SW;
            const int64_t ih = i - j->pt;
            if (ih < 0 || ih >= Hr) {
                memset(d, 0, SW * sizeof(float));
                continue;
            }
            const float* restrict src = xc + (r + ih * j->ph) * W;
            if (pw == 2) {
                float* restrict d0 = d + pl;
                float* restrict d1 = d + pc + pl;
                const int64_t h = W / 2;
                for (int64_t q = 0; q < h; ++q) d0[q] = src[2 * q], d1[q] = src[2 * q + 1];
                if (W & 1) d0[h] = src[W - 1];
            } else {
                for (int64_t s = 0; s < pw; ++s)
                    for (int64_t q = 0; q * pw + s < W; ++q) d[s * pc + pl + q] = src[q * pw + s];
            }
            for (int64_t s = 0; s < pw; ++s) { /* the zeros around phase s */
                float* ds = d + s * pc;
                const int64_t n = pl + (W - s + pw - 1) / pw;
                for (int64_t q = 0; q < pl; ++q) ds[q] = 0.0f;
                for (int64_t q = n; q < pc; ++q) ds[q] = 0.0f;
            }
        }
    }
}

/* Output channel m from the phases' output into y (the inverse interleave), then its
 * epilogue while the plane is in cache. */
static void ml_wino_scatter(void* ctx, int64_t m, void* scratch) {
    const ml_wino_phase_job* j = (const ml_wino_phase_job*)ctx;
    const ml_wino_args* a = j->a;
    const int64_t SW = a->OW, OW = j->OW, pw = j->pw, pc = j->pc;
    const float* sc = a->y + m * a->OH * SW;
    float* yc = j->y + m * j->OH * OW;
    (void)scratch;
    for (int64_t r = 0; r < j->ph; ++r) {
        const int64_t OHr = (j->OH - r + j->ph - 1) / j->ph;
        for (int64_t i = 0; i < OHr; ++i) {
            const float* restrict src = sc + (r * j->pr + i) * SW;
            float* restrict d = yc + (r + i * j->ph) * OW;
            if (pw == 2) {
                const float* restrict s1 = src + pc;
                const int64_t h = OW / 2;
                for (int64_t q = 0; q < h; ++q) d[2 * q] = src[q], d[2 * q + 1] = s1[q];
                if (OW & 1) d[OW - 1] = src[h];
            } else {
                for (int64_t s = 0; s < pw; ++s)
                    for (int64_t q = 0; q * pw + s < OW; ++q) d[q * pw + s] = src[s * pc + q];
            }
        }
    }
    if (j->epi) j->epi(j->epi_out, j->epi_b, m, m + 1, 0, j->OH * OW);
}

/* Per channel of n, `fn` on the thread pool where the floats moved make it pay. */
static void ml_wino_channels(void (*fn)(void*, int64_t, void*), ml_wino_phase_job* j,
                             int64_t n, double floats) {
#ifdef MONOLIB_THREADPOOL_H
    if (ml_par_tasks_mem(floats, n) > 1) {
        ml_parallel_for(n, fn, j, 0, 0);
        return;
    }
#endif
    (void)floats;
    for (int64_t c = 0; c < n; ++c) fn(j, c, 0);
}

/* x [C][H][W] -> y [M][OH][OW] by its phases (above): `a` is the phases' conv
 * (x, y: its buffers in scratch; no epilogue), epi the fused one of y. */
ML_UNUSED static void ml_winograd_phases(const ml_wino_args* a, const float* x, float* y,
                                         int64_t H, int64_t W, int64_t OH, int64_t OW,
                                         int64_t ph, int64_t pw, int64_t pr, int64_t pt,
                                         int64_t pc, int64_t pl, ml_epi_fn epi,
                                         void* epi_out, int64_t epi_b, void* scratch) {
    ml_wino_phase_job j = {a, x, y, H, W, OH, OW, ph, pw, pr, pt, pc, pl,
                           epi, epi_out, epi_b};
    ml_wino_channels(ml_wino_gather, &j, a->C, (double)a->C * (a->H * a->W + H * W));
    ml_winograd(a, scratch);
    ml_wino_channels(ml_wino_scatter, &j, a->M, 2.0 * a->M * OH * OW);
}

#endif /* MONOLIB_WINOGRAD_H */
