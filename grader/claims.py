"""A study's claims against measurement: the figures the student's results file states (their times, memory,
speed-ups, sweet spot), each beside what `grader time --sweep` measured of the same submission on the runner.

The assignment declares the figures ([assignment.claims], grader.assignment.claims) and the file: a CSV with the
columns `figure`, `case` and `value`, one row per claim. The whole file is read before anything is said, and each
row that cannot be read is named by its line. A claim more than `off_by` (2x by default) from the measurement,
either way, is flagged; a sweet spot is flagged where the case claimed runs more than 10% slower than the fastest.
What the runner did not time, or the student did not state, is said, never scored.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from grader.assignment.model import ClaimedFigure, ClaimKind, ClaimsPart
from grader.status import ClaimStatus
from grader.timing.results import KernelTiming, SubmissionTiming
from grader.written import find_file

MAX_BYTES = 1 << 20  # a results file is a few rows
COLUMNS = ("figure", "case", "value")
TIE = 1.10  # a sweet spot within 10% of the fastest case's time is the fastest, as far as timing can tell
UNITS = {ClaimKind.TIME: "ms", ClaimKind.MEMORY: "MiB", ClaimKind.SPEEDUP: "x"}  # report/claims.py: the same


@dataclass(frozen=True)
class ClaimCheck:
    """One claim (a figure at a case; a sweet spot: the figure once) and the runner's measurement of it."""

    figure: str
    kind: ClaimKind
    case: str  # "" for a sweet spot, which is one claim among its cases
    status: ClaimStatus
    words: str
    claimed: float | str | None = None
    measured: float | str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind.value, "status": self.status.value}


@dataclass(frozen=True)
class ClaimsReport:
    """What `grader claims` found: the results file, the rows it could not read, each claim's check."""

    assignment: str
    submission: str
    file: str | None  # the results file read, relative to the repository (None: none)
    message: str  # why none was read ("" where one was)
    problems: tuple[str, ...]  # "results.csv line 4: ...": rows left out
    checks: tuple[ClaimCheck, ...]
    off_by: float

    @property
    def flagged(self) -> list[ClaimCheck]:
        return [c for c in self.checks if c.status is ClaimStatus.FLAGGED]

    def to_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k != "checks"},
                "checks": [c.to_dict() for c in self.checks]}


def read_claims(part: ClaimsPart, root: Path) -> tuple[str | None, str, dict[tuple[str, str], float | str],
                                                         list[str]]:
    """The checkout's results file: (its path or None, why none, the claims by (figure, case), the rows left out
    with why). A sweet spot's claim is keyed by (figure, "") and its value is a case's name."""
    found = find_file(part.file, root, MAX_BYTES, "results file")
    if not found.collected or found.file is None:
        return None, found.message, {}, []
    name = found.file
    try:
        text = (root / name).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        return name, f"{name} cannot be read as UTF-8 text ({error})", {}, []
    rows = csv.reader(io.StringIO(text))
    header = [h.strip().lower() for h in next(rows, [])]
    if any(c not in header for c in COLUMNS):
        return name, f"{name}: the first line must name the columns {', '.join(COLUMNS)}, found {header}", {}, []
    at = {c: header.index(c) for c in COLUMNS}
    figures = {f.name: f for f in part.figures}
    claims: dict[tuple[str, str], float | str] = {}
    problems: list[str] = []
    for line, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row):
            continue
        cells = {c: (row[i].strip() if i < len(row) else "") for c, i in at.items()}
        where = f"{name} line {line}"
        figure = figures.get(cells["figure"])
        if figure is None:
            problems.append(f"{where}: no figure {cells['figure']!r}; the assignment asks for "
                            f"{', '.join(sorted(figures))}")
            continue
        if figure.kind is ClaimKind.FASTEST:
            key, value = (figure.name, ""), cells["value"]
            if value not in figure.cases:
                problems.append(f"{where}: {figure.name}'s value is the case that runs fastest, one of "
                                f"{', '.join(figure.cases)}; found {value!r}")
                continue
        else:
            key = (figure.name, cells["case"])
            if cells["case"] not in figure.cases:
                problems.append(f"{where}: {figure.name} is stated at the cases {', '.join(figure.cases)}; found "
                                f"{cells['case']!r}")
                continue
            try:
                value = float(cells["value"])
            except ValueError:
                value = float("nan")
            if not value > 0 or value == float("inf"):
                problems.append(f"{where}: {figure.name}'s value is a positive number "
                                f"({UNITS[figure.kind]}), found {cells['value']!r}")
                continue
        if key in claims:
            problems.append(f"{where}: {figure.name}{f' at {key[1]}' if key[1] else ''} is stated twice; the "
                            "first is kept")
            continue
        claims[key] = value
    return name, "", claims, problems


