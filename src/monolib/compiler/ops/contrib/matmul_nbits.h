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

typedef uint8_t ml_nb_q16 __attribute__((vector_size(16)));
typedef int32_t ml_nb_i16 __attribute__((vector_size(64)));
typedef float ml_nb_f16 __attribute__((vector_size(64), aligned(4)));
/* bytes -> int32 -> float in two conversions: gcc scalarizes a direct uint8 -> float one */
#define ML_NB_F16(v) __builtin_convertvector(__builtin_convertvector((v), ml_nb_i16), ml_nb_f16)

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
    const uint8_t* q = g->q + p * kp2 * 16;
    ml_nb_f16 tot[ML_NBITS_RT];
    for (int r = 0; r < rows; ++r) tot[r] = (ml_nb_f16){0};
    for (int64_t blk = 0; blk < nblk; ++blk) {
        ml_nb_f16 acc[ML_NBITS_RT];
        for (int r = 0; r < rows; ++r) acc[r] = (ml_nb_f16){0};
        int64_t i1 = ML_MIN(kp2, (blk + 1) * hb);
        for (int64_t i = blk * hb; i < i1; ++i) {
            ml_nb_q16 v;
            memcpy(&v, q + i * 16, 16);
            ml_nb_f16 lo = ML_NB_F16(v & 15), hi = ML_NB_F16(v >> 4);
            for (int r = 0; r < rows; ++r) /* x - 0.0f: a plain broadcast (gemm.h) */
                acc[r] += lo * (ap[r * kp + 2 * i] - (ml_nb_f16){0}) +
                          hi * (ap[r * kp + 2 * i + 1] - (ml_nb_f16){0});
        }
        ml_nb_f16 sv = *(const ml_nb_f16*)(g->s + (p * nblk + blk) * 16);
        ml_nb_f16 zv = *(const ml_nb_f16*)(g->zs + (p * nblk + blk) * 16);
        for (int r = 0; r < rows; ++r) tot[r] += acc[r] * sv - zv * as[r * nblk + blk];
    }
    int64_t nc = ML_MIN(16, g->N - p * 16);
    for (int r = 0; r < rows; ++r)
        for (int64_t j = 0; j < nc; ++j)
            c[r * g->N + j] = tot[r][j] + (g->bias ? g->bias[p * 16 + j] : 0.0f);
}

static void ml_nbits_gemv_task(void* ctx, int64_t t, void* scratch) {
    (void)scratch;
    const ml_nbits_args* g = (const ml_nbits_args*)ctx;
    int64_t np = (g->N + 15) / 16, kp = g->K + (g->K & 1);
    int64_t p0 = t * g->panels_per_task, p1 = ML_MIN(np, p0 + g->panels_per_task);
    const float* as = g->work + g->M * kp;
    for (int64_t m = 0; m < g->M; m += ML_NBITS_RT) {
        int rows = (int)ML_MIN(ML_NBITS_RT, g->M - m);
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
            ml_nb_f16 sv = *(const ml_nb_f16*)(g->s + (p * g->nblk + blk) * 16);
            ml_nb_f16 zv = *(const ml_nb_f16*)(g->zs + (p * g->nblk + blk) * 16);
            for (; i < i1; ++i) {
                ml_nb_q16 v;
                memcpy(&v, q + i * 16, 16);
                int64_t k = 2 * i - k0;
                *(ml_nb_f16*)(d + k * 16) = ML_NB_F16(v & 15) * sv - zv;
                if (k + 1 < kc) *(ml_nb_f16*)(d + (k + 1) * 16) = ML_NB_F16(v >> 4) * sv - zv;
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
                          kc * ML_NR);
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
