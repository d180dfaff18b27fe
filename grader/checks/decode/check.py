"""The decode check as a plug-in (`grader.checks`): its [decode] table, its inputs, its calls (one per case, one
harness of their own), its gold, and its results (a variant's "req_6/decode")."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from grader.boundary.protocol import Composition, ScalarArgument, Space
from grader.checks.decode import harness_half as harness
from grader.checks.decode.gold import DecodeGold, decode_gold
from grader.checks.decode.inputs import prepare_decode_inputs, tokens_file
from grader.checks.decode.spec import DECODE, Decode, DecodeCase, load_decode
from grader.checks.decode.verdict import decode_result
from grader.checks.forward.inputs import PARAMETERS_FILE
from grader.checks.forward.layout import Step, activation_tensors, logits_offset, parameter_tensors, steps_of, total
from grader.errors import SpecError
from grader.results import KernelResult
from grader.runner import CallOutcome
from grader.assignment import Assignment, Kernel

POSITION_TABLE = ("encoder", "wpe")  # the one-token forward's position table: the harness passes wpe + position * C


def case_steps(assignment: Assignment, d: Decode, case: DecodeCase) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
    """The forward over the case's longest sequence, and the same over one token in its layout (the harness derives
    every other length from the two: `harness.Decoder.steps_at`)."""
    kernels = {k.name: k for k in assignment.base_kernels}
    where = f"{assignment.spec_file} [{DECODE}] case '{case.name}'"
    longest = d.forward(case.B, case.length)
    full = steps_of(longest, kernels, where)
    one = steps_of(d.forward(case.B, 1), kernels, where, slots=longest)
    for long_step, one_step in zip(full, one):
        for a, b in zip(long_step.plan.arguments, one_step.plan.arguments):
            if isinstance(a, ScalarArgument) and isinstance(b, ScalarArgument) and a.value not in (b.value,
                                                                                                b.value * case.length):
                raise SpecError(f"{where}: {a.name} of step {long_step.number} ({long_step.kernel}) is {a.value} over "
                                f"{case.length} tokens and {b.value} over one: not proportional to the tokens")
    return full, one


def composition_of(assignment: Assignment, d: Decode, case: DecodeCase, libraries: dict[str, str],
                   inputs: Path) -> Composition:
    """One case's program as the harness runs it: the two forwards' steps over one layout, what it seals."""
    full, one = case_steps(assignment, d, case)
    longest = d.forward(case.B, case.length)
    kernel, parameter = POSITION_TABLE
    step = next(s for s in one if s.kernel == kernel)
    argument = next(i for i, a in enumerate(step.plan.arguments) if a.name == parameter)
    settings = harness.Run(B=case.B, prompt=case.prompt, generate=case.generate, runs=case.runs, C=d.C, V=d.V,
                           Vp=d.Vp, logits_offset=logits_offset(longest), forward_steps=len(full), length=case.length,
                           position=(step.number - 1, argument),
                           attention=tuple(s.number - 1 for s in full if s.kernel == "attention"))
    return Composition(
        runner=harness.__name__, libraries=libraries,
        spaces={"activations": Space("float32", total(activation_tensors(longest))),
                "parameters": Space("float32", total(parameter_tensors(longest)), str(inputs / PARAMETERS_FILE)),
                "tokens": Space("int32", case.B * case.length, str(inputs / tokens_file(case)))},
        steps=tuple(s.plan for s in (*full, *one)), sealed=case.outputs, settings=asdict(settings))


class DecodeCheck:
    """The KV-cache decode check behind the checks' interface (`grader.checks.Check`)."""

    name = DECODE
    harness_module = harness.__name__

    def load(self, table: Any, where: str, kernels: tuple[Kernel, ...]) -> Decode:
        return load_decode(table, where, kernels)

    def prepare_inputs(self, assignment: Assignment, spec: Decode, cache_dir: Path) -> Path:
        return prepare_decode_inputs(assignment, spec, cache_dir)

    def plan(self, assignment: Assignment, spec: Decode, libraries: dict[str, str],
             inputs: Path) -> tuple[tuple[str, Composition], ...]:
        return tuple((case.name, composition_of(assignment, spec, case, libraries, inputs))
                     for case in spec.decode_cases)

    def gold(self, assignment: Assignment, spec: Decode, inputs: Path, cache_dir: Path) -> DecodeGold:
        return decode_gold(assignment, spec, inputs, cache_dir)

    def result(self, assignment: Assignment, spec: Decode, check: Kernel, kernels: dict[str, Kernel],
               outcomes: dict[str, CallOutcome | None], gold: DecodeGold | None, log: str) -> KernelResult:
        return decode_result(check, spec, outcomes, gold, log)


CHECK = DecodeCheck()
