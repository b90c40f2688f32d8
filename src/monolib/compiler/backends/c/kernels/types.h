/* Storage types: tensors of these element types are kept in their ONNX / ml_dtypes
   byte layout (one element per uint16_t / uint8_t / int8_t) and converted to float
   (or to an integer) to compute.

     float16          IEEE binary16              uint16_t
     bfloat16         upper half of a float32    uint16_t
     float8_e4m3fn    E4M3, bias 7, NaN S.1111.111, no Inf         uint8_t
     float8_e4m3fnuz  E4M3, bias 8, NaN 0x80, no Inf, no -0        uint8_t
     float8_e5m2      E5M2, bias 15, IEEE-like Inf/NaN             uint8_t
     float8_e5m2fnuz  E5M2, bias 16, NaN 0x80, no Inf, no -0       uint8_t
     float8_e8m0fnu   2^(b-127), 0xFF NaN, no sign, no zero        uint8_t
     float4_e2m1fn    E2M1, bias 1, no Inf/NaN (max 6)             uint8_t (low 4 bits)
     int4 / uint4     the low 4 bits (two's complement for int4)    uint8_t
     int2 / uint2     the low 2 bits                                 uint8_t

   Sources: ONNX Cast operator spec (the float8 tables, saturate, round_mode of
   FLOAT8E8M0), the OCP 8-bit floating point spec (OFP8), ml_dtypes' layouts.
   Conversions from float round to nearest, ties to even (RNE). Functions are
   ml_from_<type>(storage) -> float and ml_to_<type>(float, saturate) -> storage. */

#ifndef MONOLIB_TYPES_H
#define MONOLIB_TYPES_H

/* kinds of small float formats: where Inf and NaN live */
#define ML_FK_IEEE 0 /* max exponent: Inf (mantissa 0) and NaN (else) */
#define ML_FK_FN 1   /* only S.all-ones is NaN; no Inf */
#define ML_FK_FNUZ 2 /* 1000..0 is NaN; no Inf, no negative zero */
#define ML_FK_NONE 3 /* no Inf, no NaN */

static inline float ml_fdec(uint32_t b, int E, int M, int bias, int kind) {
  uint32_t sign = (b >> (E + M)) & 1u, e = (b >> M) & ((1u << E) - 1u), m = b & ((1u << M) - 1u);
  float v;
  if (kind == ML_FK_FNUZ && b == (1u << (E + M))) return NAN;
  if (kind == ML_FK_FN && e == (1u << E) - 1u && m == (1u << M) - 1u) return sign ? -NAN : NAN;
  if (kind == ML_FK_IEEE && e == (1u << E) - 1u) {
    v = m ? NAN : INFINITY;
    return sign ? -v : v;
  }
  if (e == 0)
    v = ldexpf((float)m, 1 - bias - M); /* subnormal */
  else
    v = ldexpf((float)((1u << M) | m), (int)e - bias - M);
  return sign ? -v : v;
}

/* float -> format code, RNE; out of range: saturate ? largest finite : Inf (IEEE) or
   NaN (FN, FNUZ) or largest finite (NONE, which has neither). */
static inline uint32_t ml_fenc(float x, int E, int M, int bias, int kind, int saturate) {
  uint32_t sbit = 1u << (E + M), all = (1u << (E + M)) - 1u;
  uint32_t sign = signbit(x) ? sbit : 0u, maxc, nan, code;
  float a = fabsf(x);
  switch (kind) {
    case ML_FK_IEEE:
      maxc = (((1u << E) - 2u) << M) | ((1u << M) - 1u);
      nan = ((1u << E) - 1u) << M | (1u << (M - 1));
      break;
    case ML_FK_FN: maxc = all - 1u; nan = all; break;
    case ML_FK_FNUZ: maxc = all; nan = sbit; break;
    default: maxc = all; nan = 0u; break;
  }
  /* NaN: FNUZ's one NaN; NONE has none: ml_dtypes writes (sign ^ sign bit) | 0 */
  if (isnan(x)) return kind == ML_FK_FNUZ ? sbit : (kind == ML_FK_NONE ? sign ^ sbit : (sign | nan));
  if (isinf(a)) {
    code = saturate || kind == ML_FK_NONE ? maxc
         : kind == ML_FK_IEEE ? ((1u << E) - 1u) << M : nan;
    return kind == ML_FK_FNUZ && code == nan ? nan : (sign | code);
  }
  if (a == 0.0f) return kind == ML_FK_FNUZ ? 0u : sign;
  int ex;
  frexpf(a, &ex); /* a = f * 2^ex, f in [0.5, 1): unbiased exponent ex - 1 */
  int q = (ex - 1 < 1 - bias ? 1 - bias : ex - 1) - M; /* exponent of one ulp */
  float n = rintf(ldexpf(a, -q)); /* exact scaling by a power of two, then RNE */
  if (ex - 1 < 1 - bias)
    code = (uint32_t)n; /* subnormal; n == 2^M is the smallest normal */
  else
    code = ((uint32_t)(ex - 1 + bias) << M) + ((uint32_t)n - (1u << M));
  if (code > maxc) {
    if (saturate || kind == ML_FK_NONE) code = maxc;
    else if (kind == ML_FK_IEEE) code = ((1u << E) - 1u) << M;
    else return kind == ML_FK_FNUZ ? nan : (sign | nan);
  }
  if (kind == ML_FK_FNUZ && code == 0u) return 0u; /* no negative zero */
  return sign | code;
}

