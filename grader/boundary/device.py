"""The harness half every target has (`Device`): the device a harness runs on, its buffers, calling a kernel;
and what one call returned (`Completion`). Each target's half (`cpp_device.py`, `cuda_device.py`,
`python_device.py`) implements it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from grader.boundary.protocol import Argument, ForbiddenUse, Launch


@dataclass(frozen=True)
class Completion:
    """What one call of a kernel returned: 0 or the target's error code, its times, and the error in words."""

    status: int
    wall_ms: float
    device_ms: float | None  # None where the target has no device clock
    error: str = ""
    # The error is an exception the kernel's own code raised (the python target), not the device's: the harness
    # reports it as such (`EndStatus.EXCEPTION`), with `error` saying what was raised and where.
    raised: bool = False
    # The device memory the call took beyond what was allocated before it, where the target's allocator counts it
    # (torch's CUDA allocator: torch.cuda.max_memory_allocated after a reset); None elsewhere.
    peak_device_bytes: int | None = None
    # What the call did that the assignment forbids, where the target watches the code run (the python target's
    # imports and methods); a target that finds it in the library instead (nm) leaves it empty.
    forbidden: tuple[ForbiddenUse, ...] = ()
    # The kernels it launched, where the library watches its launches (`grader.targets.compiled.watch_source`).
    launched: tuple[Launch, ...] = ()


class Device(Protocol):
    """The harness half of a target: the device a harness runs on, its buffers, and calling a kernel."""

    name: str  # what the result calls the device ("NVIDIA H200", "x86_64")

    def free_bytes(self) -> int | None:
        """Free device memory now (None: the target has no device of its own)."""
        ...

    def load(self, path: str) -> Any:
        """Load a built library (the harness reports a crash in here as one while loading)."""
        ...

    def allocate(self, count: int, dtype: np.dtype) -> Any:
        """A new allocation of `count` elements on the device (its contents undefined until filled)."""
        ...

    def upload(self, path: str, count: int, dtype: np.dtype) -> Any:
        """A trusted .npy file's `count` elements (a program's weights) on the device, for one call.

        A device may keep them between calls (one upload per harness), but each call starts from the file's
        contents: a call that wrote into them must not hand its writes to the next."""
        ...

    def fill(self, allocation: Any, start: int, count: int, bits: int) -> None:
        """Elements start..start+count all set to the raw bit pattern `bits` (on the device: no host copy)."""
        ...

    def write(self, allocation: Any, start: int, data: np.ndarray) -> None:
        """`data` copied into the allocation from element `start` on."""
        ...

    def read(self, allocation: Any, start: int, count: int) -> np.ndarray:
        """Elements start..start+count, on the host."""
        ...

    def digest(self, allocation: Any, start: int, count: int) -> int:
        """A checksum of elements start..start+count, computed where they are: any changed element changes it."""
        ...

    def call(self, library: Any, arguments: list[tuple[Argument, Any]]) -> Completion:
        """Call the kernel: each planned argument with its buffer (None for a scalar or a NULL buffer)."""
        ...

    def release(self) -> None:
        """Give back what the harness itself allocated for a call (pooled memory)."""
        ...

    def held_bytes(self) -> int | None:
        """Device memory held beyond what the harness held at its start (None: not measured here)."""
        ...
