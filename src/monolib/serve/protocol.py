"""The Open Inference Protocol v2 (KServe v2 / Triton's HTTP API) as plain functions:
routes, request parsing and checking against a model's inputs, responses, metadata and
error bodies. No Ray here (unit-testable); :mod:`.app` wires it to Ray Serve.

A request is JSON, or with the binary tensor data extension the JSON header (its length
in ``Inference-Header-Content-Length``) followed by the tensors' raw bytes in the order
of the inputs that declare ``parameters.binary_data_size`` (little endian; BYTES
elements as a 4-byte length and the bytes). Every problem is a :class:`RequestError`
with the HTTP status it is answered with and a message naming the model, the input
and what is wrong; the reply body is ``{"error": message}``.
"""

from __future__ import annotations

import json
import logging
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import RequestError
from .backend import Dim, TensorSpec

__all__ = [
    "HEADER_LENGTH",
    "InferRequest",
    "ModelSpec",
    "Route",
    "datatype_of",
    "encode_infer_response",
    "error_body",
    "model_metadata",
    "parse_infer_request",
    "route",
    "server_metadata",
]

logger = logging.getLogger(__name__)

#: the binary tensor data extension's header (lower case, as HTTP servers hand them)
HEADER_LENGTH = "inference-header-content-length"

_TYPES = {"BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32",
          "UINT64": "uint64", "INT8": "int8", "INT16": "int16", "INT32": "int32",
          "INT64": "int64", "FP16": "float16", "FP32": "float32", "FP64": "float64"}
_DATATYPE = {np.dtype(v): k for k, v in _TYPES.items()}


def datatype_of(dtype: np.dtype) -> str:
    """The protocol's datatype name of a NumPy dtype (``FP32``, ``BYTES`` for strings,
    ``BF16`` for ml_dtypes' bfloat16)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "SUO":
        return "BYTES"
    if dtype.name == "bfloat16":
        return "BF16"
    return _DATATYPE.get(dtype, dtype.name.upper())


@dataclass(frozen=True)
class ModelSpec:
    """A served model: its name, version and the specs of its inputs and outputs."""

    name: str
    inputs: Sequence[TensorSpec]
    outputs: Sequence[TensorSpec]
    version: str = "1"
    platform: str = "monolib"


@dataclass(frozen=True)
class Route:
    """What a request asks for: ``kind`` is ``live``, ``ready``, ``server``, ``model``
    (metadata), ``model_ready`` or ``infer``; ``model``/``version`` from the path."""

    kind: str
    model: str | None = None
    version: str | None = None


_SERVER_ROUTES = {("v2",): "server", ("v2", "health", "live"): "live",
                  ("v2", "health", "ready"): "ready"}
_MODEL_ROUTES = {(): ("GET", "model"), ("ready",): ("GET", "model_ready"),
                 ("infer",): ("POST", "infer")}


def route(method: str, path: str) -> Route:
    """Match an HTTP method and path (without any route prefix) to a :class:`Route`.

    Raises
    ------
    RequestError
        404 for a path the protocol does not have, 405 for the wrong method.
    """
    parts = tuple(p for p in path.split("/") if p)
    kind = _SERVER_ROUTES.get(parts)
    if kind is not None:
        if method not in ("GET", "HEAD"):
            raise RequestError(f"{method} {path}: use GET", 405)
        return Route(kind)
    if len(parts) >= 3 and parts[:2] == ("v2", "models"):
        model, rest, version = parts[2], parts[3:], None
        if len(rest) >= 2 and rest[0] == "versions":
            version, rest = rest[1], rest[2:]
        want = _MODEL_ROUTES.get(rest)
        if want is not None:
            if method != want[0] and not (want[0] == "GET" and method == "HEAD"):
                raise RequestError(f"{method} {path}: use {want[0]}", 405)
            return Route(want[1], model, version)
    raise RequestError(f"no such endpoint: {method} {path} (Open Inference Protocol v2: "
                       "/v2/health/live, /v2/health/ready, /v2/models/NAME[/ready|/infer])",
                       404)


def error_body(message: str) -> bytes:
    """The protocol's error body ``{"error": message}`` as JSON bytes."""
    return json.dumps({"error": message}).encode()


