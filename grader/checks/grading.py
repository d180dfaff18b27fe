"""A grade's checks, whichever they are: the pipeline's one loop over them, each stage asking the check's
plug-in (`check_named`) for its part.

What every check shares is here: a check's kernel runs only where every kernel it composes built;
their libraries are copied into one folder for it (the sandbox shows the harness that folder, as it
shows a kernel its library); its calls run in harnesses of their own, beside the kernels'; its gold is
computed only where one of its calls ran to its end.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from grader.build import Artifact
from grader.checks import CheckSpec, check_named
from grader.results import CaseResult, KernelResult
from grader.runner import Call, CallOutcome
from grader.assignment import Assignment, Kernel
from grader.status import BuildStatus, CallStatus, CaseStatus, KernelStatus


def specs_of(assignment: Assignment, checks: tuple[Kernel, ...]) -> tuple[CheckSpec, ...]:
    """The checks these check kernels belong to (a variant's copy: its check's), each once, in the spec's order."""
    names = {k.base for k in checks}
    return tuple(spec for spec in assignment.checks if spec.name in names)


def prepare_check_inputs(assignment: Assignment, checks: tuple[Kernel, ...], cache_dir: Path) -> dict[str, Path]:
    """Each check's inputs folder by its name (computed once, cached by content)."""
    return {spec.name: check_named(spec.name).prepare_inputs(assignment, spec, cache_dir)
            for spec in specs_of(assignment, checks)}


def not_built(assignment: Assignment, check: Kernel, artifacts: dict[str, Artifact]) -> str:
    """Why the check cannot run ("matmul did not compile"), or ""."""
    missing = [k.base for k in assignment.composed_by(check)
               if (a := artifacts.get(k.name)) is None or a.status != BuildStatus.BUILT or a.library is None]
    return f"{', '.join(missing)} did not compile" if missing else ""


def check_calls(assignment: Assignment, checks: tuple[Kernel, ...], artifacts: dict[str, Artifact],
                inputs: dict[str, Path], outputs_dir: Path) -> list[Call]:
    """Each check's calls (one per case), for those whose kernels all built and whose inputs were prepared."""
    calls = []
    for check in checks:
        spec = assignment.check(check.base)
        if spec.name not in inputs or not_built(assignment, check, artifacts):
            continue
        folder = outputs_dir / f"{spec.name}-libraries" / check.name.replace("/", "-")
        folder.mkdir(parents=True, exist_ok=True)
        libraries = {}
        for kernel in assignment.composed_by(check):
            libraries[kernel.base] = str(folder / f"{kernel.base}.so")
            shutil.copyfile(artifacts[kernel.name].library, libraries[kernel.base])  # type: ignore[arg-type]
        cases = {c.name: c for c in check.cases}
        for case, composition in check_named(spec.name).plan(assignment, spec, libraries, inputs[spec.name]):
            calls.append(Call(check, cases[case], folder, inputs[spec.name], outputs_dir / check.name / case,
                              composition))
    return calls


def unprepared(assignment: Assignment, checks: tuple[Kernel, ...], artifacts: dict[str, Artifact],
               inputs: dict[str, Path]) -> list[tuple[str, str]]:
    """The (check, case) of each check whose kernels built but whose inputs were not prepared (nothing runs here)."""
    return [(check.name, case.name) for check in checks
            if check.base not in inputs and not not_built(assignment, check, artifacts) for case in check.cases]


def check_gold(assignment: Assignment, checks: tuple[Kernel, ...], outcomes: dict[tuple[str, str], CallOutcome],
               inputs: dict[str, Path], cache_dir: Path) -> dict[str, Any]:
    """Each check's gold by its name (cached by content), where any of its calls ran to its end."""
    gold = {}
    for spec in specs_of(assignment, checks):
        names = {k.name for k in checks if k.base == spec.name}
        if spec.name in inputs and any(o.status == CallStatus.OK for (name, _), o in outcomes.items() if name in names):
            gold[spec.name] = check_named(spec.name).gold(assignment, spec, inputs[spec.name], cache_dir)
    return gold


def check_results(assignment: Assignment, checks: tuple[Kernel, ...], artifacts: dict[str, Artifact],
                  outcomes: dict[tuple[str, str], CallOutcome], gold: dict[str, Any], logs: dict[str, str],
                  not_run_reason: str = "") -> list[KernelResult]:
    """Each check kernel's result, judged against its check's gold (`check_gold`); not_run_reason: why nothing
    ran on this machine."""
    results = []
    for check in checks:
        missing = not_built(assignment, check, artifacts)
        if missing:
            # Where nothing could run here at all, that is said first, as the kernels' results say it.
            results.append(_not_run(check, f"{not_run_reason} (and {missing})" if not_run_reason else missing))
            continue
        spec = assignment.check(check.base)
        kernels = {k.base: k for k in assignment.composed_by(check)}
        cases = {c.name: outcomes.get((check.name, c.name)) for c in check.cases}
        results.append(check_named(spec.name).result(assignment, spec, check, kernels, cases, gold.get(spec.name),
                                                     logs.get(check.name, "")))
    return results


def _not_run(check: Kernel, why: str) -> KernelResult:
    """A check that could not run: every case not run, for why ("matmul did not compile")."""
    message = f"not run: {why}"
    cases = [CaseResult(c.name, c.public, CaseStatus.NOT_RUN, False, message) for c in check.cases]
    return KernelResult(check.name, 0.0, check.weight, KernelStatus.NOT_RUN, message, cases, variant=check.variant,
                        check=check.base)


def prepare_check_gold(assignment: Assignment, kernels: tuple[Kernel, ...], cache_dir: Path) -> None:
    """The gold of every check these kernels run, before a batch fans out (cached by content)."""
    for spec in specs_of(assignment, assignment.checks_among(kernels)):
        check = check_named(spec.name)
        check.gold(assignment, spec, check.prepare_inputs(assignment, spec, cache_dir), cache_dir)
