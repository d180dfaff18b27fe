"""Sweep pages: what `grader time --sweep --sweep-html FILE` draws of a sweep, one plug-in each behind one
interface, registered by name (a pack's [timing] `sweep_page`; the core names none).

A page declares its points (made from a sweep's timings by `grader.timing.sweep`), the lines the command prints of
them, its template and what the template is given; `grader.report.render.sweep_page_html` renders it.

    density   grader.report.density       runtime against the swept parameter, a line per device and kernel: the
                                          GPU's speed-up and its crossover, the kernels' memory and its growth
    matmul    grader.report.matmul_sweep  GFLOP/s against the size per kernel and tile, time against the tile, the
                                          sweet spot and the share of cuBLAS's GFLOP/s

A page from outside the grader (a course's own) is one module holding it as `PAGE`, registered by
`register_sweep_page(name, module)` before the command runs; its template sits in its `template_folder`.

This module stays light: the [timing] loader imports it to check a pack's page name.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from grader.spec import Assignment
    from grader.timing.results import SubmissionTiming
    from grader.timing.spec import TimingSpec

# Page name (a pack's [timing] sweep_page) -> the module that holds it as `PAGE`.
_MODULES = {"density": "grader.report.density", "matmul": "grader.report.matmul_sweep"}


@dataclass(frozen=True)
class SweepNote:
    """A line `grader time --sweep` prints of a sweep (a kernel's memory growth, a sweet spot); flagged: a finding
    against the pack's limits (a kernel whose memory grows faster than allowed)."""

    words: str
    flagged: bool = False


class SweepPage(Protocol):
    """A sweep drawn as one self-contained HTML page."""

    name: str  # a pack's [timing] sweep_page
    template: str  # its Jinja template's file name
    template_folder: Path | None  # where the template is (None: the report's own templates)
    takes_others: bool  # other packs' sweeps (`--with`) may be drawn beside this one (a CPU pack's and its GPU's)

    def points(self, timing: SubmissionTiming, assignment: Assignment, parameter: str) -> list[Any]:
        """The sweep's timings as the page's points, against the swept case parameter."""
        ...

    def notes(self, timing: SubmissionTiming, assignment: Assignment, spec: TimingSpec) -> list[SweepNote]:
        """What the command prints of this sweep beside its table."""
        ...

    def context(self, points: Sequence[Any], title: str, spec: TimingSpec, award_words: Sequence[str]) -> dict[str, Any]:
        """What the template is given: from the points (this sweep's and any others'), the page's title, the pack's
        [timing] table and its speed-up points in words."""
        ...

    def written(self, parameter: str) -> str:
        """What the page shows, for the line that says where it was written ("runtime against N (HTML)")."""
        ...


def sweep_page_names() -> tuple[str, ...]:
    """The pages a pack may name, the grader's and those registered."""
    return tuple(_MODULES)


def sweep_page_named(name: str) -> SweepPage:
    """The page registered under `name` (a pack's [timing] sweep_page)."""
    if name not in _MODULES:
        raise ValueError(f"unknown sweep page {name!r} (have {', '.join(sweep_page_names())})")
    return importlib.import_module(_MODULES[name]).PAGE


def register_sweep_page(name: str, module: str) -> None:
    """Make `name` a page packs may name: `module` (importable) holds it as `PAGE`."""
    if name in _MODULES and _MODULES[name] != module:
        raise ValueError(f"sweep page {name!r} is {_MODULES[name]}'s already")
    _MODULES[name] = module