static inline float ml_from_float16(uint16_t b) { return ml_fdec(b, 5, 10, 15, ML_FK_IEEE); }
static inline uint16_t ml_to_float16(float x, int sat) {
  return (uint16_t)ml_fenc(x, 5, 10, 15, ML_FK_IEEE, sat);
}

static inline float ml_from_bfloat16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t ml_to_bfloat16(float x, int sat) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if (isnan(x)) return (uint16_t)((u >> 16) | 0x40u); /* quiet, keep the sign */
  u += 0x7FFFu + ((u >> 16) & 1u); /* RNE on the dropped 16 bits */
  (void)sat;
  return (uint16_t)(u >> 16);
}

static inline float ml_from_float8_e4m3fn(uint8_t b) { return ml_fdec(b, 4, 3, 7, ML_FK_FN); }
static inline uint8_t ml_to_float8_e4m3fn(float x, int sat) {
  return (uint8_t)ml_fenc(x, 4, 3, 7, ML_FK_FN, sat);
}
static inline float ml_from_float8_e4m3fnuz(uint8_t b) { return ml_fdec(b, 4, 3, 8, ML_FK_FNUZ); }
static inline uint8_t ml_to_float8_e4m3fnuz(float x, int sat) {
  return (uint8_t)ml_fenc(x, 4, 3, 8, ML_FK_FNUZ, sat);
}
static inline float ml_from_float8_e5m2(uint8_t b) { return ml_fdec(b, 5, 2, 15, ML_FK_IEEE); }
static inline uint8_t ml_to_float8_e5m2(float x, int sat) {
  return (uint8_t)ml_fenc(x, 5, 2, 15, ML_FK_IEEE, sat);
}
static inline float ml_from_float8_e5m2fnuz(uint8_t b) { return ml_fdec(b, 5, 2, 16, ML_FK_FNUZ); }
static inline uint8_t ml_to_float8_e5m2fnuz(float x, int sat) {
  return (uint8_t)ml_fenc(x, 5, 2, 16, ML_FK_FNUZ, sat);
}
static inline float ml_from_float4_e2m1fn(uint8_t b) { return ml_fdec(b & 15u, 2, 1, 1, ML_FK_NONE); }
static inline uint8_t ml_to_float4_e2m1fn(float x, int sat) {
  return (uint8_t)ml_fenc(x, 2, 1, 1, ML_FK_NONE, sat);
}

/* 2^(b-127) built from its bits (b = 0: the subnormal 2^-127), not computed: a run
   flushes subnormal results to zero (threadpool.h ml_fp_enter) */
static inline float ml_from_float8_e8m0fnu(uint8_t b) {
  uint32_t u = b ? (uint32_t)b << 23 : 0x400000u;
  float v;
  memcpy(&v, &u, 4);
  return b == 0xFFu ? NAN : v;
}
/* round_mode: 0 up, 1 down, 2 nearest (ONNX Cast 24); the sign is ignored (negative
   values are undefined behaviour in the spec); NaN and Inf become 0xFF */
static inline uint8_t ml_to_float8_e8m0fnu_r(float x, int sat, int round_mode) {
  uint32_t u;
  memcpy(&u, &x, 4);
  uint32_t e = (u >> 23) & 0xFFu, up = 0;
  if (e == 0xFFu) return 0xFFu;
  if (round_mode == 0)
    up = (u & 0x7FFFFFu) != 0;
  else if (round_mode == 2)
    up = (u & 0x400000u) && ((u & 0x3FFFFFu) || e > 0);
  if (up && sat && e == 0xFEu) up = 0;
  return (uint8_t)(e + up);
}
static inline uint8_t ml_to_float8_e8m0fnu(float x, int sat) { return ml_to_float8_e8m0fnu_r(x, sat, 0); }

/* integers: two's complement wrap to the low bits (ONNX Cast: out-of-range fixed
   point discards the higher bits); stored as ml_dtypes does, upper bits zero */
static inline int32_t ml_from_int4(uint8_t b) { return (int32_t)((b & 15u) ^ 8u) - 8; }
static inline int32_t ml_from_uint4(uint8_t b) { return (int32_t)(b & 15u); }
static inline int32_t ml_from_int2(uint8_t b) { return (int32_t)((b & 3u) ^ 2u) - 2; }
static inline int32_t ml_from_uint2(uint8_t b) { return (int32_t)(b & 3u); }
static inline uint8_t ml_to_int4(int64_t v, int sat) { (void)sat; return (uint8_t)(v & 15); }
static inline uint8_t ml_to_uint4(int64_t v, int sat) { (void)sat; return (uint8_t)(v & 15); }
static inline uint8_t ml_to_int2(int64_t v, int sat) { (void)sat; return (uint8_t)(v & 3); }
static inline uint8_t ml_to_uint2(int64_t v, int sat) { (void)sat; return (uint8_t)(v & 3); }

#endif /* MONOLIB_TYPES_H */
