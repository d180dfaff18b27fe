"""Whether this machine can run a target's kernels, and in words a student understands if not.

Building needs no GPU: where this says no, the pipeline still compiles every kernel and reports
compile errors and forbidden symbols, and marks the runs `not_run` with this reason.
"""

from __future__ import annotations

import functools
import os

from grader.targets import target_named


def certainly_unavailable(target: str) -> bool:
    """Whether this machine certainly cannot run the target's kernels, known without asking the driver
    (safe in any process: a build worker must not initialise CUDA)."""
    named = target_named(target)
    return named.needs_gpu and bool(os.environ.get("KERNEL_GRADER_NO_GPU") or named.driver_missing())


@functools.cache
def unavailable_reason(target: str) -> str | None:
    """None if kernels of the target named `target` can run here, else why not ("this machine has no NVIDIA GPU")."""
    if not target_named(target).needs_gpu:
        return None
    if os.environ.get("KERNEL_GRADER_NO_GPU"):  # a test seam, and a way to get compile feedback only
        return "no GPU is used here (KERNEL_GRADER_NO_GPU is set)"
    return target_named(target).unavailable_reason()
