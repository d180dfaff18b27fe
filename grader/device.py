"""Whether this machine can run a target's kernels, and in words a student understands if not; and
which GPUs this process may use.

Building needs no GPU: where this says no, the pipeline still compiles every kernel and reports
compile errors and forbidden symbols, and marks the runs `not_run` with this reason.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from grader.targets import target_with


def cuda_tool(name: str) -> str | None:
    """A CUDA tool (compute-sanitizer, ncu) on PATH, else in $CUDA_HOME, $CUDA_PATH or /usr/local/cuda; None if absent."""
    found = shutil.which(name)
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.access(Path(home) / "bin" / name, os.X_OK):
            return str(Path(home) / "bin" / name)
    return None


def certainly_unavailable(target: str, packages: tuple[str, ...] = ()) -> bool:
    """Whether this machine certainly cannot run the target's kernels, known without asking the driver
    (safe in any process: a build worker must not initialise CUDA). packages: the assignment's python_packages
    (a python assignment that names cupy needs a GPU)."""
    named = target_with(target, packages)
    return named.needs_gpu and bool(os.environ.get("KERNEL_GRADER_NO_GPU") or named.driver_missing())


@functools.cache
def unavailable_reason(target: str, packages: tuple[str, ...] = ()) -> str | None:
    """None if kernels of the target named `target` (its harnesses seeing `packages`) can run here, else why not
    ("this machine has no NVIDIA GPU")."""
    named = target_with(target, packages)
    if not named.needs_gpu:
        return None
    if os.environ.get("KERNEL_GRADER_NO_GPU"):  # a test seam, and a way to get compile feedback only
        return "no GPU is used here (KERNEL_GRADER_NO_GPU is set)"
    return named.unavailable_reason()


def cuda_visible_devices() -> list[str] | None:
    """The GPUs $CUDA_VISIBLE_DEVICES names (indices or UUIDs), in its order; None where it is not set."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [d.strip() for d in value.split(",") if d.strip()]


def visible_gpus() -> list[str]:
    """The GPUs this process may use: $CUDA_VISIBLE_DEVICES if set, else every GPU nvidia-smi lists."""
    named = cuda_visible_devices()
    if named is not None:
        return named
    try:
        listing = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in listing.stdout.splitlines() if line.strip()] if listing.returncode == 0 else []
