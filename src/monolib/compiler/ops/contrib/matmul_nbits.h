/* matmul_nbits.h -- float32 A times 4-bit block-quantized B (com.microsoft MatMulNBits).
 *
 * B stays 4-bit in the library, repacked at compile time into column panels of ML_NR
 * (16) for vector loads: byte (p, i, c) of `q` (panel p, K pair i, column c) holds
 * W[16p + c][2i] in its low nibble and W[16p + c][2i + 1] in its high one. Per panel and
 * block, `s` holds the 16 scales and `zs` the 16 products zero_point * scale, so
 * w = q * s - zs. Two paths, both dequantizing on the fly:
 *
 *  - up to ML_NBITS_GEMV_ROWS rows (ml_nbits_gemv): per pair of K, one 16-byte load
 *    gives 16 columns of two K rows; the rows of A (up to 4 at once) are broadcast
 *    against them; per block the sums are scaled and zs * sum(A over the block) taken
 *    off. No horizontal sums, every column a vector lane.
 *  - more rows (ml_nbits_gemm): gemm.h's structure. A is packed full-K; each KC x 256
 *    block of B^T is dequantized (two vector stores per byte vector) straight into
 *    gemm.h's panel layout and ml_gemm_block's micro-kernel runs on it, so the
 *    dequantization is paid once per block for all M rows.
 *
 * Both split N over the thread pool; a split never cuts a sum (same bits at any count).
 * Needs threadpool.h and gemm.h pasted before.
 */
#ifndef MONOLIB_MATMUL_NBITS_H
#define MONOLIB_MATMUL_NBITS_H
#include <stdint.h>
#include <string.h>

/* rows up to which the GEMV path runs, and its register tile of rows */
#define ML_NBITS_GEMV_ROWS 8
#define ML_NBITS_RT 4
/* columns of one task of the GEMM path (a multiple of 32) */
#define ML_NBITS_NCHUNK 256

typedef struct {
    int64_t M, N, K, bs, nblk;
    const float* a;        /* [M][K] */
    const uint8_t* q;      /* [ceil(N/16)][ceil(K/2)][16] */
    const float* s;        /* [ceil(N/16)][nblk][16] scales */
    const float* zs;       /* [ceil(N/16)][nblk][16] zero point * scale */
    const float* bias;     /* [N] or NULL */
    float* c;              /* [M][N] */
    float* work;           /* ml_nbits_work_floats(M, K, bs) floats */
    int64_t panels_per_task;
} ml_nbits_args;

/* Vectors of gemm.h's width ML_VW (16 floats on AVX-512, 8 on AVX2, 4 on SSE): a panel's
 * 16 columns are ML_NV of them. The nibbles are masked in the byte vector, widened to
 * int32 and converted: the high one as 16 * q (a byte shift or a conversion straight
 * from the loaded bytes is scalarized by gcc on some widths), its factor 1/16 folded
 * into the odd elements of A (GEMV) or the scale (dequantization), both exact. */
typedef uint8_t ml_nb_qv __attribute__((vector_size(ML_VW)));
typedef int32_t ml_nb_iv __attribute__((vector_size(ML_VW * 4)));
#define ML_NB_CVT(v) __builtin_convertvector(__builtin_convertvector((v), ml_nb_iv), ml_vf)
#define ML_NB_LO(b) ML_NB_CVT((b) & 15)
#define ML_NB_HI16(b) ML_NB_CVT((b) & 0xF0)
/* independent sums per row and vector (even/odd pair x low/high nibble, or low/high):
 * one chain of dependent FMAs would bound a row at one FMA per FMA latency; fewer and a
 * smaller row tile where the ISA has fewer registers */
#define ML_NB_CH (ML_NV == 1 ? 4 : 2)
#define ML_NB_RT (ML_NV == 1 ? ML_NBITS_RT : ML_NBITS_RT / 2)

