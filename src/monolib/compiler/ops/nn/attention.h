/* attention.h -- float32 scaled dot-product attention on gemm.h (monolib kernel library;
 * gemm.h, and threadpool.h for the parallel split, precede it).
 *
 * The ONNX Attention operator (23-25). One task per (batch, query head) -- or per group
 * of its query-row blocks when heads are too few for the threads -- on the pool:
 *
 *   0. present K/V (when the op has a past or returns them): past rows, then new rows;
 *      the task copies its own head's rows when it is the only reader (then reads them
 *      from cache), else a copy phase runs first;
 *   1. Ks = K * sc packed once into gemm.h's full-K B panels, V into its B panels (only
 *      the keys the task's rows may see: the causal frontier, sliding window and
 *      nonpad_kv_seqlen give each row an interval of keys; sc = sqrt(scale) on both
 *      operands as the spec does);
 *   2. per block of `rb` rows: scores = (Q * sc) Ks^T with ml_sgemm reading the scaled
 *      Q rows in place (a_raw), over the block's keys only;
 *   3. a row pass: soft-cap, the additive mask (float, or bool: false is -inf), the key
 *      interval, a stable softmax with ml_expf and lane-parallel max/sum, the optional
 *      qk_matmul_output copy;
 *   4. Y_block = P V with ml_sgemm reading P in place.
 *
 * Blocks of fewer than 3 rows (a decoder step) skip the packing: dot products on the K
 * rows, then the P V sums in registers over the V rows. A row whose keys are all masked
 * gets probabilities 0 (ONNX 25's rule). Each task has its own scratch of
 * ml_attn_args.task_floats floats (the caller sizes it, attention.py). Key ranges are
 * aligned to the key index (not to the group), so the sums do not depend on the thread
 * count.
 * Results differ from a scalar loop only by float32 summation order.
 */
#ifndef MONOLIB_ATTENTION_H
#define MONOLIB_ATTENTION_H
#include <stdint.h>
#include <math.h>

#define ML_ATTN_LANES 16

typedef struct {
    int64_t B, Hq, Hkv, S, T, D, Dv, P;
    const float* q; int64_t q_sb, q_sh, q_si;   /* row (b, h, i): q + b*q_sb + h*q_sh + i*q_si */
    const float* k; int64_t k_sb, k_sh, k_sj;   /* row (b, kv head, j), D contiguous */
    const float* v; int64_t v_sb, v_sh, v_sj;   /* row (b, kv head, j), Dv contiguous */
    float* y; int64_t y_sb, y_sh, y_si;
    float sc;            /* sqrt(scale) */
    float cap;           /* softcap; 0: none */
    int causal;
    int64_t left, right; /* sliding window; < 0: unbounded */
    const int64_t* nonpad; /* [B] or NULL: keys j < nonpad[b], causal offset nonpad[b] - S */
    const void* mask;    /* NULL, float or (mask_bool) uint8 rows of m_len keys */
    int mask_bool;
    int64_t m_sb, m_sh, m_si, m_len;
    float* qk;           /* [B, Hq, S, T] or NULL */
    int qk_mode;
    int64_t rb;          /* query rows per block (a multiple of ML_MR, or S) */
    /* With kp set, K/V at k/v are the L = T - P new rows only: present K/V ([B, Hkv,
     * T, D|Dv], contiguous, at kp/vp) are filled from pk/pv ([B, Hkv, P, .], or NULL)
     * and them, then read. */
    float* kp;
    float* vp;
    const float* pk;
    const float* pv;
    int64_t groups;      /* row groups per head (set by ml_attention_f32) */
    const void* copy_from; /* set there: the args of the sources, from which each task
                            * fills its own head's present rows */
    int64_t task_floats; /* scratch floats per task */
} ml_attn_args;

/* Scratch layout of one task (floats, each part 16-aligned): scaled Q block, packed K,
 * packed V, scores block. Mirrored by attention.py's _task_floats. */
#define ML_ATTN_UP16(n) ((((n) + 15) / 16) * 16)

