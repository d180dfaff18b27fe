"""The `cpp` target's harness half: buffers are NumPy arrays in the harness's own memory."""

from __future__ import annotations

import hashlib
import platform
from typing import Any

import numpy as np

from grader.boundary.c_abi import SharedLibraryDevice


class HostDevice(SharedLibraryDevice):
    """The CPU the harness runs on: the kernel reads and writes NumPy arrays in place."""

    def __init__(self) -> None:
        self.name = platform.processor() or platform.machine()

    def free_bytes(self) -> int | None:
        return None

    def allocate(self, count: int, dtype: np.dtype) -> np.ndarray:
        return np.empty(count, dtype=dtype)

    def fill(self, allocation: np.ndarray, start: int, count: int, bits: int) -> None:
        allocation[start: start + count].view(f"u{allocation.itemsize}")[:] = bits

    def write(self, allocation: np.ndarray, start: int, data: np.ndarray) -> None:
        allocation[start: start + data.size] = data.ravel()

    def read(self, allocation: np.ndarray, start: int, count: int) -> np.ndarray:
        return allocation[start: start + count].copy()

    def digest(self, allocation: np.ndarray, start: int, count: int) -> int:
        return int.from_bytes(hashlib.blake2b(allocation[start: start + count].tobytes(), digest_size=16).digest(),
                              "little")

    def pointer(self, allocation: Any) -> int:
        return allocation.ctypes.data

    def release(self) -> None:
        pass

    def held_bytes(self) -> int | None:
        return None


def open_device(sanitizer: bool, device_code: str = "") -> HostDevice:
    """The harness's device; `sanitizer` changes nothing on the CPU (compute-sanitizer is CUDA's), nor has it device code."""
    return HostDevice()
