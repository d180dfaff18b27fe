"""The harness slots of one run: how many harnesses run at once.

Correctness runs need not be exclusive, so a submission's kernels run side by side, each in its
own sandboxed harness, as many at once as `harnesses_for` says; the run lets them in through a
`grader.gate.Gate` of that size, which also runs a GPU case again alone (its docstring says why).
"""

from __future__ import annotations

import os

HARNESSES_ENV = "KERNEL_GRADER_HARNESSES"  # the machine's default for `--harnesses`


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