def cases_to_time(part: ClaimsPart, claims: dict[tuple[str, str], float | str]) -> dict[str, tuple[str, ...]]:
    """The cases the student's claims name, by kernel, and their baselines' (another assignment's are timed there):
    what `grader claims` times; a figure not claimed is not timed."""
    cases: dict[str, tuple[str, ...]] = {}
    for figure in part.figures:
        claimed = tuple(c for c in figure.cases if (figure.name, c) in claims or (figure.name, "") in claims)
        cases[figure.kernel] = tuple(dict.fromkeys(cases.get(figure.kernel, ()) + claimed))
        if figure.baseline and not figure.baseline_assignment:
            cases[figure.baseline] = tuple(dict.fromkeys(cases.get(figure.baseline, ()) + tuple(
                figure.baseline_case(c) for c in claimed)))
    return {kernel: named for kernel, named in cases.items() if named}


def measurements(timings: list[SubmissionTiming]) -> dict[tuple[str, str, str], KernelTiming]:
    """Each timing by (assignment, kernel, case); a later sweep's replaces an earlier one's."""
    return {(t.assignment, k.kernel, k.case): k for t in timings for k in t.kernels}


def check_claims(part: ClaimsPart, assignment: str, claims: dict[tuple[str, str], float | str],
                 measured: dict[tuple[str, str, str], KernelTiming]) -> list[ClaimCheck]:
    """Each figure's claims against the measurements, in the assignment's order."""
    checks: list[ClaimCheck] = []
    for figure in part.figures:
        if figure.kind is ClaimKind.FASTEST:
            checks.append(_fastest(figure, assignment, claims.get((figure.name, "")), measured))
            continue
        for case in figure.cases:
            value, why = _measure(figure, assignment, case, measured)
            claimed = claims.get((figure.name, case))
            checks.append(_compare(figure, case, claimed, value, why, part.off_by))
    return checks


def _time_ms(measured: dict[tuple[str, str, str], KernelTiming], key: tuple[str, str, str]) -> tuple[float | None,
                                                                                                     str]:
    timed = measured.get(key)
    if timed is None:
        return None, f"the runner did not time {key[1]} at {key[2]} (of {key[0]})"
    if timed.median_us is None:
        return None, f"{key[1]} at {key[2]} has no time: {timed.message or timed.status.value}"
    return timed.median_us / 1000, ""


def _measure(figure: ClaimedFigure, assignment: str, case: str,
             measured: dict[tuple[str, str, str], KernelTiming]) -> tuple[float | None, str]:
    """The runner's figure at `case`, or None and why there is none."""
    key = (assignment, figure.kernel, case)
    if figure.kind is ClaimKind.TIME:
        return _time_ms(measured, key)
    if figure.kind is ClaimKind.MEMORY:
        timed = measured.get(key)
        if timed is None or timed.peak_extra_bytes is None:
            return None, (f"the runner counted no memory of {figure.kernel} at {case}" +
                          (" (memory is counted for CPU kernels)" if timed is not None else ""))
        return timed.peak_extra_bytes / 2**20, ""
    ours, why = _time_ms(measured, key)
    theirs, why_base = _time_ms(measured, (figure.baseline_assignment or assignment, figure.baseline or "",
                                           figure.baseline_case(case)))
    if ours is None or theirs is None:
        return None, why or why_base
    return theirs / ours, ""


