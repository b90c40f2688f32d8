/* q8gemv.h -- integer products whose constant 8-bit weights stay one byte per value
 * (monolib kernel library; include qgemm.h first: the tiles are stored by its
 * ml_qstore): ml_q8gemv for a run-time uint8 A times weights B (MatMulInteger after
 * DynamicQuantizeLinear, an LSTM's projections), ml_q8conv for weights times the
 * columns of a uint8 image (ConvInteger, QLinearConv; below).
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

typedef int32_t ml_q8z __attribute__((vector_size(64), aligned(4)));
#if defined(__AVX512VNNI__) && defined(__AVX512F__) && defined(__GNUC__) && \
    !defined(ML_QGEMM_PORTABLE)
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
#if defined(__AVX2__) && defined(__GNUC__) && !defined(__clang__) && !defined(ML_QGEMM_PORTABLE)
/* AVX2 (gcc): each 16 bytes of b' widened by one vpmovsxbw ymm, xmm, and the row's quad
 * of A by one vpbroadcastd and vpmovzxbw (gcc split __builtin_convertvector's widening
 * into two 128-bit halves with a shift and an insert each: half the kernel's time, and
 * the byte kernel then lost to qgemm.h's int16 B, 73 against 48 us on 1x512 x 512x2048;
 * now 34, Zen 3, reading half the bytes; ONNX Runtime's inexact saturating u8s8 ~45). */
typedef char ml_q8c16 __attribute__((vector_size(16)));
typedef int32_t ml_q8i4 __attribute__((vector_size(16)));
#define ML_Q8_SX(v) ((ml_qv16)__builtin_ia32_pmovsxbw256((ml_q8c16)(v)))
ML_QINLINE ml_qv16 ml_q8_quad(const uint8_t* p) {
    int32_t quad;
    memcpy(&quad, p, 4);
    return (ml_qv16)__builtin_ia32_pmovzxbw256((ml_q8c16)((ml_q8i4){0} + quad));
}
#else
#define ML_Q8_SX(v) __builtin_convertvector((v), ml_qv16)
ML_QINLINE ml_qv16 ml_q8_quad(const uint8_t* p) {
    int16_t a0 = p[0], a1 = p[1], a2 = p[2], a3 = p[3];
    return (ml_qv16){a0, a1, a2, a3, a0, a1, a2, a3, a0, a1, a2, a3, a0, a1, a2, a3};
}
#endif
/* the same sums through int16: 4 columns x 4 K per pmaddwd (the quad of A in every 4
 * int16 lanes), the two pair sums of a column added at the end. Per row the bytes are
 * widened again, so without VNNI only one-row products come here (_q8.use_q8). */
