/* qgemm.h -- packed integer GEMM and depthwise convolution for the quantized operators
 * (monolib kernel library).
 *
 * C[M,N] = sum_k (A[m,k] - za) * (B[k,n] - zb) (+ bias[m]) exactly in int32, for 8-bit
 * operands (uint8 or int8, each side on its own) with their zero points subtracted when
 * packing: every packed value is an int16 in [-255, 255]. The micro-kernel multiplies
 * pairs along K and adds each pair's two products into one int32 lane (x86's pmaddwd:
 * |a0*b0 + a1*b1| <= 2*255*255 < 2^31, so the pair sum never saturates; the sum over K is
 * the same int32 sum as the reference, wrapping only past 2^31 like it). Written with GCC
 * vector extensions: AVX2 uses vpmaddwd (16 multiplies per instruction), elsewhere a
 * portable pairwise multiply-add the compiler vectorises as it can.
 *
 * Each finished tile is stored either as int32 (MatMulInteger, ConvInteger) or
 * requantized to uint8/int8 (QLinearConv, QLinearMatMul) the way ONNX Runtime does it:
 * y = saturate(round_half_even((float)acc * mult) + y_zero_point), mult a float32 per
 * tensor, per row or per column.
 *
 * Layouts (int16, K padded to even Kp with zeros):
 *   packed A  panel p (rows p*QMR..): at a + p*Kp*QMR, element (r, k) at
 *             [(k/2)*QMR*2 + r*2 + k%2]; rows past M are zero.
 *   packed B  panel q (columns q*QNR..): at q*Kp*QNR, element (k, c) at
 *             [(k/2)*QNR*2 + c*2 + k%2]; columns past N are zero. Either prepacked
 *             (weights, at compile time) or packed per block of columns at run time from
 *             a strided 8-bit matrix or from an int16 zero-padded image (implicit im2col).
 */
#ifndef MONOLIB_QGEMM_H
#define MONOLIB_QGEMM_H
/* the 32-byte vectors pass between always-inline static functions only: the ABI note
 * gcc gives for them without AVX does not apply */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>

#define ML_QMR 6
#define ML_QNR 16
#define ML_QMIN(a, b) ((a) < (b) ? (a) : (b))
#define ML_QINLINE static inline __attribute__((always_inline))
#define ML_QUNUSED __attribute__((unused))

typedef int32_t ml_qv8 __attribute__((vector_size(32), aligned(4)));
typedef int16_t ml_qv16 __attribute__((vector_size(32), aligned(4)));

/* Lane i: a[2i]*b[2i] + a[2i+1]*b[2i+1] in int32. */
ML_QINLINE ml_qv8 ml_qmadd(ml_qv16 a, ml_qv16 b) {
#if defined(__AVX2__) && !defined(ML_QGEMM_PORTABLE)
    return (ml_qv8)__builtin_ia32_pmaddwd256(a, b);
#else
    ml_qv8 r;
    for (int i = 0; i < 8; ++i)
        r[i] = (int32_t)a[2 * i] * b[2 * i] + (int32_t)a[2 * i + 1] * b[2 * i + 1];
    return r;
#endif
}

enum { ML_QB_PACKED = 0, ML_QB_STRIDED = 1, ML_QB_IM2COL = 2 };
enum { ML_QOUT_I32 = 0, ML_QOUT_U8 = 1, ML_QOUT_S8 = 2, ML_QOUT_F32 = 3 };
enum { ML_QMULT_TENSOR = 0, ML_QMULT_ROW = 1, ML_QMULT_COL = 2 };

/* Where B comes from. PACKED: p16 full packed (all Kp). STRIDED: B[k][n] =
 * p8[k*ldk + n*ldn] (int8 when is_signed, else uint8) minus zp[n] (zp_n, or zp0 when
 * NULL). IM2COL: B[(ci*KH+ky)*KW+kx][oh*OW+ow] = p16[ci*H*W + (oh*SH+ky*DH)*W +
 * ow*SW+kx*DW], p16 an int16 image with the zero point already subtracted and zero padding
 * (ml_qpad_image makes one), every read in range. */
typedef struct {
    int kind, is_signed;
    const int16_t* p16;
    const void* p8;
    int64_t ldk, ldn;
    const int32_t* zp_n;
    int32_t zp0;
    int64_t H, W, KH, KW, SH, SW, DH, DW, OH, OW;
} ml_qbsrc;

