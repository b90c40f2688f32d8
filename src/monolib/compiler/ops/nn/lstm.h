/* lstm.h -- the recurrence of an ONNX LSTM (monolib kernel library).
 *
 * The input projection gx = X W^T + Wb + Rb of all steps is one GEMM per direction done
 * beforehand (gemm.h); this kernel runs the steps. Gate order is ONNX's i, o, f, c:
 *   i = sigmoid(gi + Pi*c), f = sigmoid(gf + Pf*c), c' = f*c + i*tanh(gc),
 *   o = sigmoid(go + Po*c'), h' = o*tanh(c')
 * with the optional cell clip applied to every activation input but the last.
 *
 * R is packed (at compile time when constant, else by ml_lstm_pack_r) in blocks of
 * ML_LSTM_U hidden units: the block of units u0..u0+w (w = min(U, H - u0)) sits at
 * rp + u0*4H as [H][4][w], the rows of its 4 gates' columns one after the other. A block
 * is then one contiguous stream per step (R^T's rows are 4H floats apart: a 4 KB stride
 * at H = 256, a page per row, that the prefetchers do not follow), its 4 gate sums stay in
 * registers, and the cell update of its units follows at once. A block owns its units'
 * c and h', so a step splits over threads by blocks with each unit computed as on one
 * thread (bit-identical at any thread count).
 */
#ifndef MONOLIB_LSTM_H
#define MONOLIB_LSTM_H
/* gcc warns about loops it proves dead after inlining constant shapes (a known false
 * positive); keep the generated build quiet. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Hidden units per packed block (lstm.py packs constant R with the same number): 4 gates
 * x 16 units = 64 columns, 4 AVX-512 vectors. */
#define ML_LSTM_U 16
#define ML_LSTM_NV (4 * ML_LSTM_U / ML_VW)
/* Batch rows sharing one pass over a block (the R stream is read once for them): 4 x 4
 * accumulators with AVX-512's 32 registers, 1 with fewer. */
#if ML_VW >= 16
#define ML_LSTM_MB 4
#else
#define ML_LSTM_MB 1
#endif

static inline float ml_sigmoidf(float x) { return 1.0f / (1.0f + ml_expf(-x)); }

/* tanh as branch-free C that vectorises with the cell's other loops (libm's tanhf is a
 * call per element: it took half of a step at H = 256). |x| < 0.625: x + x^3 P(x^2), P a
 * least-squares fit of degree 4 (max error 0.9 ulp); beyond, 1 - 2 / (e^2|x| + 1) with
 * ml_expf (1.3 ulp). NaN stays NaN, +-inf gives +-1. */
static inline float ml_tanhf(float x) {
    float a = x < 0.0f ? -x : x, z = x * x;
    float p = -0.005691935773938894f;
    p = p * z + 0.02062624879181385f;
    p = p * z - 0.05373530462384224f;
    p = p * z + 0.13331380486488342f;
    p = p * z - 0.3333328068256378f;
    float small = x + x * z * p;
    float big = 1.0f - 2.0f / (ml_expf(2.0f * a) + 1.0f);
    big = x < 0.0f ? -big : big;
    return a < 0.625f ? small : big;
}

static inline float ml_clipf(float x, float clip) {
    if (clip > 0.0f) x = x < -clip ? -clip : (x > clip ? clip : x);
    return x;
}

/* rp = R [4H][H] (one direction, ONNX layout) packed in blocks of ML_LSTM_U units. */
ML_UNUSED static void ml_lstm_pack_r(int64_t H, const float* restrict r, float* restrict rp) {
    for (int64_t u0 = 0; u0 < H; u0 += ML_LSTM_U) {
        int64_t w = H - u0 < ML_LSTM_U ? H - u0 : ML_LSTM_U;
        float* d = rp + u0 * 4 * H;
        for (int64_t k = 0; k < H; ++k)
            for (int64_t q = 0; q < 4; ++q)
                for (int64_t u = 0; u < w; ++u) d[(k * 4 + q) * w + u] = r[(q * H + u0 + u) * H + k];
    }
}

