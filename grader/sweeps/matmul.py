"""The sweep page of [timing] sweep_page = "matmul" (tiled-matmul): each timed case with integer M, N and K as a
point with its flops and its tile, against the swept parameter (the size); drawn by `grader.report.matmul_sweep`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.report import matmul_sweep
from grader.report.swept import MatmulPoint
from grader.assignment import Assignment
from grader.sweeps import SweepNote
from grader.sweeps.density import memory_notes
from grader.timing.results import SubmissionTiming
from grader.timing.spec import TimingSpec
from grader.timing.sweep import case_of, parameter_of


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


@dataclass(frozen=True)
class MatmulPage:
    name: str = "matmul"
    template: str = matmul_sweep.TEMPLATE
    template_folder: Path | None = None
    takes_others: bool = False  # one assignment's kernels against its own baseline

    def points(self, timing: SubmissionTiming, assignment: Assignment, parameter: str) -> list[MatmulPoint]:
        return matmul_points(timing, assignment, parameter)

    def notes(self, timing: SubmissionTiming, assignment: Assignment, spec: TimingSpec) -> list[SweepNote]:
        parameter = spec.sweep_parameter
        points = matmul_points(timing, assignment, parameter)
        words = (matmul_sweep.sweet_spot_words(matmul_sweep.sweet_spots(points), parameter)
                 + matmul_sweep.share_words(matmul_sweep.shares(points), parameter))
        # The memory of kernels whose calls' memory was counted (CPU ones) first, as every sweep prints it.
        return memory_notes(timing, assignment, spec) + [SweepNote(line) for line in words]

    def context(self, points: Sequence[MatmulPoint], title: str, spec: TimingSpec,
                award_words: Sequence[str]) -> dict[str, Any]:
        return matmul_sweep.context(points, title, spec.sweep_parameter, award_words)

    def written(self, parameter: str) -> str:
        return f"GFLOP/s against {parameter} and the tile (HTML)"


PAGE = MatmulPage()