/* Where a finished tile goes. I32: c[m*ldc + n] = acc. U8/S8: requantized into y.
 * F32 (com.microsoft MatMulIntegerToFloat, QGemm with a float Y): y = (float)acc * mult
 * (+ fbias[n]), the order of ONNX Runtime's scale-bias output. bias_n (or NULL): an int32
 * per column added to the sums first (QGemm's C). */
typedef struct {
    int kind, mult_mode;
    void* y;
    int64_t ld;
    const float* mult;
    int32_t zp;
    const float* fbias;
    const int32_t* bias_n;
} ml_qout;

typedef struct {
    int64_t M, N, K;
    const int16_t* a; /* packed A */
    ml_qbsrc b;
    ml_qout out;
    const int32_t* bias_m; /* added to row m's sums, or NULL */
    int16_t* bbuf;         /* ml_qgemm_bbuf_bytes() */
    int64_t n_begin, n_end;
} ml_qgemm_args;

/* Columns per B block: the block of all Kp rows stays near 512 KiB (L2). */
static inline int64_t ml_qgemm_nc(int64_t K) {
    int64_t kp = (K + 1) & ~(int64_t)1, nc = ((int64_t)1 << 18) / (kp > 0 ? kp : 1);
    nc = nc / ML_QNR * ML_QNR;
    return nc < ML_QNR ? ML_QNR : (nc > 1024 ? 1024 : nc);
}

/* Bytes of the B block buffer one thread needs (0 when B is prepacked). */
static inline int64_t ml_qgemm_bbuf_bytes(int64_t K, int64_t N) {
    int64_t kp = (K + 1) & ~(int64_t)1, nc = ml_qgemm_nc(K);
    int64_t n = (N + ML_QNR - 1) / ML_QNR * ML_QNR;
    return 2 * kp * (n < nc ? n : nc);
}

static inline int32_t ml_q8(const void* p, int is_signed, int64_t i) {
    return is_signed ? (int32_t)((const int8_t*)p)[i] : (int32_t)((const uint8_t*)p)[i];
}

/* Pack rows 0..M-1 of an 8-bit A (A[m][k] = p[m*ldm + k*ldk] minus zp_m[m], or zp0 when
 * zp_m is NULL) into int16 panels (layout above). dst: ceil(M/QMR)*QMR*Kp int16. */
ML_QUNUSED static void ml_qpack_a(int64_t M, int64_t K, const void* p, int is_signed,
                                  int64_t ldm, int64_t ldk, const int32_t* zp_m, int32_t zp0,
                                  int16_t* restrict dst) {
    int64_t kp = (K + 1) & ~(int64_t)1;
    int64_t mp = (M + ML_QMR - 1) / ML_QMR * ML_QMR;
    for (int64_t m = 0; m < mp; ++m) {
        int16_t* d = dst + (m / ML_QMR) * kp * ML_QMR + (m % ML_QMR) * 2;
        int32_t z = m < M ? (zp_m ? zp_m[m] : zp0) : 0;
        for (int64_t k = 0; k < kp; ++k)
            d[(k >> 1) * ML_QMR * 2 + (k & 1)] =
                (m < M && k < K) ? (int16_t)(ml_q8(p, is_signed, m * ldm + k * ldk) - z) : 0;
    }
}

/* An 8-bit [C][H][W] image minus its zero point, zero-padded into int16 [C][Hp][Wp]
 * (PT rows above, PL columns left); the pad value 0 is the zero point's. */
ML_QUNUSED static void ml_qpad_image(int64_t C, int64_t H, int64_t W, int64_t Hp, int64_t Wp,
                                     int64_t PT, int64_t PL, const void* x, int is_signed,
                                     int32_t zp, int16_t* restrict dst) {
    memset(dst, 0, (size_t)(C * Hp * Wp) * sizeof(int16_t));
    for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H && h + PT < Hp; ++h) {
            int16_t* d = dst + (c * Hp + h + PT) * Wp + PL;
            int64_t o = (c * H + h) * W, w_end = ML_QMIN(W, Wp - PL);
            if (is_signed)
                for (int64_t w = 0; w < w_end; ++w) d[w] = (int16_t)(((const int8_t*)x)[o + w] - zp);
            else
                for (int64_t w = 0; w < w_end; ++w) d[w] = (int16_t)(((const uint8_t*)x)[o + w] - zp);
        }
}

