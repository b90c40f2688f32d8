"""Splits chosen by modelled cost (issue 14: threads that pay off on small and medium ops).

threadpool.h's ml_par_split / ml_par_pays and gemm.h's ml_gemm_split decide split vs
serial, and the split's shape, from the modelled serial time against the longest
thread's modelled time plus the job's overhead (ML_PAR_JOB_COST), not from a fixed
size: a tiny GEMM stays on the calling thread, a medium GEMM against packed weights
(below the former 2^21 multiply-add floor) splits, a GEMM with a run-time B splits by
columns (a row split would repack B in each task), and the chosen grid is the one the
model says finishes first. Results are the same bits on 1, 2 and 3 threads on odd
shapes, and match NumPy; a small conv model's kernels run split and match ORT.
"""

from __future__ import annotations

import ctypes

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from monolib.compiler.backends.c.headers import kernel_header
from monolib.compiler.testing import build_shared, ort_run

# ml_parallel_for records its task count; the harness clears any back-off before a
# traced call (a loaded machine's late worker would make it run serially and hide the
# splits) and its workers spin for a second (small ops stay serial while they sleep)
_TRACE_HEAD = "static void ml_parallel_for(int64_t n_tasks, ml_task_fn fn, void* ctx, void* scratch0,"
_TRACE = """
static int64_t ml_trace_tasks, ml_trace_jobs;
static void ml_trace(int64_t n_tasks) {
    if (n_tasks < 2 || ml_num_threads() < 2) return;
    ml_trace_tasks += n_tasks;
    ml_trace_jobs += 1;
}
"""
_TRACE_BODY = "    int32_t nt = ml_num_threads();\n    if (nt > n_tasks)"

