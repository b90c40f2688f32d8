/* lstm.h -- the recurrences of ONNX LSTM and GRU (monolib kernel library).
 *
 * The input projection gx = X W^T + biases of all steps is one GEMM per direction done
 * beforehand (gemm.h); this kernel runs the steps. LSTM gate order is ONNX's i, o, f, c:
 *   i = sigmoid(gi + Pi*c), f = sigmoid(gf + Pf*c), c' = f*c + i*tanh(gc),
 *   o = sigmoid(go + Po*c'), h' = o*tanh(c')
 * GRU (linear_before_reset = 1) z, r, h: h~ = tanh(xh + r*(h Rh^T + Rbh)),
 *   h' = (1 - z) h~ + z h. The optional clip bounds every activation input but LSTM's last.
 *
 * R (ng gates: 4 or 3) is packed (at compile time when constant, else by ml_rnn_pack_r)
 * in blocks of ML_LSTM_U hidden units: the block of units u0..u0+w (w = min(U, H - u0))
 * sits at rp + u0*ng*H as [H][ng][w], the rows of its gates' columns one after the other.
 * A block is then one contiguous stream per step (R^T's rows are ng*H floats apart: 4 KB
 * at H = 256, a page per row, that the prefetchers do not follow), its gate sums stay in
 * registers, and the update of its units follows at once. A block owns its units' c and
 * h', so a step splits over threads by blocks with each unit computed as on one thread
 * (bit-identical at any thread count).
 */
#ifndef MONOLIB_LSTM_H
#define MONOLIB_LSTM_H
/* gcc warns about loops it proves dead after inlining constant shapes (a known false
 * positive); keep the generated build quiet. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
#endif
#include <math.h> /* ml_tanhf, ml_expf: vmath.h, before this header */
#include <stdint.h>
#include <string.h>

/* Hidden units per packed block (rnn.py's pack_recurrent packs constant R with the same
 * number): 4 gates x 16 units = 64 columns, 4 AVX-512 vectors. */
#define ML_LSTM_U 16
/* Batch rows sharing one pass over a block (the R stream is read once for them): 4 x 4
 * accumulators with AVX-512's 32 registers, 1 with fewer. */
#if ML_VW >= 16
#define ML_LSTM_MB 4
#else
#define ML_LSTM_MB 1
#endif

static inline float ml_sigmoidf(float x) { return 1.0f / (1.0f + ml_expf(-x)); }

/* tanh: vmath.h's ml_tanhf (branch-free, it vectorises with the cell's other loops;
 * libm's tanhf is a call per element: it took half of a step at H = 256). */

static inline float ml_clipf(float x, float clip) {
    if (clip > 0.0f) x = x < -clip ? -clip : (x > clip ? clip : x);
    return x;
}

/* rp = R [ng*H][H] (one direction, ONNX layout, ng gates) packed in blocks of
 * ML_LSTM_U units: the block of units u0..u0+w at rp + u0*ng*H as [H][ng][w]. */
ML_UNUSED static void ml_rnn_pack_r(int64_t H, int64_t ng, const float* restrict r,
                                    float* restrict rp) {
    for (int64_t u0 = 0; u0 < H; u0 += ML_LSTM_U) {
        int64_t w = H - u0 < ML_LSTM_U ? H - u0 : ML_LSTM_U;
        float* d = rp + u0 * ng * H;
        for (int64_t k = 0; k < H; ++k)
            for (int64_t q = 0; q < ng; ++q)
                for (int64_t u = 0; u < w; ++u)
                    d[(k * ng + q) * w + u] = r[(q * H + u0 + u) * H + k];
    }
}

/* Kinds of block pass (a constant after inlining): 4 an LSTM step; 3 a GRU step with
 * linear_before_reset; 2 and 1 the two passes of a GRU step without it (z and r, then the
 * candidate from (r*h) Rh^T, which needs every unit's r first). G: the op's gates (a row
 * of gx holds G*H, a direction's R G*H*H); NG: gates a packed row of the pass holds, Q0
 * its first. Without linear_before_reset R is packed as two parts, z and r (2 gates a
 * row) then h (1), so each pass streams its own part. */
