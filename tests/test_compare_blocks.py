"""The block-wise, threaded compare gives the verdicts the whole-array float64 compare gave.

The oracle is the compare of before issue 13, verbatim (tests/whole_array_compare.py). Every figure
must be the same: counts, pass/fail, indices and messages exactly; the maxima exactly (they are
maxima of the same float64 values); the relative L2 error up to float64 rounding (a sum of the
blocks' sums of squares instead of one dot product).
"""

from __future__ import annotations

import dataclasses
import math
import threading

import numpy as np
import pytest
import whole_array_compare

from grader.boundary.protocol import POISON_BITS
import grader.compare
from grader.compare import compare
from grader.assignment import Tolerance

TOLERANCES = (Tolerance(atol=1e-3, rtol=1e-2), Tolerance(atol=1e-6, rtol=1e-6), Tolerance(atol=0.0, rtol=1e-4),
              Tolerance(atol=1e-5, rtol=0.0), Tolerance(atol=0.0, rtol=0.0))


def poison(dtype: str, count: int) -> np.ndarray:
    unsigned, bits = POISON_BITS[dtype]
    return np.full(count, bits, dtype=unsigned).view(dtype)


def assert_same_verdict(outputs: dict[str, np.ndarray], gold: dict[str, np.ndarray], tolerance: Tolerance) -> None:
    new = dataclasses.asdict(compare(outputs, gold, tolerance))
    with np.errstate(all="ignore"):  # the oracle's warnings (overflow in its norms) are not the compare's
        old = dataclasses.asdict(whole_array_compare.compare(outputs, gold, tolerance))
    # The figures the oracle has (later fields, what a NaN was computed from, are tests/test_poison.py's).
    assert old.keys() <= new.keys()
    if new["first_mismatch"] is not None:
        new["first_mismatch"] = {k: new["first_mismatch"][k] for k in old["first_mismatch"]}
    for field, expected in old.items():
        got = new[field]
        if field == "rel_l2_err" and math.isfinite(expected) and math.isfinite(got):
            assert got == pytest.approx(expected, rel=1e-12, abs=1e-300), field
        else:
            assert same(got, expected), (field, got, expected)


def same(got: object, expected: object) -> bool:
    """Equal, and of the same type, with NaN equal to NaN (a mismatch's `got` may be one)."""
    if isinstance(expected, dict):
        return isinstance(got, dict) and got.keys() == expected.keys() and all(same(got[k], v)
                                                                                for k, v in expected.items())
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(got, float) and math.isnan(got)
    return type(got) is type(expected) and got == expected


