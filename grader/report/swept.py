"""The points the sweep pages draw (`grader.report.density`, `grader.report.matmul_sweep`): one kernel timed on one
case of a sweep, as plain data. A sweep page's plug-in (`grader.sweeps`) makes them from a sweep's timings; the
reports only read them, so that they need nothing of the timing (tests/test_report_boundary.py)."""

from __future__ import annotations

from dataclasses import dataclass

CPU, GPU = "CPU", "GPU"
DENSITY = "density"  # the case parameter a sweep's x axis reads unless the assignment names another


@dataclass(frozen=True)
class DensityPoint:
    """One kernel timed on one case: where it runs, what it computes, the case's density (or the swept parameter's
    value), the median time and the most heap memory a call held beyond its arguments (None: not counted)."""

    device: str  # CPU or GPU: where the assignment's kernels run
    operation: str  # the base kernel ("spmv")
    case: str
    density: float
    median_us: float
    peak_extra_bytes: int | None = None


@dataclass(frozen=True)
class MatmulPoint:
    """One kernel timed on one case: its size (the swept parameter's value), its tile (None: the kernel takes
    none), the case's flops (2 M N K: a multiply and an add per product) and the median time."""

    kernel: str  # the base kernel ("tiled")
    case: str
    size: float
    tile: int | None
    flops: int
    median_us: float

    @property
    def gflops(self) -> float:
        return self.flops / (self.median_us * 1e3)

    @property
    def series(self) -> str:
        """The line it is drawn on: the kernel's, or the kernel's at its tile."""
        return self.kernel if self.tile is None else f"{self.kernel} (tile {self.tile})"