def server_metadata(version: str) -> dict:
    """``GET /v2``: the server's name, version and protocol extensions."""
    return {"name": "monolib", "version": version, "extensions": ["binary_tensor_data"]}


def model_metadata(model: ModelSpec) -> dict:
    """``GET /v2/models/NAME``: inputs and outputs with datatypes and shapes, a run-time
    dim as -1."""
    def tensors(specs: Sequence[TensorSpec]) -> list[dict]:
        return [{"name": t.name, "datatype": datatype_of(t.dtype), "shape": t.metadata_shape()}
                for t in specs]

    return {"name": model.name, "versions": [model.version], "platform": model.platform,
            "inputs": tensors(model.inputs), "outputs": tensors(model.outputs)}


@dataclass
class InferRequest:
    """A checked inference request.

    Attributes
    ----------
    id : str or None
        The request's ``id`` (echoed in the response).
    inputs : dict
        ``{input name: array}`` of every model input, dtype and shape checked.
    outputs : list of (str, bool)
        The outputs to return, in order, each with whether it goes as binary data.
    """

    id: str | None
    inputs: dict[str, np.ndarray]
    outputs: list[tuple[str, bool]] = field(default_factory=list)


def _fail(model: ModelSpec, message: str, status: int = 400) -> RequestError:
    return RequestError(f"model {model.name!r}: {message}", status)


