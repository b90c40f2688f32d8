"""16-bit float ops whose ONNX meaning rounds inside the op: imported as other nodes.

``storage.py`` computes an op on float16/bfloat16 data in float32 and rounds its
outputs once. ONNX defines the 16-bit result by its reference evaluator
(``onnx.reference``, which runs NumPy on the 16-bit arrays), and two ops round inside:

* ``Softmax`` (13+) rounds ``x - max``, ``exp``, the partial sums (bfloat16) and the
  quotient: imported as ``monolib::RoundedSoftmax`` (``ops/math/softmax_rounded.py``),
  which does the same in C.
* ``Attention`` (23+) on bfloat16 rounds after each of its steps (scaled Q and K, the
  scores, the biased scores, the softmax, the product with V): imported as its ONNX
  function body (``OpSchema.get_context_dependent_function``, the expansion ONNX's
  ``*_expanded`` node tests run), each node of which then rounds its outputs. float16
  Attention stays the fused op: computed in float32 and rounded once it is within
  float16's tolerance of the reference.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper

from ..ir import Value
from .function_bodies import function_body

__all__ = ["rounded_import"]

logger = logging.getLogger(__name__)


def rounded_import(p: onnx.NodeProto, domain: str, opset: int, narrow: np.dtype,
                   inputs: Sequence[Value | None], name: str,
                   ) -> list[onnx.NodeProto] | None:
    """The nodes to import instead of ``p`` (an ONNX node on the 16-bit type ``narrow``),
    or ``None`` to import it as usual (widened, ``storage.py``).

    Parameters
    ----------
    p : onnx.NodeProto
        The node.
    domain, opset : str, int
        Its (normalized) domain and the model's opset of that domain.
    narrow : numpy.dtype
        The storage type it computes around (``storage.storage_type``).
    inputs : list of Value or None
        Its inputs as imported (for the function body's input types).
    name : str
        Its unique node name (prefix of the replacement's names).
    """
    if domain != "" or np.dtype(narrow).name not in ("float16", "bfloat16"):
        return None
    if p.op_type == "Softmax" and opset >= 13:
        axis = next((a.i for a in p.attribute if a.name == "axis"), -1)
        return [helper.make_node("RoundedSoftmax", list(p.input), list(p.output),
                                 name=name, domain="monolib", axis=axis)]
    if p.op_type == "Attention" and opset >= 23 and np.dtype(narrow).name == "bfloat16":
        return function_body(p, "", opset, inputs, f"{name}/")
    return None
