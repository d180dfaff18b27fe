"""The forward-pass check's three cases judged, its result as a kernel's, and its hints, in a student's words.

Each saved output is first checked against the seal the harness sent before any later student code
ran: a file changed after its step returned is no output of that step.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grader.boundary.protocol import Sealed, seal_of
from grader.build import Artifact
from grader.checks.forward.gold import ForwardGold
from grader.checks.forward.layout import Step
from grader.checks.forward.spec import FORWARD, Forward
from grader.compare import compare
from grader.results import CaseResult, KernelResult, Mismatch
from grader.runner import CallOutcome
from grader.scoring import case_result, score_kernel
from grader.assignment import Case, Kernel, Tolerance
from grader.status import BuildStatus, CallStatus, CaseStatus
from grader.threadsafe import load_npy


def forward_result(check: Kernel, forward: Forward, steps: tuple[Step, ...], kernels: dict[str, Kernel],
                   outcomes: dict[str, CallOutcome | None], gold: ForwardGold | None, log: str = "") -> KernelResult:
    """The check's result: its three cases, scored like a kernel's.

    kernels: the composed kernels by base name (a variant's copies: their tolerances); outcomes: by
    case name.
    """
    judges = {"layer-by-layer": lambda c, o, g: layer_by_layer(c, o, g, steps, kernels, forward),
              "logits": lambda c, o, g: logits(c, o, g, steps, forward),
              "generation": lambda c, o, g: generation(c, o, g, forward)}
    cases = []
    for case in check.cases:
        outcome = outcomes.get(case.name)
        if outcome is None or outcome.status != CallStatus.OK or gold is None:
            cases.append(_not_judged(case, outcome, steps))
        else:  # the pass's kernel time, summed over its calls
            cases.append(dataclasses.replace(judges[case.name](case, outcome, gold), wall_ms=outcome.wall_ms,
                                             device_ms=outcome.device_ms))
    artifact = Artifact(check.name, BuildStatus.BUILT, None, "", (), True, 0.0)
    judged = {c.name: c.passed for c in cases if c.status.was_judged}
    return dataclasses.replace(score_kernel(check, artifact, cases, None, log), check=FORWARD,
                               check_hints=forward_hints(judged))


def _not_judged(case: Case, outcome: CallOutcome | None, steps: tuple[Step, ...]) -> CaseResult:
    """A pass that crashed or timed out: in the layer-by-layer pass, the step it was in is known (the next unsealed)."""
    result = case_result(case, outcome, None)
    if outcome is None or outcome.status == CallStatus.NOT_RUN:
        return result
    where = steps[len(outcome.seals)].words(len(steps)) if case.name == "layer-by-layer" and \
        len(outcome.seals) < len(steps) else "the end-to-end pass"
    return dataclasses.replace(result, message=f"during {where}: {result.message}")


def sealed_output(outcome: CallOutcome, seal: Sealed | None) -> np.ndarray | str:
    """The output as saved, or why there is none to judge."""
    if seal is None:
        return "no output was saved"
    try:
        array = np.asarray(load_npy(Path(outcome.output_dir or ".") / f"{seal.file}.npy"))
    except (OSError, ValueError):
        return "its saved output is missing or unreadable"
    if seal_of(np.ascontiguousarray(array).tobytes()) != seal.digest:
        return "its saved output was changed after the step returned (code still running behind the harness)"
    return array


def _failed(case: Case, message: str, **figures: object) -> CaseResult:
    return CaseResult(case.name, case.public, CaseStatus.FAILED, False, message, **figures)  # type: ignore[arg-type]


def layer_by_layer(case: Case, outcome: CallOutcome, gold: ForwardGold, steps: tuple[Step, ...],
                   kernels: dict[str, Kernel], forward: Forward) -> CaseResult:
    """Every step against its gold (its inputs were gold): the first failing step named, and how many failed."""
    seals = {s.file: s for s in outcome.seals}
    first: CaseResult | None = None
    failed, worst, worst_step = 0, 0.0, steps[0]
    for step in steps:
        words = step.words(len(steps))
        seal = seals.get(step.plan.output)
        tolerance = tolerance_of(forward, kernels[step.kernel])
        produced = sealed_output(outcome, seal)
        if isinstance(produced, str):
            result = _failed(case, f"{words}: {produced}")
        else:
            verdict = compare({"out": produced}, {"out": gold.steps[step.plan.output]}, tolerance)
            result = case_result(case, outcome, verdict, tolerance)
            problems = []
            if seal is not None and seal.inputs_modified:
                problems.append(f"wrote into its input(s) {', '.join(seal.inputs_modified)}, which it must only read")
            if seal is not None and seal.outside:
                problems.append(f"wrote outside its arguments, into {', '.join(seal.outside)}")
            message = "; ".join([*problems, verdict.message])
            result = dataclasses.replace(result, message=f"{words}: {message}", passed=result.passed and not problems,
                                         status=CaseStatus.PASSED if result.passed and not problems
                                         else CaseStatus.FAILED, inputs_modified=list(seal.inputs_modified)
                                         if seal else [])
            if verdict.tolerance_used >= worst:
                worst, worst_step = verdict.tolerance_used, step
        if not result.passed:
            failed += 1
            first = first or result
    if first is not None:
        also = f" ({failed} of {len(steps)} steps failed)" if failed > 1 else ""
        return dataclasses.replace(first, message=first.message + also)
    return CaseResult(case.name, case.public, CaseStatus.PASSED, True,
                      f"all {len(steps)} steps within tolerance, the gold swapped in after each (closest to its "
                      f"tolerance: {worst_step.words(len(steps))}, {worst:.2g} of it)", tolerance_used=worst)


def logits(case: Case, outcome: CallOutcome, gold: ForwardGold, steps: tuple[Step, ...],
           forward: Forward) -> CaseResult:
    """The end-to-end pass's logits over the real vocabulary, by the course's test_gpt2 rule."""
    produced = sealed_output(outcome, next((s for s in outcome.seals if s.file == "logits"), None))
    if isinstance(produced, str):
        return _failed(case, f"the logits: {produced}")
    expected = gold.logits(steps)[..., :forward.V]
    if produced.shape != gold.logits(steps).shape:
        return _failed(case, f"the logits have shape {list(produced.shape)}, expected {list(expected.shape)}")
    error = logits_error(produced[..., :forward.V], expected, forward.logits_max_abs)
    passed = error.passed(forward.logits_max_abs, forward.logits_rmse)
    message = (f"end to end (no gold swapped in): {error.words(forward.logits_max_abs, forward.logits_rmse)}")
    figures = dict(max_abs_err=error.largest, elements=error.elements, mismatches=error.over,
                   atol=forward.logits_max_abs, rtol=0.0,
                   first_mismatch=None if passed else Mismatch("logits", list(error.where),
                                                               float(expected[error.where]),
                                                               float(produced[error.where])))
    return CaseResult(case.name, case.public, CaseStatus.PASSED if passed else CaseStatus.FAILED, passed, message,
                      **figures)  # type: ignore[arg-type]


@dataclass(frozen=True)
class LogitsError:
    """Logits against their float64 gold, by the course's test_gpt2 rule: the largest error, where, and the RMSE."""

    largest: float  # inf where any logit is NaN or Inf
    where: tuple[int, ...]  # the largest's index
    rmse: float
    nonfinite: int
    over: int  # logits whose error exceeds the limit (NaN included)
    elements: int

    def passed(self, max_abs: float, rmse: float) -> bool:
        return not self.nonfinite and self.largest <= max_abs and self.rmse <= rmse

    def words(self, max_abs: float, rmse: float) -> str:
        text = (f"largest logit error {self.largest:.3g} at {list(self.where)} (the limit is {max_abs:g}), "
                f"RMSE {self.rmse:.3g} (the limit is {rmse:g})")
        return f"{text}; {self.nonfinite:,} logits are NaN or Inf" if self.nonfinite else text


def logits_error(produced: np.ndarray, expected: np.ndarray, max_abs: float) -> LogitsError:
    """`produced` (float32, the real vocabulary) against `expected` (float64, the same shape)."""
    error = np.abs(produced.astype(np.float64) - expected)
    finite = np.isfinite(error)
    ranked = np.where(finite, error, np.inf)
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(ranked)), error.shape))
    nonfinite = int((~finite).sum())
    rmse = float(math.sqrt(np.mean(error ** 2))) if not nonfinite else math.inf
    return LogitsError(float(ranked[where]), where, rmse, nonfinite, int((~(error <= max_abs)).sum()), int(error.size))