#define ML_RNN_G(kind) ((kind) == 4 ? 4 : 3)
#define ML_RNN_NG(kind) (kind)
#define ML_RNN_Q0(kind) ((kind) == 1 ? 2 : 0)

/* The start of gate q's sums for row b at unit u: the input projection, but the
 * candidate gate of a GRU with linear_before_reset (kind 3, q 2), which starts at Rbh
 * (bn, or 0) as the reset gate scales the recurrent part with its bias. */
ML_INLINE float ml_rnn_init(int kind, int64_t q, int64_t b, int64_t H, const float* gx,
                            const float* bn, int64_t u) {
    if (kind == 3 && q == 2) return bn ? bn[u] : 0.0f;
    return gx[b * ML_RNN_G(kind) * H + q * H + u];
}

/* g[b][q - q0][u] = start + sum_k h[b][k] * R[q*H + u0 + u][k] for nb rows and the
 * kind's gates (constants after inlining) of a full block; r: the block, [H][ng][U]. */
ML_INLINE void ml_rnn_acc(int nb, int kind, int64_t H, const float* restrict h,
                          const float* restrict r, const float* restrict gx,
                          const float* restrict bn, int64_t u0, float* restrict g) {
    enum { NV = 4 * ML_LSTM_U / ML_VW };
    const int ng = ML_RNN_NG(kind), q0 = ML_RNN_Q0(kind), G = ML_RNN_G(kind);
    const int nv = ng * ML_LSTM_U / ML_VW;
    /* fewer than 4 accumulators (a GRU pass of 1 or 2 gates, one row) leave the FMA's
     * latency exposed: then P partial sums over interleaved k, added at the end */
    const int chains = nb * nv, P = chains >= 4 ? 1 : (chains >= 2 ? 2 : 4);
    ml_vf acc[ML_LSTM_MB][NV], part[3][ML_LSTM_MB][NV];
    for (int b = 0; b < nb; ++b)
        for (int v = 0; v < nv; ++v) {
            int64_t col = v * ML_VW, q = q0 + col / ML_LSTM_U;
            if (kind == 3 && q == 2)
                acc[b][v] = bn ? *(const ml_vf*)(bn + u0 + col % ML_LSTM_U) : (ml_vf){0};
            else
                acc[b][v] = *(const ml_vf*)(gx + b * G * H + q * H + u0 + col % ML_LSTM_U);
            for (int j = 0; j + 1 < P; ++j) part[j][b][v] = (ml_vf){0};
        }
    int64_t k0 = 0;
    if (P > 1)
        for (; k0 + P <= H; k0 += P)
            for (int j = 0; j < P; ++j) {
                const float* rk = r + (k0 + j) * ng * ML_LSTM_U;
                for (int b = 0; b < nb; ++b) {
                    ml_vf hk = h[b * H + k0 + j] - (ml_vf){0};
                    for (int v = 0; v < nv; ++v) {
                        ml_vf* a = j == 0 ? &acc[b][v] : &part[j - 1][b][v];
                        *a += hk * *(const ml_vf*)(rk + v * ML_VW);
                    }
                }
            }
    for (int64_t k = k0; k < H; ++k) {
        const float* rk = r + k * ng * ML_LSTM_U;
        ml_vf rv[NV];
        for (int v = 0; v < nv; ++v) {
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
            for (int v = 0; v < nv; ++v) acc[b][v] += hk * rv[v];
        }
    }
    for (int b = 0; b < nb; ++b)
        for (int v = 0; v < nv; ++v) {
            for (int j = 0; j + 1 < P; ++j) acc[b][v] += part[j][b][v];
            *(ml_vf*)(g + b * 4 * ML_LSTM_U + v * ML_VW) = acc[b][v];
        }
}

