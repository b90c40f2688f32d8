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
#include <math.h>
#include <stdint.h>

static inline float ml_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static inline float ml_clipf(float x, float clip) {
    if (clip > 0.0f) x = x < -clip ? -clip : (x > clip ? clip : x);
    return x;
}

/* One direction over T steps, batch B, hidden H. gx: [T][B][4H]; rt: [H][4H]; p: [3H]
 * peepholes (i, o, f) or NULL; h0, c0: [B][H] or NULL (zeros). y: output of step t at
 * y + t*y_tstride (+ b*H), or NULL. h, c: [B][H] state, final values on return.
 * gates: scratch of 4H floats. */
static void ml_lstm_dir(int64_t T, int64_t B, int64_t H, int reverse, const float* restrict gx,
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
            const float* g0 = gx + (t * B + b) * G;
            for (int64_t j = 0; j < G; ++j) gates[j] = g0[j];
            for (int64_t k = 0; k < H; ++k) {
                float hk = hb[k];
                const float* r = rt + k * G;
                for (int64_t j = 0; j < G; ++j) gates[j] += hk * r[j];
            }
            for (int64_t j = 0; j < H; ++j) {
                float cp = cb[j];
                float gi = gates[j] + (p ? p[j] * cp : 0.0f);
                float gf = gates[2 * H + j] + (p ? p[2 * H + j] * cp : 0.0f);
                float ig = ml_sigmoidf(ml_clipf(gi, clip));
                float fg = ml_sigmoidf(ml_clipf(gf, clip));
                float cn = fg * cp + ig * tanhf(ml_clipf(gates[3 * H + j], clip));
                float go = gates[H + j] + (p ? p[H + j] * cn : 0.0f);
                float og = ml_sigmoidf(ml_clipf(go, clip));
                cb[j] = cn;
                hb[j] = og * tanhf(cn);
            }
            if (y)
                for (int64_t j = 0; j < H; ++j) y[t * y_tstride + b * H + j] = hb[j];
        }
    }
}

#endif /* MONOLIB_LSTM_H */
