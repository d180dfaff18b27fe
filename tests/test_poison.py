"""A computed NaN is told apart from an unwritten output: the poison's payloads, on hand-made bits and on real kernels.

The harness fills outputs with a signalling NaN and each margin with one whose payload names its buffer and side
(`grader.boundary.protocol`). Arithmetic quiets a signalling NaN and keeps its payload, so an element that holds the
poison as it was set was never written, and one computed from it says where it came from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from grader.boundary.protocol import POISON_BITS, margin_bits
from grader.compare import READ_BEFORE_WRITTEN, READ_OUT_OF_BOUNDS, MarginRead, compare
from grader.options import Options
from grader.pipeline import grade
from grader.report.hints import case_hints
from grader.results import KernelResult, Result
from grader.samples import compose, variants
from grader.assignment import Assignment, Tolerance

TOLERANCE = Tolerance(atol=1e-3, rtol=1e-2)
POINTERS = ("Q", "K", "V", "O")


def filled(bits: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, bits, dtype=POISON_BITS[dtype][0]).view(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_poison_as_set_is_never_written_and_arithmetic_on_it_is_not(dtype: str) -> None:
    gold = np.ones((3, 4), dtype)
    poison = filled(POISON_BITS[dtype][1], dtype, (3, 4))
    untouched = compare({"O": poison}, {"O": gold}, TOLERANCE, POINTERS)
    assert untouched.never_written == 12 and "never written" in untouched.message
    with np.errstate(invalid="ignore"):
        accumulated = poison * 0.5 + 1.0  # O += ... on an O never set: NumPy quiets the NaN, keeps its payload
    assert accumulated.view(POISON_BITS[dtype][0])[0, 0] != POISON_BITS[dtype][1]
    verdict = compare({"O": accumulated}, {"O": gold}, TOLERANCE, POINTERS)
    assert not verdict.passed and verdict.never_written == 0 and "never written" not in verdict.message
    assert verdict.read_before_written == 12 and verdict.nonfinite == 0
    assert verdict.first_mismatch.poison == READ_BEFORE_WRITTEN
    assert "reads an output before writing it" in verdict.message


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_nan_from_a_margin_names_the_buffer_and_its_side(dtype: str) -> None:
    gold = np.ones(6, dtype)
    with np.errstate(invalid="ignore"):
        past_k = filled(margin_bits(dtype, 1, True), dtype, (6,)) + 2.0
        before_v = -filled(margin_bits(dtype, 2, False), dtype, (6,))  # a negation flips only the sign
    produced = np.concatenate([np.ones(2, dtype), past_k[:2], before_v[:2]])
    verdict = compare({"O": produced}, {"O": gold}, TOLERANCE, POINTERS)
    assert verdict.read_out_of_bounds == 4 and verdict.never_written == 0 and verdict.nonfinite == 0
    assert set(verdict.margins_read) == {MarginRead("K", True), MarginRead("V", False)}
    assert verdict.first_mismatch.poison == READ_OUT_OF_BOUNDS
    assert "past the end of K, before the start of V" in verdict.message and "out of bounds" in verdict.message


def test_a_float32_margin_widened_to_float64_still_names_its_buffer() -> None:
    with np.errstate(invalid="ignore"):
        widened = filled(margin_bits("float32", 0, True), "float32", (4,)).astype(np.float64)
    verdict = compare({"out": widened}, {"out": np.zeros(4)}, TOLERANCE, ("x", "out"))
    assert verdict.margins_read == (MarginRead("x", True),) and verdict.read_out_of_bounds == 4


def test_a_nan_of_no_poison_is_only_computed() -> None:
    produced = np.array([np.nan, np.inf, 1.0], np.float32)
    verdict = compare({"O": produced}, {"O": np.ones(3, np.float32)}, TOLERANCE, POINTERS)
    assert verdict.nonfinite == 2 and not verdict.read_before_written and not verdict.read_out_of_bounds
    assert verdict.first_mismatch.poison is None


def test_an_index_is_reported_along_the_axes_the_shape_names() -> None:
    gold = np.zeros(2 * 3 * 5, np.float32)
    produced = gold.copy()
    produced[1 * 15 + 2 * 5 + 4] = 1.0
    axes = {"tokens": (("batch", 2), ("steps", 3), (None, 5))}  # "batch * steps * 5"
    verdict = compare({"tokens": produced}, {"tokens": gold}, TOLERANCE, axes=axes)
    assert verdict.first_mismatch.index == (1, 2, 4)
    assert "first mismatch at tokens[batch=1, steps=2, 4]: expected 0, got 1" in verdict.message
    # Axes whose extents do not make the buffer's size are not used: the array's own shape is.
    plain = compare({"tokens": produced}, {"tokens": gold}, TOLERANCE, axes={"tokens": (("batch", 4),)})
    assert plain.first_mismatch.index == (29,) and "first mismatch at [29]" in plain.message


# ---------------------------------------------------------------- real C++ kernels, through the whole pipeline


@pytest.fixture(scope="module")
def mutants(flash: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> dict[str, KernelResult]:
    """flash_attention of the two samples whose NaN comes from poison they read, graded for real (that kernel only)."""
    found = {}
    for sample in variants(flash):
        if sample.name in ("mutant-flash-reads-past-inputs", "mutant-flash-reads-output-before-writing"):
            folder = compose(flash, sample, tmp_path_factory.mktemp(sample.name))
            result = grade(folder, flash, Options(cache_dir=cache_dir, kernels=("flash_attention",)))
            # As a store or `grader report` reads it back: the poison's facts are fields that survive JSON.
            result = Result.from_json(result.to_json())
            found[sample.name] = next(k for k in result.kernels if k.name == "flash_attention")
    return found


def test_a_kernel_that_reads_past_its_inputs_is_told_so_not_never_written(mutants: dict[str, KernelResult]) -> None:
    kernel = mutants["mutant-flash-reads-past-inputs"]
    failed = [c for c in kernel.cases if not c.passed]
    assert [c.name for c in failed] == ["one-row", "odd-sizes", "partial-tiles", "large-scores"]
    for case in failed:
        assert "never written" not in case.message and case.never_written == 0, case.message
        assert case.read_out_of_bounds == case.elements, case.message
        assert "past the end of" in case.message and "an index reads out of bounds" in case.message
        assert {m.buffer for m in case.margins_read} <= {"K", "V"} and all(m.after for m in case.margins_read)
        hints = case_hints(case)
        assert any("reads out of bounds" in h for h in hints) and not any("TODO" in h for h in hints), hints


def test_a_kernel_that_reads_its_output_before_writing_it_is_told_so(mutants: dict[str, KernelResult]) -> None:
    kernel = mutants["mutant-flash-reads-output-before-writing"]
    assert kernel.cases_passed == 0
    for case in kernel.cases:
        assert "never written" not in case.message and case.never_written == 0, case.message
        assert case.read_before_written == case.elements, case.message
        assert "reads an output before writing it" in case.message
        assert case.first_mismatch.poison == READ_BEFORE_WRITTEN and case.first_mismatch.axes == ["N", "d"]
        hints = case_hints(case)
        assert any("Set them, or a local accumulator, to 0" in h for h in hints) and \
            not any("TODO" in h for h in hints), hints
