"""The harness slots of one run: how many harnesses run at once, and running one alone.

Correctness runs need not be exclusive, so a submission's kernels run side by side, each in its
own sandboxed harness. On a GPU the neighbours still share the card's memory (the driver bounds
a process's allocations by the card, not by a share of it): a kernel that takes every byte makes
the others' allocations fail. So a GPU case that failed beside other harnesses counts only once it
failed again alone (`Slots.harness(alone=True)`), and a crash still costs only its own kernel.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

HARNESSES_ENV = "KERNEL_GRADER_HARNESSES"  # the machine's default for `--harnesses`


@dataclass
class Held:
    """One harness's hold on a slot: whether another harness ran beside it, and how long it waited."""

    alone: bool
    waited: float = 0.0  # seconds before the slot was free: not the kernel's time
    shared: bool = False  # another harness ran at some moment while this one did


class Slots:
    """Up to `size` harnesses at once; one that asks to run alone waits for the others to end, and
    none starts while it waits or runs."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self.peak = 0  # the most harnesses that ran at once: what the result records
        self._running: list[Held] = []
        self._alone_waiting = 0
        self._changed = threading.Condition()

    @property
    def alone_waiting(self) -> int:
        """How many alone runs wait for the harnesses running now to end."""
        with self._changed:
            return self._alone_waiting

    @contextmanager
    def harness(self, alone: bool = False) -> Iterator[Held]:
        held = Held(alone)
        asked = time.monotonic()
        with self._changed:
            if alone:
                self._alone_waiting += 1
                self._changed.wait_for(lambda: not self._running)
                self._alone_waiting -= 1
            else:
                # Waiting alone runs go first: a confirmation must not starve behind new starts.
                self._changed.wait_for(lambda: not self._alone_waiting and len(self._running) < self.size
                                       and not any(h.alone for h in self._running))
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


def usable_cores() -> int:
    """The cores this process may run on (a Slurm or container cpuset included)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def harnesses_for(kernels: int, requested: int | None = None) -> int:
    """How many harnesses a submission runs at once: `requested`, else $KERNEL_GRADER_HARNESSES,
    else min(kernels, half the cores).

    Half the cores: each harness is a Python process with its sandbox's watchdog beside it, and a
    batch's builds and compares share the machine. The same rule on a GPU: correctness runs need
    not be exclusive; the cases' times are then not (`Environment.harnesses_at_once` says so).
    """
    if requested is None and os.environ.get(HARNESSES_ENV, "").strip().isdigit():
        requested = int(os.environ[HARNESSES_ENV])
    if requested is not None:
        return max(1, requested)
    return max(1, min(kernels, usable_cores() // 2))
