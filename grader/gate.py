"""Who runs at once on one thing the runs share: side by side, or one alone.

Two places share something this way. A submission's kernels run side by side, each in its own
sandboxed harness (`grader.runner`: a gate of `parallel` harnesses); a batch runs a few submissions
at once on each GPU (`grader.dispatch.local`: a gate per GPU, and one for the CPU's C++ slots).
Correctness runs need not be exclusive, but neighbours on a GPU still share the card's memory (the
driver bounds a process's allocations by the card, not by a share of it): a neighbour that takes
every byte makes the others' allocations fail. So a failure beside others counts only once it
failed again alone (`Gate.hold(alone=True)`), and each hold says whether another ran beside it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Held:
    """One hold on a gate: whether another ran beside it, and how long it waited."""

    alone: bool
    waited: float = 0.0  # seconds before the gate let it in: not the run's own time
    shared: bool = False  # another hold was in at some moment while this one was


class Gate:
    """Up to `size` holds at once (None: any number); one that asks to be alone waits for the others
    to end, and none starts while it waits or runs: waiting alone holds go first, so that a
    confirmation never starves behind new starts."""

    def __init__(self, size: int | None = None) -> None:
        self.size = None if size is None else max(1, size)
        self.peak = 0  # the most holds in at once: what a result records
        self._running: list[Held] = []
        self._alone_waiting = 0
        self._changed = threading.Condition()

    @property
    def alone_waiting(self) -> int:
        """How many alone holds wait for those in now to end."""
        with self._changed:
            return self._alone_waiting

    @contextmanager
    def hold(self, alone: bool = False) -> Iterator[Held]:
        held = Held(alone)
        asked = time.monotonic()
        with self._changed:
            if alone:
                self._alone_waiting += 1
                self._changed.wait_for(lambda: not self._running)
                self._alone_waiting -= 1
            else:
                self._changed.wait_for(lambda: not self._alone_waiting and not any(h.alone for h in self._running)
                                       and (self.size is None or len(self._running) < self.size))
            held.waited = time.monotonic() - asked
            if self._running:
                held.shared = True
                for other in self._running:
                    other.shared = True
            self._running.append(held)
            self.peak = max(self.peak, len(self._running))
        try:
            yield held
        finally:
            with self._changed:
                self._running.remove(held)
                self._changed.notify_all()
