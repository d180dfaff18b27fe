"""The decode check's cases judged, its result as a kernel's, and its hints, in a student's words.

Each KV run's logits are judged step by step against the baseline (the student's own full recompute of the same
tokens) by the course's verify_kv_cache rule and the forward check's, and against the float64 gold by the forward
check's; the speed-up per token and on average, the attention calls' own speed-up and the cache's device memory are
reported. A timed case whose attention is not faster with the cache than without is flagged (it recomputes):
reported, and a cost where the spec's speedup_penalty says so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from grader.build import Artifact
from grader.checks.decode.gold import DecodeGold
from grader.checks.decode.harness_half import MEMORY, TIMES
from grader.checks.decode.spec import DECODE, Decode, DecodeCase
from grader.checks.forward.verdict import logits_error, sealed_output
from grader.results import CaseResult, Deduction, KernelResult, Mismatch
from grader.runner import CallOutcome
from grader.scoring import case_result, score_kernel
from grader.assignment import Case, Kernel
from grader.status import BuildStatus, CallStatus, CaseStatus

MIB = 1 << 20


@dataclass(frozen=True)
class StepErrors:
    """A run's logits against the baseline's (the same tokens, the cache off), step by step: by verify_kv_cache's rule
    (err = min(|a - e|, |a - e| / max(1e-3, |e|)) per logit, the largest per step) and by the forward check's (each
    step's largest |a - e| and RMSE: the course's rule alone lets small logits drift far, and its RMSE goes unused)."""

    course: np.ndarray  # (steps,) the largest course error (inf where a logit is NaN or Inf)
    absolute: np.ndarray  # (steps,) the largest |a - e|
    rmse: np.ndarray  # (steps,)
    failing: tuple[int, ...]  # the steps over any limit

    @property
    def passed(self) -> bool:
        return not self.failing

    @property
    def largest(self) -> float:
        return float(self.course.max())


def step_errors(produced: np.ndarray, baseline: np.ndarray, d: Decode) -> StepErrors:
    a, e = produced.astype(np.float64), baseline.astype(np.float64)
    steps = a.shape[0]
    difference = np.abs(a - e).reshape(steps, -1)
    finite = np.isfinite(difference)
    course = np.where(finite, np.minimum(difference, difference / np.maximum(1e-3, np.abs(e).reshape(steps, -1))),
                      np.inf).max(axis=1)
    absolute = np.where(finite, difference, np.inf).max(axis=1)
    rmse = np.sqrt(np.mean(np.where(finite, difference, np.inf) ** 2, axis=1))
    over = ~((course <= d.course_error) & (absolute <= d.logits_max_abs) & (rmse <= d.logits_rmse))
    return StepErrors(course, absolute, rmse, tuple(int(t) for t in np.flatnonzero(over)))


@dataclass(frozen=True)
class Speed:
    """A case's times (ms of its kernels): per step the baseline's forward over prompt + t tokens against the KV run's
    (step 0: both a prefill), and the attention calls' alone."""

    per_token: tuple[float, ...]  # baseline / KV forward time, step by step
    average: float  # over the decode steps (1 ...): the baseline's total time over the KV run's
    attention: float  # the same, of the attention calls alone

    @classmethod
    def of(cls, times: np.ndarray) -> Speed:
        baseline, kv = times[0], times[1]  # the first KV run's
        ratio = baseline[:, 0] / np.maximum(kv[:, 0], 1e-9)
        decode = slice(1, None)
        return cls(tuple(float(r) for r in ratio), float(baseline[decode, 0].sum() / max(kv[decode, 0].sum(), 1e-9)),
                   float(baseline[decode, 1].sum() / max(kv[decode, 1].sum(), 1e-9)))

    def words(self) -> str:
        shown = ", ".join(f"{times_words(r)}x" for r in self.per_token[:5])
        if len(self.per_token) > 5:
            shown += f"{', …' if len(self.per_token) > 6 else ','} last {times_words(self.per_token[-1])}x"
        return (f"speed-up per token {shown} (the first a prefill in both), {times_words(self.average)}x on average "
                f"over the decode steps (attention calls alone: {times_words(self.attention)}x)")


