"""The audit page (`grader audit --html`): a pack's mutation score per kernel, one row per surviving mutant with its
diff, the weak kills, the cases that kill nothing and the samples against their VARIANT.toml. It reads the audit as
plain data (`AuditReport.to_dict()`), as every report reads only what it is given."""

from __future__ import annotations

from typing import Any

from grader.report.render import environment


def render_page(report: dict[str, Any]) -> str:
    mutants = report["mutants"]
    return environment(autoescape=True).get_template("audit.html.j2").render(
        report=report, survivors=[m for m in mutants if m["status"] == "survived"],
        weak=[m for m in mutants if m["status"] == "weak_kill"],
        equivalent=[m for m in mutants if m["status"] == "equivalent"],
        sample_errors=[s for s in report["samples"] if not s["agrees"]])