ML_QINLINE void ml_q8uk(const int rows, int64_t kq4, const uint8_t* restrict a, int64_t lda,
                        const int8_t* restrict b, int32_t t[ML_QMR][ML_QNR]) {
    for (int r = 0; r < rows; ++r) {
        ml_qv8 acc[4] = {{0}, {0}, {0}, {0}};
        const uint8_t* ar = a + r * lda;
        for (int64_t q = 0; q < kq4; ++q) {
            ml_qv16 ap = ml_q8_quad(ar + 4 * q);
            for (int h = 0; h < 4; ++h) {
                ml_q8b16 bb;
                memcpy(&bb, b + q * 64 + h * 16, 16);
                acc[h] += ml_qmadd(ML_Q8_SX(bb), ap);
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

/* ---- Convolutions: Y[M, N] = W[M, K] (weights, the broadcast side: int8 bytes
 * a' = W - oa, oa 128 for uint8 weights) times the columns of a uint8 image (the vector
 * side, raw bytes, the spatial padding its zero point zb); the same sums,
 *   C = D + alpha[m] * colsum[n] + beta * rowsum[m] + K * alpha[m] * beta,
 *   alpha[m] = oa - zw[m] and rowsum[m] = sum_k a'[m,k] (compile time), beta = -zb,
 *   colsum[n] = sum_k B[k,n] (with the padding's zb), taken while packing B.
 * Packed A: panel p (rows p*QMR..) at p*Kq*QMR, element (r, k) at
 * [(k/4)*QMR*4 + r*4 + k%4], rows past M zero. B is packed per block of columns into
 * panels of 16 as b' above (uint8), its column sums after the block. */
typedef struct {
    int64_t M, N, K, Kq;
    const int8_t* a;
    const int32_t* alpha;  /* [M] */
    const int32_t* rowsum; /* [M] */
    int32_t zb;
    int im2col;            /* 0: B[k][n] = p8[k*ldk + n] (1x1, stride 1); 1: implicit im2col */
    const uint8_t* p8;     /* the image, zero-point padded when im2col (ml_q8pad_image) */
    int64_t ldk, H, W, KH, KW, SH, SW, DH, DW, OH, OW;
    ml_qout out;
    const int32_t* bias_m;
    uint8_t* bbuf; /* ml_q8c_bbuf_bytes per thread */
    int64_t n_begin, n_end;
} ml_q8c_args;

/* Columns per B block (its Kq bytes each near 256 KiB: half of L2). */
static inline int64_t ml_q8c_nc(int64_t Kq) {
    int64_t nc = ((int64_t)1 << 18) / (Kq > 0 ? Kq : 1) / ML_QNR * ML_QNR;
    return nc < ML_QNR ? ML_QNR : (nc > 1024 ? 1024 : nc);
}

/* Bytes of one thread's B block: the packed panels, 4 gathered rows, the column sums. */
static inline int64_t ml_q8c_bbuf_bytes(int64_t Kq) {
    int64_t nc = ml_q8c_nc(Kq);
    return nc * Kq + 4 * (nc + 64) + 4 * nc + 64;
}

/* A uint8 [C][H][W] image into [C][Hp][Wp] padded with its zero point (PT rows above,
 * PL columns left). */
ML_QUNUSED static void ml_q8pad_image(int64_t C, int64_t H, int64_t W, int64_t Hp, int64_t Wp,
                                      int64_t PT, int64_t PL, const uint8_t* x, int32_t zp,
                                      uint8_t* restrict dst) {
    memset(dst, zp, (size_t)(C * Hp * Wp));
    for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H && h + PT < Hp; ++h)
            memcpy(dst + (c * Hp + h + PT) * Wp + PL, x + (c * H + h) * W,
                   (size_t)ML_QMIN(W, Wp - PL));
}

/* Row k of B, columns n0..n0+nc-1, into r (zeros past K). */
static void ml_q8c_row(const ml_q8c_args* g, int64_t k, int64_t n0, int64_t nc,
                       uint8_t* restrict r) {
    if (k >= g->K) {
        memset(r, 0, (size_t)nc);
    } else if (!g->im2col) {
        memcpy(r, g->p8 + k * g->ldk + n0, (size_t)nc);
    } else {
        int64_t kx = k % g->KW, ky = (k / g->KW) % g->KH, ci = k / (g->KW * g->KH);
        const uint8_t* x = g->p8 + ci * g->H * g->W + ky * g->DH * g->W + kx * g->DW;
        int64_t oh = n0 / g->OW, ow = n0 % g->OW;
        for (int64_t j = 0; j < nc; ++oh, ow = 0) {
            const uint8_t* src = x + oh * g->SH * g->W + ow * g->SW;
            int64_t run = ML_QMIN(g->OW - ow, nc - j);
            if (g->SW == 1) memcpy(r + j, src, (size_t)run);
            else
                for (int64_t t = 0; t < run; ++t) r[j + t] = src[t * g->SW];
            j += run;
        }
    }
}

/* Pack B columns n0..n0+nc-1 (all Kq rows) into panels of 16 at buf and their column
 * sums at *colsum (after the panels). */
static void ml_q8c_pack(const ml_q8c_args* g, int64_t n0, int64_t nc, uint8_t* restrict buf,
                        int32_t** colsum) {
    const int64_t ncb = ml_q8c_nc(g->Kq), ncp = (nc + ML_QNR - 1) / ML_QNR * ML_QNR;
    uint8_t* rows = buf + ncb * g->Kq; /* 4 rows of ncb + 64 */
    int32_t* cs = (int32_t*)(rows + 4 * (ncb + 64));
    for (int64_t j = 0; j < ncp; ++j) cs[j] = 0;
    for (int64_t k = 0; k < g->Kq; k += 4) {
        uint8_t* r[4];
        for (int e = 0; e < 4; ++e) {
            r[e] = rows + e * (ncb + 64);
            ml_q8c_row(g, k + e, n0, nc, r[e]);
            memset(r[e] + nc, 0, (size_t)(ncp - nc));
        }
        uint8_t* d = buf + k * ML_QNR;
        for (int64_t j = 0; j < ncp; j += ML_QNR, d += g->Kq * ML_QNR)
            for (int c = 0; c < ML_QNR; ++c) {
                d[4 * c] = r[0][j + c];
                d[4 * c + 1] = r[1][j + c];
                d[4 * c + 2] = r[2][j + c];
                d[4 * c + 3] = r[3][j + c];
            }
        for (int64_t j = 0; j < ncp; ++j) cs[j] += (r[0][j] + r[1][j]) + (r[2][j] + r[3][j]);
    }
    *colsum = cs;
}

#if defined(__AVX512VNNI__) && defined(__AVX512F__) && defined(__GNUC__) && \
    !defined(ML_QGEMM_PORTABLE)
/* rows x 16 tile: vpdpbusd(acc, the B quad's 64 bytes (unsigned), the weight row's 4
 * bytes broadcast (signed)) */
ML_QINLINE void ml_q8cuk(const int rows, int64_t kq4, const int8_t* restrict a,
                         const uint8_t* restrict b, int32_t t[ML_QMR][ML_QNR]) {
    ml_q8z acc[ML_QMR];
    for (int r = 0; r < rows; ++r) acc[r] = (ml_q8z){0};
    for (int64_t q = 0; q < kq4; ++q) {
        ml_q8z bv;
        memcpy(&bv, b + q * 64, sizeof bv);
        for (int r = 0; r < rows; ++r) {
            int32_t quad;
            memcpy(&quad, a + q * ML_QMR * 4 + r * 4, 4);
#if defined(__clang__)
            acc[r] = (ml_q8z)__builtin_ia32_vpdpbusd512(acc[r], bv, (ml_q8z){0} + quad);
#else
            acc[r] = (ml_q8z)__builtin_ia32_vpdpbusd_v16si(acc[r], bv, (ml_q8z){0} + quad);
#endif
        }
    }
    for (int r = 0; r < rows; ++r) memcpy(&t[r][0], &acc[r], sizeof acc[r]);
}
#else
ML_QINLINE void ml_q8cuk(const int rows, int64_t kq4, const int8_t* restrict a,
                         const uint8_t* restrict b, int32_t t[ML_QMR][ML_QNR]) {
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < ML_QNR; ++c) {
            int32_t s = 0;
            for (int64_t q = 0; q < kq4; ++q)
                for (int e = 0; e < 4; ++e)
                    s += (int32_t)b[q * 64 + c * 4 + e] * a[q * ML_QMR * 4 + r * 4 + e];
            t[r][c] = s;
        }
}
#endif

/* Columns n_begin..n_end-1 of the convolution's product described by g. */
ML_QUNUSED static void ml_q8conv(const ml_q8c_args* g) {
    int32_t t[ML_QMR][ML_QNR] __attribute__((aligned(64)));
    const int64_t kq4 = g->Kq / 4, ncb = ml_q8c_nc(g->Kq);
    const int32_t beta = -g->zb;
    for (int64_t jc = g->n_begin; jc < g->n_end; jc += ncb) {
        const int64_t nc = ML_QMIN(ncb, g->n_end - jc);
        int32_t* cs;
        ml_q8c_pack(g, jc, nc, g->bbuf, &cs);
        for (int64_t jr = 0; jr < nc; jr += ML_QNR) {
            const int nr = (int)ML_QMIN(ML_QNR, nc - jr);
            const uint8_t* b = g->bbuf + (jr / ML_QNR) * g->Kq * ML_QNR;
            for (int64_t m = 0; m < g->M; m += ML_QMR) {
                const int mr = (int)ML_QMIN(ML_QMR, g->M - m);
                const int8_t* a = g->a + (m / ML_QMR) * g->Kq * ML_QMR;
                if (mr <= 2) ml_q8cuk(2, kq4, a, b, t); /* rows past M: zero weights */
                else if (mr <= 4) ml_q8cuk(4, kq4, a, b, t);
                else ml_q8cuk(ML_QMR, kq4, a, b, t);
                for (int r = 0; r < mr; ++r) {
                    const int64_t al = g->alpha[m + r];
                    const int64_t base = (int64_t)beta * g->rowsum[m + r] + g->K * al * beta;
                    for (int j = 0; j < nr; ++j)
                        t[r][j] = (int32_t)((int64_t)t[r][j] + al * cs[jr + j] + base);
                }
                ml_qstore(&g->out, m, jc + jr, mr, nr, t, g->bias_m);
            }
        }
    }
}

#ifdef MONOLIB_THREADPOOL_H
typedef struct {
    const ml_q8c_args* g;
    int64_t chunk;
} ml_q8c_job;

static void ml_q8c_task(void* ctx, int64_t t, void* scratch) {
    const ml_q8c_job* j = (const ml_q8c_job*)ctx;
    ml_q8c_args a = *j->g;
    a.n_begin = j->g->n_begin + t * j->chunk;
    a.n_end = ML_QMIN(j->g->n_end, a.n_begin + j->chunk);
    a.bbuf = (uint8_t*)scratch;
    ml_q8conv(&a);
}
#endif

/* ml_q8conv split over column chunks (multiples of 16) on the thread pool when large;
 * each chunk packs its B blocks into its own buffer. */
ML_QUNUSED static void ml_q8conv_par(const ml_q8c_args* g) {
#ifdef MONOLIB_THREADPOOL_H
    int64_t n = g->n_end - g->n_begin, units = (n + ML_QNR - 1) / ML_QNR;
    /* a byte multiply-add (64 an instruction) costs about a quarter of a float one */
    int64_t tasks = ml_par_tasks(0.25 * (double)g->M * n * g->K, units);
    if (tasks > 1) {
        ml_q8c_job j = {g, (units + tasks - 1) / tasks * ML_QNR};
        ml_parallel_for((n + j.chunk - 1) / j.chunk, ml_q8c_task, &j, g->bbuf,
                        (size_t)ml_q8c_bbuf_bytes(g->Kq));
        return;
    }
#endif
    ml_q8conv(g);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* MONOLIB_Q8GEMV_H */
