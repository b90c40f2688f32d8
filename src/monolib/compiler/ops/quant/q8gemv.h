/* q8gemv.h -- integer matrix products with few rows whose constant 8-bit B (the
 * weights) stays one byte per value (monolib kernel library; include qgemm.h first:
 * the tiles are stored by its ml_qstore).
 *
 * C[m,n] = sum_k (A[m,k] - za) * (B[k,n] - zb[n]), exact in int32, for A uint8 (a
 * DynamicQuantizeLinear output) and B uint8 or int8. qgemm.h packs B as int16 with the
 * zero point subtracted: twice the bytes, and a product with one or a few rows (an LSTM
 * step, a batch-1 MatMul) is bound by reading B. Here B is packed as int8 bytes
 * b' = B - ob (ob 128 for uint8 weights, 0 for int8) and multiplied raw; the zero
 * points come back as sums:
 *   C = D + alpha * colsum[n] + beta[n] * rowsum[m] + K * alpha * beta[n],
 *   D = sum_k A[m,k] * b'[k,n], alpha = -za, beta[n] = ob - zb[n],
 *   colsum[n] = sum_k b'[k,n] (at compile time), rowsum[m] = sum_k A[m,k].
 * AVX-512 VNNI: vpdpbusd multiplies 4 uint8 x int8 pairs per int32 lane and adds them,
 * exactly (|sum| <= 4 * 255 * 128); elsewhere the bytes are widened to int16 and paired
 * by pmaddwd (qgemm.h's ml_qmadd), also exact.
 *
 * Layouts (K padded to Kq, a multiple of 4, with zero bytes on both sides):
 *   A   [M][Kq] uint8 rows (ml_q8_prep_a copies and sums them).
 *   b'  panel q (columns q*16..): at q*Kq*16, element (k, c) at [(k/4)*64 + c*4 + k%4];
 *       columns past N are zero.
 */
#ifndef MONOLIB_Q8GEMV_H
#define MONOLIB_Q8GEMV_H
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

typedef struct {
    int64_t M, N, K, Kq;
    const uint8_t* a;      /* [M][Kq] */
    const int32_t* rowsum; /* [M] */
    const int8_t* b;       /* packed b' */
    const int32_t* colsum; /* [N] */
    const int32_t* beta;   /* [N]: ob - zb[n] */
    int32_t za;
    ml_qout out;
    int64_t n_begin, n_end; /* multiples of 16 (n_end may be N) */
} ml_q8_args;

/* Copy rows of an 8-bit A (row m at a + m*lda) into [M][Kq] with zero padding and sum
 * each row (uint8 values); rows M.. up to a multiple of QMR are zeroed (dst holds them:
 * the kernel runs 4 or QMR rows for 3 or 5). */
ML_QUNUSED static void ml_q8_prep_a(int64_t M, int64_t K, int64_t Kq, const uint8_t* a,
                                    int64_t lda, uint8_t* restrict dst,
                                    int32_t* restrict rowsum) {
    for (int64_t m = 0; m < M; ++m) {
        const uint8_t* s = a + m * lda;
        uint8_t* d = dst + m * Kq;
        int32_t sum = 0;
        for (int64_t k = 0; k < K; ++k) sum += s[k];
        memcpy(d, s, (size_t)K);
        memset(d + K, 0, (size_t)(Kq - K));
        rowsum[m] = sum;
    }
    int64_t mp = (M + ML_QMR - 1) / ML_QMR * ML_QMR;
    memset(dst + M * Kq, 0, (size_t)((mp - M) * Kq));
}

#if defined(__AVX512VNNI__) && defined(__AVX512F__) && defined(__GNUC__) && \
    !defined(ML_QGEMM_PORTABLE)
typedef int32_t ml_q8z __attribute__((vector_size(64), aligned(4)));
ML_QINLINE ml_q8z ml_q8dp(ml_q8z acc, const uint8_t* a, const int8_t* b) {
    int32_t quad;
    ml_q8z bv;
    memcpy(&quad, a, 4);
    memcpy(&bv, b, sizeof bv);
#if defined(__clang__)
    return (ml_q8z)__builtin_ia32_vpdpbusd512(acc, (ml_q8z){0} + quad, bv);
#else
    return (ml_q8z)__builtin_ia32_vpdpbusd_v16si(acc, (ml_q8z){0} + quad, bv);
#endif
}
/* rows x 16 tile over kq4 quads of K. One row (an LSTM step, a batch-1 product) runs
 * four chains over alternate quads: one chain waits out vpdpbusd's latency at every
 * quad (measured: a 1x512 x 512x2048 step took 23 us on one chain). */
