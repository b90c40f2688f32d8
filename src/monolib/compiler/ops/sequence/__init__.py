"""ONNX sequence and optional operators (each file registers its ops): SequenceConstruct,
SequenceEmpty, SequenceAt, SequenceLength, SequenceInsert, SequenceErase,
SplitToSequence, ConcatFromSequence, Optional, OptionalHasElement, OptionalGetElement.
SequenceMap is unrolled by the frontend (``frontend/sequence_map.py``).

A sequence or optional value is ONE arena slot (``Value.seq``, ``abi/sequences.py``):
the kernels here read its count and per-element shape records at run time. ``_slot``
holds what they share; ``sequence.h`` the C helpers."""

from .._discover import import_all

MODULES = import_all(__name__, __path__)  # registration side effects

__all__: list[str] = []
