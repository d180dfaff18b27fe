"""The competition's gold and gate, outside the sandbox: a run passes only where every generated step's logits are
within the [forward] check's logits rule of the float64 gold, and every token is the gold's greedy choice (or within
its tie margin of it).

The gold follows the tokens the submission generated: one float64 forward pass of the assignment's NumPy truth
over its final sequence gives the logits every step saw (causal attention: position t - 1's row depends on the
tokens up to it alone), so a legitimate near tie early on does not make every later step's gold another
sequence's. Cached by content: a class whose kernels generate the same tokens computes it once.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path
from types import ModuleType

import numpy as np

from grader.boundary.protocol import SliceArgument
from grader.boundary.timing_statistics import relative_standard_error
from grader.cache import content_key, gold_root, is_complete, new_entry, publish_folder
from grader.checks.forward.compose import gold_of_step, put, view
from grader.checks.forward.layout import Step, activation_tensors, total
from grader.checks.forward.spec import Forward
from grader.checks.forward.verdict import sealed_output
from grader.competition.spec import Run
from grader.competition.results import RunResult
from grader.runner import CallOutcome
from grader.status import CallStatus, TimingStatus
from grader.threadsafe import load_npy

STATUS_OF_CALL = {CallStatus.TIMEOUT: TimingStatus.TIMEOUT, CallStatus.CRASHED: TimingStatus.CRASHED,
                  CallStatus.NOT_RUN: TimingStatus.NOT_RUN}


def gold_logits(truth: ModuleType, f: Forward, steps: tuple[Step, ...], parameters: np.ndarray,
                sequence: np.ndarray) -> np.ndarray:
    """The float64 logits (generate, B, V) each generation step saw: one forward pass over `sequence` (B, T), each
    step's output rounded to float32 for the next (as the kernels' float32 is), the head on the rows read alone."""
    arrays = {"activations": np.zeros(total(activation_tensors(f)), np.float32), "parameters": parameters,
              "tokens": np.ascontiguousarray(sequence, dtype=np.int32).reshape(-1)}
    for step in steps[:-1]:
        (output,) = [a for a in step.plan.arguments if isinstance(a, SliceArgument) and a.role == "output"]
        put(arrays, output, gold_of_step(truth, step.kernel, step.plan.arguments, arrays)[output.name])
    head = steps[-1].plan.arguments
    lnf = next(a for a in head if isinstance(a, SliceArgument) and a.name == "inp")
    wte = next(a for a in head if isinstance(a, SliceArgument) and a.name == "weight")
    rows = view(arrays, lnf)[:, f.prompt_length - 1: f.prompt_length - 1 + f.generate]  # (B, generate, C)
    logits = getattr(truth, steps[-1].kernel)(inp=rows, weight=view(arrays, wte), bias=None)["out"][..., :f.V]
    return np.ascontiguousarray(np.asarray(logits, np.float64).transpose(1, 0, 2))


def cached_gold(truth: ModuleType, f: Forward, steps: tuple[Step, ...], inputs: Path, sequence: np.ndarray,
                cache_dir: Path) -> np.ndarray:
    """`gold_logits`, from the cache or computed now (keyed by the inputs, the shapes and the sequence)."""
    shapes = f"{f.B}:{f.T}:{f.prompt_length}:{f.generate}"
    folder = gold_root(cache_dir) / content_key("competition", inputs.name, shapes,
                                                np.ascontiguousarray(sequence, np.int32).tobytes())
    if not is_complete(folder):
        parameters = np.load(inputs / "parameters.npy", mmap_mode="r")
        staging = new_entry(folder)
        np.save(staging / "logits.npy", gold_logits(truth, f, steps, parameters, sequence))
        publish_folder(staging, folder)
    return np.asarray(load_npy(folder / "logits.npy"))


def judge_run(run: Run, f: Forward, outcome: CallOutcome | None, prompt: np.ndarray, gold_of) -> RunResult:
    """One run's result: its speed where it passed the gate, else what the gate (or the call) found.

    prompt: the run's tokens (B, T), its first `run.prompt` columns given; gold_of: the sequence (B, T) the
    submission generated -> the gold logits (generate, B, V) (`cached_gold`).
    """
    blank = RunResult(run.name, run.B, run.prompt, run.generate, TimingStatus.NOT_RUN)
    if outcome is None:
        return dataclasses.replace(blank, message="was never run")
    if outcome.status != CallStatus.OK:
        return dataclasses.replace(blank, status=STATUS_OF_CALL.get(outcome.status, TimingStatus.CRASHED),
                                   message=outcome.message or str(outcome.status))
    seals = {s.file: s for s in outcome.seals}
    saved = {name: sealed_output(outcome, seals.get(name)) for name in ("tokens", "logits", "times")}
    missing = next(((n, v) for n, v in saved.items() if isinstance(v, str)), None)
    if missing is not None:
        return dataclasses.replace(blank, status=TimingStatus.CRASHED, message=f"its {missing[0]}: {missing[1]}")
    tokens, logits, times = (np.asarray(saved[n]) for n in ("tokens", "logits", "times"))
    expected = {"tokens": (run.B, run.generate), "logits": (run.generate, run.B, f.Vp)}
    if tokens.ndim != 3 or tokens.shape[1:] != expected["tokens"] or logits.shape != expected["logits"] \
            or times.ndim != 2 or times.shape != (tokens.shape[0], 2) or not len(times):
        return dataclasses.replace(blank, status=TimingStatus.CRASHED,
                                   message=f"saved outputs of unexpected shapes (tokens {list(tokens.shape)}, logits "
                                           f"{list(logits.shape)}, times {list(times.shape)})")
    samples = tuple(float(s) for s in times[:, 0])
    timed = dataclasses.replace(blank, status=TimingStatus.TIMED, samples_s=samples,
                                wall_samples_s=tuple(float(s) for s in times[:, 1]),
                                median_s=statistics.median(samples), rse=relative_standard_error(list(samples)),
                                tokens=tuple(tuple(int(t) for t in row) for row in tokens[-1]))
    differing = next((r for r in range(1, len(tokens)) if not np.array_equal(tokens[r], tokens[0])), None)
    if differing is not None:
        return dataclasses.replace(timed, status=TimingStatus.WRONG, median_s=None,
                                   message=f"gated out: timed generation {differing + 1} gave other tokens than "
                                           "the first from the same prompt (state kept between generations?)")
    sequence = np.concatenate([prompt[:, :run.prompt], tokens[-1]], axis=1)
    return gate(timed, f, logits, tokens[-1], gold_of(sequence))


def gate(timed: RunResult, f: Forward, logits: np.ndarray, tokens: np.ndarray, gold: np.ndarray) -> RunResult:
    """The gate on one run's last timed generation: each step's logits by the [forward] logits rule (largest error
    and RMSE), then each token against the gold's greedy choice and the tie margin."""
    error = np.abs(logits[..., :f.V].astype(np.float64) - gold)
    finite = np.isfinite(error)
    largest = float(np.where(finite, error, np.inf).max())
    rmses = [math.sqrt(float(np.mean(error[g] ** 2))) if finite[g].all() else math.inf for g in range(len(error))]
    judged = dataclasses.replace(timed, max_abs_err=largest, rmse=max(rmses))
    for g in range(len(error)):
        step_largest = float(np.where(finite[g], error[g], np.inf).max())
        if step_largest > f.logits_max_abs or rmses[g] > f.logits_rmse:
            b, v = np.unravel_index(int(np.argmax(np.where(finite[g], error[g], np.inf))), error[g].shape)
            nan = f"; {int((~finite[g]).sum()):,} logits are NaN or Inf" if not finite[g].all() else ""
            return dataclasses.replace(judged, status=TimingStatus.WRONG, median_s=None, message=(
                f"gated out: the logits of generated token {g + 1} of {len(error)}: largest error {step_largest:.3g} "
                f"(row {b}, vocabulary entry {v}; the limit is {f.logits_max_abs:g}), RMSE {rmses[g]:.3g} (the limit "
                f"is {f.logits_rmse:g}) against the float64 gold{nan}"))
    for g in range(len(error)):
        for b in range(tokens.shape[0]):
            chosen, best = int(tokens[b, g]), int(np.argmax(gold[g, b]))
            gap = float(gold[g, b, best] - gold[g, b, chosen])
            if gap > f.tie_margin:
                return dataclasses.replace(judged, status=TimingStatus.WRONG, median_s=None, message=(
                    f"gated out: generated token {g + 1} of {len(error)} (row {b}) is {chosen} where the gold's "
                    f"greedy choice is {best}, whose logit is {gap:.3g} higher (the tie margin is {f.tie_margin:g})"))
    return dataclasses.replace(judged, message=(
        f"gated in: every generated step's logits within {f.logits_max_abs:g} (largest {largest:.3g}) and RMSE "
        f"{f.logits_rmse:g} (largest {max(rmses):.3g}) of the float64 gold, every token its greedy choice"))