/* Ks: K rows j of one (b, kv head), times sc, as gemm.h's full-K B panels (k_total D).
 * A whole panel is copied in 16 x 16 tiles through a local array, so both the reads
 * (rows of K) and the writes (panel rows) run along memory. */
static inline void ml_attn_pack_k(const float* restrict k, int64_t sj, int64_t T, int64_t D,
                                  float sc, float* restrict dst) {
    for (int64_t j0 = 0; j0 < T; j0 += ML_NR) {
        float* d = dst + (j0 / ML_NR) * D * ML_NR;
        int64_t n = ML_MIN(ML_NR, T - j0);
        int64_t e0 = 0;
        if (n == ML_NR)
            for (; e0 + 16 <= D; e0 += 16) {
                float t[ML_NR][16];
                for (int c = 0; c < ML_NR; ++c)
                    for (int e = 0; e < 16; ++e) t[c][e] = k[(j0 + c) * sj + e0 + e] * sc;
                for (int e = 0; e < 16; ++e)
                    for (int c = 0; c < ML_NR; ++c) d[(e0 + e) * ML_NR + c] = t[c][e];
            }
        for (int64_t c = 0; c < n; ++c) {
            const float* kr = k + (j0 + c) * sj;
            for (int64_t e = e0; e < D; ++e) d[e * ML_NR + c] = kr[e] * sc;
        }
        for (int64_t c = n; c < ML_NR; ++c)
            for (int64_t e = e0; e < D; ++e) d[e * ML_NR + c] = 0.0f;
    }
}

/* The sum / max of 16 lanes as a fixed tree (8 + 4 + 2 + 1 operations, no loop: gcc
 * keeps it in registers). */
static inline float ml_attn_hsum(const float* a) {
    float b[8], c[4];
    for (int l = 0; l < 8; ++l) b[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; ++l) c[l] = b[l] + b[l + 4];
    return (c[0] + c[2]) + (c[1] + c[3]);
}

static inline float ml_attn_hmax(const float* a) {
    float b[8], c[4];
    for (int l = 0; l < 8; ++l) b[l] = a[l + 8] > a[l] ? a[l + 8] : a[l];
    for (int l = 0; l < 4; ++l) c[l] = b[l + 4] > b[l] ? b[l + 4] : b[l];
    const float d0 = c[2] > c[0] ? c[2] : c[0], d1 = c[3] > c[1] ? c[3] : c[1];
    return d1 > d0 ? d1 : d0;
}

/* max of x[0..n) (n >= 1), lane-parallel so gcc vectorizes it */
static inline float ml_attn_max(const float* x, int64_t n) {
    float acc[ML_ATTN_LANES];
    for (int l = 0; l < ML_ATTN_LANES; ++l) acc[l] = -INFINITY;
    int64_t j = 0;
    for (; j + ML_ATTN_LANES <= n; j += ML_ATTN_LANES)
        for (int l = 0; l < ML_ATTN_LANES; ++l) acc[l] = x[j + l] > acc[l] ? x[j + l] : acc[l];
    float m = ml_attn_hmax(acc);
    for (; j < n; ++j) m = x[j] > m ? x[j] : m;
    return m;
}

/* x[j] = exp(x[j] - m) over [0, n), returning the sum (lane-parallel) */
static inline float ml_attn_exp_sum(float* restrict x, int64_t n, float m) {
    float acc[ML_ATTN_LANES];
    for (int l = 0; l < ML_ATTN_LANES; ++l) acc[l] = 0.0f;
    int64_t j = 0;
    for (; j + ML_ATTN_LANES <= n; j += ML_ATTN_LANES)
        for (int l = 0; l < ML_ATTN_LANES; ++l) {
            float e = ml_expf(x[j + l] - m);
            x[j + l] = e;
            acc[l] += e;
        }
    float s = ml_attn_hsum(acc);
    for (; j < n; ++j) {
        x[j] = ml_expf(x[j] - m);
        s += x[j];
    }
    return s;
}

