"""One submission's report as one self-contained HTML file: inline CSS and SVG, no scripts, no network."""

from __future__ import annotations

from pathlib import Path

from grader.report.curves import figures_by_kernel
from grader.report.render import context, environment
from grader.results import Result


def render(result: Result) -> str:
    return environment(autoescape=True).get_template("report.html.j2").render(
        {**context(result), "figures": figures_by_kernel(result)})


def write(result: Result, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(result), encoding="utf-8")
