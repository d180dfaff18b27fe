"""Each call's peak extra heap memory, read from the grader's counting allocator (`alloc_counter.c`) where it was
preloaded into the harness (CPU targets: `grader.timing.alloc_counter` builds it; the runner and the timing preload it).

What is held when a call begins is its baseline: the harness's own buffers (the arguments, their margins) do not
count, and neither does what a Python kernel's module keeps from its import (`rebase`, after the import). Without the
counter (no C compiler, a platform that is not glibc's, a GPU target) nothing is counted: the figures are None.
"""

from __future__ import annotations

import ctypes


def _counter() -> tuple[object | None, object | None]:
    process = ctypes.CDLL(None)
    reset, peak = getattr(process, "kg_alloc_reset", None), getattr(process, "kg_alloc_peak", None)
    if peak is not None:
        peak.restype = ctypes.c_longlong
    return reset, peak


def rebase() -> None:
    """What is held now is the running call's baseline (a Python kernel's module, just imported by its first call)."""
    reset, _ = _counter()
    if reset is not None:
        reset()  # type: ignore[operator]


class AllocationMeter:
    """Each call's peak extra heap memory, from the preloaded counting allocator (absent: `counting` is False)."""

    def __init__(self) -> None:
        self.reset_counter, self.peak_counter = _counter()
        self.counting = self.reset_counter is not None and self.peak_counter is not None
        self.last: int | None = None  # the last call's peak
        self.most: int | None = None  # the largest peak of any call so far

    def reset(self) -> None:
        """Just before a call: what is held now is its baseline (the harness's own buffers do not count)."""
        if self.counting:
            self.reset_counter()  # type: ignore[misc]

    def read(self) -> int | None:
        """Just after a call: its peak over the baseline (None: not counted), kept if the largest yet."""
        if not self.counting:
            return None
        self.last = int(self.peak_counter())  # type: ignore[misc]
        self.most = max(self.most or 0, self.last)
        return self.last
