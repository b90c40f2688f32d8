/* conv.h -- direct depthwise convolution and col2im (monolib kernel library).
 *
 * Needs gemm.h (ml_vf, ML_VW, ml_epi_fn) before it.
 *
 * Depthwise (ONNX Conv with group == C_in == C_out), NCHW, one image: ml_dwconv2d, direct
 * and vectorised along W, a few output rows per tile (see "depthwise convolution" below).
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

/* ---- depthwise convolution (ml_dwconv2d) ----
 * Fast path (3x3 and 5x5, strides 1 and 2, no dilation, pads up to 4): a block of a
 * channel's input rows is copied zero-padded into scratch (a few KiB, stays in L1), then
 * tiles of R output rows x V vectors (R*V >= 8 sums hide the FMA latency) sweep it, the
 * taps broadcast from the weights. Stride 2 along W loads two vectors and de-interleaves
 * them with one in-lane shuffle per tap (vshufps on AVX), which leaves a vector's outputs
 * in a fixed permuted order: one shuffle per sum puts them back before the store. Each
 * shape is its own entry point (ml_dw_units_<K>_<SH><SW>), so a model compiles only
 * the unrolled kernels it uses. Other shapes (ml_dw_units_any): each input row is copied
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
#elif ML_VW == 8
#define ML_DW_EVEN_IDX 0, 2, 8, 10, 4, 6, 12, 14
#define ML_DW_ODD_IDX 1, 3, 9, 11, 5, 7, 13, 15
#define ML_DW_FIX_IDX 0, 1, 4, 5, 2, 3, 6, 7
#elif ML_VW == 16
#define ML_DW_EVEN_IDX 0, 2, 16, 18, 4, 6, 20, 22, 8, 10, 24, 26, 12, 14, 28, 30
#define ML_DW_ODD_IDX 1, 3, 17, 19, 5, 7, 21, 23, 9, 11, 25, 27, 13, 15, 29, 31
#define ML_DW_FIX_IDX 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15
#endif
#ifdef __clang__
#define ML_DW_SHUF2(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define ML_DW_SHUF2(a, b, ...) __builtin_shuffle(a, b, (ml_dw_vi){__VA_ARGS__})
#endif
/* expands the index list first, then passes it on as several arguments */
#define ML_DW_SHUF2_(a, b, idx) ML_DW_SHUF2(a, b, idx)
typedef int32_t ml_dw_vi __attribute__((vector_size(ML_VW * 4)));
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
};

/* R x V vectors of outputs: output rows yr[0..R-1], columns yo.. . `in` is padded column
 * yo*SW of the tile's first input row, rows rs floats apart (output row r reads rows
 * r*SH + ky). Each input vector is multiplied into every output row whose window holds
 * it, by a broadcast tap. Constant shapes: gcc unrolls all of it (the pragmas: at -O2
 * too, where the sums would otherwise stay in memory, 3-4x slower). */
