"""The sweep page of [timing] sweep_page = "density" (the default): each timed case as a point against the swept
parameter (density; an assignment's sweep_parameter, N), on the assignment's device, with each call's peak extra memory where
it was counted; drawn by `grader.report.density`, its memory's growth by `grader.report.scaling`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.report import density, scaling
from grader.report.swept import CPU, DENSITY, GPU, DensityPoint
from grader.assignment import Assignment
from grader.sweeps import SweepNote
from grader.targets import target_of
from grader.timing.results import SubmissionTiming
from grader.timing.spec import TimingSpec
from grader.timing.sweep import parameter_of


def sweep_points(timing: SubmissionTiming, assignment: Assignment, parameter: str = DENSITY) -> list[DensityPoint]:
    """The timed cases of a sweep that have a speed and a positive `parameter`, as points (CPU or GPU: the assignment's
    target), each with its peak extra memory where it was counted."""
    device = GPU if target_of(assignment).needs_gpu else CPU
    points = []
    for timed in timing.kernels:
        value = parameter_of(timed, assignment, parameter)
        if timed.median_us is not None and value is not None:
            points.append(DensityPoint(device, timed.base, timed.case, value, timed.median_us,
                                       timed.peak_extra_bytes))
    return points


def memory_notes(timing: SubmissionTiming, assignment: Assignment, spec: TimingSpec) -> list[SweepNote]:
    """The kernels' memory, where it was counted: each fitted exponent (a size sweep's), each flag."""
    parameter = spec.sweep_parameter
    notes = []
    for growth in scaling.memory_growths(sweep_points(timing, assignment, parameter),
                                         dict(spec.memory_exponent_limit), fit=parameter != DENSITY):
        if growth.exponent is not None:
            notes.append(SweepNote(scaling.growth_words(growth, parameter)))
        if growth.flagged:
            notes.append(SweepNote(scaling.flag_words(growth, parameter), flagged=True))
    return notes


@dataclass(frozen=True)
class DensityPage:
    name: str = "density"
    template: str = density.TEMPLATE
    template_folder: Path | None = None
    takes_others: bool = True  # the CPU assignment's sweep and its GPU assignment's, on one figure

    def points(self, timing: SubmissionTiming, assignment: Assignment, parameter: str) -> list[DensityPoint]:
        return sweep_points(timing, assignment, parameter)

    def notes(self, timing: SubmissionTiming, assignment: Assignment, spec: TimingSpec) -> list[SweepNote]:
        return memory_notes(timing, assignment, spec)

    def context(self, points: Sequence[DensityPoint], title: str, spec: TimingSpec,
                award_words: Sequence[str]) -> dict[str, Any]:
        return density.context(points, title, spec.sweep_parameter, dict(spec.memory_exponent_limit), award_words)

    def written(self, parameter: str) -> str:
        return f"runtime against {parameter} (HTML)"


PAGE = DensityPage()
