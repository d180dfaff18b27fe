"""The decode check's inputs: the forward check's deterministic weights (shared: the same seed and shapes draw the
same file) and each case's tokens, the prompt and the tokens fed after it (teacher forcing: every pass sees the same
sequence), in one folder keyed by content."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from grader.cache import content_key, is_complete, new_entry, publish_folder
from grader.checks.decode.spec import Decode, DecodeCase
from grader.checks.forward.inputs import PARAMETERS_FILE, drawn_weights, draw_tokens, link
from grader.assignment import Assignment


def tokens_file(case: DecodeCase) -> str:
    return f"tokens-{case.name}.npy"


def case_tokens(d: Decode, case: DecodeCase) -> np.ndarray:
    """The case's sequence (B, length): drawn as the forward check draws its tokens, from the spec's seed."""
    return draw_tokens(d.forward(case.B, case.length))


def prepare_decode_inputs(assignment: Assignment, d: Decode, cache_dir: Path) -> Path:
    """The folder of the check's inputs (computed once; later calls reuse it)."""
    weights = drawn_weights(d.forward(1, 1), cache_dir)
    sizes = json.dumps([[c.name, c.B, c.length] for c in d.decode_cases])
    folder = cache_dir / "decode" / content_key("inputs", weights.name, sizes)
    if is_complete(folder):
        return folder
    staging = new_entry(folder)
    link(weights / PARAMETERS_FILE, staging / PARAMETERS_FILE)
    for case in d.decode_cases:
        np.save(staging / tokens_file(case), case_tokens(d, case))
    publish_folder(staging, folder)
    return folder
