"""Run the ONNX checker without copying the weights.

``onnx.checker.check_model(proto)`` serializes the whole model to hand it to C++: for a
model with 512 MB of initializers that is seconds of copying, and above 2 GB protobuf
cannot serialize it at all. The checker's rules on an initializer's bytes are only
that they match its declared shape and type, which the frontend checks itself when it
turns each tensor into an array (``attributes.tensor_to_array``). So the checker sees a
skeleton: the same model with each large initializer replaced by an empty tensor of
the same name, type and rank.
"""

from __future__ import annotations

import math

import onnx

__all__ = ["check_model_light", "LARGE_TENSOR_ELEMENTS"]

#: Initializers of at least this many elements are left out of the checker's copy.
LARGE_TENSOR_ELEMENTS = 1 << 18

_EXTERNAL = onnx.TensorProto.EXTERNAL  # left to the frontend's own external-data check


def _is_large(t: onnx.TensorProto) -> bool:
    # from the dims: ByteSize() and len(raw_data) both cost a copy of the bytes
    return t.data_location != _EXTERNAL and math.prod(t.dims) >= LARGE_TENSOR_ELEMENTS


def _skeleton_tensor(t: onnx.TensorProto) -> onnx.TensorProto:
    # same name, type and rank, zero elements (the checker's size rule then holds; an
    # external-data stand-in would make it look for the file)
    return onnx.TensorProto(name=t.name, data_type=t.data_type, dims=[0] * len(t.dims))


def _copy_fields(src, dst, skip: str) -> None:
    """Copy every set field of message ``src`` into ``dst`` except ``skip``."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if field.is_repeated if hasattr(field, "is_repeated") else field.label == 3:
            getattr(dst, field.name).extend(value)
        elif field.message_type:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def check_model_light(proto: onnx.ModelProto) -> None:
    """``onnx.checker.check_model(proto, full_check=False)`` on a copy of ``proto``
    whose top-level initializers of :data:`LARGE_TENSOR_ELEMENTS` or more carry no bytes.

    Raises
    ------
    onnx.checker.ValidationError
        As the checker does.
    """
    inits = proto.graph.initializer
    if not any(_is_large(t) for t in inits):
        onnx.checker.check_model(proto, full_check=False)
        return
    skeleton = onnx.ModelProto()
    _copy_fields(proto, skeleton, skip="graph")
    graph = skeleton.graph
    _copy_fields(proto.graph, graph, skip="initializer")
    graph.initializer.extend(_skeleton_tensor(t) if _is_large(t) else t for t in inits)
    onnx.checker.check_model(skeleton, full_check=False)
