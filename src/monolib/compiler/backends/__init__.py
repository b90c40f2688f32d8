"""Backends: the prepared graph -> source code and the module tree of a target kind.

* :mod:`.base` -- the :class:`~.base.Backend` interface (accept a target, generate,
  package); :mod:`.registry` -- ``BACKENDS``, the table ``compile`` dispatches on;
* :mod:`.cstyle` -- the C-style languages (host C, OpenCL C, CUDA C), C types, literals;
* :mod:`.c` -- host C: :mod:`.c.generate` (source, graph JSON, params blob and the
  ``EmitContext`` the ops write through), :mod:`.c.epilogue` (fused elementwise chains),
  ``c/kernels/*.h`` (the generated C's own runtime);
* :mod:`.device` -- OpenCL and CUDA: one kernel per fused op.

This package imports nothing itself: the ops import :mod:`.cstyle` while the
generators import the ops.
"""
