"""The gradebook CSV an LMS imports: one row per student, the total first, then the breakdown.

Columns: student_id, total, max_score, one `<kernel>` column per kernel, one `<variant>` column per
optimization variant (its total, which its kernels' columns make up), late_days, late_penalty,
raw_score, status (the submission's outcome word, as the batch summary and the dashboard count it:
passed, failed, compile_error, crashed, timeout, not_submitted, fetch_failed, error, not_run), commit,
graded_at. Where the assignment has rubric items ([[assignment.written.rubric]]) they follow the variants as
`rubric_<item>` columns, once a TA's sheet is imported (`grader rubric import`; a student it has no row for: empty), and
`total` and `max_score` count them, `autograded` keeping the grader's own score. Where no score is known (fetch_failed, error, not_run) the score cells are empty, never 0: an LMS
import would record a 0 as the student's. Plain UTF-8, comma-separated, a header row, numbers without
units: the shape Canvas, Moodle and Blackboard imports take (map student_id to the LMS's id column).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from typing import Protocol

from grader.results import Result

RUBRIC_PREFIX = "rubric_"  # a rubric item's column: rubric_explanation


class RubricItem(Protocol):
    """What a report reads of a rubric item ([[assignment.written.rubric]], grader.assignment.model.RubricItem)."""

    @property
    def name(self) -> str: ...

    @property
    def points(self) -> float: ...


def columns(results: list[Result], rubric: tuple[RubricItem, ...] = ()) -> list[str]:
    kernels: list[str] = []
    variants: list[str] = []
    for result in results:
        kernels += [k.name for k in result.kernels if k.name not in kernels]
        variants += [v.name for v in result.variants if v.name not in variants]
    marked = [f"{RUBRIC_PREFIX}{item.name}" for item in rubric] + (["autograded"] if rubric else [])
    return ["student_id", "total", "max_score", *kernels, *variants, *marked, "late_days", "late_penalty", "raw_score",
            "status", "commit", "graded_at"]


def render(results: list[Result], rubric: tuple[RubricItem, ...] = (),
           rubric_scores: dict[str, dict[str, float]] | None = None) -> str:
    """The CSV; `rubric`: the assignment's items, `rubric_scores` the TA's imported scores by student."""
    rubric = rubric if rubric_scores else ()  # no column before a TA's sheet is imported: no empty total
    header = columns(results, rubric)
    rubric_points = sum(item.points for item in rubric)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    for result in results:
        given = (rubric_scores or {}).get(result.student or "", {})
        row = {"student_id": result.student or result.submission.path,
               "total": _points(result.score + sum(given.values())),
               "max_score": _points(result.max_score + rubric_points),
               "late_days": _points(result.late.days_late) if result.late else 0,
               "late_penalty": _points(result.late.points_deducted) if result.late else 0,
               "raw_score": _points(result.raw_score if result.raw_score is not None else result.score),
               "status": result.outcome, "commit": result.submission.commit or "", "graded_at": result.graded_at}
        if rubric:
            row["autograded"] = _points(result.score)
            row.update({f"{RUBRIC_PREFIX}{item.name}": _points(given[item.name]) if item.name in given else ""
                        for item in rubric})
        scored = {k.name: _points(k.score) for k in result.kernels}
        scored.update({v.name: _points(v.score) for v in result.variants})
        row.update({name: scored.get(name, 0) for name in header if name not in row})
        if not result.outcome.scored:
            row.update({name: "" for name in header if name not in ("student_id", "max_score", "status", "commit",
                                                                    "graded_at") and not name.startswith(RUBRIC_PREFIX)})
        writer.writerow(row)
    return out.getvalue()


def write(results: list[Result], path: Path, rubric: tuple[RubricItem, ...] = (),
          rubric_scores: dict[str, dict[str, float]] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results, rubric, rubric_scores), encoding="utf-8")


def _points(value: float) -> str:
    return f"{round(value, 4):g}"
