"""A case's reported outputs as a figure in the HTML report: where a case keeps the values of two outputs (the
spec's `report = true`, `CaseResult.reported`), the second is drawn against the first, each axis named after its
buffer (contextual-sparsity's held-out accuracy against k/width), with gold's curve beside it where the result kept
gold's values (`CaseResult.reported_gold`). matplotlib's SVG, inlined; no figure where matplotlib is not installed
(the report's tables still hold the case)."""

from __future__ import annotations

from dataclasses import dataclass

from grader.report.figures import pyplot_or_none, svg_text
from grader.results import CaseResult, KernelResult, Result


@dataclass(frozen=True)
class Curve:
    """One case's second reported output against its first: the points where both are finite."""

    kernel: str
    case: str
    x_name: str
    y_name: str
    points: tuple[tuple[float, float], ...]
    passed: bool
    gold_points: tuple[tuple[float, float], ...] = ()  # the same outputs from gold (none in results made before)


def _points(reported: dict[str, list[float | None]], x_name: str, y_name: str) -> tuple[tuple[float, float], ...]:
    xs, ys = reported.get(x_name, []), reported.get(y_name, [])
    if len(xs) != len(ys):
        return ()
    return tuple(sorted((x, y) for x, y in zip(xs, ys) if x is not None and y is not None))


def curve_of(kernel: KernelResult, case: CaseResult) -> Curve | None:
    """The case's curve, where it reports exactly two outputs of one length; else None."""
    if len(case.reported) != 2:
        return None
    x_name, y_name = case.reported
    if len(case.reported[x_name]) != len(case.reported[y_name]):
        return None
    return Curve(kernel.name, case.name, x_name, y_name, _points(case.reported, x_name, y_name), case.passed,
                 _points(case.reported_gold, x_name, y_name))


def curves_of(result: Result) -> list[Curve]:
    return [c for k in result.kernels for case in k.cases if (c := curve_of(k, case)) is not None]


def figure_svg(curve: Curve) -> str | None:
    """The curve as SVG text (log2 x axis where every x is positive: k/width halves); None without matplotlib."""
    pyplot = pyplot_or_none()
    if pyplot is None or not curve.points:
        return None
    figure, axes = pyplot.subplots(figsize=(6, 3.6))
    try:
        if curve.gold_points:  # under the student's: where they match, theirs covers it
            axes.plot([x for x, _ in curve.gold_points], [y for _, y in curve.gold_points], "s-", color="0.6",
                      linewidth=3, markersize=7, label="gold (the reference)")
        axes.plot([x for x, _ in curve.points], [y for _, y in curve.points], "o-" if curve.passed else "x--",
                  color="tab:blue" if curve.passed else "tab:red", label="this submission")
        if curve.gold_points:
            axes.legend(fontsize=8)
        if all(x > 0 for x, _ in curve.points + curve.gold_points):
            axes.set_xscale("log", base=2)
        axes.set_xlabel(curve.x_name.replace("_", " "))
        axes.set_ylabel(curve.y_name.replace("_", " "))
        verdict = "matches gold" if curve.passed else "differs from gold"
        axes.set_title(f"{curve.kernel}, case {curve.case} ({verdict})", fontsize=10)
        axes.grid(True, alpha=0.3)
        figure.tight_layout()
    except BaseException:
        pyplot.close(figure)
        raise
    return svg_text(figure, pyplot)


def figures_by_kernel(result: Result) -> dict[str, list[tuple[Curve, str]]]:
    """Each kernel's curves with their SVG, for the HTML report (kernels without one are left out)."""
    found: dict[str, list[tuple[Curve, str]]] = {}
    for curve in curves_of(result):
        if (svg := figure_svg(curve)) is not None:
            found.setdefault(curve.kernel, []).append((curve, svg))
    return found