/* Row k of B, columns n0..n0+nc-1, as int16 into r[0..nc) (zeros past K). */
static void ml_qb_row(const ml_qbsrc* s, int64_t K, int64_t k, int64_t n0, int64_t nc,
                      int16_t* restrict r) {
    if (k >= K) {
        memset(r, 0, (size_t)nc * sizeof(int16_t));
    } else if (s->kind == ML_QB_STRIDED) {
        const int64_t o = k * s->ldk + n0 * s->ldn;
        if (s->zp_n || s->ldn != 1) {
            for (int64_t j = 0; j < nc; ++j)
                r[j] = (int16_t)(ml_q8(s->p8, s->is_signed, o + j * s->ldn) -
                                 (s->zp_n ? s->zp_n[n0 + j] : s->zp0));
        } else if (s->is_signed) { /* contiguous: plain loops gcc vectorises */
            const int8_t* p = (const int8_t*)s->p8 + o;
            for (int64_t j = 0; j < nc; ++j) r[j] = (int16_t)(p[j] - s->zp0);
        } else {
            const uint8_t* p = (const uint8_t*)s->p8 + o;
            for (int64_t j = 0; j < nc; ++j) r[j] = (int16_t)(p[j] - s->zp0);
        }
    } else { /* implicit im2col: runs along one output row */
        int64_t kx = k % s->KW, ky = (k / s->KW) % s->KH, ci = k / (s->KW * s->KH);
        const int16_t* x = s->p16 + ci * s->H * s->W + ky * s->DH * s->W + kx * s->DW;
        int64_t oh = n0 / s->OW, ow = n0 % s->OW;
        for (int64_t j = 0; j < nc; ++oh, ow = 0) {
            const int16_t* src = x + oh * s->SH * s->W + ow * s->SW;
            int64_t run = ML_QMIN(s->OW - ow, nc - j);
            if (s->SW == 1) memcpy(r + j, src, (size_t)run * sizeof(int16_t));
            else
                for (int64_t t = 0; t < run; ++t) r[j + t] = src[t * s->SW];
            j += run;
        }
    }
}

/* Pack B columns n0..n0+nc-1, all rows, into panels of QNR (panel stride Kp*QNR): each
 * pair of rows is gathered contiguous, then interleaved a whole panel row at a time
 * (element by element, the 2-byte scattered stores cost as much as a small GEMM). */
static void ml_qpack_b(const ml_qbsrc* s, int64_t K, int64_t n0, int64_t nc,
                       int16_t* restrict dst) {
    int64_t kp = (K + 1) & ~(int64_t)1, ps = kp * ML_QNR;
    int64_t ncp = (nc + ML_QNR - 1) / ML_QNR * ML_QNR;
    int16_t r0[1024 + ML_QNR], r1[1024 + ML_QNR];
    for (int64_t c0 = 0; c0 < nc; c0 += 1024) { /* ml_qgemm_nc: nc <= 1024 */
        int64_t cn = ML_QMIN(1024, nc - c0), cnp = ML_QMIN(ncp - c0, 1024);
        for (int64_t k = 0; k < kp; k += 2) {
            ml_qb_row(s, K, k, n0 + c0, cn, r0);
            ml_qb_row(s, K, k + 1, n0 + c0, cn, r1);
            for (int64_t j = cn; j < cnp; ++j) r0[j] = r1[j] = 0;
            int16_t* d = dst + (c0 / ML_QNR) * ps + (k >> 1) * ML_QNR * 2;
            for (int64_t j = 0; j < cnp; j += ML_QNR, d += ps)
                for (int c = 0; c < ML_QNR; ++c) {
                    d[2 * c] = r0[j + c];
                    d[2 * c + 1] = r1[j + c];
                }
        }
    }
}

/* y = saturate(round_half_even((float)v * mult) + zp) for n values; lo/hi the output
 * type's range. Clamping to [lo - zp, hi - zp] before rounding equals saturating after
 * (the bounds are integers), keeps |f| < 2^22, where adding and subtracting 1.5 * 2^23
 * rounds half to even (the default rounding mode; no -ffast-math), and maps NaN to the
 * low bound (max(NaN, lo) is lo). Written as plain loops gcc vectorises. */
#define ML_QREQUANT_(T, M)                                                                   \
    for (int j = 0; j < nr; ++j) {                                                           \
        float f = (float)(t[j] + b) * (M);                                                   \
        f = f > flo ? f : flo;                                                               \
        f = f < fhi ? f : fhi;                                                               \
        f = (f + 12582912.0f) - 12582912.0f;                                                 \
        ((T*)y)[j] = (T)((int32_t)f + zp);                                                   \
    }

