"""Bytecode for the harness's imports, on machines whose Python packages keep none beside their sources.

A harness is a fresh interpreter that imports NumPy and the grader's boundary package. Where NumPy's folder holds no
bytecode and cannot be written (a read-only or PYTHONDONTWRITEBYTECODE image: the H200 runner's), every harness
compiled about a hundred modules from source: 0.24-0.27 s of each start (benchmarks/RESULTS.md, issue 25). There, the
grader fills a folder of its cache once, in a process of its own, and harnesses read it through
PYTHONPYCACHEPREFIX, mounted read-only: the code they run cannot change what the next harness imports.

Where NumPy already has its bytecode (most machines, this repository's CI), nothing is filled and harnesses start
as before: a prefix is all or nothing (the interpreter then reads no `__pycache__` folder at all).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from grader.runner.watch import GRADER_ROOT

# What every harness imports before its first call; a module imported later compiles from source as before.
HARNESS_IMPORTS = ("numpy", "grader.boundary.harness", "grader.boundary.c_abi", "grader.boundary.cuda_device",
                   "grader.boundary.cpp_device", "grader.boundary.python_device", "grader.boundary.timing_harness")
FILL_TIMEOUT_S = 120.0
STAMP = "filled"


def lacks_bytecode(module: str = "numpy") -> bool:
    """Whether `module`'s source has no bytecode where the interpreter would look for it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    return not Path(importlib.util.cache_from_source(spec.origin)).exists()


def harness_bytecode(cache_dir: Path, needed: bool | None = None) -> Path | None:
    """The folder harnesses read their imports' bytecode from, filled if it is not up to date; None where the
    machine's packages have their own (`needed`: that answer given, for tests)."""
    if not (lacks_bytecode() if needed is None else needed):
        return None
    folder = cache_dir / "bytecode" / sys.implementation.cache_tag
    stamp = folder / STAMP
    sources = _sources_digest()
    if stamp.is_file() and stamp.read_text() == sources:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(GRADER_ROOT),
           "PYTHONPYCACHEPREFIX": str(folder), "OPENBLAS_NUM_THREADS": "1"}
    # Each .pyc is written to a temporary name and renamed: graders filling at once leave whole files.
    completed = subprocess.run([sys.executable, "-c", f"import {', '.join(HARNESS_IMPORTS)}"], env=env,
                               capture_output=True, text=True, timeout=FILL_TIMEOUT_S, umask=0o022)
    if completed.returncode != 0:  # harnesses then compile from source, as without the folder
        return None
    stamp.write_text(sources)
    return folder


def _sources_digest() -> str:
    """What the folder's bytecode was compiled from: the interpreter, NumPy's and the grader's files as they are."""
    digest = hashlib.sha256(sys.version.encode())
    roots = [Path(spec.origin).parent for name in ("numpy",)
             if (spec := importlib.util.find_spec(name)) is not None and spec.origin]
    for root in [*roots, GRADER_ROOT / "grader"]:
        for path in sorted(root.rglob("*.py")):
            status = path.stat()
            digest.update(f"{path}\0{status.st_mtime_ns}\0{status.st_size}\n".encode())
    return digest.hexdigest()
