/* mt19937.h -- the random ops' generator: MT19937 (Matsumoto & Nishimura, 1998) with
 * NumPy's legacy RandomState draws on top of it, so a seeded op draws exactly what
 * np.random.RandomState(seed) draws (ONNX's reference implementation and the test data
 * of its Dropout cases use that generator):
 *   ml_rng_double   random_sample(): 53 bits from two 32-bit outputs;
 *   ml_rng_gauss    standard_normal(): the polar Box-Muller method, the second value of
 *                   each pair kept for the next call;
 *   ml_rng_bernoulli binomial(1, p): NumPy's inversion for n = 1, one double per draw.
 * One ml_rng_state lives in the arena per random op (ops/math/random.py): it outlives
 * the run, so an op without a seed is seeded once (from the clock and the state's
 * address) and draws new values each run; an op with a seed is re-seeded every run.
 * The arena starts zeroed, so `seeded` is 0 before the first run. */
#ifndef ML_MT19937_H
#define ML_MT19937_H
#include <stdint.h>
#include <math.h>
#include <time.h>

#define ML_MT_N 624
#define ML_MT_M 397

typedef struct {
  uint32_t key[ML_MT_N];
  int32_t pos;
  int32_t has_gauss;
  double gauss;
  uint64_t seeded;
} ml_rng_state;

/* init_genrand: NumPy's RandomState(seed) for an integer seed below 2**32. */
static void ml_rng_seed(ml_rng_state* st, uint32_t seed) {
  st->key[0] = seed;
  for (int i = 1; i < ML_MT_N; ++i) {
    uint32_t prev = st->key[i - 1];
    st->key[i] = 1812433253u * (prev ^ (prev >> 30)) + (uint32_t)i;
  }
  st->pos = ML_MT_N;
  st->has_gauss = 0;
  st->gauss = 0.0;
  st->seeded = 1;
}

/* Each run: re-seed a seeded op; seed an unseeded one once, from the clock, the
 * state's address and a per-library counter (two executors never share a state). */
static void ml_rng_begin(ml_rng_state* st, int has_seed, uint32_t seed) {
  if (has_seed) { ml_rng_seed(st, seed); return; }
  if (st->seeded) return;
  static uint32_t ml_rng_counter = 0;
  uint64_t t = (uint64_t)time(NULL);
#ifdef TIME_UTC
  struct timespec ts;
  if (timespec_get(&ts, TIME_UTC)) t = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
  uint64_t h = t ^ ((uint64_t)(uintptr_t)st * 0x9e3779b97f4a7c15ull)
               ^ ((uint64_t)(++ml_rng_counter) << 32) ^ (uint64_t)clock();
  h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33;
  ml_rng_seed(st, (uint32_t)(h ^ (h >> 32)));
}

static void ml_rng_refill(ml_rng_state* st) {
  const uint32_t upper = 0x80000000u, lower = 0x7fffffffu, a = 0x9908b0dfu;
  for (int i = 0; i < ML_MT_N; ++i) {
    uint32_t y = (st->key[i] & upper) | (st->key[(i + 1) % ML_MT_N] & lower);
    st->key[i] = st->key[(i + ML_MT_M) % ML_MT_N] ^ (y >> 1) ^ ((0u - (y & 1u)) & a);
  }
  st->pos = 0;
}

static inline uint32_t ml_rng_u32(ml_rng_state* st) {
  if (st->pos >= ML_MT_N) ml_rng_refill(st);
  uint32_t y = st->key[st->pos++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

/* [0, 1) with 53 random bits: (a * 2^26 + b) / 2^53 from a 27- and a 26-bit draw. */
static inline double ml_rng_double(ml_rng_state* st) {
  int32_t a = (int32_t)(ml_rng_u32(st) >> 5), b = (int32_t)(ml_rng_u32(st) >> 6);
  return (a * 67108864.0 + b) / 9007199254740992.0;
}

/* The products stay separate roundings (no fused multiply-add), as in NumPy's build,
 * so the values are NumPy's bit for bit. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
static double ml_rng_gauss(ml_rng_state* st) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
  if (st->has_gauss) {
    st->has_gauss = 0;
    double g = st->gauss;
    st->gauss = 0.0;
    return g;
  }
  double x1, x2, r2;
  do {
    x1 = 2.0 * ml_rng_double(st) - 1.0;
    x2 = 2.0 * ml_rng_double(st) - 1.0;
    double s1 = x1 * x1, s2 = x2 * x2;
    r2 = s1 + s2;
  } while (r2 >= 1.0 || r2 == 0.0);
  double f = sqrt(-2.0 * log(r2) / r2);
  st->gauss = f * x1;
  st->has_gauss = 1;
  return f * x2;
}

/* d rounded to float by round-to-odd (truncate, set the last bit when inexact): a
 * second rounding of that float to float16/bfloat16 is then d's correct rounding, as
 * NumPy's astype from float64 gives (no double-rounding error). */
static inline float ml_rng_float_odd(double d) {
  float f = (float)d;
  if ((double)f == d || f != f) return f;
  if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
  union { float f; uint32_t u; } b = {f};
  b.u |= 1u;
  return b.f;
}

/* binomial(1, p) as NumPy's legacy inversion draws it for n = 1: one double u; for
 * p <= 0.5 the draw is 1 when u > exp(log(1 - p)); above, with q = 1 - p, it is
 * 1 - (u > exp(log(1 - q))) (NumPy inverts the smaller tail). */
static inline int ml_rng_bernoulli(ml_rng_state* st, double p) {
  double u = ml_rng_double(st);
  if (p <= 0.5) return u > exp(log(1.0 - p));
  double q = 1.0 - p;
  return !(u > exp(log(1.0 - q)));
}

#endif
