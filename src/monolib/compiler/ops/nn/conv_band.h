/* conv_band.h -- a 1x1 convolution and the depthwise convolution that reads it, run
 * together by bands of rows (monolib kernel library).
 *
 * Needs gemm.h, conv.h and conv_depthwise.h before it (threadpool.h too, to split).
 *
 * The 1x1 "expansion" of an inverted residual block (MobileNetV2/V3, PP-LCNet, EfficientNet)
 * writes many channels at full resolution that only the depthwise conv after it reads:
 * run one after the other, that tensor (4.8 MB at MobileNetV2's 112 px) leaves the caches
 * and is read back from memory. Here each task takes a run of bands of output rows, every
 * channel, and sweeps them in order: the GEMM computes the input rows the band's windows need
 * into a scratch band (the rows the band shares with the last one are moved to its front,
 * not computed again), the 1x1's epilogue runs on them, and the depthwise kernel
 * (ml_dw_units_*) reads them from there while they are in L2 and writes its output rows
 * into the full output, where its own epilogue runs. The expanded tensor never exists in
 * full, and a thread reads only expanded rows it wrote. The same idea is
 * XNNPACK's and TVM's fused "inverted residual" schedules (facts carry over, code does
 * not). conv_band.py decides which pairs run so and the band height. */
#ifndef MONOLIB_CONV_BAND_H
#define MONOLIB_CONV_BAND_H
#include <stdint.h>
#include <string.h>

typedef struct {
    ml_gemm_args g;   /* the 1x1: K, M = C, packed A, B strided [K][H][W], epi, ldc */
    ml_dw_job dw;     /* the depthwise conv over the whole output (x set per band) */
    const float* x;   /* the 1x1's input [K][H][W] */
    int64_t H, W, rows, tasks, mid_floats, bbuf_floats;
} ml_pwdw_job;

/* Task t of tasks: output rows [OH * t / tasks, OH * (t + 1) / tasks) (ends on multiples
 * of ML_DW_R) of every channel, by bands of `rows`. Its first band computes its halo
 * rows again (its own scratch: no thread reads another's). Scratch: the band of
 * expanded rows [C][mid_rows][W], the GEMM's B buffer, the depthwise scratch. */
static void ml_pwdw_task(void* ctx, int64_t t, void* scratch) {
    const ml_pwdw_job* j = (const ml_pwdw_job*)ctx;
    const int64_t W = j->W, SH = j->dw.SH, PT = j->dw.PT, KH = j->dw.KH, rows = j->rows;
    const int64_t ld = j->g.ldc, C = j->dw.C;
    float* mid = (float*)scratch;
    ml_dw_job d = j->dw;
    d.x = mid;
    d.xs = ld;
    ml_gemm_args g = j->g;
    g.bbuf = mid + j->mid_floats;
    float* dws = g.bbuf + j->bbuf_floats;
    int64_t have0 = 0, have1 = 0; /* input rows in mid */
    const int64_t q = (d.OH + ML_DW_R - 1) / ML_DW_R; /* whole tiles */
    const int64_t r0 = q * t / j->tasks * ML_DW_R, r1 = ML_MIN(d.OH, q * (t + 1) / j->tasks * ML_DW_R);
    d.nb = 1;
    for (int64_t o0 = r0; o0 < r1; o0 += rows) {
        int64_t o1 = ML_MIN(r1, o0 + rows);
        int64_t i0 = ML_DW_MAX(0, o0 * SH - PT), i1 = ML_MIN(j->H, (o1 - 1) * SH - PT + KH);
        int64_t k0 = ML_DW_MAX(i0, have0), k1 = ML_MIN(i1, have1); /* rows kept */
        if (k1 <= k0) k0 = k1 = i0;
        else if (k0 > have0) /* to the front: rows i0.. at row 0 */
            for (int64_t c = 0; c < C; ++c)
                memmove(mid + c * ld, mid + c * ld + (k0 - have0) * W,
                        sizeof(float) * (size_t)((k1 - k0) * W));
        if (i1 > k1) { /* the new rows: one GEMM, the 1x1's epilogue on its blocks */
            g.N = g.n_end = (i1 - k1) * W;
            g.b.p = j->x + k1 * W;
            g.c = mid + (k1 - i0) * W;
            g.epi_out = g.c;
            ml_sgemm(&g);
        }
        have0 = i0, have1 = i1;
        d.r0 = i0, d.H = i1, d.ob = o0, d.oe = o1;
        for (int64_t c = 0; c < C; ++c) d.units(&d, c, c + 1, dws);
    }
}

