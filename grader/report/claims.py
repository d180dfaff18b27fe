"""The claims page (`grader claims --html`): each claim beside the runner's measurement, and a figure per figure
of the study: the measurement across its cases with the band a claim may fall in, each claim marked on it. It
reads the checks as plain data (`ClaimsReport.to_dict()`), as every report reads only what it is given."""

from __future__ import annotations

from typing import Any

from grader.report.figures import pyplot_or_none, svg_text
from grader.report.render import environment

UNITS = {"time": "ms", "memory": "MiB", "speedup": "x"}


def render_page(report: dict[str, Any], title: str) -> str:
    return environment(autoescape=True).get_template("claims.html.j2").render(
        title=title, report=report, figure=_figure(report))


def _figure(report: dict[str, Any]) -> str | None:
    """One panel per numeric figure: measured (line) with its off_by band, the claims (dots; red where flagged);
    None where matplotlib is missing or no numeric figure has a claim or a measurement."""
    checks_of: dict[str, list[dict[str, Any]]] = {}
    for check in report["checks"]:
        if check["kind"] in UNITS and (check["claimed"] is not None or check["measured"] is not None):
            checks_of.setdefault(check["figure"], []).append(check)
    pyplot = pyplot_or_none()
    if pyplot is None or not checks_of:
        return None
    off_by = report["off_by"]
    figure, axes = pyplot.subplots(1, len(checks_of), figsize=(4.2 * len(checks_of), 3.4), squeeze=False)
    for axis, (name, checks) in zip(axes[0], checks_of.items()):
        xs = range(len(checks))
        measured = [c["measured"] if isinstance(c["measured"], float) else float("nan") for c in checks]
        axis.plot(xs, measured, "o-", color="#1f77b4", label="runner")
        axis.fill_between(xs, [m / off_by for m in measured], [m * off_by for m in measured],
                          color="#1f77b4", alpha=0.15, label=f"within {off_by:g}x")
        for x, check in zip(xs, checks):
            if isinstance(check["claimed"], float):
                flagged = check["status"] == "flagged"
                axis.plot([x], [check["claimed"]], "X" if flagged else "s",
                          color="#d62728" if flagged else "#2ca02c", markersize=9, label="_")
        axis.plot([], [], "s", color="#2ca02c", label="claim")
        axis.plot([], [], "X", color="#d62728", label="claim, flagged")
        axis.set_yscale("log")
        axis.set_xticks(list(xs), [c["case"] for c in checks], rotation=30, ha="right", fontsize=8)
        axis.set_title(name, fontsize=10)
        axis.set_ylabel(UNITS[checks[0]["kind"]])
        axis.legend(fontsize=7)
    return svg_text(figure, pyplot)
