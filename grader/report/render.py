"""The Jinja2 environment the HTML, Markdown and dashboard templates share, and the figures they show."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import jinja2

from grader.report.hints import case_hints, kernel_hints
from grader.results import CaseResult, KernelResult, Result
from grader.status import CaseStatus, KernelStatus, SubmissionStatus


@functools.cache
def environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("grader.report", "templates"), autoescape=autoescape,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    env.filters.update(num=number, ms=milliseconds, md=markdown_cell, sizes=sizes)
    # Templates compare statuses with the enums' members, never with spelled-out strings.
    env.globals.update(KernelStatus=KernelStatus, CaseStatus=CaseStatus, SubmissionStatus=SubmissionStatus)
    return env


def number(value: float | None, digits: int = 3) -> str:
    """A figure for people: 3 significant digits, '–' where nothing was measured."""
    if value is None:
        return "–"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}g}"


def milliseconds(case: CaseResult) -> str:
    if case.device_ms is not None:
        return f"{case.device_ms:.3g} ms (device)"
    return f"{case.wall_ms:.3g} ms" if case.wall_ms is not None else "–"


def sizes(case: CaseResult) -> str:
    """The case's parameters as the spec names them: "N=37, d=24"."""
    return ", ".join(f"{k}={v}" for k, v in (case.params or {}).items())


def markdown_cell(text: object) -> str:
    """Text safe inside a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


@dataclass(frozen=True)
class KernelView:
    kernel: KernelResult
    hints: list[str]
    failed_cases: list[tuple[CaseResult, list[str]]]

    @property
    def sanitizer(self) -> list[str]:
        """compute-sanitizer's findings on this kernel, where it ran."""
        return list(getattr(self.kernel, "sanitizer", None) or [])

    @property
    def slowest(self) -> str:
        measured = [c for c in self.kernel.cases if c.device_ms is not None or c.wall_ms is not None]
        return milliseconds(max(measured, key=lambda c: c.device_ms or c.wall_ms or 0)) if measured else "–"


def kernel_views(result: Result) -> list[KernelView]:
    return [KernelView(k, kernel_hints(k), [(c, case_hints(c)) for c in k.cases if not c.passed])
            for k in result.kernels]


def context(result: Result) -> dict:
    """What the per-submission templates read."""
    raw = result.raw_score if result.raw_score is not None else result.score
    return {"r": result, "kernels": kernel_views(result), "raw_score": raw,
            "percent": 100 * result.score / result.max_score if result.max_score else 0.0,
            "scope": "public cases only" if result.public_only else "all cases",
            "hidden_cases": sum(not c.public for k in result.kernels for c in k.cases)}
