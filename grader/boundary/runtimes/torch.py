"""PyTorch as a runtime (`grader.boundary.runtimes`): an assignment that names torch runs on the CPU wherever it grades,
and on a GPU where it also names the marker "torch.cuda". Before each call its random state is fixed (seed 0,
deterministic algorithms, TF32 off) and, on CUDA, its allocator's peak counter reset, so that the call's peak is
its device memory; its CUDA events time the call. Reached through `sys.modules` alone (the harness's rule)."""

from __future__ import annotations

import sys
from typing import Any

from grader.boundary.runtimes import Runtime

CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's CPU wheels: PyPI's torch is the multi-GB CUDA build


def prepare() -> int | None:
    """Its random state fixed (the settings DETERMINISM records), and on CUDA the peak memory counter reset.
    Returns the CUDA memory allocated now (the base the call's peak is read against), None without CUDA."""
    torch = sys.modules["torch"]
    try:
        torch.manual_seed(0)
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        if not torch.cuda.is_available():
            return None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return int(torch.cuda.memory_allocated())
    except Exception as error:  # a broken CUDA context: the call's own outputs show it; the log says why
        print(f"kernel-grader: torch's CUDA memory counter could not be reset ({error!r}): no device memory for "
              "this case", file=sys.stderr, flush=True)
        return None


def peak_device_bytes(base: int | None) -> int | None:
    """The most CUDA memory torch's allocator held during the call beyond what it held before (None without CUDA)."""
    if base is None:
        return None
    try:
        torch = sys.modules["torch"]
        torch.cuda.synchronize()
        return max(0, int(torch.cuda.max_memory_allocated()) - base)
    except Exception as error:
        print(f"kernel-grader: torch's CUDA memory counter could not be read ({error!r}): no device memory for "
              "this case", file=sys.stderr, flush=True)
        return None


def timing_events() -> tuple[Any, Any] | None:
    """Two CUDA events of torch's on the current stream, where it has CUDA."""
    torch = sys.modules["torch"]
    if not torch.cuda.is_available():
        return None
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def elapsed_ms(start: Any, end: Any) -> float:
    return float(start.elapsed_time(end))


RUNTIME = Runtime(
    name="torch",
    packages=("torch",),
    gpu_marker="torch.cuda",
    # The version a machine set up to grade installs: a plain `torch` is whichever is newest (and multi-GB); the one
    # the PyTorch assignments are tested with is pinned.
    pin="torch==2.13.0",
    determinism=("torch.manual_seed(0) before each call", "torch.use_deterministic_algorithms(True, warn_only=True)",
                 "CUBLAS_WORKSPACE_CONFIG=:4096:8", "TF32 off (cuda.matmul, cudnn)"),
    # cuBLAS's deterministic reductions need a fixed workspace (torch's deterministic mode asks for it).
    harness_env={"CUBLAS_WORKSPACE_CONFIG": ":4096:8"},
    # A CPU torch assignment runs on the CPU on a GPU machine too (no GPU slot is held for it).
    cpu_harness_env={"CUDA_VISIBLE_DEVICES": ""},
    cpu_install=("# PyTorch's CPU build: PyPI's torch is the multi-GB CUDA one, of no use without a GPU.",
                 f"{{pip}} --index-url {CPU_INDEX} {{packages}}"),
    prepare=prepare,
    peak_device_bytes=peak_device_bytes,
    timing_events=timing_events,
    elapsed_ms=elapsed_ms,
)
