"""The `cuda` target's harness half: buffers in GPU memory, through the CUDA driver (libcuda) with ctypes.

Not CuPy: a harness needs a context, one allocation and two copies per buffer, and the free memory;
importing CuPy cost each harness more than all of that (every kernel's harness and every
compute-sanitizer run starts one: benchmarks/RESULTS.md, "Harness start-up"). The context is the
device's primary one, the one the CUDA runtime that nvcc links into each kernel's library uses: the
library's kernels see these allocations as their own.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from grader.boundary.c_abi import SharedLibraryDevice

DRIVER = "libcuda.so.1"  # the driver's library, installed with the NVIDIA driver (not the toolkit)
ALLOCATION_GRANULE = 2 << 20  # cuMemAlloc rounds a large allocation up to this
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
        "cuDevicePrimaryCtxSetFlags_v2": [ctypes.c_int, ctypes.c_uint],
        "cuDevicePrimaryCtxRetain": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int],
        "cuCtxSetCurrent": [ctypes.c_void_p],
        "cuMemAlloc_v2": [ctypes.POINTER(_pointer), _size],
        "cuMemFree_v2": [_pointer],
        "cuMemcpyHtoD_v2": [_pointer, ctypes.c_void_p, _size],
        "cuMemcpyDtoH_v2": [ctypes.c_void_p, _pointer, _size],
        "cuMemsetD8_v2": [_pointer, ctypes.c_ubyte, _size],
        "cuMemsetD32_v2": [_pointer, ctypes.c_uint, _size],
        "cuModuleLoadData": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p],
        "cuModuleGetFunction": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p],
        "cuLaunchKernel": [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                           ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                           ctypes.c_void_p],
        "cuCtxSynchronize": [],
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
    """One buffer's device memory (address 0 for an empty buffer)."""

    address: int
    count: int
    dtype: np.dtype


# Correctness harnesses (the cuda target's harness_env sets SYNC_ENV to "blocking"): a synchronisation
# sleeps until the GPU is done instead of spinning a core, since a harness waits on its kernels most
# of its life beside other harnesses and the next submissions' compilers. A timing harness keeps the
# driver's default (it spins while it has a core): waking from a sleep costs 50-200 µs of wall clock.
SYNC_ENV = "KERNEL_GRADER_SYNC"
CU_CTX_SCHED_BLOCKING_SYNC = 0x04
DIGEST_BLOCKS, DIGEST_THREADS = 264, 256  # 2 blocks per SM of an H200: a 150 MB buffer in well under 1 ms
CHUNK_BYTES = 64 << 20  # a fill the driver can't do as one memset is composed on the host this much at a time


