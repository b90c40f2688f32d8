"""Code generation: fused ops -> one self-contained C source file.

* :mod:`.c` -- :func:`~.c.generate` (source, graph JSON, params blob) and the
  ``EmitContext`` the op emitters write through;
* :mod:`.epilogue` -- fused elementwise chains: loops, tile epilogues, element values;
* ``kernels/*.h`` -- the hand-written C kernel library pasted in by ``ctx.include``.
"""

from .c.generate import CEmitContext, generate

__all__ = ["CEmitContext", "generate"]
