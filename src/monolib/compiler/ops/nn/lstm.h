/* lstm.h -- the recurrence of an ONNX LSTM, one direction (monolib kernel library).
 *
 * The input projection gx = X W^T + Wb + Rb for all steps is one GEMM done beforehand
 * (gemm.h); this kernel runs the steps. Gate order is ONNX's i, o, f, c:
 *   i = sigmoid(gi + Pi*c), f = sigmoid(gf + Pf*c), c' = f*c + i*tanh(gc),
 *   o = sigmoid(go + Po*c'), h' = o*tanh(c')
 * with the optional cell clip applied to every activation input. R is given transposed
 * ([H][4H]) so the recurrent product is an axpy over 4H that vectorises.
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

static inline float ml_sigmoidf(float x) { return 1.0f / (1.0f + ml_expf(-x)); }

static inline float ml_clipf(float x, float clip) {
    if (clip > 0.0f) x = x < -clip ? -clip : (x > clip ? clip : x);
    return x;
}

/* gates[j0..j1) += h[0..H) @ rt[H][G] (columns j0..j1 of rows of G floats), in register
 * blocks of 4 vectors. */
static inline void ml_lstm_recur_cols(int64_t H, int64_t G, int64_t j0, int64_t j1,
                                      const float* restrict h, const float* restrict rt,
                                      float* restrict gates) {
    int64_t j = j0;
    for (; j + 4 * ML_VW <= j1; j += 4 * ML_VW) {
        ml_vf a0 = *(ml_vf*)(gates + j), a1 = *(ml_vf*)(gates + j + ML_VW);
        ml_vf a2 = *(ml_vf*)(gates + j + 2 * ML_VW), a3 = *(ml_vf*)(gates + j + 3 * ML_VW);
        for (int64_t k = 0; k < H; ++k) {
            const float* r = rt + k * G + j;
            ml_vf hk = h[k] - (ml_vf){0};
            a0 += hk * *(const ml_vf*)r;
            a1 += hk * *(const ml_vf*)(r + ML_VW);
            a2 += hk * *(const ml_vf*)(r + 2 * ML_VW);
            a3 += hk * *(const ml_vf*)(r + 3 * ML_VW);
        }
        *(ml_vf*)(gates + j) = a0;
        *(ml_vf*)(gates + j + ML_VW) = a1;
        *(ml_vf*)(gates + j + 2 * ML_VW) = a2;
        *(ml_vf*)(gates + j + 3 * ML_VW) = a3;
    }
    for (; j < j1; ++j) {
        float a = gates[j];
        for (int64_t k = 0; k < H; ++k) a += h[k] * rt[k * G + j];
        gates[j] = a;
    }
}

/* Multiply-adds of one step's recurrent product (H x 4H) from which it is split over the
 * pool by column ranges. Below it one thread is faster: a pool round trip per step costs
 * a few microseconds. Measured on a 2-core EPYC: H = 256 (262K) gains 1.3x at 2 threads
 * (a greedy LSTM decoder step), H = 128 (65K) does not. */
#ifndef ML_LSTM_PAR_MIN
#define ML_LSTM_PAR_MIN (1 << 17)
#endif

typedef struct {
    int64_t H, G, per;
    const float* h;
    const float* rt;
    float* gates;
} ml_lstm_recur_ctx;

static void ml_lstm_recur_task(void* vctx, int64_t task, void* scratch) {
    (void)scratch;
    const ml_lstm_recur_ctx* c = (const ml_lstm_recur_ctx*)vctx;
    int64_t j0 = task * c->per, j1 = j0 + c->per < c->G ? j0 + c->per : c->G;
    if (j0 < j1) ml_lstm_recur_cols(c->H, c->G, j0, j1, c->h, c->rt, c->gates);
}

/* gates[0..G) += h[0..H) @ rt[H][G]: one column range per thread when the product is
 * large enough (ranges of whole 4-vector blocks, so the sums are those of one thread). */
