"""The speed-up table: each kernel's median per variant, against the student's milestone-1 kernels and the reference,
with the spec's tiers and its leaderboard value; rendered for the terminal (rich) and as Markdown."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from grader.errors import GraderError

from grader.boundary.timing_statistics import geometric_mean
from grader.timing.results import KernelTiming, SubmissionTiming
from grader.timing.spec import TimingSpec

BASE = "kernels/"  # the base kernels' row label: the student's milestone-1 folder


@dataclass(frozen=True)
class SpeedupRow:
    """One kernel of one variant (None: the base kernels): its median and its speed-ups (> 1: faster)."""

    variant: str | None
    kernel: str  # the base kernel's name
    case: str
    status: str  # the timing's status ("timed", "wrong", ...)
    median_us: float | None
    rse: float | None
    m1_us: float | None  # the student's own base kernel
    reference_us: float | None  # the reference's kernel of the same variant
    vs_m1: float | None
    vs_reference: float | None
    tier: str | None
    note: str  # why there is no speed, or what the protocol flagged


@dataclass(frozen=True)
class SpeedupTable:
    """Every row, variant by variant, and the leaderboard's value (None where nothing was timed)."""

    rows: tuple[SpeedupRow, ...]
    leaderboard: str  # its measure's name, "" for none
    leaderboard_value: float | None
    leaderboard_rows: int  # the rows it is the geometric mean of

    def variants(self) -> list[str | None]:
        return list(dict.fromkeys(r.variant for r in self.rows))

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [asdict(r) for r in self.rows], "leaderboard": self.leaderboard,
                "leaderboard_value": self.leaderboard_value, "leaderboard_rows": self.leaderboard_rows}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpeedupTable:
        """A table as `to_dict` wrote it (the "table" of `grader time`'s JSON)."""
        return cls(tuple(SpeedupRow(**row) for row in data["rows"]), data["leaderboard"], data["leaderboard_value"],
                   data["leaderboard_rows"])