ML_QINLINE void ml_qrequant_row(const int32_t* restrict t, int nr, int32_t b,
                                const float* restrict mult, int step, int32_t zp, int is_u8,
                                void* restrict y) {
    float flo = (float)((is_u8 ? 0 : -128) - zp), fhi = (float)((is_u8 ? 255 : 127) - zp);
    float m0 = mult[0];
    if (is_u8 && step) { ML_QREQUANT_(uint8_t, mult[j]) }
    else if (is_u8) { ML_QREQUANT_(uint8_t, m0) }
    else if (step) { ML_QREQUANT_(int8_t, mult[j]) }
    else { ML_QREQUANT_(int8_t, m0) }
}
#undef ML_QREQUANT_

/* Store rows 0..mr-1, columns 0..nr-1 of a tile whose top-left is (m, n). */
ML_QINLINE void ml_qstore(const ml_qout* o, int64_t m, int64_t n, int mr, int nr,
                          int32_t t[ML_QMR][ML_QNR], const int32_t* bias_m) {
    for (int r = 0; r < mr; ++r) {
        int32_t b = bias_m ? bias_m[m + r] : 0;
        if (o->bias_n)
            for (int j = 0; j < nr; ++j) t[r][j] += o->bias_n[n + j];
        if (o->kind == ML_QOUT_F32) {
            float* c = (float*)o->y + (m + r) * o->ld + n;
            const float* mu = o->mult + (o->mult_mode == ML_QMULT_COL ? n : 0);
            int step = o->mult_mode == ML_QMULT_COL;
            for (int j = 0; j < nr; ++j) c[j] = (float)(t[r][j] + b) * mu[step * j];
            if (o->fbias)
                for (int j = 0; j < nr; ++j) c[j] += o->fbias[n + j];
            continue;
        }
        if (o->kind == ML_QOUT_I32) {
            int32_t* c = (int32_t*)o->y + (m + r) * o->ld + n;
            for (int j = 0; j < nr; ++j) c[j] = t[r][j] + b;
            continue;
        }
        const float* mult = o->mult + (o->mult_mode == ML_QMULT_ROW ? m + r : 0) +
                            (o->mult_mode == ML_QMULT_COL ? n : 0);
        int step = o->mult_mode == ML_QMULT_COL;
        uint8_t* y = (uint8_t*)o->y + (m + r) * o->ld + n; /* one byte per element */
        ml_qrequant_row(t[r], nr, b, mult, step, o->zp, o->kind == ML_QOUT_U8, y);
    }
}

/* Store n values v of row m from column n0 as ml_qstore would (no bias_n): one call per
 * run of a row (the depthwise kernel's output rows), not per 16 columns. */
ML_QUNUSED static void ml_qstore_run(const ml_qout* o, int64_t m, int64_t n0, int64_t n,
                                     const int32_t* restrict v) {
    const int step = o->mult_mode == ML_QMULT_COL;
    const float* mu = o->mult + (o->mult_mode == ML_QMULT_ROW ? m : 0) + (step ? n0 : 0);
    if (o->kind == ML_QOUT_I32) {
        memcpy((int32_t*)o->y + m * o->ld + n0, v, (size_t)n * sizeof(int32_t));
    } else if (o->kind == ML_QOUT_F32) {
        float* c = (float*)o->y + m * o->ld + n0;
        for (int64_t j = 0; j < n; ++j) c[j] = (float)v[j] * mu[step * j];
        if (o->fbias)
            for (int64_t j = 0; j < n; ++j) c[j] += o->fbias[n0 + j];
    } else {
        uint8_t* y = (uint8_t*)o->y + m * o->ld + n0; /* one byte per element */
        for (int64_t j = 0; j < n; j += 1024) /* ml_qrequant_row takes an int count */
            ml_qrequant_row(v + j, (int)ML_QMIN(1024, n - j), 0, mu + step * j, step, o->zp,
                            o->kind == ML_QOUT_U8, y + j);
    }
}

/* The micro-kernel: a rows x QNR tile (rows <= QMR) over kp2 pairs of K. With AVX-512
 * VNNI one vpdpwssd per row and pair of K: the 16 columns' int16 pairs of a packed B row
 * are one 512-bit register, multiplied, pair-summed and accumulated in one instruction
 * (exact: the same int32 sums as pmaddwd + paddd, a quarter of the instructions). */