def times_words(ratio: float) -> str:
    """A ratio as a reader takes it in: 0.93, 3.5, 41 (never in exponent notation)."""
    return f"{ratio:.2f}" if ratio < 1 else f"{ratio:.1f}" if ratio < 10 else f"{ratio:.0f}"


def decode_result(check: Kernel, d: Decode, outcomes: dict[str, CallOutcome | None], gold: DecodeGold | None,
                  log: str = "") -> KernelResult:
    """The check's result: its cases, scored like a kernel's; a flagged recomputation costs speedup_penalty."""
    cases, flags, judged = [], [], {}
    for case in check.cases:
        spec = d.case(case.name)
        outcome = outcomes.get(case.name)
        if outcome is None or outcome.status != CallStatus.OK or (gold is None and spec.gold):
            cases.append(case_result(case, outcome, None))
            continue
        result, flag, facts = judge(case, spec, d, outcome, gold.logits.get(case.name) if gold else None)
        cases.append(dataclasses.replace(result, wall_ms=outcome.wall_ms, device_ms=outcome.device_ms))
        judged[case.name] = facts
        if flag:
            flags.append(flag)
    artifact = Artifact(check.name, BuildStatus.BUILT, None, "", (), True, 0.0)
    result = dataclasses.replace(score_kernel(check, artifact, cases, None, log), check=DECODE,
                                 check_hints=decode_hints(judged, flags))
    if not flags:
        return result
    reason = f"the KV cache is not faster: {flags[0]}"
    if d.speedup_penalty <= 0 or result.score <= 0:
        return dataclasses.replace(result, message=f"{reason} (reported, not scored); {result.message}")
    points = min(result.score, check.weight * d.speedup_penalty)
    return dataclasses.replace(result, score=round(result.score - points, 6), status=type(result.status).FAILED,
                               deductions=[*result.deductions, Deduction(reason, round(points, 6))],
                               message=f"{reason}; {result.message}")


@dataclass(frozen=True)
class Facts:
    """What a judged case found, for the hints: which part went wrong where."""

    prefill_right: bool  # every run's step 0 matched the baseline
    decode_right: bool  # the first run's decode steps did
    later_runs_right: bool  # the runs after the first matched as the first did
    baseline_gold: bool | None  # the baseline itself within the gold rule (None: no gold)


