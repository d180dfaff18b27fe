"""A sweep's timings (`grader time --sweep`: every sweep case of each kernel) as the points of a figure against one
case parameter: `density` by default, or what [timing] `sweep_parameter` names (flash-attention-cpu: N)."""

from __future__ import annotations

from grader.report.density import CPU, GPU, DensityPoint
from grader.spec import Assignment
from grader.targets import target_of
from grader.timing.results import SubmissionTiming

DENSITY = "density"  # the case parameter the x axis reads unless the pack names another


def sweep_points(timing: SubmissionTiming, assignment: Assignment, parameter: str = DENSITY) -> list[DensityPoint]:
    """The timed cases of a sweep that have a speed and a positive `parameter`, as points (CPU or GPU: the pack's
    target), each with its peak extra memory where it was counted."""
    device = GPU if target_of(assignment).needs_gpu else CPU
    points = []
    for timed in timing.kernels:
        kernel = assignment.kernel(timed.kernel)
        case = next((c for c in kernel.cases + kernel.sweep_cases if c.name == timed.case), None)
        value = case.params.get(parameter) if case is not None else None
        if timed.median_us is not None and isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            points.append(DensityPoint(device, timed.base, timed.case, float(value), timed.median_us,
                                       timed.peak_extra_bytes))
    return points


def density_points(timing: SubmissionTiming, assignment: Assignment) -> list[DensityPoint]:
    """`sweep_points` against `density` (the sparse packs' sweep)."""
    return sweep_points(timing, assignment, DENSITY)