/* The same for a last block of w < ML_LSTM_U units (r: [H][ng][w]). */
ML_INLINE void ml_rnn_acc_tail(int nb, int kind, int64_t H, int64_t w, const float* restrict h,
                               const float* restrict r, const float* restrict gx,
                               const float* restrict bn, int64_t u0, float* restrict g) {
    const int ng = ML_RNN_NG(kind), q0 = ML_RNN_Q0(kind), q1 = q0 + ng;
    for (int b = 0; b < nb; ++b)
        for (int64_t q = q0; q < q1; ++q)
            for (int64_t u = 0; u < w; ++u)
                g[(b * 4 + q - q0) * ML_LSTM_U + u] = ml_rnn_init(kind, q, b, H, gx, bn, u0 + u);
    for (int64_t k = 0; k < H; ++k)
        for (int b = 0; b < nb; ++b) {
            float hk = h[b * H + k];
            for (int64_t q = q0; q < q1; ++q)
                for (int64_t u = 0; u < w; ++u)
                    g[(b * 4 + q - q0) * ML_LSTM_U + u] += hk * r[(k * ng + q - q0) * w + u];
        }
}

/* The LSTM cell update of w units from their gate sums g [4][U]: c (in place) and h'
 * (hn); p: the peepholes at the block's first unit (i at p, o at p+H, f at p+2H) or NULL. */
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

/* The GRU (linear_before_reset) update of w units: z, r from g's first two gates, the
 * candidate tanh(xh + r * (h Rh^T + Rbh)) from gxh (the input projection) and g's third,
 * h' = (1 - z) h~ + z h. */
static inline void ml_gru_cell(int64_t w, float clip, const float* restrict g,
                               const float* restrict gxh, const float* restrict h,
                               float* restrict hn) {
    const float *gz = g, *gr = g + ML_LSTM_U, *gh = g + 2 * ML_LSTM_U;
    for (int64_t u = 0; u < w; ++u) {
        float z = ml_sigmoidf(ml_clipf(gz[u], clip));
        float rg = ml_sigmoidf(ml_clipf(gr[u], clip));
        float hh = ml_tanhf(ml_clipf(gxh[u] + rg * gh[u], clip));
        hn[u] = (1 - z) * hh + z * h[u];
    }
}

/* A GRU step without linear_before_reset, first pass: z, and r*h for the second. */
static inline void ml_gru_zr(int64_t w, float clip, const float* restrict g,
                             const float* restrict h, float* restrict z, float* restrict rh) {
    for (int64_t u = 0; u < w; ++u) {
        z[u] = ml_sigmoidf(ml_clipf(g[u], clip));
        rh[u] = ml_sigmoidf(ml_clipf(g[ML_LSTM_U + u], clip)) * h[u];
    }
}

/* Its second pass: g holds xh + Wbh + Rbh + (r*h) Rh^T; h' = (1 - z) tanh(g) + z h. */
static inline void ml_gru_update(int64_t w, float clip, const float* restrict g,
                                 const float* restrict z, const float* restrict h,
                                 float* restrict hn) {
    for (int64_t u = 0; u < w; ++u)
        hn[u] = (1 - z[u]) * ml_tanhf(ml_clipf(g[u], clip)) + z[u] * h[u];
}

/* One step of one direction: gx [B][ng*H] (this step's projections), h [B][H] the state
 * read, hn [B][H] the state written, c [B][H] (LSTM) updated in place. */
typedef struct {
    int64_t B, H, per; /* per: units of one task (a multiple of ML_LSTM_U) */
    const float* rp;
    const float* gx;
    const float* p;  /* LSTM peepholes or NULL */
    const float* bn; /* GRU's Rbh or NULL */
    const float* h;
    float* hn;
    float* c;
    float* z;  /* GRU without linear_before_reset: z and r*h [B][H] between its passes */
    float* rh;
    float clip;
    int odd; /* the step's parity */
} ml_rnn_step_t;