/* The keys row i of (b, h) may attend to before the mask's values: [*lo, *hi) (the
 * causal frontier, the sliding window, nonpad_kv_seqlen, the end of a short mask). Both
 * ends grow with i, so a block of rows needs [lo(first row), hi(last row)). */
static inline void ml_attn_range(const ml_attn_args* a, int64_t b, int64_t i, int64_t* lo_,
                                 int64_t* hi_) {
    const int64_t off = a->nonpad ? a->nonpad[b] - a->S : a->P;
    int64_t lo = 0, hi = a->T;
    if (a->causal) hi = ML_MIN(hi, i + off + 1);
    if (a->right >= 0) hi = ML_MIN(hi, i + off + a->right + 1);
    if (a->left >= 0 && i + off - a->left > lo) lo = i + off - a->left;
    if (a->nonpad) hi = ML_MIN(hi, a->nonpad[b]);
    if (a->mask) hi = ML_MIN(hi, a->m_len);
    if (lo > a->T) lo = a->T;
    if (hi < lo) hi = lo;
    *lo_ = lo;
    *hi_ = hi;
}

/* The row pass on the scores x[c0..c1) of query row i of (b, h) (its keys' range lies
 * within): turns x[0..T) into the probabilities, writing the qk_matmul_output row on
 * the way (modes 0 and 1 need every score: then c0 = 0, c1 = T). */
static inline void ml_attn_row(const ml_attn_args* a, int64_t b, int64_t h, int64_t i,
                               float* restrict x, int64_t c0, int64_t c1) {
    const int64_t T = a->T;
    int64_t lo, hi;
    ml_attn_range(a, b, i, &lo, &hi);
    if (a->cap > 0.0f) {
        const float cap = a->cap;
        for (int64_t j = c0; j < c1; ++j) x[j] = cap * ml_tanhf(x[j] / cap);
    }
    float* qk = a->qk ? a->qk + ((b * a->Hq + h) * a->S + i) * T : 0;
    if (qk && a->qk_mode <= 1) memcpy(qk, x, (size_t)T * sizeof(float));
    int live = hi > lo;
    if (a->mask) {
        const int64_t mo = b * a->m_sb + h * a->m_sh + i * a->m_si;
        live = 0;
        if (a->mask_bool) {
            const uint8_t* m = (const uint8_t*)a->mask + mo;
            for (int64_t j = lo; j < hi; ++j) {
                live |= m[j] != 0;
                x[j] = m[j] ? x[j] : -INFINITY;
            }
        } else {
            const float* m = (const float*)a->mask + mo;
            for (int64_t j = lo; j < hi; ++j) {
                live |= m[j] != -INFINITY;
                x[j] += m[j];
            }
        }
    }
    if (qk && a->qk_mode == 2) {
        for (int64_t j = 0; j < lo; ++j) qk[j] = -INFINITY;
        memcpy(qk + lo, x + lo, (size_t)(hi - lo) * sizeof(float));
        for (int64_t j = hi; j < T; ++j) qk[j] = -INFINITY;
    }
    if (!live) {
        memset(x, 0, (size_t)T * sizeof(float));
    } else {
        const float m = ml_attn_max(x + lo, hi - lo);
        const float s = ml_attn_exp_sum(x + lo, hi - lo, m);
        const float inv = 1.0f / s;
        for (int64_t j = lo; j < hi; ++j) x[j] *= inv;
        for (int64_t j = 0; j < lo; ++j) x[j] = 0.0f;
        for (int64_t j = hi; j < T; ++j) x[j] = 0.0f;
    }
    if (qk && a->qk_mode == 3) memcpy(qk, x, (size_t)T * sizeof(float));
}

/* One query row (m < 3: a decoder step), no packing: x[c0..c1) = qs . (k_j * sc) with
 * qs the row times sc, lane-parallel dot products; after the row pass y = sum p_j v_j
 * over the keys with weight. */
