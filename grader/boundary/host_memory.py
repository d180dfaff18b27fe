"""Buffers in the harness's own memory, as NumPy arrays: the CPU targets' half of the `Device` protocol that holds
buffers (`cpp_device` calls a C library on their addresses, `python_device` a Python function on views of them)."""

from __future__ import annotations

import hashlib
import platform

import numpy as np


class HostMemory:
    """The CPU the harness runs on: each allocation is a NumPy array, filled, read and digested where it lies."""

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

    def release(self) -> None:
        pass

    def held_bytes(self) -> int | None:
        return None