def generation(case: Case, outcome: CallOutcome, gold: ForwardGold, forward: Forward) -> CaseResult:
    """Greedy tokens against the reference's; at the first difference, a near tie in the reference is accepted."""
    produced = sealed_output(outcome, next((s for s in outcome.seals if s.file == "tokens"), None))
    margins = ", ".join(f"{m:.3g}" for m in gold.margins.reshape(-1))
    context = f"the reference's top-two logit gaps: {margins}; tie margin {forward.tie_margin:g}"
    if isinstance(produced, str):
        return _failed(case, f"the generated tokens: {produced}")
    if produced.shape != gold.tokens.shape:
        return _failed(case, f"the generated tokens have shape {list(produced.shape)}, expected {list(gold.tokens.shape)}")
    ties, wrong = [], []
    for row in range(forward.B):
        differing = np.flatnonzero(produced[row] != gold.tokens[row])
        if differing.size == 0:
            continue
        g = int(differing[0])
        margin = float(gold.margins[row, g])
        words = (f"token {g + 1} of {forward.generate} (row {row}) is {int(produced[row, g])} where the reference's is "
                 f"{int(gold.tokens[row, g])}, whose top two logits are {margin:.3g} apart")
        (ties if margin < forward.tie_margin else wrong).append(words)
    if wrong:
        return _failed(case, f"generated {wrong[0]} (more than the tie margin); {context}",
                       mismatches=len(wrong), elements=forward.B)
    tokens = " ".join(str(int(t)) for t in produced.reshape(-1))
    message = (f"accepted as a near tie: {'; '.join(ties)}; {context}" if ties
               else f"greedy generation gave the reference's {produced.size} token(s) [{tokens}]; {context}")
    return CaseResult(case.name, case.public, CaseStatus.PASSED, True, message, mismatches=0, elements=forward.B)


def tolerance_of(forward: Forward, kernel: Kernel) -> Tolerance:
    """A step's tolerance: the spec's [forward] tolerances for its kernel, else the kernel's own (a variant's copy's)."""
    return forward.tolerances.get(kernel.base) or kernel.tolerance


def forward_hints(passed: dict[str, bool]) -> list[str]:
    """What failing the check says beyond the kernels' own cases (passed: by case, those judged)."""
    if passed.get("layer-by-layer") is False:
        return ["In the forward pass each step is given the gold of the steps before it, as a kernel's own cases "
                "give it fresh inputs: a step that fails here while its kernel passes its own cases keeps state "
                "between calls (a cache keyed by shape, a static buffer), writes outside its own tensor, or relies "
                "on what other kernels left in memory."]
    if passed.get("layer-by-layer") and (passed.get("logits") is False or passed.get("generation") is False):
        return ["Every step passes with gold inputs, but end to end the pass drifts: each layer's error feeds the "
                "next, so look at what loses precision (sums in half precision, a one-pass variance, fast-math "
                "intrinsics) in the kernels closest to their tolerance."]
    return []