def _split_body(model: ModelSpec, body: bytes, header_length: Any) -> tuple[dict, memoryview]:
    """The JSON header (parsed) and the binary part of a request body."""
    view = memoryview(body)
    if header_length is None:
        head, rest = view, view[len(view):]
    else:
        try:
            n = int(header_length)
        except (TypeError, ValueError):
            n = -1
        if not 0 <= n <= len(body):
            raise _fail(model, f"malformed binary header: Inference-Header-Content-Length is "
                               f"{header_length!r}, the body has {len(body)} bytes")
        head, rest = view[:n], view[n:]
    try:
        doc = json.loads(bytes(head))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(model, f"malformed JSON in the request: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list):
        raise _fail(model, 'malformed request: expected a JSON object with an "inputs" list')
    return doc, rest


def _check_shape(model: ModelSpec, spec: TensorSpec, shape: Any) -> tuple[int, ...]:
    if (not isinstance(shape, list)
            or not all(type(v) is int and v >= 0 for v in shape)):  # fmt: skip
        raise _fail(model, f"input {spec.name!r}: shape must be a list of non-negative "
                           f"integers, got {shape!r}")
    if len(shape) != len(spec.dims):
        raise _fail(model, f"input {spec.name!r} has {len(shape)} dims {shape}, the model "
                           f"expects {len(spec.dims)}: {spec.describe()}")
    for axis, (d, v) in enumerate(zip(spec.dims, shape)):
        if type(d) is int and v != d:
            raise _fail(model, f"input {spec.name!r} axis {axis} is {v}, the model expects "
                               f"{d} ({spec.describe()})")
        if isinstance(d, Dim) and not d.contains(v):
            raise _fail(model, f"input {spec.name!r} axis {axis} (dim {d.name!r}) is {v}, "
                               f"outside its bounds {d.bounds()} ({spec.describe()})")
    return tuple(shape)


def _bytes_elements(model: ModelSpec, name: str, data: memoryview, count: int) -> np.ndarray:
    """BYTES binary data: ``count`` elements, each a u32 length and its bytes."""
    out, at = [], 0
    for _ in range(count):
        if at + 4 > len(data):
            raise _fail(model, f"input {name!r}: BYTES binary data ends inside element "
                               f"{len(out)} of {count}")
        (n,) = struct.unpack_from("<I", data, at)
        if at + 4 + n > len(data):
            raise _fail(model, f"input {name!r}: BYTES element {len(out)} claims {n} bytes, "
                               f"{len(data) - at - 4} are left")
        out.append(bytes(data[at + 4 : at + 4 + n]).decode("utf-8", "replace"))
        at += 4 + n
    if at != len(data):
        raise _fail(model, f"input {name!r}: {len(data) - at} bytes after its {count} "
                           "BYTES elements")
    return np.array(out, dtype=object)


def _decode(model: ModelSpec, spec: TensorSpec, entry: dict, shape: tuple[int, ...],
            binary: memoryview, at: int) -> tuple[np.ndarray, int]:
    """One input's array from its JSON ``data`` or its slice of the binary part; the
    new binary offset."""
    count = math.prod(shape)
    params = entry.get("parameters") or {}
    if not isinstance(params, dict):
        raise _fail(model, f"input {spec.name!r}: parameters must be an object")
    if "shared_memory_region" in params:
        raise _fail(model, f"input {spec.name!r}: shared memory is not supported")
    strings = spec.dtype.kind in "SUO"
    size = params.get("binary_data_size")
    if size is not None:
        if "data" in entry:
            raise _fail(model, f"input {spec.name!r} has both data and binary_data_size")
        if type(size) is not int or size < 0 or at + size > len(binary):
            raise _fail(model, f"malformed binary header: input {spec.name!r} declares "
                               f"binary_data_size {size!r}, {len(binary) - at} bytes are left")
        chunk = binary[at : at + size]
        if strings:
            return _bytes_elements(model, spec.name, chunk, count).reshape(shape), at + size
        want = count * spec.dtype.itemsize
        if size != want:
            raise _fail(model, f"input {spec.name!r}: binary_data_size is {size}, shape "
                               f"{list(shape)} of {spec.dtype} needs {want} bytes")
        arr = np.frombuffer(chunk, dtype=spec.dtype.newbyteorder("<"), count=count)
        return arr.astype(spec.dtype, copy=False).reshape(shape), at + size
    if "data" not in entry:
        raise _fail(model, f"input {spec.name!r} has neither data nor binary_data_size")
    try:
        arr = np.asarray(entry["data"], dtype=object if strings else spec.dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise _fail(model, f"input {spec.name!r}: data is not {spec.dtype} ({exc})") from None
    if arr.size != count:
        raise _fail(model, f"input {spec.name!r}: {arr.size} data elements, shape "
                           f"{list(shape)} needs {count}")
    return arr.reshape(shape), at


def _requested_outputs(model: ModelSpec, doc: dict) -> list[tuple[str, bool]]:
    params = doc.get("parameters") or {}
    if not isinstance(params, dict):
        raise _fail(model, "request parameters must be an object")
    default_binary = bool(params.get("binary_data_output", False))
    wanted = doc.get("outputs")
    if wanted is None:
        return [(t.name, default_binary) for t in model.outputs]
    if not isinstance(wanted, list):
        raise _fail(model, 'malformed request: "outputs" must be a list')
    names = {t.name for t in model.outputs}
    out = []
    for o in wanted:
        name = o.get("name") if isinstance(o, dict) else None
        if name not in names:
            raise _fail(model, f"unknown output {name!r}: the model has "
                               f"{', '.join(sorted(names))}")
        p = o.get("parameters") or {}
        if not isinstance(p, dict):
            raise _fail(model, f"output {name!r}: parameters must be an object")
        if p.get("classification") or "shared_memory_region" in p:
            raise _fail(model, f"output {name!r}: classification and shared memory outputs "
                               "are not supported")
        out.append((name, bool(p.get("binary_data", default_binary))))
    return out


def parse_infer_request(model: ModelSpec, body: bytes, header_length: Any = None,
                        max_body_bytes: int | None = None) -> InferRequest:
    """Parse and check an inference request against ``model``.

    Parameters
    ----------
    model : ModelSpec
        The model the request is for.
    body : bytes
        The request body.
    header_length : str or int, optional
        The ``Inference-Header-Content-Length`` header (binary tensor data extension).
    max_body_bytes : int, optional
        A larger body is refused (413).

    Returns
    -------
    InferRequest

    Raises
    ------
    RequestError
        400: malformed JSON or binary header, an unknown, missing or repeated input,
        a datatype other than the model's, a shape off its rank, static dims or bounds,
        a dim shared by inputs given two values, data of the wrong size; an unknown
        output. 413: the body is over ``max_body_bytes``.
    """
    if max_body_bytes is not None and len(body) > max_body_bytes:
        raise _fail(model, f"request body of {len(body)} bytes is over the limit of "
                           f"{max_body_bytes}", 413)
    doc, binary = _split_body(model, body, header_length)
    specs = {t.name: t for t in model.inputs}
    expected = ", ".join(t.describe() for t in model.inputs)
    feeds: dict[str, np.ndarray] = {}
    bound: dict[str, tuple[str, int]] = {}
    at = 0
    for entry in doc["inputs"]:
        name = entry.get("name") if isinstance(entry, dict) else None
        spec = specs.get(name) if isinstance(name, str) else None
        if spec is None:
            raise _fail(model, f"unknown input {name!r}: the model expects {expected}")
        if name in feeds:
            raise _fail(model, f"input {name!r} is given twice")
        want = datatype_of(spec.dtype)
        if entry.get("datatype") != want:
            raise _fail(model, f"input {name!r} has datatype {entry.get('datatype')!r}, the "
                               f"model expects {want} ({spec.describe()})")
        shape = _check_shape(model, spec, entry.get("shape"))
        for d, v in zip(spec.dims, shape):
            if isinstance(d, Dim):
                other = bound.setdefault(d.name, (name, v))
                if other[1] != v:
                    raise _fail(model, f"inputs {other[0]!r} and {name!r} share dim "
                                       f"{d.name!r} but give it {other[1]} and {v}")
        feeds[name], at = _decode(model, spec, entry, shape, binary, at)
    if at != len(binary):
        raise _fail(model, f"malformed binary data: the inputs declare {at} bytes, the body "
                           f"carries {len(binary)} after the JSON header")
    missing = [t.name for t in model.inputs if t.name not in feeds]
    if missing:
        raise _fail(model, f"missing input(s) {', '.join(map(repr, missing))}: the model "
                           f"expects {expected}")
    rid = doc.get("id")
    return InferRequest(str(rid) if rid is not None else None, feeds,
                        _requested_outputs(model, doc))


def _binary_of(arr: np.ndarray) -> bytes:
    if arr.dtype.kind in "SUO":
        parts = []
        for v in arr.ravel():
            b = v if isinstance(v, bytes) else str(v).encode()
            parts.append(struct.pack("<I", len(b)) + b)
        return b"".join(parts)
    return np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()


def _json_data(arr: np.ndarray) -> list:
    if arr.dtype.kind in "SUO":
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                for v in arr.ravel()]
    if arr.dtype.name == "bfloat16":
        arr = arr.astype(np.float32)
    return arr.ravel().tolist()


def encode_infer_response(model: ModelSpec, request: InferRequest,
                          outputs: Mapping[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """The response body and headers for ``outputs`` of ``request``.

    Binary outputs (``binary_data`` asked per output or ``binary_data_output`` for all)
    follow the JSON header, whose length goes in ``Inference-Header-Content-Length``.
    """
    doc: dict[str, Any] = {"model_name": model.name, "model_version": model.version}
    if request.id is not None:
        doc["id"] = request.id
    tensors, blobs = [], []
    for name, binary in request.outputs:
        arr = np.asarray(outputs[name])
        t: dict[str, Any] = {"name": name, "datatype": datatype_of(arr.dtype),
                             "shape": list(arr.shape)}
        if binary:
            blob = _binary_of(arr)
            t["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            t["data"] = _json_data(arr)
        tensors.append(t)
    doc["outputs"] = tensors
    head = json.dumps(doc, separators=(",", ":")).encode()
    if not blobs:
        return head, {"content-type": "application/json"}
    return b"".join([head, *blobs]), {"content-type": "application/octet-stream",
                                      HEADER_LENGTH: str(len(head))}
