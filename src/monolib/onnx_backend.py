"""monolib as an ONNX backend (``onnx.backend.base.Backend``), so ONNX's own operator
test suite (``onnx.backend.test``) and any tool written against that interface can run
models through monolib.

``prepare`` compiles the model with :func:`monolib.compile` and returns a
:class:`MonolibRep` that runs it in process, without exporting a library (the C module
is built into a temporary shared library on first call, see ``export/csource.py``).

A string input is compiled at :meth:`MonolibRep.run` too, as wide (bytes of UTF-8
per element) as the longest element of its data.

monolib compiles static shapes. Inputs that determine an output's SHAPE (Reshape's
``shape``, Slice's ``starts``..., see :data:`SHAPE_INPUTS`) must therefore be known at
compile time: when a model feeds such an input from a graph input, compilation is
deferred to :meth:`MonolibRep.run`, which compiles once per distinct value of those
inputs, passing them as ``constants``.

The C is compiled as :func:`monolib.export_library` compiles it (the target's ``-O3``),
so the suite checks the code users ship. ``MONOLIB_BACKEND_OPT`` (e.g. ``-O0``) builds
with another level instead, for experiments (this is how the suite found gcc 12.2's
IPA dropping the call of a one-op model's op function at ``-O1``/``-O2``, now kept out
of IPA by ``backends/c/generate.py``). Measured over 100 cases: 0.18 s of CPU per case at
``-O3``, 0.14 at ``-O2``, 0.10 at ``-O0``.

Follows the ONNX backend API (``onnx/backend/base.py``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.shape_inference
import onnx.version_converter
from onnx.backend.base import Backend, BackendRep

from .errors import MonolibError

__all__ = [
    "OPT_LEVEL",
    "SHAPE_INPUTS",
    "MonolibBackend",
    "MonolibRep",
    "fit_opset",
    "prepare",
    "run_model",
    "run_node",
    "supports_device",
]

logger = logging.getLogger(__name__)

#: op_type -> indices of the inputs that decide the output's shape (ONNX operator
#: specs), or the graph's structure (If's condition, Dropout's training_mode), compiled
#: in as constants when they come from graph inputs.
SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "If": (0,), "Dropout": (2,), "Loop": (0, 1),
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4),
    "Pad": (1, 3), "Resize": (1, 2, 3), "Upsample": (1,), "Squeeze": (1,),
    "Unsqueeze": (1,), "TopK": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "OneHot": (1,), "Split": (1,), "CenterCropPad": (1,), "CumSum": (1,), "CumProd": (1,),
    "Trilu": (1,), "AffineGrid": (1,), "HannWindow": (0,), "HammingWindow": (0,),
    "BlackmanWindow": (0,), "Col2Im": (1, 2), "DFT": (1, 2), "STFT": (1, 3),
    "MelWeightMatrix": (0, 1, 2, 3, 4), "MaxUnpool": (2,), "SplitToSequence": (1,),
    **{f"Reduce{r}": (1,) for r in ("Sum", "Mean", "Max", "Min", "Prod", "L1", "L2",
                                    "LogSum", "LogSumExp", "SumSquare")},
}


#: gcc optimization flag that overrides the target's (empty: the target's own ``-O3``).
OPT_LEVEL = os.environ.get("MONOLIB_BACKEND_OPT", "")


def _build_c_modules(module: Any, opt: str | None = None) -> None:
    """Build the temporary DSO of every C source module under ``module`` with ``opt``
    (appended after the target's ``-O3``, so it wins) before first use; the module then
    runs exactly as if built on demand (``export/csource.py``)."""
    import tempfile

    from .export.csource import CSourceModule
    from .export.toolchain import link_shared
    from .runtime.dso import DSOModule, open_library

    opt = opt or OPT_LEVEL
    stack = [module]
    while stack:
        mod = stack.pop()
        stack.extend(mod.imported_modules)
        if not isinstance(mod, CSourceModule) or not mod.target.is_host or mod._dso is not None:
            continue
        with tempfile.TemporaryDirectory(prefix="monolib-backend-") as tmp:
            src, out = os.path.join(tmp, "lib.c"), os.path.join(tmp, "lib.so")
            with open(src, "w", encoding="utf-8") as f:
                f.write(mod.source)
            link_shared([src], out, mod.target, options=[opt], cwd=tmp)
            mod._dso = DSOModule(open_library(out), f"<backend build of {mod!r} at {opt}>")


def _schema_version(op_type: str, opset: int, domain: str) -> int | None:
    try:
        return onnx.defs.get_schema(op_type, opset, domain).since_version
    except onnx.defs.SchemaError:
        return None


def fit_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its default-domain opset moved into the frontend's range
    (``frontend.support.DEFAULT_OPSETS``) when that changes no operator's meaning.

    An opset number names a version of EVERY operator; a node's semantics change only
    at its op's ``since_version``. When each node's schema is the same at the nearest
    supported opset as at the model's, only the import's number is changed. Otherwise
    ONNX's version converter is tried (its adapters know, e.g., that opset 22 only
    added element types); if it fails the model is returned as it is and the frontend
    reports the opset.
    """
    from .compiler.frontend.support import DEFAULT_OPSETS

    imports = {(o.domain or ""): o for o in model.opset_import}
    default = imports.get("") or imports.get("ai.onnx")
    if default is None or default.version in DEFAULT_OPSETS:
        return model
    target = min(max(default.version, DEFAULT_OPSETS.start), DEFAULT_OPSETS.stop - 1)
    ops = {n.op_type for n in model.graph.node if (n.domain or "") in ("", "ai.onnx")}
    versions = [(_schema_version(op, default.version, ""), _schema_version(op, target, ""))
                for op in ops]
    if all(now is not None and now == then for now, then in versions):
        fitted = onnx.ModelProto()
        fitted.CopyFrom(model)
        for o in fitted.opset_import:
            if (o.domain or "") in ("", "ai.onnx"):
                o.version = target
        return fitted
    try:
        return onnx.version_converter.convert_version(model, target)
    except Exception as exc:  # noqa: BLE001 -- the converter raises bare errors
        logger.info("version converter %d -> %d failed: %s", default.version, target, exc)
    return model


# ops whose outputs depend on their input's shape only (static at compile time)
_SHAPE_ONLY = frozenset({"Shape", "Size", "SequenceLength"})  # a sequence's count: its shapes


def _shape_input_names(model: onnx.ModelProto) -> list[str]:
    """Graph inputs (not initializers) that a shape-deciding input of a node is
    computed from: directly, or through other nodes (``Range(0, Cast(size))`` of the
    window functions' bodies), not counting paths that only read a shape (``Shape``,
    ``Size``). Nodes of ``If`` branches count (their outer-scope reads)."""
    from .compiler.frontend.support import walk_nodes

    graph = model.graph
    initialized = {t.name for t in graph.initializer}
    graph_inputs = [v.name for v in graph.input if v.name not in initialized]
    nodes = list(walk_nodes(graph))
    producer = {o: n for n in nodes for o in n.output if o}
    wanted: set[str] = set()
    stack = [n.input[i] for n in nodes for i in SHAPE_INPUTS.get(n.op_type, ())
             if i < len(n.input) and n.input[i]]
    while stack:
        name = stack.pop()
        if name in wanted:
            continue
        wanted.add(name)
        node = producer.get(name)
        if node is not None and node.op_type not in _SHAPE_ONLY:
            stack.extend(x for x in node.input if x)
            for a in node.attribute:  # values a subgraph reads from the outer scope
                for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    stack.extend(x for n in walk_nodes(g) for x in n.input if x)
    return [n for n in graph_inputs if n in wanted]


def _is_static(value: onnx.ValueInfoProto) -> bool:
    """Every dim has a value. A 0 dim (an empty tensor) counts as not static: the
    frontend reads 0 as unknown, so the shape is passed from the data at run."""
    t = value.type.tensor_type
    return t.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0
                                       for d in t.shape.dim)