static inline void ml_attn_row_direct(const ml_attn_args* a, int64_t b, int64_t h, int64_t i,
                                      const float* restrict q, const float* restrict k,
                                      const float* restrict v, float* restrict y,
                                      float* restrict x, float* restrict qs) {
    const int64_t T = a->T, D = a->D, Dv = a->Dv;
    const float sc = a->sc;
    int64_t c0 = 0, c1 = T;
    if (!a->qk || a->qk_mode >= 2) ml_attn_range(a, b, i, &c0, &c1);
    for (int64_t e = 0; e < D; ++e) qs[e] = q[e] * sc;
    for (int64_t j = c0; j < c1; ++j) {
        const float* kr = k + j * a->k_sj;
        float acc[ML_ATTN_LANES];
        for (int l = 0; l < ML_ATTN_LANES; ++l) acc[l] = 0.0f;
        int64_t e = 0;
        for (; e + ML_ATTN_LANES <= D; e += ML_ATTN_LANES)
            for (int l = 0; l < ML_ATTN_LANES; ++l) acc[l] += qs[e + l] * (kr[e + l] * sc);
        float d = ml_attn_hsum(acc);
        for (; e < D; ++e) d += qs[e] * (kr[e] * sc);
        x[j] = d;
    }
    ml_attn_row(a, b, h, i, x, c0, c1);
    /* y = sum_j p_j v_j in columns of 64: the sums stay in registers over the keys */
    for (int64_t e0 = 0; e0 < Dv; e0 += 64) {
        float acc[64];
        for (int e = 0; e < 64; ++e) acc[e] = 0.0f;
        if (Dv - e0 >= 64) {
            for (int64_t j = c0; j < c1; ++j) {
                const float p = x[j];
                const float* vr = v + j * a->v_sj + e0;
                if (p != 0.0f)
                    for (int e = 0; e < 64; ++e) acc[e] += p * vr[e];
            }
            for (int e = 0; e < 64; ++e) y[e0 + e] = acc[e];
        } else {
            const int64_t ne = Dv - e0;
            for (int64_t j = c0; j < c1; ++j) {
                const float p = x[j];
                const float* vr = v + j * a->v_sj + e0;
                if (p != 0.0f)
                    for (int64_t e = 0; e < ne; ++e) acc[e] += p * vr[e];
            }
            for (int64_t e = 0; e < ne; ++e) y[e0 + e] = acc[e];
        }
    }
}

/* One block of m >= 3 query rows from i0 (q, y at its first row), with the head's K and
 * V rows [g0, g1) packed in kb, vb (g0 a multiple of NR): scores on the keys the rows may
 * see from the NR-aligned key at or below the first (a few extra scores the row pass
 * masks; aligned to the key index, not to g0, so the sums do not depend on how blocks
 * are grouped, i.e. on the thread count), the row pass, Y = P V. Both products read
 * their A operand in place (gemm.h's a_raw): Q times sc as a contiguous copy, P. */
static inline void ml_attn_block(const ml_attn_args* a, int64_t b, int64_t h, int64_t i0,
                                 int64_t m, const float* q, float* y, int64_t g0, int64_t g1,
                                 const float* kb, const float* vb, float* qa, float* sb) {
    const int64_t T = a->T, D = a->D, Dv = a->Dv;
    int64_t c0 = g0, c1 = g1, lo_last, hi_first;
    if (!a->qk || a->qk_mode >= 2) {
        ml_attn_range(a, b, i0, &c0, &hi_first);
        ml_attn_range(a, b, i0 + m - 1, &lo_last, &c1);
        c0 = c0 / ML_NR * ML_NR;
        if (c1 < c0) c1 = c0;
    }
    const int64_t n = c1 - c0;
    if (n > 0 && D > 0) {
        for (int64_t r = 0; r < m; ++r)
            for (int64_t e = 0; e < D; ++e) qa[r * D + e] = q[r * a->q_si + e] * a->sc;
        ml_gemm_args g = ml_gemm_defaults(m, n, D, 0, sb + c0);
        g.a_raw = qa;
        g.lda = D;
        g.ldc = T;
        g.b.kind = ML_B_PACKED;
        g.b.p = kb + (c0 - g0) / ML_NR * D * ML_NR;
        g.b.k_total = D;
        ml_sgemm(&g);
    } else {
        for (int64_t r = 0; r < m; ++r) memset(sb + r * T + c0, 0, (size_t)n * sizeof(float));
    }
    for (int64_t r = 0; r < m; ++r) ml_attn_row(a, b, h, i0 + r, sb + r * T, c0, c1);
    if (Dv == 0) return;
    if (n == 0) { /* no key with weight: every row is 0 */
        for (int64_t r = 0; r < m; ++r) memset(y + r * a->y_si, 0, (size_t)Dv * sizeof(float));
        return;
    }
    ml_gemm_args g = ml_gemm_defaults(m, Dv, n, 0, y);
    g.a_raw = sb + c0;
    g.lda = T;
    g.ldc = a->y_si;
    g.b.kind = ML_B_PACKED;
    g.b.p = vb + (c0 - g0) * ML_NR;
    g.b.k_total = g1 - g0;
    ml_sgemm(&g);
}

