"""Hints for recognisable failure patterns, computed from what a `Result` holds and nothing else.

A hint names the pattern and where to look; it never guesses when the figures don't show it.
"""

from __future__ import annotations

from grader.results import NEVER_WRITTEN, CaseResult, KernelResult, MarginRead, index_in_words, margins_in_words
from grader.status import CaseStatus, KernelStatus

# Signals that mean the kernel touched memory it does not own, and those that mean it aborted itself.
MEMORY_SIGNALS = ("SIGSEGV", "SIGBUS")
ABORT_SIGNALS = ("SIGABRT",)
ALLOCATION_FAILURES = ("std::bad_alloc", "std::bad_array_new_length")  # an uncaught exception that says "memory"


def case_hints(case: CaseResult) -> list[str]:
    """Short hints for one failed case, most telling first; [] for a pass or an unrecognised failure."""
    if case.passed:
        return []
    # A sandbox limit that ended the run says more than the crash or the timeout it led to.
    if case.limit == "processes":
        return ["It started more processes or threads than allowed: a fork() or thread creation in a loop "
                "(a fork bomb), or a thread per element or per row; the kernel needs none of its own."]
    if case.limit == "memory":
        return ["It used more host memory than the limit: an allocation in a loop that is never freed, or a "
                "buffer sized by N × N (or larger) where a tile or a row would do."]
    if case.limit == "output":
        return ["It wrote more into its output folder than allowed: the kernel writes to its output buffers, "
                "never to files."]
    if case.limit == "tmp":
        return ["It filled its private /tmp (or /dev/shm): the kernel writes to its output buffers, never to files."]
    if case.status.counts_as_timeout:
        return ["The call did not return within the time limit: look for a loop whose bound or step never lets it end."]
    if case.status.counts_as_crash and case.while_loading:
        return ["It crashed before the kernel was called, while its library was being loaded: look at global "
                "objects and static initialisers in your files (their constructors run at load time)."]
    if case.status.counts_as_crash:
        if case.uncaught in ALLOCATION_FAILURES:
            return [f"An allocation failed ({case.uncaught}): the kernel asked for more memory than it can have. "
                    "Look for a buffer sized N × N (or larger) where a tile or a row would do, or a size computed "
                    "wrong (negative, or from an uninitialised variable)."]
        if case.uncaught:
            return [f"An exception ({case.uncaught}) was thrown and never caught, so the process aborted: find "
                    "where your code throws it (or calls something that does) and why."]
        if case.signal in MEMORY_SIGNALS:
            return ["The kernel touched memory it does not own: an index past the end of a buffer, "
                    "or a write through a null pointer."]
        if case.signal in ABORT_SIGNALS:
            return ["The process aborted: an assert that failed, or a call to abort()."]
        return []
    if case.status is not CaseStatus.FAILED:
        return []
    hints = []
    if case.out_of_bounds:
        hints.append("The kernel wrote just outside a buffer: a bound that lets the last block's threads through "
                     "(check i < N in every thread that stores), or a grid rounded up without a guard.")
    elements, wrong = case.elements or 0, case.mismatches or 0
    unwritten = case.never_written or 0
    if elements and unwritten == elements:
        return ["Nothing was written to the output: the kernel body may still be a TODO, "
                "or it writes somewhere other than the output pointer."]
    last_row = _last_rows_unwritten(case)
    if last_row is not None:
        hints.append(f"Only the last row (row {last_row}) was never written: a loop bound that stops one short, "
                     "like i < N - 1 where i < N is meant.")
    elif unwritten:
        first = case.first_mismatch
        where = ""
        if first is not None and _first_is_unwritten(case):
            at = index_in_words(first.buffer, first.index, first.axes) if first.axes else first.index
            where = f" (the first at {at})"
        hints.append(f"{unwritten:,} of {elements:,} output elements were never written{where}: a loop bound "
                     "that stops one short (< N-1), or a tail that no tile covers.")
    if case.transposed:
        hints.append("The output equals the expected result with rows and columns swapped: "
                     "it was stored (or an operand read) in the other order, [j][i] instead of [i][j].")
    if case.row_shift:
        direction = "down" if case.row_shift > 0 else "up"
        hints.append(f"The output equals the expected result moved {direction} by one row: "
                     "an off-by-one in the row index.")
    if case.read_out_of_bounds:
        where = margins_in_words([MarginRead(m.buffer, m.after) for m in case.margins_read]) or "outside a buffer"
        hints.append(f"It reads memory {where}, which the harness fills with NaN: an index reads out of bounds, "
                     "such as a loop or a tile that runs past the last row (a partial last tile taken whole, a bound "
                     "off by one), or a row index multiplied by the wrong stride.")
    if case.read_before_written:
        hints.append("It reads an output before writing it (accumulates into it, or rescales it, before setting it): "
                     "outputs arrive holding NaN, not zeros. Set them, or a local accumulator, to 0 first.")
    if case.nonfinite:
        hints.append(f"{case.nonfinite:,} elements are NaN or Inf where the expected value is finite: "
                     "a division by zero (a sum or a count that is 0) or exp() of an unbounded score; "
                     "subtract the row maximum before exp and check what you divide by.")
    if case.zeros and wrong and case.zeros >= wrong - unwritten > 0:
        hints.append("Every wrong element is exactly 0: the result is computed but not stored, "
                     "or stored before it is accumulated.")
    return hints