ML_INLINE void ml_rnn_units(int kind, const ml_rnn_step_t* s, int64_t u0, int64_t u1) {
    const int ng = ML_RNN_NG(kind), G = ML_RNN_G(kind);
    int64_t H = s->H, nblk = (u1 - u0 + ML_LSTM_U - 1) / ML_LSTM_U;
    float g[ML_LSTM_MB * 4 * ML_LSTM_U] __attribute__((aligned(64)));
    for (int64_t i = 0; i < nblk; ++i) {
        /* every other step walks the blocks backwards: the blocks read last are then
         * read first, while they are still in L2 (R of H = 256 is 1 MB, an L2's size:
         * read in one order every step, the cache keeps none of it) */
        int64_t u = u0 + (s->odd ? nblk - 1 - i : i) * ML_LSTM_U;
        int64_t w = H - u < ML_LSTM_U ? H - u : ML_LSTM_U;
        const float* r = s->rp + (kind == 1 ? 2 * H * H : 0) + u * ng * H;
        for (int64_t b = 0; b < s->B; b += ML_LSTM_MB) {
            int nb = s->B - b < ML_LSTM_MB ? (int)(s->B - b) : ML_LSTM_MB;
            const float* h = (kind == 1 ? s->rh : s->h) + b * H;
            const float* gx = s->gx + b * G * H;
            if (w < ML_LSTM_U) ml_rnn_acc_tail(nb, kind, H, w, h, r, gx, s->bn, u, g);
#if ML_LSTM_MB == 4
            else if (nb == 4) ml_rnn_acc(4, kind, H, h, r, gx, s->bn, u, g);
            else if (nb == 3) ml_rnn_acc(3, kind, H, h, r, gx, s->bn, u, g);
            else if (nb == 2) ml_rnn_acc(2, kind, H, h, r, gx, s->bn, u, g);
#endif
            else ml_rnn_acc(1, kind, H, h, r, gx, s->bn, u, g);
            int64_t wc = w == ML_LSTM_U ? ML_LSTM_U : w; /* a constant for full blocks */
            for (int i = 0; i < nb; ++i) {
                int64_t row = (b + i) * H + u;
                const float* gi = g + i * 4 * ML_LSTM_U;
                if (kind == 4)
                    ml_lstm_cell(wc, H, s->clip, gi, s->p ? s->p + u : 0, s->c + row,
                                 s->hn + row);
                else if (kind == 3)
                    ml_gru_cell(wc, s->clip, gi, gx + i * 3 * H + 2 * H + u, s->h + row,
                                s->hn + row);
                else if (kind == 2)
                    ml_gru_zr(wc, s->clip, gi, s->h + row, s->z + row, s->rh + row);
                else
                    ml_gru_update(wc, s->clip, gi, s->z + row, s->h + row, s->hn + row);
            }
        }
    }
}

/* The block loop once per kind (noinline: every caller shares one copy, compile time). */
#define ML_RNN_KIND_FN(name, kind)                                                        \
    __attribute__((noinline)) ML_UNUSED static void name(const ml_rnn_step_t* s,         \
                                                         int64_t u0, int64_t u1) {        \
        ml_rnn_units(kind, s, u0, u1);                                                    \
    }
ML_RNN_KIND_FN(ml_lstm_units, 4)
ML_RNN_KIND_FN(ml_gru_units, 3)
ML_RNN_KIND_FN(ml_gru0a_units, 2)
ML_RNN_KIND_FN(ml_gru0b_units, 1)

/* kind is a constant wherever this is used, so only its function is referenced */
#define ML_RNN_UNITS(kind, s, u0, u1)                                                     \
    ((kind) == 4 ? ml_lstm_units((s), (u0), (u1))                                          \
     : (kind) == 3 ? ml_gru_units((s), (u0), (u1))                                         \
     : (kind) == 2 ? ml_gru0a_units((s), (u0), (u1)) : ml_gru0b_units((s), (u0), (u1)))

#define ML_RNN_STEP_TASK(name, kind)                                                      \
    ML_UNUSED static void name(void* vctx, int64_t task, void* scratch) {                 \
        (void)scratch;                                                                    \
        const ml_rnn_step_t* s = (const ml_rnn_step_t*)vctx;                              \
        int64_t u0 = task * s->per, u1 = u0 + s->per < s->H ? u0 + s->per : s->H;        \
        if (u0 < u1) ML_RNN_UNITS(kind, s, u0, u1);                                       \
    }
