/* conv_band.h -- a depthwise convolution with the 1x1 convolution before it and/or the one
 * after it, run together by bands of rows (monolib kernel library).
 *
 * Needs gemm.h, conv.h and conv_depthwise.h before it (threadpool.h too, to split).
 *
 * An inverted residual block (MobileNetV2/V3, PP-LCNet, EfficientNet) is a 1x1
 * "expansion" to many channels, a depthwise conv, and a 1x1 "projection" back. Run one
 * after the other, the two tensors between them (4.8 MB each at MobileNetV2's 112 px)
 * leave the caches and are read back from memory. Here each task takes a run of output
 * rows, every channel, and sweeps it by bands: the expansion's GEMM computes the input
 * rows the band's windows need into scratch (the rows the band shares with the last one
 * are moved to the front, not computed again) and its epilogue runs there; the depthwise
 * kernel (ml_dw_units_*) reads them while they are in L2 and writes its output rows,
 * into the output or, with a projection, into scratch, where its epilogue runs and the
 * projection's GEMM reads them and writes its output rows (its epilogue on them: a
 * residual Add too). Neither intermediate exists in full, and a thread reads only rows it
 * wrote. The same idea is XNNPACK's and TVM's fused inverted-residual schedules (facts
 * carry over, code does not). conv_band.py decides which ops chain and the band height. */
#ifndef MONOLIB_CONV_BAND_H
#define MONOLIB_CONV_BAND_H
#include <stdint.h>
#include <string.h>

/* One image's chain. Band epilogues (the expansion's, and the depthwise conv's when a
 * projection follows) run on rows in scratch: out = the band's channel-0 row 0, b = 0,
 * channel rows ((rows - 1) * SH + KH) * W (expansion) or rows * OW (depthwise) floats
 * apart, columns from the band's first row. */
typedef struct {
    const float* x; /* the chain's input: [K][H][W] (expansion) or [C][H][W] */
    /* the expansion, C x K (a: packed full-K as gemm.h's A; NULL: none) */
    int64_t K;
    const float *a, *a_bias;
    ml_epi_fn a_epi;
    /* the depthwise conv: ml_dwconv2d's arguments (fast shapes: units is
     * ml_dw_units_<K>_<SH><SW>); dw_epi is a band epilogue when a projection follows */
    int64_t C, H, W, OH, OW, PT, PL;
    int KH, SH, SW;
    const float *dw_w, *dw_bias;
    ml_epi_fn dw_epi;
    ml_dw_units_fn units;
    /* the projection, M x C (q: packed full-K; NULL: none) */
    int64_t M;
    const float *q, *q_bias;
    ml_epi_fn q_epi;
    /* the chain's output [M or C][OH][OW], the last op's epilogue given epi_out, image n */
    float* y;
    void* epi_out;
    int64_t n;
    int64_t rows;       /* output rows per band, a multiple of ML_DW_R */
    int64_t per_thread; /* floats of scratch a thread needs: ml_band_scratch_floats */
    /* images (0 or 1: one; x, y and n are image 0's), and the floats between them */
    int64_t nimg, x_img, y_img;
} ml_band_args;

typedef struct {
    const ml_band_args* b;
    ml_dw_job dw;
    int64_t tasks, mid_floats, out_floats, bbuf_floats;
} ml_band_job;

/* Task t of tasks: output rows [OH * t / tasks, OH * (t + 1) / tasks) (ends on multiples
 * of ML_DW_R) of every channel, by bands of `rows`. Its first band computes its halo
 * rows again (its own scratch). Scratch: the expanded rows [C][mid rows][W], the
 * depthwise output rows [C][rows][OW], a GEMM B buffer, the depthwise scratch. */
