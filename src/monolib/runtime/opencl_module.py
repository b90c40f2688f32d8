"""The OpenCL device module (type key ``"opencl"``) and its session, via pyopencl.

:class:`OpenCLModule` holds the OpenCL C kernels of a model compiled with
``target="opencl"`` and, once built on a device, that device's program binary (keyed
``platform|device|driver version``), so a library exported after a run, loaded on the
same device, skips the OpenCL C compiler. pyopencl is imported when a session opens,
never at import. API: the OpenCL 1.2 specification (``clCreateProgramWithBinary``,
``clEnqueueNDRangeKernel``) through pyopencl.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..abi.names import OPENCL
from .device import Device
from ..errors import DeviceUnavailableError, ExecutionError
from .device_executor import DeviceModule, DeviceSession

__all__ = ["OpenCLModule", "devices", "load_opencl"]

logger = logging.getLogger(__name__)

#: work-group size of every launch (the global size is rounded up; kernels guard)
LOCAL_SIZE = 64


def _pyopencl():
    try:
        import pyopencl
    except ImportError as exc:
        raise DeviceUnavailableError(
            f"OpenCL needs pyopencl (pip install pyopencl) and an OpenCL driver ({exc})"
        ) from None
    return pyopencl


def devices() -> list[Any]:
    """Every OpenCL device of every platform, in platform order (``opencl(i)`` is the
    i-th).

    Raises
    ------
    DeviceUnavailableError
        pyopencl is missing or no OpenCL platform (ICD) is installed.
    """
    cl = _pyopencl()
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        platforms, why = [], str(exc)
    else:
        why = "no platform"
    found = [d for p in platforms for d in p.get_devices()]
    if not found:
        raise DeviceUnavailableError(
            f"no OpenCL device found ({why}): install an OpenCL driver (ICD), e.g. Debian's "
            "pocl-opencl-icd for CPUs, or the GPU vendor's"
        )
    return found


def _device(i: int) -> Any:
    found = devices()
    if not 0 <= i < len(found):
        names = ", ".join(f"{k}: {d.name}" for k, d in enumerate(found))
        raise DeviceUnavailableError(f"no OpenCL device {i} (found {names})")
    return found[i]


def device_key(dev: Any) -> str:
    """The key a program binary is stored under: ``platform|device|driver version``."""
    return f"{dev.platform.name}|{dev.name}|{dev.driver_version}"


class OpenCLModule(DeviceModule):
    """OpenCL C kernels of one model (see :class:`DeviceModule` for the byte format).

    Attributes
    ----------
    last_build : str
        How the latest session got its program: ``"binary"`` (stored binary) or
        ``"source"`` (built from the OpenCL C source; its binary is then stored).
    """

    type_key = OPENCL

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_build = ""
        #: keep the binary of each device a session builds for (exported with the module)
        self.store_binaries = False

    def build_binary(self, device: Device | None = None) -> str:
        """Build the program for ``device`` (default ``opencl(0)``) and store its binary,
        so a library exported afterwards loads on that device without the OpenCL C
        compiler. Returns the binary's key (``platform|device|driver version``).

        Raises
        ------
        DeviceUnavailableError
            No such OpenCL device.
        ExecutionError
            The build failed.
        """
        cl = _pyopencl()
        dev = _device(device.device_id if device is not None else 0)
        store, self.store_binaries = self.store_binaries, True
        try:
            self.program(cl, cl.Context([dev]), dev)
        finally:
            self.store_binaries = store
        return device_key(dev)

    def program(self, cl: Any, ctx: Any, dev: Any) -> Any:
        """The built program for ``dev``: from its stored binary when there is one (a
        binary the driver refuses is rebuilt from source), else from source.

        Raises
        ------
        ExecutionError
            The OpenCL C compiler failed (its build log is in the message).
        """
        key = device_key(dev)
        if key in self.binaries:
            try:
                prog = cl.Program(ctx, [dev], [self.binaries[key]]).build()
                self.last_build = "binary"
                return prog
            except cl.Error as exc:
                logger.info("stored binary for %s refused (%s): building from source", key, exc)
        try:
            prog = cl.Program(ctx, self.source).build()
        except cl.Error as exc:
            raise ExecutionError(f"OpenCL build failed on {dev.name}: {exc}") from None
        if self.store_binaries:
            # a driver may compile every kernel now to make the binary (PoCL: seconds)
            self.binaries[key] = bytes(prog.get_info(cl.program_info.BINARIES)[0])
        self.last_build = "source"
        return prog

    def open(self, device: Device, arena_bytes: int) -> DeviceSession:
        return _OpenCLSession(self, device, arena_bytes)


class _OpenCLSession(DeviceSession):
    """A context, a queue, the kernels and two buffers on one OpenCL device."""

    def __init__(self, module: OpenCLModule, device: Device, arena_bytes: int) -> None:
        cl = self.cl = _pyopencl()
        dev = _device(device.device_id)
        self.ctx = cl.Context([dev])
        self.queue = cl.CommandQueue(self.ctx)
        program = module.program(cl, self.ctx, dev)
        local = min(LOCAL_SIZE, dev.max_work_group_size)
        self.kernels = []
        for f in module.functions:
            items = int(f["items"])
            self.kernels.append(
                (cl.Kernel(program, f["name"]), (-(-items // local) * local,), (local,))
            )
        self.arena = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, max(arena_bytes, 64))
        self.params = None

    def upload_params(self, blob: np.ndarray) -> None:
        cl = self.cl
        host = blob if blob.nbytes else np.zeros(64, np.uint8)
        self.params = cl.Buffer(
            self.ctx,
            cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
            hostbuf=np.ascontiguousarray(host),
        )
        for kernel, _, _ in self.kernels:
            kernel.set_args(self.params, self.arena)

    def write(self, offset: int, host: np.ndarray) -> None:
        if host.nbytes:
            self.cl.enqueue_copy(self.queue, self.arena, host, dst_offset=offset, is_blocking=False)

    def read(self, offset: int, host: np.ndarray) -> None:
        if host.nbytes:
            self.cl.enqueue_copy(self.queue, host, self.arena, src_offset=offset, is_blocking=False)

    def launch(self, i: int) -> None:
        kernel, glob, local = self.kernels[i]
        self.cl.enqueue_nd_range_kernel(self.queue, kernel, glob, local)

    def finish(self) -> None:
        try:
            self.queue.finish()
        except self.cl.Error as exc:
            raise ExecutionError(f"OpenCL execution failed: {exc}") from None


def load_opencl(data: Any) -> OpenCLModule:
    """Loader of type key ``"opencl"`` (``register_loader``)."""
    return OpenCLModule.load(data)
