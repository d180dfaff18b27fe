"""Compare a kernel's outputs with gold, element by element, and explain the verdict.

An element passes iff |y - g| <= atol + rtol * |g|. NaN or Inf in y fails unless gold holds the
same there; NaN in gold is never a wildcard. Elements that still hold the harness's NaN poison are
named "never written".

Every figure is computed in float64, one block of elements at a time: a block's temporaries stay
in a core's cache (whole-array float64 temporaries cost more in page faults than in arithmetic),
and the blocks of a large buffer are compared on all the process's cores at once (NumPy releases
the GIL). A block where everything is finite takes a shorter path with the same figures.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from grader.boundary.protocol import POISON_BITS
from grader.spec import Tolerance

BLOCK = 1 << 17  # elements: a block's float64 temporaries (1 MiB each) stay in a core's cache
T = TypeVar("T")


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
    if output.dtype.name not in POISON_BITS:  # the harness never writes one: the file was replaced after the call
        return Verdict(False, float("inf"), float("inf"), float("inf"), float("inf"), elements, elements, 0, None,
                       f"{name}: the saved output holds {output.dtype.name} data, which the harness never writes")
    poison = POISON_BITS[output.dtype.name]
    y, g = output.reshape(-1), gold.reshape(-1)
    blocks = _in_parallel(lambda start: _compare_block(y[start:start + BLOCK], g[start:start + BLOCK], start,
                                                       tolerance, poison), range(0, elements, BLOCK))
    mismatches = sum(b.mismatches for b in blocks)
    unwritten_count = sum(b.unwritten for b in blocks)
    everything_comparable = all(b.comparable for b in blocks)
    max_abs = max((b.max_abs for b in blocks), default=0.0)
    max_rel = max((b.max_rel for b in blocks), default=0.0)
    # The norms are sums of the blocks' sums of squares: the same as one norm up to float64 rounding.
    gold_norm = math.sqrt(sum(b.gold_squares for b in blocks))
    if mismatches and not everything_comparable:
        rel_l2 = float("inf")
    else:
        rel_l2 = math.sqrt(sum(b.error_squares for b in blocks)) / gold_norm if gold_norm > 0 else max_abs
    # np.max, not max(): a NaN ratio (0 / 0 where atol = 0) must come out as NaN, whichever block holds it.
    used = float(np.max([b.used for b in blocks], initial=0.0)) if everything_comparable else float("inf")
    computed_nonfinite = sum(b.nonfinite for b in blocks) if mismatches else 0
    first = None
    if mismatches:
        flat = next(b.first_mismatch for b in blocks if b.first_mismatch is not None)
        index = tuple(int(i) for i in np.unravel_index(flat, gold.shape))
        first = Mismatch(name, index, float(np.float64(gold[index])), float(np.float64(output[index])))
    first_unwritten = next((b.first_unwritten for b in blocks if b.first_unwritten is not None), None)
    where_unwritten = [] if first_unwritten is None else [int(i) for i in np.unravel_index(first_unwritten, gold.shape)]
    message = _explain(name, mismatches, elements, unwritten_count, computed_nonfinite, first, tolerance, max_abs,
                       where_unwritten)
    patterns = _patterns(output, gold, tolerance, computed_nonfinite) if mismatches else {}
    return Verdict(mismatches == 0, max_abs, max_rel, rel_l2, used, mismatches, elements, unwritten_count, first,
                   message, **patterns)


@dataclass(frozen=True)
class _Block:
    """The figures of one block of a buffer, combined in order into the buffer's."""

    mismatches: int
    unwritten: int
    nonfinite: int  # NaN/Inf computed where gold is finite, poison excluded
    comparable: bool  # every element of y and of gold is finite
    max_abs: float  # over the comparable elements
    max_rel: float  # over the comparable elements where |g| > atol
    used: float  # max |y - g| / allowed: meaningful only where every block is comparable
    gold_squares: float  # sum of g² over the comparable elements
    error_squares: float  # sum of (y - g)² over the comparable elements
    first_mismatch: int | None  # flat index in the buffer
    first_unwritten: int | None