ML_INLINE ml_nb_qv ml_nb_load(const uint8_t* p) {
    ml_nb_qv v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Floats of the work buffer: A padded to an even K plus its block sums (GEMV path), or
 * the packed A (GEMM path). */
static inline int64_t ml_nbits_work_floats(int64_t M, int64_t K, int64_t bs) {
    int64_t nblk = (K + bs - 1) / bs;
    int64_t gemv = M * (K + (K & 1) + nblk);
    int64_t gemm = (M + ML_MR - 1) / ML_MR * ML_MR * K;
    return gemv > gemm ? gemv : gemm;
}

/* Rows r0..r0+rows-1 of C, panel p (16 columns), A rows at ap (stride kp), block sums
 * at as (stride nblk). */
ML_INLINE void ml_nbits_panel(const ml_nbits_args* g, const int rows, const float* ap,
                              int64_t kp, const float* as, int64_t p, float* c) {
    const int64_t nblk = g->nblk, kp2 = (g->K + 1) / 2, hb = g->bs / 2;
    const int step = ML_NB_CH / 2; /* pairs of K per iteration */
    const uint8_t* q = g->q + p * kp2 * 16;
    ml_vf tot[ML_NBITS_RT][ML_NV];
    for (int r = 0; r < rows; ++r)
        for (int v = 0; v < ML_NV; ++v) tot[r][v] = (ml_vf){0};
    for (int64_t blk = 0; blk < nblk; ++blk) {
        ml_vf acc[ML_NBITS_RT][ML_NB_CH][ML_NV];
        for (int r = 0; r < rows; ++r)
            for (int u = 0; u < ML_NB_CH; ++u)
                for (int v = 0; v < ML_NV; ++v) acc[r][u][v] = (ml_vf){0};
        int64_t i = blk * hb, i1 = ML_MIN(kp2, (blk + 1) * hb);
        for (; i + step <= i1; i += step)
            for (int t = 0; t < step; ++t)
                for (int v = 0; v < ML_NV; ++v) {
                    ml_nb_qv b = ml_nb_load(q + (i + t) * 16 + v * ML_VW);
                    ml_vf lo = ML_NB_LO(b), hi = ML_NB_HI16(b);
                    for (int r = 0; r < rows; ++r) { /* x - 0.0f: a plain broadcast (gemm.h) */
                        const float* ar = ap + r * kp + 2 * (i + t);
                        acc[r][2 * t][v] += lo * (ar[0] - (ml_vf){0});
                        acc[r][2 * t + 1][v] += hi * (ar[1] - (ml_vf){0});
                    }
                }
        for (; i < i1; ++i) /* a pair left over: a last block cut short by K */
            for (int v = 0; v < ML_NV; ++v) {
                ml_nb_qv b = ml_nb_load(q + i * 16 + v * ML_VW);
                ml_vf lo = ML_NB_LO(b), hi = ML_NB_HI16(b);
                for (int r = 0; r < rows; ++r) {
                    acc[r][0][v] += lo * (ap[r * kp + 2 * i] - (ml_vf){0});
                    acc[r][1][v] += hi * (ap[r * kp + 2 * i + 1] - (ml_vf){0});
                }
            }
        const float* sp = g->s + (p * nblk + blk) * 16;
        const float* zp = g->zs + (p * nblk + blk) * 16;
        for (int v = 0; v < ML_NV; ++v) {
            ml_vf sv = *(const ml_vf*)(sp + v * ML_VW), zv = *(const ml_vf*)(zp + v * ML_VW);
            for (int r = 0; r < rows; ++r) {
                ml_vf sum = acc[r][0][v];
                for (int u = 1; u < ML_NB_CH; ++u) sum += acc[r][u][v];
                tot[r][v] += sum * sv - zv * as[r * nblk + blk];
            }
        }
    }
    int64_t nc = ML_MIN(16, g->N - p * 16);
    for (int r = 0; r < rows; ++r) {
        float t[16] __attribute__((aligned(64)));
        for (int v = 0; v < ML_NV; ++v) *(ml_vf*)(t + v * ML_VW) = tot[r][v];
        for (int64_t j = 0; j < nc; ++j)
            c[r * g->N + j] = t[j] + (g->bias ? g->bias[p * 16 + j] : 0.0f);
    }
}

static void ml_nbits_gemv_task(void* ctx, int64_t t, void* scratch) {
    (void)scratch;
    const ml_nbits_args* g = (const ml_nbits_args*)ctx;
    int64_t np = (g->N + 15) / 16, kp = g->K + (g->K & 1);
    int64_t p0 = t * g->panels_per_task, p1 = ML_MIN(np, p0 + g->panels_per_task);
    const float* as = g->work + g->M * kp;
    for (int64_t m = 0; m < g->M; m += ML_NB_RT) {
        int rows = (int)ML_MIN(ML_NB_RT, g->M - m);
        const float* ap = g->work + m * kp;
        for (int64_t p = p0; p < p1; ++p) {
            float* c = g->c + m * g->N + p * 16;
            /* specialised per row count: the accumulators stay in registers */
            if (rows == 1) ml_nbits_panel(g, 1, ap, kp, as + m * g->nblk, p, c);
            else if (rows == 2) ml_nbits_panel(g, 2, ap, kp, as + m * g->nblk, p, c);
            else if (rows == 3) ml_nbits_panel(g, 3, ap, kp, as + m * g->nblk, p, c);
            else ml_nbits_panel(g, 4, ap, kp, as + m * g->nblk, p, c);
        }
    }
}

/* Dequantize B^T rows k0..k0+kc-1 (k0 even), columns n0..n0+nc-1 (n0 % 16 == 0) into
 * gemm.h panels of NR = 16 (stride kc*NR); columns past N read zero scales. */
static inline void ml_nbits_dequant_block(const ml_nbits_args* g, int64_t k0, int64_t kc,
                                          int64_t n0, int64_t nc, float* restrict dst) {
    const int64_t kp2 = (g->K + 1) / 2, hb = g->bs / 2;
    for (int64_t p = n0 / 16; p < (n0 + nc + 15) / 16; ++p) {
        const uint8_t* q = g->q + p * kp2 * 16;
        float* d = dst + (p - n0 / 16) * kc * 16;
        for (int64_t i = k0 / 2; i < (k0 + kc + 1) / 2;) {
            int64_t blk = i / hb, i1 = ML_MIN((k0 + kc + 1) / 2, (blk + 1) * hb);
            const float* sp = g->s + (p * g->nblk + blk) * 16;
            const float* zp = g->zs + (p * g->nblk + blk) * 16;
            for (; i < i1; ++i) {
                int64_t k = 2 * i - k0;
                for (int v = 0; v < ML_NV; ++v) {
                    ml_vf sv = *(const ml_vf*)(sp + v * ML_VW);
                    ml_vf zv = *(const ml_vf*)(zp + v * ML_VW);
                    ml_nb_qv b = ml_nb_load(q + i * 16 + v * ML_VW);
                    *(ml_vf*)(d + k * 16 + v * ML_VW) = ML_NB_LO(b) * sv - zv;
                    if (k + 1 < kc) *(ml_vf*)(d + (k + 1) * 16 + v * ML_VW) = ML_NB_HI16(b) * (sv * 0.0625f) - zv;
                }
            }
        }
    }
}

static void ml_nbits_gemm_task(void* ctx, int64_t t, void* scratch) {
    const ml_nbits_args* g = (const ml_nbits_args*)ctx;
    float* bbuf = (float*)scratch;
    int64_t n0 = t * ML_NBITS_NCHUNK, n1 = ML_MIN(g->N, n0 + ML_NBITS_NCHUNK);
    ml_gemm_args ga = ml_gemm_defaults(g->M, g->N, g->K, g->work, g->c);
    ga.bias_n = g->bias;
    for (int64_t pc = 0; pc < g->K; pc += ML_KC) {
        int64_t kc = ML_MIN(ML_KC, g->K - pc);
        ml_nbits_dequant_block(g, pc, kc, n0, n1 - n0, bbuf);
        for (int64_t ic = 0; ic < g->M; ic += ML_MC)
            ml_gemm_block(&ga, ic, ML_MIN(ML_MC, g->M - ic), pc, kc, n0, n1 - n0, bbuf,
                          kc * ML_NR, 0);
    }
}

/* Bytes of the per-thread scratch of the GEMM path (one dequantized B block). */
static inline int64_t ml_nbits_scratch_bytes(int64_t K) {
    return 4 * ML_MIN(K, ML_KC) * ML_NBITS_NCHUNK;
}

/* C = A dequant(B)^T (+ bias). `scratch`: ml_nbits_scratch_bytes(K) bytes, 64-aligned. */
ML_UNUSED static void ml_matmul_nbits(ml_nbits_args* g, void* scratch) {
    if (g->M == 0 || g->N == 0) return;
    if (g->K == 0) {
        for (int64_t m = 0; m < g->M; ++m)
            for (int64_t n = 0; n < g->N; ++n) g->c[m * g->N + n] = g->bias ? g->bias[n] : 0.0f;
        return;
    }
    if (g->M <= ML_NBITS_GEMV_ROWS) {
        int64_t kp = g->K + (g->K & 1), np = (g->N + 15) / 16;
        float* as = g->work + g->M * kp;
        for (int64_t m = 0; m < g->M; ++m) { /* A padded to an even K, block sums */
            float* ap = g->work + m * kp;
            memcpy(ap, g->a + m * g->K, 4 * g->K);
            if (g->K & 1) ap[g->K] = 0.0f;
            for (int64_t blk = 0; blk < g->nblk; ++blk) {
                float sum = 0.0f;
                for (int64_t k = blk * g->bs; k < ML_MIN(g->K, (blk + 1) * g->bs); ++k) sum += ap[k];
                as[m * g->nblk + blk] = sum;
            }
            for (int64_t k = 1; k < kp; k += 2) ap[k] *= 0.0625f; /* the high nibble is 16 q */
        }
        int64_t tasks = ml_par_tasks((double)g->M * g->N * g->K, np);
        g->panels_per_task = (np + tasks - 1) / tasks;
        ml_parallel_for((np + g->panels_per_task - 1) / g->panels_per_task, ml_nbits_gemv_task,
                        g, 0, 0);
        return;
    }
    ml_pack_a_par(g->M, g->K, g->a, g->K, 1, g->work);
    ml_parallel_for((g->N + ML_NBITS_NCHUNK - 1) / ML_NBITS_NCHUNK, ml_nbits_gemm_task, g,
                    scratch, (size_t)ml_nbits_scratch_bytes(g->K));
}

#endif /* MONOLIB_MATMUL_NBITS_H */
