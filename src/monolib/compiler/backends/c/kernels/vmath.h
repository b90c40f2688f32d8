/* vmath.h -- float32 exp, sigmoid, erf and tanh as branch-free C that the compiler
 * vectorizes inside any loop (monolib kernel library; in every generated C file, after
 * the prelude: the ops call ml_expf, ml_logisticf, ml_erff and ml_tanhf by name, and the
 * OpenCL/CUDA preludes map those names onto their own exp, erf and tanh).
 *
 * Why not libm's expf: gcc does vectorize loops calling it, through glibc's libmvec
 * (_ZGVdN8v_expf), but only on x86-64 glibc >= 2.22, and libmvec sends a whole vector
 * to a scalar fallback when any lane is outside about |x| < 87: a tanh-GELU written as
 * x * sigmoid(2u) on conv outputs of a few tens took 12 ns per element there instead
 * of 0.7. ml_expf costs the same as libmvec's fast path (~0.5 ns per element on Zen 3)
 * for every input and vectorizes on any target.
 *
 * Method (Cody & Waite range reduction, as in Cephes/SLEEF): n = round(x / ln 2),
 * r = x - n ln 2 in two parts (ln2_hi has 9 significant bits, so n * ln2_hi is exact
 * for |n| <= 150), exp(r) on |r| <= ln(2)/2 by a degree-6 polynomial (1 + r + r^2 P(r),
 * P a minimax fit of (e^r - 1 - r) / r^2, relative error 3.5e-9), then exp(x) =
 * exp(r) * 2^n1 * 2^n2 with n1 + n2 = n: two exact power-of-two scalings, so results
 * in the subnormal range are rounded once and overflow gives inf. Inputs are clamped
 * to [-104, 88.8] first (exp is 0 resp. inf beyond); NaN passes through.
 * Accuracy, checked against double exp over all 2^32 inputs: max error 0.998 ulp,
 * mean 0.034 ulp; exp(0) = 1, exp(-inf) = 0, exp(inf) = inf, exp(NaN) = NaN.
 *
 * ml_erff (float32 erf; the exact GELU's 0.5 x (1 + erf(x / sqrt 2)) runs it in conv and
 * GEMM epilogues): libmvec's _ZGVeN16v_erff took 0.68 ns per element on Zen 4 inside a
 * GELU loop, this 0.28 (one division and 11 FMAs per vector, no exp, no table).
 */
#ifndef MONOLIB_VMATH_H
#define MONOLIB_VMATH_H
#include <stdint.h>
#include <math.h>
#include <string.h>