#if defined(__AVX512VNNI__) && defined(__AVX512F__) && defined(__GNUC__) && \
    !defined(ML_QGEMM_PORTABLE)
typedef int32_t ml_qz __attribute__((vector_size(64), aligned(4)));
ML_QINLINE ml_qz ml_qdp(ml_qz acc, ml_qz a, ml_qz b) {
#if defined(__clang__)
    return (ml_qz)__builtin_ia32_vpdpwssd512(acc, a, b);
#else
    return (ml_qz)__builtin_ia32_vpdpwssd_v16si(acc, a, b);
#endif
}
ML_QINLINE void ml_qukernel(const int rows, int64_t kp2, const int16_t* restrict a,
                            const int16_t* restrict b, int32_t t[ML_QMR][ML_QNR]) {
    ml_qz acc[ML_QMR];
    for (int r = 0; r < rows; ++r) acc[r] = (ml_qz){0};
    for (int64_t k = 0; k < kp2; ++k) {
        ml_qz bv;
        memcpy(&bv, b + k * ML_QNR * 2, sizeof bv);
        for (int r = 0; r < rows; ++r) {
            int32_t pair;
            memcpy(&pair, a + k * ML_QMR * 2 + r * 2, 4);
            acc[r] = ml_qdp(acc[r], (ml_qz){0} + pair, bv);
        }
    }
    for (int r = 0; r < rows; ++r) memcpy(&t[r][0], &acc[r], sizeof acc[r]);
}
#else
ML_QINLINE void ml_qukernel(const int rows, int64_t kp2, const int16_t* restrict a,
                            const int16_t* restrict b, int32_t t[ML_QMR][ML_QNR]) {
    ml_qv8 acc[ML_QMR][2];
    for (int r = 0; r < rows; ++r) acc[r][0] = acc[r][1] = (ml_qv8){0};
    for (int64_t k = 0; k < kp2; ++k) {
        ml_qv16 b0 = *(const ml_qv16*)(b + k * ML_QNR * 2);
        ml_qv16 b1 = *(const ml_qv16*)(b + k * ML_QNR * 2 + 16);
        for (int r = 0; r < rows; ++r) {
            int32_t pair;
            memcpy(&pair, a + k * ML_QMR * 2 + r * 2, 4);
            ml_qv16 av = (ml_qv16)((ml_qv8){0} + pair);
            acc[r][0] += ml_qmadd(av, b0);
            acc[r][1] += ml_qmadd(av, b1);
        }
    }
    for (int r = 0; r < rows; ++r) {
        memcpy(&t[r][0], &acc[r][0], 32);
        memcpy(&t[r][8], &acc[r][1], 32);
    }
}
#endif

/* Columns n_begin..n_end-1 of the GEMM described by g. */
ML_QUNUSED static void ml_qgemm(const ml_qgemm_args* g) {
    int64_t kp = (g->K + 1) & ~(int64_t)1, ncb = ml_qgemm_nc(g->K);
    int32_t t[ML_QMR][ML_QNR] __attribute__((aligned(64)));
    for (int64_t jc = g->n_begin; jc < g->n_end; jc += ncb) {
        int64_t nc = ML_QMIN(ncb, g->n_end - jc);
        const int16_t* bp;
        if (g->b.kind == ML_QB_PACKED) {
            bp = g->b.p16 + (jc / ML_QNR) * kp * ML_QNR;
        } else {
            ml_qpack_b(&g->b, g->K, jc, nc, g->bbuf);
            bp = g->bbuf;
        }
        for (int64_t jr = 0; jr < nc; jr += ML_QNR) {
            int nr = (int)ML_QMIN(ML_QNR, nc - jr);
            const int16_t* b = bp + (jr / ML_QNR) * kp * ML_QNR;
            for (int64_t m = 0; m < g->M; m += ML_QMR) {
                int mr = (int)ML_QMIN(ML_QMR, g->M - m);
                const int16_t* a = g->a + (m / ML_QMR) * kp * ML_QMR;
                if (mr == 1) ml_qukernel(1, kp / 2, a, b, t);
                else if (mr <= 2) ml_qukernel(2, kp / 2, a, b, t);
                else if (mr <= 4) ml_qukernel(4, kp / 2, a, b, t);
                else ml_qukernel(ML_QMR, kp / 2, a, b, t);
                ml_qstore(&g->out, m, jc + jr, mr, nr, t, g->bias_m);
            }
        }
    }
}

