"""How close correct kernels come to each tolerance, and how far bugs land past it.

    python benchmarks/tolerance_margins.py ASSIGNMENT [--out FILE.md]

Grades every alternative and mutant in tests/submissions/ASSIGNMENT (its own kernel only) and
reports, per variant, the worst `tolerance_used` over the cases (|y - g| / (atol + rtol |g|),
passing needs <= 1) and which cases failed. A good tolerance leaves the alternatives well under 1
and the mutants far over it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from grader.pipeline import Options, default_cache_dir, grade
from grader.samples import compose, variants
from grader.spec import load_assignment


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("assignment")
    parser.add_argument("--out", type=Path)
    arguments = parser.parse_args()
    assignment = load_assignment(arguments.assignment)
    options = Options(cache_dir=default_cache_dir())
    rows = ["| variant | kind | expected | got | worst tolerance used | cases failed |", "|---|---|---|---|---|---|"]
    for variant in variants(assignment):
        if variant.kind == "hostile":
            continue
        with tempfile.TemporaryDirectory() as scratch:
            folder = compose(assignment, variant, Path(scratch) / variant.name)
            result = grade(folder, assignment, Options(**{**options.__dict__, "kernels": (variant.kernel,)}))
        (kernel,) = result.kernels
        used = [c.tolerance_used for c in kernel.cases if c.status in ("passed", "failed")]
        worst = "inf (NaN/unwritten)" if any(u is None for u in used) else f"{max(used):.3g}" if used else "-"
        failed = ", ".join(c.name for c in kernel.cases if not c.passed) or "none"
        rows.append(f"| {variant.name} | {variant.kind} | {variant.expect} | {kernel.status} | {worst} | {failed} |")
        print(rows[-1], flush=True)
    table = "\n".join(rows)
    if arguments.out:
        arguments.out.write_text(f"## Tolerance margins: {assignment.name}\n\n{table}\n")


if __name__ == "__main__":
    main()