static inline void ml_lstm_recur(int64_t H, int64_t G, const float* restrict h,
                                 const float* restrict rt, float* restrict gates) {
    int32_t nt = ml_num_threads();
    if (nt <= 1 || H * G < ML_LSTM_PAR_MIN) {
        ml_lstm_recur_cols(H, G, 0, G, h, rt, gates);
        return;
    }
    int64_t blk = 4 * ML_VW, per = ((G + nt - 1) / nt + blk - 1) / blk * blk;
    ml_lstm_recur_ctx c = {H, G, per, h, rt, gates};
    ml_parallel_for((G + per - 1) / per, ml_lstm_recur_task, &c, 0, 0);
}

/* The cell update without peepholes, as flat loops over arrays that vectorise (the
 * generated source declares expf/tanhf with simd variants). */
static inline void ml_lstm_cell(int64_t H, float clip, float* restrict g, float* restrict h,
                                float* restrict c) {
    for (int64_t j = 0; j < 3 * H; ++j) g[j] = ml_sigmoidf(ml_clipf(g[j], clip));
    for (int64_t j = 3 * H; j < 4 * H; ++j) g[j] = tanhf(ml_clipf(g[j], clip));
    for (int64_t j = 0; j < H; ++j) c[j] = g[2 * H + j] * c[j] + g[j] * g[3 * H + j];
    for (int64_t j = 0; j < H; ++j) h[j] = g[H + j] * tanhf(c[j]);
}

/* The cell update with peepholes (i and f see the old cell, o the new one). */
static inline void ml_lstm_cell_peep(int64_t H, float clip, const float* restrict p,
                                     const float* restrict g, float* restrict h,
                                     float* restrict c) {
    for (int64_t j = 0; j < H; ++j) {
        float cp = c[j];
        float ig = ml_sigmoidf(ml_clipf(g[j] + p[j] * cp, clip));
        float fg = ml_sigmoidf(ml_clipf(g[2 * H + j] + p[2 * H + j] * cp, clip));
        float cn = fg * cp + ig * tanhf(ml_clipf(g[3 * H + j], clip));
        float og = ml_sigmoidf(ml_clipf(g[H + j] + p[H + j] * cn, clip));
        c[j] = cn;
        h[j] = og * tanhf(cn);
    }
}

/* One direction over T steps, batch B, hidden H. gx: [T][B][4H]; rt: [H][4H]; p: [3H]
 * peepholes (i, o, f) or NULL; h0, c0: [B][H] or NULL (zeros). y: output of step t at
 * y + t*y_tstride (+ b*H), or NULL. h, c: [B][H] state, final values on return.
 * gates: scratch of 4H floats. Needs gemm.h (ml_vf). */
ML_UNUSED static void ml_lstm_dir(int64_t T, int64_t B, int64_t H, int reverse, const float* restrict gx,
                        const float* restrict rt, const float* restrict p,
                        const float* restrict h0, const float* restrict c0, float clip,
                        float* restrict y, int64_t y_tstride, float* restrict h,
                        float* restrict c, float* restrict gates) {
    for (int64_t i = 0; i < B * H; ++i) {
        h[i] = h0 ? h0[i] : 0.0f;
        c[i] = c0 ? c0[i] : 0.0f;
    }
    int64_t G = 4 * H;
    for (int64_t s = 0; s < T; ++s) {
        int64_t t = reverse ? T - 1 - s : s;
        for (int64_t b = 0; b < B; ++b) {
            float* hb = h + b * H;
            float* cb = c + b * H;
            memcpy(gates, gx + (t * B + b) * G, G * sizeof(float));
            ml_lstm_recur(H, G, hb, rt, gates);
            if (p)
                ml_lstm_cell_peep(H, clip, p, gates, hb, cb);
            else
                ml_lstm_cell(H, clip, gates, hb, cb);
            if (y) memcpy(y + t * y_tstride + b * H, hb, H * sizeof(float));
        }
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_LSTM_H */