#ifdef MONOLIB_THREADPOOL_H
typedef struct {
    const ml_qgemm_args* g;
    int64_t chunk;
} ml_qgemm_job;

static void ml_qgemm_task(void* ctx, int64_t t, void* scratch) {
    const ml_qgemm_job* j = (const ml_qgemm_job*)ctx;
    ml_qgemm_args a = *j->g;
    a.n_begin = j->g->n_begin + t * j->chunk;
    a.n_end = ML_QMIN(j->g->n_end, a.n_begin + j->chunk);
    a.bbuf = (int16_t*)scratch;
    ml_qgemm(&a);
}
#endif

/* ml_qgemm split over column chunks (multiples of QNR) on the thread pool (threadpool.h,
 * when included before) when large; each chunk packs B into its own buffer. */
ML_QUNUSED static void ml_qgemm_par(const ml_qgemm_args* g) {
#ifdef MONOLIB_THREADPOOL_H
    int64_t n = g->n_end - g->n_begin, units = (n + ML_QNR - 1) / ML_QNR;
    /* an int8 multiply-add costs about half a float one */
    int64_t tasks = ml_par_tasks(0.5 * (double)g->M * n * g->K, units);
    if (tasks > 1) {
        ml_qgemm_job j = {g, (units + tasks - 1) / tasks * ML_QNR};
        int64_t nt = (n + j.chunk - 1) / j.chunk;
        size_t bytes = g->b.kind == ML_QB_PACKED ? 0 : (size_t)ml_qgemm_bbuf_bytes(g->K, j.chunk);
        ml_parallel_for(nt, ml_qgemm_task, &j, g->bbuf, bytes);
        return;
    }
#endif
    ml_qgemm(g);
}

/* Depthwise convolution (group == C_in == C_out) of an 8-bit [C][H][W] image: channel c
 * is sum over taps of (x - xzp) * w16[c][tap] (+ bias[c]), w16 the int16 weights with
 * their zero points subtracted; output channel c stored as by ml_qstore with row c.
 * The sums are taken in float: each product is an integer of at most 255 * 255 and a
 * channel has KH*KW <= ML_QDW_FTAPS of them, so every partial sum stays below 2^24 and
 * is exact (one FMA per 16 outputs where the int32 multiply-add was a widening
 * sequence). With stride 1 the taps run over the padded plane as one vector: outputs
 * at every column of the plane's rows (the Wp - OW extra ones are discarded), so a
 * 14x14 map is one loop of 248 lanes per tap instead of 14 of 14. More taps: the int32
 * path. Scratch (ml_qdw_scratch_bytes): the plane, then the sums. */
#define ML_QDW_FTAPS 258
typedef float ml_qdwv __attribute__((vector_size(64)));
typedef struct {
    int64_t C, H, W, OH, OW, KH, KW, SH, SW, PT, PL, DH, DW, Hp, Wp;
    const void* x;
    int is_signed;
    int32_t xzp;
    const int16_t* w;
    const int32_t* bias;
    ml_qout out;
} ml_qdw_args;

/* Bytes of scratch ml_qdwconv needs per thread (Wp: the padded width + SW - 1). */
static inline int64_t ml_qdw_scratch_bytes(int64_t Hp, int64_t Wp, int64_t OW) {
    return ((4 * Hp * Wp + 63) / 64) * 64 + 4 * (Hp * Wp + OW) + 64;
}

