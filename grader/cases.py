"""Deterministic case inputs from (assignment, kernel, case, seed), written once and reused.

Students get the public seed; at grading time a secret is mixed in so that outputs can't be
hard-coded. The secret itself never leaves this process: inputs are files, and results record
only a fingerprint of the secret.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grader.cache import content_key, is_complete, new_entry, publish_folder
from grader.errors import SpecError
from grader.threadsafe import load_npy
from grader.assignment import Assignment, Case, Kernel, shape_of

SECRET_ENV = "KERNEL_GRADER_SECRET"


@dataclass(frozen=True)
class Seed:
    """What case inputs are drawn from: the assignment's public seed, plus the instructor's secret if any."""

    public: int
    secret: str | None = None

    @property
    def mode(self) -> str:
        return "secret" if self.secret else "public"

    @property
    def fingerprint(self) -> str:
        """Identifies the seed in results and cache keys without revealing the secret."""
        material = f"{self.public}:{self.secret or ''}"
        return hashlib.sha256(material.encode()).hexdigest()[:16]


def read_secret(secret_file: Path | None = None) -> str | None:
    """The instructor's secret: a file given on the command line, else $KERNEL_GRADER_SECRET."""
    if secret_file is not None:
        try:
            text = secret_file.read_text().strip()
        except OSError as error:
            raise SpecError(f"secret file {secret_file}: cannot be read ({error.strerror})") from None
        if not text:
            raise SpecError(f"secret file {secret_file}: is empty")
        return text
    return os.environ.get(SECRET_ENV) or None


def case_rng(assignment: Assignment, kernel: Kernel, case: Case, seed: Seed) -> np.random.Generator:
    # By the base kernel's name: a variant's copy of a kernel ("req_0/matmul") gets the base's very inputs.
    key = f"{assignment.name}/{assignment.version}/{kernel.base}/{case.name}/{seed.public}/{seed.secret or ''}"
    return np.random.default_rng(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little"))


def make_case_inputs(assignment: Assignment, kernel: Kernel, case: Case, seed: Seed) -> dict[str, np.ndarray]:
    """Run the assignment's generator and check it returned exactly the input buffers the spec declares."""
    make_inputs = assignment.make_inputs()
    where = f"{assignment.inputs_file}: make_inputs({kernel.base!r}, case {case.name!r})"
    try:
        arrays = make_inputs(kernel.base, dict(case.params), case_rng(assignment, kernel, case, seed))
    except Exception as error:
        raise SpecError(f"{where} raised {type(error).__name__}: {error}") from error
    expected = {b.name for b in kernel.buffers_with("input")}
    if not isinstance(arrays, dict) or set(arrays) != expected:
        got = sorted(arrays) if isinstance(arrays, dict) else type(arrays).__name__
        raise SpecError(f"{where} returned {got}; expected arrays named {sorted(expected)}")
    for buffer in kernel.buffers_with("input"):
        array = arrays[buffer.name]
        shape = shape_of(buffer, case.params)
        if not isinstance(array, np.ndarray) or array.shape != shape or array.dtype != np.dtype(buffer.dtype):
            found = f"{array.dtype}{list(array.shape)}" if isinstance(array, np.ndarray) else type(array).__name__
            raise SpecError(f"{where}: '{buffer.name}' is {found}; the spec says {buffer.dtype}{list(shape)}")
    return arrays


def inputs_key(assignment: Assignment, kernel: Kernel, case: Case, seed: Seed) -> str:
    """Content key of one case's inputs: the generator's source, the case and the seed."""
    return content_key(assignment.inputs_file.read_bytes(),
                       json.dumps([assignment.name, assignment.version, kernel.base, case.name, case.params],
                                  sort_keys=True), seed.fingerprint)


def prepare_inputs(assignment: Assignment, kernel: Kernel, case: Case, seed: Seed, cache_dir: Path) -> Path:
    """Write one case's inputs as .npy files (once; later calls reuse them) and return the folder."""
    folder = cache_dir / "inputs" / inputs_key(assignment, kernel, case, seed)
    if is_complete(folder):
        return folder
    # A staging folder of its own: other threads and graders may be writing the same inputs right now.
    staging = new_entry(folder)
    for name, array in make_case_inputs(assignment, kernel, case, seed).items():
        np.save(staging / f"{name}.npy", array)
    publish_folder(staging, folder)
    return folder


def load_inputs(folder: Path) -> dict[str, np.ndarray]:
    return {path.stem: load_npy(path) for path in sorted(folder.glob("*.npy"))}
