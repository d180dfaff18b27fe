"""A sweep's timings (`grader time --sweep`: every case of each kernel) as the points of runtime against density."""

from __future__ import annotations

from grader.report.density import CPU, GPU, DensityPoint
from grader.spec import Assignment
from grader.targets import target_of
from grader.timing.results import SubmissionTiming

DENSITY = "density"  # the case parameter the x axis reads


def density_points(timing: SubmissionTiming, assignment: Assignment) -> list[DensityPoint]:
    """The timed cases of a sweep that have a speed and a density, as points (CPU or GPU: the pack's target)."""
    device = GPU if target_of(assignment).needs_gpu else CPU
    points = []
    for timed in timing.kernels:
        case = next((c for c in assignment.kernel(timed.kernel).cases if c.name == timed.case), None)
        density = case.params.get(DENSITY) if case is not None else None
        if timed.median_us is not None and isinstance(density, (int, float)) and density > 0:
            points.append(DensityPoint(device, timed.base, timed.case, float(density), timed.median_us))
    return points
