"""Which grading failures are the machine's, not the submission's: told from the exception raised.

Another submission's fork bomb (or any load on the grading machine) can leave the grader unable
to start a thread or a process, the driver unable to initialise, a run slot's process dead. None
of that is the student's: a batch grades the submission again with nothing beside it before
anything is recorded (`grader.dispatch.local`), and keeps the first failure as a `Retry` in the
result. Everything else raised while grading is the grader's own bug, and is said so.
"""

from __future__ import annotations

import errno
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Literal

from grader.errors import MachineError

# "process_died": a run slot's process ended under it; "thread": a thread of the grader's could not
# start; "device": the harness could not open its GPU; "harness": a harness never reached its
# device; "resources": the kernel refused a process, memory or a file (EAGAIN, ENOMEM, EMFILE, ENFILE); "library": a
# library the assignment provides (CUTLASS's headers) is not on this machine.
FaultKind = Literal["process_died", "thread", "device", "harness", "resources", "library"]
FAULT_KINDS: tuple[FaultKind, ...] = ("process_died", "thread", "device", "harness", "resources", "library")
EXHAUSTED = (errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE)
# CPython's words when a thread cannot start (threading.Thread.start): it raises a plain RuntimeError.
THREAD_NOT_STARTED = "can't start new thread"

# What the machine could not do, for the words of a result that failed twice.
FAULT_WORDS: dict[str, str] = {
    "process_died": "keep the grading process alive",
    "thread": "start a thread of the grader's",
    "device": "open the GPU",
    "harness": "start a harness",
    "resources": "start a process (out of processes, memory or open files)",
    "library": "find a library the assignment provides",
}


@dataclass(frozen=True)
class Fault:
    """A failure of the machine's: which kind, and what was raised, in the grader's words."""

    kind: FaultKind
    detail: str


def machine_fault(error: BaseException) -> Fault | None:
    """The machine's fault that `error` (or the error it was raised from) is, or None: a bug of the grader's."""
    for raised in (error, error.__cause__):
        if raised is None:
            continue
        if isinstance(raised, MachineError) and raised.fault in FAULT_KINDS:
            return Fault(raised.fault, str(raised))  # type: ignore[arg-type]
        if isinstance(raised, BrokenProcessPool):
            return Fault("process_died", "the grading process for this submission died")
        if isinstance(raised, RuntimeError) and THREAD_NOT_STARTED in str(raised):
            return Fault("thread", f"{type(raised).__name__}: {raised}")
        if isinstance(raised, OSError) and raised.errno in EXHAUSTED:
            return Fault("resources", f"{type(raised).__name__}: {raised}")
        if isinstance(raised, MemoryError):
            return Fault("resources", "MemoryError: the grader's process could not allocate memory")
    return None
