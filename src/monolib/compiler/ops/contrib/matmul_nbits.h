/* matmul_nbits.h -- float32 A times 4-bit block-quantized B (com.microsoft MatMulNBits).
 *
 * B stays 4-bit in the library: [N][nblk][bs/2] bytes, element k of row n in the low
 * nibble of byte k/2 when k is even, the high nibble when odd (ONNX Runtime's layout);
 * w = (q - zp) * scale per block of bs along K. Two paths, both dequantizing on the fly:
 *
 *  - few rows (ml_nbits_gemv): A is copied once per call into a nibble-ordered layout
 *    (per group of G = min(bs, 32) elements: the even ones, then the odd ones), so the
 *    low and the high nibbles of G/2 bytes each meet a contiguous vector of A. Per block
 *    sum_k q*a is accumulated in vectors, then scaled; the zero point enters once per
 *    block as zp * scale * sum(a over the block) (the block sums computed with the copy).
 *  - more rows (ml_nbits_gemm): gemm.h's structure. A is packed full-K; each KC x NC
 *    block of B^T is dequantized into a panel buffer and ml_gemm_block's micro-kernel
 *    runs on it, so the dequantization is paid once per block for all M rows.
 *
 * Both split N over the thread pool; a split never cuts a sum (same bits at any count).
 * Needs gemm.h (and threadpool.h) pasted before.
 */
#ifndef MONOLIB_MATMUL_NBITS_H
#define MONOLIB_MATMUL_NBITS_H
#include <stdint.h>
#include <string.h>

/* rows up to which the GEMV path runs (B is decoded once per row there) */
#define ML_NBITS_GEMV_ROWS 4
/* columns of one task of the GEMM path (multiple of 32) */
#define ML_NBITS_NCHUNK 256

typedef struct {
    int64_t M, N, K, bs, nblk;
    const float* a;           /* [M][K] */
    const uint8_t* b;         /* [N][nblk][bs/2] */
    const float* scales;      /* [N][nblk] */
    const uint8_t* zp_u8;     /* [N][(nblk+1)/2] packed nibbles, or NULL */
    const float* zp_f;        /* [N][nblk], or NULL (both NULL: 8) */
    const float* bias;        /* [N] or NULL */
    float* c;                 /* [M][N] */
    float* work;              /* ml_nbits_work_floats(M, K, bs) floats */
    int64_t n_per_task;
} ml_nbits_args;

typedef uint8_t ml_q8 __attribute__((vector_size(8)));
typedef uint8_t ml_q16 __attribute__((vector_size(16)));
typedef float ml_f8 __attribute__((vector_size(32), aligned(4)));
typedef float ml_f16 __attribute__((vector_size(64), aligned(4)));

ML_INLINE float ml_nbits_zp(const ml_nbits_args* g, int64_t n, int64_t blk) {
    if (g->zp_f) return g->zp_f[n * g->nblk + blk];
    if (g->zp_u8) {
        uint8_t z = g->zp_u8[n * ((g->nblk + 1) / 2) + blk / 2];
        return (float)((blk & 1) ? z >> 4 : z & 15);
    }
    return 8.0f;
}

/* Floats of the work buffer: the nibble-ordered A and its block sums (GEMV path), or
 * the packed A (GEMM path). */
static inline int64_t ml_nbits_work_floats(int64_t M, int64_t K, int64_t bs) {
    int64_t nblk = (K + bs - 1) / bs;
    int64_t gemv = M * (nblk * bs + nblk);
    int64_t gemm = (M + ML_MR - 1) / ML_MR * ML_MR * K;
    return gemv > gemm ? gemv : gemm;
}

