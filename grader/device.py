"""Whether this machine can run a target's kernels, and in words a student understands if not.

Building needs no GPU: where this says no, the pipeline still compiles every kernel and reports
compile errors and forbidden symbols, and marks the runs `not_run` with this reason.
"""

from __future__ import annotations

import functools
import os

from grader.targets import target_named


@functools.cache
def unavailable_reason(target: str) -> str | None:
    """None if kernels of the target named `target` can run here, else why not ("this machine has no NVIDIA GPU")."""
    if not target_named(target).needs_gpu:
        return None
    if os.environ.get("KERNEL_GRADER_NO_GPU"):  # a test seam, and a way to get compile feedback only
        return "no GPU is used here (KERNEL_GRADER_NO_GPU is set)"
    if not (os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")):
        return "this machine has no NVIDIA GPU (no NVIDIA driver found)"
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed here (pip install 'kernel-grader[gpu]')"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # a driver without a usable device, a broken install
        return f"no usable GPU ({type(error).__name__}: {str(error)[:120]})"
    return None if count > 0 else "this machine's NVIDIA driver sees no GPU"