static void ml_qdw_channel(const ml_qdw_args* d, int64_t c, void* scratch) {
    const int64_t ohw = d->OH * d->OW, hw = d->Hp * (d->Wp + d->SW - 1), taps = d->KH * d->KW;
    float* plane = (float*)scratch;
    float* acc = (float*)((uint8_t*)scratch + ((4 * hw + 63) / 64) * 64);
    const int16_t* w = d->w + c * taps;
    int32_t b = d->bias ? d->bias[c] : 0;
    ml_qout o = d->out;
    o.ld = ohw;
    /* rows of Wr floats; with a column stride SW > 1 each row holds its SW column phases
     * one after the other (padded column j at (j % SW) * Wq + j / SW), so a tap's inputs
     * along an output row are contiguous */
    const int64_t Wq = (d->Wp + d->SW - 1) / d->SW, Wr = Wq * d->SW;
    { /* the channel minus its zero point, zero-padded (the zero point's value) */
        const int64_t h_end = ML_QMIN(d->H, d->Hp - d->PT), w_end = ML_QMIN(d->W, d->Wp - d->PL);
        const uint8_t* xu = (const uint8_t*)d->x + c * d->H * d->W;
        const int8_t* xs = (const int8_t*)d->x + c * d->H * d->W;
        /* zeros where no input lands: rows above and below, and each row's borders
         * (the whole row with column phases); zeroing the whole plane first was a
         * quarter of a 112x112 channel's time */
        for (int64_t i = 0; i < ML_QMIN(d->PT, d->Hp) * Wr; ++i) plane[i] = 0.0f;
        for (int64_t i = (d->PT + h_end) * Wr; i < d->Hp * Wr; ++i) plane[i] = 0.0f;
        for (int64_t h = 0; h < h_end; ++h) {
            float* p = plane + (h + d->PT) * Wr;
            if (d->SW == 1) {
                for (int64_t j = 0; j < d->PL; ++j) p[j] = 0.0f;
                for (int64_t j = d->PL + w_end; j < Wr; ++j) p[j] = 0.0f;
                p += d->PL;
                if (d->is_signed)
                    for (int64_t j = 0; j < w_end; ++j) p[j] = (float)(xs[h * d->W + j] - d->xzp);
                else
                    for (int64_t j = 0; j < w_end; ++j) p[j] = (float)(xu[h * d->W + j] - d->xzp);
                continue;
            }
            for (int64_t j = 0; j < Wr; ++j) p[j] = 0.0f;
            if (d->SW == 2 && !d->is_signed) {
                /* even and odd input columns to their phases in one pass gcc vectorises
                 * (loads deinterleaved; the strided loop below was most of the time) */
                const int64_t e = d->PL & 1, half = w_end / 2;
                float* q0 = p + e * Wq + d->PL / 2;
                float* q1 = p + (1 - e) * Wq + (d->PL + 1) / 2;
                const uint8_t* xr = xu + h * d->W;
                for (int64_t i = 0; i < half; ++i) {
                    q0[i] = (float)(xr[2 * i] - d->xzp);
                    q1[i] = (float)(xr[2 * i + 1] - d->xzp);
                }
                if (w_end & 1) q0[half] = (float)(xr[w_end - 1] - d->xzp);
            } else {
                for (int64_t ph = 0; ph < d->SW; ++ph) { /* input columns j, j + SW, ... */
                    const int64_t j0 = ((ph - d->PL) % d->SW + d->SW) % d->SW;
                    float* q = p + ph * Wq + (d->PL + j0) / d->SW;
                    if (d->is_signed)
                        for (int64_t j = j0; j < w_end; j += d->SW, ++q)
                            *q = (float)(xs[h * d->W + j] - d->xzp);
                    else
                        for (int64_t j = j0; j < w_end; j += d->SW, ++q)
                            *q = (float)(xu[h * d->W + j] - d->xzp);
                }
            }
        }
    }
    /* sums for outputs (oh, ow) at acc[oh * ldr + ow] */
    int64_t ldr = d->OW;
    if (d->SH == 1 && d->SW == 1) {
        /* 64 outputs at a time held in 4 vectors over all taps (no sum to memory and
         * back per tap), the last few by the scalar loop */
        const int64_t len = (d->OH - 1) * d->Wp + d->OW;
        int64_t i0 = 0;
        ldr = d->Wp;
        for (; i0 + 64 <= len; i0 += 64) {
            ml_qdwv v0 = {0}, v1 = {0}, v2 = {0}, v3 = {0};
            for (int64_t ky = 0; ky < d->KH; ++ky)
                for (int64_t kx = 0; kx < d->KW; ++kx) {
                    ml_qdwv wv = {0}, s0, s1, s2, s3;
                    wv += (float)w[ky * d->KW + kx];
                    const float* src = plane + ky * d->DH * d->Wp + kx * d->DW + i0;
                    memcpy(&s0, src, 64);
                    memcpy(&s1, src + 16, 64);
                    memcpy(&s2, src + 32, 64);
                    memcpy(&s3, src + 48, 64);
                    v0 += wv * s0;
                    v1 += wv * s1;
                    v2 += wv * s2;
                    v3 += wv * s3;
                }
            memcpy(acc + i0, &v0, 64);
            memcpy(acc + i0 + 16, &v1, 64);
            memcpy(acc + i0 + 32, &v2, 64);
            memcpy(acc + i0 + 48, &v3, 64);
        }
        for (int64_t i = i0; i < len; ++i) acc[i] = 0.0f;
        for (int64_t ky = 0; ky < d->KH; ++ky)
            for (int64_t kx = 0; kx < d->KW; ++kx) {
                const float wv = (float)w[ky * d->KW + kx];
                const float* src = plane + ky * d->DH * d->Wp + kx * d->DW;
                for (int64_t i = i0; i < len; ++i) acc[i] += wv * src[i];
            }
    } else {
        for (int64_t oh = 0; oh < d->OH; ++oh) {
            float* row = acc + oh * d->OW;
            for (int64_t ow = 0; ow < d->OW; ++ow) row[ow] = 0.0f;
            for (int64_t ky = 0; ky < d->KH; ++ky)
                for (int64_t kx = 0; kx < d->KW; ++kx) {
                    const float wv = (float)w[ky * d->KW + kx];
                    const int64_t col = kx * d->DW;
                    const float* src = plane + (oh * d->SH + ky * d->DH) * Wr +
                                       (col % d->SW) * Wq + col / d->SW;
                    for (int64_t ow = 0; ow < d->OW; ++ow) row[ow] += wv * src[ow];
                }
        }
    }
    (void)taps;
    int32_t* row = (int32_t*)(acc + hw);
    for (int64_t oh = 0; oh < d->OH; ++oh) {
        const float* a = acc + oh * ldr;
        for (int64_t j = 0; j < d->OW; ++j) row[j] = (int32_t)a[j] + b;
        /* the row's "tile" row is channel c: ROW multipliers index by c */
        ml_qstore_run(&o, c, oh * d->OW, d->OW, row);
    }
}

