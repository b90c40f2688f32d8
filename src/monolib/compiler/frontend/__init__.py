"""The ONNX frontend: ONNX models -> monolib graph IR (static shapes, folded constants)."""

from .onnx import import_model, load_model

__all__ = ["import_model", "load_model"]