ML_RNN_STEP_TASK(ml_lstm_step_task, 4)
ML_RNN_STEP_TASK(ml_gru_step_task, 3)
ML_RNN_STEP_TASK(ml_gru0a_step_task, 2)
ML_RNN_STEP_TASK(ml_gru0b_step_task, 1)
#define ML_RNN_STEP_TASK_OF(kind)                                                         \
    ((kind) == 4 ? ml_lstm_step_task                                                       \
     : (kind) == 3 ? ml_gru_step_task : (kind) == 2 ? ml_gru0a_step_task : ml_gru0b_step_task)

/* Multiply-adds of one step (B x H x ng*H) from which a step is split over the pool by
 * blocks of units, and of a whole bidirectional op (T x B x H x ng*H) from which its two
 * directions run side by side. The pool's caller claims every task a late worker has not
 * started, so a busy second core costs little; a step split costs a handoff per step,
 * the directions one per call. Measured on a 2-core Zen 4 (lstm.h alone, T 24, B 1, min
 * of 1500 runs, the other core free or busy with other processes): a step of H 64 (16K)
 * 1.24x faster split when free, 0.85x when busy; H 96 0.92x busy; H 128 (64K) 1.09x free,
 * 1.00x busy; directions of 32K (T 8, H 32, 4 us) 1.86x free, 0.98x busy. In a whole
 * model a 64K step split lost: Silero's sequence model (H 128, T 32, after 0.2 ms of
 * serial convs, so the worker is often asleep and each step pays a wake-up) ran 0.86 ms
 * at 1 thread, 1.32 at 2 with H 128 split, 0.73 unsplit; H 256 (256K) still splits. */
#ifndef ML_LSTM_PAR_MIN
#define ML_LSTM_PAR_MIN (1 << 17)
#endif
#ifndef ML_RNN_DIR_PAR_MIN
#define ML_RNN_DIR_PAR_MIN (1 << 15)
#endif

/* One pass of kind over all units: split into ntask ranges, or on this thread. */
#define ML_RNN_PASS(kind, s, ntask)                                                      \
    do {                                                                                  \
        if ((ntask) > 1) ml_parallel_for((ntask), ML_RNN_STEP_TASK_OF(kind), (s), 0, 0);  \
        else ML_RNN_UNITS(kind, (s), 0, (s)->H);                                          \
    } while (0)

/* One direction over T steps of B rows. gx: step t's [B][ng*H] at gx + t*gx_tstride;
 * rp: packed R; p: [3H] LSTM peepholes (i, o, f) or NULL; bn: GRU's Rbh [H] or NULL; h0,
 * c0: [B][H] or NULL (zeros); y: step t's [B][H] at y + t*y_tstride, or NULL; hout, cout
 * (LSTM): [B][H], the final state; hbuf: 4*B*H floats of scratch. par: split large steps
 * over the pool. kind: 4 LSTM, 3 GRU with linear_before_reset, 2 GRU without. */
ML_INLINE void ml_rnn_dir(int kind, int64_t T, int64_t B, int64_t H, int reverse,
                          const float* gx, int64_t gx_tstride, const float* rp,
                          const float* p, const float* bn, const float* h0, const float* c0,
                          float clip, float* y, int64_t y_tstride, float* hout, float* cout,
                          float* hbuf, int par) {
    const int ng = ML_RNN_G(kind);
    float *h = hbuf, *hn = hbuf + B * H;
    for (int64_t i = 0; i < B * H; ++i) h[i] = h0 ? h0[i] : 0.0f;
    if (cout)
        for (int64_t i = 0; i < B * H; ++i) cout[i] = c0 ? c0[i] : 0.0f;
    int32_t nt = par ? ml_num_threads() : 1;
    int64_t ntask = 1, per = H;
    if (nt > 1 && B * H * ng * H >= ML_LSTM_PAR_MIN) {
        int64_t nblk = (H + ML_LSTM_U - 1) / ML_LSTM_U;
        per = (nblk + nt - 1) / nt * ML_LSTM_U;
        ntask = (H + per - 1) / per;
    }
    ml_rnn_step_t s = {B,    H,    per,  rp,   0, p, bn, 0, 0, cout, hbuf + 2 * B * H,
                       hbuf + 3 * B * H, clip, 0};
    for (int64_t st = 0; st < T; ++st) {
        int64_t t = reverse ? T - 1 - st : st;
        s.gx = gx + t * gx_tstride;
        s.h = h;
        s.hn = hn;
        s.odd = (int)(st & 1);
        if (kind == 2) { /* both passes, every unit's r*h between them */
            ML_RNN_PASS(2, &s, ntask);
            ML_RNN_PASS(1, &s, ntask);
        } else {
            ML_RNN_PASS(kind, &s, ntask);
        }
        if (y) memcpy(y + t * y_tstride, hn, B * H * sizeof(float));
        float* tmp = h;
        h = hn;
        hn = tmp;
    }
    memcpy(hout, h, B * H * sizeof(float));
}

