"""Scoring: partial credit, all-or-nothing, crashes fail the whole kernel, forbidden symbols deduct."""

from __future__ import annotations

import dataclasses

from grader.build import Artifact
from grader.results import CaseResult
from grader.scoring import score_kernel
from grader.spec import load_assignment

KERNEL = load_assignment("flash-attention-cpu").kernel("flash_attention")  # weight 2, six cases
BUILT = Artifact("flash_attention", "built", None, "", (), False, 0.1)


def cases(statuses: list[str]) -> list[CaseResult]:
    return [CaseResult(f"c{i}", False, s, s == "passed", s) for i, s in enumerate(statuses)]


def test_fraction_of_cases_passed_gives_partial_credit() -> None:
    result = score_kernel(KERNEL, BUILT, cases(["passed"] * 3 + ["failed"] * 3))
    assert result.score == 1.0 and result.status == "failed"
    assert score_kernel(KERNEL, BUILT, cases(["passed"] * 6)).score == 2.0


def test_all_or_nothing_gives_nothing_for_one_failure() -> None:
    strict = dataclasses.replace(KERNEL, partial_credit="all_or_nothing")
    assert score_kernel(strict, BUILT, cases(["passed"] * 5 + ["failed"])).score == 0.0
    assert score_kernel(strict, BUILT, cases(["passed"] * 6)).score == 2.0


def test_crash_or_timeout_fails_the_whole_kernel() -> None:
    crashed = score_kernel(KERNEL, BUILT, cases(["passed"] * 4 + ["crashed", "not_run"]))
    assert crashed.status == "crashed" and crashed.score == 0.0
    timed_out = score_kernel(KERNEL, BUILT, cases(["passed", "timeout"] + ["not_run"] * 4))
    assert timed_out.status == "timeout" and timed_out.score == 0.0


def test_compile_error_scores_zero_with_the_compilers_message() -> None:
    broken = Artifact("flash_attention", "compile_error", None, "src/flash_attention.cpp:3:1: error: x", (), False, 0.1)
    result = score_kernel(KERNEL, broken, cases(["not_run"] * 6))
    assert result.status == "compile_error" and result.score == 0.0
    assert "flash_attention.cpp:3:1" in result.message


def test_forbidden_symbol_deducts_the_specs_share() -> None:
    forbidden = dataclasses.replace(BUILT, forbidden_symbols=("cublasSgemm_v2",))
    full_penalty = score_kernel(KERNEL, forbidden, cases(["passed"] * 6))
    assert full_penalty.score == 0.0 and full_penalty.status == "failed"
    assert "cublasSgemm_v2" in full_penalty.message
    half = score_kernel(dataclasses.replace(KERNEL, forbidden_penalty=0.5), forbidden, cases(["passed"] * 6))
    assert half.score == 1.0 and half.deductions[0].points == 1.0
