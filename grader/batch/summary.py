"""The class at a glance: one outcome word per submission, counted as the dashboard counts them,
the mean score of the graded, and the slowest grades.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from grader.report.render import later_commit_words
from grader.results import Result
from grader.status import Outcome

OUTCOMES: tuple[Outcome, ...] = tuple(Outcome)
SLOWEST = 5  # grades named at the end of a batch


def outcome(result: Result) -> Outcome:
    """One word per submission for counts: passed, failed, compile_error, crashed, timeout, not_submitted, error."""
    return result.outcome


@dataclass(frozen=True)
class ClassSummary:
    assignment: str
    students: int
    counts: dict[Outcome, int]  # every outcome, zeros included
    rejected: int  # roster rows that could not be read
    max_score: float
    mean_score: float | None  # of the graded; None where nobody was
    slowest: tuple[tuple[str, float], ...]  # (student, seconds) of the slowest grades
    later: tuple[tuple[str, str], ...] = ()  # (student, words) for each newer commit left ungraded after the deadline
    # (student, words) for each graded commit whose written report was not collected (missing, a link, too large)
    unwritten: tuple[tuple[str, str], ...] = ()


def summarise(results: Iterable[Result], assignment: str, max_score: float, rejected: int = 0) -> ClassSummary:
    """The summary of a class's latest results."""
    results = list(results)
    counts = {o: 0 for o in OUTCOMES}
    for result in results:
        counts[outcome(result)] += 1
    graded = [r for r in results if r.status.was_graded]
    mean = sum(r.score for r in graded) / len(graded) if graded else None
    slowest = sorted(graded, key=_seconds, reverse=True)[:SLOWEST]
    later = tuple((r.student or r.submission.path, later_commit_words(r)) for r in results if r.submission.later)
    unwritten = tuple((r.student or r.submission.path, r.written.message) for r in graded
                      if r.written is not None and not r.written.collected)
    return ClassSummary(assignment, len(results), counts, rejected, max_score, mean,
                        tuple((r.student or r.submission.path, _seconds(r)) for r in slowest), later, unwritten)


def _seconds(result: Result) -> float:
    return result.stages.get("total", 0.0)
