"""A sweep's timings (`grader time --sweep`: every sweep case of each kernel) as the points of a figure against one
case parameter: `density` by default, or what [timing] `sweep_parameter` names (flash-attention-cpu: N); a matmul
pack's (tiled-matmul) as points with their flops and tile too.

Timing makes the points; a sweep page (`grader.sweep_pages`, drawn by `grader.report`) reads them: the point types
live here, so that the arrow goes one way."""

from __future__ import annotations

from dataclasses import dataclass

from grader.spec import Assignment, Case
from grader.targets import target_of
from grader.timing.results import KernelTiming, SubmissionTiming

CPU, GPU = "CPU", "GPU"
DENSITY = "density"  # the case parameter a sweep's x axis reads unless the pack names another


@dataclass(frozen=True)
class DensityPoint:
    """One kernel timed on one case: where it runs, what it computes, the case's density (or the swept parameter's
    value), the median time and the most heap memory a call held beyond its arguments (None: not counted)."""

    device: str  # CPU or GPU: where the pack's kernels run
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


def sweep_points(timing: SubmissionTiming, assignment: Assignment, parameter: str = DENSITY) -> list[DensityPoint]:
    """The timed cases of a sweep that have a speed and a positive `parameter`, as points (CPU or GPU: the pack's
    target), each with its peak extra memory where it was counted."""
    device = GPU if target_of(assignment).needs_gpu else CPU
    points = []
    for timed in timing.kernels:
        value = parameter_of(timed, assignment, parameter)
        if timed.median_us is not None and value is not None:
            points.append(DensityPoint(device, timed.base, timed.case, value, timed.median_us,
                                       timed.peak_extra_bytes))
    return points


def matmul_points(timing: SubmissionTiming, assignment: Assignment, parameter: str) -> list[MatmulPoint]:
    """The timed cases with a speed (above 0), a positive `parameter` and integer M, N and K, as points: by kernel
    in the spec's order, then tile and size."""
    points = []
    for timed in timing.kernels:
        case, size = case_of(timed, assignment), parameter_of(timed, assignment, parameter)
        if not timed.median_us or case is None or size is None:
            continue
        m, n, k = (case.params.get(name) for name in ("M", "N", "K"))
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (m, n, k)):
            continue
        tile = case.params.get("tile")
        points.append(MatmulPoint(timed.base, timed.case, size, tile if isinstance(tile, int) else None,
                                  2 * m * n * k, timed.median_us))
    order = list(dict.fromkeys(t.base for t in timing.kernels))  # the spec's: naive, tiled, cublas
    return sorted(points, key=lambda p: (order.index(p.kernel), p.tile or 0, p.size))


def case_of(timed: KernelTiming, assignment: Assignment) -> Case | None:
    """The case (graded or sweep) a timing was taken on; None where the spec no longer has it."""
    kernel = assignment.kernel(timed.kernel)
    return next((c for c in kernel.cases + kernel.sweep_cases if c.name == timed.case), None)


def parameter_of(timed: KernelTiming, assignment: Assignment, parameter: str) -> float | None:
    """The timed case's value of `parameter` where it is a positive number (None: the case has none)."""
    case = case_of(timed, assignment)
    value = case.params.get(parameter) if case is not None else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None
