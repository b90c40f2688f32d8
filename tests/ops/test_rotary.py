"""RotaryEmbedding (23) against ``onnx.reference``: 3-D with ``num_heads`` and
position ids, 4-D with per-(batch, position) caches, interleaved pairs, a partial
``rotary_embedding_dim``."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_3d_position_ids_partial(interleaved):
    b, s, h, d, r, npos = 2, 3, 2, 8, 4, 10
    ids = RNG.integers(0, npos, (b, s)).astype(np.int64)
    check_node("RotaryEmbedding",
               {"x": RNG.standard_normal((b, s, h * d)).astype(np.float32),
                "cos": RNG.standard_normal((npos, r // 2)).astype(np.float32),
                "sin": RNG.standard_normal((npos, r // 2)).astype(np.float32), "ids": ids},
               ["y"], opset=23, num_heads=h, rotary_embedding_dim=r, interleaved=interleaved)


def test_rotary_4d_batch_caches():
    b, h, s, d = 2, 3, 4, 6
    check_node("RotaryEmbedding",
               {"x": RNG.standard_normal((b, h, s, d)),
                "cos": RNG.standard_normal((b, s, d // 2)),
                "sin": RNG.standard_normal((b, s, d // 2))}, ["y"], opset=23)