static void ml_band_task(void* ctx, int64_t t, void* scratch) {
    const ml_band_job* j = (const ml_band_job*)ctx;
    const ml_band_args* b = j->b;
    const int64_t W = b->W, OW = b->OW, SH = b->SH, KH = b->KH, C = b->C, rows = b->rows;
    const int64_t ld = ((rows - 1) * SH + KH) * W, lo = rows * OW;
    float* mid = (float*)scratch;
    float* dout = mid + j->mid_floats;
    float* bbuf = dout + j->out_floats;
    float* dws = bbuf + j->bbuf_floats;
    ml_dw_job d = j->dw;
    if (b->a) d.x = d.xlo = mid, d.xs = ld, d.xhi = mid + C * ld;
    if (b->q) d.y = dout, d.ys = lo, d.epi_out = dout, d.epi_b = 0;
    ml_gemm_args ga = ml_gemm_defaults(C, 0, b->K, b->a, 0);
    ga.b.kind = ML_B_STRIDED, ga.b.ldk = b->H * W, ga.b.ldn = 1;
    ga.bias_m = b->a_bias, ga.ldc = ld, ga.epi = b->a_epi, ga.bbuf = bbuf;
    ml_gemm_args gq = ml_gemm_defaults(b->M, 0, C, b->q, 0);
    gq.b.kind = ML_B_STRIDED, gq.b.p = dout, gq.b.ldk = lo, gq.b.ldn = 1;
    gq.bias_m = b->q_bias, gq.ldc = b->OH * OW, gq.epi = b->q_epi, gq.bbuf = bbuf;
    gq.epi_out = b->epi_out, gq.epi_b = b->n;
    int64_t have0 = 0, have1 = 0; /* expanded input rows in mid */
    const int64_t q4 = (b->OH + ML_DW_R - 1) / ML_DW_R; /* whole tiles */
    const int64_t r0 = q4 * t / j->tasks * ML_DW_R;
    const int64_t r1 = ML_MIN(b->OH, q4 * (t + 1) / j->tasks * ML_DW_R);
    for (int64_t o0 = r0; o0 < r1; o0 += rows) {
        const int64_t o1 = ML_MIN(r1, o0 + rows);
        const int64_t i0 = ML_DW_MAX(0, o0 * SH - b->PT);
        const int64_t i1 = ML_MIN(b->H, (o1 - 1) * SH - b->PT + KH);
        if (b->a) {
            int64_t k0 = ML_DW_MAX(i0, have0), k1 = ML_MIN(i1, have1); /* rows kept */
            if (k1 <= k0) k0 = k1 = i0;
            else if (k0 > have0) /* to the front: row i0 at row 0 */
                for (int64_t c = 0; c < C; ++c)
                    memmove(mid + c * ld, mid + c * ld + (k0 - have0) * W,
                            sizeof(float) * (size_t)((k1 - k0) * W));
            if (i1 > k1) { /* the new rows: one GEMM, its epilogue on each block */
                ga.N = ga.n_end = (i1 - k1) * W;
                ga.b.p = b->x + k1 * W;
                ga.c = ga.epi_out = mid + (k1 - i0) * W;
                ml_sgemm(&ga);
            }
            have0 = i0, have1 = i1;
            d.r0 = i0, d.H = i1;
        }
        d.ob = o0, d.oe = o1;
        if (b->q) d.yr0 = o0;
        for (int64_t c = 0; c < C; ++c) d.units(&d, c, c + 1, dws);
        if (b->q) { /* the projection of the band's output rows */
            gq.N = gq.n_end = (o1 - o0) * OW;
            gq.c = b->y + o0 * OW;
            gq.epi_n0 = o0 * OW;
            ml_sgemm(&gq);
        }
    }
}

/* Floats of the parts of a thread's scratch (ml_band_task). */
static inline void ml_band_parts(const ml_band_args* b, int64_t* mid, int64_t* out,
                                 int64_t* bbuf) {
    const int64_t mid_rows = (b->rows - 1) * b->SH + b->KH;
    *mid = b->a ? (b->C * mid_rows * b->W + 15) / 16 * 16 : 0;
    *out = b->q ? (b->C * b->rows * b->OW + 15) / 16 * 16 : 0;
    int64_t fa = b->a ? ml_gemm_bbuf_floats(b->K, mid_rows * b->W) : 0;
    int64_t fq = b->q ? ml_gemm_bbuf_floats(b->C, b->rows * b->OW) : 0;
    *bbuf = (ML_DW_MAX(fa, fq) + 15) / 16 * 16;
}

