"""The class dashboard: one folder of self-contained HTML pages built from the store's latest results.

`index.html` holds the score histogram, per-kernel score distributions and pass rates, a late-days
chart, every failure grouped by kernel and case, the students with nothing graded, and the table
of students; where competition results are given (`grader time --competition`), the competition's
leaderboard, ranked by the geometric mean of tokens/s. No page has a script: the table sorts
because each column header links to the same page rendered in that column's order
(`by-<column>.html`), and the browser's own find finds a student. Each student's report and
history (every stored result, regrades included) are written beside it, under `students/`.
"""

from __future__ import annotations

import collections
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from grader.report import html
from grader.report.gradebook import RubricItem
from grader.report.render import environment
from grader.results import Result
from grader.status import KernelStatus, Outcome, SubmissionStatus


class CompetitionRun(Protocol):
    """One run of a competition entry, as the board reads it."""

    @property
    def name(self) -> str: ...

    @property
    def tokens_per_s(self) -> float | None: ...


class CompetitionEntry(Protocol):
    """A submission's competition result (`grader.competition.results.CompetitionResult`), as the board reads it: a
    report reads results, not the competition's code (tests/test_report_boundary.py)."""

    @property
    def student(self) -> str: ...

    @property
    def entered(self) -> bool: ...

    @property
    def geomean_tokens_per_s(self) -> float | None: ...

    @property
    def folder(self) -> str: ...

    @property
    def device(self) -> str: ...

    @property
    def words(self) -> str: ...

    @property
    def runs(self) -> Sequence[CompetitionRun]: ...

SIMILARITY_PAGE = "similarity.html"  # linked where `grader similarity` wrote it beside the dashboard
BINS = 10  # score histogram: tenths of the maximum
PERCENT_DIGITS = 6  # a share is binned as a percentage rounded to this: 2.4/3 is 80%, not 79.999...


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    numeric: bool


def student_file(result: Result) -> str:
    """The student's report's file name, safe on every file system."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", result.student or "anonymous").strip("._") or "anonymous"
    return f"students/{name}.html"


def history_file(student: str) -> str:
    """The student's history page: every result stored for them, regrades included."""
    return student_file(_Named(student)).removesuffix(".html") + "-history.html"


@dataclass(frozen=True)
class _Named:
    student: str


@dataclass(frozen=True)
class WrittenPart:
    """The written part of a class, as the dashboard shows it: the rubric's items, the TA's imported scores by
    student, and each student's collected report (its file name and bytes)."""

    rubric: tuple[RubricItem, ...] = ()
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    reports: dict[str, tuple[str, bytes]] = field(default_factory=dict)


def written_file(student: str, name: str) -> str:
    """Where the dashboard keeps a student's written report: beside their pages, under its own name."""
    return student_file(_Named(student)).removesuffix(".html") + "-written/" + Path(name).name


