"""Helpers to test ops and models: one-node ONNX models, compile-and-run, ORT reference.

Typical op test::

    model = make_node_model("Add", {"a": a, "b": b}, {})
    got = run_model(model, {"a": a, "b": b})
    want = ort_run(model, {"a": a, "b": b})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)

:func:`run_model` compiles with :func:`monolib.compiler.build.compile` and runs the
factory's graph executor without exporting. When the runtime parts are not installed
it falls back to :func:`run_c`: the export's compiler builds a ``.so`` that ctypes runs
(the ABI of docs/ARCHITECTURE.md, "The generated C library").
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import logging
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..abi.names import NUM_OPS, RUN, RUN_OP
from ..errors import CompileError, InputError

__all__ = [
    "aligned_empty",
    "build_c",
    "build_shared",
    "make_node_model",
    "ort_run",
    "ort_session",
    "run_c",
    "run_model",
]

logger = logging.getLogger(__name__)

_LIBS: dict[str, ctypes.CDLL] = {}


def make_node_model(
    op_type: str,
    inputs: dict[str, np.ndarray | None],
    attrs: dict[str, Any] | None = None,
    *,
    opset: int = 17,
    outputs: int | Sequence[str] = 1,
    constant_inputs: Sequence[str] = (),
    domain: str = "",
):
    """A one-node ONNX model (``ir_version`` 10, accepted by ONNX Runtime).

    Parameters
    ----------
    op_type : str
        ONNX operator type.
    inputs : dict of str -> numpy.ndarray or None
        The node's inputs in order; the arrays give the graph inputs' dtypes and static
        shapes. ``None`` is an omitted optional input (empty name).
    attrs : dict, optional
        Node attributes (``onnx.helper.make_node`` keyword arguments).
    opset : int
        Opset version of ``domain`` (and of the default domain).
    outputs : int or list of str
        Number of outputs (named ``y``, ``y1``, ...) or their names.
    constant_inputs : list of str
        Names in ``inputs`` that become initializers (constants) instead of graph inputs.
    domain : str
        Operator domain (``""`` is ``ai.onnx``); with a custom domain ``opset`` is that
        domain's version and ``ai.onnx`` is imported at 17.

    Returns
    -------
    onnx.ModelProto
        Output types filled by ONNX shape inference where it can.
    """
    from onnx import helper, numpy_helper

    names = (
        list(outputs)
        if not isinstance(outputs, int)
        else ["y"] + [f"y{i}" for i in range(1, outputs)]
    )
    node = helper.make_node(
        op_type,
        [k if v is not None else "" for k, v in inputs.items()],
        names,
        domain=domain or None,
        **(attrs or {}),
    )
    consts = set(constant_inputs)
    inits, graph_inputs = [], []
    for k, v in inputs.items():
        if v is None:
            continue
        v = np.asarray(v)
        if k in consts:
            inits.append(numpy_helper.from_array(v, k))
        else:
            elem = helper.np_dtype_to_tensor_dtype(v.dtype)
            graph_inputs.append(helper.make_tensor_value_info(k, elem, v.shape))
    outs = [helper.make_empty_tensor_value_info(n) for n in names]
    graph = helper.make_graph([node], f"{op_type}_test", graph_inputs, outs, initializer=inits)
    imports = [helper.make_opsetid("", 17 if domain else opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, opset))
    model = helper.make_model(graph, opset_imports=imports, ir_version=10)
    _fill_output_types(
        model, {k: np.asarray(v) for k, v in inputs.items() if v is not None and k not in consts}
    )
    return model


def _fill_output_types(model, feeds: dict[str, np.ndarray]) -> None:
    """Give every graph output a tensor type (the ONNX checker requires one): from ONNX
    shape inference, else from running ONNX Runtime on the given inputs."""
    import onnx
    from onnx import helper

    outs = model.graph.output
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        known = {vi.name: vi for vi in inferred.graph.output}
        for vi in outs:
            tt = known[vi.name].type.tensor_type if vi.name in known else None
            if tt is not None and tt.elem_type and tt.HasField("shape"):
                vi.CopyFrom(known[vi.name])
    except Exception as e:  # noqa: BLE001  (inference is a convenience; ORT below is the fallback)
        logger.debug("ONNX shape inference failed: %s", e)
    if all(vi.type.tensor_type.HasField("shape") for vi in outs):
        return
    try:
        results = ort_run(model, feeds)
    except Exception as e:  # noqa: BLE001  (the model then fails the checker, with its message)
        logger.debug("ONNX Runtime could not type the outputs: %s", e)
        return
    for vi, r in zip(outs, results):
        if not vi.type.tensor_type.HasField("shape"):
            r = np.asarray(r)
            vi.CopyFrom(
                helper.make_tensor_value_info(
                    vi.name, helper.np_dtype_to_tensor_dtype(r.dtype), r.shape
                )
            )


def ort_session(model, *, threads: int = 1, optimize: bool = True, exact_int8: bool = False):
    """An ONNX Runtime session on the CPU: the one way tests and benchmarks make one.

    Parameters
    ----------
    model : onnx.ModelProto, bytes, str or os.PathLike
        The model, serialized, or the path of a ``.onnx`` file.
    threads : int
        ``intra_op_num_threads`` (1: the single-threaded reference every op is
        checked against; 0: ONNX Runtime's default, one per core).
    optimize : bool
        ``False`` disables ONNX Runtime's graph optimizations (``ORT_DISABLE_ALL``):
        its fused kernels round differently from its plain ones.
    exact_int8 : bool
        ``True`` sets ONNX Runtime's ``session.x64quantprecision``. Without it, on an
        x86 CPU without VNNI (AVX2, AVX-512 before Cascade Lake), MLAS multiplies uint8
        by int8 with ``vpmaddubsw``, which saturates each pair of products to int16:
        ``255 * 127 * 2`` reads as 32767. The option makes it use exact uint8 x uint8
        products. monolib's 8-bit products are exact on every CPU, so tests that
        compare a quantized model's outputs (DynamicQuantizeLSTM, MatMulInteger) set it.

    Returns
    -------
    onnxruntime.InferenceSession
    """
    import onnxruntime as ort

    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    if exact_int8:
        opts.add_session_config_entry("session.x64quantprecision", "1")
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def ort_run(model, feeds: dict[str, np.ndarray], **options) -> list[np.ndarray]:
    """Run ``model`` once with ONNX Runtime: the reference outputs.

    ``options`` are :func:`ort_session`'s (default: one thread, graph optimizations on).
    """
    return ort_session(model, **options).run(None, feeds)


def _runtime_available() -> bool:
    return all(
        importlib.util.find_spec(m) is not None
        for m in ("monolib.runtime.graph_executor", "monolib.export.csource")
    )


def run_model(model, feeds: dict[str, np.ndarray], **compile_kwargs) -> list[np.ndarray]:
    """Compile ``model`` with monolib and run it once on ``feeds``, without exporting.

    Parameters
    ----------
    model : str, bytes, onnx.ModelProto (or an imported ``Graph``)
    feeds : dict of str -> numpy.ndarray
        Graph inputs by name (frozen ``constants`` excluded).
    **compile_kwargs
        ``shapes``, ``constants``, ``target`` of :func:`~.build.compile`.

    Returns
    -------
    list of numpy.ndarray
        The graph outputs, in order (copies the caller owns).
    """
    from .ir import Graph

    if _runtime_available() and not isinstance(model, Graph):
        return _run_runtime(model, feeds, **compile_kwargs)
    from .build import lower

    kwargs = {k: v for k, v in compile_kwargs.items() if k != "target"}
    source, graph_json, params = lower(model, **kwargs)
    return run_c(source, graph_json, params, feeds)


def _run_runtime(model, feeds, **compile_kwargs) -> list[np.ndarray]:
    from ..runtime.device import cpu
    from ..runtime.graph_module import GraphModule
    from .build import compile as compile_model

    factory = compile_model(model, **compile_kwargs)
    gm = GraphModule(factory["default"](cpu()))
    gm.run(**feeds)
    return [np.array(gm.get_output(i).numpy(), copy=True) for i in range(gm.get_num_outputs())]


def aligned_empty(nbytes: int, align: int = 64) -> np.ndarray:
    """A ``uint8`` array of ``nbytes`` whose data pointer is ``align``-byte aligned."""
    raw = np.zeros(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start : start + nbytes]


def _cache_dir() -> str:
    """Per-user folder of the libraries :func:`build_shared` built, kept between runs (and
    shared by pytest-xdist workers): a source seen before is not compiled again."""
    path = os.path.join(tempfile.gettempdir(), f"monolib-test-{os.getuid()}")
    os.makedirs(path, exist_ok=True)
    return path


def build_shared(source: str, options: Sequence[str] = ()) -> ctypes.CDLL:
    """Compile C ``source`` to a shared library as :func:`monolib.export_library` does on
    the host, and load it.

    The compiler and its flags are the export's (:func:`..export.toolchain.link_shared`:
    ``-O3 -march=native -fPIC -shared ...``), so a kernel is tested as it is built.
    Libraries are cached by compiler, flags and source text.

    Parameters
    ----------
    source : str
        A self-contained C file (kernel headers pasted in).
    options : list of str
        Extra flags after the export's, e.g. ``("-DML_VW=4", "-DML_NP=1")`` to force a
        tiling of ``gemm.h``.

    Raises
    ------
    ToolchainError
        When no compiler is found or it rejects the source (its stderr is included).
    """
    from ..export.toolchain import find_compiler, link_shared

    compiler = find_compiler("c")
    key = hashlib.sha256("\0".join([*compiler, *options, source]).encode()).hexdigest()[:24]
    if key in _LIBS:
        return _LIBS[key]
    d = _cache_dir()
    lib = os.path.join(d, f"k_{key}.so")
    if not os.path.exists(lib):
        src = os.path.join(d, f"k_{key}.{os.getpid()}.c")
        tmp = os.path.join(d, f"k_{key}.{os.getpid()}.so")
        with open(src, "w") as fh:
            fh.write(source)
        try:
            link_shared([src], tmp, "c", compiler=compiler, options=options)
            os.replace(tmp, lib)  # atomic: a concurrent worker never loads half a file
        finally:
            os.remove(src)
    _LIBS[key] = ctypes.CDLL(lib)
    return _LIBS[key]


def build_c(source: str) -> ctypes.CDLL:
    """:func:`build_shared` for a generated library's C (the ABI of
    docs/ARCHITECTURE.md): ``monolib_run`` and ``monolib_run_op`` typed for ctypes.

    Raises
    ------
    ToolchainError
        When no compiler is found or it rejects the source (its stderr is included).
    """
    dll = build_shared(source)
    for fn, argtypes in (
        (RUN, [ctypes.c_void_p] * 2),
        (RUN_OP, [ctypes.c_int32] + [ctypes.c_void_p] * 2),
    ):
        getattr(dll, fn).argtypes = argtypes
        getattr(dll, fn).restype = ctypes.c_int32
    getattr(dll, NUM_OPS).restype = ctypes.c_int32
    return dll


def run_c(
    source: str, graph_json: dict, params: np.ndarray, feeds: dict[str, np.ndarray]
) -> list[np.ndarray]:
    """Build ``source`` (:func:`build_c`), run ``monolib_run`` once on ``feeds`` and return the
    outputs (the executor's job, done minimally with ctypes for tests).

    Raises
    ------
    InputError
        For a missing or unknown input name, or a shape that does not match.
    ToolchainError
        When the C compiler fails.
    """
    dll = build_c(source)
    arena = aligned_empty(max(int(graph_json["arena_bytes"]), 64))
    blob = aligned_empty(max(params.nbytes, 64))
    blob[: params.nbytes] = params
    known = {i["name"] for i in graph_json["inputs"]}
    extra = set(feeds) - known
    if extra:
        raise InputError(f"unknown inputs {sorted(extra)}; the model's inputs are {sorted(known)}")
    for info in graph_json["inputs"]:
        if info["name"] not in feeds:
            raise InputError(f"input {info['name']!r} is missing")
        x = np.asarray(feeds[info["name"]], dtype=info["dtype"], order="C")
        if list(x.shape) != info["shape"]:
            raise InputError(
                f"input {info['name']!r}: shape {list(x.shape)}, expected {info['shape']}"
            )
        arena[info["offset"] : info["offset"] + x.nbytes] = np.frombuffer(x.tobytes(), np.uint8)
    rc = dll.monolib_run(blob.ctypes.data, arena.ctypes.data)
    if rc != 0:
        raise CompileError(f"monolib_run returned {rc}")
    outs = []
    for info in graph_json["outputs"]:
        dt = np.dtype(info["dtype"])
        n = int(np.prod(info["shape"], dtype=np.int64)) * dt.itemsize
        outs.append(
            np.frombuffer(arena[info["offset"] : info["offset"] + n].tobytes(), dt).reshape(
                info["shape"]
            )
        )
    return outs