/* g[b][q][u] = gx[b][q*H + u0 + u] + sum_k h[b][k] * R[q*H + u0 + u][k] for nb (constant
 * after inlining) rows of a full block; r: the block, [H][4][U]. */
ML_INLINE void ml_lstm_acc(int nb, int64_t H, const float* restrict h,
                           const float* restrict r, const float* restrict gx, int64_t u0,
                           float* restrict g) {
    ml_vf acc[ML_LSTM_MB][ML_LSTM_NV];
    for (int b = 0; b < nb; ++b)
        for (int v = 0; v < ML_LSTM_NV; ++v) {
            int64_t col = v * ML_VW;
            acc[b][v] = *(const ml_vf*)(gx + b * 4 * H + col / ML_LSTM_U * H + u0 +
                                        col % ML_LSTM_U);
        }
    for (int64_t k = 0; k < H; ++k) {
        const float* rk = r + k * 4 * ML_LSTM_U;
        ml_vf rv[ML_LSTM_NV];
        for (int v = 0; v < ML_LSTM_NV; ++v) {
            rv[v] = *(const ml_vf*)(rk + v * ML_VW);
#if defined(__AVX512F__) && defined(__GNUC__)
            /* keep R's vectors in registers for the rows: gcc would fold the load into
             * every row's FMA, and the loads, not the FMAs, then bound the loop (B = 4,
             * H = 192: 18% slower) */
            if (nb > 1) __asm__("" : "+v"(rv[v]));
#endif
        }
        for (int b = 0; b < nb; ++b) {
            ml_vf hk = h[b * H + k] - (ml_vf){0};
            for (int v = 0; v < ML_LSTM_NV; ++v) acc[b][v] += hk * rv[v];
        }
    }
    for (int b = 0; b < nb; ++b)
        for (int v = 0; v < ML_LSTM_NV; ++v)
            *(ml_vf*)(g + b * 4 * ML_LSTM_U + v * ML_VW) = acc[b][v];
}

/* The same for a last block of w < ML_LSTM_U units (r: [H][4][w]). */
static void ml_lstm_acc_tail(int nb, int64_t H, int64_t w, const float* restrict h,
                             const float* restrict r, const float* restrict gx, int64_t u0,
                             float* restrict g) {
    for (int b = 0; b < nb; ++b)
        for (int64_t q = 0; q < 4; ++q)
            for (int64_t u = 0; u < w; ++u)
                g[(b * 4 + q) * ML_LSTM_U + u] = gx[b * 4 * H + q * H + u0 + u];
    for (int64_t k = 0; k < H; ++k)
        for (int b = 0; b < nb; ++b) {
            float hk = h[b * H + k];
            for (int64_t q = 0; q < 4; ++q)
                for (int64_t u = 0; u < w; ++u)
                    g[(b * 4 + q) * ML_LSTM_U + u] += hk * r[(k * 4 + q) * w + u];
        }
}

/* The cell update of w units from their gate sums g [4][U]: c (in place) and h' (hn);
 * p: the peepholes at the block's first unit (i at p, o at p+H, f at p+2H) or NULL. */
static inline void ml_lstm_cell(int64_t w, int64_t H, float clip, const float* restrict g,
                                const float* restrict p, float* restrict c,
                                float* restrict hn) {
    const float *gi = g, *go = g + ML_LSTM_U, *gf = g + 2 * ML_LSTM_U, *gc = g + 3 * ML_LSTM_U;
    if (!p) {
        for (int64_t u = 0; u < w; ++u) {
            float cn = ml_sigmoidf(ml_clipf(gf[u], clip)) * c[u] +
                       ml_sigmoidf(ml_clipf(gi[u], clip)) * ml_tanhf(ml_clipf(gc[u], clip));
            c[u] = cn;
            hn[u] = ml_sigmoidf(ml_clipf(go[u], clip)) * ml_tanhf(cn);
        }
        return;
    }
    for (int64_t u = 0; u < w; ++u) {
        float cp = c[u];
        float ig = ml_sigmoidf(ml_clipf(gi[u] + p[u] * cp, clip));
        float fg = ml_sigmoidf(ml_clipf(gf[u] + p[2 * H + u] * cp, clip));
        float cn = fg * cp + ig * ml_tanhf(ml_clipf(gc[u], clip));
        float og = ml_sigmoidf(ml_clipf(go[u] + p[H + u] * cn, clip));
        c[u] = cn;
        hn[u] = og * ml_tanhf(cn);
    }
}