def _compare_block(y: np.ndarray, g: np.ndarray, start: int, tolerance: Tolerance, poison: tuple[str, int]) -> _Block:
    """One block: y the output's elements (its own dtype), g gold's, `start` the block's flat offset."""
    g = g if g.dtype == np.float64 else g.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        difference = np.subtract(y, g, dtype=np.float64)  # y is widened exactly, as by astype
        np.abs(difference, out=difference)
        magnitude = np.abs(g)
        allowed = magnitude * tolerance.rtol
        allowed += tolerance.atol
        largest = difference.max()
        # A finite largest difference means every y and g is finite, so no float poison is left either.
        if y.dtype.kind == "f" and np.isfinite(largest):
            return _finite_block(difference, magnitude, allowed, g, float(largest), start, tolerance)
        unsigned, bits = poison
        unwritten = y.view(unsigned) == np.dtype(unsigned).type(bits)
        passed = difference <= allowed
        finite_gold = np.isfinite(g)
        if not finite_gold.all():
            same_nonfinite = (np.isnan(y) & np.isnan(g)) | (np.isinf(g) & (y == g))
            passed = np.where(finite_gold, passed, same_nonfinite)
        passed &= ~unwritten
        mismatches = int(passed.size - np.count_nonzero(passed))
        comparable = np.isfinite(y) & finite_gold
        everything_comparable = bool(comparable.all())
        max_abs = float(np.max(difference, where=comparable, initial=0.0))
        significant = comparable & (magnitude > tolerance.atol)
        max_rel = float(np.max(difference / magnitude, where=significant, initial=0.0))
        if everything_comparable:
            gold_squares, error_squares = _squares(g), _squares(difference)
            used = float((difference / allowed).max())
        else:
            kept_gold, kept_error = g[comparable], difference[comparable]
            gold_squares, error_squares = _squares(kept_gold), _squares(kept_error)
            used = float("inf")
        nonfinite = int(np.count_nonzero(~np.isfinite(y) & finite_gold & ~unwritten))
    unwritten_count = int(np.count_nonzero(unwritten))
    return _Block(mismatches, unwritten_count, nonfinite, everything_comparable, max_abs, max_rel, used, gold_squares,
                  error_squares, start + int(np.argmin(passed)) if mismatches else None,
                  start + int(np.argmax(unwritten)) if unwritten_count else None)


def _finite_block(difference: np.ndarray, magnitude: np.ndarray, allowed: np.ndarray, g: np.ndarray, largest: float,
                  start: int, tolerance: Tolerance) -> _Block:
    """A block where every y and g is finite: nothing to mask, and mismatches only counted where some may exist."""
    ratio = difference / allowed
    used = float(ratio.max())
    # A rounded d / allowed below 1 proves d < allowed (rounding is monotonic and 1 is exact): all pass.
    if used < 1.0:
        mismatches, first = 0, None
    else:
        passed = difference <= allowed
        mismatches = int(passed.size - np.count_nonzero(passed))
        first = start + int(np.argmin(passed)) if mismatches else None
    # Relative errors where |g| > atol; zero elsewhere, which the max over these non-negative values ignores.
    np.divide(difference, magnitude, out=ratio)
    np.copyto(ratio, 0.0, where=magnitude <= tolerance.atol)
    return _Block(mismatches, 0, 0, True, largest, float(ratio.max()), used, _squares(g), _squares(difference), first,
                  None)


def _squares(x: np.ndarray) -> float:
    """The sum of x²: by einsum, not BLAS, whose threaded dot contends with the compare pool's threads."""
    return float(np.einsum("i,i->", x, x))


