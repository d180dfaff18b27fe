"""Sweep pages: what `grader time --sweep --sweep-html FILE` draws of a sweep, one plug-in each behind one
interface, registered by name (an assignment's [timing] `sweep_page`; the core names none).

A page's plug-in declares its points (made from a sweep's timings), the lines the command prints of them, its
template and what the template is given; `render_page` renders it. It sits above both halves it joins: it reads
the timing (`grader.timing`) and hands plain points to a report module (`grader.report`), which reads nothing
else; neither of those imports the other.

    density.py   [timing] sweep_page = "density" (the default): runtime against the swept parameter, a line per
                 device and kernel, the GPU's speed-up and its crossover, the kernels' memory and its growth
                 (drawn by grader.report.density and grader.report.scaling)
    matmul.py    "matmul": GFLOP/s against the size per kernel and tile, time against the tile, the sweet spot
                 and the share of the vendor library's GFLOP/s (drawn by grader.report.matmul_sweep)

A page from outside the grader (a course's own) is one module holding it as `PAGE`, registered by
`register_sweep_page(name, module)` before the command runs; its template sits in its `template_folder`.

This module stays light: the [timing] loader imports it to check an assignment's page name.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from grader.assignment import Assignment
    from grader.timing.results import SubmissionTiming
    from grader.timing.spec import TimingSpec

# Page name (an assignment's [timing] sweep_page) -> the module that holds it as `PAGE`.
_MODULES = {"density": "grader.sweeps.density", "matmul": "grader.sweeps.matmul"}


@dataclass(frozen=True)
class SweepNote:
    """A line `grader time --sweep` prints of a sweep (a kernel's memory growth, a sweet spot); flagged: a finding
    against the assignment's limits (a kernel whose memory grows faster than allowed)."""

    words: str
    flagged: bool = False


class SweepPage(Protocol):
    """A sweep drawn as one self-contained HTML page."""

    name: str  # an assignment's [timing] sweep_page
    template: str  # its Jinja template's file name
    template_folder: Path | None  # where the template is (None: the report's own templates)
    takes_others: bool  # other assignments' sweeps (`--with`) may be drawn beside this one (a CPU assignment's and its GPU's)

    def points(self, timing: SubmissionTiming, assignment: Assignment, parameter: str) -> list[Any]:
        """The sweep's timings as the page's points, against the swept case parameter."""
        ...

    def notes(self, timing: SubmissionTiming, assignment: Assignment, spec: TimingSpec) -> list[SweepNote]:
        """What the command prints of this sweep beside its table."""
        ...

    def context(self, points: Sequence[Any], title: str, spec: TimingSpec,
                award_words: Sequence[str]) -> dict[str, Any]:
        """What the template is given: from the points (this sweep's and any others'), the page's title, the assignment's
        [timing] table and its speed-up points in words."""
        ...

    def written(self, parameter: str) -> str:
        """What the page shows, for the line that says where it was written ("runtime against N (HTML)")."""
        ...


def sweep_page_names() -> tuple[str, ...]:
    """The pages an assignment may name: the grader's and those registered."""
    return tuple(_MODULES)


def sweep_page_named(name: str) -> SweepPage:
    """The page registered under `name` (an assignment's [timing] sweep_page)."""
    if name not in _MODULES:
        raise ValueError(f"unknown sweep page {name!r} (have {', '.join(sweep_page_names())})")
    return importlib.import_module(_MODULES[name]).PAGE


def register_sweep_page(name: str, module: str) -> None:
    """Make `name` a page assignments may name: `module` (importable) holds it as `PAGE`."""
    if name in _MODULES and _MODULES[name] != module:
        raise ValueError(f"sweep page {name!r} is {_MODULES[name]}'s already")
    _MODULES[name] = module


def render_page(page: SweepPage, points: Sequence[Any], title: str, spec: TimingSpec,
                award_words: Sequence[str] = ()) -> str:
    """The page as HTML: its template (from its own folder where it names one) given its context, with the filters
    and the style every report has."""
    import jinja2

    from grader.report.render import environment

    env = environment(autoescape=True)
    if page.template_folder is not None:
        env = env.overlay(loader=jinja2.ChoiceLoader([jinja2.FileSystemLoader(page.template_folder), env.loader]))
    return env.get_template(page.template).render(page.context(points, title, spec, award_words))