_HARNESS = r"""
/* no back-off left from a late or absent worker (a loaded machine): splits are seen */
static void no_backoff(void) {
    ml_pool.backoff_until = ml_pool.backoff_ns = 0;
    ml_pool.absent = 0;
}
static void set_threads(int nt) { ml_set_num_threads(nt); ml_set_spin(1000000); no_backoff(); }

/* B [K][N] row-major into full-K panels of ML_NR columns (zero past N) */
static void pack_b(int64_t K, int64_t N, const float* b, float* d) {
    for (int64_t q = 0; q < (N + ML_NR - 1) / ML_NR; ++q)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t c = 0; c < ML_NR; ++c) {
                int64_t n = q * ML_NR + c;
                d[(q * K + k) * ML_NR + c] = n < N ? b[k * N + n] : 0.0f;
            }
}

static ml_gemm_args make(int64_t M, int64_t N, int64_t K, int packed, const float* pa,
                         const float* b, float* c, float* bbuf) {
    ml_gemm_args g = ml_gemm_defaults(M, N, K, pa, c);
    g.bbuf = bbuf;
    if (packed) { g.b.kind = ML_B_PACKED; g.b.p = b; g.b.k_total = K; }
    else { g.b.kind = ML_B_STRIDED; g.b.p = b; g.b.ldk = N; g.b.ldn = 1; }
    return g;
}

/* C = A B by ml_sgemm_par on nt threads; returns the tasks handed to the pool (0: serial) */
int64_t gemm_run(int nt, int64_t M, int64_t N, int64_t K, int packed, const float* a,
                 const float* b, float* c) {
    set_threads(nt);
    float *pa, *pb = 0, *bbuf;
    if (posix_memalign((void**)&pa, 64, 4 * ((M + ML_MR - 1) / ML_MR * ML_MR * K + 16))) return -1;
    if (posix_memalign((void**)&pb, 64, 4 * ((N + ML_NR - 1) / ML_NR * ML_NR * K + 16))) return -1;
    if (posix_memalign((void**)&bbuf, 64, 4 * ml_gemm_bbuf_floats(K, N))) return -1;
    ml_pack_a(M, K, a, K, 1, pa);
    if (packed) pack_b(K, N, b, pb);
    ml_gemm_args g = make(M, N, K, packed, pa, packed ? pb : b, c, bbuf);
    ml_sgemm_par(&g); /* starts the workers */
    no_backoff();
    ml_trace_tasks = 0;
    ml_sgemm_par(&g);
    free(pa); free(pb); free(bbuf);
    return ml_trace_tasks;
}

/* ml_sgemm_par's plan on nt threads: out = chunk_n, chunk_m (0, 0: serial);
 * costs = serial, the chosen split's span, the least span over every grid */
void gemm_plan(int nt, int64_t M, int64_t N, int64_t K, int packed, int64_t* out, double* costs) {
    set_threads(nt);
    ml_gemm_args g = make(M, N, K, packed, (const float*)64, (const float*)64, 0, 0);
    int64_t un = (N + 31) / 32, um = (M + ML_MR - 1) / ML_MR;
    int64_t most = ml_par_most(ml_gemm_task_cost(&g, M, N), un * um);
    costs[0] = ml_gemm_task_cost(&g, M, N);
    costs[1] = ml_gemm_split(&g, most, out, out + 1);
    if (!ml_par_pays(costs[0], costs[1])) out[0] = out[1] = 0;
    costs[2] = 1e300;
    for (int64_t tn = 1; tn <= un; ++tn) /* every grid of even column and row chunks */
        for (int64_t tm = 1; tm <= um; ++tm) {
            int64_t cn = (un + tn - 1) / tn * 32, cm = (um + tm - 1) / tm * ML_MR;
            int64_t t = ((N + cn - 1) / cn) * ((M + cm - 1) / cm);
            if (t > most) continue;
            double s = ml_gemm_span(&g, cn, cm);
            if (s < costs[2]) costs[2] = s;
        }
}

int64_t par_split(int nt, double cost, int64_t units, double task) {
    set_threads(nt);
    return ml_par_split(cost, units, task);
}

double par_span(int nt, int64_t n, double each, double last) {
    set_threads(nt);
    return ml_par_span(n, each, last, nt) - ML_PAR_JOB_COST;
}

double job_cost(void) { return ML_PAR_JOB_COST; }

static void nop(void* c, int64_t t, void* s) { (void)c; (void)t; (void)s; }
static int wait_asleep(int want) { /* up to 2 s */
    for (int i = 0; i < 2000 && ml_pool_asleep() != want; ++i) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, 0);
    }
    return ml_pool_asleep() == want;
}

/* The pool's book-keeping (ml_pool_after_job(late, absent, shared)) after jobs the
 * workers took no task of for ML_ABSENT_NS or more (absent), short jobs the caller ran
 * alone (neither), and one they took part in (shared): out = [backing off after 1, 2, 3
 * absent jobs; after a 4th following a shared job; after 3 absent jobs with short ones
 * between them; after 20 short ones alone] */
void absent(int* out) {
    no_backoff();
    for (int i = 0; i < 3; ++i) {
        ml_pool_after_job(0, 1, 0);
        out[i] = ml_pool_backing_off();
    }
    no_backoff();
    ml_pool_after_job(0, 1, 0);
    ml_pool_after_job(0, 1, 0);
    ml_pool_after_job(0, 0, 1); /* a worker took a task: the count starts again */
    ml_pool_after_job(0, 1, 0);
    out[3] = ml_pool_backing_off();
    no_backoff();
    for (int i = 0; i < 3; ++i) { /* short jobs neither count nor reset the count */
        ml_pool_after_job(0, 1, 0);
        ml_pool_after_job(0, 0, 0);
    }
    out[4] = ml_pool_backing_off();
    no_backoff();
    for (int i = 0; i < 20; ++i) ml_pool_after_job(0, 0, 0);
    out[5] = ml_pool_backing_off();
    no_backoff();
}

/* Workers asleep, a small op that would pay off split: out = [asleep after 50 ms
 * with no op, that op's verdict, awake after it, the next op's verdict] */
void kick(int* out) {
    ml_set_num_threads(2);
    ml_set_spin(0);
    no_backoff();
    struct timespec ts = {0, 50000000};
    for (int i = 0; i < 20; ++i) { /* the worker sleeps at once, and stays asleep */
        ml_parallel_for(2, nop, 0, 0, 0);
        wait_asleep(1);
        nanosleep(&ts, 0);
        if (ml_pool_asleep()) break;
    }
    ml_set_spin(1000000);
    nanosleep(&ts, 0);
    out[0] = ml_pool_asleep();
    out[1] = ml_par_pays(1e6, 6e5);
    out[2] = wait_asleep(0);
    out[3] = ml_par_pays(1e6, 6e5);
    ml_set_spin(ML_SPIN_NS / 1000);
}
"""


