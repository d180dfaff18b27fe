"""Before the first student: what this machine lacks to grade an assignment at all, said to the instructor.

A package the harnesses import on the CPU (scipy) or a compiler missing here would make every submission fail in
the same way, each a `crashed` or a `compile_error` that blames the student. `grade`, `batch`, `check` and `demo`
ask first and stop with the install command instead. A GPU missing is not such a gap: the kernels are compiled and
reported not run (a student's laptop still gets compile feedback), and a GPU package missing there says so too.
"""

from __future__ import annotations

import importlib.util
import shutil

from grader.errors import SetupError
from grader.assignment import Assignment
from grader.boundary.runtimes import pinned
from grader.targets import target_of


def missing_for(assignment: Assignment) -> str | None:
    """What this machine lacks to grade `assignment`, in words with the command that installs it; None if nothing."""
    target = target_of(assignment)
    if not target.needs_gpu:  # a GPU assignment's packages are the GPU's question (reported not run where absent)
        absent = [p for p in target.python_packages if importlib.util.find_spec(p.split(".")[0]) is None]
        if absent:
            install = " ".join(pinned(p) for p in absent)
            return (f"this machine cannot grade {assignment.name}: its harnesses import {', '.join(absent)}, which "
                    f"is not installed here (python3 -m pip install {install}), so every submission would crash")
    compiler = getattr(target, "compiler", None)
    if callable(compiler) and shutil.which(compiler()) is None and not target.needs_gpu:
        return (f"this machine cannot grade {assignment.name}: its compiler {compiler()} is not installed here (on "
                "Debian or Ubuntu: apt-get install g++), so every submission would fail to compile")
    return None


def preflight(assignment: Assignment) -> None:
    """Raise SetupError where this machine cannot grade `assignment` (see `missing_for`)."""
    if (missing := missing_for(assignment)) is not None:
        raise SetupError(missing)
