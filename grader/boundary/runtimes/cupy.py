"""CuPy as a runtime (`grader.boundary.runtimes`): its code runs on the GPU, so an assignment that names cupy (or cupyx)
needs one; its events time a call; it compiles elementwise and reduction kernels with NVRTC at run time into the
folder CUPY_CACHE_DIR names, which the grader carries between a submission's harnesses (`grader.runner.
kernel_cache`); its wheel is named for the CUDA major version (cupy-cuda12x, cupy-cuda13x), so no plain
requirement installs it. Reached through `sys.modules` alone (the harness's rule)."""

from __future__ import annotations

import sys
from typing import Any

from grader.boundary.runtimes import Runtime


def timing_events() -> tuple[Any, Any]:
    """Two CuPy events (on the current stream when recorded)."""
    cupy = sys.modules["cupy"]
    return cupy.cuda.Event(), cupy.cuda.Event()


def elapsed_ms(start: Any, end: Any) -> float:
    return float(sys.modules["cupy"].cuda.get_elapsed_time(start, end))


RUNTIME = Runtime(
    name="cupy",
    packages=("cupy", "cupyx"),
    gpu=True,
    kernel_cache_env="CUPY_CACHE_DIR",
    apart_install=(
        "# CuPy's wheel is named for the CUDA major version (cupy-cuda12x, cupy-cuda13x): nvcc's says which.",
        "cuda_major=$(nvcc --version | sed -n 's/.*release \\([0-9]*\\)\\..*/\\1/p')",
        '{pip} "cupy-cuda${cuda_major:?nvcc names no CUDA release}x"'),
    timing_events=timing_events,
    elapsed_ms=elapsed_ms,
)
