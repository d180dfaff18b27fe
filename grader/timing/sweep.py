"""A sweep's timings (`grader time --sweep`: every sweep case of each kernel) as the points of a figure against one
case parameter: `density` by default, or what [timing] `sweep_parameter` names (flash-attention-cpu: N); a matmul
pack's (tiled-matmul) as points with their flops and tile too."""

from __future__ import annotations

from grader.report.density import CPU, DENSITY, GPU, DensityPoint
from grader.report.matmul_sweep import MatmulPoint
from grader.spec import Assignment, Case
from grader.targets import target_of
from grader.timing.results import KernelTiming, SubmissionTiming



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


def density_points(timing: SubmissionTiming, assignment: Assignment) -> list[DensityPoint]:
    """`sweep_points` against `density` (the sparse packs' sweep)."""
    return sweep_points(timing, assignment, DENSITY)
