"""Compare a kernel's outputs with gold, element by element, and explain the verdict.

An element passes iff |y - g| <= atol + rtol * |g|. NaN or Inf in y fails unless gold holds the
same there; NaN in gold is never a wildcard. Elements that still hold the harness's poison, as it was set, are
named "never written"; a NaN computed from the poison (an output read before it was written) or from a margin's
(memory just outside a buffer) is named by what it was computed from (`grader.boundary.protocol` says how the
payloads tell them apart, and where they cannot).

Every figure is computed in float64, one block of elements at a time: a block's temporaries stay
in a core's cache (whole-array float64 temporaries cost more in page faults than in arithmetic),
and the blocks of a large buffer are compared on all the process's cores at once (NumPy releases
the GIL). A block where everything is finite takes a shorter path with the same figures.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from grader.boundary.protocol import MARGIN_POSITIONS, MARGIN_TAG, MARGIN_TAG_MASK, OUTPUT_PAYLOAD, POISON_BITS
from grader.results import (NEVER_WRITTEN, MarginRead, READ_BEFORE_WRITTEN, READ_OUT_OF_BOUNDS, index_in_words,
                            margins_in_words)
from grader.assignment import Tolerance

BLOCK = 1 << 17  # elements: a block's float64 temporaries (1 MiB each) stay in a core's cache
T = TypeVar("T")


# What a NaN element was found to hold, where it is the harness's poison or was computed from one.


@dataclass(frozen=True)
class Mismatch:
    buffer: str
    index: tuple[int, ...]
    expected: float
    got: float
    poison: str | None = None  # NEVER_WRITTEN, READ_BEFORE_WRITTEN or READ_OUT_OF_BOUNDS; None: a value it computed
    axes: tuple[str | None, ...] = ()  # the index's axes as the spec's shape names them (`named_axes`); (): unknown


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
    nonfinite: int | None = None  # NaN/Inf the kernel computed where gold is finite, from no poison it can name
    # NaN computed from an output's poison (read before it was written) and from a margin's (read out of bounds).
    read_before_written: int | None = None
    read_out_of_bounds: int | None = None
    margins_read: tuple[MarginRead, ...] = ()
    zeros: int | None = None  # elements exactly 0 where gold is not
    transposed: bool | None = None  # the output matches gold written in the other (row/column) order
    row_shift: int | None = None  # +1/-1: the output matches gold moved down/up by one row


EXACT_ATOL = 0.5  # an integer output's tolerance: any two different integers are 1 or more apart


def compare(outputs: dict[str, np.ndarray], gold: dict[str, np.ndarray], tolerance: Tolerance,
            pointers: Sequence[str] = (),
            axes: Mapping[str, Sequence[tuple[str | None, int]]] | None = None,
            elements: Mapping[str, str] | None = None) -> Verdict:
    """Compare every graded buffer; the verdict passes only if all of them do.

    pointers: the call's pointer parameters in the signature's order, which a margin's poison names by position.
    axes: by buffer, its axes as its shape names them (`grader.assignment.shapes.named_axes`): an index is reported along
    them ("O[N=5, d=3]"); a buffer without them, along its array's shape.
    elements: by buffer, what one element is in words ("token": the spec's `element`).

    An integer output (token ids, indices) is compared exactly, whatever the tolerance: its values are counted,
    not measured.
    """
    verdicts = [_compare_buffer(name, outputs.get(name), gold[name], tolerance, tuple(pointers),
                                tuple((axes or {}).get(name, ())), (elements or {}).get(name, ""))
                for name in sorted(gold)]
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
        read_before_written=_total(v.read_before_written for v in verdicts),
        read_out_of_bounds=_total(v.read_out_of_bounds for v in verdicts),
        margins_read=tuple(dict.fromkeys(m for v in verdicts for m in v.margins_read)),
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


def _compare_buffer(name: str, output: np.ndarray | None, gold: np.ndarray, tolerance: Tolerance,
                    pointers: tuple[str, ...], axes: tuple[tuple[str | None, int], ...], element: str = "") -> Verdict:
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
    exact = bool(np.issubdtype(output.dtype, np.integer))
    if exact:  # integers a half apart are equal: exact, with a finite measure of how far (`tolerance_used`)
        tolerance = Tolerance(EXACT_ATOL, 0.0)
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
    before_written = sum(b.read_before_written for b in blocks)
    out_of_bounds = sum(b.read_out_of_bounds for b in blocks)
    margins = tuple(_margin_read(code, pointers) for code in sorted(set().union(*(b.margins for b in blocks))))
    # Indices along the spec's named axes where they lay the buffer out (their extents multiply to its size).
    along_axes = bool(axes) and math.prod(e for _, e in axes) == elements
    extents = tuple(e for _, e in axes) if along_axes else gold.shape
    names = tuple(a for a, _ in axes) if along_axes else ()
    first = None
    if mismatches:
        flat = next(b.first_mismatch for b in blocks if b.first_mismatch is not None)
        with np.errstate(invalid="ignore"):  # widening a signalling NaN raises the invalid flag
            got = float(np.float64(y[flat]))
        first = Mismatch(name, tuple(int(i) for i in np.unravel_index(flat, extents)), float(np.float64(g[flat])), got,
                         _poison_of(y[flat:flat + 1]), names)
    first_unwritten = next((b.first_unwritten for b in blocks if b.first_unwritten is not None), None)
    where_unwritten = "" if first_unwritten is None else \
        index_in_words(name, [int(i) for i in np.unravel_index(first_unwritten, extents)], names)
    # A sequence's first wrong element in its own words: "first wrong token at step 3 of 24 (batch row 0)".
    first_words = f"first wrong {element} at step {first.index[-1] + 1} of {extents[-1]}" + (
        f" ({names[0]} row {first.index[0]})" if len(extents) == 2 else "") \
        if first is not None and exact and element and names and len(extents) <= 2 else ""
    message = _explain(name, mismatches, elements, unwritten_count, computed_nonfinite, first, tolerance, max_abs,
                       where_unwritten, before_written, out_of_bounds, margins, exact, first_words, element)
    patterns = _patterns(output, gold, tolerance, computed_nonfinite) if mismatches else {}
    return Verdict(mismatches == 0, max_abs, max_rel, rel_l2, used, mismatches, elements, unwritten_count, first,
                   message, read_before_written=before_written, read_out_of_bounds=out_of_bounds,
                   margins_read=margins, **patterns)


@dataclass(frozen=True)
class _Block:
    """The figures of one block of a buffer, combined in order into the buffer's."""

    mismatches: int
    unwritten: int
    nonfinite: int  # NaN/Inf computed where gold is finite, from no poison it can name
    read_before_written: int  # NaN computed from an output's poison
    read_out_of_bounds: int  # NaN computed from a margin's poison
    margins: frozenset[int]  # the margins those came from (`_MarginCodes`)
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
        computed = ~np.isfinite(y) & ~passed & ~unwritten
        from_output, from_margin, codes = _poison_sources(y, computed)
        nonfinite = int(np.count_nonzero(computed & finite_gold & ~from_output & ~from_margin))
    unwritten_count = int(np.count_nonzero(unwritten))
    return _Block(mismatches, unwritten_count, nonfinite, int(np.count_nonzero(from_output)),
                  int(np.count_nonzero(from_margin)), codes, everything_comparable, max_abs, max_rel, used,
                  gold_squares, error_squares, start + int(np.argmin(passed)) if mismatches else None,
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
    return _Block(mismatches, 0, 0, 0, 0, frozenset(), True, largest, float(ratio.max()), used, _squares(g),
                  _squares(difference), first,
                  None)


# By float width: the NaN exponent, the shift of a float32 payload into it (`grader.boundary.protocol`), and the mask of
# the bits a shifted payload never holds (a NaN with any of them set was made by something else).
_PAYLOAD_LAYOUT = {4: (0x7F800000, 0, 0), 8: (0x7FF0000000000000, 29, (1 << 29) - 1)}
_PAYLOAD_MASK = (1 << 22) - 1


def _payloads(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each element's float32-sized NaN payload (the quiet bit and the sign ignored), and where it is a NaN that
    carries one of ours' layout. Integers: none."""
    if y.dtype.kind != "f" or y.dtype.itemsize not in _PAYLOAD_LAYOUT:
        return np.zeros(y.shape, np.int64), np.zeros(y.shape, bool)
    exponent, shift, low = _PAYLOAD_LAYOUT[y.dtype.itemsize]
    raw = y.view(f"u{y.dtype.itemsize}")
    body = raw & raw.dtype.type(exponent | ((1 << (22 + shift + 1)) - 1))  # no sign
    ours = (body > exponent) & ((body & raw.dtype.type(low)) == 0) if low else body > exponent
    return ((body >> raw.dtype.type(shift)) & raw.dtype.type(_PAYLOAD_MASK)).astype(np.int64), ours


def _poison_sources(y: np.ndarray, computed: np.ndarray) -> tuple[np.ndarray, np.ndarray, frozenset[int]]:
    """Of the `computed` elements (non-finite, not the poison as set): those computed from an output's poison, those
    from a margin's, and the margins' codes (position << 1 | after)."""
    payload, ours = _payloads(y)
    ours &= computed
    from_output = ours & (payload == OUTPUT_PAYLOAD)
    from_margin = ours & ((payload & MARGIN_TAG_MASK) == MARGIN_TAG)
    codes = frozenset(int(c) for c in np.unique(payload[from_margin] & (2 * MARGIN_POSITIONS - 1))) \
        if from_margin.any() else frozenset()
    return from_output, from_margin, codes


def _poison_of(element: np.ndarray) -> str | None:
    """What one element's NaN was found to be: the poison as set, computed from an output's or a margin's, or none."""
    unsigned, bits = POISON_BITS.get(element.dtype.name, (None, None))
    if unsigned is not None and int(element.view(unsigned)[0]) == bits:
        return NEVER_WRITTEN
    from_output, from_margin, _ = _poison_sources(element, np.ones(1, bool))
    return READ_BEFORE_WRITTEN if from_output[0] else READ_OUT_OF_BOUNDS if from_margin[0] else None


def _margin_read(code: int, pointers: tuple[str, ...]) -> MarginRead:
    position = code >> 1
    return MarginRead(pointers[position] if position < len(pointers) else None, bool(code & 1))


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
             tolerance: Tolerance, max_abs: float, where_unwritten: str, before_written: int = 0,
             out_of_bounds: int = 0, margins: Sequence[MarginRead] = (), exact: bool = False, first_words: str = "",
             element: str = "") -> str:
    if mismatches == 0:
        return f"{name}: all {elements:,} elements within tolerance"
    if unwritten_count == elements:
        return f"{name}: never written (all {elements:,} elements still hold the NaN poison)"
    parts = []
    if unwritten_count:
        parts.append(f"{unwritten_count:,} of {elements:,} elements never written (first at {where_unwritten})")
    if out_of_bounds:
        where = margins_in_words(margins) or "outside a buffer"
        parts.append(f"{out_of_bounds:,} of {elements:,} elements are NaN computed from memory {where} "
                     "(a poisoned margin): an index reads out of bounds")
    if before_written:
        parts.append(f"{before_written:,} of {elements:,} elements are NaN computed from the poison {name} starts "
                     "with: the kernel reads an output before writing it")
    if nonfinite:
        parts.append(f"{nonfinite:,} of {elements:,} elements are NaN or Inf where the expected value is finite")
    wrong = mismatches - unwritten_count - nonfinite - before_written - out_of_bounds
    if wrong > 0 and exact:
        parts.append(f"{wrong:,} of {elements:,} {f'{element}s' if element else 'values'} differ (integers, compared "
                     "exactly)")
    elif wrong > 0:
        parts.append(f"{wrong:,} of {elements:,} elements outside tolerance (atol={tolerance.atol:g}, "
                     f"rtol={tolerance.rtol:g}; max abs err {max_abs:.3g})")
    if first is not None and first_words:
        parts.append(f"{first_words}: expected {first.expected:.6g}, got {first.got:.6g}")
    elif first is not None:
        parts.append(f"first mismatch at {index_in_words(first.buffer, first.index, first.axes)}: "
                     f"expected {first.expected:.6g}, got {first.got:.6g}")
    return f"{name}: " + "; ".join(parts)
