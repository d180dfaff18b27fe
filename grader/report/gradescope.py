"""Gradescope: `results.json` to the autograder specification.

One Gradescope test per kernel × case. Public cases are visible; hidden cases are visible only after
the due date ("after_due_date"), so their names, scores and messages don't leak before it. The
top-level output speaks of public cases only, for the same reason.

The autograder zip whose run_autograder writes it is an export of its own (grader.export.gradescope_zip).
"""

from __future__ import annotations

from dataclasses import dataclass

from grader.report.credit import credit_lines
from grader.report.evidence import variant_evidence
from grader.report.hints import case_hints, kernel_hints
from grader.results import KernelResult, Result
from grader.status import KernelStatus, Outcome

PUBLIC, HIDDEN = "visible", "after_due_date"
MICRO = 1_000_000  # results.json's points are exact to a millionth: per-case points are counted in these


@dataclass(frozen=True)
class SpeedUp:
    """The leaderboard value of a submission's speed-up table (`grader time`), as its caller read it there."""

    measure: str  # the spec's [timing] leaderboard: "geomean_speedup_vs_reference" or "geomean_speedup_vs_m1"
    value: float  # a geometric mean of speed-ups: higher is better
    kernels: int  # the rows it is the geometric mean of


@dataclass(frozen=True)
class RubricScore:
    """One rubric item of the written part and the TA's score of it (None: not scored yet), as the caller read them."""

    name: str
    points: float
    earns: str
    score: float | None


@dataclass(frozen=True)
class Competition:
    """A submission's competition entry (`grader time --competition`), as its caller read it there."""

    value: float | None  # the geometric mean of the runs' tokens/s: higher is better; None: not entered
    runs: tuple[tuple[str, float | None], ...]  # each run's name and tokens/s
    words: str  # the entry in a line, or why there is none


def results_json(result: Result, notes: tuple[str, ...] = (), speed: SpeedUp | None = None,
                 competition: Competition | None = None,
                 rubric: tuple[RubricScore, ...] = ()) -> dict:
    """The whole results.json object for one graded submission.

    notes: lines for staff and students alike, above the summary (how the autograder graded it).
    speed: the leaderboard value of the submission's speed-up table (`grader time`), the measure the
    spec's [timing] names: it leads Gradescope's `leaderboard`, after the competition's. competition: the
    submission's competition result: its geometric mean of tokens/s leads the leaderboard, its runs after it;
    one gated out has no entry, and says why above the summary. rubric: the written part's items, each with the
    TA's score (`grader rubric import`), a test of its own counted in the score; an item not scored yet is said
    above the summary and counts nothing (never a zero the TA did not give).
    """
    if competition is not None:
        notes = (*notes, f"Competition: {competition.words}")
    tests = [test for kernel in result.kernels for test in _kernel_tests(kernel)]
    if result.late and result.late.points_deducted:
        tests.append({"name": "late penalty", "score": -result.late.points_deducted, "max_score": 0.0,
                      "status": "failed", "output": f"{result.late.days_late:g} days late (deadline "
                      f"{result.late.deadline}): −{result.late.points_deducted:g} points", "output_format": "text",
                      "tags": ["late"], "visibility": PUBLIC})
    scored = [item for item in rubric if item.score is not None]
    tests += [{"name": f"written part: {item.name}", "score": item.score, "max_score": item.points, "status":
               "passed" if item.score >= item.points else "failed", "output": f"scored by a TA: {item.earns}",
               "output_format": "text", "tags": ["rubric"], "visibility": PUBLIC} for item in scored]
    if unscored := [item.name for item in rubric if item.score is None]:
        notes = (*notes, f"Written part not scored yet: {', '.join(unscored)} (a TA scores it; it counts then).")
    document = {
        "score": round(result.score + sum(item.score or 0.0 for item in scored), 6),
        "execution_time": max(0, round(result.stages.get("total", 0.0))),
        "output": "\n\n".join([*notes, _summary(result)]),
        "output_format": "md",
        "visibility": "visible",
        "stdout_visibility": "hidden",  # the grader's log is for staff
        "tests": tests,
        # For staff: where it was graded (the sandbox run_autograder fell back to, if it did; the Python).
        "extra_data": {"sandbox": result.environment.sandbox,
                       "sandbox_enforced": list(result.environment.sandbox_enforced),
                       "python": result.environment.python, "grader_version": result.environment.grader_version},
    }
    leaderboard = _competition_entries(competition) + _speed_entry(speed) + _leaderboard(result)
    if leaderboard:
        document["leaderboard"] = leaderboard
    return document


def failure_json(message: str, notes: tuple[str, ...] = ()) -> dict:
    """results.json when the grader could not grade at all (missing files, a broken upload): 0 with why."""
    return {"score": 0.0, "execution_time": 0, "output": "\n\n".join([*notes, message]), "output_format": "text",
            "visibility": "visible", "stdout_visibility": "hidden", "tests": []}