/* Every direction of one LSTM (ng 4) or GRU (ng 3): the per-direction inputs are D slices
 * one after another (gx: D x [T][B][ng*H], rp: D x ng*H*H, p: D x 3H, bn: D x H, h0, c0,
 * hout, cout: D x [B][H], hbuf: D x 4*B*H) and Y is [T][D][B][H]. Direction 1 (and
 * direction 0 when reverse) runs backwards. seq (sequence_lens, [B], or NULL: all T):
 * row b runs its first seq[b] steps alone (a reverse direction from step seq[b] - 1), Y
 * is 0 past them and Y_h, Y_c hold the state after them (ONNX Runtime's semantics).
 * Threads: at 2, two directions run side by side (one handoff) when the work is worth a
 * round trip; at more, large steps of both run in lockstep split by unit blocks; one
 * direction splits its large steps by unit blocks. */
typedef struct {
    int64_t D, T, B, H;
    int reverse;
    const float *gx, *rp, *p, *bn, *h0, *c0;
    const int32_t* seq;
    float clip;
    float *y, *hout, *cout, *hbuf;
    int par;
} ml_rnn_t;

/* Direction d's slices of a's inputs and outputs. */
typedef struct {
    const float *gx, *rp, *p, *bn, *h0, *c0;
    float *y, *hout, *cout, *hbuf;
    int rev;
} ml_rnn_slices_t;

ML_INLINE ml_rnn_slices_t ml_rnn_slices(int ng, const ml_rnn_t* a, int64_t d) {
    int64_t H = a->H, BH = a->B * H;
    ml_rnn_slices_t v = {a->gx + d * a->T * BH * ng, a->rp + d * H * ng * H,
                         a->p ? a->p + d * 3 * H : 0, a->bn ? a->bn + d * H : 0,
                         a->h0 ? a->h0 + d * BH : 0, a->c0 ? a->c0 + d * BH : 0,
                         a->y ? a->y + d * BH : 0, a->hout + d * BH,
                         a->cout ? a->cout + d * BH : 0, a->hbuf + d * 4 * BH,
                         a->reverse || d == 1};
    return v;
}

ML_INLINE void ml_rnn_dir_of(int kind, const ml_rnn_t* a, int64_t d) {
    const int ng = ML_RNN_G(kind);
    int64_t T = a->T, B = a->B, H = a->H, BH = B * H, ys = a->D * BH;
    ml_rnn_slices_t v = ml_rnn_slices(ng, a, d);
    if (!a->seq) {
        ml_rnn_dir(kind, T, B, H, v.rev, v.gx, BH * ng, v.rp, v.p, v.bn, v.h0, v.c0, a->clip,
                   v.y, ys, v.hout, v.cout, v.hbuf, a->par);
        return;
    }
    for (int64_t b = 0; b < B; ++b) { /* ragged: each row alone, over its own steps */
        int64_t n = a->seq[b] < 0 ? 0 : (a->seq[b] > T ? T : a->seq[b]);
        ml_rnn_dir(kind, n, 1, H, v.rev, v.gx + b * ng * H, BH * ng, v.rp, v.p, v.bn,
                   v.h0 ? v.h0 + b * H : 0, v.c0 ? v.c0 + b * H : 0, a->clip,
                   v.y ? v.y + b * H : 0, ys, v.hout + b * H, v.cout ? v.cout + b * H : 0,
                   v.hbuf, a->par);
        if (v.y)
            for (int64_t t = n; t < T; ++t) memset(v.y + t * ys + b * H, 0, H * sizeof(float));
    }
}

