"""The `cpp` target's harness half: buffers are NumPy arrays in the harness's own memory."""

from __future__ import annotations

import platform
from typing import Any

import numpy as np

from grader.targets.c_abi import SharedLibraryDevice


class HostDevice(SharedLibraryDevice):
    """The CPU the harness runs on: the kernel reads and writes NumPy arrays in place."""

    def __init__(self) -> None:
        self.name = platform.processor() or platform.machine()

    def free_bytes(self) -> int | None:
        return None

    def upload(self, given: np.ndarray) -> np.ndarray:
        return given.copy()

    def to_host(self, allocation: Any) -> np.ndarray:
        return allocation  # already on the host: read it in place

    def pointer(self, allocation: Any) -> int:
        return allocation.ctypes.data

    def release(self) -> None:
        pass

    def held_bytes(self) -> int | None:
        return None


def open_device(sanitizer: bool) -> HostDevice:
    """The harness's device; `sanitizer` changes nothing on the CPU (compute-sanitizer is CUDA's)."""
    return HostDevice()
