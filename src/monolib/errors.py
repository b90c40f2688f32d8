"""The one error hierarchy of monolib.

Every error monolib raises on bad input is a subclass of :class:`MonolibError`, so a
caller can catch them all with one ``except``. Messages name what is wrong and where
(a path, an input name, a node name, an offset in a file).
"""

from __future__ import annotations

__all__ = [
    "CPUFeatureError",
    "CompileError",
    "ContainerError",
    "DeviceUnavailableError",
    "ExecutionError",
    "ExportError",
    "FetchError",
    "FunctionNotFoundError",
    "InputError",
    "IntegrityError",
    "LibraryLoadError",
    "ModuleClosedError",
    "MonolibError",
    "ParamsError",
    "ParamsFileError",
    "ParamsInputError",
    "RequestError",
    "ShapeError",
    "SignatureError",
    "TargetError",
    "ToolchainError",
    "UndecidableDimError",
    "UnknownTypeKeyError",
    "UnsupportedOpError",
    "VisualizeError",
]


class MonolibError(Exception):
    """Base class of every error monolib raises on bad input or a failed step."""


class ContainerError(MonolibError):
    """A container (the blob embedded in an exported library) is corrupt, truncated,
    of an unknown format version, or fails a SHA-256 check."""


class IntegrityError(ContainerError):
    """A library's own bytes (headers, code, data, integer tensors) differ from those
    recorded in its code digest at export, or that digest is damaged or missing.
    Raised BEFORE ``dlopen``: none of the library's code has run."""


class ParamsError(ContainerError):
    """A params (safetensors) file or buffer is truncated or malformed, or tensors
    cannot be stored in / packed from it. A ``ContainerError`` (so a ``MonolibError``)."""


class ParamsFileError(ParamsError):
    """The params file is missing or cannot be read, mapped or written.

    One parent, :class:`ParamsError`: every failure of ``load_params`` /
    ``save_params`` is caught by one ``except ParamsError``. (It was also a
    :class:`LibraryLoadError`, but a params file is no library and nothing caught it
    as one.)"""


class LibraryLoadError(MonolibError):
    """A library file is missing, truncated, foreign (not an ELF/PE/Mach-O shared
    library made by monolib), or the dynamic loader refused it."""


class UnknownTypeKeyError(LibraryLoadError):
    """The import tree names a module type key that has no registered loader."""


class CPUFeatureError(LibraryLoadError):
    """The library's code needs instruction-set features this CPU lacks (recorded at
    export, checked before ``dlopen``: an error instead of a SIGILL)."""


class ExportError(MonolibError):
    """``export_library`` could not produce the library (invalid tree, failed link)."""


class ToolchainError(ExportError):
    """No usable C compiler or assembler was found, or it failed."""


class SignatureError(MonolibError):
    """A library's detached signature is missing, malformed, made with a key that is
    not trusted, or does not match the library's bytes; or signing/key handling
    failed. Raised BEFORE the library is loaded: none of its code has run."""


class InputError(MonolibError):
    """A graph executor was given an unknown input name or index, or an array of the
    wrong shape or dtype."""


class ParamsInputError(InputError):
    """A param given to an executor (``load_params``, ``set_input``) has an unknown
    name, or the wrong shape or dtype: what a user gives an executor, like any
    :class:`InputError`. (A malformed params file is a :class:`ParamsError`.)"""


class CompileError(MonolibError):
    """The compiler could not compile the model."""


class UnsupportedOpError(CompileError):
    """The model uses operators (or opset versions) monolib does not implement."""


class ShapeError(CompileError):
    """A shape is missing (a dynamic dim with no value given) or inconsistent."""


class UndecidableDimError(CompileError):
    """A question about a run-time dim (``==``, ``<``, ``int()``) has no single answer
    over its bounds: the code asking it cannot take that dim (message names the dim)."""


class FunctionNotFoundError(MonolibError, AttributeError):
    """A module (and, when asked, its imports) has no function of the requested name."""


class ExecutionError(MonolibError):
    """A compiled function reported failure (``monolib_run`` returned nonzero)."""


class ModuleClosedError(MonolibError):
    """A module, or an executor of its library, was used after ``Module.close()``
    (load the library again)."""


class DeviceUnavailableError(ExecutionError):
    """No device of the kind a model was compiled for can be used here: its Python
    bindings are not installed, no driver/platform is found, or the index is out of
    range. Raised when an executor is made (never at import)."""


class TargetError(MonolibError, ValueError):
    """A target string (``"c -mtriple=..."``) could not be parsed or is not supported."""


class FetchError(MonolibError):
    """A model could not be downloaded, was missing from its wheel, or its SHA-256
    differs from the pinned one (``monolib.models.fetch``)."""


class VisualizeError(MonolibError):
    """A profile or graph that cannot be drawn (bad times, malformed nodes;
    ``monolib view``)."""


class RequestError(InputError):
    """An inference request to ``monolib serve`` (Open Inference Protocol v2) is
    malformed or does not fit the model: unknown model or input, wrong dtype, shape
    out of bounds, malformed JSON or binary header, body too large. ``status`` is the
    HTTP status it is answered with (400, 404, 413...)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
