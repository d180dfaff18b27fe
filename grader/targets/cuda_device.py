"""The `cuda` target's harness half: buffers in GPU memory, through the CUDA driver (libcuda) with ctypes.

Not CuPy: a harness needs a context, one allocation and two copies per buffer, and the free memory;
importing CuPy cost each harness more than all of that (every kernel's harness and every
compute-sanitizer run starts one: benchmarks/RESULTS.md, "Harness start-up"). The context is the
device's primary one, the one the CUDA runtime that nvcc links into each kernel's library uses: the
library's kernels see these allocations as their own.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from grader.targets.c_abi import SharedLibraryDevice

DRIVER = "libcuda.so.1"  # the driver's library, installed with the NVIDIA driver (not the toolkit)
_size = ctypes.c_size_t
_pointer = ctypes.c_uint64  # CUdeviceptr


class DriverError(RuntimeError):
    """A driver call failed: its name and the driver's error name."""


class Driver:
    """The few driver functions a harness calls, typed (the `_v2` symbols are what cuda.h's names mean)."""

    SIGNATURES: dict[str, list[Any]] = {
        "cuInit": [ctypes.c_uint],
        "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
        "cuDeviceGetCount": [ctypes.POINTER(ctypes.c_int)],
        "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
        "cuDevicePrimaryCtxRetain": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int],
        "cuCtxSetCurrent": [ctypes.c_void_p],
        "cuMemAlloc_v2": [ctypes.POINTER(_pointer), _size],
        "cuMemFree_v2": [_pointer],
        "cuMemcpyHtoD_v2": [_pointer, ctypes.c_void_p, _size],
        "cuMemcpyDtoH_v2": [ctypes.c_void_p, _pointer, _size],
        "cuMemGetInfo_v2": [ctypes.POINTER(_size), ctypes.POINTER(_size)],
        "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    }

    def __init__(self) -> None:
        self.library = ctypes.CDLL(DRIVER)
        for name, argtypes in self.SIGNATURES.items():
            function = getattr(self.library, name)
            function.argtypes, function.restype = argtypes, ctypes.c_int

    def __call__(self, name: str, *arguments: Any) -> None:
        status = getattr(self.library, name)(*arguments)
        if status != 0:
            text = ctypes.c_char_p()
            known = self.library.cuGetErrorName(status, ctypes.byref(text)) == 0 and text.value
            raise DriverError(f"{name} failed: {text.value.decode() if known else f'error {status}'}")


@dataclass
class Allocation:
    """One buffer's device memory (address 0 for an empty buffer) and what it holds."""

    address: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize


class CudaDevice(SharedLibraryDevice):
    """GPU 0 of the harness (the one the sandbox shows it), its primary context made current."""

    def __init__(self) -> None:
        self.driver = Driver()
        self.driver("cuInit", 0)
        device = ctypes.c_int()
        self.driver("cuDeviceGet", ctypes.byref(device), 0)
        context = ctypes.c_void_p()
        self.driver("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
        self.driver("cuCtxSetCurrent", context)
        name = ctypes.create_string_buffer(256)
        self.driver("cuDeviceGetName", name, len(name), device)
        self.name = name.value.decode(errors="replace")
        self.allocations: list[Allocation] = []  # freed by release(), after the outputs are read back
        # What the device holds before any student code ran (this context included).
        self.baseline_used = self._used_bytes()

    def _memory(self) -> tuple[int, int]:
        free, total = _size(), _size()
        self.driver("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def _used_bytes(self) -> int:
        free, total = self._memory()
        return total - free

    def free_bytes(self) -> int | None:
        return self._memory()[0]

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

    def upload(self, given: np.ndarray) -> Allocation:
        # One allocation per buffer, so that compute-sanitizer knows each buffer's true end, and one
        # host-to-device copy of contents composed on the host.
        allocation = Allocation(0, given.shape, given.dtype)
        if allocation.nbytes:
            address = _pointer()
            self.driver("cuMemAlloc_v2", ctypes.byref(address), allocation.nbytes)
            allocation.address = address.value
            self.allocations.append(allocation)
            contiguous = np.ascontiguousarray(given)
            self.driver("cuMemcpyHtoD_v2", allocation.address, contiguous.ctypes.data, allocation.nbytes)
        return allocation

    def to_host(self, allocation: Allocation) -> np.ndarray:
        host = np.empty(allocation.shape, dtype=allocation.dtype)
        if allocation.nbytes:
            self.driver("cuMemcpyDtoH_v2", host.ctypes.data, allocation.address, allocation.nbytes)
        return host

    def pointer(self, allocation: Allocation) -> int:
        return allocation.address

    def release(self) -> None:
        while self.allocations:
            self.driver("cuMemFree_v2", self.allocations.pop().address)

    def held_bytes(self) -> int | None:
        return self._used_bytes() - self.baseline_used


def gpu_count() -> int:
    """How many GPUs the driver shows this process (raises OSError without libcuda, DriverError without a GPU)."""
    driver = Driver()
    driver("cuInit", 0)
    count = ctypes.c_int()
    driver("cuDeviceGetCount", ctypes.byref(count))
    return count.value


def open_device(sanitizer: bool) -> CudaDevice:
    """The harness's GPU (the same under compute-sanitizer: every buffer is its own allocation)."""
    return CudaDevice()