ML_INLINE void ml_dw_tile(const int K, const int SH, const int SW, const int R, const int V,
                          const float* restrict in, int64_t rs, const float* restrict w,
                          float b, float* const* yr, int64_t yo) {
    ml_vf acc[ML_DW_R][ML_DW_V];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[r][v] = b - (ml_vf){0};
#pragma GCC unroll 16
    for (int i = 0; i < (R - 1) * SH + K; ++i)
#pragma GCC unroll 8
        for (int kx = 0; kx < K; ++kx) {
            ml_vf x[ML_DW_V];
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) {
                const float* p = in + i * rs + v * SW * ML_VW;
                if (SW == 1) {
                    x[v] = *(const ml_vf*)(p + kx);
                    ML_DW_KEEP(x[v]);
                } else {
                    const float* q = p + (kx & ~1);
                    ml_vf lo = *(const ml_vf*)q, hi = *(const ml_vf*)(q + ML_VW);
                    x[v] = kx & 1 ? ML_DW_SHUF2_(lo, hi, ML_DW_ODD_IDX)
                                  : ML_DW_SHUF2_(lo, hi, ML_DW_EVEN_IDX);
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

/* R whole output rows yr (OW columns) from padded rows `in` (rs apart): V-vector tiles,
 * then single vectors, the last one ending at OW (overlapping the one before: values are
 * only stored, so computing some twice is harmless); an output row narrower than a vector
 * goes through tr (R rows of ML_VW floats). One call site per tile width keeps the
 * code small. */
ML_INLINE void ml_dw_rows(const int K, const int SH, const int SW, const int R, const int V,
                          const float* restrict in, int64_t rs, int64_t OW,
                          const float* restrict w, float b, float* const* yr,
                          float* const* tr) {
    int64_t ow = 0;
    for (; ow + V * ML_VW <= OW; ow += V * ML_VW)
        ml_dw_tile(K, SH, SW, R, V, in + ow * SW, rs, w, b, yr, ow);
    int64_t end = OW > ML_VW ? OW : ML_VW; /* single vectors up to end, the last moved back */
    for (; ow < end; ow += ML_VW) {
        int64_t o = ow + ML_VW <= end ? ow : end - ML_VW;
        ml_dw_tile(K, SH, SW, R, 1, in + o * SW, rs, w, b, OW < ML_VW ? tr : yr, o);
    }
    if (OW < ML_VW)
        for (int r = 0; r < R; ++r)
            for (int64_t i = 0; i < OW; ++i) yr[r][i] = tr[r][i];
}

/* Padded input row ih of x (H x W) at d (Wq floats): PL zeros, the row, zeros; all zeros
 * when ih is outside 0..H-1. Vector moves, the loops unrolled by hand or with a test
 * inside, so that gcc does not make memset/memcpy calls of short rows. */
static inline void ml_dw_pad_row(const float* restrict x, int64_t H, int64_t W, int64_t ih,
                                 int64_t PL, int64_t Wq, float* restrict d) {
    const ml_vf z = {0};
    if (ih < 0 || ih >= H) {
        memset(d, 0, sizeof(float) * (size_t)Wq);
        return;
    }
    const float* s = x + ih * W;
    int64_t n = ML_MIN(W, Wq - PL), q = 0; /* d[PL + q] = s[q] for q < n */
    *(ml_vf*)d = z;
    float* o = d + PL;
    for (; q + 4 * ML_VW <= n; q += 4 * ML_VW) {
        ml_vf a0 = *(const ml_vf*)(s + q), a1 = *(const ml_vf*)(s + q + ML_VW);
        ml_vf a2 = *(const ml_vf*)(s + q + 2 * ML_VW), a3 = *(const ml_vf*)(s + q + 3 * ML_VW);
        *(ml_vf*)(o + q) = a0, *(ml_vf*)(o + q + ML_VW) = a1;
        *(ml_vf*)(o + q + 2 * ML_VW) = a2, *(ml_vf*)(o + q + 3 * ML_VW) = a3;
    }
    if (n >= ML_VW) {
        for (int k = 0; k < 3; ++k)
            if (q + (k + 1) * ML_VW < n)
                *(ml_vf*)(o + q + k * ML_VW) = *(const ml_vf*)(s + q + k * ML_VW);
        if (q < n) *(ml_vf*)(o + n - ML_VW) = *(const ml_vf*)(s + n - ML_VW);
    } else {
        for (int k = 0; k < ML_VW; ++k)
            if (k < n) o[k] = s[k];
    }
    /* zeros from PL + n to Wq, whose slack past the windows is at most a few vectors */
    for (int64_t t = PL + n; t < Wq; t += ML_VW) *(ml_vf*)(d + ML_MIN(t, Wq - ML_VW)) = z;
}

/* Output rows oh0..oh1-1 of channel c on the fast path (R <= ML_DW_R rows per tile), in
 * blocks of up to j->blk rows: the block's input rows are padded into scratch (rows Wq
 * apart), then swept R rows at a time. A block's short last group is moved up to end with the block (recomputing rows
 * of the group before, whose epilogue then runs again on the fresh values); a band
 * shorter than R writes the rows past it to a junk row. The epilogue runs on the rows just
 * written, every ML_DW_EPI_FLOATS outputs. Scratch: the padded block, the junk row, R tmp
 * rows. */
ML_INLINE void ml_dw_band(const int K, const int SH, const int SW, const int R,
                          const ml_dw_job* j, int64_t c, int64_t oh0, int64_t oh1,
                          float* restrict scratch) {
    const int64_t OW = j->OW, Wq = j->Wq;
    float* plane = scratch;
    float* junk = plane + ((ML_DW_MAX(j->blk, R) - 1) * SH + K) * Wq;
    float* tr[ML_DW_R];
    for (int r = 0; r < R; ++r) tr[r] = junk + OW + r * ML_VW;
    const float* x = j->x + c * j->H * j->W;
    const float* w = j->w + c * K * K;
    float b = j->bias ? j->bias[c] : 0.0f;
    float* y = j->y + c * j->OH * OW;
    float* yr[ML_DW_R];
    int64_t nblk = (oh1 - oh0 + j->blk - 1) / j->blk, e0 = oh0;
    for (int64_t k = 0; k < nblk; ++k) {
        /* blocks of nearly equal size: each has at least R rows when the band has */
        int64_t ob = oh0 + (oh1 - oh0) * k / nblk, oe = oh0 + (oh1 - oh0) * (k + 1) / nblk;
        int64_t lo = ob * SH - j->PT, rows = (ML_DW_MAX(oe - ob, R) - 1) * SH + K;
        for (int64_t i = 0; i < rows; ++i)
            ml_dw_pad_row(x, j->H, j->W, lo + i, j->PL, Wq, plane + i * Wq);
        for (int64_t oh = ob; oh < oe;) {
            int64_t g = oh + R > oe && oe - ob >= R ? oe - R : oh;
            for (int r = 0; r < R; ++r) yr[r] = g + r < oe ? y + (g + r) * OW : junk;
            ml_dw_rows(K, SH, SW, R, ML_DW_V, plane + (g - ob) * SH * Wq, Wq, OW, w, b,
                       yr, tr);
            if (g < e0) e0 = g;
            oh = ML_MIN(g + R, oe);
            if (j->epi && ((oh - e0) * OW >= ML_DW_EPI_FLOATS || oh == oh1)) {
                j->epi(j->epi_out, j->epi_b, c, c + 1, e0 * OW, oh * OW);
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
        int64_t c = u / j->nb, oh0 = (u % j->nb) * j->band, oh1 = ML_MIN(j->OH, oh0 + j->band);
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
    const float* x = j->x + c * j->H * j->W;
    const float* w = j->w + c * KH * KW;
    float b = j->bias ? j->bias[c] : 0.0f;
    int64_t lo = oh0 * SH - j->PT, filled = lo, head = 0, e0 = oh0;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
        int64_t nlo = oh * SH - j->PT;
        head = (head + nlo - lo) % nring;
        lo = nlo;
        if (filled < lo) filled = lo;
        for (; filled < lo + need; ++filled)
            ml_dw_fill_row(SW, x, j->H, j->W, filled, j->Wp, j->Wq, j->PL,
                           ring + ((head + filled - lo) % nring) * rs);
        for (int64_t i = 0; i < need; ++i) rp[i] = ring + ((head + i) % nring) * rs;
        float* y = j->y + (c * j->OH + oh) * OW;
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
            j->epi(j->epi_out, j->epi_b, c, c + 1, e0 * OW, (oh + 1) * OW);
            e0 = oh + 1;
        }
    }
}

/* Work units u0..u1-1 of any depthwise conv (see ml_dw_units_k). */
static void ml_dw_units_any(const ml_dw_job* j, int64_t u0, int64_t u1, float* scratch) {
    for (int64_t u = u0; u < u1; ++u) {
        int64_t c = u / j->nb, oh0 = (u % j->nb) * j->band, oh1 = ML_MIN(j->OH, oh0 + j->band);
        if (oh0 < oh1) ml_dw_band_any(j, c, oh0, oh1, scratch);
    }
}

#ifdef MONOLIB_THREADPOOL_H
/* Task t of ml_dwconv2d: units [t*chunk, +chunk), scratch is the thread's. */
static void ml_dw_task(void* ctx, int64_t t, void* scratch) {
    const ml_dw_job* j = (const ml_dw_job*)ctx;
    int64_t u0 = t * j->chunk, nu = j->C * j->nb;
    j->units(j, u0, ML_MIN(nu, u0 + j->chunk), (float*)scratch);
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
ML_UNUSED static void ml_dwconv2d(int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                  int KH, int KW, int SH, int SW, int64_t PT, int64_t PL,
                                  int DH, int DW, const float* restrict x,
                                  const float* restrict w, const float* restrict bias,
                                  float* restrict y, float* restrict scratch, ml_epi_fn epi,
                                  void* epi_out, int64_t epi_b, ml_dw_units_fn units) {
    int64_t Wp = (OW - 1) * SW + (KW - 1) * DW + 1, hp = (OH - 1) * SH + (KH - 1) * DH + 1;
    int fast = units != ml_dw_units_any &&
               ml_dw_is_fast(KH, KW, SH, SW, DH, DW, PL, Wp - W - PL);
    ml_dw_job j = {C, H, W, OH, OW, PT, PL, Wp,
                   fast ? ml_dw_row_floats(OW, KW, SW) : (Wp + SW - 1) / SW + 2 * ML_VW,
                   ML_MIN(hp, (KH - 1) * DH + 1), OH, 1, C, epi_b,
                   fast ? ml_dw_block_rows(OH, OW, KW, SH, SW) : 0, KH, KW, SH, SW, DH, DW,
                   x, w, bias, y, epi, epi_out, fast ? units : ml_dw_units_any};
#ifdef MONOLIB_THREADPOOL_H
    int64_t want = (int64_t)ml_num_threads() * 4;
    if (C < want) { /* few channels: bands of at least 8 output rows as well */
        j.nb = ML_MIN((want + C - 1) / C, (OH + 7) / 8);
        if (j.nb < 1) j.nb = 1;
        j.band = (OH + j.nb - 1) / j.nb;
    }
    /* multiply-adds, and the floats read and written (4 each: these run 5-10x slower than
     * a GEMM's, det's 1.4-2M ones take 0.15 ms) */
    double work = (double)C * (OH * OW * KH * KW + 4 * (H * W + OH * OW));
    int64_t tasks = ml_par_tasks(work, C * j.nb);
    if (tasks > 1) {
        j.chunk = (C * j.nb + tasks - 1) / tasks;
        size_t bytes = sizeof(float) * (size_t)ml_dw_scratch_floats(W, OH, OW, KH, KW, SH, SW,
                                                                     PL, DH, DW);
        ml_parallel_for((C * j.nb + j.chunk - 1) / j.chunk, ml_dw_task, &j, scratch, bytes);
        return;
    }
#endif
    j.units(&j, 0, C * j.nb, scratch);
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
