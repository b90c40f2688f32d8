"""The ONNX frontend: ``ModelProto`` -> :class:`~monolib.compiler.ir.Graph`.

:func:`import_model` produces a graph where every value has a static shape and a
dtype, every schema default is filled in, weights (initializers and ``Constant``
nodes, where PaddlePaddle exports keep them) are ``Value.const``, and every node whose
inputs are all constant has been computed away with the op's NumPy reference. So the
``Shape -> Gather -> Concat -> Reshape`` chains of exported models vanish once shapes
are static, and ``If`` nodes whose condition becomes constant (Silero VAD's sample-rate
switch, given ``constants={"sr": 16000}``) are replaced by the chosen branch.

Follows the ONNX IR specification (https://onnx.ai/onnx/repo-docs/IR.html): value
names are SSA, subgraphs see the values of their enclosing scopes, nodes are
topologically sorted (re-sorted here to be safe), an empty input name is an omitted
optional input. Supported: default-domain opsets 11 to the newest of the installed
``onnx`` (``support.DEFAULT_OPSETS``); older models are converted to opset 13 with
``onnx.version_converter`` first (:func:`upgrade_opset`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from ...errors import CompileError, UnsupportedOpError
from ...runtime.strings import to_utf8
from ..ir import Graph, Node, Value
from ..ops.base import lookup
from ..passes.dce import DeadCodeElimination
from ..passes.fold_constants import static_shape_fold
from ..passes.node_eval import fold_node, make_const, run_infer
from .attributes import convert_attribute, node_attributes, tensor_to_array
from .check import check_model_light
from .function_bodies import modifier_import
from .inputs import resolve_inputs
from .order import topological_order
from .rounding import rounded_import
from .storage import insert_node, narrow_outputs, storage_type, widen_inputs
from .strings import same_widths, string_node
from .support import DEFAULT_OPSETS, check_supported, normalize_domain, walk_nodes

__all__ = ["UPGRADE_OPSET", "import_model", "load_model", "upgrade_opset"]

logger = logging.getLogger(__name__)


def load_model(model: Any) -> onnx.ModelProto:
    """``model`` as a ``ModelProto``: a path, serialized bytes, or a proto.

    Raises
    ------
    CompileError
        Missing file, undecodable bytes, or an unsupported argument type.
    """
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            return onnx.load_from_string(bytes(model))
        except (DecodeError, ValueError) as e:
            raise CompileError(f"the given bytes are not a serialized ONNX model: {e}") from e
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise CompileError(f"ONNX model file not found: {path!r}")
        try:
            # external data (models over 2 GB must use it) is read from beside the file
            return onnx.load(path, load_external_data=True)
        except (DecodeError, ValueError, OSError, onnx.checker.ValidationError) as e:
            raise CompileError(f"{path!r} is not a readable ONNX model: {e}") from e
    raise CompileError(
        f"model must be a path, bytes or onnx.ModelProto, not {type(model).__name__}"
    )


def _external_tensors(graph: onnx.GraphProto) -> list[str]:
    """Names of the tensors of ``graph`` (initializers, tensor attributes, subgraphs)
    whose data lives in an external file."""
    ext = onnx.TensorProto.EXTERNAL
    found = [t.name for t in graph.initializer if t.data_location == ext]
    for node in walk_nodes(graph):
        for a in node.attribute:
            tensors = [a.t] if a.type == onnx.AttributeProto.TENSOR else list(a.tensors)
            found += [
                f"{t.name or a.name} (node {node.name!r})"
                for t in tensors
                if t.data_location == ext
            ]
            if a.type == onnx.AttributeProto.GRAPH:
                found += [t.name for t in a.g.initializer if t.data_location == ext]
    return found


def _check(proto: onnx.ModelProto) -> dict[str, int]:
    """Run the ONNX checker and return the opsets (domain -> version)."""
    external = _external_tensors(proto.graph)
    if external:
        raise CompileError(
            f"tensor(s) {external[:5]} are stored as external data; monolib reads "
            "them from a path (compile the model's .onnx path, not a ModelProto loaded "
            "with load_external_data=False)"
        )
    try:
        check_model_light(proto)  # the checker without a copy of the weights
    except onnx.checker.ValidationError as e:
        raise CompileError(f"the ONNX checker rejected the model: {e}") from e
    opsets = {normalize_domain(o.domain): int(o.version) for o in proto.opset_import}
    default = opsets.get("")
    if default is not None and default not in DEFAULT_OPSETS:
        raise UnsupportedOpError(
            f"the model imports opset {default} of the default ONNX domain; monolib "
            f"supports opsets {DEFAULT_OPSETS.start} to {DEFAULT_OPSETS.stop - 1} "
            "(older ones are converted with onnx.version_converter; a newer one needs a "
            "newer onnx package, or export the model at an older opset)"
        )
    return opsets


#: The opset an older model is converted to: the frontend's oldest is 11, but 13 is
#: where most operators took their current form (Split/Squeeze axes as inputs,
#: Softmax over one axis), so the converted graph reads like a current export.
UPGRADE_OPSET = min(max(DEFAULT_OPSETS.start, 13), DEFAULT_OPSETS.stop - 1)


def _default_opset(proto: onnx.ModelProto) -> int | None:
    versions = [int(o.version) for o in proto.opset_import if normalize_domain(o.domain) == ""]
    return versions[0] if versions else None


def upgrade_opset(proto: onnx.ModelProto, progress: Any = None) -> onnx.ModelProto:
    """``proto`` converted to :data:`UPGRADE_OPSET` when it imports a default-domain
    opset older than the frontend's (as ONNX Runtime runs opset 7+ models as they are).

    A model of a supported opset (or none) is returned as it is. The conversion is
    announced to ``progress`` (``"convert opset 9 -> 13"``) and logged.

    Raises
    ------
    UnsupportedOpError
        ``onnx.version_converter`` failed; the message carries its reason.
    """
    old = _default_opset(proto)
    if old is None or old >= DEFAULT_OPSETS.start:
        return proto
    name = f"convert opset {old} -> {UPGRADE_OPSET}"
    if progress is not None:
        progress(name)
    logger.info("the model imports ONNX opset %d: %s with onnx.version_converter", old, name)
    try:
        from onnx import version_converter

        return version_converter.convert_version(proto, UPGRADE_OPSET)
    except Exception as exc:  # noqa: BLE001 -- the converter raises bare RuntimeErrors
        reason = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else repr(exc)
        raise UnsupportedOpError(
            f"the model imports opset {old} of the default ONNX domain, older than "
            f"monolib's {DEFAULT_OPSETS.start}; onnx.version_converter could not convert "
            f"it to opset {UPGRADE_OPSET}: {reason}"
        ) from None


def import_model(
    model: Any,
    shapes: Mapping[str, Sequence[Any]] | None = None,
    constants: Mapping[str, Any] | None = None,
    dims: Mapping[str, Any] | None = None,
    opt_shapes: Mapping[str, Sequence[Sequence[int]]] | None = None,
    max_trip_count: Mapping[str, int] | None = None,
    max_sizes: Mapping[str, int] | None = None,
    progress: Any = None,
) -> Graph:
    """Import an ONNX model as a monolib graph (static shapes, or run-time dims where
    bounds are given).

    Parameters
    ----------
    model : str, os.PathLike, bytes or onnx.ModelProto
        The model (self-contained: external data is rejected).
    shapes : dict, optional
        Input name -> shape, for inputs whose declared shape has dynamic dims
        (symbolic, ``-1``, or unknown): per axis an int, or ``(lo, hi)`` /
        ``(lo, hi, step)`` for a run-time dim, e.g. ``{"x": ((1, 8), 3, 48, 320)}``.
    constants : dict, optional
        Input name -> value known at compile time (``{"sr": 16000}``); the input
        becomes a constant of the model input's dtype and leaves the graph inputs.
    dims : dict, optional
        ONNX ``dim_param`` -> ``(lo, hi[, step])``: every axis so named is a run-time dim.
    opt_shapes : dict, optional
        Input name -> list of concrete shapes to specialize (``Graph.specializations``).
    max_trip_count : dict, optional
        ``Loop`` node name -> upper bound on its trip count (the size its scan outputs
        are planned at, when no bound can be derived; ``ops/control/loop.py``).
    max_sizes : dict, optional
        Node name -> ``N``, the user's bound on a node's data-dependent output sizes
        (issue 13: a run-time ``Range``, ``Expand``, ``Tile``, ``ConstantOfShape``...):
        the product of its output's data-dependent dims is at most ``N`` (one such
        dim: its length; a ``Loop``: its trip count, as ``max_trip_count``). Recorded
        as the node's ``_max_size`` attribute (``ops/tensor/bounded.py``).
    progress : callable, optional
        ``progress(step_name)``: told when an older opset is converted
        (:func:`upgrade_opset`).

    Returns
    -------
    Graph
        Inputs and outputs carry the ONNX names; ``metadata`` holds the model's
        ``metadata_props``. Constant graph outputs stay in ``outputs`` as constants.

    Raises
    ------
    CompileError
        Unreadable model, the ONNX checker's error, external data, a node failing.
    UnsupportedOpError
        Every unsupported op at once (type, opset, node names); an unsupported opset;
        a ``Loop`` with scan outputs and no bound on its trip count; an opset older
        than 11 that ``onnx.version_converter`` cannot convert.
    ShapeError
        A dynamic input dim with no value given (the input, dim index and symbol named),
        a malformed or contradicting bound (:mod:`.dims`).
    UndecidableDimError
        An op whose shape inference branches on a run-time dim (the node named).
    """
    proto = upgrade_opset(load_model(model), progress)
    opsets = _check(proto)
    check_supported(proto.graph, opsets)
    # one table of user bounds: a Loop's trip count is the size of its scan outputs
    importer = _Importer(opsets, {**(max_sizes or {}), **(max_trip_count or {})})
    graph = importer.import_main(proto.graph, shapes, constants, dims, opt_shapes)
    graph.metadata = {p.key: p.value for p in proto.metadata_props}
    DeadCodeElimination()(graph)
    logger.info("imported %r: %d nodes %s", graph.name, len(graph.nodes), graph.op_counts())
    return graph


class _Scope:
    """Name -> Value, falling back to the enclosing scope (subgraphs see outer values)."""

    def __init__(self, parent: _Scope | None = None):
        self.values: dict[str, Value] = {}
        self.parent = parent

    def find(self, name: str) -> Value | None:
        scope: _Scope | None = self
        while scope is not None:
            v = scope.values.get(name)
            if v is not None:
                return v
            scope = scope.parent
        return None

    def names(self) -> set[str]:
        out: set[str] = set()
        scope: _Scope | None = self
        while scope is not None:
            out.update(scope.values)
            scope = scope.parent
        return out


class _Importer:
    """Walks the ONNX graph once, typing, folding and inlining as it goes."""

    def __init__(self, opsets: dict[str, int], max_trips: Mapping[str, int] | None = None):
        self.opsets = opsets
        #: ``max_trip_count`` / ``max_sizes``: ONNX node name -> the user's bound (a
        #: Loop's trip count, another node's data-dependent output sizes)
        self.max_trips = dict(max_trips or {})
        self.value_names: set[str] = set()
        self.node_names: set[str] = set()
        self.nodes: list[Node] = []  # the graph being built (swapped for subgraphs)
        self.graph_inputs: list[Value] = []
        self.output_uids: set[int] = set()  # values already named after a graph output

    # -- names ---------------------------------------------------------------------

    def _unique(self, name: str, used: set[str]) -> str:
        candidate, k = name, 0
        while candidate in used:
            k += 1
            candidate = f"{name}__{k}"
        used.add(candidate)
        return candidate

    def _node_name(self, name: str) -> str:
        return self._unique(name, self.node_names)

    def _new_value(self, name: str, array: np.ndarray | None = None) -> Value:
        name = self._unique(name, self.value_names)
        if array is not None:
            return make_const(name, array)
        return Value(name, (), np.float32)

    # -- graphs --------------------------------------------------------------------

    def import_main(self, g: onnx.GraphProto, shapes, constants, dims, opt_shapes) -> Graph:
        scope = _Scope()
        inits = self._add_initializers(g, scope)
        found = resolve_inputs(g, inits, shapes, constants, dims, opt_shapes)
        for v in (*found.runtime, *found.consts):
            self.value_names.add(v.name)
            scope.values[v.name] = v
        self.graph_inputs = found.runtime
        self._import_nodes(g.node, scope)
        outputs = [self._graph_output(o.name, scope) for o in g.output]
        return Graph(g.name or "model", found.runtime, outputs, self.nodes,
                     symbols=found.symbols, specializations=found.specializations)

    def _add_initializers(self, g: onnx.GraphProto, scope: _Scope) -> set[str]:
        names = set()
        for t in g.initializer:
            arr = tensor_to_array(t, f"initializer {t.name!r}")
            scope.values[t.name] = self._new_value(t.name, arr)
            names.add(t.name)
        for t in g.sparse_initializer:
            raise CompileError(f"sparse initializer {t.values.name!r} is not supported")
        return names

    def _import_nodes(self, protos: Sequence[onnx.NodeProto], scope: _Scope) -> None:
        for p in topological_order(protos, scope.names()):
            self._import_node(p, scope)

    def _import_subgraph(self, g: onnx.GraphProto, outer: _Scope) -> Graph:
        """A GRAPH attribute of an op the frontend does not inline (Loop, Scan): its
        own inputs need static declared shapes; it may read outer-scope values."""
        scope = _Scope(outer)
        self._add_initializers(g, scope)
        inputs = []
        for info in g.input:
            v = resolve_inputs(_single_input_graph(info), set(), None, None).runtime
            v[0].name = self._unique(info.name, self.value_names)
            scope.values[info.name] = v[0]
            inputs.append(v[0])
        saved, self.nodes = self.nodes, []
        try:
            self._import_nodes(g.node, scope)
            outputs = [self._lookup(o.name, scope, f"subgraph {g.name!r}") for o in g.output]
            return Graph(g.name, inputs, outputs, self.nodes)
        finally:
            self.nodes = saved

    def _graph_output(self, name: str, scope: _Scope) -> Value:
        """The Value of graph output ``name``, named ``name`` (aliases resolved)."""
        v = self._lookup(name, scope, "graph outputs")
        taken = name in self.value_names and v.name != name
        if v.name == name:
            self.output_uids.add(v.uid)
            return v
        if v.is_const and not taken:
            self.value_names.add(name)
            return make_const(name, v.const)
        is_input = any(v is i for i in self.graph_inputs)
        if not taken and not is_input and v.uid not in self.output_uids:
            # an alias (Identity, If branch output): the value takes the output's name
            self.value_names.add(name)
            v.name = name
            self.output_uids.add(v.uid)
            return v
        out = Value(self._unique(name, self.value_names), v.shape, v.dtype, seq=v.seq)
        self.nodes.append(
            Node(
                "Identity",
                self._unique(f"{name}/copy", self.node_names),
                [v],
                [out],
                {},
                "",
                self.opsets.get("", 17),
            )
        )
        return out

    # -- nodes ---------------------------------------------------------------------

    def _lookup(self, name: str, scope: _Scope, where: str) -> Value:
        v = scope.find(name)
        if v is None:
            raise CompileError(f"{where}: value {name!r} is not defined before it is used")
        return v

    def _import_node(self, p: onnx.NodeProto, scope: _Scope) -> None:
        domain = normalize_domain(p.domain)
        opset = self.opsets.get(domain, 1)
        name = self._unique(p.name or f"{p.op_type}_{len(self.node_names)}", self.node_names)
        where = f"node {name!r} ({p.op_type})"
        inputs = [None if n == "" else self._lookup(n, scope, where) for n in p.input]
        if domain == "" and p.op_type == "SequenceLength" and inputs and inputs[0] is not None \
                and inputs[0].seq is not None and inputs[0].seq.count is not None:
            # a count known at compile time (ops/sequence) folds like Shape
            self._bind_const(p.output[0], np.array(inputs[0].seq.count, np.int64), scope)
            return
        if domain == "" and p.op_type in ("Constant", "Identity", "Dropout", "If", "Shape", "Size",
                                          "Loop", "Scan", "SequenceMap"):
            handler = getattr(self, f"_op_{p.op_type}")
            handler(p, name, inputs, opset, scope)
            return
        # float16, bfloat16, float8, int4...: compute in float32 / int32 (storage.py)
        narrow = storage_type(p.op_type, domain, inputs)
        # nodes imported as other nodes: a 16-bit op that ONNX rounds inside (rounding.py),
        # a FlexAttention with a modifier subgraph (function_bodies.py)
        replacement = rounded_import(p, domain, opset, narrow, inputs, name) \
            if narrow is not None else None
        if replacement is None:
            replacement = modifier_import(p, domain, opset, inputs, name)
        if replacement is not None:
            for q in replacement:
                self._import_node(q, scope)
            return
        attrs = node_attributes(p, opset, lambda g: self._import_subgraph(g, scope))
        if name in self.max_trips:  # read by ops/tensor/bounded.user_bound
            attrs["_max_size"] = int(self.max_trips[name])
        if narrow is not None:
            inputs = widen_inputs(inputs, name, self._new_value, self._node_name,
                                  self.nodes.append)
        inputs = same_widths(p.op_type, domain, inputs, name, self._new_value,
                             self._node_name, self.nodes.append)  # string slot widths
        wide = "/wide" if narrow is not None else ""
        outputs = [self._new_value(o + wide if o else f"{name}/unused{i}")
                   for i, o in enumerate(p.output)]
        insert_node(string_node(Node(p.op_type, name, inputs, outputs, attrs, domain, opset)),
                    self.nodes.append)
        if narrow is not None:
            outputs = narrow_outputs(outputs, narrow, p.output, self._new_value,
                                     self._node_name, self.nodes.append)
        for o, v in zip(p.output, outputs):
            if o:
                scope.values[o] = v

    def _bind_const(self, out_name: str, array: np.ndarray, scope: _Scope) -> None:
        if out_name:
            scope.values[out_name] = self._new_value(out_name, np.asarray(array))

    def _op_Constant(self, p, name, inputs, opset, scope) -> None:
        attrs = {a.name: a for a in p.attribute}
        where = f"node {name!r} (Constant)"
        if "value" in attrs:
            arr = convert_attribute(attrs["value"], where=where)
        elif "value_float" in attrs:
            arr = np.array(attrs["value_float"].f, dtype=np.float32)
        elif "value_floats" in attrs:
            arr = np.array(list(attrs["value_floats"].floats), dtype=np.float32)
        elif "value_int" in attrs:
            arr = np.array(attrs["value_int"].i, dtype=np.int64)
        elif "value_ints" in attrs:
            arr = np.array(list(attrs["value_ints"].ints), dtype=np.int64)
        elif "value_string" in attrs:  # UTF-8 bytes, stored as S<n> (frontend/strings.py)
            arr = to_utf8(attrs["value_string"].s)
        elif "value_strings" in attrs:
            arr = to_utf8(list(attrs["value_strings"].strings))
        else:
            kinds = ", ".join(attrs) or "none"
            raise CompileError(
                f"{where}: unsupported value attribute ({kinds}); "
                "monolib reads tensors and strings only"
            )
        self._bind_const(p.output[0], arr, scope)

    def _op_Shape(self, p, name, inputs, opset, scope) -> None:
        attrs = node_attributes(p, opset)
        node = Node("Shape", name, inputs, [], attrs, "", opset)
        self._bind_const(p.output[0], static_shape_fold(node), scope)

    def _op_Size(self, p, name, inputs, opset, scope) -> None:
        node = Node("Size", name, inputs, [], {}, "", opset)
        self._bind_const(p.output[0], static_shape_fold(node), scope)

    def _op_Identity(self, p, name, inputs, opset, scope) -> None:
        scope.values[p.output[0]] = inputs[0]

    def _op_Dropout(self, p, name, inputs, opset, scope) -> None:
        """Dropout in inference is the identity; its mask (if asked for) is all true.
        A ``training_mode`` that is a constant true or a run-time value makes a
        ``Dropout`` node (``ops/math/dropout.py``: the random mask in C)."""
        training = inputs[2] if len(inputs) > 2 else None
        if training is not None and (not training.is_const or bool(training.const)):
            outputs = [self._new_value(o or f"{name}/unused{i}") for i, o in enumerate(p.output)]
            node = Node("Dropout", name, inputs, outputs, node_attributes(p, opset), "", opset)
            run_infer(node, lookup("Dropout", opset, "", name))
            self.nodes.append(node)
            for o, v in zip(p.output, outputs):
                if o:
                    scope.values[o] = v
            return
        x = inputs[0]
        scope.values[p.output[0]] = x
        if len(p.output) > 1 and p.output[1]:
            self._bind_const(p.output[1], np.ones(x.shape, dtype=bool), scope)

    def _op_If(self, p, name, inputs, opset, scope) -> None:
        """Inline the branch chosen by a constant condition; on a run-time condition
        both branches become subgraphs of an ``If`` node (``ops/control``)."""
        cond = inputs[0]
        if not cond.is_const:
            self._control(p, name, inputs, opset, scope)
            return
        if cond.const.size != 1:
            raise CompileError(f"node {name!r} (If): condition has {cond.const.size} elements")
        taken = bool(cond.const.reshape(-1)[0])
        attrs = {a.name: a for a in p.attribute}
        branch = attrs["then_branch" if taken else "else_branch"].g
        if len(branch.output) != len(p.output):
            raise CompileError(
                f"node {name!r} (If): branch {branch.name!r} has {len(branch.output)} "
                f"outputs, the node {len(p.output)}"
            )
        logger.debug("If %r: condition %s, inlining branch %r", name, taken, branch.name)
        sub = _Scope(scope)
        self._add_initializers(branch, sub)
        with _in_branch(name, branch.name):
            self._import_nodes(branch.node, sub)
        for o, bo in zip(p.output, branch.output):
            if o:
                scope.values[o] = self._lookup(bo.name, sub, f"node {name!r} (If)")

    def _control(self, p, name, inputs, opset, scope) -> None:
        """A control-flow node (run-time ``If``, ``Loop``, ``Scan``): each GRAPH attribute
        imported as a :class:`Graph` whose formal inputs are typed from the node's inputs
        (``OpDef.body_types``); the values the subgraphs read from enclosing scopes
        ("captures") are appended to the node's inputs (``attrs["_formal"]`` counts the
        formal ones, ``attrs["_captures"]`` lists them; ``ops/control/subgraph.py``)."""
        from ..ops.control.subgraph import free_values

        op = lookup(p.op_type, opset, "", name)
        attrs = node_attributes(p, opset)  # GRAPH attributes kept as GraphProto
        captures: dict[int, Value] = {}
        if name in self.max_trips:
            attrs["_max_trip_count"] = int(self.max_trips[name])
        for key in [k for k, a in attrs.items() if isinstance(a, onnx.GraphProto)]:
            types = op.body_types(inputs, attrs, key)
            with _in_branch(name, attrs[key].name, p.op_type):
                graph = self._import_body(attrs[key], scope, types, f"{key} of {name!r}")
                # a Loop-carried value growing per iteration: imported again with a
                # computed dim on that axis (``Loop.settle_body``)
                settle = getattr(op, "settle_body", None)
                retyped = settle(name, inputs, attrs, key, graph) if settle else None
                if retyped is not None:
                    graph = self._import_body(attrs[key], scope, retyped, f"{key} of {name!r}")
            attrs[key] = graph
            for v in free_values(graph, graph.inputs):
                captures.setdefault(v.uid, v)
        attrs["_formal"] = len(inputs)
        attrs["_captures"] = list(captures.values())
        outputs = [self._new_value(o if o else f"{name}/unused{i}")
                   for i, o in enumerate(p.output)]
        node = Node(p.op_type, name, [*inputs, *captures.values()], outputs, attrs, "", opset)
        run_infer(node, op)
        if not fold_node(node, op):
            self.nodes.append(node)
        for o, v in zip(p.output, outputs):
            if o:
                scope.values[o] = v

    _op_Loop = _control
    _op_Scan = _control

    def _op_SequenceMap(self, p, name, inputs, opset, scope) -> None:
        """Unrolled over the sequence's elements (``frontend/sequence_map.py``)."""
        from .sequence_map import unroll_sequence_map

        unroll_sequence_map(self, p, name, inputs, opset, scope, _Scope)

    def _import_body(self, g: onnx.GraphProto, outer: _Scope, types, where: str) -> Graph:
        """Subgraph ``g`` with formal inputs of the given ``(shape, dtype)`` types (the
        declared types of a body's inputs are often partial); ``(shape, dtype, seq)``
        for a sequence or optional (``ir.SeqType``)."""
        if len(g.input) != len(types):
            raise CompileError(f"{where}: the subgraph has {len(g.input)} inputs, "
                               f"the node gives {len(types)}")
        scope = _Scope(outer)
        self._add_initializers(g, scope)
        inputs = []
        for info, (shape, dtype, *seq) in zip(g.input, types):
            v = Value(self._unique(info.name, self.value_names), shape, dtype,
                      seq=seq[0] if seq else None)
            scope.values[info.name] = v
            inputs.append(v)
        saved, self.nodes = self.nodes, []
        try:
            self._import_nodes(g.node, scope)
            outputs = [self._lookup(o.name, scope, where) for o in g.output]
            return Graph(g.name or where, inputs, outputs, self.nodes)
        finally:
            self.nodes = saved

    def _input_ancestors(self, value: Value) -> list[str]:
        """Names of the graph inputs ``value`` depends on."""
        producers = {v.uid: n for n in self.nodes for v in n.outputs}
        inputs = {v.uid: v.name for v in self.graph_inputs}
        found, stack, seen = [], [value], set()
        while stack:
            v = stack.pop()
            if v.uid in seen:
                continue
            seen.add(v.uid)
            if v.uid in inputs:
                found.append(inputs[v.uid])
            n = producers.get(v.uid)
            if n is not None:
                stack.extend(x for x in n.inputs if x is not None)
        return sorted(found)


class _in_branch:
    """Context manager that names the If branch (or the subgraph of another op) in
    errors raised while importing it."""

    def __init__(self, node: str, branch: str, op_type: str = "If"):
        self.where = f"in {'branch' if op_type == 'If' else 'subgraph'} {branch!r} of " \
                     f"{op_type} {node!r}"

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if exc is not None and isinstance(exc, CompileError) and self.where not in str(exc):
            exc.args = (f"{exc.args[0] if exc.args else ''} ({self.where})", *exc.args[1:])
        return False


def _single_input_graph(info: onnx.ValueInfoProto) -> onnx.GraphProto:
    g = onnx.GraphProto()
    g.input.append(info)
    return g
