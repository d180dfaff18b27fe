"""The compare of before issue 13, kept as the oracle for grader.compare: whole arrays in float64, one pass per
figure. The chunked, threaded compare must give the same verdicts. One rule added since (issue 41): an integer
output is compared exactly, whatever the tolerance (a half apart, which any two integers are not)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grader.boundary.protocol import never_written
from grader.assignment import Tolerance


@dataclass(frozen=True)
class Mismatch:
    buffer: str
    index: tuple[int, ...]
    expected: float
    got: float


@dataclass(frozen=True)
class Verdict:
    """One case of one kernel: passed or not, with the figures that explain why."""

    passed: bool
    max_abs_err: float
    max_rel_err: float
    rel_l2_err: float
    tolerance_used: float  # max over elements of |y - g| / (atol + rtol |g|): passing needs <= 1
    mismatches: int
    elements: int
    never_written: int
    first_mismatch: Mismatch | None
    message: str
    # Figures that let a report recognise a failure's pattern (None where not measured):
    nonfinite: int | None = None  # NaN/Inf the kernel computed where gold is finite (poison excluded)
    zeros: int | None = None  # elements exactly 0 where gold is not
    transposed: bool | None = None  # the output matches gold written in the other (row/column) order
    row_shift: int | None = None  # +1/-1: the output matches gold moved down/up by one row


def compare(outputs: dict[str, np.ndarray], gold: dict[str, np.ndarray], tolerance: Tolerance) -> Verdict:
    """Compare every graded buffer; the verdict passes only if all of them do."""
    verdicts = [_compare_buffer(name, outputs.get(name), gold[name], tolerance) for name in sorted(gold)]
    failed = [v for v in verdicts if not v.passed]
    first = next((v.first_mismatch for v in failed if v.first_mismatch), None)
    return Verdict(
        passed=not failed,
        max_abs_err=max(v.max_abs_err for v in verdicts),
        max_rel_err=max(v.max_rel_err for v in verdicts),
        rel_l2_err=max(v.rel_l2_err for v in verdicts),
        tolerance_used=max(v.tolerance_used for v in verdicts),
        mismatches=sum(v.mismatches for v in verdicts),
        elements=sum(v.elements for v in verdicts),
        never_written=sum(v.never_written for v in verdicts),
        first_mismatch=first,
        message="; ".join(v.message for v in failed) if failed else _passed_message(verdicts),
        nonfinite=_total(v.nonfinite for v in verdicts),
        zeros=_total(v.zeros for v in verdicts),
        transposed=all(v.transposed for v in failed) if failed and all(v.transposed is not None for v in failed) else None,
        row_shift=failed[0].row_shift if failed and len({v.row_shift for v in failed}) == 1 else None,
    )


def _total(counts) -> int | None:
    measured = [c for c in counts if c is not None]
    return sum(measured) if measured else None


def _passed_message(verdicts: list[Verdict]) -> str:
    worst = max(verdicts, key=lambda v: v.max_abs_err)
    return f"all {sum(v.elements for v in verdicts):,} elements within tolerance (max abs err {worst.max_abs_err:.3g})"


def _compare_buffer(name: str, output: np.ndarray | None, gold: np.ndarray, tolerance: Tolerance) -> Verdict:
    elements = int(gold.size)
    if output is None:
        return Verdict(False, float("inf"), float("inf"), float("inf"), float("inf"), elements, elements, elements,
                       None, f"{name}: no output was saved")
    if output.shape != gold.shape:
        return Verdict(False, float("inf"), float("inf"), float("inf"), float("inf"), elements, elements, 0, None,
                       f"{name}: shape {list(output.shape)}, expected {list(gold.shape)}")
    exact = bool(np.issubdtype(output.dtype, np.integer))
    if exact:
        tolerance = Tolerance(0.5, 0.0)
    unwritten = never_written(output)
    y = output.astype(np.float64)
    g = gold.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        difference = np.abs(y - g)
        allowed = np.abs(g)
        allowed *= tolerance.rtol
        allowed += tolerance.atol
        passed = difference <= allowed
        finite_gold = np.isfinite(g)
        if not finite_gold.all():
            same_nonfinite = (np.isnan(y) & np.isnan(g)) | (np.isinf(g) & (y == g))
            passed = np.where(finite_gold, passed, same_nonfinite)
    passed &= ~unwritten
    mismatches = int(elements - np.count_nonzero(passed))
    comparable = np.isfinite(y) & finite_gold
    everything_comparable = bool(comparable.all())

    def over_comparable(array: np.ndarray) -> np.ndarray:
        # Boolean indexing copies: skip it in the common case where every element is finite.
        return array.ravel() if everything_comparable else array[comparable]

    max_abs = float(over_comparable(difference).max(initial=0.0))
    significant = comparable & (np.abs(g) > tolerance.atol)
    max_rel = float((difference[significant] / np.abs(g[significant])).max(initial=0.0))
    gold_norm = float(np.linalg.norm(over_comparable(g)))
    if mismatches and not everything_comparable:
        rel_l2 = float("inf")
    else:
        rel_l2 = float(np.linalg.norm(over_comparable(y) - over_comparable(g)) / gold_norm) if gold_norm > 0 else max_abs
    with np.errstate(divide="ignore", invalid="ignore"):
        used = float((difference / allowed).max(initial=0.0)) if everything_comparable else float("inf")
    unwritten_count = int(np.count_nonzero(unwritten))
    computed_nonfinite = int(np.count_nonzero(~np.isfinite(y) & finite_gold & ~unwritten)) if mismatches else 0
    first = None
    if mismatches:
        index = tuple(int(i) for i in np.unravel_index(int(np.argmin(passed)), gold.shape))
        first = Mismatch(name, index, float(g[index]), float(y[index]))
    message = _explain(name, mismatches, elements, unwritten_count, computed_nonfinite, first, tolerance, max_abs,
                       unwritten, exact)
    patterns = _patterns(y, g, tolerance, unwritten, finite_gold) if mismatches else {}
    return Verdict(mismatches == 0, max_abs, max_rel, rel_l2, used, mismatches, elements, unwritten_count, first,
                   message, **patterns)


def _patterns(y: np.ndarray, g: np.ndarray, tolerance: Tolerance, unwritten: np.ndarray,
              finite_gold: np.ndarray) -> dict:
    """The figures behind a report's hints: computed NaN/Inf, zeros, a transposed or row-shifted output."""
    with np.errstate(invalid="ignore", over="ignore"):
        found: dict = {
            "nonfinite": int(np.count_nonzero(~np.isfinite(y) & finite_gold & ~unwritten)),
            "zeros": int(np.count_nonzero((y == 0) & (g != 0))),
        }
        if y.ndim >= 2 and y.shape[-1] > 1 and y.shape[-2] > 1:
            rows, columns = y.shape[-2], y.shape[-1]
            # A kernel that stores row-major results column-major: y's memory read as gold's transpose.
            as_transposed = y.reshape(-1, columns, rows).swapaxes(-1, -2).reshape(y.shape)
            found["transposed"] = _close(as_transposed, g, tolerance)
            found["row_shift"] = next((shift for shift, a, b in ((1, y[..., 1:, :], g[..., :-1, :]),
                                                                 (-1, y[..., :-1, :], g[..., 1:, :]))
                                       if _close(a, b, tolerance)), None)
    return found


