"""gpt2-m3's additional optimizations on a real GPU: the reference's op_7, op_8, op_9 and op_17 pass all six kernels
and the forward-pass check, worth the course's 10 points; a mutant without its technique keeps its points and is
flagged; ncu measures a variant's bank conflicts and L2 hit rate in the sandbox (`grader time --ncu`).

Marked `gpu`: skipped with the reason where there is no CUDA device."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.ncu import ncu_binary
from grader.report.credit import credit_lines
from grader.report.evidence import variant_evidence
from grader.report.render import variant_flags
from grader.results import Result
from grader.samples import variants
from grader.assignment import PROJECT_ROOT, Assignment, load_assignment
from grader.status import KernelStatus, Outcome
from grader.targets.cuda import cutlass_include

from conftest import grade_variant, with_time_limit

pytestmark = pytest.mark.gpu

REFERENCE_OPS = {"op_7": 3, "op_8": 2, "op_9": 1, "op_17": 4}


@pytest.fixture(scope="module")
def m3() -> Assignment:
    return with_time_limit(load_assignment("gpt2-m3"), 20.0)


@pytest.fixture(scope="module")
def reference_ops(m3: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Result:
    return grade_variant(m3, None, tmp_path_factory.mktemp("m3-ops"), cache_dir, kernels=tuple(REFERENCE_OPS))


def test_reference_ops_pass_and_make_the_courses_minimum(m3: Assignment, reference_ops: Result) -> None:
    failed = [(k.name, k.message) for k in reference_ops.kernels if k.status is not KernelStatus.PASSED]
    assert not failed, failed
    assert {k.name for k in reference_ops.kernels} >= {f"{op}/forward" for op in REFERENCE_OPS}
    found = {v.name: v for v in reference_ops.variants}
    assert {name: (v.status, v.score) for name, v in found.items()} == {
        name: (Outcome.PASSED, float(weight)) for name, weight in REFERENCE_OPS.items()}
    assert not any(v.missing_evidence for v in found.values())
    assert reference_ops.score == reference_ops.max_score == 10
    group = reference_ops.additional
    assert group.credited == 10 and group.shortfall == 0 and group.extra_credit == 0
    assert credit_lines(reference_ops)[0] == ("additional optimizations: op_7 (3) + op_8 (2) + op_9 (1) + op_17 (4) "
                                              "= 10: the 10 points the course asks for")
    assert any(line.startswith("__constant__ memory: read in layernorm") for line in variant_evidence(found["op_8"]))


def test_a_restrict_mutant_keeps_its_point_and_is_flagged(m3: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    sample = next(v for v in variants(m3) if v.name == "mutant-op9-const-without-restrict")
    result = grade_variant(m3, sample, tmp_path, cache_dir, kernels=("op_9",), public_only=True)
    op_9 = next(v for v in result.variants if v.name == "op_9")
    assert op_9.status is Outcome.PASSED and op_9.score == 1, op_9.message
    assert variant_flags(op_9)[-1].endswith("none of their binaries shows any read-only (non-coherent) global load")


def test_ncu_measures_bank_conflicts_and_the_l2_hit_rate_of_a_variant_in_the_sandbox(m3: Assignment, tmp_path: Path,
                                                                                       cache_dir: Path) -> None:
    """`grader time --ncu` as an instructor runs it: op_17 (cp.async tiles) beside kernels/, each kernel's harness
    under ncu in the local sandbox. op_17's matmul stages its tiles so that its shared-memory bank conflicts fall
    far below kernels/'s (16 x 16 tiles read down a column)."""
    if ncu_binary() is None:
        pytest.skip("ncu (Nsight Compute) is not installed")
    out = tmp_path / "ncu.json"
    ran = subprocess.run([sys.executable, "-m", "grader", "time", str(m3.reference_dir), "-a", "gpt2-m3", "--ncu",
                          "--kernels", "op_17", "--json", str(out)], capture_output=True, text=True, timeout=540,
                         env={**os.environ, "KERNEL_GRADER_CACHE": str(cache_dir), "COLUMNS": "200"}, cwd=PROJECT_ROOT)
    print(ran.stdout, ran.stderr)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    document = json.loads(out.read_text())
    assert document["notes"] == [], document["notes"]
    figures = {(f["variant"], f["kernel"], f["metric"]): f["value"] for f in document["figures"]}
    assert set(figures) >= {(None, "matmul", "shared_bank_conflicts"), ("op_17", "matmul", "shared_bank_conflicts"),
                            (None, "matmul", "l2_hit_rate"), ("op_17", "matmul", "l2_hit_rate")}
    for key, value in figures.items():
        assert math.isfinite(value) and value >= 0, key
        if key[2] == "l2_hit_rate":
            assert value <= 100, key
    assert figures[("op_17", "matmul", "shared_bank_conflicts")] < 0.5 * figures[(None, "matmul",
                                                                                  "shared_bank_conflicts")]
    assert "| op_17 | matmul |" in ran.stdout


@pytest.mark.parametrize("name", ["course-op15-mma-sync-tf32", "mutant-op15-wmma", "mutant-op8-constant-never-read"])
def test_op_samples_pass_every_kernel(m3: Assignment, tmp_path: Path, cache_dir: Path, name: str) -> None:
    """Their VARIANT.toml's expectation: every kernel of the variant passes (evidence is reported, not scored)."""
    sample = next(v for v in variants(m3) if v.name == name)
    variant = sample.kernel.split("/")[0]
    result = grade_variant(m3, sample, tmp_path, cache_dir, kernels=(variant,), public_only=True)
    kernel = next(k for k in result.kernels if k.name == sample.kernel)
    assert kernel.status is sample.expect and kernel.score == kernel.max_score, kernel.message
    found = next(v for v in result.variants if v.name == variant)
    assert found.status is Outcome.PASSED and found.score == found.max_score, found.message


@pytest.mark.skipif(cutlass_include() is None, reason="no CUTLASS headers on this machine: set KERNEL_GRADER_CUTLASS "
                                                      "to a CUTLASS checkout, or pip install nvidia-cutlass")
def test_a_cutlass_device_gemm_builds_with_the_courses_include_and_passes(m3: Assignment, tmp_path: Path,
                                                                            cache_dir: Path) -> None:
    """op_14 as a team writes it (cutlass::gemm::device::Gemm, TF32 tensor cores, shapes configured): built with
    CUTLASS's include folder, as the course's Makefile adds it, every kernel passes and the binary shows CUTLASS."""
    sample = next(v for v in variants(m3) if v.name == "course-op14-cutlass-gemm")
    result = grade_variant(m3, sample, tmp_path, cache_dir, kernels=("op_14",), public_only=True)
    failed = [(k.name, k.message) for k in result.kernels if k.status is not KernelStatus.PASSED]
    assert not failed, failed
    op_14 = next(v for v in result.variants if v.name == "op_14")
    assert op_14.status is Outcome.PASSED and op_14.score == 3 and not op_14.missing_evidence, op_14.message
    assert any(line.startswith("CUTLASS/CuTe kernels: in matmul") for line in variant_evidence(op_14)), \
        variant_evidence(op_14)
