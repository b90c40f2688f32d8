"""tensor operators (each file registers its ops): views (Reshape, Squeeze...), data
movement (Transpose, Concat, Split, Slice, Gather, Expand, Tile, Pad, Resize,
DepthToSpace) and shape ops (Shape, Size, ConstantOfShape, Range). ``loops`` holds the
loop-nest emitters shared with ``ops.math``."""

from . import (  # noqa: F401  (registration side effects)
    concat,
    depth_to_space,
    expand,
    gather,
    gather_elements,
    gather_nd,
    loops,
    onehot,
    pad,
    reshape,
    resize,
    scatter,
    shape,
    slice,
    split,
    topk,
    transpose,
    trilu,
)