/* The int32 form for more than ML_QDW_FTAPS taps (scratch: the int16 plane, a row). */
static void ml_qdw_channel_i32(const ml_qdw_args* d, int64_t c, void* scratch) {
    const int64_t ohw = d->OH * d->OW;
    int16_t* plane = (int16_t*)scratch;
    int32_t* row = (int32_t*)((uint8_t*)scratch + ((2 * d->Hp * d->Wp + 63) / 64) * 64);
    ml_qpad_image(1, d->H, d->W, d->Hp, d->Wp, d->PT, d->PL,
                  (const uint8_t*)d->x + c * d->H * d->W, d->is_signed, d->xzp, plane);
    const int16_t* w = d->w + c * d->KH * d->KW;
    int32_t b = d->bias ? d->bias[c] : 0;
    ml_qout o = d->out;
    o.ld = ohw;
    for (int64_t oh = 0; oh < d->OH; ++oh) {
        for (int64_t ow = 0; ow < d->OW; ++ow) row[ow] = b;
        for (int64_t ky = 0; ky < d->KH; ++ky)
            for (int64_t kx = 0; kx < d->KW; ++kx) {
                const int16_t* src = plane + (oh * d->SH + ky * d->DH) * d->Wp + kx * d->DW;
                int32_t wv = w[ky * d->KW + kx];
                for (int64_t ow = 0; ow < d->OW; ++ow) row[ow] += wv * src[ow * d->SW];
            }
        ml_qstore_run(&o, c, oh * d->OW, d->OW, row);
    }
}

static void ml_qdw_any(const ml_qdw_args* d, int64_t c, void* scratch) {
    if (d->KH * d->KW <= ML_QDW_FTAPS) ml_qdw_channel(d, c, scratch);
    else ml_qdw_channel_i32(d, c, scratch);
}

#ifdef MONOLIB_THREADPOOL_H
static void ml_qdw_task(void* ctx, int64_t t, void* scratch) {
    ml_qdw_any((const ml_qdw_args*)ctx, t, scratch);
}
#endif

ML_QUNUSED static void ml_qdwconv(const ml_qdw_args* d, void* scratch) {
#ifdef MONOLIB_THREADPOOL_H
    size_t bytes = (size_t)ml_qdw_scratch_bytes(d->Hp, d->Wp + d->SW - 1, d->OW);
    double work = 0.5 * (double)d->C * d->OH * d->OW * d->KH * d->KW * 4;
    if (ml_par_tasks(work, d->C) > 1) {
        ml_parallel_for(d->C, ml_qdw_task, (void*)d, scratch, bytes);
        return;
    }
#endif
    for (int64_t c = 0; c < d->C; ++c) ml_qdw_any(d, c, scratch);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_QGEMM_H */
