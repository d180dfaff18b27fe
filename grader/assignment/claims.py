"""The [assignment.claims] table into a `ClaimsPart`: the figures a study asks the student to measure and state in
a results file, each checked against what `grader time --sweep` measures on the runner (grader.claims).

    [assignment.claims]
    file = ["results.csv"]   # CSV with the columns figure, case, value; the first the commit holds
    off_by = 2.0             # a claim more than 2x from the measurement, either way, is flagged
    [[assignment.claims.figure]]
    name = "speedup_512"
    kind = "speedup"         # time (ms), memory (MiB), speedup (baseline's time / kernel's), fastest (a case)
    kernel = "cached_generation"
    baseline = "uncached_generation"  # baseline_cases = [...]: its case for each of cases, where named otherwise
    cases = ["sweep-512"]
    says = "the cache's speed-up generating 512 tokens"

A figure's cases are the kernel's sweep cases (or its cases): what the runner times. A speed-up may take its
baseline from another assignment's timing (`baseline_assignment`: CuPy against SciPy's own pack).
"""

from __future__ import annotations

import re
from typing import Any

from grader.assignment.document import Reader
from grader.assignment.model import ClaimedFigure, ClaimKind, ClaimsPart, Kernel
from grader.errors import SpecError

CLAIMS_KEYS = ("file", "off_by", "figure")
FIGURE_KEYS = ("name", "kind", "kernel", "cases", "says", "baseline", "baseline_assignment", "baseline_cases")
FIGURE_NAME = re.compile(r"[a-z][a-z0-9_]*")  # the results file's `figure` column


def load_claims(table: Any, where: str, kernels: tuple[Kernel, ...]) -> ClaimsPart | None:
    """The claims part, or None where the assignment asks for none."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise SpecError(f"{where}: expected a table with {', '.join(CLAIMS_KEYS)}")
    if unknown := sorted(set(table) - set(CLAIMS_KEYS)):
        raise SpecError(f"{where}: unknown key(s) {unknown}; expected {', '.join(CLAIMS_KEYS)}")
    read = Reader(table, where)
    files = read.strings("file")
    if not files or any(not f or f.startswith("/") or ".." in f.split("/") for f in files):
        raise SpecError(f"{where}: key 'file': each name is a path inside the repository, found {list(files)}")
    entries = table.get("figure", [])
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise SpecError(f"{where}: [[assignment.claims.figure]] must be one or more tables with "
                        f"{', '.join(FIGURE_KEYS)}")
    by_name = {k.name: k for k in kernels}
    figures = tuple(_figure(e, f"{where} figure[{i}]", by_name) for i, e in enumerate(entries))
    names = [f.name for f in figures]
    if len(set(names)) != len(names):
        raise SpecError(f"{where}: figure names repeat: {names}")
    return ClaimsPart(file=files, figures=figures, off_by=read.at_least("off_by", 1.0, 2.0))


def _figure(table: dict[str, Any], where: str, kernels: dict[str, Kernel]) -> ClaimedFigure:
    if unknown := sorted(set(table) - set(FIGURE_KEYS)):
        raise SpecError(f"{where}: unknown key(s) {unknown}; expected {', '.join(FIGURE_KEYS)}")
    read = Reader(table, where)
    name = read.get("name", str)
    if not FIGURE_NAME.fullmatch(name):
        raise SpecError(f"{where}: key 'name' is the results file's figure: lower-case letters, digits and _, "
                        f"found {name!r}")
    kind = ClaimKind(read.choice("kind", tuple(k.value for k in ClaimKind)))
    kernel = read.choice("kernel", tuple(kernels))
    cases = read.strings("cases")
    known = [c.name for c in kernels[kernel].sweep_cases + kernels[kernel].cases]
    if not cases or any(c not in known for c in cases):
        raise SpecError(f"{where}: key 'cases': cases of kernel {kernel!r} (its sweep cases or cases), found "
                        f"{list(cases)}; it has {known}")
    if kind is ClaimKind.FASTEST and len(cases) < 2:
        raise SpecError(f"{where}: a 'fastest' figure chooses among two or more cases, found {list(cases)}")
    baseline = read.get("baseline", str, None)
    elsewhere = read.get("baseline_assignment", str, None)
    if (baseline is None) != (kind is not ClaimKind.SPEEDUP):
        raise SpecError(f"{where}: key 'baseline' (the kernel the speed-up is against) belongs to a 'speedup' "
                        "figure, and only there")
    if baseline is not None and elsewhere is None and baseline not in kernels:
        raise SpecError(f"{where}: key 'baseline': no kernel {baseline!r}; expected one of {sorted(kernels)} (or "
                        "name baseline_assignment, whose kernel it is)")
    baseline_cases = read.strings("baseline_cases", ())
    if baseline_cases and (baseline is None or len(baseline_cases) != len(cases)):
        raise SpecError(f"{where}: key 'baseline_cases': the baseline's case for each of 'cases' ({len(cases)}), in "
                        f"a 'speedup' figure; found {list(baseline_cases)}")
    if baseline_cases and baseline is not None and elsewhere is None:
        known_base = [c.name for c in kernels[baseline].sweep_cases + kernels[baseline].cases]
        if unknown_base := [c for c in baseline_cases if c not in known_base]:
            raise SpecError(f"{where}: key 'baseline_cases': {baseline} has no case(s) {unknown_base}")
    return ClaimedFigure(name, kind, kernel, cases, read.get("says", str, ""), baseline, elsewhere, baseline_cases)
