"""A tiny real C++ pack whose kernels the test writes: `out = inp`, with whatever else each body does first.

Each kernel is `void NAME(float* out, const float* inp, int N)` in `src/NAME.h`; its gold is its input.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from grader.build import Artifact, build_submission
from grader.cases import Seed, prepare_inputs
from grader.runner import Call
from grader.assignment import Assignment, load_assignment

HEADER = """
[assignment]
name = "probe-{name}"
title = "probe"
version = "1"
target = "cpp"
public_seed = 1
gold = "numpy"
compile_flags = ["-O2", "-std=c++17"]
time_limit_s = {time_limit}
kernel_time_limit_s = {budget}
"""
KERNEL = """
[[kernels]]
name = "{name}"
weight = 1
header = "src/{name}.h"
sources = ["src/{name}.h"]
signature = "void {name}(float* out, const float* inp, int N)"
tolerance = {{ atol = 1e-6, rtol = 1e-6 }}
sanitizer = {sanitizer}
buffers.out = {{ role = "output", shape = "N" }}
buffers.inp = {{ role = "input", shape = "N" }}
cases = [{{ name = "four", public = true, N = 4 }}]
"""
INPUTS = """
import numpy as np
def make_inputs(kernel, case, rng):
    return {"inp": rng.uniform(1.0, 2.0, case["N"]).astype(np.float32)}
"""
COPY = "for (int i = 0; i < N; ++i) out[i] = inp[i];"


def make_probe(root: Path, bodies: dict[str, str], time_limit: float = 10.0, budget: float = 20.0,
               sanitizer: tuple[str, ...] = ()) -> tuple[Assignment, Path]:
    """The pack (under root/pack) and a submission (root/submission) of one kernel per body, each then copying."""
    pack = root / "pack" / "assignments" / f"probe-{root.name}"
    pack.mkdir(parents=True)
    tools = "[" + ", ".join(f'"{t}"' for t in sanitizer) + "]"
    spec = HEADER.format(name=root.name, time_limit=time_limit, budget=budget)
    spec += "".join(KERNEL.format(name=name, sanitizer=tools) for name in bodies)
    (pack / "assignment.toml").write_text(spec)
    (pack / "inputs.py").write_text(INPUTS)
    (pack / "numpy_reference.py").write_text("".join(f"def {name}(inp, **_):\n    return {{'out': inp}}\n"
                                                     for name in bodies))
    submission = root / "submission"
    (submission / "src").mkdir(parents=True)
    for name, body in bodies.items():
        (submission / "src" / f"{name}.h").write_text(textwrap.dedent("""\
            #pragma once
            #include <chrono>
            #include <cstdlib>
            #include <filesystem>
            #include <fstream>
            #include <thread>
            void {name}(float* out, const float* inp, int N) {{
            {body}
                {copy}
            }}
            """).format(name=name, body=textwrap.indent(body, "    "), copy=COPY))
    return load_assignment(pack), submission


def probe_calls(assignment: Assignment, submission: Path, cache_dir: Path,
                outputs: Path) -> tuple[list[Call], dict[str, Artifact]]:
    """Every kernel built, and its one case's call."""
    artifacts = build_submission(assignment, submission, cache_dir)
    seed = Seed(assignment.public_seed)
    calls = [Call(k, c, artifacts[k.name].library, prepare_inputs(assignment, k, c, seed, cache_dir),  # type: ignore
                  outputs / k.name / c.name) for k in assignment.kernels for c in k.cases]
    return calls, artifacts