def _compare(figure: ClaimedFigure, case: str, claimed: float | str | None, measured: float | None, why: str,
             off_by: float) -> ClaimCheck:
    unit = UNITS[figure.kind]
    what = _what(figure, case)
    if claimed is None:
        said = f"; the runner measured {_amount(measured, unit)}" if measured is not None else ""
        return ClaimCheck(figure.name, figure.kind, case, ClaimStatus.NOT_CLAIMED,
                          f"your results file does not state {what}{said}", None, measured)
    assert isinstance(claimed, float)
    if measured is None:
        return ClaimCheck(figure.name, figure.kind, case, ClaimStatus.NOT_MEASURED,
                          f"you state {_amount(claimed, unit)} for {what}; not checked: {why}", claimed, None)
    ratio = claimed / measured
    if 1 / off_by <= ratio <= off_by:
        return ClaimCheck(figure.name, figure.kind, case, ClaimStatus.AGREES,
                          f"you state {_amount(claimed, unit)} for {what}; the runner measured "
                          f"{_amount(measured, unit)}, within {off_by:g}x", claimed, measured)
    direction = f"{ratio:.1f}x more" if ratio > 1 else f"{1 / ratio:.1f}x less"
    return ClaimCheck(figure.name, figure.kind, case, ClaimStatus.FLAGGED,
                      f"you state {_amount(claimed, unit)} for {what}; the runner measured {_amount(measured, unit)}: "
                      f"your figure is {direction}, more than {off_by:g}x off", claimed, measured)


def _fastest(figure: ClaimedFigure, assignment: str, claimed: float | str | None,
             measured: dict[tuple[str, str, str], KernelTiming]) -> ClaimCheck:
    times = {case: _time_ms(measured, (assignment, figure.kernel, case)) for case in figure.cases}
    missing = [why for t, why in times.values() if t is None]
    what = f"the case {figure.kernel} runs fastest at, among {', '.join(figure.cases)}"
    best = None if missing else min(figure.cases, key=lambda c: times[c][0] or 0.0)
    if claimed is None:
        said = f"; the runner measured {best}" if best else ""
        return ClaimCheck(figure.name, figure.kind, "", ClaimStatus.NOT_CLAIMED,
                          f"your results file does not state {what}{said}", None, best)
    if best is None:
        return ClaimCheck(figure.name, figure.kind, "", ClaimStatus.NOT_MEASURED,
                          f"you state {claimed} as {what}; not checked: {missing[0]}", claimed, None)
    fastest_ms, claimed_ms = times[best][0] or 0.0, times[str(claimed)][0] or 0.0
    if claimed_ms <= TIE * fastest_ms:
        return ClaimCheck(figure.name, figure.kind, "", ClaimStatus.AGREES,
                          f"you state {claimed} as {what}; the runner measured {claimed_ms:.4g} ms there"
                          + ("" if claimed == best else f", within 10% of {best}'s {fastest_ms:.4g} ms"),
                          claimed, best)
    return ClaimCheck(figure.name, figure.kind, "", ClaimStatus.FLAGGED,
                      f"you state {claimed} as {what}; the runner measured {best} fastest ({fastest_ms:.4g} ms), and "
                      f"{claimed} {claimed_ms / fastest_ms:.1f}x slower ({claimed_ms:.4g} ms)", claimed, best)


def _what(figure: ClaimedFigure, case: str) -> str:
    if figure.kind is ClaimKind.SPEEDUP:
        over = f"{figure.baseline}" + (f" of {figure.baseline_assignment}" if figure.baseline_assignment else "")
        return f"the speed-up of {figure.kernel} over {over} at {case}"
    noun = "time per call" if figure.kind is ClaimKind.TIME else "peak extra memory"
    return f"{figure.kernel}'s {noun} at {case}"


def _amount(value: float | None, unit: str) -> str:
    if value is None:
        return "nothing"
    return f"{value:.3g}x" if unit == "x" else f"{value:.4g} {unit}"