def _close(y: np.ndarray, g: np.ndarray, tolerance: Tolerance) -> bool:
    return bool(np.all(np.abs(y - g) <= tolerance.atol + tolerance.rtol * np.abs(g)))


def _explain(name: str, mismatches: int, elements: int, unwritten_count: int, nonfinite: int, first: Mismatch | None,
             tolerance: Tolerance, max_abs: float, unwritten: np.ndarray, exact: bool = False) -> str:
    if mismatches == 0:
        return f"{name}: all {elements:,} elements within tolerance"
    if unwritten_count == elements:
        return f"{name}: never written (all {elements:,} elements still hold the NaN poison)"
    parts = []
    if unwritten_count:
        where = [int(i) for i in np.unravel_index(int(np.argmax(unwritten)), unwritten.shape)]
        parts.append(f"{unwritten_count:,} of {elements:,} elements never written (first at {where})")
    if nonfinite:
        parts.append(f"{nonfinite:,} of {elements:,} elements are NaN or Inf where the expected value is finite")
    wrong = mismatches - unwritten_count - nonfinite
    if wrong > 0 and exact:
        parts.append(f"{wrong:,} of {elements:,} values differ (integers, compared exactly)")
    elif wrong > 0:
        parts.append(f"{wrong:,} of {elements:,} elements outside tolerance (atol={tolerance.atol:g}, "
                     f"rtol={tolerance.rtol:g}; max abs err {max_abs:.3g})")
    if first is not None:
        parts.append(f"first mismatch at {list(first.index)}: expected {first.expected:.6g}, got {first.got:.6g}")
    return f"{name}: " + "; ".join(parts)