/* One step of one direction: gx [B][4H] (this step's projections), h [B][H] the state
 * read, hn [B][H] the state written, c [B][H] updated in place. */
typedef struct {
    int64_t B, H, per; /* per: units of one task (a multiple of ML_LSTM_U) */
    const float* rp;
    const float* gx;
    const float* p;
    const float* h;
    float* hn;
    float* c;
    float clip;
    int odd; /* the step's parity */
} ml_lstm_step_t;

static void ml_lstm_units(const ml_lstm_step_t* s, int64_t u0, int64_t u1) {
    int64_t H = s->H, nblk = (u1 - u0 + ML_LSTM_U - 1) / ML_LSTM_U;
    float g[ML_LSTM_MB * 4 * ML_LSTM_U] __attribute__((aligned(64)));
    for (int64_t i = 0; i < nblk; ++i) {
        /* every other step walks the blocks backwards: the blocks read last are then
         * read first, while they are still in L2 (R of H = 256 is 1 MB, an L2's size:
         * read in one order every step, the cache keeps none of it) */
        int64_t u = u0 + (s->odd ? nblk - 1 - i : i) * ML_LSTM_U;
        int64_t w = H - u < ML_LSTM_U ? H - u : ML_LSTM_U;
        const float* r = s->rp + u * 4 * H;
        for (int64_t b = 0; b < s->B; b += ML_LSTM_MB) {
            int nb = s->B - b < ML_LSTM_MB ? (int)(s->B - b) : ML_LSTM_MB;
            const float* h = s->h + b * H;
            const float* gx = s->gx + b * 4 * H;
            if (w < ML_LSTM_U) ml_lstm_acc_tail(nb, H, w, h, r, gx, u, g);
#if ML_LSTM_MB == 4
            else if (nb == 4) ml_lstm_acc(4, H, h, r, gx, u, g);
            else if (nb == 3) ml_lstm_acc(3, H, h, r, gx, u, g);
            else if (nb == 2) ml_lstm_acc(2, H, h, r, gx, u, g);
#endif
            else ml_lstm_acc(1, H, h, r, gx, u, g);
            for (int i = 0; i < nb; ++i)
                ml_lstm_cell(w == ML_LSTM_U ? ML_LSTM_U : w, H, s->clip, g + i * 4 * ML_LSTM_U, s->p ? s->p + u : 0,
                             s->c + (b + i) * H + u, s->hn + (b + i) * H + u);
        }
    }
}

static void ml_lstm_step_task(void* vctx, int64_t task, void* scratch) {
    (void)scratch;
    const ml_lstm_step_t* s = (const ml_lstm_step_t*)vctx;
    int64_t u0 = task * s->per, u1 = u0 + s->per < s->H ? u0 + s->per : s->H;
    if (u0 < u1) ml_lstm_units(s, u0, u1);
}

/* Multiply-adds of one step (B x H x 4H) from which a step is split over the pool by
 * blocks of units. Below it one thread is faster: a pool round trip per step costs a few
 * microseconds. Measured on a 2-core EPYC (Zen 4): see lstm.py's module docstring. */
#ifndef ML_LSTM_PAR_MIN
#define ML_LSTM_PAR_MIN (1 << 17)
#endif

/* One direction over T steps. gx: [T][B][4H]; rp: packed R; p: [3H] peepholes (i, o, f)
 * or NULL; h0, c0: [B][H] or NULL (zeros); y: step t's [B][H] at y + t*y_tstride, or
 * NULL; hout, cout: [B][H], the final state; hbuf: 2*B*H floats of scratch. par: split
 * large steps over the pool. */