def judge(case: Case, spec: DecodeCase, d: Decode, outcome: CallOutcome,
          gold: np.ndarray | None) -> tuple[CaseResult, str, Facts]:
    """One case: each KV run against the baseline and the gold; its speed-up; its flag ("" if none)."""
    seals = {s.file: s for s in outcome.seals}
    produced = {name: sealed_output(outcome, seals.get(name)) for name in spec.outputs}
    problems = [f"{name}: {value}" for name, value in produced.items() if isinstance(value, str)]
    if problems:
        return _failed(case, "; ".join(problems)), "", Facts(False, False, False, None)
    baseline = produced["baseline"]
    times, memory = produced[TIMES], produced[MEMORY]
    speed = Speed.of(times)  # type: ignore[arg-type]
    cache = "; ".join(_memory_words(row, run + 1, spec.runs) for run, row in enumerate(memory))  # type: ignore
    context = f"{spec.generate} tokens after a prompt of {spec.prompt} (B={spec.B})"
    baseline_gold = None
    if gold is not None:
        baseline_gold = logits_error(baseline, gold, d.logits_max_abs).passed(d.logits_max_abs,  # type: ignore
                                                                                d.logits_rmse)
    first_failure: CaseResult | None = None
    runs_right, largest, worst_rmse, gold_words = [], 0.0, 0.0, ""
    for run in range(1, spec.runs + 1):
        logits = produced[f"kv-{run}"]
        verdict = step_errors(logits, baseline, d)  # type: ignore[arg-type]
        largest = max(largest, verdict.largest)
        worst_rmse = max(worst_rmse, float(verdict.rmse.max()))
        name = f"KV run {run}" if spec.runs > 1 else "with the cache"
        if not verdict.passed and first_failure is None:
            first_failure = _course_failure(case, spec, d, name, verdict, logits, baseline)  # type: ignore[arg-type]
        gold_right = True
        if gold is not None:
            error = logits_error(logits, gold, d.logits_max_abs)  # type: ignore[arg-type]
            gold_right = error.passed(d.logits_max_abs, d.logits_rmse)
            gold_words = gold_words or f"the float64 gold: {error.words(d.logits_max_abs, d.logits_rmse)}"
            if not gold_right and verdict.passed and first_failure is None:
                also = "" if baseline_gold else " (and so does the full recompute: the kernels themselves are off)"
                first_failure = _failed(case, f"{context}, {name}: the logits match the full recompute but not the "
                                              f"float64 gold{also}: {error.words(d.logits_max_abs, d.logits_rmse)}",
                                        max_abs_err=error.largest, mismatches=error.over, elements=error.elements)
        runs_right.append((verdict, gold_right))
    first = runs_right[0][0]
    facts = Facts(prefill_right=all(0 not in v.failing for v, _ in runs_right),
                  decode_right=first.passed or first.failing == (0,),
                  later_runs_right=all(v.passed and g for v, g in runs_right[1:]), baseline_gold=baseline_gold)
    flag = ""
    if spec.timed and speed.attention < d.min_attention_speedup:
        flag = (f"in '{spec.name}' ({spec.prompt} + {spec.generate} tokens) the attention calls with the cache take "
                f"{times_words(1 / max(speed.attention, 1e-9))}x the full recompute's time (a speed-up of "
                f"{times_words(speed.attention)}x, "
                f"at least {d.min_attention_speedup:g}x expected): a decode step should attend from the new token "
                "alone over the cached K and V (work growing with T), not recompute every query's row of the whole "
                "sequence (T x T)")
    figures = f"{speed.words()}; {cache}"
    if first_failure is not None:
        return dataclasses.replace(first_failure, message=f"{first_failure.message}; {figures}"), flag, facts
    rule = (f"the course's rule: the largest error {largest:.2g}, the limit {d.course_error:g}; the largest step RMSE "
            f"{worst_rmse:.2g}, the limit {d.logits_rmse:g}")
    message = (f"{context}, {spec.runs} KV runs: " if spec.runs > 1 else f"{context}: ") + \
        f"every step's logits match the full recompute ({rule})" + (f" and {gold_words}" if gold_words else "") + \
        f"; {figures}" + (f"; FLAGGED: {flag}" if flag else "")
    return CaseResult(case.name, case.public, CaseStatus.PASSED, True, message, max_abs_err=largest,
                      mismatches=0, elements=int(baseline.size) * spec.runs), flag, facts  # type: ignore[union-attr]


def _course_failure(case: Case, spec: DecodeCase, d: Decode, name: str, verdict: StepErrors, logits: np.ndarray,
                    baseline: np.ndarray) -> CaseResult:
    step = verdict.failing[0]  # the first that differs, at its largest error
    row, logit = _worst_in(logits[step], baseline[step])
    what = "the prefill (its last position)" if step == 0 else \
        f"decode step {step} of {spec.generate - 1} (the token at position {spec.prompt + step - 1})"
    got, expected = float(logits[step, row, logit]), float(baseline[step, row, logit])
    decode_steps = [s for s in verdict.failing if s > 0]
    count = f"; {len(decode_steps)} of {spec.generate - 1} decode steps differ" if decode_steps else ""
    prefill = "" if 0 in verdict.failing else "; the prefill's logits match"
    message = (f"{spec.generate} tokens after a prompt of {spec.prompt} (B={spec.B}), {name}: {what}, row {row}: "
               f"logit {logit} is {got:.4g} where the full recompute gives {expected:.4g} (the course's error "
               f"{_error(got, expected):.3g}, its limit {d.course_error:g}; the step's RMSE {verdict.rmse[step]:.3g}, "
               f"the limit {d.logits_rmse:g}){count}{prefill}")
    return _failed(case, message, max_abs_err=verdict.largest, mismatches=len(verdict.failing),
                   elements=spec.generate, first_mismatch=Mismatch(name, [step, row, logit], expected, got))