def write(results: list[Result], assignment: str, out_dir: Path,
          history: list[tuple[int | None, Result]] | None = None,
          competition: tuple[CompetitionEntry, ...] = (), part: WrittenPart | None = None) -> list[Path]:
    """Render the dashboard, every student's report and history page into out_dir; returns the pages written.

    `history`: every stored result with its run's id, oldest first (Store.history_with_runs);
    without it each student's history is their latest result alone. `competition`: the class's competition
    results, shown as the competition's leaderboard. `part`: the written part (rubric scores, reports).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    part = part or WrittenPart()
    for student, (name, content) in part.reports.items():  # linked from the roster, never rendered: kept as bytes
        path = out_dir / written_file(student, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    written = []
    for result in results:
        if result.status.was_graded:
            path = out_dir / student_file(result)
            html.write(result, path)
            written.append(path)
    env = environment(autoescape=True)
    by_student: dict[str, list[tuple[int | None, Result]]] = collections.defaultdict(list)
    for run, result in history if history is not None else [(None, r) for r in results]:
        by_student[result.student or result.submission.path].append((run, result))
    page_template = env.get_template("student_history.html.j2")
    for result in results:
        student = result.student or result.submission.path
        path = out_dir / history_file(student)
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = list(reversed(by_student.get(student, [(None, result)])))  # newest first
        path.write_text(page_template.render(student=student, assignment=assignment, title=result.title,
                                             entries=entries, latest=result,
                                             report=Path(student_file(result)).name
                                             if result.status.was_graded else None), encoding="utf-8")
        written.append(path)
    summary = summarise(results, assignment, part)
    if (out_dir / SIMILARITY_PAGE).is_file():  # `grader similarity --out` wrote it here: the instructor's page
        summary["similarity"] = SIMILARITY_PAGE
    summary["competition"] = competition_board(competition, {r.student or r.submission.path for r in results})
    template = env.get_template("dashboard.html.j2")
    for column in summary["columns"]:
        page = out_dir / page_name(column.key)
        rows = sorted(summary["rows"], key=lambda row: _sort_key(row, column))
        page.write_text(template.render(summary, rows=rows, sorted_by=column.key, page_name=page_name,
                                        history_link=history_file),
                        encoding="utf-8")
        written.append(page)
    return written


def page_name(key: str) -> str:
    return "index.html" if key == "student" else f"by-{key}.html"


def summarise(results: list[Result], assignment: str, part: WrittenPart | None = None) -> dict:
    """Every figure the dashboard shows, computed from the results (and the written part's scores) alone."""
    part = part or WrittenPart()
    graded = [r for r in results if r.status.was_graded]
    kernels: list[str] = []
    for result in graded:
        kernels += [k.name for k in result.kernels if k.name not in kernels]
    max_score = max((r.max_score for r in results), default=0.0)
    histogram = [0] * BINS
    for result in graded:
        histogram[score_bin(result.score, result.max_score)] += 1
    pass_rates = []
    for name in kernels:
        entries = [k for r in graded for k in r.kernels if k.name == name]
        statuses = collections.Counter(k.status for k in entries)
        pass_rates.append({"kernel": name, "passed": statuses[KernelStatus.PASSED], "total": len(entries),
                           "rate": statuses[KernelStatus.PASSED] / len(entries) if entries else 0.0,
                           "statuses": dict(sorted(statuses.items()))})
    failures: collections.Counter = collections.Counter()
    example: dict = {}
    for result in graded:
        for kernel in result.kernels:
            if kernel.status is not KernelStatus.PASSED:
                # Which cases fail tells bugs apart that one masked message merges ("N of N elements ...").
                failing = ", ".join(c.name for c in kernel.cases if not c.passed and c.status.ran)
                key = (kernel.name, failing, kernel.status, failure_pattern(kernel))
                failures[key] += 1
                example.setdefault(key, [])
                example[key].append(result.student or "?")
    # Per kernel: how its scores spread (tenths of its maximum), graded submissions only.
    distributions = []
    for name in kernels:
        bins = [0] * BINS
        for kernel in (k for r in graded for k in r.kernels if k.name == name):
            bins[score_bin(kernel.score, kernel.max_score)] += 1
        distributions.append({"kernel": name, "bins": bins})
    for item in part.rubric if part.scores else ():  # the TA's scores, binned the same way, once imported
        bins = [0] * BINS
        for given in part.scores.values():
            if item.name in given:
                bins[score_bin(given[item.name], item.points)] += 1
        distributions.append({"kernel": f"{item.name} (rubric, {item.points:g} points)", "bins": bins})
    late_counts = collections.Counter(math.ceil(r.late.days_late) if r.late else 0
                                      for r in results if r.status.was_graded)
    late_days = [(days, late_counts.get(days, 0)) for days in range(0, max(late_counts, default=0) + 1)]
    not_submitted = [{"student": r.student or r.submission.path, "message": r.message, "status": r.status}
                     for r in results if not r.status.was_graded]
    statuses = collections.Counter(r.status for r in results)
    # Students by their one-word outcome: the same words, counted the same way, as the batch summary's.
    outcomes = collections.Counter(r.outcome for r in results)
    status_counts = [("graded", statuses[SubmissionStatus.GRADED]),
                     ("not submitted", statuses[SubmissionStatus.NOT_SUBMITTED]),
                     ("fetch failed", statuses[SubmissionStatus.FETCH_FAILED]),
                     ("grader error", statuses[SubmissionStatus.ERROR]),
                     ("late", sum(1 for r in results if r.late and r.late.days_late > 0)),
                     ("compile errors", outcomes[Outcome.COMPILE_ERROR]), ("crashed", outcomes[Outcome.CRASHED]),
                     ("timeouts", outcomes[Outcome.TIMEOUT])]
    shown_rubric = part.rubric if part.scores else ()  # the columns appear with the first imported sheet
    rows = [_row(r, kernels, part) for r in results]
    asks_report = any(r.written is not None for r in results) or bool(part.reports)
    scores = sorted(r.score for r in graded)
    columns = [Column("student", "student", False), Column("status", "status", False),
               Column("score", "score", True), *(Column(f"kernel-{n}", n, True) for n in kernels),
               *(Column(f"rubric-{item.name}", item.name, True) for item in shown_rubric),
               *([Column("written", "written report", False)] if asks_report else []),
               Column("late", "late days", True), Column("commit", "commit", False)]
    return {
        "assignment": assignment, "title": next((r.title for r in results), assignment),
        "results": results, "kernels": kernels, "max_score": max_score, "histogram": histogram,
        "bin_labels": [f"{100 * i // BINS}–{100 * (i + 1) // BINS}%" for i in range(BINS)],
        "pass_rates": pass_rates, "status_counts": status_counts, "rows": rows, "columns": columns,
        "failures": [{"kernel": k, "case": c, "status": s, "message": m, "count": n, "students": example[(k, c, s, m)]}
                     for (k, c, s, m), n in failures.most_common()],
        "failures_by_kernel": [(name, [{"case": c, "status": s, "message": m, "count": n,
                                        "students": sorted(example[(k, c, s, m)])}
                                       for (k, c, s, m), n in failures.most_common() if k == name])
                               for name in kernels],
        "distributions": distributions, "late_days": late_days, "not_submitted": not_submitted,
        "rubric": shown_rubric, "asks_report": asks_report, "similarity": None,
        "mean": sum(scores) / len(scores) if scores else None,
        "median": (scores[len(scores) // 2] if len(scores) % 2 else (scores[len(scores) // 2 - 1] + scores[len(scores) // 2]) / 2)
        if scores else None,
        "graded_at": max((r.graded_at for r in results), default=""),
    }


def competition_board(entries: tuple[CompetitionEntry, ...], students: set[str] = frozenset()) -> dict | None:
    """The competition's leaderboard: entered submissions by their geometric mean of tokens/s (highest first,
    ranked), then those the gate or a failure left out, by name; None without any competition result.

    students: those with a history page (a competitor's name links to it where it is one of them).
    """
    if not entries:
        return None
    latest = {e.student: e for e in entries}  # a student's later file replaces an earlier one
    runs = list(dict.fromkeys(r.name for e in latest.values() for r in e.runs))
    ranked = sorted((e for e in latest.values() if e.entered), key=lambda e: (-(e.geomean_tokens_per_s or 0.0),
                                                                               e.student))
    out = sorted((e for e in latest.values() if not e.entered), key=lambda e: e.student)
    rows = [{"rank": index + 1 if entry.entered else None, "student": entry.student, "entered": entry.entered,
             "geomean": entry.geomean_tokens_per_s, "folder": entry.folder, "device": entry.device,
             "runs": {r.name: r.tokens_per_s for r in entry.runs},
             "why": "" if entry.entered else entry.words,
             "history": history_file(entry.student) if entry.student in students else None}
            for index, entry in enumerate([*ranked, *out])]
    return {"runs": runs, "rows": rows, "entered": len(ranked), "total": len(rows)}


def score_bin(score: float, max_score: float) -> int:
    """The histogram bin of a score: its share of the maximum in tenths, the last one holding full marks.

    The share is rounded as a percentage first, so that a score whose float quotient falls just below
    a bin's edge (2.4 / 3 = 0.7999999999999999) lands in the bin its percentage names (80–90%).
    """
    percent = round(100 * score / max_score, PERCENT_DIGITS) if max_score else 0.0
    return max(0, min(BINS - 1, int(percent * BINS // 100)))


def failure_pattern(kernel) -> str:
    """A failure message with its figures masked, so that one bug in many submissions counts once."""
    if kernel.status is KernelStatus.COMPILE_ERROR:
        lines = [line for line in kernel.message.splitlines() if "error" in line]
        text = lines[0] if lines else kernel.message
        text = re.sub(r"^\S*?([^/\s]+:\d+:\d+:)", r"\1", text)  # drop the student's own path
    else:
        failed = next((c for c in kernel.cases if not c.passed and c.status.ran), None)
        text = failed.message if failed else kernel.message
    # Keep what the figures say about the bug (every element wrong, or some) before masking them.
    text = re.sub(r"\b([\d,]+) of ([\d,]+) (?=elements?\b)",
                  lambda m: "all " if m.group(1) == m.group(2) else "some of the ", text)
    text = re.sub(r"\[[\d, ]+\]", "[…]", text)
    text = re.sub(r"(?<![A-Za-z_])[-+]?\d[\d,]*(\.\d+)?(e[-+]?\d+)?", "N", text)
    return text.strip()[:240]


def _row(result: Result, kernels: list[str], part: WrittenPart) -> dict:
    scored = {k.name: k for k in result.kernels}
    student = result.student or result.submission.path
    given = part.scores.get(student, {})
    report = part.reports.get(student)
    missing = result.written.message if result.written is not None and not result.written.collected else ""
    return {
        "rubric": {item.name: given.get(item.name) for item in part.rubric},
        "written": written_file(student, report[0]) if report else None,
        "written_name": Path(report[0]).name if report else "", "written_missing": missing,
        "student": result.student or result.submission.path, "status": result.status, "score": result.score,
        "max_score": result.max_score, "late": result.late.days_late if result.late else 0.0,
        "penalty": result.late.points_deducted if result.late else 0.0,
        "commit": (result.submission.commit or "")[:10],
        "kernels": {n: scored.get(n) for n in kernels},
        "link": student_file(result) if result.status.was_graded else None,
        "history": history_file(result.student or result.submission.path),
        "message": result.message,
    }


def _sort_key(row: dict, column: Column):
    if column.key.startswith("kernel-"):
        kernel = row["kernels"].get(column.key[len("kernel-"):])
        return (-(kernel.score if kernel else -1), row["student"])
    if column.key.startswith("rubric-"):
        given = row["rubric"].get(column.key[len("rubric-"):])
        return (-(given if given is not None else -1), row["student"])
    if column.key == "written":
        return (row["written"] is not None, row["student"])  # the missing first: those a TA must chase
    if column.key == "score":
        return (-row["score"], row["student"])
    if column.key == "late":
        return (-row["late"], row["student"])
    return (str(row[column.key]), row["student"])