static void ml_lstm_dir(int64_t T, int64_t B, int64_t H, int reverse, const float* gx,
                        const float* rp, const float* p, const float* h0, const float* c0,
                        float clip, float* y, int64_t y_tstride, float* hout, float* cout,
                        float* hbuf, int par) {
    float *h = hbuf, *hn = hbuf + B * H;
    for (int64_t i = 0; i < B * H; ++i) {
        h[i] = h0 ? h0[i] : 0.0f;
        cout[i] = c0 ? c0[i] : 0.0f;
    }
    int32_t nt = par ? ml_num_threads() : 1;
    int64_t ntask = 1, per = H;
    if (nt > 1 && B * H * 4 * H >= ML_LSTM_PAR_MIN) {
        int64_t nblk = (H + ML_LSTM_U - 1) / ML_LSTM_U;
        per = (nblk + nt - 1) / nt * ML_LSTM_U;
        ntask = (H + per - 1) / per;
    }
    ml_lstm_step_t s = {B, H, per, rp, 0, p, 0, 0, cout, clip, 0};
    for (int64_t st = 0; st < T; ++st) {
        int64_t t = reverse ? T - 1 - st : st;
        s.gx = gx + t * B * 4 * H;
        s.h = h;
        s.hn = hn;
        s.odd = (int)(st & 1);
        if (ntask > 1) ml_parallel_for(ntask, ml_lstm_step_task, &s, 0, 0);
        else ml_lstm_units(&s, 0, H);
        if (y) memcpy(y + t * y_tstride, hn, B * H * sizeof(float));
        float* tmp = h;
        h = hn;
        hn = tmp;
    }
    memcpy(hout, h, B * H * sizeof(float));
}

/* Every direction of one LSTM: the per-direction inputs are D slices one after another
 * (gx: D x [T][B][4H], rp: D x H*4H, p: D x 3H, h0, c0, hout, cout: D x [B][H], hbuf: D x
 * 2*B*H) and Y is [T][D][B][H]. Direction 1 (and direction 0 when reverse) runs
 * backwards. Two directions run side by side on two threads (no per-step handoff)
 * when the pool has them and the work is worth a round trip. */
typedef struct {
    int64_t D, T, B, H;
    int reverse;
    const float *gx, *rp, *p, *h0, *c0;
    float clip;
    float *y, *hout, *cout, *hbuf;
    int par;
} ml_lstm_t;

static void ml_lstm_dir_task(void* vctx, int64_t d, void* scratch) {
    (void)scratch;
    const ml_lstm_t* a = (const ml_lstm_t*)vctx;
    int64_t B = a->B, H = a->H, BH = B * H;
    ml_lstm_dir(a->T, B, H, a->reverse || d == 1, a->gx + d * a->T * BH * 4, a->rp + d * H * 4 * H,
                a->p ? a->p + d * 3 * H : 0, a->h0 ? a->h0 + d * BH : 0,
                a->c0 ? a->c0 + d * BH : 0, a->clip, a->y ? a->y + d * BH : 0,
                a->D * BH, a->hout + d * BH, a->cout + d * BH,
                a->hbuf + d * 2 * BH, a->par);
}

ML_UNUSED static void ml_lstm(int64_t D, int64_t T, int64_t B, int64_t H, int reverse,
                              const float* gx, const float* rp, const float* p,
                              const float* h0, const float* c0, float clip, float* y,
                              float* hout, float* cout, float* hbuf) {
    ml_lstm_t a = {D, T, B, H, reverse, gx, rp, p, h0, c0, clip, y, hout, cout, hbuf, 1};
    if (D == 2 && ml_num_threads() > 1 && T * B * H * 4 * H >= ML_LSTM_PAR_MIN) {
        a.par = 0;
        ml_parallel_for(2, ml_lstm_dir_task, &a, 0, 0);
        return;
    }
    for (int64_t d = 0; d < D; ++d) ml_lstm_dir_task(&a, d, 0);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_LSTM_H */