@pytest.fixture(scope="module")
def lib():
    tp = kernel_header("threadpool.h")
    assert _TRACE_HEAD in tp and _TRACE_BODY in tp
    tp = tp.replace(_TRACE_HEAD, _TRACE + _TRACE_HEAD, 1)
    tp = tp.replace(_TRACE_BODY, "    ml_trace(n_tasks);\n" + _TRACE_BODY, 1)
    src = ("#include <stdlib.h>\n" + tp
           + kernel_header("gemm.h") + _HARNESS)
    dll = build_shared(src)
    i64, dbl = ctypes.c_int64, ctypes.c_double
    dll.gemm_run.restype = i64
    dll.gemm_run.argtypes = [ctypes.c_int, i64, i64, i64, ctypes.c_int] + [ctypes.c_void_p] * 3
    dll.gemm_plan.argtypes = [ctypes.c_int, i64, i64, i64, ctypes.c_int, ctypes.c_void_p,
                              ctypes.c_void_p]
    dll.par_split.restype = i64
    dll.par_split.argtypes = [ctypes.c_int, dbl, i64, dbl]
    dll.par_span.restype = dbl
    dll.par_span.argtypes = [ctypes.c_int, i64, dbl, dbl]
    dll.job_cost.restype = dbl
    dll.kick.argtypes = [ctypes.c_void_p]
    dll.absent.argtypes = [ctypes.c_void_p]
    yield dll
    dll.gemm_plan(1, 6, 32, 16, 1, (i64 * 2)(), (dbl * 3)())  # leave the pool at 1


def _plan(lib, nt, m, n, k, packed):
    out, costs = (ctypes.c_int64 * 2)(), (ctypes.c_double * 3)()
    lib.gemm_plan(nt, m, n, k, int(packed), out, costs)
    return tuple(out), tuple(costs)


def _run(lib, nt, a, b, packed):
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), np.float32)
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    tasks = lib.gemm_run(nt, m, n, k, int(packed), a.ctypes.data, b.ctypes.data, c.ctypes.data)
    assert tasks >= 0
    return c, tasks


def test_tiny_gemm_stays_serial(lib):
    # 6x32x16 (3K multiply-adds, well under a microsecond): the job's overhead alone
    # exceeds what a second thread could save
    (cn, cm), (serial, span, _) = _plan(lib, 2, 6, 32, 16, True)
    assert (cn, cm) == (0, 0) and span >= serial
    rng = np.random.default_rng(0)
    _, tasks = _run(lib, 2, rng.standard_normal((6, 16), np.float32),
                    rng.standard_normal((16, 32), np.float32), True)
    assert tasks == 0


def test_medium_gemm_against_packed_weights_splits(lib):
    # 56 pixels x 96 channels x 216 (1.2M multiply-adds, ~20 us: under the former 2^21
    # floor, it stayed serial): packed weights, nothing repacked per task
    (cn, cm), (serial, span, _) = _plan(lib, 2, 56, 96, 216, True)
    assert cn and cm and span < 0.6 * serial
    rng = np.random.default_rng(1)
    a = rng.standard_normal((56, 216), np.float32)
    b = rng.standard_normal((216, 96), np.float32)
    c1, t1 = _run(lib, 1, a, b, True)
    c2, t2 = _run(lib, 2, a, b, True)
    assert t1 == 0 and t2 >= 2
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_allclose(c2, a @ b, rtol=1e-4, atol=1e-4)


