"""String operators (string tensors: fixed-width UTF-8 slots, ``S<n>``; see
``compiler/frontend/strings.py`` and ``runtime/strings.py``): StringConcat,
StringSplit, StringNormalizer, RegexFullMatch, Equal on strings (``StringEqual``),
and ``ai.onnx.ml`` LabelEncoder. Kernels are C in ``text.h``; each op's ``infer``
derives its string outputs' widths."""

from .._discover import import_all

MODULES = import_all(__name__, __path__)  # registration side effects

__all__: list[str] = []
