"""gpt2-m1 on a real GPU: reference, template, alternatives, mutants and hostile kernels.

Marked `gpu`: skipped with the reason where there is no CUDA device.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.options import Options
from grader.pipeline import grade
from grader.samples import Sample, variants
from grader.assignment import Assignment, load_assignment

from conftest import grade_variant, variant_params, with_time_limit

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpt2() -> Assignment:
    return with_time_limit(load_assignment("gpt2-m1"), 20.0)


def test_reference_scores_ten_out_of_ten(gpt2: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    result = grade_variant(gpt2, None, tmp_path, cache_dir)
    assert {k.name: k.status for k in result.kernels} == {k.name: "passed" for k in (*gpt2.kernels,
                                                                                     *gpt2.check_kernels)}
    assert result.score == result.max_score == 10
    assert "H200" in result.environment.device or result.environment.device
    assert all(c.device_ms is not None for k in result.kernels for c in k.cases)


def test_cuda_reference_is_within_a_third_of_every_tolerance_of_the_float64_truth(
        gpt2: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    # Gold is numpy_reference.py in float64: our float32 reference is one more family that must pass
    # every case with its worst error at most 1/3 of the tolerance (benchmarks/RESULTS.md).
    assert gpt2.gold == "numpy"
    result = grade_variant(gpt2, None, tmp_path, cache_dir)
    for kernel in (k for k in result.kernels if k.name != "forward"):  # logits and tokens have no tolerance_used
        for case in kernel.cases:
            assert case.passed and case.tolerance_used is not None and case.tolerance_used <= 1 / 3, \
                (kernel.name, case.name, case.tolerance_used)
            assert case.rel_l2_err is not None and case.rel_l2_err < 1e-5, (kernel.name, case.name, case.rel_l2_err)


def test_template_scores_zero_with_every_kernel_compiled(gpt2: Assignment, cache_dir: Path) -> None:
    result = grade(gpt2.template_dir, gpt2, Options(cache_dir=cache_dir))
    assert result.score == 0
    assert {k.status for k in result.kernels} == {"failed"}
    # The forward check's logits come out as zeros from the template's empty kernels: zeros, not poison.
    assert all("never written" in c.message for k in result.kernels if k.name != "forward" for c in k.cases)


@pytest.mark.parametrize("variant", [p for p in variant_params("gpt2-m1") if p.values[0].kind != "hostile"])
def test_alternative_passes_and_mutant_loses_points(variant: Sample, gpt2: Assignment, tmp_path: Path,
                                                    cache_dir: Path) -> None:
    # Each kernel is its own library and harness call: grading the variant's kernel alone is the same
    # verdict. A course-style family is graded whole: it must score 10/10 as a student's submission.
    kernels = () if variant.whole or variant.kind == "course" else (variant.kernel,)
    result = grade_variant(gpt2, variant, tmp_path, cache_dir, kernels=kernels)
    for kernel in (k for k in result.kernels if variant.whole or k.name == variant.kernel):
        assert kernel.status == variant.expect, (kernel.name, kernel.message)
        if variant.expect == "passed":
            assert kernel.score == kernel.max_score
        else:
            assert kernel.score < kernel.max_score
        if variant.failed_cases is not None:
            assert [c.name for c in kernel.cases if not c.passed] == list(variant.failed_cases), kernel.message
    if variant.expect == "forbidden":
        assert "which this assignment forbids (its outputs were correct)" in result.kernels[0].message
    if variant.kind == "course":
        assert result.score == result.max_score == 10


# The attacker's corpus (attack-*) has its own test, on every backend: tests/test_gpu_sandbox.py.
@pytest.mark.parametrize("variant", [p for p in variant_params("gpt2-m1")
                                     if p.values[0].kind == "hostile" and not p.values[0].name.startswith("attack-")])
def test_hostile_kernel_fails_alone_and_the_others_keep_their_points(variant: Sample, gpt2: Assignment,
                                                                     tmp_path: Path, cache_dir: Path) -> None:
    result = grade_variant(gpt2, variant, tmp_path, cache_dir)
    for kernel in result.kernels:
        if kernel.name == variant.kernel:
            assert kernel.status == variant.expect and kernel.score == 0, kernel.message
        elif kernel.name != "forward":  # the check composes the hostile kernel: it fails too, at weight 0
            assert kernel.status == "passed" and kernel.score == kernel.max_score, (kernel.name, kernel.message)
    assert result.score == 10 - gpt2.kernel(variant.kernel).weight
