"""The gradebook CSV an LMS imports: one row per student, the total first, then the breakdown.

Columns: student_id, total, max_score, one `<kernel>` column per kernel, one `<variant>` column per
optimization variant (its total, which its kernels' columns make up), late_days, late_penalty,
raw_score, status (the submission's outcome word, as the batch summary and the dashboard count it:
passed, failed, compile_error, crashed, timeout, not_submitted, fetch_failed, error, not_run), commit,
graded_at. Where no score is known (fetch_failed, error, not_run) the score cells are empty, never 0: an LMS
import would record a 0 as the student's. Plain UTF-8, comma-separated, a header row, numbers without
units: the shape Canvas, Moodle and Blackboard imports take (map student_id to the LMS's id column).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from grader.results import Result


def columns(results: list[Result]) -> list[str]:
    kernels: list[str] = []
    variants: list[str] = []
    for result in results:
        kernels += [k.name for k in result.kernels if k.name not in kernels]
        variants += [v.name for v in result.variants if v.name not in variants]
    return ["student_id", "total", "max_score", *kernels, *variants, "late_days", "late_penalty", "raw_score", "status",
            "commit", "graded_at"]


def render(results: list[Result]) -> str:
    header = columns(results)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    for result in results:
        row = {"student_id": result.student or result.submission.path, "total": _points(result.score),
               "max_score": _points(result.max_score),
               "late_days": _points(result.late.days_late) if result.late else 0,
               "late_penalty": _points(result.late.points_deducted) if result.late else 0,
               "raw_score": _points(result.raw_score if result.raw_score is not None else result.score),
               "status": result.outcome, "commit": result.submission.commit or "", "graded_at": result.graded_at}
        scored = {k.name: _points(k.score) for k in result.kernels}
        scored.update({v.name: _points(v.score) for v in result.variants})
        row.update({name: scored.get(name, 0) for name in header if name not in row})
        if not result.outcome.scored:
            row.update({name: "" for name in header if name not in ("student_id", "max_score", "status", "commit",
                                                                    "graded_at")})
        writer.writerow(row)
    return out.getvalue()


def write(results: list[Result], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results), encoding="utf-8")


def _points(value: float) -> str:
    return f"{round(value, 4):g}"
