"""The gold forward pass, computed by the grader from the same inputs and the same assignment functions the
harness uses for its swap-in gold: each step in float64 from the float32-rounded gold before it (what
the student's step was given), the logits, and the reference's greedy tokens with its top-two
margin at each. Cached by content: a class of 300 computes it once.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grader.boundary.protocol import SliceArgument
from grader.cache import content_key, gold_root, is_complete, new_entry, publish_folder
from grader.checks.forward.compose import gold_of_step, next_tokens, put, view
from grader.checks.forward.inputs import PARAMETERS_FILE, TOKENS_FILE
from grader.checks.forward.layout import Step, activation_tensors, total
from grader.checks.forward.spec import Forward
from grader.assignment import Assignment
from grader.threadsafe import load_npy

FACTS_FILE = "facts.json"


@dataclass(frozen=True)
class ForwardGold:
    steps: dict[str, np.ndarray]  # step file -> its output's gold (float64, the spec's shape)
    tokens: np.ndarray  # (B, generate) the reference's greedy tokens
    margins: np.ndarray  # (B, generate) its top-two logit gap at each of them
    seconds: float  # what computing it took (measured once, kept with the entry)

    def logits(self, steps: tuple[Step, ...]) -> np.ndarray:
        return self.steps[steps[-1].plan.output]


def forward_gold(assignment: Assignment, f: Forward, steps: tuple[Step, ...], inputs: Path,
                 cache_dir: Path) -> ForwardGold:
    """The gold of every step, and the reference's tokens: from the cache, or computed now."""
    layout = json.dumps([[s.plan.kernel, [repr(a) for a in s.plan.arguments]] for s in steps])
    folder = gold_root(cache_dir) / content_key("forward", inputs.name, layout, f"{f.prompt_length}:{f.generate}")
    if not is_complete(folder):
        _compute(assignment, f, steps, inputs, folder)
    facts = json.loads((folder / FACTS_FILE).read_text())
    flat = load_npy(folder / "steps.npy", mmap=True)
    gold, at = {}, 0
    for step in steps:
        (output,) = _outputs(step)
        size = int(np.prod(output.shape))
        gold[step.plan.output] = np.asarray(flat[at: at + size]).reshape(output.shape)
        at += size
    return ForwardGold(gold, load_npy(folder / "tokens.npy"), load_npy(folder / "margins.npy"), facts["seconds"])


def _outputs(step: Step) -> list[SliceArgument]:
    return [a for a in step.plan.arguments if isinstance(a, SliceArgument) and a.role == "output"]


def _compute(assignment: Assignment, f: Forward, steps: tuple[Step, ...], inputs: Path, folder: Path) -> None:
    started = time.perf_counter()
    truth = assignment.numpy_reference()
    parameters = np.load(inputs / PARAMETERS_FILE, mmap_mode="r")
    tokens = np.load(inputs / TOKENS_FILE)
    outputs = gold_pass(truth, f, steps, parameters, tokens)
    generated, margins = reference_tokens(truth, f, steps, parameters, tokens)
    staging = new_entry(folder)
    np.save(staging / "steps.npy", np.concatenate([o.reshape(-1) for o in outputs]))
    np.save(staging / "tokens.npy", generated)
    np.save(staging / "margins.npy", margins)
    (staging / FACTS_FILE).write_text(json.dumps({"seconds": round(time.perf_counter() - started, 3)}))
    publish_folder(staging, folder)


def gold_pass(truth, f: Forward, steps: tuple[Step, ...], parameters: np.ndarray,
              tokens: np.ndarray) -> list[np.ndarray]:
    """Every step's float64 output over `tokens` (B, T), each swapped in (rounded to float32) for the steps after it:
    the last is the logits (B, T, Vp), every position's at once (causal attention: position t sees tokens 0..t)."""
    arrays = _arrays(f, parameters, tokens)
    return [_step(truth, step, arrays) for step in steps]


def _arrays(f: Forward, parameters: np.ndarray, tokens: np.ndarray) -> dict[str, np.ndarray]:
    return {"activations": np.zeros(total(activation_tensors(f)), np.float32), "parameters": parameters,
            "tokens": np.ascontiguousarray(tokens, dtype=np.int32).reshape(-1)}


def _step(truth, step: Step, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """One step's gold, then swapped in (rounded to float32) for the steps after it."""
    (output,) = _outputs(step)
    gold = gold_of_step(truth, step.kernel, step.plan.arguments, arrays)[output.name]
    put(arrays, output, gold)
    return gold


def reference_tokens(truth, f: Forward, steps: tuple[Step, ...], parameters: np.ndarray,
                     tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Greedy generation by the gold forward pass at the fixed B, T, and the top-two gap of each choice.

    Only position t - 1's logits are needed: the vocabulary head is applied to that row alone.
    """
    sequence = np.zeros((f.B, f.T), np.int32)
    sequence[:, :f.prompt_length] = tokens[:, :f.prompt_length]
    generated = np.zeros((f.B, f.generate), np.int32)
    margins = np.zeros((f.B, f.generate))
    head = steps[-1]
    lnf = next(a for a in head.plan.arguments if isinstance(a, SliceArgument) and a.name == "inp")
    wte = next(a for a in head.plan.arguments if isinstance(a, SliceArgument) and a.name == "weight")
    for g, position in enumerate(range(f.prompt_length, f.prompt_length + f.generate)):
        arrays = _arrays(f, parameters, sequence)
        for step in steps[:-1]:
            _step(truth, step, arrays)
        rows = view(arrays, lnf)[:, position - 1]
        logits = getattr(truth, head.kernel)(inp=rows, weight=view(arrays, wte), bias=None)["out"][:, :f.V]
        generated[:, g] = sequence[:, position] = next_tokens(logits, f.V)
        top = np.sort(logits, axis=-1)[:, -2:]
        margins[:, g] = top[:, 1] - top[:, 0]
    return generated, margins
