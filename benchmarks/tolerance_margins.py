"""How close correct kernels come to each tolerance, and how far bugs land past it, case by case.

    python benchmarks/tolerance_margins.py ASSIGNMENT [--out FILE.md] [--json FILE.json] [--only NAME ...]

Grades every alternative, course-style and mutant sample in assignments/ASSIGNMENT/samples/ (its own
kernel, or every kernel for a whole submission, kernel = "all") and prints one table per kernel:
a row per variant, a column per case holding its `tolerance_used` (the worst |y - g| / (atol +
rtol |g|); at most 1 passes). The margin rule: a correct family (alternative, course) stays within
1/3 of the tolerance on every case; a mutant that must fail misses some case by 3x or more, or
leaves it NaN/unwritten, or crashes on it. Hostile variants are not about tolerances: skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.options import Options, default_cache_dir
from grader.pipeline import grade
from grader.results import CaseResult
from grader.samples import Sample, compose, variants
from grader.assignment import load_assignment

MARGIN = 3.0  # correct code within 1/MARGIN of the tolerance; a bug at least MARGIN times past it
CORRECT_KINDS = ("alternative", "course")
MEASURED_KINDS = (*CORRECT_KINDS, "mutant")
UNWRITTEN = "NaN/unwritten"


@dataclass(frozen=True)
class Row:
    """One kernel of one variant: what it was expected to do and each case's distance from gold."""

    variant: str
    kind: str
    expect: str
    kernel: str
    status: str
    cases: dict[str, dict]  # case -> status, tolerance_used, max_abs_err, never_written, atol, rtol
    declared_failed: list[str] | None  # the VARIANT.toml's failed_cases, where it has them

    @property
    def worst(self) -> float:
        return max((_excess(c) for c in self.cases.values()), default=0.0)

    @property
    def rule(self) -> bool | None:
        """The margin rule; None where it does not apply (a mutant expected to be forbidden, not failed)."""
        if self.kind in CORRECT_KINDS:
            return self.worst <= 1 / MARGIN
        if self.expect == "failed":
            return self.worst >= MARGIN
        return None

    @property
    def failed(self) -> list[str]:
        return [name for name, c in self.cases.items() if c["status"] != "passed"]


def _excess(case: dict) -> float:
    """tolerance_used, with anything that did not produce comparable numbers as infinitely far."""
    if case["status"] not in ("passed", "failed") or case["tolerance_used"] is None or case["never_written"]:
        return math.inf
    return case["tolerance_used"]


def _case_figures(case: CaseResult) -> dict:
    def finite(x: float | None) -> float | None:  # JSON has no inf or NaN; None reads as "not comparable"
        return x if x is None or math.isfinite(x) else None
    return {"status": case.status, "tolerance_used": finite(case.tolerance_used), "max_abs_err": finite(case.max_abs_err),
            "never_written": case.never_written, "atol": case.atol, "rtol": case.rtol}


def measure(assignment, variant: Sample, options: Options) -> tuple[list[Row], str, str | None]:
    """Grade one variant (its kernel, or all of them for a whole submission).

    Returns its rows, the device, and why nothing ran where nothing did (no GPU here), else None.
    """
    kernels = () if variant.whole else (variant.kernel,)
    with tempfile.TemporaryDirectory() as scratch:
        folder = compose(assignment, variant, Path(scratch) / variant.name)
        result = grade(folder, assignment, dataclasses.replace(options, kernels=kernels))
    # failed_cases name one kernel's cases, so they say nothing about a whole submission's other kernels.
    declared = None if variant.failed_cases is None or variant.whole else list(variant.failed_cases)
    rows = [Row(variant.name, variant.kind, variant.expect, k.name, k.status,
                {c.name: _case_figures(c) for c in k.cases}, declared) for k in result.kernels]
    cases = [c for k in result.kernels for c in k.cases]
    nothing_ran = cases[0].message if cases and all(c.status == "not_run" for c in cases) else None
    return rows, result.environment.device, nothing_ran


def _cell(case: dict) -> str:
    if case["status"] not in ("passed", "failed"):
        return case["status"]
    if case["tolerance_used"] is None or case["never_written"]:
        return UNWRITTEN
    return f"{case['tolerance_used']:.3g}"


def _declared(row: Row) -> str:
    if row.declared_failed is None:
        return ""
    return "yes" if sorted(row.failed) == sorted(row.declared_failed) else f"no: failed {', '.join(row.failed) or 'none'}"


def table(rows: list[Row], case_names: list[str]) -> str:
    lines = ["| variant | kind | expect | got | " + " | ".join(case_names) + " | worst | rule | failed as declared |",
             "|---" * (len(case_names) + 7) + "|"]
    for row in rows:
        rule = {True: "PASS", False: "FAIL", None: "n/a"}[row.rule]
        worst = "inf" if math.isinf(row.worst) else f"{row.worst:.3g}"
        cells = [_cell(row.cases[n]) if n in row.cases else "-" for n in case_names]
        lines.append(f"| {row.variant} | {row.kind} | {row.expect} | {row.status} | " + " | ".join(cells)
                     + f" | {worst} | {rule} | {_declared(row)} |")
    return "\n".join(lines)


def summary(rows: list[Row]) -> str:
    correct = [r for r in rows if r.kind in CORRECT_KINDS]
    mutants = [r for r in rows if r.kind == "mutant" and r.rule is not None]
    return (f"families within 1/{MARGIN:g}: {sum(bool(r.rule) for r in correct)}/{len(correct)}; "
            f"mutants failing by >= {MARGIN:g}x: {sum(bool(r.rule) for r in mutants)}/{len(mutants)}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Per-case tolerance margins of the sample variants.")
    parser.add_argument("assignment")
    parser.add_argument("--out", type=Path, help="write the tables as markdown here")
    parser.add_argument("--json", type=Path, help="write the raw figures as JSON here")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only the variants whose names contain one of these")
    arguments = parser.parse_args()
    assignment = load_assignment(arguments.assignment)
    options = Options(cache_dir=default_cache_dir())
    chosen = [v for v in variants(assignment) if v.kind in MEASURED_KINDS
              and (not arguments.only or any(part in v.name for part in arguments.only))]

    rows: list[Row] = []
    device = ""
    for variant in chosen:
        measured, device, nothing_ran = measure(assignment, variant, options)
        if nothing_ran is not None:
            sys.exit(f"tolerance_margins: {variant.name} compiled but no case ran ({nothing_ran}): "
                     "margins need a machine where the kernels run")
        rows.extend(measured)
        for row in measured:
            print(f"{row.variant} {row.kernel}: {row.status}, worst {row.worst:.3g}", flush=True)

    sections = []
    for kernel in assignment.kernels:
        kernel_rows = [r for r in rows if r.kernel == kernel.name]
        if kernel_rows:
            sections.append(f"### {kernel.name}\n\n{table(kernel_rows, [c.name for c in kernel.cases])}")
    text = (f"## Tolerance margins: {assignment.name}\n\ndevice: {device}\n\n" + "\n\n".join(sections)
            + f"\n\n{summary(rows)}\n")
    print(text)
    if arguments.out:
        arguments.out.write_text(text)
    if arguments.json:
        figures = [{**dataclasses.asdict(r), "worst": None if math.isinf(r.worst) else r.worst, "rule": r.rule}
                   for r in rows]
        arguments.json.write_text(json.dumps({"assignment": assignment.name, "device": device, "margin": MARGIN,
                                              "rows": figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
