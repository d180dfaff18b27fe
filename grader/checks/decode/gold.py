"""Each case's gold: the float64 logits at every position a step reads, from one gold pass of the forward check's
over the case's whole sequence (teacher forcing feeds that sequence, so step t's gold is position prompt + t - 1's).
Cached by content: a class of 300 computes it once."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grader.cache import content_key, gold_root, is_complete, new_entry, publish_folder
from grader.checks.decode.inputs import tokens_file
from grader.checks.decode.spec import Decode
from grader.checks.forward.gold import gold_pass
from grader.checks.forward.inputs import PARAMETERS_FILE
from grader.checks.forward.layout import steps_of
from grader.assignment import Assignment
from grader.threadsafe import load_npy

FACTS_FILE = "facts.json"


@dataclass(frozen=True)
class DecodeGold:
    logits: dict[str, np.ndarray]  # case -> (generate, B, V) float64, for the cases with gold
    seconds: float  # what computing it took (measured once, kept with the entry)


def decode_gold(assignment: Assignment, d: Decode, inputs: Path, cache_dir: Path) -> DecodeGold:
    """The gold logits of every case that asks for them: from the cache, or computed now."""
    cases = [c for c in d.decode_cases if c.gold]
    kernels = {k.name: k for k in assignment.base_kernels}
    layouts = {c.name: steps_of(d.forward(c.B, c.length), kernels) for c in cases}
    layout = json.dumps({name: [[s.plan.kernel, [repr(a) for a in s.plan.arguments]] for s in steps]
                         for name, steps in layouts.items()})
    folder = gold_root(cache_dir) / content_key("decode", inputs.name, layout,
                                                json.dumps([[c.name, c.prompt, c.generate] for c in cases]),
                                                assignment.numpy_reference_file.read_bytes())
    if not is_complete(folder):
        started = time.perf_counter()
        truth = assignment.numpy_reference()
        parameters = np.load(inputs / PARAMETERS_FILE, mmap_mode="r")
        staging = new_entry(folder)
        for case in cases:
            tokens = np.load(inputs / tokens_file(case))
            logits = gold_pass(truth, d.forward(case.B, case.length), layouts[case.name], parameters, tokens)[-1]
            positions = np.arange(case.prompt - 1, case.length)  # step t reads position prompt + t - 1
            np.save(staging / f"{case.name}.npy", np.ascontiguousarray(logits[:, positions, :d.V].transpose(1, 0, 2)))
        (staging / FACTS_FILE).write_text(json.dumps({"seconds": round(time.perf_counter() - started, 3)}))
        publish_folder(staging, folder)
    facts = json.loads((folder / FACTS_FILE).read_text())
    return DecodeGold({c.name: load_npy(folder / f"{c.name}.npy") for c in cases}, facts["seconds"])