static inline float ml_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t ml_bits_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* x < lo ? lo : x and x > hi ? hi : x (a NaN x stays NaN, -0 stays -0: the same bits as
 * those ternaries), as a select on the comparison's bits. Written as ternaries, gcc 12
 * if-converts a clamp nested in a product (HardSwish's x * clamp(x / 6 + 0.5, 0, 1)) into
 * three masked products and mask logic: 49 us per 401K floats on Zen 4, against 29 as a
 * compare and a masked move per bound (and 17 with fast-math's min/max, which turn a NaN
 * into the bound). Activations, Clip and the clamps below call these. */
static inline float ml_atleastf(float x, float lo) {
    const uint32_t m = 0u - (uint32_t)(x < lo);
    return ml_f32_from_bits((m & ml_bits_from_f32(lo)) | (~m & ml_bits_from_f32(x)));
}

static inline float ml_atmostf(float x, float hi) {
    const uint32_t m = 0u - (uint32_t)(x > hi);
    return ml_f32_from_bits((m & ml_bits_from_f32(hi)) | (~m & ml_bits_from_f32(x)));
}

/* exp's range reduction and polynomial, shared by ml_expf and softmax's ml_sm_expneg:
 * returns p ~ exp(x - n ln 2) for n = round(x / ln 2), which it leaves in *n (x within
 * [-104, 88.8]; the callers clamp and scale by 2^n as their ranges need). */
static inline __attribute__((always_inline)) float ml_exp_poly(float x, int32_t* n) {
    /* 0x1.8p23: adding it rounds x / ln 2 to an integer held in the low mantissa bits */
    const float k = x * 1.44269504f + 12582912.0f;
    const float nf = k - 12582912.0f;
    float r = x - nf * 0.693359375f;
    r = r - nf * -2.12194440e-4f;
    float p = 0.0013811662793159485f;
    p = p * r + 0.008370134979486465f;
    p = p * r + 0.04166852682828903f;
    p = p * r + 0.16666509211063385f;
    p = p * r + 0.4999999403953552f;
    *n = (int32_t)(ml_bits_from_f32(k) - 0x4B400000u);
    return 1.0f + (r + r * r * p);
}

static inline float ml_expf(float x) {
    /* selects (not fminf/fmaxf) so a NaN stays NaN */
    x = ml_atmostf(x, 88.8f);
    x = ml_atleastf(x, -104.0f);
    int32_t ni;
    const float p = ml_exp_poly(x, &ni);
    /* n in [-150, 128]: each half within a normal float's exponent range */
    const int32_t n1 = ni >> 1, n2 = ni - n1; /* floor: one shift (ni / 2 took three) */
    const float s1 = ml_f32_from_bits((uint32_t)(n1 + 127) << 23);
    const float s2 = ml_f32_from_bits((uint32_t)(n2 + 127) << 23);
    return p * s1 * s2;
}

/* 1 / (1 + exp(-x)): ml_expf's reduction and polynomial with one power-of-two scaling
 * (ml_expf scales twice, for its subnormal results): -x is clamped to [-87, 88.7], where
 * 2^n stays a normal float up to n = 128 (2^128 = inf). The same bits as
 * 1 / (1 + ml_expf(-x)) except where the result is below FLT_MIN: 0 for x < -88.38
 * (exp(-x) = inf) instead of a subnormal; x > 87 gives 1 either way (1 + e rounds to 1).
 * A SiLU epilogue (x * sigmoid(x)) took 0.33 instead of 0.39 ns per element on Zen 4. */
static inline float ml_logisticf(float x) {
    float t = -x;
    t = ml_atmostf(t, 88.7f); /* selects: a NaN stays NaN */
    t = ml_atleastf(t, -87.0f);
    int32_t n;
    const float p = ml_exp_poly(t, &n);
    return 1.0f / (1.0f + p * ml_f32_from_bits((uint32_t)(n + 127) << 23));
}

/* erf(x) = x P(x^2) / Q(x^2) on |x| < 3.92, P of degree 6 and Q of degree 4: a
 * rational fit of erf(x) / x weighted for relative error (linearized least squares with
 * Lawson reweighting against 30-digit erf, float64 fit error 0.95 ulp), and +-1 beyond
 * (1 - erf(3.92) = 2.96e-8 is below half of float32's spacing under 1). Checked against
 * double erf over all 2^32 inputs: max error 6 ulp with FMA contraction, 7 without
 * (float32 rounding of P and Q near |x| = 3.2), mean 0.33 ulp; erf(+-0) = +-0,
 * erf(+-inf) = +-1, erf(NaN) = NaN. */
static inline float ml_erff(float x) {
    const float a = fabsf(x);
    const float b = a > 3.92f ? 3.92f : a; /* NaN stays NaN */
    const float t = b * b;
    float p = 1.99242471e-08f;
    p = p * t + -1.95783173e-06f;
    p = p * t + 0.000141849712f;
    p = p * t + 0.00370158092f;
    p = p * t + 0.050573241f;
    p = p * t + 0.199923858f;
    p = p * t + 1.12837911f;
    float q = 0.000956031843f;
    q = q * t + 0.0143531477f;
    q = q * t + 0.114998139f;
    q = q * t + 0.510509551f;
    q = q * t + 1.0f;
    const float r = a >= 3.92f ? 1.0f : b * p / q;
    return copysignf(r, x);
}

/* tanh(x) = x P(x^2) / Q(x^2) on |x| <= 9, P and Q of degree 4: a rational fit of
 * tanh(x) / x for relative error (P(0) = Q(0) = 1; linearized least squares, Loeb's
 * division by the last Q and Lawson reweighting, against 40-digit tanh; float64 fit
 * error 0.36 ulp); beyond, the value at +-9 (1 - tanh(9) = 3e-8 is half of float32's
 * spacing under 1). Checked against double tanh over all 2^32 inputs: max error 5.5 ulp
 * (near |x| = 7, where the result is within 2e-6 of 1: float32 rounding of P, Q and the
 * division), mean 0.04 ulp.
 * tanh(+-0) = +-0 and subnormals stay themselves (P = Q = 1 there), +-inf gives +-1,
 * NaN stays NaN, |result| <= 1 everywhere. libm's tanhf (libmvec's vector variant) took
 * 0.40 ns per element on Zen 4 (ORT 0.36); this, 9 FMAs, a division
 * and four selects, 0.32 (ORT 0.36-0.38 in the same run). */
static inline float ml_tanhf(float x) {
    const float c = ml_atleastf(ml_atmostf(x, 9.0f), -9.0f); /* selects: NaN stays */
    const float t = c * c;
    float p = 1.3419796829339248e-08f;
    p = p * t + 2.066125307464972e-05f;
    p = p * t + 0.0034989959094673395f;
    p = p * t + 0.13383980095386505f;
    p = p * t + 1.0f;
    float q = 7.804721349202737e-07f;
    q = q * t + 0.0003291037864983082f;
    q = q * t + 0.025890206918120384f;
    q = q * t + 0.4671730101108551f;
    q = q * t + 1.0f;
    /* rounded, x P / Q passes 1 near |x| = 9 (by 1 ulp): the result is clamped too */
    return ml_atleastf(ml_atmostf(c * p / q, 1.0f), -1.0f);
}

#endif /* MONOLIB_VMATH_H */