/* Nibble-ordered copy of row a (K floats, zero-padded to nblk*bs) and its block sums. */
static inline void ml_nbits_order_a(const float* a, int64_t K, int64_t bs, int64_t nblk,
                                    float* restrict dst, float* restrict sums) {
    int64_t G = bs < 32 ? bs : 32, h = G / 2;
    for (int64_t blk = 0; blk < nblk; ++blk) {
        float s = 0.0f;
        for (int64_t g0 = blk * bs; g0 < (blk + 1) * bs; g0 += G)
            for (int64_t j = 0; j < h; ++j) {
                int64_t k = g0 + 2 * j;
                float e = k < K ? a[k] : 0.0f, o = k + 1 < K ? a[k + 1] : 0.0f;
                dst[g0 + j] = e;
                dst[g0 + h + j] = o;
                s += e + o;
            }
        sums[blk] = s;
    }
}

/* y[n] for n in [n0, n1) of one row (ordered A `ao`, block sums `as`). */
static inline void ml_nbits_row(const ml_nbits_args* g, const float* restrict ao,
                                const float* restrict as, float* restrict y, int64_t n0,
                                int64_t n1) {
    const int64_t bs = g->bs, nblk = g->nblk, bb = bs / 2;
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* q = g->b + n * nblk * bb;
        const float* sc = g->scales + n * nblk;
        float zs = 0.0f;
        if (bs >= 32) {
            ml_f16 tot = {0};
            for (int64_t blk = 0; blk < nblk; ++blk) {
                const uint8_t* qb = q + blk * bb;
                const float* ab = ao + blk * bs;
                ml_f16 acc = {0};
                for (int64_t i = 0; i < bb; i += 16) {
                    ml_q16 v;
                    memcpy(&v, qb + i, 16);
                    ml_f16 lo = __builtin_convertvector(v & 15, ml_f16);
                    ml_f16 hi = __builtin_convertvector(v >> 4, ml_f16);
                    acc += lo * *(const ml_f16*)(ab + 2 * i) + hi * *(const ml_f16*)(ab + 2 * i + 16);
                }
                tot += acc * sc[blk];
                zs += ml_nbits_zp(g, n, blk) * sc[blk] * as[blk];
            }
            float s = 0.0f;
            for (int j = 0; j < 16; ++j) s += tot[j];
            y[n] = s - zs;
        } else { /* bs == 16: one group of 8 bytes per block */
            ml_f8 tot = {0};
            for (int64_t blk = 0; blk < nblk; ++blk) {
                ml_q8 v;
                memcpy(&v, q + blk * 8, 8);
                const float* ab = ao + blk * 16;
                ml_f8 acc = __builtin_convertvector(v & 15, ml_f8) * *(const ml_f8*)ab +
                            __builtin_convertvector(v >> 4, ml_f8) * *(const ml_f8*)(ab + 8);
                tot += acc * sc[blk];
                zs += ml_nbits_zp(g, n, blk) * sc[blk] * as[blk];
            }
            float s = 0.0f;
            for (int j = 0; j < 8; ++j) s += tot[j];
            y[n] = s - zs;
        }
        if (g->bias) y[n] += g->bias[n];
    }
}

static void ml_nbits_gemv_task(void* ctx, int64_t t, void* scratch) {
    (void)scratch;
    const ml_nbits_args* g = (const ml_nbits_args*)ctx;
    int64_t n0 = t * g->n_per_task, n1 = ML_MIN(g->N, n0 + g->n_per_task);
    int64_t kp = g->nblk * g->bs;
    for (int64_t m = 0; m < g->M; ++m)
        ml_nbits_row(g, g->work + m * kp, g->work + g->M * kp + m * g->nblk, g->c + m * g->N,
                     n0, n1);
}

/* Dequantize B^T rows k0..k0+kc-1, columns n0..n0+nc-1 into gemm.h panels of NR
 * (stride kc*NR), zeroing the columns past nc in the last panel. */
