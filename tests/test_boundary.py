"""The sandbox boundary (`grader.boundary`): what the harness process imports keeps to the standard library,
NumPy and the boundary itself; each check's harness half adds only `grader.checks.program` and its own
plug-in's modules. Every module of the package is imported, found by walking it, not listed by hand."""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import grader
import grader.boundary
from grader.checks import CHECK_NAMES, check_named

GRADER_ROOT = Path(grader.__file__).resolve().parent.parent  # this checkout's, not an installed grader's
CHECKS_HARNESS_HALF = "grader.checks.program"  # the harness half every check's composed call shares
# Imports each stage's modules in a fresh interpreter, printing what each stage had loaded beyond the start-up's.
PROBE = """\
import importlib, json, sys
before, loaded = set(sys.modules), []
for stage in json.loads(sys.argv[1]):
    for name in stage:
        importlib.import_module(name)
    loaded.append(sorted(set(sys.modules) - before))
print(json.dumps(loaded))
"""


def boundary_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(grader.boundary.__path__, "grader.boundary."))


def loaded_after(*stages: list[str]) -> list[set[str]]:
    """The modules a fresh interpreter has loaded after importing each stage's modules in turn."""
    completed = subprocess.run([sys.executable, "-c", PROBE, json.dumps(stages)], capture_output=True, text=True,
                               cwd=GRADER_ROOT, env={**os.environ, "PYTHONPATH": str(GRADER_ROOT)})
    assert completed.returncode == 0, completed.stderr
    return [set(modules) for modules in json.loads(completed.stdout)]


def graders(modules: set[str]) -> set[str]:
    return {m for m in modules if m == "grader" or m.startswith("grader.")}


def third_party(modules: set[str]) -> set[str]:
    return {m.partition(".")[0] for m in modules} - set(sys.stdlib_module_names) - {"grader", "numpy"}


def test_the_harness_side_imports_only_the_boundary_numpy_and_the_standard_library() -> None:
    boundary = boundary_modules()
    assert {"grader.boundary.harness", "grader.boundary.timing_harness", "grader.boundary.protocol"} <= set(boundary)
    check_halves = [check_named(name).harness_module for name in CHECK_NAMES]
    alone, with_checks = loaded_after(boundary, check_halves)

    assert graders(alone) == {"grader", "grader.boundary", *boundary}, \
        "the boundary imports outside itself: " + ", ".join(sorted(graders(alone) - {"grader.boundary", *boundary}))
    plugins = {half.rpartition(".")[0] for half in check_halves}
    outside = {m for m in graders(with_checks) - graders(alone) - {"grader.checks", CHECKS_HARNESS_HALF, *plugins}
               if not any(m.startswith(plugin + ".") for plugin in plugins)}
    assert not outside, "a check's harness half imports outside the boundary and its plug-in: " + \
        ", ".join(sorted(outside))
    assert not third_party(with_checks), "the harness side imports " + ", ".join(sorted(third_party(with_checks)))


def test_the_competitions_harness_half_imports_only_the_boundary_the_programs_half_and_forwards_compose() -> None:
    boundary = boundary_modules()
    alone, with_competition = loaded_after(boundary, ["grader.competition.harness_half"])
    allowed = {"grader.checks", CHECKS_HARNESS_HALF, "grader.checks.forward", "grader.checks.forward.compose",
               "grader.competition", "grader.competition.harness_half"}
    outside = graders(with_competition) - graders(alone) - allowed
    assert not outside, "the competition's harness half imports " + ", ".join(sorted(outside))
    assert not third_party(with_competition), \
        "the harness side imports " + ", ".join(sorted(third_party(with_competition)))
