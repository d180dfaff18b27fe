"""compare() on hand-made arrays: the tolerance rule, NaN handling and never-written poison."""

from __future__ import annotations

import numpy as np

from grader.boundary.protocol import POISON_BITS
from grader.compare import compare
from grader.assignment import Tolerance

TOLERANCE = Tolerance(atol=1e-3, rtol=1e-2)


def poisoned(shape: tuple[int, ...]) -> np.ndarray:
    unsigned, bits = POISON_BITS["float32"]
    return np.full(shape, bits, dtype=unsigned).view(np.float32)


def test_elements_within_atol_plus_rtol_pass_and_just_outside_fail() -> None:
    gold = np.array([0.0, 1.0, -100.0], dtype=np.float32)
    inside = gold + np.array([0.9e-3, 1.0e-3 + 0.9e-2, -0.9], dtype=np.float32)
    outside = gold + np.array([0.0, 0.0, -1.1], dtype=np.float32)
    assert compare({"out": inside}, {"out": gold}, TOLERANCE).passed
    verdict = compare({"out": outside}, {"out": gold}, TOLERANCE)
    assert not verdict.passed
    assert verdict.mismatches == 1
    assert verdict.first_mismatch is not None and verdict.first_mismatch.index == (2,)
    assert verdict.first_mismatch.expected == -100.0
    assert abs(verdict.max_abs_err - 1.1) < 1e-4


def test_nan_in_output_fails_and_nan_in_gold_is_no_wildcard() -> None:
    gold = np.array([1.0, np.nan, np.inf], dtype=np.float32)
    assert compare({"out": np.array([1.0, np.nan, np.inf], np.float32)}, {"out": gold}, TOLERANCE).passed
    assert not compare({"out": np.array([1.0, 5.0, np.inf], np.float32)}, {"out": gold}, TOLERANCE).passed
    assert not compare({"out": np.array([1.0, np.nan, -np.inf], np.float32)}, {"out": gold}, TOLERANCE).passed
    computed_nan = compare({"out": np.array([np.nan, 1.0], np.float32)}, {"out": np.array([1.0, 1.0], np.float32)},
                           TOLERANCE)
    assert not computed_nan.passed and computed_nan.never_written == 0


def test_untouched_poison_is_reported_as_never_written() -> None:
    gold = np.ones((2, 3), dtype=np.float32)
    nothing = compare({"out": poisoned((2, 3))}, {"out": gold}, TOLERANCE)
    assert not nothing.passed and nothing.never_written == 6
    assert "never written" in nothing.message
    partly = poisoned((2, 3))
    partly[0] = 1.0
    verdict = compare({"out": partly}, {"out": gold}, TOLERANCE)
    assert verdict.never_written == 3 and verdict.mismatches == 3
    assert "3 of 6 elements never written (first at [1, 0])" in verdict.message


def test_relative_l2_error_and_wrong_shape() -> None:
    gold = np.array([3.0, 4.0], dtype=np.float32)
    verdict = compare({"out": np.array([3.0, 4.5], np.float32)}, {"out": gold}, TOLERANCE)
    assert abs(verdict.rel_l2_err - 0.1) < 1e-6
    assert "expected 4, got 4.5" in verdict.message
    wrong = compare({"out": np.ones(3, np.float32)}, {"out": gold}, TOLERANCE)
    assert not wrong.passed and "shape [3], expected [2]" in wrong.message
    missing = compare({}, {"out": gold}, TOLERANCE)
    assert not missing.passed and "no output was saved" in missing.message


def test_tolerance_used_says_how_close_the_worst_element_came() -> None:
    gold = np.array([0.0, 10.0], dtype=np.float32)
    verdict = compare({"out": np.array([0.0005, 10.05], np.float32)}, {"out": gold}, TOLERANCE)
    # element 0 uses 0.5 of atol=1e-3; element 1 uses 0.05 / (1e-3 + 0.1) of its allowance
    assert verdict.passed and abs(verdict.tolerance_used - 0.5) < 1e-3


def test_an_output_of_a_dtype_the_harness_never_writes_fails_its_case_with_words() -> None:
    # Code that rewrites its output file after the call (an exit handler) must fail the case, never the grader.
    from grader.compare import compare
    from grader.assignment import Tolerance

    gold = {"out": np.zeros((4, 4))}
    verdict = compare({"out": np.zeros((4, 4), dtype=np.float16)}, gold, Tolerance(1e-5, 1e-5))
    assert not verdict.passed and verdict.mismatches == 16
    assert "float16" in verdict.message and "never writes" in verdict.message


def test_integer_outputs_are_compared_exactly_and_a_tokens_first_wrong_one_is_said_as_such() -> None:
    gold = np.array([[5, 7, 9, 11], [1, 2, 3, 4]], dtype=np.int32)
    tokens = gold.copy()
    tokens[1, 2] = 13
    # Whatever the tolerance (rtol 0.5 would let 3 pass as 4): integers are counted, not measured.
    loose = Tolerance(atol=1.0, rtol=0.5)
    verdict = compare({"generated": tokens}, {"generated": gold.astype(np.float64)}, loose,
                      axes={"generated": (("batch", 2), ("new_tokens", 4))}, elements={"generated": "token"})
    assert not verdict.passed and verdict.mismatches == 1
    assert verdict.message == ("generated: 1 of 8 tokens differ (integers, compared exactly); first wrong token at "
                               "step 3 of 4 (batch row 1): expected 3, got 13")
    assert compare({"generated": gold.copy()}, {"generated": gold.astype(np.float64)}, loose).passed
    # Off by one, unnamed: still exact, in plain words.
    plain = compare({"ids": gold + 1}, {"ids": gold.astype(np.float64)}, Tolerance(atol=2.0, rtol=0.0))
    assert plain.mismatches == 8 and plain.message.startswith("ids: 8 of 8 values differ (integers, compared exactly)")
