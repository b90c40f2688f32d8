"""The library's thread pool (kernels/threadpool.h): large Conv (direct, depthwise,
im2col and pointwise GEMM paths), ConvTranspose, MatMul and elementwise chains split over threads give the single-thread
results bit for bit and match ONNX Runtime; thread counts from set_num_threads,
MONOLIB_NUM_THREADS and the CPU affinity; executors in parallel Python threads."""

import ctypes
import os
import subprocess
import sys
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.testing import ort_run
from monolib.runtime import GraphModule, InputError, cpu, set_num_threads

RNG = np.random.default_rng(7)


def _w(name, *shape):
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.1).astype(np.float32), name)


def _conv_model() -> onnx.ModelProto:
    """x [1,64,96,96] -> direct 3x3 conv (32 out) -> Relu -> depthwise 3x3 -> pointwise
    64 (GEMM) -> strided 3x3 conv 64 (im2col GEMM) -> y; each (and the padding of the
    direct and im2col convs) above the parallel
    threshold. Second output: MatMul of z [192,128] by a [128,160] weight. Third: u
    [1,32,144,144] -> ConvTranspose 2x2/2 (16) + Relu -> ConvTranspose 2x2/2 (1) + Sigmoid
    (fused GEMM + depth-to-space scatter and epilogue split over input rows).
    Fourth and fifth: large elementwise chains, broadcast (Relu(e * k + e2), nested
    loops) and flat (Sigmoid(e2), one loop split at multiples of 64). Sixth: a 1x1 conv
    of q [1,480,1,40] to 200 channels + HardSigmoid: 40 columns, so split over rows.
    Seventh: f [4,300,512] @ [512,40] + a per-batch bias [4,1,40], Relu: the batches are
    folded into 1,200 GEMM rows, split over row blocks that cross batch boundaries (the
    epilogue must still see each row's own batch), A packed at run time on the pool."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=32),
        helper.make_node("Conv", ["c2", "w3", "b3"], ["c3"]),
        helper.make_node("Conv", ["c3", "w4"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("MatMul", ["z", "w5"], ["m"]),
        helper.make_node("Sigmoid", ["m"], ["s"]),
        helper.make_node("ConvTranspose", ["u", "w6", "b6"], ["t1"], strides=[2, 2]),
        helper.make_node("Relu", ["t1"], ["r6"]),
        helper.make_node("ConvTranspose", ["r6", "w7"], ["t2"], strides=[2, 2]),
        helper.make_node("Sigmoid", ["t2"], ["v"]),
        helper.make_node("Conv", ["q", "w8", "b8"], ["q1"]),
        helper.make_node("HardSigmoid", ["q1"], ["o3"]),
        helper.make_node("Mul", ["e", "k"], ["ek"]),
        helper.make_node("Add", ["ek", "e2"], ["eke"]),
        helper.make_node("Relu", ["eke"], ["o1"]),
        helper.make_node("Sigmoid", ["e2"], ["o2"]),
        helper.make_node("MatMul", ["f", "w9"], ["fm"]),
        helper.make_node("Add", ["fm", "b9"], ["fb"]),
        helper.make_node("Relu", ["fb"], ["o4"]),
    ]
    inits = [_w("w1", 32, 64, 3, 3), _w("b1", 32), _w("w2", 32, 1, 3, 3), _w("w3", 64, 32, 1, 1),
             _w("b3", 64), _w("w4", 64, 64, 3, 3), _w("w5", 128, 160), _w("w6", 32, 16, 2, 2),
             _w("b6", 16), _w("w7", 16, 1, 2, 2), _w("k", 64, 1, 1),
             _w("w8", 200, 480, 1, 1), _w("b8", 200), _w("w9", 512, 40), _w("b9", 4, 1, 40)]
    graph = helper.make_graph(
        nodes, "threads",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 96, 96]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [192, 128]),
         helper.make_tensor_value_info("u", TensorProto.FLOAT, [1, 32, 144, 144]),
         helper.make_tensor_value_info("e", TensorProto.FLOAT, [8, 64, 40, 40]),
         helper.make_tensor_value_info("e2", TensorProto.FLOAT, [8, 64, 40, 40]),
         helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 480, 1, 40]),
         helper.make_tensor_value_info("f", TensorProto.FLOAT, [4, 300, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 48, 48]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [192, 160]),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 1, 576, 576]),
         helper.make_tensor_value_info("o1", TensorProto.FLOAT, [8, 64, 40, 40]),
         helper.make_tensor_value_info("o2", TensorProto.FLOAT, [8, 64, 40, 40]),
         helper.make_tensor_value_info("o3", TensorProto.FLOAT, [1, 200, 1, 40]),
         helper.make_tensor_value_info("o4", TensorProto.FLOAT, [4, 300, 40])],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


FEEDS = {"x": RNG.standard_normal((1, 64, 96, 96)).astype(np.float32),
         "z": RNG.standard_normal((192, 128)).astype(np.float32),
         "u": RNG.standard_normal((1, 32, 144, 144)).astype(np.float32),
         "e": RNG.standard_normal((8, 64, 40, 40)).astype(np.float32),
         "e2": RNG.standard_normal((8, 64, 40, 40)).astype(np.float32),
         "q": RNG.standard_normal((1, 480, 1, 40)).astype(np.float32),
         "f": RNG.standard_normal((4, 300, 512)).astype(np.float32)}


@pytest.fixture(scope="module")
def model():
    return _conv_model()


@pytest.fixture(scope="module")
def factory(model):
    return monolib.compile(model, target="c")


@pytest.fixture(scope="module")
def library(factory, tmp_path_factory):
    path = tmp_path_factory.mktemp("threads") / "threads.so"
    factory.export_library(str(path))
    return path


def _run(gm: GraphModule) -> list[np.ndarray]:
    gm.run(**FEEDS)
    return [gm.get_output(i).numpy().copy() for i in range(gm.get_num_outputs())]


@pytest.fixture
def restore_threads():
    yield
    set_num_threads(len(os.sched_getaffinity(0)))


def test_threads_give_the_single_thread_result(factory, model, restore_threads):
    gm = GraphModule(factory["default"](cpu()))
    set_num_threads(1)
    one = _run(gm)
    want = ort_run(model, FEEDS)
    for got, ref in zip(one, want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    for n in (2, 3, 1, 2):
        set_num_threads(n)
        for got, ref in zip(_run(gm), one):
            # tasks split output columns/rows/channels: every sum keeps its order
            np.testing.assert_array_equal(got, ref, err_msg=f"{n} threads")


def test_run_op_and_profile_use_the_pool(factory, restore_threads):
    gm = GraphModule(factory["default"](cpu()))
    set_num_threads(1)
    want = _run(gm)
    set_num_threads(2)
    gm.set_input(**FEEDS)
    ex = gm.executor
    for i in range(ex.num_ops()):
        ex.run_op(i)
    for i, ref in enumerate(want):
        np.testing.assert_array_equal(gm.get_output(i).numpy(), ref)
    assert len(ex.profile(repeat=1)) == ex.num_ops()


def test_executors_in_parallel_python_threads(factory, restore_threads):
    """Two executors of one library run at once: one gets the pool, the other runs its
    ops serially; both stay right."""
    set_num_threads(2)
    gms = [GraphModule(factory["default"](cpu())) for _ in range(2)]
    want = _run(gms[0])
    errors = []

    def work(gm):
        try:
            for _ in range(15):
                for got, ref in zip(_run(gm), want):
                    np.testing.assert_array_equal(got, ref)
        except AssertionError as e:  # reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(gm,)) for gm in gms]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2", None])
def test_set_num_threads_rejects(bad):
    with pytest.raises(InputError, match="set_num_threads: n must be an integer >= 1"):
        set_num_threads(bad)


_PROBE = """
import ctypes, sys
import numpy as np
import monolib
mod = monolib.load_module(sys.argv[1])
gm = monolib.GraphModule(mod["default"](monolib.cpu()))
lib = ctypes.CDLL(sys.argv[1])
print(lib.monolib_set_num_threads(0), lib.monolib_set_num_threads(1000))
"""


def _probe(library, env_threads):
    env = {k: v for k, v in os.environ.items() if k != "MONOLIB_NUM_THREADS"}
    if env_threads is not None:
        env["MONOLIB_NUM_THREADS"] = env_threads
    out = subprocess.run([sys.executable, "-c", _PROBE, str(library)], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return [int(v) for v in out.stdout.split()]


def test_thread_count_from_environment(library):
    # read at load; monolib_set_num_threads(0) queries; counts are capped at 64
    assert _probe(library, "3") == [3, 64]
    assert _probe(library, None) == [len(os.sched_getaffinity(0)), 64]
    assert _probe(library, "junk") == [len(os.sched_getaffinity(0)), 64]


def test_set_num_threads_reaches_the_library(library, restore_threads):
    mod = monolib.load_module(str(library))
    gm = GraphModule(mod["default"](cpu()))
    lib = ctypes.CDLL(str(library))
    set_num_threads(3)
    assert lib.monolib_set_num_threads(0) == 3
    set_num_threads(1)
    assert lib.monolib_set_num_threads(0) == 1
    assert _run(gm)[0].shape == (1, 64, 48, 48)


_TRACE = """
static int32_t ml_trace_n;
static ml_task_fn ml_trace_fns[4096];
static void ml_trace(ml_task_fn fn, int64_t n_tasks) {
    if (n_tasks > 1 && ml_num_threads() > 1 && ml_trace_n < 4096) ml_trace_fns[ml_trace_n++] = fn;
}
"""


def test_every_kernel_of_the_model_runs_split(model, monkeypatch):
    """At 2 threads each parallel kernel (GEMM columns and rows, direct conv rows,
    depthwise channels, padding, ConvTranspose rows, elementwise blocks) is handed to the
    pool with more than one task: the model's sizes are above the threshold, the test is real."""
    from monolib.compiler.build import lower
    from monolib.compiler.testing import build_c, run_c
    from monolib.compiler.tuning.select import Selection, selecting

    # the 3x3 conv on the direct path, the strided one on the padded im2col GEMM (the
    # rule would give them Winograd and direct_ocv, which pad nothing)
    with selecting(Selection(forced={"Conv_0": "direct", "Conv_4": "gemm"})):
        source, graph, params = lower(model)
    # no back-off to the calling thread: on a loaded machine a late worker would make
    # the pool run the next ops serially and hide the splits this test checks
    source = "#define ML_LATE_NS (1LL << 62)\n" + source
    head = "static void ml_parallel_for(int64_t n_tasks, ml_task_fn fn, void* ctx, void* scratch0,"
    assert head in source
    source = source.replace(head, _TRACE + head, 1)
    body = "    int32_t nt = ml_num_threads();\n    if (nt > n_tasks)"
    assert body in source
    source = source.replace(body, "    ml_trace(fn, n_tasks);\n" + body, 1)
    # (a MatMul's run-time A is read in place by gemm.h, no ml_pack_a_task to split)
    kernels = ["ml_sgemm_task", "ml_dw_task", "ml_direct_task", "ml_pad_task", "ml_tconv_task"]
    source += "".join(
        f"MONOLIB_EXPORT void* trace_{k}(void) {{ return (void*){k}; }}\n" for k in kernels)
    source += ("MONOLIB_EXPORT int32_t trace_n(void) { return ml_trace_n; }\n"
               "MONOLIB_EXPORT void* trace_fn(int32_t i) { return (void*)ml_trace_fns[i]; }\n")
    monkeypatch.setenv("MONOLIB_NUM_THREADS", "2")  # read when build_c loads the library
    outs = run_c(source, graph, params, FEEDS)
    for got, ref in zip(outs, ort_run(model, FEEDS)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    dll = build_c(source)
    dll.trace_fn.restype = ctypes.c_void_p
    called = {dll.trace_fn(i) for i in range(dll.trace_n())}
    for k in kernels:
        getattr(dll, f"trace_{k}").restype = ctypes.c_void_p
        assert getattr(dll, f"trace_{k}")() in called, f"{k} never ran split"
    # the rest are the generated elementwise tasks (two chains)
    assert len(called) - len(kernels) >= 2


_FORK = """
import os, sys
import numpy as np
import monolib
mod = monolib.load_module(sys.argv[1])
gm = monolib.GraphModule(mod["default"](monolib.cpu()))
rng = np.random.default_rng(0)
feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in gm.executor.inputs}
monolib.runtime.set_num_threads(2)
gm.run(**feeds)
want = [gm.get_output(i).numpy().copy() for i in range(gm.get_num_outputs())]
pid = os.fork()
if pid == 0:  # the child has no pool workers: the pool must start new ones
    gm.run(**feeds)
    same = all(np.array_equal(gm.get_output(i).numpy(), w) for i, w in enumerate(want))
    os._exit(0 if same else 3)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_forked_child_runs_threaded(library):
    out = subprocess.run([sys.executable, "-c", _FORK, str(library)], capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.split()[-1] == "0", out.stdout + out.stderr