@pytest.fixture(params=[None, 1, 7, 64], ids=["default-block", "block-1", "block-7", "block-64"])
def block(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Small blocks, so that small arrays span many blocks (and the pool) and their figures must combine."""
    if request.param is not None:
        monkeypatch.setattr(grader.compare, "BLOCK", request.param)
    return grader.compare.BLOCK


def adversarial(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, tolerance: Tolerance,
                gold_dtype: str = "float64") -> tuple[np.ndarray, np.ndarray]:
    """An output and its gold mixing every kind of element: close, at and beside the tolerance's edge,
    far off, zero, NaN/Inf computed, poison, NaN/Inf in gold, huge and tiny magnitudes, |g| = atol."""
    n = math.prod(shape)
    scale = 10.0 ** rng.integers(-40, 40, n) if rng.random() < 0.3 else np.ones(n)
    g = rng.standard_normal(n) * scale
    g[rng.random(n) < 0.05] = 0.0
    kind = rng.integers(0, 13, n)
    g[kind == 11] = tolerance.atol * rng.choice([1.0, -1.0], np.count_nonzero(kind == 11))  # the edge of max_rel
    unsigned, bits = POISON_BITS[dtype]
    if np.dtype(dtype).kind == "i":
        g[kind == 12] = float(np.array(bits, unsigned).view(dtype))  # integer poison that gold happens to equal
    allowed = np.abs(g) * tolerance.rtol + tolerance.atol
    y = g.copy()
    y[kind == 1] = g[kind == 1] + allowed[kind == 1]  # at the edge (before rounding to the output's dtype)
    y[kind == 2] = g[kind == 2] + np.nextafter(allowed[kind == 2], np.inf)
    y[kind == 3] = g[kind == 3] - np.nextafter(allowed[kind == 3], 0)
    y[kind == 4] = g[kind == 4] + rng.standard_normal(np.count_nonzero(kind == 4))
    y[kind == 5] = 0.0
    y[kind == 6] = rng.choice([np.nan, np.inf, -np.inf], np.count_nonzero(kind == 6))
    g[kind == 7] = rng.choice([np.nan, np.inf, -np.inf], np.count_nonzero(kind == 7))
    y[kind == 7] = np.where(rng.random(np.count_nonzero(kind == 7)) < 0.5, g[kind == 7], 1.0)
    y[kind == 8] = g[kind == 8] * (1 + rng.standard_normal(np.count_nonzero(kind == 8)) * tolerance.rtol)
    g[kind == 9] = rng.choice([1e300, -1e300, 1e-300, 5e-324, 3.4e38, 1e-45], np.count_nonzero(kind == 9))
    y[kind == 9] = g[kind == 9] * rng.choice([1.0, -1.0, 0.5], np.count_nonzero(kind == 9))
    y[kind == 11] = g[kind == 11] * (1 + rng.random(np.count_nonzero(kind == 11)))
    with np.errstate(over="ignore", invalid="ignore"):
        if np.dtype(dtype).kind == "f":
            out = y.astype(dtype)
        else:
            info = np.iinfo(dtype)
            rounded = np.nan_to_num(np.round(y), nan=0, posinf=info.max, neginf=info.min)
            out = rounded.clip(info.min, info.max).astype(dtype)
    out.view(unsigned)[(kind == 10) | (kind == 12)] = bits
    if rng.random() < 0.2:
        out.view(unsigned)[:] = bits  # never written at all
    with np.errstate(over="ignore"):
        gold = g.astype(gold_dtype)
    return out.reshape(shape), gold.reshape(shape)


SHAPES = [(1,), (5,), (64,), (257,), (3, 4), (4, 3), (16, 16), (2, 5, 7), (3, 8, 8), (2, 3, 4, 5), (0,), (0, 3)]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_random_and_adversarial_outputs_get_the_same_verdict(dtype: str, block: int) -> None:
    rng = np.random.default_rng(13)
    for trial in range(60):
        tolerance = TOLERANCES[trial % len(TOLERANCES)]
        shape = SHAPES[trial % len(SHAPES)]
        gold_dtype = "float32" if trial % 4 == 3 else "float64"  # gold from the reference run is float32
        output, gold = adversarial(rng, shape, dtype, tolerance, gold_dtype)
        assert_same_verdict({"out": output}, {"out": gold}, tolerance)


def test_a_correct_output_of_every_magnitude_gets_the_same_verdict(block: int) -> None:
    rng = np.random.default_rng(7)
    for exponent in (-30, -3, 0, 3, 30):
        gold = rng.standard_normal((4, 33, 17)) * 10.0 ** exponent
        output = gold.astype(np.float32)  # float32 rounding only: within every tolerance but the exact one
        for tolerance in TOLERANCES:
            assert_same_verdict({"out": output}, {"out": gold}, tolerance)


def test_elements_exactly_at_the_tolerance_boundary_pass_and_one_ulp_beyond_fail(block: int) -> None:
    # Exact binary fractions: |y - g| equals atol + rtol |g| with no rounding anywhere.
    tolerance = Tolerance(atol=2.0 ** -20, rtol=2.0 ** -10)
    gold = np.arange(-40, 40, dtype=np.float64) / 8
    edge = np.abs(gold) * tolerance.rtol + tolerance.atol
    at_edge = gold + edge
    assert np.array_equal(np.abs(at_edge - gold), edge)
    assert_same_verdict({"out": at_edge}, {"out": gold}, tolerance)
    assert compare({"out": at_edge}, {"out": gold}, tolerance).passed
    assert compare({"out": at_edge}, {"out": gold}, tolerance).tolerance_used == 1.0
    beyond = at_edge.copy()
    beyond[[3, 50]] = np.nextafter(beyond[[3, 50]], np.inf * np.sign(beyond[[3, 50]] - gold[[3, 50]]))
    verdict = compare({"out": beyond}, {"out": gold}, tolerance)
    assert not verdict.passed and verdict.mismatches == 2 and verdict.first_mismatch.index == (3,)
    assert_same_verdict({"out": beyond}, {"out": gold}, tolerance)
    # atol = 0 and g = y = 0: the ratio is 0/0, which both report as NaN while the element passes.
    zeros = np.zeros(10)
    assert_same_verdict({"out": zeros}, {"out": zeros}, Tolerance(atol=0.0, rtol=1e-3))


def test_a_difference_that_overflows_float64_is_the_same_infinite_error() -> None:
    gold = np.array([1.7e308, 1.0, -1.7e308])
    output = np.array([-1.7e308, 1.0, 1.7e308])
    assert_same_verdict({"out": output}, {"out": gold}, Tolerance(atol=1e-3, rtol=1e-2))
    assert compare({"out": output}, {"out": gold}, Tolerance(atol=1e-3, rtol=1e-2)).max_abs_err == math.inf


@pytest.mark.parametrize("shape", [(6, 6), (4, 9), (9, 4), (3, 5, 7), (2, 2, 3, 4)])
def test_transposed_and_row_shifted_outputs_are_recognised_the_same(shape: tuple[int, ...], block: int) -> None:
    rng = np.random.default_rng(3)
    tolerance = Tolerance(atol=1e-4, rtol=1e-4)
    gold = rng.standard_normal(shape)
    rows, columns = shape[-2], shape[-1]
    transposed = np.ascontiguousarray(gold.reshape(-1, rows, columns).swapaxes(-1, -2)).reshape(shape)
    down = np.concatenate([rng.standard_normal(shape[:-2] + (1, columns)), gold[..., :-1, :]], axis=-2)
    up = np.concatenate([gold[..., 1:, :], rng.standard_normal(shape[:-2] + (1, columns))], axis=-2)
    for output in (transposed, down, up, gold + 1.0, np.zeros(shape)):
        assert_same_verdict({"out": output.astype(np.float32)}, {"out": gold}, tolerance)
    assert compare({"out": transposed.astype(np.float32)}, {"out": gold}, tolerance).transposed is True
    assert compare({"out": down.astype(np.float32)}, {"out": gold}, tolerance).row_shift == 1
    assert compare({"out": up.astype(np.float32)}, {"out": gold}, tolerance).row_shift == -1


def test_several_buffers_missing_misshapen_and_unusual_layouts_get_the_same_verdict(block: int) -> None:
    rng = np.random.default_rng(5)
    tolerance = Tolerance(atol=1e-3, rtol=1e-2)
    gold = {"a": rng.standard_normal((5, 6)), "b": rng.standard_normal(40), "c": rng.standard_normal((3, 3))}
    fortran = np.asfortranarray(gold["a"].astype(np.float32))
    fortran[1, 2] += 1
    big_endian = gold["b"].astype(">f4")
    big_endian[7] = np.nan
    cases = [
        {"a": fortran, "b": big_endian, "c": gold["c"].astype(np.float32)},
        {"a": fortran, "c": np.ones(3, np.float32)},  # b missing, c misshapen
        {"a": poison("float32", 30).reshape(5, 6), "b": gold["b"].astype(np.float32), "c": gold["c"]},
        {name: array.astype(np.float32) for name, array in gold.items()},
    ]
    for outputs in cases:
        assert_same_verdict(outputs, gold, tolerance)


def test_compares_from_many_threads_at_once_are_each_right(monkeypatch: pytest.MonkeyPatch) -> None:
    # A batch scores several submissions at once: their blocks share the one pool.
    monkeypatch.setattr(grader.compare, "BLOCK", 100)
    rng = np.random.default_rng(11)
    tolerance = Tolerance(atol=1e-3, rtol=1e-2)
    work = [adversarial(rng, (7, 300), "float32", tolerance) for _ in range(8)]
    with np.errstate(all="ignore"):  # the oracle widens the poison (a signalling NaN): not the compare's warning
        expected = [whole_array_compare.compare({"out": o}, {"out": g}, tolerance).mismatches for o, g in work]
    got: dict[int, int] = {}

    def grade(i: int) -> None:
        got[i] = compare({"out": work[i][0]}, {"out": work[i][1]}, tolerance).mismatches

    threads = [threading.Thread(target=grade, args=(i,)) for i in range(len(work))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [got[i] for i in range(len(work))] == expected
