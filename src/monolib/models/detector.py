"""An end-to-end text detector with NMS inside (issue 13, "An end-to-end detector"):
PP-OCRv4 det (a real model from the RapidOCR wheel) with a box head and ONNX's
``NonMaxSuppression`` + ``Gather`` post-processing appended with ``onnx.helper``.

The head: the probability map ``[1, 1, H, W]`` max-pooled into ``cell x cell`` cells
(``[1, 1, H/cell, W/cell]``), flattened into scores ``[1, 1, M]``; each cell has a
constant anchor box ``[y1, x1, y2, x2]`` of ``anchor`` pixels centred on it (wider than a
cell, so neighbours overlap and NMS thins them); ``NonMaxSuppression`` keeps the
strongest cells (``score_threshold``, ``iou_threshold``, at most ``max_boxes``);
``Gather`` picks their boxes. Outputs: ``selected`` int64 ``[K, 3]`` and ``boxes``
float32 ``[K, 4]``, ``K`` known only at run time. Needs ``onnx`` (import time of
:func:`detector_with_nms`), not the compiler.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

__all__ = ["anchor_boxes", "detector_with_nms"]

logger = logging.getLogger(__name__)


def anchor_boxes(height: int, width: int, cell: int, anchor: int) -> np.ndarray:
    """float32 ``[M, 4]`` boxes ``[y1, x1, y2, x2]`` (pixels), one per ``cell``-pixel cell
    in row-major order, ``anchor`` pixels wide and high, centred on the cell."""
    ys, xs = np.meshgrid(np.arange(height // cell), np.arange(width // cell), indexing="ij")
    cy, cx = (ys.reshape(-1) + 0.5) * cell, (xs.reshape(-1) + 0.5) * cell
    half = anchor / 2
    return np.stack([cy - half, cx - half, cy + half, cx + half], 1).astype(np.float32)


def detector_with_nms(det_path: str | Path, size: tuple[int, int] = (320, 320), cell: int = 8,
                      anchor: int = 24, max_boxes: int = 64, iou: float = 0.3,
                      score: float = 0.5):
    """PP-OCR det with the box head, NMS and Gather appended (module docstring).

    Parameters
    ----------
    det_path : str or Path
        The PP-OCR det model (``fetch_model("ppocr_det")``).
    size : (int, int)
        Input ``H, W`` (multiples of 32 and of ``cell``); the input is ``[1, 3, H, W]``.
    cell, anchor : int
        Pooling cell and anchor box side, pixels.
    max_boxes, iou, score : int, float, float
        NMS's ``max_output_boxes_per_class``, ``iou_threshold``, ``score_threshold``.

    Returns
    -------
    onnx.ModelProto
        Input ``x`` float32 ``[1, 3, H, W]``; outputs ``selected`` int64 ``[K, 3]``,
        ``boxes`` float32 ``[K, 4]``.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(det_path))
    g = model.graph
    h, w = size
    prob = g.output[0].name
    anchors = anchor_boxes(h, w, cell, anchor)
    consts = {
        "nms_anchors": anchors[None],  # [1, M, 4]
        "nms_anchor_table": anchors,  # [M, 4]
        "nms_score_shape": np.array([1, 1, -1], np.int64),
        "nms_max": np.array([max_boxes], np.int64),
        "nms_iou": np.array([iou], np.float32),
        "nms_score": np.array([score], np.float32),
        "nms_col": np.array([2], np.int64),
        "nms_box_shape": np.array([-1, 4], np.int64),
    }
    g.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    g.node.extend([
        helper.make_node("MaxPool", [prob], ["nms_cells"], kernel_shape=[cell, cell],
                         strides=[cell, cell], name="nms_pool"),
        helper.make_node("Reshape", ["nms_cells", "nms_score_shape"], ["nms_scores"],
                         name="nms_flat"),
        helper.make_node("NonMaxSuppression", ["nms_anchors", "nms_scores", "nms_max",
                                               "nms_iou", "nms_score"], ["selected"],
                         name="nms"),
        helper.make_node("Gather", ["selected", "nms_col"], ["nms_idx2"], axis=1,
                         name="nms_box_col"),
        helper.make_node("Gather", ["nms_anchor_table", "nms_idx2"], ["nms_picked"], axis=0,
                         name="nms_boxes"),  # [K, 1, 4]
        helper.make_node("Reshape", ["nms_picked", "nms_box_shape"], ["boxes"],
                         name="nms_boxes_flat"),
    ])
    x = g.input[0].type.tensor_type.shape
    for d, v in zip(x.dim, (1, 3, h, w)):
        d.Clear()
        d.dim_value = v
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info("selected", TensorProto.INT64, ["K", 3]),
                     helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["K", 4])])
    del g.value_info[:]
    logger.info("detector with NMS: %d cells, anchors %d px", len(anchors), anchor)
    return model