#define ML_RNN_DIR_FNS(dir_of, dir_task, kind)                                            \
    __attribute__((noinline)) ML_UNUSED static void dir_of(const ml_rnn_t* a, int64_t d) { \
        ml_rnn_dir_of(kind, a, d);                                                        \
    }                                                                                     \
    ML_UNUSED static void dir_task(void* a, int64_t d, void* scratch) {                   \
        (void)scratch;                                                                    \
        dir_of((const ml_rnn_t*)a, d);                                                    \
    }
ML_RNN_DIR_FNS(ml_lstm_dir_of, ml_lstm_dir_task, 4)
ML_RNN_DIR_FNS(ml_gru_dir_of, ml_gru_dir_task, 3)
ML_RNN_DIR_FNS(ml_gru0_dir_of, ml_gru0_dir_task, 2)

/* Both directions' steps st together, as nper unit ranges each. */
typedef struct {
    ml_rnn_step_t s[2];
    int64_t nper;
} ml_rnn_step2_t;

#define ML_RNN_STEP2_TASK(name, kind)                                                     \
    ML_UNUSED static void name(void* vctx, int64_t task, void* scratch) {                 \
        (void)scratch;                                                                    \
        const ml_rnn_step2_t* c = (const ml_rnn_step2_t*)vctx;                            \
        const ml_rnn_step_t* s = &c->s[task / c->nper];                                   \
        int64_t u0 = task % c->nper * s->per;                                             \
        int64_t u1 = u0 + s->per < s->H ? u0 + s->per : s->H;                             \
        if (u0 < u1) ML_RNN_UNITS(kind, s, u0, u1);                                       \
    }
ML_RNN_STEP2_TASK(ml_lstm_step2_task, 4)
ML_RNN_STEP2_TASK(ml_gru_step2_task, 3)

/* Two directions in lockstep (LSTM, GRU with linear_before_reset), each step one pool
 * job of both directions' unit ranges: with more threads than directions (at 2 the
 * directions side by side hand off once, not once a step: on 2 cores with other
 * processes running, a step's handoff waits for a descheduled worker more often). */
ML_INLINE void ml_rnn_lockstep(int kind, const ml_rnn_t* a, int32_t nt) {
    const int ng = ML_RNN_G(kind);
    int64_t T = a->T, B = a->B, H = a->H, BH = B * H, ys = a->D * BH;
    int64_t nblk = (H + ML_LSTM_U - 1) / ML_LSTM_U, per = (nblk + nt - 1) / nt * ML_LSTM_U;
    ml_rnn_step2_t c;
    ml_rnn_slices_t v[2];
    float *h[2], *hn[2];
    c.nper = (H + per - 1) / per;
    for (int d = 0; d < 2; ++d) {
        v[d] = ml_rnn_slices(ng, a, d);
        h[d] = v[d].hbuf;
        hn[d] = v[d].hbuf + BH;
        for (int64_t i = 0; i < BH; ++i) h[d][i] = v[d].h0 ? v[d].h0[i] : 0.0f;
        if (v[d].cout)
            for (int64_t i = 0; i < BH; ++i) v[d].cout[i] = v[d].c0 ? v[d].c0[i] : 0.0f;
        ml_rnn_step_t s = {B, H, per, v[d].rp, 0, v[d].p, v[d].bn, 0, 0, v[d].cout, 0, 0,
                           a->clip, 0};
        c.s[d] = s;
    }
    for (int64_t st = 0; st < T; ++st) {
        int64_t t[2];
        for (int d = 0; d < 2; ++d) {
            t[d] = v[d].rev ? T - 1 - st : st;
            c.s[d].gx = v[d].gx + t[d] * BH * ng;
            c.s[d].h = h[d];
            c.s[d].hn = hn[d];
            c.s[d].odd = (int)(st & 1);
        }
        ml_parallel_for(2 * c.nper, kind == 4 ? ml_lstm_step2_task : ml_gru_step2_task, &c, 0, 0);
        for (int d = 0; d < 2; ++d) {
            if (v[d].y) memcpy(v[d].y + t[d] * ys, hn[d], BH * sizeof(float));
            float* tmp = h[d];
            h[d] = hn[d];
            hn[d] = tmp;
        }
    }
    for (int d = 0; d < 2; ++d) memcpy(v[d].hout, h[d], BH * sizeof(float));
}