def _patterns(output: np.ndarray, gold: np.ndarray, tolerance: Tolerance, nonfinite: int) -> dict:
    """The figures behind a report's hints: computed NaN/Inf, zeros, a transposed or row-shifted output."""
    y, g = output.reshape(-1), gold.reshape(-1)
    zeros = _in_parallel(lambda s: int(np.count_nonzero((y[s:s + BLOCK] == 0) & (g[s:s + BLOCK] != 0))),
                         range(0, y.size, BLOCK))
    found: dict = {"nonfinite": nonfinite, "zeros": sum(zeros)}
    if output.ndim >= 2 and output.shape[-1] > 1 and output.shape[-2] > 1:
        rows, columns = output.shape[-2], output.shape[-1]
        mine, theirs = output.reshape(-1, rows, columns), gold.reshape(-1, rows, columns)
        # A kernel that stores row-major results column-major: y's memory read as gold's transpose.
        as_transposed = output.reshape(-1, columns, rows).swapaxes(-1, -2)
        found["transposed"] = _close(as_transposed, theirs, tolerance)
        found["row_shift"] = next((shift for shift, a, b in ((1, mine[:, 1:, :], theirs[:, :-1, :]),
                                                             (-1, mine[:, :-1, :], theirs[:, 1:, :]))
                                   if _close(a, b, tolerance)), None)
    return found


def _close(y: np.ndarray, g: np.ndarray, tolerance: Tolerance) -> bool:
    """Whether every element of y (matrices, stacked) is within tolerance of g's: block by block, stopping at the first
    block that is not, since most outputs a hint is tested against are nothing like it."""
    rows_per_block = max(1, BLOCK // y.shape[-1])
    with np.errstate(invalid="ignore", over="ignore"):
        for matrix in range(y.shape[0]):
            for row in range(0, y.shape[1], rows_per_block):
                a = y[matrix, row:row + rows_per_block].astype(np.float64)
                b = g[matrix, row:row + rows_per_block].astype(np.float64)
                if not np.all(np.abs(a - b) <= tolerance.atol + tolerance.rtol * np.abs(b)):
                    return False
    return True


def _in_parallel(function: Callable[[int], T], starts: Sequence[int]) -> list[T]:
    """function(start) for each block start, in order: on the compare pool where there is more than one block."""
    if len(starts) <= 1:
        return [function(start) for start in starts]
    return list(_pool().map(function, starts))


# One pool per process, shared by every compare in it (a batch scores several submissions at once:
# the blocks queue up instead of multiplying threads). Keyed by pid: a forked child has none of the
# parent's threads, so it starts its own pool.
_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool() -> ThreadPoolExecutor:
    pid = os.getpid()
    pool = _POOLS.get(pid)
    if pool is None:
        # The cores this process may run on (a Slurm task or a taskset gets fewer than the machine has).
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        pool = _POOLS.setdefault(pid, ThreadPoolExecutor(max_workers=cores, thread_name_prefix="kg-compare"))
    return pool


def _explain(name: str, mismatches: int, elements: int, unwritten_count: int, nonfinite: int, first: Mismatch | None,
             tolerance: Tolerance, max_abs: float, where_unwritten: list[int]) -> str:
    if mismatches == 0:
        return f"{name}: all {elements:,} elements within tolerance"
    if unwritten_count == elements:
        return f"{name}: never written (all {elements:,} elements still hold the NaN poison)"
    parts = []
    if unwritten_count:
        parts.append(f"{unwritten_count:,} of {elements:,} elements never written (first at {where_unwritten})")
    if nonfinite:
        parts.append(f"{nonfinite:,} of {elements:,} elements are NaN or Inf where the expected value is finite")
    wrong = mismatches - unwritten_count - nonfinite
    if wrong > 0:
        parts.append(f"{wrong:,} of {elements:,} elements outside tolerance (atol={tolerance.atol:g}, "
                     f"rtol={tolerance.rtol:g}; max abs err {max_abs:.3g})")
    if first is not None:
        parts.append(f"first mismatch at {list(first.index)}: expected {first.expected:.6g}, got {first.got:.6g}")
    return f"{name}: " + "; ".join(parts)
