"""What a deployed model needs: modules, the container, library loading, the graph
executor, devices. NumPy and ctypes only; never imports ``monolib.compiler``,
``monolib.export`` or ``monolib.tools``.

The loaders of the built-in module types are registered here, in one place, so they
exist as soon as ``monolib.runtime`` is imported. ``CSourceModule`` and the export
steps live in ``monolib.export``, which registers the exporter behind
``Module.export_library`` when imported (``import monolib`` does).
"""

from ..abi import names
from .device import Device, cpu, cuda, opencl
from .dso import DSOModule
from ..errors import *
from ..errors import __all__ as _errors_all
from .factory import GraphExecutorFactoryModule, load_factory
from .graph_executor import GraphExecutor
from .graph_module import GraphModule
from . import device_executor  # registers the executor of opencl/cuda graphs
from .library import load_module
from .module import Module, register_loader
from .ndarray import NDArray
from .params import load_params, save_params
from .threads import set_num_threads, set_spin

__all__ = [
    "DSOModule",
    "Device",
    "GraphExecutor",
    "GraphExecutorFactoryModule",
    "GraphModule",
    "Module",
    "NDArray",
    "cpu",
    "cuda",
    "opencl",
    "load_module",
    "load_params",
    "register_loader",
    "save_params",
    "set_num_threads",
    "set_spin",
]
__all__ += _errors_all  # noqa: PLE0605  (every error class is public)

# The one place built-in loaders are registered. "library" needs none: the DSO
# module is the dlopen'd file itself (see library.load_module).
register_loader(names.FACTORY, load_factory, sections=True)
# device modules (docs/devices.md): pyopencl / cuda-python are imported only on use
register_loader(names.OPENCL, lambda data: _device_loader(names.OPENCL)(data))
register_loader(names.CUDA, lambda data: _device_loader(names.CUDA)(data))


def _device_loader(kind: str):
    if kind == names.OPENCL:
        from .opencl_module import load_opencl

        return load_opencl
    from .cuda_module import load_cuda

    return load_cuda

