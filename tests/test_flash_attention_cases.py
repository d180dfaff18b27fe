"""flash-attention-cpu's large-score cases (issue 26): scores far past float32 exp()'s range, a softmax still well
defined, a float64 truth that stays finite, and a float32 reference that stays within the tolerance of it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from grader.cases import Seed, make_case_inputs
from grader.options import Options
from grader.pipeline import grade
from grader.assignment import Case, Kernel, load_assignment

FLASH = load_assignment("flash-attention-cpu")
EXP_OVERFLOWS = 88.8  # float32 exp(x) is inf past log(FLT_MAX) = 88.72
LARGE = [(k, c) for k in FLASH.kernels for c in k.cases if {"score_offset", "score_spread"} & set(c.params)]


def test_every_kernel_has_large_score_cases() -> None:
    assert {k.name for k, _ in LARGE} == {"standard_attention", "flash_attention"}
    assert {c.name for _, c in LARGE} == {"large-scores", "large-score-spread"}


@pytest.mark.parametrize("seed", [Seed(FLASH.public_seed), Seed(FLASH.public_seed, "another-secret")],
                         ids=["public", "secret"])
@pytest.mark.parametrize(("kernel", "case"), LARGE, ids=[f"{k.name}-{c.name}" for k, c in LARGE])
def test_large_scores_leave_exps_range_while_the_float64_truth_stays_finite(kernel: Kernel, case: Case,
                                                                           seed: Seed) -> None:
    arrays = make_case_inputs(FLASH, kernel, case, seed)
    scores = arrays["Q"].astype(np.float64) @ arrays["K"].astype(np.float64).T
    # Most rows, not one: every row of a kernel without the max is then NaN.
    rows_past = (np.abs(scores).max(axis=1) > 1.2 * EXP_OVERFLOWS).mean()
    assert rows_past > 0.9, rows_past
    assert (scores.max(axis=1) > EXP_OVERFLOWS).any() and (scores.max(axis=1) < -EXP_OVERFLOWS).any() \
        if "score_offset" in case.params else (scores.max(axis=1) > EXP_OVERFLOWS).all()
    gold = FLASH.numpy_reference().flash_attention(**arrays, **case.params)["O"]
    assert np.isfinite(gold).all()
    if "score_offset" in case.params:
        # Column 0 adds one constant to every score of a row: the softmax, so O, is that of columns 1.. alone.
        plain = FLASH.numpy_reference().flash_attention(arrays["Q"][:, 1:], arrays["K"][:, 1:], arrays["V"])["O"]
        np.testing.assert_allclose(gold, plain, rtol=1e-9, atol=1e-12)
    else:
        # Not one-hot: in most rows the largest softmax weight leaves a tenth or more to the other keys.
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        largest = (weights / weights.sum(axis=1, keepdims=True)).max(axis=1)
        assert np.median(largest) < 0.9, np.median(largest)


def test_the_float32_reference_is_within_a_third_of_the_tolerance_of_float64_truth(tmp_path: Path,
                                                                                   cache_dir: Path) -> None:
    """The pack's gold is its float32 reference; graded against the float64 NumPy truth instead, the large cases
    (where scores carry float32 rounding of ulp(190) ~ 1.5e-5) stay well inside atol = 1e-4."""
    against_truth = dataclasses.replace(FLASH, gold="numpy")
    result = grade(FLASH.reference_dir, against_truth, Options(cache_dir=cache_dir))
    assert result.score == result.max_score
    for kernel in result.kernels:
        for case in kernel.cases:
            assert case.max_abs_err is not None and case.max_abs_err < kernel_tolerance(kernel.name) / 3, \
                (kernel.name, case.name, case.max_abs_err)


def kernel_tolerance(name: str) -> float:
    return FLASH.kernel(name).tolerance.atol
