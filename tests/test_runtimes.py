"""Runtimes as plug-ins (grader/boundary/runtimes/): the built-in ones answer for their packages, and a pack brings a
runtime of its own in its folder, on a package of its own, without a file of grader/ changing: its seeding hook
runs in the sandboxed harness before each call and its settings are recorded in the result."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest

import grader
from grader.boundary import runtimes
from grader.boundary.runtimes import needs_gpu_for, pinned, runtime_for, runtime_named
from grader.errors import SpecError
from grader.options import Options
from grader.pipeline import grade
from grader.assignment import load_assignment
from grader.targets import target_of

GRADER = Path(grader.__file__).resolve().parent
SEED = 1234  # what the pack's runtime seeds its package with before each call

# A package no machine has: its state is a seed that only its runtime's hook sets.
FAKE_PACKAGE = '''\
_seed = None


def seed(value):
    global _seed
    _seed = value


def current():
    if _seed is None:
        raise RuntimeError("fakerand was never seeded")
    return _seed
'''

# The pack's runtime: the standard library and grader.boundary alone, its package reached through sys.modules.
RUNTIME_MODULE = f'''\
import sys

from grader.boundary.runtimes import Runtime

SEED = {SEED}


def prepare():
    sys.modules["fakerand"].seed(SEED)


RUNTIME = Runtime(name="fakerand", packages=("fakerand",), prepare=prepare,
                  determinism=(f"fakerand.seed({{SEED}}) before each call",))
'''

SPEC = '''\
[assignment]
name = "seeded-shift"
title = "A shift by the runtime's seed"
version = "1"
target = "python"
source_dirs = ["kernels"]
public_seed = 7
gold = "numpy"
python_packages = ["fakerand"]
runtimes = ["fakerand_runtime"]
time_limit_s = 10.0

[[kernels]]
name = "shift"
weight = 1
header = "kernels/shift.py"
sources = ["kernels/shift.py"]
signature = "void shift(const double* x, double* out, int n)"
tolerance = { atol = 1e-12, rtol = 1e-12 }
buffers.out = { role = "output", shape = "n" }
buffers.x = { role = "input", shape = "n" }
cases = [
  { name = "short", public = true, n = 5 },
  { name = "long", n = 300 },
]
'''

INPUTS = '''\
import numpy as np


def make_inputs(kernel, case, rng):
    return {"x": rng.uniform(-1.0, 1.0, int(case["n"]))}
'''

REFERENCE = f'''\
def shift(x, **_):
    return {{"out": x + {SEED}}}
'''

SUBMISSION = '''\
import fakerand


def shift(x, out, n):
    out[:] = x + fakerand.current()
'''


def grader_digest() -> str:
    """Every file of grader/ (its bytecode aside), hashed with its path."""
    digest = hashlib.sha256()
    for path in sorted(p for p in GRADER.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f"{path.relative_to(GRADER)}\0".encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry's packs' own runtimes as they were, after the test (a pack registers its runtime as it loads)."""
    monkeypatch.setattr(runtimes, "_OWN", dict(runtimes._OWN))
    monkeypatch.setattr(runtimes, "_OWN_SOURCES", dict(runtimes._OWN_SOURCES))


def write_pack(root: Path, runtime: str = RUNTIME_MODULE) -> Path:
    folder = root / "assignments" / "seeded-shift"
    (folder / "reference" / "kernels").mkdir(parents=True)
    (folder / "assignment.toml").write_text(SPEC)
    (folder / "inputs.py").write_text(INPUTS)
    (folder / "numpy_reference.py").write_text(REFERENCE)
    (folder / "fakerand_runtime.py").write_text(runtime)
    (folder / "reference" / "kernels" / "shift.py").write_text(SUBMISSION)
    return folder


def test_the_built_in_runtimes_answer_for_their_packages() -> None:
    assert runtime_for("torch.cuda") is runtime_for("torch") is runtime_named("torch")
    assert runtime_for("cupyx.scipy.sparse") is runtime_named("cupy") and runtime_for("scipy") is None
    assert needs_gpu_for("cupy") and needs_gpu_for("torch.cuda") and not needs_gpu_for("torch")
    assert not needs_gpu_for("scipy")
    assert pinned("torch") == runtime_named("torch").pin and pinned("scipy") == "scipy"


def test_a_pack_on_a_runtime_of_its_own_is_graded_with_its_seeding_hook_and_no_grader_file_changed(
        tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, own_registry: None) -> None:
    before = grader_digest()
    site = tmp_path / "site"
    (site / "fakerand").mkdir(parents=True)
    (site / "fakerand" / "__init__.py").write_text(FAKE_PACKAGE)
    monkeypatch.syspath_prepend(str(site))  # installed for the grader, as a PYTHONPATH would
    folder = write_pack(tmp_path)

    assignment = load_assignment(folder)
    assert assignment.runtimes == ("fakerand",)
    target = target_of(assignment)
    assert not target.needs_gpu and "fakerand" in target.python_packages
    result = grade(folder / "reference", assignment, Options(cache_dir=cache_dir))

    # The gold is x + SEED: the submission passes only where the hook seeded the package in the harness.
    assert [c.status for c in result.kernels[0].cases] == ["passed", "passed"], result.kernels[0].cases
    assert result.score == result.max_score == 1
    assert result.environment.determinism == [f"fakerand.seed({SEED}) before each call"]
    assert grader_digest() == before


def test_a_pack_runtime_that_is_missing_or_takes_a_built_in_name_is_a_spec_error(
        tmp_path: Path, own_registry: None) -> None:
    folder = write_pack(tmp_path / "taken", RUNTIME_MODULE.replace('name="fakerand"', 'name="torch"'))
    with pytest.raises(SpecError, match="runtimes.*built in"):
        load_assignment(folder)
    (folder / "fakerand_runtime.py").unlink()
    with pytest.raises(SpecError, match="no fakerand_runtime.py"):
        load_assignment(folder)


def named_in_code(path: Path, words: tuple[str, ...]) -> list[str]:
    """The identifiers and string literals of a module's code (its docstrings and comments aside) that hold one of
    `words`, with their lines."""
    tree = ast.parse(path.read_text())
    prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}  # docstrings: no code
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            text = node.value
        else:
            text = next((getattr(node, f) for f in ("id", "attr", "name", "arg")
                         if isinstance(getattr(node, f, None), str)), "")
        if any(word in text.lower() for word in words):
            found.append(f"{path.relative_to(GRADER.parent)}:{getattr(node, 'lineno', 0)}: {text[:60]!r}")
    return found


def test_no_package_a_runtime_answers_for_is_named_in_the_core() -> None:
    plug_ins = GRADER / "boundary" / "runtimes"
    words = tuple(p for r in runtimes.runtimes() for p in r.packages)
    assert {"torch", "cupy"} <= set(words)
    named = [line for path in sorted(GRADER.rglob("*.py")) if not path.is_relative_to(plug_ins)
             for line in named_in_code(path, words)]
    assert not named, "the core names a runtime's package:\n" + "\n".join(named)