/* One image: y = dw(epi_pw(conv1x1(x))) with the depthwise conv's epilogue on y.
 *   x [K][H][W]; a: the 1x1's weights [C][K] packed (gemm.h full-K); pw_bias [C] or NULL;
 *   pw_epi: the 1x1's epilogue on a band (out = the band's row 0, b = 0, rows
 *   ((rows - 1) * SH + KH) * W floats apart) or NULL; the depthwise conv as ml_dwconv2d's
 *   arguments (fast shapes only: units is ml_dw_units_<K>_<SH><SW>), its output y
 *   [C][OH][OW]; rows: output rows per band (a multiple of ML_DW_R); per_thread: floats
 *   of scratch a thread needs (ml_pwdw_scratch_floats), scratch: the calling thread's.
 * Threads split the bands, not the channels: split by channels, each thread packed the
 * 1x1's B for its own rows of A (2 threads: no faster than 1). */
ML_UNUSED static void ml_pwdw(int64_t K, int64_t C, int64_t H, int64_t W, const float* x,
                              const float* a, const float* pw_bias, ml_epi_fn pw_epi,
                              int64_t OH, int64_t OW, int KH, int SH, int SW, int64_t PT,
                              int64_t PL, const float* dw_w, const float* dw_bias, float* y,
                              ml_epi_fn dw_epi, void* dw_epi_out, int64_t n,
                              ml_dw_units_fn units, int64_t rows, int64_t per_thread,
                              float* scratch) {
    ml_pwdw_job j;
    memset(&j, 0, sizeof j);
    const int64_t mid_rows = (rows - 1) * SH + KH;
    j.g = ml_gemm_defaults(C, 0, K, a, 0);
    j.g.b.kind = ML_B_STRIDED;
    j.g.b.ldk = H * W;
    j.g.b.ldn = 1;
    j.g.bias_m = pw_bias;
    j.g.ldc = mid_rows * W;
    j.g.epi = pw_epi;
    int64_t Wp = (OW - 1) * SW + KH;
    ml_dw_job d = {C, H, W, OH, OW, PT, PL, Wp, ml_dw_row_floats(OW, KH, SW), 0, rows, 1, 0,
                   n, ml_dw_block_rows(OH, OW, KH, SH, SW), KH, KH, SH, SW, 1, 1, 0, dw_w,
                   dw_bias, y, dw_epi, dw_epi_out, units, 0, 0, 0, 0, OH};
    j.dw = d;
    j.x = x;
    j.H = H, j.W = W, j.rows = rows, j.tasks = 1;
    j.mid_floats = (C * mid_rows * W + 15) / 16 * 16;
    j.bbuf_floats = (ml_gemm_bbuf_floats(K, mid_rows * W) + 15) / 16 * 16;
#ifdef MONOLIB_THREADPOOL_H
    /* the 1x1's multiply-adds and the depthwise conv's, in equal runs of rows; one per
     * thread at most (each computes its first band's halo rows again) */
    double work = (double)C * (H * W * K + OH * OW * KH * KH);
    int64_t tasks = ML_MIN(ml_par_tasks(work, (OH + ML_DW_R - 1) / ML_DW_R), ml_num_threads());
    if (tasks > 1) {
        j.tasks = tasks;
        ml_parallel_for(tasks, ml_pwdw_task, &j, scratch, sizeof(float) * (size_t)per_thread);
        return;
    }
#endif
    (void)per_thread;
    ml_pwdw_task(&j, 0, scratch);
}

/* Floats of scratch per thread of ml_pwdw (conv_band.py mirrors it at the widest vectors):
 * the band, the B buffer, the depthwise scratch. */
static inline int64_t ml_pwdw_scratch_floats(int64_t K, int64_t C, int64_t W, int64_t OH,
                                             int64_t OW, int KH, int SH, int SW, int64_t PL,
                                             int64_t rows) {
    int64_t mid_rows = (rows - 1) * SH + KH;
    return (C * mid_rows * W + 15) / 16 * 16 +
           (ml_gemm_bbuf_floats(K, mid_rows * W) + 15) / 16 * 16 +
           ml_dw_scratch_floats(W, OH, OW, KH, KH, SH, SW, PL, 1, 1);
}
#endif
