"""The rules that make correct course code score full marks, on a tiny real C++ pack: scratch as the
spec initialises it, a crash or a loop costing only its own case (or its kernel's budget), crashes
while loading named as such, and compile feedback for a CUDA pack on a machine without a GPU."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from grader import device
from grader.options import Options
from grader.pipeline import grade
from grader.results import Result
from grader.assignment import Assignment, load_assignment

PACK = """
[assignment]
name = "probe"
title = "probe"
version = "1"
target = "cpp"
public_seed = 1
gold = "numpy"
scratch_init = "{init}"
time_limit_s = 2.0
kernel_time_limit_s = 5.0

[[kernels]]
name = "peek"
weight = 3
header = "src/peek.h"
sources = ["src/peek.h"]
signature = "void peek(float* out, float* scratch, const float* inp, int N)"
tolerance = {{ atol = 1e-6, rtol = 1e-6 }}
buffers.out = {{ role = "output", shape = "N" }}
buffers.scratch = {{ role = "scratch", shape = "N" }}
buffers.inp = {{ role = "input", shape = "N" }}
cases = [
  {{ name = "four", public = true, N = 4 }},
  {{ name = "seven", N = 7 }},
  {{ name = "nine", N = 9 }},
]
"""
INPUTS = """
import numpy as np
def make_inputs(kernel, case, rng):
    return {"inp": rng.uniform(1.0, 2.0, case["N"]).astype(np.float32)}
"""
TRUTH = """
import numpy as np
def peek(inp, **_):
    return {"out": inp.astype(np.float64)}
