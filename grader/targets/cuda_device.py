"""The `cuda` target's harness half: buffers are CuPy arrays on the GPU."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from grader.targets.c_abi import SharedLibraryDevice


class CudaDevice(SharedLibraryDevice):
    """GPU 0 of the harness (the one the sandbox shows it), through CuPy."""

    def __init__(self, sanitizer: bool) -> None:
        import cupy  # here, not at the top: a missing CuPy is the machine's problem, said as such

        if sanitizer:
            # One cudaMalloc per buffer, so that compute-sanitizer knows each buffer's true end
            # (a pool's sub-allocations would hide a write just past one).
            cupy.cuda.set_allocator(None)
        self.xp = cupy
        properties = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = properties["name"]
        self.name = name.decode() if isinstance(name, bytes) else str(name)
        # What the device holds before any student code ran (this context included).
        self.baseline_used = self._used_bytes()

    def _used_bytes(self) -> int:
        free, total = self.xp.cuda.runtime.memGetInfo()
        return int(total - free)

    def free_bytes(self) -> int | None:
        return int(self.xp.cuda.runtime.memGetInfo()[0])

    def load(self, path: str) -> Any:
        """Load a kernel's library; for one that links cuBLAS, create the course's handle first.

        The course's main program calls cublasCreate before any kernel: a kernel written for it
        expects `cublas_handle` to be ready. Only a library that calls cuBLAS resolves cublasCreate_v2.
        """
        library = super().load(path)
        create = getattr(library, "cublasCreate_v2", None)
        try:
            handle = ctypes.c_void_p.in_dll(library, "cublas_handle")
        except ValueError:
            handle = None
        if create is not None and handle is not None and not handle.value:
            create.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
            create.restype = ctypes.c_int
            if create(ctypes.byref(handle)) != 0:
                raise RuntimeError("cublasCreate failed: the grading machine cannot start cuBLAS")
        return library

    def upload(self, given: np.ndarray) -> Any:
        # One host-to-device copy of contents composed on the host: a fill on the device would
        # JIT-compile a CuPy kernel in every harness (no kernel cache is shared between sandboxes).
        allocation = self.xp.empty(given.shape, dtype=given.dtype)
        allocation.set(given)
        return allocation

    def to_host(self, allocation: Any) -> np.ndarray:
        return allocation.get()

    def pointer(self, allocation: Any) -> int:
        return allocation.data.ptr

    def release(self) -> None:
        self.xp.get_default_memory_pool().free_all_blocks()

    def held_bytes(self) -> int | None:
        return self._used_bytes() - self.baseline_used


def open_device(sanitizer: bool) -> CudaDevice:
    """The harness's GPU; under compute-sanitizer, without CuPy's memory pool."""
    return CudaDevice(sanitizer)