def _kernel_tests(kernel: KernelResult) -> list[dict]:
    maxima, scores = _case_points(kernel)
    first_failed = next((c for c in kernel.cases if not c.passed), None)
    tests = []
    for index, case in enumerate(kernel.cases):
        lines = [case.message]
        if kernel.status is KernelStatus.COMPILE_ERROR and index == 0:
            lines = ["compile error:", kernel.message]
        elif kernel.status.stopped_harness and case.passed:
            lines.append(f"(scores 0: {kernel.message})")
        findings = getattr(kernel, "sanitizer", None) or []
        if findings and index == 0:
            lines += ["compute-sanitizer findings:", *findings]
        hints = case_hints(case) + (kernel_hints(kernel) if case is first_failed else [])
        lines += [f"Hint: {hint}" for hint in hints]
        tests.append({
            "name": f"{kernel.name} / {case.name}",
            "number": f"{kernel.name}.{index + 1}",
            "score": scores[index] / MICRO,
            "max_score": maxima[index] / MICRO,
            "status": "passed" if case.passed else "failed",
            "output": "\n".join(lines),
            "output_format": "text",
            "tags": [kernel.name, "public" if case.public else "hidden", case.status],
            "visibility": PUBLIC if case.public else HIDDEN,
        })
    return tests


def _case_points(kernel: KernelResult) -> tuple[list[int], list[int]]:
    """Each case's maximum and score in millionths of a point: they add up to the kernel's, none above its maximum.

    The maximum is the weight shared equally, its rounding remainder on the last passed case (so
    that 2 of 3 passed can hold the kernel's 0.666667); points earned are spread over the passed
    cases alike (a crash, all-or-nothing credit or a deduction lowers every passed case), what does
    not divide going to the last of them that has room.
    """
    count = len(kernel.cases)
    if not count:
        return [], []
    total = round(kernel.max_score * MICRO)
    passed = [i for i, case in enumerate(kernel.cases) if case.passed]
    maxima = [total // count] * count
    maxima[passed[-1] if passed else -1] += total - sum(maxima)
    scores = [0] * count
    if not passed:
        return maxima, scores
    earned = min(max(round(kernel.score * MICRO), 0), sum(maxima[i] for i in passed))
    for i in passed:
        scores[i] = min(earned // len(passed), maxima[i])
    rest = earned - sum(scores)
    for i in reversed(passed):
        extra = min(rest, maxima[i] - scores[i])
        scores[i] += extra
        rest -= extra
    return maxima, scores


def _summary(result: Result) -> str:
    lines = [f"**{result.title}**", ""]
    if not result.status.was_graded:  # nothing graded: its outcome word and why, as the batch summary says it
        lines.append(f"Not graded ({str(result.outcome).replace('_', ' ')}): {result.message}")
    for kernel in result.kernels:
        public = [c for c in kernel.cases if c.public]
        passed = sum(c.passed for c in public)
        status = "compile error" if kernel.status is KernelStatus.COMPILE_ERROR \
            else f"{passed}/{len(public)} public cases passed"
        lines.append(f"- `{kernel.name}` ({kernel.max_score:g} point{'' if kernel.max_score == 1 else 's'}): {status}")
    for variant in result.variants:
        # What a student can act on before the due date: a missing or unchanged folder, the evidence.
        # Not the variant's score or message: those count hidden cases.
        said = [f"`{variant.folder}/` is not in the submission"] if variant.status is Outcome.NOT_SUBMITTED else []
        if variant.changes_nothing and variant.status is not Outcome.NOT_SUBMITTED:
            said.append(f"changes none of {', '.join(variant.must_change)}")
        said += variant_evidence(variant)
        lines.append(f"- variant `{variant.name}`, {variant.title} ({variant.max_score:g} points, graded on every "
                     f"kernel): " + ("; ".join(said) or "its folder was laid over the base"))
    hidden = any(not c.public for k in result.kernels for c in k.cases)
    if not hidden and (credit := credit_lines(result)):  # they add up scores, which count hidden cases
        lines += ["", *credit]
    if hidden:
        lines += ["", "Hidden cases are graded too; their results appear after the due date."]
    if result.late and result.late.days_late:
        lines += ["", f"Submitted {result.late.days_late:g} days late: −{result.late.points_deducted:g} points."]
    return "\n".join(lines)


def _speed_entry(speed: SpeedUp | None) -> list[dict]:
    """The spec's leaderboard value (a geometric mean of speed-ups: higher is better), where one was measured."""
    if speed is None:
        return []
    measure = {"geomean_speedup_vs_m1": "speed-up vs your kernels/",
               "geomean_speedup_vs_reference": "speed-up vs the reference"}.get(speed.measure, speed.measure)
    kernels = f"{speed.kernels} kernel{'' if speed.kernels == 1 else 's'}"
    return [{"name": f"{measure} (geometric mean of {kernels})", "value": speed.value, "order": "desc"}]


def _competition_entries(competition: Competition | None) -> list[dict]:
    """The geometric mean of tokens/s, then each run's, where the submission is entered (passed the gate)."""
    if competition is None or competition.value is None:
        return []
    runs = f"{len(competition.runs)} run{'' if len(competition.runs) == 1 else 's'}"
    return [{"name": f"GPT-2 generation tokens/s (geometric mean of {runs})", "value": round(competition.value, 2),
             "order": "desc"},
            *({"name": f"tokens/s {name}", "value": round(value, 2), "order": "desc"}
              for name, value in competition.runs if value is not None)]


def _leaderboard(result: Result) -> list[dict]:
    board = []
    for kernel in result.kernels:
        timed = [c for c in kernel.cases if c.passed and (c.device_ms or c.wall_ms) is not None]
        if kernel.status is KernelStatus.PASSED and timed:
            largest = max(timed, key=lambda c: c.elements or 0)
            value = largest.device_ms if largest.device_ms is not None else largest.wall_ms
            board.append({"name": f"{kernel.name} ms ({largest.name})", "value": round(value, 4), "order": "asc"})
    return board