def forbidden_notes(kernel: KernelResult) -> list[str]:
    """What its files name that the assignment forbids but that never ran while it was graded: free, and said so."""
    return [f"{use.where or 'its code'} {'names' if use.is_call else 'imports'} {use.name}, which this assignment "
            "forbids; it never ran during grading, so it costs nothing" for use in kernel.forbidden_named]


def kernel_hints(kernel: KernelResult) -> list[str]:
    """Hints that need every case of a kernel: right only for small sizes, compile errors."""
    if kernel.status is KernelStatus.COMPILE_ERROR:
        return ["It did not compile: fix the first error the compiler names (file:line below); "
                "later errors often follow from it."]
    if kernel.status is KernelStatus.FORBIDDEN:
        # A forbidden method (a python assignment's ".toarray") is named with its leading dot, as the spec's pattern is.
        methods = [s for s in kernel.forbidden_symbols if s.startswith(".")]
        calls = [s for s in kernel.forbidden_symbols if not s.startswith(".")]
        them = "it" if len(methods) == 1 else "them"
        hints = [f"This assignment forbids {', '.join(methods)}: do the work without {them}."] if methods else []
        if calls or not methods:
            hints.append(f"This assignment asks you to write this kernel yourself: replace the calls to "
                         f"{', '.join(calls) or 'the forbidden library'} with your own kernel code.")
        return hints
    if (memory := _memory_hints(kernel)) and all(c.passed for c in kernel.cases):
        return memory
    compared = [c for c in kernel.cases if c.status.was_judged]
    if kernel.check is not None:  # a whole-program check's result: what its plug-in put into the result
        return list(kernel.check_hints)
    passed = [c for c in compared if c.passed]
    failed = [c for c in compared if not c.passed]
    if kernel.hints:  # the assignment says what its failed comparisons mean: the patterns below are array kernels'
        return list(kernel.hints) if failed else []
    if not passed or not failed:
        return []
    for size, name in _sizes(compared):
        if max(size(c) for c in passed) < min(size(c) for c in failed):
            largest = max(passed, key=size)
            return [f"Right only for small sizes: every case with {name} up to {size(largest):,} "
                    f"('{largest.name}') passes and every larger one fails. Look at what only larger inputs "
                    "exercise: strides and index order (a transposed read is invisible when a size is 1), more "
                    "than one tile or block, partial tiles, state carried from one tile to the next."]
    return []


def _sizes(cases: list[CaseResult]):
    """Ways to measure a case's size that every case has: its element count, then each parameter."""
    names = set.intersection(*(set(c.params or {}) for c in cases)) if cases else set()
    for name in sorted(names):
        yield (lambda c, n=name: c.params[n]), name
    if all(c.elements for c in cases):
        yield (lambda c: c.elements), "elements"


def _first_is_unwritten(case: CaseResult) -> bool:
    return case.first_mismatch is not None and case.first_mismatch.poison == NEVER_WRITTEN


def _last_rows_unwritten(case: CaseResult) -> int | None:
    """The last row's index when exactly the last row of a 2-D output holds the poison, else None."""
    if not (case.never_written and case.elements and _first_is_unwritten(case)):
        return None
    index = case.first_mismatch.index
    if len(index) != 2 or index[1] != 0:
        return None
    rows = index[0] + 1
    return index[0] if case.never_written * rows == case.elements else None


def _memory_hints(kernel: KernelResult) -> list[str]:
    """Where the kernel exceeded its memory bound: what to look for (the figures are in its deduction)."""
    if kernel.memory_bound is None or not kernel.memory_bound.exceeded:
        return []
    return ["Its outputs are right, but it holds more memory than its technique allows: look for an allocation "
            "sized by the whole problem (N × N scores, a dense M × N matrix: a std::vector, new[] or np.zeros), in "
            "the kernel or in a function it calls, and compute that part one tile or one row at a time instead."]
