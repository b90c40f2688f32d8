"""tensor operators (each file registers its ops): views (Reshape, Squeeze...), data
movement (Transpose, Concat, Split, Slice, Gather, Expand, Tile, Pad, Resize,
DepthToSpace) and shape ops (Shape, Size, ConstantOfShape, Range). ``loops`` holds the
loop-nest emitters shared with ``ops.math``."""

from .._discover import import_all

MODULES = import_all(__name__, __path__)  # registration side effects

__all__: list[str] = []
