"""The forward-pass check as a plug-in (`grader.checks`): its [forward] table, its inputs, its calls (three
passes, one harness of their own), its gold, and its results (one per check: the base's "forward", each
variant's "req_0/forward")."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from grader.boundary.protocol import Composition, Space
from grader.checks.forward import harness_half as harness
from grader.checks.forward.gold import ForwardGold, forward_gold
from grader.checks.forward.inputs import PARAMETERS_FILE, REFERENCE_FILE, TOKENS_FILE, prepare_forward_inputs
from grader.checks.forward.layout import (Step, activation_tensors, logits_offset, parameter_tensors, regions, steps_of,
                                          total)
from grader.checks.forward.spec import FORWARD, FORWARD_CASES, Forward, load_forward
from grader.checks.forward.verdict import forward_result
from grader.results import KernelResult
from grader.runner import CallOutcome
from grader.assignment import Assignment, Kernel

MODES = {"layer-by-layer": "layers", "logits": "logits", "generation": "generation"}  # case -> the harness's pass
# The order a harness runs them in: the end-to-end passes first, while no gold has entered the process
# (the layer-by-layer pass computes its swap-in gold there; code left running from it could keep some).
ORDER = ("logits", "generation", "layer-by-layer")


def forward_steps(assignment: Assignment, f: Forward) -> tuple[Step, ...]:
    return steps_of(f, {k.name: k for k in assignment.base_kernels}, f"{assignment.spec_file} [{FORWARD}]")


def composition_of(f: Forward, case: str, steps: tuple[Step, ...], libraries: dict[str, str],
                   inputs: Path) -> Composition:
    """One case's pass as the harness runs it: the six kernels' steps over the activations, the parameters
    and the tokens, and what it seals (each step's output, the logits, or the generated tokens)."""
    mode = MODES[case]
    sealed = tuple(s.plan.output for s in steps) if mode == "layers" else ("logits",) if mode == "logits" \
        else ("tokens",)
    settings = harness.Pass(mode=mode, reference_file=str(inputs / REFERENCE_FILE), logits_offset=logits_offset(f),
                            B=f.B, T=f.T, V=f.V, Vp=f.Vp, prompt=f.prompt_length, generate=f.generate)
    return Composition(
        runner=harness.__name__, libraries=libraries,
        spaces={"activations": Space("float32", total(activation_tensors(f))),
                "parameters": Space("float32", total(parameter_tensors(f)), str(inputs / PARAMETERS_FILE)),
                "tokens": Space("int32", f.B * f.T, str(inputs / TOKENS_FILE))},
        steps=tuple(s.plan for s in steps), sealed=sealed, regions=regions(f), settings=asdict(settings))


class ForwardCheck:
    """The forward-pass check behind the checks' interface (`grader.checks.Check`)."""

    name = FORWARD
    harness_module = harness.__name__

    def load(self, table: Any, where: str, kernels: tuple[Kernel, ...]) -> Forward:
        return load_forward(table, where, kernels)

    def prepare_inputs(self, assignment: Assignment, spec: Forward, cache_dir: Path) -> Path:
        return prepare_forward_inputs(assignment, spec, cache_dir)

    def plan(self, assignment: Assignment, spec: Forward, libraries: dict[str, str],
             inputs: Path) -> tuple[tuple[str, Composition], ...]:
        steps = forward_steps(assignment, spec)
        return tuple((case, composition_of(spec, case, steps, libraries, inputs))
                     for case in sorted(FORWARD_CASES, key=ORDER.index))

    def gold(self, assignment: Assignment, spec: Forward, inputs: Path, cache_dir: Path) -> ForwardGold:
        return forward_gold(assignment, spec, forward_steps(assignment, spec), inputs, cache_dir)

    def result(self, assignment: Assignment, spec: Forward, check: Kernel, kernels: dict[str, Kernel],
               outcomes: dict[str, CallOutcome | None], gold: ForwardGold | None, log: str) -> KernelResult:
        return forward_result(check, spec, forward_steps(assignment, spec), kernels, outcomes, gold, log)


CHECK = ForwardCheck()