/* Present K and V rows of (b, kv head hk): the past rows, then the new ones. */
static void ml_attn_copy_kv(const ml_attn_args* a, int64_t b, int64_t hk) {
    const int64_t P = a->P, T = a->T, L = a->T - a->P, bh = b * a->Hkv + hk;
    for (int s = 0; s < 2; ++s) {
        const int64_t dd = s ? a->Dv : a->D;
        float* dst = (s ? a->vp : a->kp) + bh * T * dd;
        const float* past = s ? a->pv : a->pk;
        const float* src = s ? a->v + b * a->v_sb + hk * a->v_sh : a->k + b * a->k_sb + hk * a->k_sh;
        const int64_t sj = s ? a->v_sj : a->k_sj;
        if (past && P) memcpy(dst, past + bh * P * dd, (size_t)(P * dd) * sizeof(float));
        if (sj == dd) memcpy(dst + P * dd, src, (size_t)(L * dd) * sizeof(float));
        else
            for (int64_t j = 0; j < L; ++j)
                memcpy(dst + (P + j) * dd, src + j * sj, (size_t)dd * sizeof(float));
    }
}

static void ml_attn_copy_task(void* ctx, int64_t t, void* scratch) {
    (void)scratch;
    const ml_attn_args* a = (const ml_attn_args*)ctx;
    ml_attn_copy_kv(a, t / a->Hkv, t % a->Hkv);
}

/* Task t: (b, h, group) = t in row-major order over [B, Hq, groups]; a group is
 * consecutive row blocks sharing one packing of the K and V rows they may see. A block
 * of fewer than 3 rows (a decoder step, the last block of a head) takes the direct
 * path, whatever its group. */
