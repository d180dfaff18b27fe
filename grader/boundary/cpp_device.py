"""The `cpp` target's harness half: buffers are NumPy arrays in the harness's own memory (`host_memory`), and the
kernel's library is called on their addresses (`c_abi`)."""

from __future__ import annotations

from typing import Any

from grader.boundary.c_abi import SharedLibraryDevice
from grader.boundary.host_memory import HostMemory


class HostDevice(HostMemory, SharedLibraryDevice):
    """The CPU the harness runs on: the kernel reads and writes NumPy arrays in place."""

    def pointer(self, allocation: Any) -> int:
        return allocation.ctypes.data


def open_device(sanitizer: bool, device_code: str = "") -> HostDevice:
    """The harness's device; `sanitizer` changes nothing on the CPU (compute-sanitizer is CUDA's), nor has it device code."""
    return HostDevice()