class CudaDevice(SharedLibraryDevice):
    """GPU 0 of the harness (the one the sandbox shows it), its primary context made current."""

    def __init__(self, device_code: str = "") -> None:
        self.driver = Driver()
        self.driver("cuInit", 0)
        device = ctypes.c_int()
        self.driver("cuDeviceGet", ctypes.byref(device), 0)
        if os.environ.get(SYNC_ENV) == "blocking":
            # Before the context exists: the runtime in the kernel's library (cudaDeviceSynchronize in
            # the shim) shares it, flags included.
            self.driver("cuDevicePrimaryCtxSetFlags_v2", device, CU_CTX_SCHED_BLOCKING_SYNC)
        context = ctypes.c_void_p()
        self.driver("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
        self.driver("cuCtxSetCurrent", context)
        # A context is current per thread: another thread of the harness (its memory sampler) makes it current too.
        self.context, self.owner = context, threading.get_ident()
        name = ctypes.create_string_buffer(256)
        self.driver("cuDeviceGetName", name, len(name), device)
        self.name = name.value.decode(errors="replace")
        self.allocations: list[Allocation] = []  # freed by release(), after the outputs are read back
        self.digest_kernel = self._load_digest(device_code) if device_code else None
        # The digest's one accumulator, for the harness's life: an allocation and a free around each digest cost
        # a composed call that digests around each of its 123 steps (1,300 digests) half a second.
        self.digest_total = self._allocate_kept(1, np.dtype(np.uint64)) if self.digest_kernel else None
        # What the device holds before any student code ran (this context and the accumulator included).
        self.baseline_used = self._used_bytes()
        self.uploads: dict[tuple[str, int, str], tuple[Allocation, int]] = {}  # kept files: allocation, digest
        self.kernel_names: dict[int, str] = {}  # launch handles' names, asked of the driver once each

    def _memory(self) -> tuple[int, int]:
        if threading.get_ident() != self.owner:
            self.driver("cuCtxSetCurrent", self.context)
        free, total = _size(), _size()
        self.driver("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def _used_bytes(self) -> int:
        free, total = self._memory()
        return total - free

    def free_bytes(self) -> int | None:
        return self._memory()[0]

    def kernel_name(self, handle: int) -> str:
        """The mangled name of the kernel a launch's handle names (a runtime cudaKernel_t is the driver's CUkernel);
        "" where this driver predates cuKernelGetName (CUDA 12.3) or does not know the handle."""
        names = self.kernel_names
        if handle not in names:
            get = getattr(self.driver.library, "cuKernelGetName", None)
            name = ctypes.c_char_p()
            if get is not None:
                get.argtypes, get.restype = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p], ctypes.c_int
            found = get is not None and get(ctypes.byref(name), ctypes.c_void_p(handle)) == 0 and name.value
            names[handle] = name.value.decode(errors="replace") if found else ""
        return names[handle]

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

    def _load_digest(self, ptx: str) -> ctypes.c_void_p:
        module, function = ctypes.c_void_p(), ctypes.c_void_p()
        self.driver("cuModuleLoadData", ctypes.byref(module), ptx.encode() + b"\0")
        self.driver("cuModuleGetFunction", ctypes.byref(function), module, b"kg_digest")
        return function

    def allocate(self, count: int, dtype: np.dtype) -> Allocation:
        # One allocation per buffer, so that compute-sanitizer knows each buffer's true end.
        allocation = self._allocate_kept(count, dtype)
        if count:
            self.allocations.append(allocation)
        return allocation

    def _allocate_kept(self, count: int, dtype: np.dtype) -> Allocation:
        """An allocation that `release` leaves alone."""
        allocation = Allocation(0, count, np.dtype(dtype))
        if count:
            address = _pointer()
            self.driver("cuMemAlloc_v2", ctypes.byref(address), count * allocation.dtype.itemsize)
            allocation.address = address.value
        return allocation

    def upload(self, path: str, count: int, dtype: np.dtype) -> Allocation:
        """The file's elements kept for the harness's life: uploaded at the first call that asks, and again only
        where their digest shows a call since wrote into them. (GPT-2's 498 MB of weights, uploaded by each of
        a composed check's three passes, cost its harness 0.28 s on the H200.)"""
        if self.digest_kernel is None:  # a digest would copy them back: uploading again costs less
            return super().upload(path, count, dtype)
        key = (path, count, np.dtype(dtype).str)
        if key in self.uploads:
            allocation, digest = self.uploads[key]
            if self.digest(allocation, 0, count) == digest:
                return allocation
        else:
            allocation = self._allocate_kept(count, dtype)
            # The harness's own, for its life: not memory a kernel kept (held_bytes), rounded as the driver rounds.
            self.baseline_used += -(-count * allocation.dtype.itemsize // ALLOCATION_GRANULE) * ALLOCATION_GRANULE
        self.write(allocation, 0, np.load(path, mmap_mode="r").reshape(-1))
        self.uploads[key] = (allocation, self.digest(allocation, 0, count))
        return allocation

    def _at(self, allocation: Allocation, start: int) -> int:
        return allocation.address + start * allocation.dtype.itemsize

    def fill(self, allocation: Allocation, start: int, count: int, bits: int) -> None:
        """A memset on the device where the pattern allows (4-byte elements, or zeros), else host chunks."""
        if count <= 0:
            return
        itemsize = allocation.dtype.itemsize
        if bits == 0:
            self.driver("cuMemsetD8_v2", self._at(allocation, start), 0, count * itemsize)
        elif itemsize == 4:
            self.driver("cuMemsetD32_v2", self._at(allocation, start), bits, count)
        else:
            unsigned = np.dtype(f"u{itemsize}")
            step = max(1, CHUNK_BYTES // itemsize)
            for offset in range(0, count, step):
                chunk = np.full(min(step, count - offset), bits, dtype=unsigned).view(allocation.dtype)
                self.write(allocation, start + offset, chunk)

    def write(self, allocation: Allocation, start: int, data: np.ndarray) -> None:
        contiguous = np.ascontiguousarray(data, dtype=allocation.dtype)
        if contiguous.size:
            self.driver("cuMemcpyHtoD_v2", self._at(allocation, start), contiguous.ctypes.data, contiguous.nbytes)

    def read(self, allocation: Allocation, start: int, count: int) -> np.ndarray:
        host = np.empty(max(0, count), dtype=allocation.dtype)
        if host.size:
            self.driver("cuMemcpyDtoH_v2", host.ctypes.data, self._at(allocation, start), host.nbytes)
        return host

    def digest(self, allocation: Allocation, start: int, count: int) -> int:
        """kg_digest over the elements' 32-bit words, on the GPU; without the kernel, copied back and hashed."""
        if self.digest_kernel is None or self.digest_total is None:
            return hash(self.read(allocation, start, count).tobytes())
        words = count * allocation.dtype.itemsize // 4
        total = self.digest_total
        self.fill(total, 0, 1, 0)
        arguments = [_pointer(self._at(allocation, start)), ctypes.c_uint64(words), _pointer(total.address)]
        pointers = (ctypes.c_void_p * len(arguments))(*[ctypes.addressof(a) for a in arguments])
        self.driver("cuLaunchKernel", self.digest_kernel, DIGEST_BLOCKS, 1, 1, DIGEST_THREADS, 1, 1, 0, None,
                    pointers, None)
        self.driver("cuCtxSynchronize")
        return int(self.read(total, 0, 1)[0])

    def pointer(self, allocation: Allocation) -> int:
        return allocation.address

    def free_pointer(self, address: int) -> str:
        """Free device memory the code under test allocated (cudaMalloc: the same context's driver allocation), by its
        address, as a program that owns the pointer frees it; the driver's error in words, or ""."""
        try:
            self.driver("cuMemFree_v2", _pointer(address))
        except DriverError as error:
            return str(error)
        return ""

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


def open_device(sanitizer: bool, device_code: str = "") -> CudaDevice:
    """The harness's GPU (the same under compute-sanitizer: every buffer is its own allocation)."""
    return CudaDevice(device_code)
