"""The claims page (`grader claims --html`): each claim beside the runner's measurement, and a figure per figure
of the study: the measurement across its cases with the band a claim may fall in, each claim marked on it."""

from __future__ import annotations

from grader.assignment.model import ClaimKind
from grader.claims import UNITS, ClaimsReport
from grader.report.figures import pyplot_or_none, svg_text
from grader.report.render import environment
from grader.status import ClaimStatus


def render_page(report: ClaimsReport, title: str) -> str:
    return environment(autoescape=True).get_template("claims.html.j2").render(
        title=title, report=report, figure=_figure(report), statuses=ClaimStatus)


def _figure(report: ClaimsReport) -> str | None:
    """One panel per numeric figure: measured (line) with its off_by band, the claims (dots; red where flagged);
    None where matplotlib is missing or nothing has both a claim and a measurement."""
    names = list(dict.fromkeys(c.figure for c in report.checks if c.kind is not ClaimKind.FASTEST
                               and (c.claimed is not None or c.measured is not None)))
    pyplot = pyplot_or_none()
    if pyplot is None or not names:
        return None
    figure, axes = pyplot.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    for axis, name in zip(axes[0], names):
        checks = [c for c in report.checks if c.figure == name]
        xs = range(len(checks))
        measured = [c.measured if isinstance(c.measured, float) else float("nan") for c in checks]
        axis.plot(xs, measured, "o-", color="#1f77b4", label="runner")
        axis.fill_between(xs, [m / report.off_by for m in measured], [m * report.off_by for m in measured],
                          color="#1f77b4", alpha=0.15, label=f"within {report.off_by:g}x")
        for x, check in zip(xs, checks):
            if isinstance(check.claimed, float):
                flagged = check.status is ClaimStatus.FLAGGED
                axis.plot([x], [check.claimed], "X" if flagged else "s", color="#d62728" if flagged else "#2ca02c",
                          markersize=9, label="_")
        axis.plot([], [], "s", color="#2ca02c", label="claim")
        axis.plot([], [], "X", color="#d62728", label="claim, flagged")
        axis.set_yscale("log")
        axis.set_xticks(list(xs), [c.case for c in checks], rotation=30, ha="right", fontsize=8)
        axis.set_title(name, fontsize=10)
        axis.set_ylabel(UNITS[checks[0].kind])
        axis.legend(fontsize=7)
    return svg_text(figure, pyplot)
