"""The CUDA device module (type key ``"cuda"``): PTX from NVRTC, run with the driver API.

:class:`CUDAModule` holds the CUDA C kernels of a model compiled with
``target="cuda -arch=sm_XY"`` and the PTX NVRTC made for that virtual architecture
(``compute_XY``; the driver JIT-compiles PTX for the GPU it loads on, same or newer).
When NVRTC was not available at compile time the module holds the source only and
compiles it at load for the GPU found. Both NVRTC and the driver are reached through
NVIDIA's ``cuda-python`` bindings (``cuda.bindings.nvrtc``, ``cuda.bindings.driver``:
``cuModuleLoadData``, ``cuLaunchKernel``), imported only when needed.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

import numpy as np

from ..abi.names import CUDA
from .device import Device
from ..errors import CompileError, DeviceUnavailableError, ExecutionError
from .device_executor import DeviceModule, DeviceSession

__all__ = ["CUDAModule", "load_cuda", "nvrtc_available", "nvrtc_compile"]

logger = logging.getLogger(__name__)

#: threads per block of every launch (kernels guard the tail)
BLOCK = 128


def _nvrtc():
    from cuda.bindings import nvrtc  # cuda-python; NVRTC from nvidia-cuda-nvrtc-cu12

    return nvrtc


def nvrtc_available() -> bool:
    """Whether NVRTC can be loaded (it runs on the CPU: no GPU needed)."""
    try:
        nvrtc = _nvrtc()
        err, _, _ = nvrtc.nvrtcVersion()
        return err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    except Exception:  # noqa: BLE001  (ImportError, or the library itself is missing)
        return False


def nvrtc_compile(source: str, arch: str, required: bool = True) -> bytes | None:
    """PTX of ``source`` for ``arch`` (``"sm_80"`` -> ``--gpu-architecture=compute_80``).

    Parameters
    ----------
    required : bool
        False: return None when NVRTC is not installed (the module then keeps the
        source only and compiles at load).

    Raises
    ------
    CompileError
        NVRTC rejected the source (its log is in the message), or is missing while
        ``required``.
    """
    if not nvrtc_available():
        if required:
            raise CompileError("CUDA needs NVRTC: pip install cuda-python nvidia-cuda-nvrtc-cu12")
        logger.warning("NVRTC not available: the cuda module keeps its source, compiled at load")
        return None
    nvrtc = _nvrtc()
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    err, prog = nvrtc.nvrtcCreateProgram(source.encode("utf-8"), b"monolib.cu", 0, [], [])
    if err != ok:
        raise CompileError(f"nvrtcCreateProgram failed: {err}")
    try:
        opts = [f"--gpu-architecture=compute_{arch[3:]}".encode()]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != ok:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise CompileError(f"NVRTC failed for {arch}: {log.decode(errors='replace')[-4000:]}")
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(prog, ptx)
        return ptx
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


class CUDAModule(DeviceModule):
    """CUDA C kernels of one model and their PTX by arch (``binaries["sm_80"]``); see
    :class:`DeviceModule` for the byte format. ``meta["arch"]``: the target's arch."""

    type_key = CUDA

    #: how the last session got its PTX: ``"binary"`` (stored in the module) or
    #: ``"source"`` (NVRTC at load); ``""`` before any
    last_build = ""

    def ptx_for(self, arch: str) -> bytes:
        """The stored PTX of the newest arch not above ``arch`` (the driver JITs it
        forward), else PTX compiled now with NVRTC for ``arch``."""
        want = int(arch[3:])
        usable = sorted(
            (int(k[3:]), k) for k in self.binaries if k[3:].isdigit() and int(k[3:]) <= want
        )
        if usable:
            self.last_build = "binary"
            return self.binaries[usable[-1][1]]
        ptx = nvrtc_compile(self.source, arch)
        self.binaries[arch] = ptx
        self.last_build = "source"
        return ptx

    def open(self, device: Device, arena_bytes: int) -> DeviceSession:
        return _CUDASession(self, device, arena_bytes)


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise DeviceUnavailableError(
            f"CUDA needs cuda-python (pip install cuda-python) and an NVIDIA driver ({exc})"
        ) from None
    return driver


class _CUDASession(DeviceSession):
    """The primary context of one GPU, the module's functions and two buffers."""

    def __init__(self, module: CUDAModule, device: Device, arena_bytes: int) -> None:
        drv = self.drv = _driver()
        try:
            self._call("cuInit", 0)
        except Exception as exc:  # noqa: BLE001  (no libcuda: the bindings raise their own)
            raise DeviceUnavailableError(
                f"no usable CUDA driver/GPU ({type(exc).__name__}: {exc})"
            ) from None
        count = self._call("cuDeviceGetCount")
        if not 0 <= device.device_id < count:
            raise DeviceUnavailableError(f"no CUDA device {device.device_id} ({count} found)")
        dev = self._call("cuDeviceGet", device.device_id)
        attr = drv.CUdevice_attribute
        major = self._call(
            "cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev
        )
        minor = self._call(
            "cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev
        )
        self.ctx = self._call("cuDevicePrimaryCtxRetain", dev)
        self._call("cuCtxSetCurrent", self.ctx)
        ptx = module.ptx_for(f"sm_{major}{minor}")
        image = np.frombuffer(ptx + b"\0", np.uint8)  # NUL-terminated PTX, kept alive
        self.mod = self._call("cuModuleLoadData", image.ctypes.data)
        self.functions = [
            (self._call("cuModuleGetFunction", self.mod, f["name"].encode()), int(f["items"]))
            for f in module.functions
        ]
        self.arena = int(self._call("cuMemAlloc", max(arena_bytes, 64)))
        self.params = None

    def _call(self, name: str, *args: Any) -> Any:
        result = getattr(self.drv, name)(*args)
        err, rest = result[0], result[1:]
        if err != self.drv.CUresult.CUDA_SUCCESS:
            raise ExecutionError(f"CUDA {name} failed: {err}")
        return rest[0] if len(rest) == 1 else (rest or None)

    def _ptr(self, address: int) -> Any:
        return self.drv.CUdeviceptr(address)

    def upload_params(self, blob: np.ndarray) -> None:
        host = np.ascontiguousarray(blob if blob.nbytes else np.zeros(64, np.uint8))
        if self.params is None:
            self.params = int(self._call("cuMemAlloc", host.nbytes))
        self._call("cuMemcpyHtoD", self._ptr(self.params), host.ctypes.data, host.nbytes)

    def write(self, offset: int, host: np.ndarray) -> None:
        if host.nbytes:
            self._call(
                "cuMemcpyHtoD", self._ptr(self.arena + offset), host.ctypes.data, host.nbytes
            )

    def read(self, offset: int, host: np.ndarray) -> None:
        if host.nbytes:
            self._call(
                "cuMemcpyDtoH", host.ctypes.data, self._ptr(self.arena + offset), host.nbytes
            )

    def launch(self, i: int) -> None:
        fn, items = self.functions[i]
        args = ((self.params, self.arena), (ctypes.c_void_p, ctypes.c_void_p))
        grid = max(1, -(-items // BLOCK))
        self._call("cuLaunchKernel", fn, grid, 1, 1, BLOCK, 1, 1, 0, self.drv.CUstream(0), args, 0)

    def finish(self) -> None:
        self._call("cuCtxSynchronize")


def load_cuda(data: Any) -> CUDAModule:
    """Loader of type key ``"cuda"`` (``register_loader``)."""
    return CUDAModule.load(data)