/* Floats of scratch per thread of ml_conv_band (conv_band.py mirrors it at the widest
 * vectors): the parts, then the depthwise scratch. */
static inline int64_t ml_band_scratch_floats(const ml_band_args* b) {
    int64_t mid, out, bbuf;
    ml_band_parts(b, &mid, &out, &bbuf);
    return mid + out + bbuf +
           ml_dw_scratch_floats(b->W, b->OH, b->OW, b->KH, b->KH, b->SH, b->SW, b->PL, 1, 1);
}

/* The job of the chain on image b (one task: the whole image). */
static void ml_band_job_init(ml_band_job* j, const ml_band_args* b) {
    memset(j, 0, sizeof *j);
    j->b = b;
    ml_dw_job d = {b->C, b->H, b->W, b->OH, b->OW, b->PT, b->PL, (b->OW - 1) * b->SW + b->KH,
                   ml_dw_row_floats(b->OW, b->KH, b->SW), 0, b->rows, 1, 0, b->n,
                   ml_dw_block_rows(b->OH, b->OW, b->KH, b->SH, b->SW), b->KH, b->KH, b->SH,
                   b->SW, 1, 1, b->x, b->dw_w, b->dw_bias, b->y, b->dw_epi, b->epi_out,
                   b->units, b->H * b->W, 0, 0, 0, b->OH, b->OH * b->OW, 0};
    d.xlo = b->x, d.xhi = b->x + b->C * b->H * b->W; /* the image */
    j->dw = d;
    j->tasks = 1;
    ml_band_parts(b, &j->mid_floats, &j->out_floats, &j->bbuf_floats);
}

/* The args of image t of a batch (b: image 0's). */
static inline ml_band_args ml_band_at(const ml_band_args* b, int64_t t) {
    ml_band_args one = *b;
    one.nimg = 1;
    one.x += t * b->x_img;
    one.y += t * b->y_img;
    one.n += t;
    return one;
}

/* Image t of a batch (ctx: image 0's args), whole, on one thread. */
static void ml_band_image(void* ctx, int64_t t, void* scratch) {
    const ml_band_args one = ml_band_at((const ml_band_args*)ctx, t);
    ml_band_job j;
    ml_band_job_init(&j, &one);
    ml_band_task(&j, 0, scratch);
}

/* Run the chain on the images; scratch: the calling thread's b->per_thread floats.
 * Threads split the rows, not the channels: split by channels, each thread packed the
 * expansion's B for its own rows of A (2 threads: no faster than 1). A batch of at least
 * as many images as threads: whole images a task, one job (PP-OCRv4 rec at batch 6 ran
 * its chains image by image, each split in rows). The same sums either way. */
ML_UNUSED static void ml_conv_band(const ml_band_args* b, float* scratch) {
    if (b->nimg > 1) {
#ifdef MONOLIB_THREADPOOL_H
        if (ml_num_threads() > 1 && b->nimg >= ml_num_threads()) {
            ml_parallel_for(b->nimg, ml_band_image, (void*)b, scratch,
                            sizeof(float) * (size_t)b->per_thread);
            return;
        }
#endif
        for (int64_t t = 0; t < b->nimg; ++t) { /* fewer images: each split in rows */
            const ml_band_args one = ml_band_at(b, t);
            ml_conv_band(&one, scratch);
        }
        return;
    }
    ml_band_job j;
    ml_band_job_init(&j, b);
#ifdef MONOLIB_THREADPOOL_H
    /* the multiply-adds, in equal runs of rows; one per thread at most (each computes
     * its first band's halo rows again) */
    double work = (double)b->C * (b->OH * b->OW * (b->KH * b->KH + (b->q ? b->M : 0)) +
                                  (b->a ? b->H * b->W * b->K : 0));
    int64_t tasks = ML_MIN(ml_par_tasks(work, (b->OH + ML_DW_R - 1) / ML_DW_R),
                           ml_num_threads());
    if (tasks > 1) {
        j.tasks = tasks;
        ml_parallel_for(tasks, ml_band_task, &j, scratch, sizeof(float) * (size_t)b->per_thread);
        return;
    }
#endif
    ml_band_task(&j, 0, scratch);
}
#endif