__attribute__((noinline)) ML_UNUSED static void ml_lstm_lockstep(const ml_rnn_t* a, int32_t nt) {
    ml_rnn_lockstep(4, a, nt);
}

__attribute__((noinline)) ML_UNUSED static void ml_gru_lockstep(const ml_rnn_t* a, int32_t nt) {
    ml_rnn_lockstep(3, a, nt);
}

ML_INLINE void ml_rnn(int kind, ml_rnn_t* a) {
    const int ng = ML_RNN_G(kind);
    int32_t nt = ml_num_threads();
    if (a->D == 2 && nt > 1) {
        if (kind != 2 && nt > 2 && !a->seq && 2 * a->B * a->H * ng * a->H >= ML_LSTM_PAR_MIN) {
            if (kind == 4) ml_lstm_lockstep(a, nt);
            else ml_gru_lockstep(a, nt);
            return;
        }
        if (a->T * a->B * a->H * ng * a->H >= ML_RNN_DIR_PAR_MIN) {
            a->par = 0;
            ml_parallel_for(2, kind == 4 ? ml_lstm_dir_task
                               : kind == 3 ? ml_gru_dir_task : ml_gru0_dir_task, a, 0, 0);
            return;
        }
    }
    for (int64_t d = 0; d < a->D; ++d) {
        if (kind == 4) ml_lstm_dir_of(a, d);
        else if (kind == 3) ml_gru_dir_of(a, d);
        else ml_gru0_dir_of(a, d);
    }
}

ML_UNUSED static void ml_lstm(int64_t D, int64_t T, int64_t B, int64_t H, int reverse,
                              const float* gx, const float* rp, const float* p,
                              const int32_t* seq, const float* h0, const float* c0, float clip,
                              float* y, float* hout, float* cout, float* hbuf) {
    ml_rnn_t a = {D, T, B, H, reverse, gx, rp, p, 0, h0, c0, seq, clip, y, hout, cout, hbuf, 1};
    ml_rnn(4, &a);
}

/* GRU (gates z, r, h) with linear_before_reset = 1: bn is Rbh per direction or NULL; the
 * projections gx hold Wb + Rb of z and r and Wbh of h. */
ML_UNUSED static void ml_gru(int64_t D, int64_t T, int64_t B, int64_t H, int reverse,
                             const float* gx, const float* rp, const float* bn,
                             const int32_t* seq, const float* h0, float clip, float* y,
                             float* hout, float* hbuf) {
    ml_rnn_t a = {D, T, B, H, reverse, gx, rp, 0, bn, h0, 0, seq, clip, y, hout, 0, hbuf, 1};
    ml_rnn(3, &a);
}

/* GRU with linear_before_reset = 0: gx holds every bias (Wb + Rb); each step is two
 * passes over the units (z and r*h, then the candidate from (r*h) Rh^T); rp per
 * direction: z and r packed 2 gates a row, then h packed alone. */
ML_UNUSED static void ml_gru0(int64_t D, int64_t T, int64_t B, int64_t H, int reverse,
                              const float* gx, const float* rp, const int32_t* seq,
                              const float* h0, float clip, float* y, float* hout,
                              float* hbuf) {
    ml_rnn_t a = {D, T, B, H, reverse, gx, rp, 0, 0, h0, 0, seq, clip, y, hout, 0, hbuf, 1};
    ml_rnn(2, &a);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_LSTM_H */