"""
# As the course's attention does with att: it adds what scratch holds, trusting it to start at zero.
TRUSTS_ZEROED_SCRATCH = "for (int i = 0; i < N; ++i) out[i] = inp[i] + scratch[i];"


def make_pack(root: Path, init: str = "zeros") -> Assignment:
    pack = root / "assignments" / "probe"
    pack.mkdir(parents=True)
    (pack / "assignment.toml").write_text(PACK.format(init=init))
    (pack / "inputs.py").write_text(INPUTS)
    (pack / "numpy_reference.py").write_text(TRUTH)
    return load_assignment(pack)


def submission(root: Path, body: str, prelude: str = "") -> Path:
    folder = root / "submission"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "peek.h").write_text(textwrap.dedent(f"""\
        #pragma once
        #include <cstdlib>
        {prelude}
        void peek(float* out, float* scratch, const float* inp, int N) {{
            {body}
        }}
        """))
    return folder


def grade_probe(root: Path, body: str, init: str = "zeros", prelude: str = "") -> Result:
    assignment = make_pack(root, init)
    return grade(submission(root, body, prelude), assignment, Options(cache_dir=root / "cache"))


@pytest.mark.parametrize("init, passes", [("zeros", True), ("poison", False), ("leftover", False)])
def test_scratch_starts_as_the_spec_initialises_it(tmp_path: Path, init: str, passes: bool) -> None:
    (kernel,) = grade_probe(tmp_path, TRUSTS_ZEROED_SCRATCH, init).kernels
    assert (kernel.status == "passed") is passes, kernel.message
    assert kernel.score == (3 if passes else 0)


def test_leftover_scratch_is_the_same_garbage_on_every_run(tmp_path: Path) -> None:
    first = grade_probe(tmp_path / "a", TRUSTS_ZEROED_SCRATCH, "leftover").kernels[0].cases
    second = grade_probe(tmp_path / "b", TRUSTS_ZEROED_SCRATCH, "leftover").kernels[0].cases
    assert [c.first_mismatch for c in first] == [c.first_mismatch for c in second]
    assert all(c.nonfinite == 0 for c in first)  # finite garbage, not the NaN poison


def test_a_crash_in_one_case_costs_that_case_only(tmp_path: Path) -> None:
    body = "if (N == 7) abort();\n    for (int i = 0; i < N; ++i) out[i] = inp[i];"
    (kernel,) = grade_probe(tmp_path, body).kernels
    assert [c.status for c in kernel.cases] == ["passed", "crashed", "passed"]
    assert kernel.status == "failed" and kernel.score == 2.0
    assert "SIGABRT" in kernel.cases[1].message


def test_a_loop_in_one_case_costs_that_case_and_the_next_case_still_runs(tmp_path: Path) -> None:
    body = "if (N == 7) for (volatile int spin = 0; ; ) {}\n    for (int i = 0; i < N; ++i) out[i] = inp[i];"
    (kernel,) = grade_probe(tmp_path, body).kernels
    assert [c.status for c in kernel.cases] == ["passed", "timeout", "passed"]
    assert kernel.score == 2.0 and "did not finish within 2 s" in kernel.cases[1].message


def test_a_kernel_that_always_loops_costs_its_budget_not_the_limit_per_case(tmp_path: Path) -> None:
    # Budget 5 s, limit 2 s per call: two cases time out, the third is stopped when the budget runs out, or,
    # where a loaded machine took the last second to end the second case, is never started.
    (kernel,) = grade_probe(tmp_path, "for (volatile int spin = 0; ; ) {}").kernels
    assert [c.status for c in kernel.cases[:2]] == ["timeout", "timeout"]
    third = kernel.cases[2]
    if third.status == "timeout":
        assert "the kernel's time budget (5 s for all its cases) ran out" in third.message, third.message
    else:
        assert third.status == "not_run", third.message
        assert "not run: the kernel's time budget (5 s) was spent" in third.message, third.message
    assert kernel.status == "timeout" and kernel.score == 0


def test_a_crash_while_loading_the_library_is_named_and_not_retried(tmp_path: Path) -> None:
    prelude = "static int crash_at_load = [] { abort(); return 0; }();"
    (kernel,) = grade_probe(tmp_path, "for (int i = 0; i < N; ++i) out[i] = inp[i];", prelude=prelude).kernels
    assert kernel.status == "crashed"
    assert kernel.cases[0].while_loading and "while its library was being loaded" in kernel.cases[0].message
    assert [c.status for c in kernel.cases[1:]] == ["not_run", "not_run"]
    assert "never written" not in kernel.message


def test_nan_where_gold_is_finite_is_said_so(tmp_path: Path) -> None:
    body = "for (int i = 0; i < N; ++i) out[i] = (i == 1) ? std::nanf(\"\") : inp[i];"
    (kernel,) = grade_probe(tmp_path, body, prelude="#include <cmath>").kernels
    message = kernel.cases[0].message
    assert "1 of 4 elements are NaN or Inf where the expected value is finite" in message
    assert "max abs err 0" not in message and kernel.cases[0].nonfinite == 1


def test_a_kernels_output_tail_is_kept_for_instructors(tmp_path: Path) -> None:
    body = 'fprintf(stderr, "debug: N=%d\\n", N);\n    for (int i = 0; i < N; ++i) out[i] = inp[i];'
    (kernel,) = grade_probe(tmp_path, body, prelude="#include <cstdio>").kernels
    assert kernel.status == "passed" and "debug: N=9" in kernel.log


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_a_cuda_pack_without_a_gpu_still_reports_compile_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEL_GRADER_NO_GPU", "1")
    device.unavailable_reason.cache_clear()
    try:
        gpt2 = load_assignment("gpt2-m1")
        root = shutil.copytree(gpt2.reference_dir, tmp_path / "submission")
        gelu = (root / "kernels" / "gelu.cuh").read_text().splitlines()
        gelu.insert(5, "int broken = undefined_identifier;")
        (root / "kernels" / "gelu.cuh").write_text("\n".join(gelu) + "\n")
        result = grade(root, gpt2, Options(cache_dir=tmp_path / "cache"))
    finally:
        device.unavailable_reason.cache_clear()
    by_name = {k.name: k for k in result.kernels}
    assert by_name["gelu"].status == "compile_error"
    assert 'kernels/gelu.cuh(6): error: identifier "undefined_identifier" is undefined' in by_name["gelu"].message
    for name, kernel in by_name.items():
        if name != "gelu":
            assert kernel.status == "not_run" and "no GPU" in kernel.message, (name, kernel.message)
            assert "ModuleNotFoundError" not in kernel.message
    assert result.message.startswith("compiled only:")
    assert Result.from_json(result.to_json()) == result


def test_the_result_records_the_limits_the_sandbox_applied(tmp_path: Path) -> None:
    import dataclasses

    assignment = dataclasses.replace(make_pack(tmp_path), memory_limit_mb=1536)
    result = grade(submission(tmp_path, TRUSTS_ZEROED_SCRATCH), assignment, Options(cache_dir=tmp_path / "cache"))
    assert any("memory 1536 MiB" in line for line in result.environment.sandbox_enforced), \
        result.environment.sandbox_enforced


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_the_result_records_what_each_backend_applied_to_the_harnesses(backend: str, flash, tmp_path: Path,
                                                                       cache_dir: Path) -> None:
    # Issue 11: the docker backend once reported Limits() defaults (8192 MiB, 512 processes) where the
    # runner applied the pack's limits: the record must be what the harness really ran under.
    import dataclasses

    from grader.samples import compose
    from sandbox_fixtures import docker_unavailable_reason

    if backend == "docker" and (reason := docker_unavailable_reason()):
        pytest.skip(f"the docker sandbox can't run here: {reason}")
    assignment = dataclasses.replace(flash, memory_limit_mb=1280, process_limit=48)
    result = grade(compose(flash, None, tmp_path / "submission"), assignment,
                   Options(cache_dir=cache_dir, sandbox=backend))
    assert result.score == result.max_score and result.environment.sandbox == backend
    enforced = result.environment.sandbox_enforced
    assert any("memory 1280 MiB" in line for line in enforced), enforced
    assert any("processes/threads 48" in line for line in enforced), enforced
    assert not any("8192 MiB" in line or "processes/threads 512" in line for line in enforced), enforced
