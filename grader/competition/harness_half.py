"""The harness's half of the competition: one run's greedy generation through the student's six kernels, timed.

The composition is the forward check's (`grader.checks.forward.layout`: the course's allocations and steps) at
the run's B and T. A generation is the forward check's: for each new token every step is called over the whole
window (full recompute at fixed shapes; causal attention makes the positions after the current one irrelevant),
the rows of position t - 1 read back and the most likely real token appended. `warmup` generations are not
timed; then generations are timed until the timing protocol's stop rule says so
(`grader.boundary.timing_statistics`). A generation's time is its kernels' time: the sum over its steps of each
call's device time (the shim's CUDA events around the student's host function, as a kernel's case is timed; a
CPU kernel's: its wall clock), not the harness's own Python between the calls.

Sealed, in order: `tokens` (every timed generation's tokens: a run that generates differently from one repeat to
the next keeps state), `logits` (the last timed generation's rows, one per generated token) and `times` (each timed
generation's kernel seconds and wall seconds). No gold enters this process: the grader judges outside.

NumPy, `grader.boundary`, `grader.checks.program` and `grader.checks.forward.compose` only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from grader.boundary.timing_statistics import StopRule, stop_reason
from grader.checks.forward.compose import next_tokens
from grader.checks.program import Emit, Program, seal

if TYPE_CHECKING:
    from grader.boundary.device import Completion, Device
    from grader.boundary.protocol import Composition

SEALED = ("tokens", "logits", "times")


@dataclass(frozen=True)
class Generation:
    """What a competition call's composition carries of its own (its `settings`)."""

    B: int
    T: int
    V: int
    Vp: int
    prompt: int
    generate: int
    logits_offset: int  # where the logits (B, T, Vp) start in the activations
    warmup: int
    min_repeats: int
    max_repeats: int
    rse: float
    cap_s: float

    @property
    def rule(self) -> StopRule:
        return StopRule(self.min_repeats, self.max_repeats, self.rse, self.cap_s)


@dataclass
class Generated:
    """One generation: its tokens (B, generate), its logits rows (generate, B, Vp), its kernel and wall seconds."""

    tokens: np.ndarray
    logits: np.ndarray
    kernel_s: float
    wall_s: float


def run(composition: Composition, output_dir: Path, device: Device, libraries: dict[str, Any], emit: Emit,
        index: int) -> Completion:
    """Warm up, time generations until the stop rule says so, and seal what the grader judges."""
    settings = Generation(**composition.settings)
    output_dir.mkdir(parents=True, exist_ok=True)
    program = Program(composition, device, libraries)
    prompt = np.load(composition.spaces["tokens"].file).astype(np.int32).reshape(settings.B, settings.T)
    for _ in range(settings.warmup):
        generated = _generate(program, settings, prompt)
        if not isinstance(generated, Generated):
            return program.finished(generated)
    timed: list[Generated] = []
    began, reason = time.perf_counter(), None
    while reason is None:
        generated = _generate(program, settings, prompt)
        if not isinstance(generated, Generated):
            return program.finished(generated)
        timed.append(generated)
        reason = stop_reason([g.kernel_s for g in timed], time.perf_counter() - began, settings.rule)
    seal(output_dir, "tokens", np.stack([g.tokens for g in timed]), emit, index)
    seal(output_dir, "logits", timed[-1].logits, emit, index)
    seal(output_dir, "times", np.array([[g.kernel_s, g.wall_s] for g in timed], np.float64), emit, index)
    return program.finished()


def _generate(program: Program, settings: Generation, prompt: np.ndarray) -> Generated | Completion:
    """One greedy generation after the prompt; the failed step's completion where a call failed."""
    tokens = np.zeros((settings.B, settings.T), np.int32)
    tokens[:, :settings.prompt] = prompt[:, :settings.prompt]
    logits = np.zeros((settings.generate, settings.B, settings.Vp), np.float32)
    kernel_ms = 0.0
    started = time.perf_counter()
    for g, position in enumerate(range(settings.prompt, settings.prompt + settings.generate)):
        program.device.write(program.spaces["tokens"], 0, tokens.reshape(-1))
        for step in program.composition.steps:
            device_before, wall_before = program.device_ms, program.wall_ms
            if failed := program.call(step):
                return failed
            # The call's device time where the target measures one (CUDA events), else its wall clock (a CPU kernel).
            kernel_ms += program.device_ms - (device_before or 0.0) if program.device_ms is not None \
                else program.wall_ms - wall_before
        for b in range(settings.B):
            logits[g, b] = program.device.read(program.spaces["activations"], settings.logits_offset
                                               + (b * settings.T + position - 1) * settings.Vp, settings.Vp)
        tokens[:, position] = next_tokens(logits[g], settings.V)
    return Generated(np.ascontiguousarray(tokens[:, settings.prompt:]), logits, kernel_ms / 1000,
                     time.perf_counter() - started)
