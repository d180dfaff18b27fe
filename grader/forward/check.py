"""The forward-pass check in the pipeline: its calls (three passes, one harness of their own), and its
results (one per check: the base's "forward", each variant's "req_0/forward")."""

from __future__ import annotations

import shutil
from pathlib import Path

from grader.build import Artifact
from grader.forward.gold import ForwardGold, forward_gold
from grader.forward.inputs import PARAMETERS_FILE, REFERENCE_FILE, TOKENS_FILE
from grader.forward.layout import Step, activation_tensors, logits_offset, parameter_tensors, regions, steps_of, total
from grader.forward.verdict import forward_result
from grader.protocol import ForwardPlan
from grader.results import KernelResult
from grader.runner import Call, CallOutcome
from grader.spec import Assignment, Kernel
from grader.status import BuildStatus, CallStatus

MODES = {"layer-by-layer": "layers", "logits": "logits", "generation": "generation"}  # case -> the harness's pass
# The order a harness runs them in: the end-to-end passes first, while no gold has entered the process
# (the layer-by-layer pass computes its swap-in gold there; code left running from it could keep some).
ORDER = ("logits", "generation", "layer-by-layer")


def forward_steps(assignment: Assignment) -> tuple[Step, ...]:
    assert assignment.forward is not None
    return steps_of(assignment.forward, {k.name: k for k in assignment.base_kernels}, f"{assignment.spec_file} [forward]")


def not_built(assignment: Assignment, check: Kernel, artifacts: dict[str, Artifact]) -> str:
    """Why the check cannot run ("matmul did not compile"), or ""."""
    missing = [k.base for k in assignment.composed_by(check)
               if (a := artifacts.get(k.name)) is None or a.status != BuildStatus.BUILT or a.library is None]
    return f"{', '.join(missing)} did not compile" if missing else ""


def forward_calls(assignment: Assignment, checks: tuple[Kernel, ...], artifacts: dict[str, Artifact], inputs: Path,
                  outputs_dir: Path) -> list[Call]:
    """Each check's three passes, for those whose six kernels built; their libraries copied into one folder each
    (the sandbox shows the harness that folder, as it shows a kernel its library)."""
    f = assignment.forward
    assert f is not None
    steps = forward_steps(assignment)
    calls = []
    for check in checks:
        if not_built(assignment, check, artifacts):
            continue
        libraries = outputs_dir / "forward-libraries" / check.name.replace("/", "-")
        libraries.mkdir(parents=True, exist_ok=True)
        paths = {}
        for kernel in assignment.composed_by(check):
            paths[kernel.base] = str(libraries / f"{kernel.base}.so")
            shutil.copyfile(artifacts[kernel.name].library, paths[kernel.base])  # type: ignore[arg-type]
        for case in sorted(check.cases, key=lambda c: ORDER.index(c.name)):
            plan = ForwardPlan(
                mode=MODES[case.name], libraries=paths,
                sizes={"activations": total(activation_tensors(f)), "parameters": total(parameter_tensors(f)),
                       "tokens": f.B * f.T},
                parameters_file=str(inputs / PARAMETERS_FILE), tokens_file=str(inputs / TOKENS_FILE),
                reference_file=str(inputs / REFERENCE_FILE), steps=tuple(s.plan for s in steps), regions=regions(f),
                logits_offset=logits_offset(f), B=f.B, T=f.T, V=f.V, Vp=f.Vp, prompt=f.prompt_length,
                generate=f.generate)
            calls.append(Call(check, case, libraries, inputs, outputs_dir / check.name / case.name, plan))
    return calls


def gold_for(assignment: Assignment, checks: tuple[Kernel, ...], outcomes: dict[tuple[str, str], CallOutcome],
             inputs: Path | None, cache_dir: Path) -> ForwardGold | None:
    """The gold forward pass (cached by content), where any of the checks' passes ran to its end; else None."""
    names = {c.name for c in checks}
    if inputs is None or not any(o.status == CallStatus.OK for (name, _), o in outcomes.items() if name in names):
        return None
    return forward_gold(assignment, forward_steps(assignment), inputs, cache_dir)


def forward_results(assignment: Assignment, checks: tuple[Kernel, ...], artifacts: dict[str, Artifact],
                    outcomes: dict[tuple[str, str], CallOutcome], gold: ForwardGold | None,
                    logs: dict[str, str], not_run_reason: str = "") -> list[KernelResult]:
    """Each check's result, judged against `gold` (`gold_for`); not_run_reason: why nothing ran on this machine."""
    f = assignment.forward
    if not checks or f is None:
        return []
    steps = forward_steps(assignment)
    results = []
    for check in checks:
        kernels = {k.base: k for k in assignment.composed_by(check)}
        cases = {c.name: outcomes.get((check.name, c.name)) for c in check.cases}
        missing = not_built(assignment, check, artifacts)
        # Where nothing could run here at all, that is said first, as the kernels' results say it.
        why = f"{not_run_reason} (and {missing})" if missing and not_run_reason else missing
        results.append(forward_result(check, f, steps, kernels, cases, gold, why, logs.get(check.name, "")))
    return results
