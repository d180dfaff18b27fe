"""The forward pass's inputs: deterministic GPT-2-like weights and tokens, written once per machine.

No downloads: the weights are drawn as GPT-2's initialisation draws them (N(0, init_std), the
residual projections scaled by 1/sqrt(2L), layernorm weights near 1, small biases; the padded
vocabulary rows zero, as in the course's checkpoint), from the spec's seed. One folder, keyed by
content, holds what the harness reads: the parameters' one allocation as a flat float32 .npy (the
harness uploads it straight from its pages), the tokens, and a copy of the assignment's
numpy_reference.py (the sandbox shows the harness this folder, not the assignment's folder).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np

from grader.cache import content_key, is_complete, new_entry, publish_folder
from grader.checks.forward.layout import parameter_tensors, total
from grader.checks.forward.spec import Forward
from grader.assignment import Assignment

PARAMETERS_FILE, TOKENS_FILE, REFERENCE_FILE = "parameters.npy", "tokens.npy", "numpy_reference.py"
DRAW_VERSION = "2"  # bump when the way the weights are drawn changes: their cache key changes with it


def draw_key(f: Forward) -> str:
    """What the weights depend on: the shapes, the seed and the init (not B, T, the weight or the tolerances)."""
    drawn = {k: v for k, v in asdict(f).items() if k in ("C", "NH", "L", "V", "Vp", "maxT", "seed", "init_std")}
    return json.dumps(drawn, sort_keys=True)


def prepare_forward_inputs(assignment: Assignment, f: Forward, cache_dir: Path) -> Path:
    """The folder of the assignment's forward-pass inputs (computed once; later calls reuse it)."""
    reference = assignment.numpy_reference_file
    weights = drawn_weights(f, cache_dir)
    folder = cache_dir / "forward" / content_key("inputs", weights.name, f"{f.B}x{f.T}", reference.read_bytes())
    if is_complete(folder):
        return folder
    staging = new_entry(folder)
    link(weights / PARAMETERS_FILE, staging / PARAMETERS_FILE)
    np.save(staging / TOKENS_FILE, draw_tokens(f))
    shutil.copyfile(reference, staging / REFERENCE_FILE)
    publish_folder(staging, folder)
    return folder


def drawn_weights(f: Forward, cache_dir: Path) -> Path:
    """The folder of the weights alone (~500 MB at GPT-2's shapes), shared by every B and T (the decode check's
    cases too) and every version of the NumPy reference."""
    folder = cache_dir / "forward" / content_key("drawn", DRAW_VERSION, draw_key(f))
    if not is_complete(folder):
        staging = new_entry(folder)
        write_parameters(f, staging / PARAMETERS_FILE)
        publish_folder(staging, folder)
    return folder


def link(source: Path, target: Path) -> None:
    """A hard link where the file system allows, else a copy."""
    try:
        os.link(source, target)
    except OSError:  # another file system, or no hard links there
        shutil.copyfile(source, target)


def write_parameters(f: Forward, path: Path) -> None:
    """Every parameter tensor in the course's order, drawn tensor by tensor into a memory-mapped file."""
    rng = np.random.default_rng([f.seed, 0])
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(total(parameter_tensors(f)),))
    projection = f.init_std / math.sqrt(2 * f.L)  # GPT-2's scaling of the layers that add into the residual stream
    for tensor in parameter_tensors(f):
        values = out[tensor.offset: tensor.offset + tensor.total].reshape(max(1, tensor.layers), *tensor.shape)
        name = tensor.name
        if name.endswith("w") and name.startswith("ln"):
            values[:] = 1.0 + 0.1 * rng.standard_normal(values.shape, dtype=np.float32)
        elif name.endswith("b"):  # small, but not zero: a kernel that ignores its bias is wrong
            values[:] = 0.5 * f.init_std * rng.standard_normal(values.shape, dtype=np.float32)
        else:
            values[:] = (projection if name in ("attprojw", "fcprojw") else f.init_std) * \
                rng.standard_normal(values.shape, dtype=np.float32)
        if name == "wte":
            values[:, f.V:] = 0.0  # the padded vocabulary's rows
    out.flush()
    del out


def draw_tokens(f: Forward) -> np.ndarray:
    return np.random.default_rng([f.seed, 1]).integers(0, f.V, size=(f.B, f.T), dtype=np.int32)