def _worst_in(produced: np.ndarray, baseline: np.ndarray) -> tuple[int, int]:
    difference = np.abs(produced.astype(np.float64) - baseline)
    error = np.where(np.isfinite(difference), np.minimum(difference, difference / np.maximum(1e-3, np.abs(baseline))),
                     np.inf)
    row, logit = np.unravel_index(int(np.argmax(error)), error.shape)
    return int(row), int(logit)


def _error(got: float, expected: float) -> float:
    difference = abs(got - expected)
    return min(difference, difference / max(1e-3, abs(expected))) if np.isfinite(difference) else float("inf")


def _memory_words(row: np.ndarray, run: int, runs: int) -> str:
    before, after, set_ = (int(v) for v in row)
    which = f"run {run}: " if runs > 1 else ""
    if not set_:
        return f"{which}g_kv_cache was never set (the cache, if any, is not where the course's harness frees it)"
    return f"{which}the cache took {(before - after) / MIB:.1f} MiB of device memory"


def _failed(case: Case, message: str, **figures: object) -> CaseResult:
    return CaseResult(case.name, case.public, CaseStatus.FAILED, False, message, **figures)  # type: ignore[arg-type]


def decode_hints(judged: dict[str, Facts], flags: list[str]) -> list[str]:
    """What failing the check says beyond its cases' messages (judged: by case, what its runs found)."""
    hints = []
    facts = list(judged.values())
    if any(f.baseline_gold is False for f in facts):
        hints.append("With the cache off the logits already differ from the float64 gold: the kernels themselves are "
                     "wrong or imprecise (the forward check says which step).")
    if any(f.prefill_right and not f.decode_right for f in facts):
        hints.append("The prefill matches the full recompute and the decode steps do not: each decode step must store "
                     "the new token's K and V at g_current_pos (its absolute position, which the harness sets before "
                     "the step) and attend over positions 0 to g_current_pos, scaled by 1/sqrt(HS).")
    if any(not f.prefill_right for f in facts):
        hints.append("With the cache on, the prefill's logits differ from the full recompute: the prefill must store "
                     "the prompt's K and V before computing attention exactly as with the cache off (the baseline "
                     "overwrites inp with its scores).")
    order = list(judged)  # the cases in the order one harness process ran them
    if order and judged[order[0]].decode_right and judged[order[0]].later_runs_right and \
            any(not judged[name].decode_right for name in order[1:]):
        hints.append("The first program in the harness's process is right and a later one is not: state outlives "
                     "the program (a cache pointer or a position kept in statics, sized or counted by an earlier "
                     "run). The harness frees g_kv_cache and sets it to nullptr, g_is_prefill true and g_layer_idx "
                     "and g_current_pos 0 before each, as a new program starts.")
    elif any(f.decode_right and f.prefill_right and not f.later_runs_right for f in facts):
        hints.append("The first run is right and a later one is not: state outlives the run. The harness frees "
                     "g_kv_cache and sets it to nullptr, sets g_is_prefill true and g_layer_idx and g_current_pos to "
                     "0 between runs, as a new program starts; keep no position or cache of your own in statics.")
    if flags:
        hints.append("Right logits, no saving: " + flags[0] + ".")
    return hints
