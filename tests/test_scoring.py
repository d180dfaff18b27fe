"""Scoring: partial credit, all-or-nothing, a crash costs its case, forbidden symbols deduct and say so."""

from __future__ import annotations

import dataclasses

from grader.build import Artifact
from grader.results import CaseResult, ForbiddenUse
from grader.scoring import case_result, score_kernel
from grader.assignment import load_assignment
from grader.status import CaseStatus

KERNEL = load_assignment("flash-attention-cpu").kernel("flash_attention")  # weight 2
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


def test_a_crashed_or_timed_out_case_costs_that_case_only() -> None:
    # A launch error at T = 1 (a grid of 0 blocks) must not take the kernel's other cases with it.
    crashed = score_kernel(KERNEL, BUILT, cases(["crashed"] + ["passed"] * 5))
    assert crashed.status == "failed" and crashed.score == round(2.0 * 5 / 6, 6)
    assert "case 'c0': crashed" in crashed.message
    timed_out = score_kernel(KERNEL, BUILT, cases(["passed", "timeout"] + ["not_run"] * 4))
    assert timed_out.status == "failed" and timed_out.score == round(2.0 / 6, 6)


def test_a_kernel_with_no_passing_case_takes_its_first_crash_or_timeout_as_status() -> None:
    assert score_kernel(KERNEL, BUILT, cases(["failed", "crashed"] + ["crashed"] * 4)).status == "crashed"
    timed_out = score_kernel(KERNEL, BUILT, cases(["timeout"] + ["not_run"] * 5))
    assert timed_out.status == "timeout" and timed_out.score == 0.0


def test_a_kernel_that_could_not_run_here_is_not_run_with_the_reason() -> None:
    result = score_kernel(KERNEL, BUILT, [CaseResult(f"c{i}", False, "not_run", False, "not run: this machine has no "
                                                     "NVIDIA GPU") for i in range(6)])
    assert result.status == "not_run" and result.message == "not run: this machine has no NVIDIA GPU"


def test_compile_error_scores_zero_with_the_compilers_message() -> None:
    broken = Artifact("flash_attention", "compile_error", None, "src/flash_attention.cpp:3:1: error: x", (), False, 0.1)
    result = score_kernel(KERNEL, broken, cases(["not_run"] * 6))
    assert result.status == "compile_error" and result.score == 0.0
    assert "flash_attention.cpp:3:1" in result.message


def test_forbidden_symbol_deducts_the_specs_share_and_says_whether_the_outputs_were_right() -> None:
    forbidden = dataclasses.replace(BUILT, forbidden_symbols=("cublasSgemm_v2",))
    full_penalty = score_kernel(KERNEL, forbidden, cases(["passed"] * 6))
    assert full_penalty.score == 0.0 and full_penalty.status == "forbidden"
    assert full_penalty.message == ("calls cublasSgemm_v2, which this assignment forbids (its outputs were correct)")
    assert full_penalty.forbidden_symbols == ["cublasSgemm_v2"]
    half = score_kernel(dataclasses.replace(KERNEL, forbidden_penalty=0.5), forbidden, cases(["passed"] * 6))
    assert half.score == 1.0 and half.deductions[0].points == 1.0
    wrong = score_kernel(KERNEL, forbidden, cases(["passed"] * 4 + ["failed"] * 2))
    assert wrong.status == "forbidden" and "its outputs were correct in 4 of 6 cases" in wrong.message


def test_a_forbidden_call_is_reported_even_where_nothing_could_run() -> None:
    forbidden = dataclasses.replace(BUILT, forbidden_symbols=("cublasSgemm_v2",))
    unrun = [CaseResult(f"c{i}", False, "not_run", False, "not run: this machine has no NVIDIA GPU") for i in range(6)]
    result = score_kernel(KERNEL, forbidden, unrun)
    assert result.status == "forbidden" and result.score == 0
    assert result.message == "calls cublasSgemm_v2, which this assignment forbids (not run: this machine has no NVIDIA GPU)"


def test_a_cases_facts_travel_as_fields_beside_the_words() -> None:
    import numpy as np

    from grader.compare import compare
    from grader.runner import CallOutcome

    case = KERNEL.cases[0]
    crashed = case_result(case, CallOutcome(KERNEL.name, case.name, "crashed", "the process was killed by signal "
                                            "SIGSEGV during this case", signal="SIGSEGV"), None)
    assert crashed.status is CaseStatus.CRASHED and crashed.signal == "SIGSEGV"
    gold = {"O": np.ones((2, 2), np.float32)}
    outside = CallOutcome(KERNEL.name, case.name, "ok", out_of_bounds=("8 element(s) past the end of O",),
                          inputs_modified=("Q",))
    wrote = case_result(case, outside, compare({"O": gold["O"].copy()}, gold, KERNEL.tolerance_for(case)))
    assert wrote.status is CaseStatus.FAILED and not wrote.passed and wrote.signal is None
    assert wrote.out_of_bounds == ["8 element(s) past the end of O"] and wrote.inputs_modified == ["Q"]
    assert "wrote out of bounds: 8 element(s) past the end of O" in wrote.message  # the words stay for people


def test_a_forbidden_use_seen_in_a_run_costs_the_penalty_and_one_only_named_is_a_free_note() -> None:
    """A python kernel: the library says nothing (no symbols); its cases' records say what ran, its build what is
    named. The line that ran is no note; the helper's line that never ran is."""
    named = dataclasses.replace(BUILT, forbidden_named=((".toarray", "kernels/k.py", 6), (".toarray", "kernels/k.py",
                                                                                           19), ("torch", "kernels/k.py", 2)))
    ran = [dataclasses.replace(c, forbidden_used=[ForbiddenUse(".toarray", "kernels/k.py", 6)])
           for c in cases(["passed"] * 5 + ["crashed"])]
    half = score_kernel(dataclasses.replace(KERNEL, forbidden_penalty=0.5), named, ran)
    assert half.status == "forbidden" and half.score == round(2.0 * 5 / 6 - 1.0, 6)
    assert half.forbidden_symbols == [".toarray (at kernels/k.py:6)"]
    assert half.deductions[0].reason == ("calls .toarray (at kernels/k.py:6, during flash_attention's call), which "
                                         "this assignment forbids (its outputs were correct in 5 of 6 cases)")
    assert [(u.name, u.line) for u in half.forbidden_named] == [(".toarray", 19), ("torch", 2)]
    clean = score_kernel(KERNEL, named, cases(["passed"] * 6))
    assert clean.status == "passed" and clean.score == 2.0 and clean.forbidden_symbols == []
    assert len(clean.forbidden_named) == 3