def test_runtime_b_splits_by_columns(lib):
    # 48 x 576 x 72 against a run-time B (an im2col GEMM's shape): each row block would
    # pack all of B again, so the model splits the columns (one row block); measured on 2
    # cores: columns 21.4 us, rows 23.2, serial 38.1
    (cn, cm), (serial, span, _) = _plan(lib, 2, 48, 576, 72, False)
    assert cm >= 48 and -(-576 // cn) >= 2
    assert span < serial


def test_chosen_split_is_the_modelled_fastest(lib):
    for m, n, k, packed in [(56, 96, 216, True), (72, 240, 216, False), (1024, 196, 256, False),
                            (200, 40, 480, False), (96, 544, 144, False), (13, 300, 64, True)]:
        for nt in (2, 3, 4):
            (cn, cm), (serial, span, least) = _plan(lib, nt, m, n, k, packed)
            # ml_gemm_split takes fewer tasks among near ties (2%)
            assert span <= 1.021 * least, (m, n, k, nt)
            assert (cn > 0) == (span < serial)


def test_par_split_follows_the_cost(lib):
    job = lib.job_cost()
    assert lib.par_split(2, 0.5 * job, 64, 0.0) == 1  # less than the job's overhead
    assert lib.par_split(1, 1e9, 64, 0.0) == 1  # one thread
    assert lib.par_split(2, 1e9, 1, 0.0) == 1  # one unit
    t = lib.par_split(2, 8 * job, 64, 1000.0)
    assert t >= 2
    assert lib.par_split(2, 1e9, 64, 1000.0) == 8  # large: 4 tasks a thread cover a delay
    # a split whose per-task repeat eats the gain stays serial
    assert lib.par_split(2, 8 * job, 64, 8 * job) == 1


def test_par_span_is_in_order_hand_out(lib):
    rng = np.random.default_rng(2)
    for _ in range(200):
        nt, n = int(rng.integers(2, 6)), int(rng.integers(2, 20))
        each = float(rng.integers(1, 100))
        last = float(rng.integers(1, int(each) + 1))
        fin = [0.0] * nt
        for i in range(n):
            f = min(range(nt), key=lambda u: fin[u])
            fin[f] += last if i == n - 1 else each
        assert lib.par_span(nt, n, each, last) == pytest.approx(max(fin)), (nt, n, each, last)


def test_absent_workers_make_the_pool_back_off(lib):
    # workers that take no task of ML_ABSENT_JOBS (3) jobs in a row (another process
    # holds their core) make the pool run serially for a while: each split only cost
    # overhead; a job a worker took part in starts the count again. A job the caller
    # finished alone in under ML_ABSENT_NS says nothing of the workers: counted, tiny
    # jobs (an LSTM step's GEMMs) set off back-off after back-off on a quiet machine
    out = (ctypes.c_int * 6)()
    lib.absent(out)
    assert list(out) == [0, 0, 1, 0, 1, 0]


def test_small_op_kicks_sleeping_workers_awake(lib):
    # a small op that would pay off split, while every worker sleeps, runs serially and
    # wakes them; the next one splits (else a model of small ops never split again)
    out = (ctypes.c_int * 4)()
    lib.kick(out)
    asleep, first, woke, second = got = list(out)
    assert asleep == 1, f"the worker did not fall asleep with no spin {got}"
    assert first == 0, f"a small op split while every worker slept {got}"
    assert woke == 1, f"the kick did not wake the worker {got}"
    assert second == 1, f"the op after the kick did not split {got}"


@pytest.mark.parametrize("packed", [True, False])
def test_odd_shapes_same_bits_on_any_thread_count(lib, packed):
    rng = np.random.default_rng(3)
    for m, n, k in [(7, 37, 19), (13, 100, 300), (50, 5, 64), (31, 65, 33), (97, 129, 3)]:
        a = rng.standard_normal((m, k), np.float32)
        b = rng.standard_normal((k, n), np.float32)
        c1, _ = _run(lib, 1, a, b, packed)
        np.testing.assert_allclose(c1, a @ b, rtol=1e-4, atol=1e-4)
        for nt in (2, 3):
            c, _ = _run(lib, nt, a, b, packed)
            np.testing.assert_array_equal(c1, c, err_msg=f"{m}x{n}x{k} on {nt} threads")


def _small_model() -> onnx.ModelProto:
    """z [56,216] @ w [216,96] + Relu (a GEMM against packed weights, 1.2M multiply-adds)
    and a [3,40,64] @ b [3,64,48] (a batch of run-time GEMMs, 0.4M), both below the former
    2^21 floor; x [1,36,11,9] -> grouped 3x3 conv (4 groups of 72K multiply-adds: the
    model keeps each on one thread)."""
    rng = np.random.default_rng(4)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32),
                                       name)

    nodes = [
        helper.make_node("MatMul", ["z", "w5"], ["m"]),
        helper.make_node("Relu", ["m"], ["y3"]),
        helper.make_node("Conv", ["x", "w4"], ["y2"], pads=[1, 1, 1, 1], group=4),
        helper.make_node("MatMul", ["a", "b"], ["y4"]),
    ]
    graph = helper.make_graph(
        nodes, "small_split",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 36, 11, 9]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [56, 216]),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 40, 64]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 64, 48])],
        [helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 36, 11, 9]),
         helper.make_tensor_value_info("y3", TensorProto.FLOAT, [56, 96]),
         helper.make_tensor_value_info("y4", TensorProto.FLOAT, [3, 40, 48])],
        [w("w4", 36, 9, 3, 3), w("w5", 216, 96)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


_FN_TRACE = """
static int32_t ml_trace_n;
static ml_task_fn ml_trace_fns[256];
static void ml_trace_fn(ml_task_fn fn, int64_t n_tasks) {
    if (n_tasks > 1 && ml_num_threads() > 1 && ml_trace_n < 256) ml_trace_fns[ml_trace_n++] = fn;
}
"""


def test_small_model_splits_same_bits():
    from monolib.compiler.build import lower
    from monolib.compiler.testing import build_c, run_c

    model = _small_model()
    rng = np.random.default_rng(5)
    feeds = {k: rng.standard_normal(s).astype(np.float32)
             for k, s in [("x", (1, 36, 11, 9)), ("z", (56, 216)), ("a", (3, 40, 64)),
                          ("b", (3, 64, 48))]}
    source, graph, params = lower(model)
    # no back-off, workers spinning for a second, and the split jobs' task functions
    source = ("#define ML_LATE_NS (1LL << 62)\n#define ML_SPIN_NS 1000000000\n"
              + source.replace(_TRACE_HEAD, _FN_TRACE + _TRACE_HEAD, 1)
              .replace(_TRACE_BODY, "    ml_trace_fn(fn, n_tasks);\n" + _TRACE_BODY, 1))
    source += ("MONOLIB_EXPORT int32_t trace_n(void) { return ml_trace_n; }\n"
               "MONOLIB_EXPORT void* trace_fn(int32_t i) { return (void*)ml_trace_fns[i]; }\n"
               "MONOLIB_EXPORT void* gemm_task(void) { return (void*)ml_sgemm_task; }\n"
               "MONOLIB_EXPORT void* batch_task(void) { return (void*)ml_sgemm_batch_task; }\n")
    dll = build_c(source)  # run_c runs this (cached) library
    dll.trace_fn.restype = dll.gemm_task.restype = dll.batch_task.restype = ctypes.c_void_p
    outs = {}
    try:
        for nt in (1, 2):
            dll.monolib_set_num_threads(nt)
            outs[nt] = run_c(source, graph, params, feeds)
    finally:
        dll.monolib_set_num_threads(1)
    for a, b in zip(outs[1], outs[2]):
        np.testing.assert_array_equal(a, b)
    for got, ref in zip(outs[2], ort_run(model, feeds)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    fns = [dll.trace_fn(i) for i in range(dll.trace_n())]
    # none split under the former fixed floor
    assert dll.gemm_task() in fns, "the 56x96x216 MatMul ran serially on 2 threads"
    assert dll.batch_task() in fns, "the batch of three 40x48x64 GEMMs ran serially"