ML_QINLINE void ml_q8uk(const int rows, int64_t kq4, const uint8_t* restrict a, int64_t lda,
                        const int8_t* restrict b, int32_t t[ML_QMR][ML_QNR]) {
    ml_q8z acc[ML_QMR];
    for (int r = 0; r < ML_QMR; ++r) acc[r] = (ml_q8z){0};
    if (rows == 1) {
        int64_t q = 0;
        for (; q + 4 <= kq4; q += 4)
            for (int c = 0; c < 4; ++c) acc[c] = ml_q8dp(acc[c], a + (q + c) * 4, b + (q + c) * 64);
        for (; q < kq4; ++q) acc[0] = ml_q8dp(acc[0], a + q * 4, b + q * 64);
        acc[0] += (acc[1] + acc[2]) + acc[3];
    } else {
        for (int64_t q = 0; q < kq4; ++q)
            for (int r = 0; r < rows; ++r) acc[r] = ml_q8dp(acc[r], a + r * lda + q * 4, b + q * 64);
    }
    for (int r = 0; r < rows; ++r) memcpy(&t[r][0], &acc[r], sizeof acc[r]);
}
#else
typedef int8_t ml_q8b16 __attribute__((vector_size(16)));
/* the same sums through int16: 4 columns x 4 K per pmaddwd, pair sums added at the end */
ML_QINLINE void ml_q8uk(const int rows, int64_t kq4, const uint8_t* restrict a, int64_t lda,
                        const int8_t* restrict b, int32_t t[ML_QMR][ML_QNR]) {
    for (int r = 0; r < rows; ++r) {
        ml_qv8 acc[4] = {{0}, {0}, {0}, {0}};
        const uint8_t* ar = a + r * lda;
        for (int64_t q = 0; q < kq4; ++q) {
            int16_t a0 = ar[4 * q], a1 = ar[4 * q + 1], a2 = ar[4 * q + 2], a3 = ar[4 * q + 3];
            ml_qv16 ap = {a0, a1, a2, a3, a0, a1, a2, a3, a0, a1, a2, a3, a0, a1, a2, a3};
            for (int h = 0; h < 4; ++h) {
                ml_q8b16 bb;
                memcpy(&bb, b + q * 64 + h * 16, 16);
                acc[h] += ml_qmadd(__builtin_convertvector(bb, ml_qv16), ap);
            }
        }
        for (int h = 0; h < 4; ++h)
            for (int c = 0; c < 4; ++c) t[r][h * 4 + c] = acc[h][2 * c] + acc[h][2 * c + 1];
    }
}
#endif

/* Columns n_begin..n_end-1 of the product described by g. */
ML_QUNUSED static void ml_q8gemv(const ml_q8_args* g) {
    int32_t t[ML_QMR][ML_QNR] __attribute__((aligned(64)));
    const int64_t kq4 = g->Kq / 4;
    const int32_t alpha = -g->za;
    for (int64_t n = g->n_begin; n < g->n_end; n += ML_QNR) {
        const int nr = (int)ML_QMIN(ML_QNR, g->n_end - n);
        const int8_t* b = g->b + (n / ML_QNR) * g->Kq * ML_QNR;
        for (int64_t m = 0; m < g->M; m += ML_QMR) {
            const int mr = (int)ML_QMIN(ML_QMR, g->M - m);
            const uint8_t* a = g->a + m * g->Kq;
            if (mr == 1) ml_q8uk(1, kq4, a, g->Kq, b, t);
            else if (mr == 2) ml_q8uk(2, kq4, a, g->Kq, b, t);
            else if (mr <= 4) ml_q8uk(4, kq4, a, g->Kq, b, t); /* rows past mr: zeros */
            else ml_q8uk(ML_QMR, kq4, a, g->Kq, b, t);
            for (int r = 0; r < mr; ++r) {
                const int32_t rs = g->rowsum[m + r];
                for (int j = 0; j < nr; ++j) {
                    const int32_t be = g->beta[n + j];
                    /* in int64, wrapped to int32 like the sums themselves */
                    t[r][j] = (int32_t)((int64_t)t[r][j] + (int64_t)alpha * g->colsum[n + j] +
                                        (int64_t)be * rs + g->K * alpha * (int64_t)be);
                }
            }
            ml_qstore(&g->out, m, n, mr, nr, t, 0);
        }
    }
}

#ifdef MONOLIB_THREADPOOL_H
typedef struct {
    const ml_q8_args* g;
    int64_t chunk;
} ml_q8_job;

static void ml_q8_task(void* ctx, int64_t t, void* scratch) {
    const ml_q8_job* j = (const ml_q8_job*)ctx;
    ml_q8_args a = *j->g;
    (void)scratch;
    a.n_begin = j->g->n_begin + t * j->chunk;
    a.n_end = ML_QMIN(j->g->n_end, a.n_begin + j->chunk);
    ml_q8gemv(&a);
}
#endif

/* ml_q8gemv split over column chunks (multiples of 16) on the thread pool when large:
 * bound by reading B, the split follows its bytes (threadpool.h's memory unit). */
ML_QUNUSED static void ml_q8gemv_par(const ml_q8_args* g) {
#ifdef MONOLIB_THREADPOOL_H
    int64_t n = g->n_end - g->n_begin, units = (n + ML_QNR - 1) / ML_QNR;
    int64_t tasks = ml_par_tasks_mem((double)n * (double)g->Kq, units);
    if (tasks > 1) {
        ml_q8_job j = {g, (units + tasks - 1) / tasks * ML_QNR};
        ml_parallel_for((n + j.chunk - 1) / j.chunk, ml_q8_task, &j, 0, 0);
        return;
    }
#endif
    ml_q8gemv(g);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_Q8GEMV_H */