def read_table(path: Path) -> SpeedupTable:
    """The speed-up table in a JSON file `grader time` wrote (for Gradescope's leaderboard)."""
    try:
        return SpeedupTable.from_dict(json.loads(path.read_text())["table"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GraderError(f"{path}: not a timing file written by `grader time` ({type(error).__name__}: "
                          f"{error})") from None


def speedup_table(student: SubmissionTiming, reference: SubmissionTiming | None, timing: TimingSpec) -> SpeedupTable:
    """The table of the student's timings, against their own base kernels and (where timed) the reference's."""
    measure = "vs_m1" if timing.leaderboard == "geomean_speedup_vs_m1" else "vs_reference"
    rows = []
    for timed in student.kernels:
        m1 = student.of(None, timed.base)
        theirs = reference.of(timed.variant, timed.base) if reference is not None else None
        median = timed.median_us
        m1_us = m1.median_us if m1 is not None else None
        reference_us = theirs.median_us if theirs is not None else None
        speedups = {"vs_m1": _ratio(m1_us, median), "vs_reference": _ratio(reference_us, median)}
        rows.append(SpeedupRow(timed.variant, timed.base, timed.case, timed.status.value, median,
                               timed.summary.rse if timed.summary else None, m1_us, reference_us, speedups["vs_m1"],
                               speedups["vs_reference"], timing.tier_of(speedups[measure]), _note(timed, theirs)))
    # The leaderboard ranks the optimizations where the assignment has them (the base against itself is 1).
    ranked = [r for r in rows if r.variant is not None] or rows
    values = [getattr(r, measure) for r in ranked if getattr(r, measure) is not None]
    value = geometric_mean(values) if timing.leaderboard else None
    return SpeedupTable(tuple(rows), timing.leaderboard, round(value, 4) if value is not None else None,
                        len(values) if timing.leaderboard else 0)


def clocks_summary(kernels: tuple[KernelTiming, ...]) -> str:
    """The SM clocks NVML read around the timed calls, over every kernel, in a line (MHz)."""
    seen = [c["sm_mhz"] for k in kernels for c in (k.clocks_before, k.clocks_after) if c.get("sm_mhz")]
    top = next((k.clocks_after["sm_max_mhz"] for k in kernels if k.clocks_after.get("sm_max_mhz")), None)
    applied = next((k.clocks_after["sm_app_mhz"] for k in kernels if k.clocks_after.get("sm_app_mhz")), None)
    if not seen:
        notes = sorted({str(k.timer["nvml"]) for k in kernels if k.timer.get("nvml") not in (None, "ok")})
        return f"SM clocks: not read ({'; '.join(notes) or 'no NVML on this device'})"
    return (f"SM clocks around the timed calls: {min(seen)}–{max(seen)} MHz (the GPU's maximum {top} MHz, "
            f"application clock {applied} MHz)")


def _ratio(slower: float | None, faster: float | None) -> float | None:
    return slower / faster if slower is not None and faster else None


def _note(timed: KernelTiming, reference: KernelTiming | None) -> str:
    notes = [timed.message] if timed.message else []
    if timed.side_streams:
        notes.append(f"the wall clock saw {timed.gap_median_us:.0f} µs the CUDA events did not (work on a "
                     "non-blocking stream?): the median is the events'")
    if timed.status.has_speed and timed.stopped_by == "cap":
        notes.append(f"stopped by the time cap at ±{100 * timed.summary.rse:.1f}% (noisy)" if timed.summary else "")
    if reference is not None and not reference.status.has_speed:
        notes.append(f"the reference's timing: {reference.message or reference.status.value}")
    return "; ".join(n for n in notes if n)


def _figure(value: float | None, unit: str = "", digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f}{unit}"


def _label(variant: str | None) -> str:
    return BASE if variant is None else variant


def markdown(table: SpeedupTable, title: str = "") -> str:
    """The table as Markdown: one section per variant."""
    lines = [f"## {title}", ""] if title else []
    for variant in table.variants():
        lines += [f"### {_label(variant)}", "",
                  "| kernel | case | median µs | RSE | vs kernels/ | vs reference | tier | note |",
                  "|---|---|---:|---:|---:|---:|---|---|"]
        for row in (r for r in table.rows if r.variant == variant):
            lines.append(f"| {row.kernel} | {row.case} | {_figure(row.median_us, digits=1)} | "
                         f"{_figure(100 * row.rse if row.rse is not None else None, '%', 1)} | "
                         f"{_figure(row.vs_m1, '×')} | {_figure(row.vs_reference, '×')} | {row.tier or ''} | "
                         f"{row.note.replace('|', '/')} |")
        lines.append("")
    if table.leaderboard:
        lines.append(f"Leaderboard ({table.leaderboard}, over {table.leaderboard_rows} kernels): "
                     f"{_figure(table.leaderboard_value, '×', 3)}")
    return "\n".join(lines)


def render(table: SpeedupTable, console: Any, title: str = "") -> None:
    """The table in the terminal (rich): one table per variant, then the leaderboard's value."""
    from rich.table import Table

    for variant in table.variants():
        shown = Table(title=f"{title} {_label(variant)}".strip(), title_justify="left")
        for column, justify in (("kernel", "left"), ("case", "left"), ("median µs", "right"), ("RSE", "right"),
                                ("vs kernels/", "right"), ("vs reference", "right"), ("tier", "left"),
                                ("note", "left")):
            shown.add_column(column, justify=justify, overflow="fold")
        for row in (r for r in table.rows if r.variant == variant):
            shown.add_row(row.kernel, row.case, _figure(row.median_us, digits=1),
                          _figure(100 * row.rse if row.rse is not None else None, "%", 1), _figure(row.vs_m1, "×"),
                          _figure(row.vs_reference, "×"), row.tier or "", row.note)
        console.print(shown)
    if table.leaderboard:
        console.print(f"leaderboard ({table.leaderboard}, over {table.leaderboard_rows} kernels): "
                      f"{_figure(table.leaderboard_value, '×', 3)}", highlight=False)
