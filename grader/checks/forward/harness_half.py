"""The harness's half of the forward-pass check: the student's kernels composed on the device, one of
the three passes a call (`Pass.mode`).

Activations live in one zeroed allocation and parameters in another, laid out as the course's
program lays them out; each step's kernel gets pointers into them (`grader.checks.program`).

Gold enters this process deliberately, and only just in time (the one exception to "gold never
enters the harness"): in the layer-by-layer pass, a step's swap-in gold is computed here, in
float64 with the assignment's trusted numpy_reference.py, from the gold already swapped in, and only
after the student's step returned and its output was saved and sealed (its digest in a `sealed`
event, which the runner reads as it is written). Student code therefore never sees a step's gold
before that step ran, and a lingering thread that rewrites a saved output afterwards is caught by
its seal. The grader computes the same gold outside, for the compare (`grader.checks.forward.gold`).

NumPy, `grader.boundary.protocol`, `grader.checks.program` and `grader.checks.forward.compose` only.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from grader.boundary.protocol import POISON_BITS, Composition, SliceArgument
from grader.checks.forward.compose import gold_of_step, next_tokens, put
from grader.checks.program import Emit, Program, seal

if TYPE_CHECKING:
    from grader.boundary.device import Completion, Device


@dataclass(frozen=True)
class Pass:
    """What a forward-pass call's composition carries of its own (its `settings`): the pass, and the shapes.

    `layers`: every step saved, its gold computed here from the assignment's NumPy truth (float64) and swapped
    in only once the step's output was saved and sealed; `logits`: end to end, the logits saved;
    `generation`: greedy tokens from end-to-end passes at the fixed B, T.
    """

    mode: str  # "layers", "logits" or "generation"
    reference_file: str  # the assignment's numpy_reference.py (trusted), copied beside the inputs
    logits_offset: int  # where the logits (B, T, Vp) start in the activations
    B: int
    T: int
    V: int
    Vp: int
    prompt: int  # generation: tokens given; each pass adds one
    generate: int


def run(composition: Composition, output_dir: Path, device: Device, libraries: dict[str, Any], emit: Emit,
        index: int) -> Completion:
    """Run the call's pass; every output is saved under `output_dir` and sealed."""
    forward = Pass(**composition.settings)
    output_dir.mkdir(parents=True, exist_ok=True)
    program = Program(composition, device, libraries)
    if forward.mode == "layers":
        return _layer_by_layer(program, forward, output_dir, emit, index)
    if forward.mode == "logits":
        for step in composition.steps:
            if failed := program.call(step):
                return program.finished(failed)
        logits = device.read(program.spaces["activations"], forward.logits_offset, forward.B * forward.T * forward.Vp)
        seal(output_dir, "logits", logits.reshape(forward.B, forward.T, forward.Vp), emit, index)
        return program.finished()
    return _generation(program, forward, output_dir, emit, index)


def _tokens(program: Program) -> np.ndarray:
    return np.load(program.composition.spaces["tokens"].file).astype(np.int32)


def _layer_by_layer(program: Program, forward: Pass, output_dir: Path, emit: Emit, index: int) -> Completion:
    composition = program.composition
    truth = _module(forward.reference_file)
    host = {"activations": np.zeros(composition.spaces["activations"].count, np.float32),
            "parameters": np.load(composition.spaces["parameters"].file, mmap_mode="r"),
            "tokens": _tokens(program).reshape(-1)}
    for number, step in enumerate(composition.steps):
        slices = [a for a in step.arguments if isinstance(a, SliceArgument) and not a.null]
        inputs = [a for a in slices if a.role == "input" and not a.mutable]
        # The activations beside the step's own slices (its outputs, scratch and mutable inputs), where a write
        # past an end lands: the next layer's slice of the same tensor, or the next tensor.
        guarded = program.beside("activations", [(a.offset, a.count) for a in slices if a.space == "activations"
                                                  and (a.role != "input" or a.mutable)])
        (output,) = [a for a in slices if a.role == "output"]
        # Poisoned, as a kernel's case poisons its outputs: an element the step never wrote is named so.
        program.device.fill(program.spaces["activations"], output.offset, int(np.prod(output.shape)),
                            POISON_BITS[output.dtype][1])
        inputs_before = [program.digest(a.space, a.offset, a.count) for a in inputs]
        guarded_before = [program.digest("activations", o, c) for o, c in guarded]
        if failed := program.call(step):
            return program.finished(failed)
        produced = program.read(output)
        modified = tuple(a.name for a, d in zip(inputs, inputs_before)
                         if program.digest(a.space, a.offset, a.count) != d)
        changed = [(o, c) for (o, c), d in zip(guarded, guarded_before) if program.digest("activations", o, c) != d]
        outside = program.landed("activations", host["activations"], changed) if changed else ()
        seal(output_dir, step.output, produced, emit, index, modified, outside)
        if number + 1 < len(composition.steps):  # sealed: only now may its gold exist here
            for name, gold in gold_of_step(truth, step.kernel, step.arguments, host).items():
                put(host, output, gold)
                program.device.write(program.spaces["activations"], output.offset,
                                     host["activations"][output.offset: output.offset + gold.size])
    return program.finished()


def _generation(program: Program, forward: Pass, output_dir: Path, emit: Emit, index: int) -> Completion:
    """Greedy tokens: pass after pass at the fixed B, T, each reading position t - 1 (causal attention makes
    the padding after it irrelevant); the activations are reused between passes, as the course's loop does."""
    tokens = np.zeros((forward.B, forward.T), np.int32)
    tokens[:, :forward.prompt] = _tokens(program)[:, :forward.prompt]
    for position in range(forward.prompt, forward.prompt + forward.generate):
        program.device.write(program.spaces["tokens"], 0, tokens.reshape(-1))
        for step in program.composition.steps:
            if failed := program.call(step):
                return program.finished(failed)
        rows = np.stack([program.device.read(program.spaces["activations"],
                                             forward.logits_offset + (b * forward.T + position - 1) * forward.Vp,
                                             forward.Vp)
                         for b in range(forward.B)])
        tokens[:, position] = next_tokens(rows, forward.V)
    seal(output_dir, "tokens", np.ascontiguousarray(tokens[:, forward.prompt:]), emit, index)
    return program.finished()


def _module(path: str) -> ModuleType:
    """The assignment's numpy_reference.py (trusted assignment code, copied beside the inputs) as a module."""
    spec = importlib.util.spec_from_file_location("kernel_grader_forward_truth", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
