"""One timing job per GPU, never beside correctness runs: a lock per GPU, exclusive for timing, shared for harnesses.

Two flock(2) files per GPU, so that waiting timing is not starved by a stream of correctness
harnesses: a taker passes the turnstile (`<gpu>.turnstile`) first, timing holding it exclusively
while it waits for and holds the GPU (`<gpu>.lock`), a harness only for the moment it takes its
share. flock locks belong to open files: a process that dies lets go of its locks with them.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from grader.device import cuda_visible_devices
from grader.errors import GraderError

LOCKS_ENV = "KERNEL_GRADER_LOCKS"  # the folder every grader process on this machine shares for its GPU locks
DEFAULT_LOCKS = Path("/tmp/kernel-grader-locks")
POLL_S = 0.05


class GpuBusy(GraderError):
    """The GPU's lock was not had within the time asked for."""


@dataclass(frozen=True)
class Hold:
    """A lock held: which GPU, how, and how long it was waited for."""

    gpu: str
    exclusive: bool
    waited_s: float


def gpu_key() -> str:
    """This process's GPU as the lock names it: the first of $CUDA_VISIBLE_DEVICES (a dispatch slot sees one), else 0."""
    return (cuda_visible_devices() or ["0"])[0]


def locks_folder() -> Path:
    return Path(os.environ.get(LOCKS_ENV) or DEFAULT_LOCKS)


@contextmanager
def gpu_lock(exclusive: bool, gpu: str | None = None, timeout_s: float | None = None) -> Iterator[Hold]:
    """Hold GPU `gpu`'s lock (default: this process's GPU): exclusive for a timing job, shared for a harness.

    Waits until it is had, or raises GpuBusy after `timeout_s` (None: waits as long as it takes).
    """
    gpu = gpu or gpu_key()
    folder = locks_folder()
    folder.mkdir(parents=True, exist_ok=True)
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in gpu)
    asked = time.monotonic()
    deadline = None if timeout_s is None else asked + timeout_s
    with _opened(folder / f"{name}.turnstile") as turnstile, _opened(folder / f"{name}.lock") as lock:
        _take(turnstile, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, deadline, gpu)
        try:
            _take(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, deadline, gpu)
        finally:
            if not exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)  # a harness passes; only timing keeps others waiting
        yield Hold(gpu, exclusive, time.monotonic() - asked)


@contextmanager
def _opened(path: Path) -> Iterator[int]:
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        yield descriptor
    finally:
        os.close(descriptor)  # and with it the lock


def _take(descriptor: int, mode: int, deadline: float | None, gpu: str) -> None:
    if deadline is None:
        fcntl.flock(descriptor, mode)
        return
    while True:
        try:
            fcntl.flock(descriptor, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise GpuBusy(f"GPU {gpu} is busy (its lock in {locks_folder()} is held by another grading or "
                              "timing job): try again when it is done") from None
            time.sleep(POLL_S)