static void ml_attn_task(void* ctx, int64_t t, void* scratch) {
    const ml_attn_args* a = (const ml_attn_args*)ctx;
    const int64_t T = a->T, D = a->D, Dv = a->Dv, rb = a->rb, G = a->groups;
    const int64_t nblk = (a->S + rb - 1) / rb, per = (nblk + G - 1) / G;
    const int64_t grp = t % G, h = (t / G) % a->Hq, b = t / (G * a->Hq);
    const int64_t hk = h / (a->Hq / a->Hkv);
    const int64_t i_first = grp * per * rb, i_end = ML_MIN(a->S, (grp + 1) * per * rb);
    /* the head's present rows (then read from cache); a->k.. describe present K/V */
    if (a->copy_from) ml_attn_copy_kv((const ml_attn_args*)a->copy_from, b, hk);
    if (i_first >= i_end) return;
    float* qa = (float*)scratch;
    float* kb = qa + ML_ATTN_UP16(rb * D);
    float* vb = kb + ML_ATTN_UP16((T + ML_NR - 1) / ML_NR * ML_NR * D);
    float* sb = vb + ML_ATTN_UP16((Dv + ML_NR - 1) / ML_NR * ML_NR * T);
    const float* q = a->q + b * a->q_sb + h * a->q_sh;
    const float* k = a->k + b * a->k_sb + hk * a->k_sh;
    const float* v = a->v + b * a->v_sb + hk * a->v_sh;
    float* y = a->y + b * a->y_sb + h * a->y_sh;
    int64_t g0 = 0, g1 = T, lo_last, hi_first;
    if (i_end - i_first >= 3) { /* (only the last block of a head can be shorter) */
        if (!a->qk || a->qk_mode >= 2) {
            ml_attn_range(a, b, i_first, &g0, &hi_first);
            ml_attn_range(a, b, i_end - 1, &lo_last, &g1);
            g0 = g0 / ML_NR * ML_NR;
            if (g1 < g0) g1 = g0;
        }
        if (g1 > g0) {
            ml_attn_pack_k(k + g0 * a->k_sj, a->k_sj, g1 - g0, D, a->sc, kb);
            ml_bsrc vs;
            memset(&vs, 0, sizeof vs);
            vs.kind = ML_B_STRIDED;
            vs.p = v + g0 * a->v_sj;
            vs.ldk = a->v_sj;
            vs.ldn = 1;
            ml_pack_b_full(&vs, g1 - g0, Dv, vb);
        }
    }
    for (int64_t i0 = i_first; i0 < i_end; i0 += rb) {
        const int64_t m = ML_MIN(rb, i_end - i0);
        if (m < 3)
            for (int64_t i = i0; i < i0 + m; ++i)
                ml_attn_row_direct(a, b, h, i, q + i * a->q_si, k, v, y + i * a->y_si, sb, qa);
        else
            ml_attn_block(a, b, h, i0, m, q + i0 * a->q_si, y + i0 * a->y_si, g0, g1, kb, vb,
                          qa, sb);
    }
}

/* The op: every (batch, head, row block); scratch0 holds task_floats floats for the
 * calling thread. */
ML_UNUSED static void ml_attention_f32(const ml_attn_args* args, void* scratch0) {
    ml_attn_args a = *args;
    const int64_t nblk = (a.S + a.rb - 1) / a.rb, heads = a.B * a.Hq;
    int64_t tasks = 1;
    a.groups = 1;
    a.copy_from = 0;
#ifdef MONOLIB_THREADPOOL_H
    /* multiply-adds of both products, some 16 per score for the row pass, and 4 per
     * float of K and V read (ml_par_tasks' unit: a decoder step is memory-bound) */
    double work = (double)heads * a.T * (a.S * (a.D + a.Dv + 16.0) + 4.0 * (a.D + a.Dv));
    const int64_t nt = ml_num_threads();
    tasks = ml_par_tasks(work, heads * nblk);
    if (tasks > 1) /* whole heads while they give each thread several tasks, else groups */
        a.groups = ML_MIN(nblk, (4 * nt + heads - 1) / heads);
#endif
    ml_attn_args c = a; /* the compute phase reads K/V from present when there is one */
    if (a.kp) {
        c.k = a.kp; c.k_sb = a.Hkv * a.T * a.D; c.k_sh = a.T * a.D; c.k_sj = a.D;
        c.v = a.vp; c.v_sb = a.Hkv * a.T * a.Dv; c.v_sh = a.T * a.Dv; c.v_sj = a.Dv;
        if (a.Hq == a.Hkv && a.groups == 1) {
            /* one task per head: it copies its rows, then reads them from cache */
            c.copy_from = &a;
        } else if (tasks > 1) {
#ifdef MONOLIB_THREADPOOL_H
            ml_parallel_for(a.B * a.Hkv, ml_attn_copy_task, &a, 0, 0);
#endif
        } else {
            for (int64_t t = 0; t < a.B * a.Hkv; ++t) ml_attn_copy_task(&a, t, 0);
        }
    }
#ifdef MONOLIB_THREADPOOL_H
    if (tasks > 1) {
        ml_parallel_for(heads * a.groups, ml_attn_task, &c, scratch0,
                        (size_t)a.task_floats * sizeof(float));
        return;
    }
#endif
    for (int64_t t = 0; t < heads; ++t) ml_attn_task(&c, t, scratch0);
}
#endif /* MONOLIB_ATTENTION_H */