static inline void ml_nbits_dequant_block(const ml_nbits_args* g, int64_t k0, int64_t kc,
                                          int64_t n0, int64_t nc, float* restrict dst) {
    const int64_t bb = g->bs / 2;
    for (int64_t j = 0; j < nc; ++j) {
        int64_t n = n0 + j;
        float* d = dst + (j / ML_NR) * kc * ML_NR + j % ML_NR;
        const uint8_t* q = g->b + n * g->nblk * bb;
        for (int64_t k = k0; k < k0 + kc;) {
            int64_t blk = k / g->bs, end = ML_MIN(k0 + kc, (blk + 1) * g->bs);
            float s = g->scales[n * g->nblk + blk], zs = ml_nbits_zp(g, n, blk) * s;
            const uint8_t* qb = q + blk * bb;
            for (; k < end; ++k) {
                int64_t r = k - blk * g->bs;
                uint8_t v = qb[r >> 1];
                d[(k - k0) * ML_NR] = (float)((r & 1) ? v >> 4 : v & 15) * s - zs;
            }
        }
    }
    if (nc % ML_NR)
        for (int64_t k = 0; k < kc; ++k)
            for (int64_t j = nc % ML_NR; j < ML_NR; ++j)
                dst[((nc - 1) / ML_NR) * kc * ML_NR + k * ML_NR + j] = 0.0f;
}

static void ml_nbits_gemm_task(void* ctx, int64_t t, void* scratch) {
    const ml_nbits_args* g = (const ml_nbits_args*)ctx;
    float* bbuf = (float*)scratch;
    int64_t n0 = t * g->n_per_task, n1 = ML_MIN(g->N, n0 + g->n_per_task);
    ml_gemm_args ga = ml_gemm_defaults(g->M, g->N, g->K, g->work, g->c);
    ga.bias_n = g->bias;
    for (int64_t pc = 0; pc < g->K; pc += ML_KC) {
        int64_t kc = ML_MIN(ML_KC, g->K - pc);
        ml_nbits_dequant_block(g, pc, kc, n0, n1 - n0, bbuf);
        for (int64_t ic = 0; ic < g->M; ic += ML_MC)
            ml_gemm_block(&ga, ic, ML_MIN(ML_MC, g->M - ic), pc, kc, n0, n1 - n0, bbuf,
                          kc * ML_NR);
    }
}

/* Bytes of the per-thread scratch of the GEMM path (the dequantized B block). */
static inline int64_t ml_nbits_scratch_bytes(int64_t K) {
    return 4 * ML_MIN(K, ML_KC) * ML_NBITS_NCHUNK;
}

/* C = A dequant(B)^T (+ bias). `scratch` is ml_nbits_scratch_bytes(K) bytes. */
ML_UNUSED static void ml_matmul_nbits(ml_nbits_args* g, void* scratch) {
    if (g->M == 0 || g->N == 0) return;
    if (g->K == 0) {
        for (int64_t m = 0; m < g->M; ++m)
            for (int64_t n = 0; n < g->N; ++n) g->c[m * g->N + n] = g->bias ? g->bias[n] : 0.0f;
        return;
    }
    int64_t tasks, units;
    if (g->M <= ML_NBITS_GEMV_ROWS) {
        int64_t kp = g->nblk * g->bs;
        for (int64_t m = 0; m < g->M; ++m)
            ml_nbits_order_a(g->a + m * g->K, g->K, g->bs, g->nblk, g->work + m * kp,
                             g->work + g->M * kp + m * g->nblk);
        units = (g->N + 15) / 16;
        tasks = ml_par_tasks((double)g->M * g->N * g->K, units);
        g->n_per_task = (units + tasks - 1) / tasks * 16;
        ml_parallel_for((g->N + g->n_per_task - 1) / g->n_per_task, ml_nbits_gemv_task, g, 0, 0);
        return;
    }
    ml_pack_a_par(g->M, g->K, g->a, g->K, 1, g->work);
    g->n_per_task = ML_NBITS_NCHUNK;
    ml_parallel_for((g->N + ML_NBITS_NCHUNK - 1) / ML_NBITS_NCHUNK, ml_nbits_gemm_task, g,
                    scratch, (size_t)ml_nbits_scratch_bytes(g->K));
}

#endif /* MONOLIB_MATMUL_NBITS_H */