def _as_numpy(value: Any) -> Any:
    """An input as NumPy: a list (a sequence) stays a list of arrays, None (an empty
    optional) stays None."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [_as_numpy(v) for v in value]
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return np.asarray(value)


def _shape_of(value: Any) -> Any:
    """What ``shapes=`` takes for an input: its shape; a list of the element shapes for
    a sequence."""
    if isinstance(value, list):
        return [tuple(v.shape) for v in value]
    return tuple(value.shape)


def _as_output(value: Any) -> Any:
    """An output as ONNX's runner compares it: a NumPy array, a list of them, or None."""
    if value is None or isinstance(value, list):
        return value
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


class MonolibRep(BackendRep):
    """A prepared model, run in process. Compiled at once when every input shape is
    static and no shape-deciding input comes from the graph; otherwise compiled on
    :meth:`run`, once per distinct (input shapes, shape-input values).

    Parameters
    ----------
    model : onnx.ModelProto
        The model.
    device : str
        ``"CPU"``.
    """

    def __init__(self, model: onnx.ModelProto, device: str = "CPU") -> None:
        self.model = fit_opset(model)
        self.device = device
        initialized = {t.name for t in model.graph.initializer}
        inputs = [v for v in self.model.graph.input if v.name not in initialized]
        self.input_names = [v.name for v in inputs]
        self.shape_inputs = _shape_input_names(self.model)
        self._dynamic = not all(_is_static(v) for v in inputs)
        # a string input's width (bytes per element) comes from the data: compiled at run
        self.string_inputs = {v.name for v in inputs
                              if v.type.tensor_type.elem_type == onnx.TensorProto.STRING}
        self._modules: dict[bytes, Any] = {}
        if not self.shape_inputs and not self._dynamic and not self.string_inputs:
            self._module_for({}, {})

    def _module_for(self, constants: dict[str, np.ndarray], shapes: dict[str, tuple]):
        """The GraphModule compiled with these constants and input shapes (cached)."""
        import monolib

        key = repr(sorted(shapes.items())).encode() + b"".join(
            name.encode() + str(v.dtype).encode() + str(v.shape).encode()
            + np.ascontiguousarray(v).tobytes() for name, v in constants.items())
        gm = self._modules.get(key)
        if gm is None:
            factory = monolib.compile(self.model, target="c", shapes=shapes or None,
                                      constants=dict(constants) or None)
            if OPT_LEVEL:
                _build_c_modules(factory)
            gm = monolib.GraphModule(factory["default"](monolib.cpu()))
            self._modules[key] = gm
        return gm

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run the model.

        Parameters
        ----------
        inputs : sequence of arrays, dict, or one array
            Graph inputs (initializers excluded) in the model's order, or by name;
            NumPy arrays or ``onnx.TensorProto``; a list of them for a sequence input,
            None for an empty optional.

        Returns
        -------
        tuple of numpy.ndarray
            The outputs, in the model's order (a list of arrays for a sequence, None
            for an empty optional).

        Raises
        ------
        InputError
            Wrong number, name, shape or dtype of inputs.
        """
        from .errors import InputError
        from .runtime.strings import to_utf8

        if isinstance(inputs, dict):
            named = dict(inputs)
        else:
            if isinstance(inputs, (np.ndarray, onnx.TensorProto)):
                inputs = [inputs]
            if len(inputs) > len(self.input_names):
                raise InputError(f"{len(inputs)} inputs given, the model has "
                                 f"{len(self.input_names)}: {self.input_names}")
            named = dict(zip(self.input_names, inputs))
        named = {k: _as_numpy(v) for k, v in named.items()}
        constants = {n: named[n] for n in self.shape_inputs if n in named}
        shapes: dict[str, Any] = {n: _shape_of(v) for n, v in named.items()
                                  if self._dynamic and n not in constants and v is not None}
        for n in self.string_inputs & set(named) - set(constants):
            shapes[n] = {"shape": tuple(named[n].shape),
                         "width": to_utf8(named[n]).dtype.itemsize}
        gm = self._module_for(constants, shapes)
        known = set(gm.input_names)
        for name, value in named.items():
            if name in known:
                gm.set_input(name, value)
        gm.run()
        return tuple(_as_output(gm.get_output(i)) for i in range(gm.get_num_outputs()))


class MonolibBackend(Backend):
    """The ONNX backend API over monolib (CPU only)."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        """Whether every node's operator (at the model's opset) is implemented."""
        from .compiler.ops import lookup

        opsets = {o.domain or "": o.version for o in model.opset_import}
        try:
            for node in model.graph.node:
                lookup(node.op_type, opsets.get(node.domain or "", 1), node.domain or "",
                       node.name)
        except MonolibError:
            return False
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> MonolibRep:
        """Compile ``model`` (a ModelProto, or bytes/path loaded with ``onnx.load``).

        Raises
        ------
        MonolibError
            ``UnsupportedOpError``, ``ShapeError``, ``CompileError`` from the compiler;
            ``MonolibError`` for a device other than CPU.
        """
        if not cls.supports_device(device):
            raise MonolibError(f"monolib's ONNX backend runs on CPU only, not {device!r}")
        if not isinstance(model, onnx.ModelProto):
            model = onnx.load_model_from_string(model) if isinstance(model, bytes) \
                else onnx.load(model)
        return MonolibRep(model, device)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        """``prepare(model).run(inputs)``."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[np.ndarray], device: str = "CPU",
                 outputs_info=None, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run one node on ``inputs`` by wrapping it in a model with their shapes."""
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        ins = [onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype), np.shape(x))
            for name, x in zip(node.input, inputs) if name]
        outs = [onnx.helper.make_empty_tensor_value_info(name) for name in node.output if name]
        graph = onnx.helper.make_graph([node], "run_node", ins, outs)
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)],
                                       ir_version=10)
        # the outputs' types, which the checker requires, from ONNX shape inference
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        return cls.run_model(model, [x for name, x in zip(node.input, inputs) if name], device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Only ``"CPU"``."""
        return str(device).upper().split(":")[0] == "CPU"


prepare = MonolibBackend.prepare
run_model = MonolibBackend.run_model
run_node = MonolibBackend.run_node
supports_device = MonolibBackend.supports_device
