"""A C library's forbidden function costs points where it runs, not where it is linked: the build watches each one the
library links (the linker's --wrap through the grader's trampoline) and the harness reads what ran after every call.
On the tiny C++ pack of test_grading_rules, with libc's qsort forbidden as a course forbids cuBLAS."""

from __future__ import annotations

from pathlib import Path

from test_grading_rules import INPUTS, PACK, TRUTH, submission

from grader.options import Options
from grader.pipeline import grade
from grader.results import KernelResult
from grader.report.hints import forbidden_notes
from grader.assignment import load_assignment
from grader.status import KernelStatus

FORBIDS_QSORT = PACK.replace('target = "cpp"', 'target = "cpp"\nforbidden_symbols = ["qsort"]')
COPY = "for (int i = 0; i < N; ++i) out[i] = inp[i];"
# A helper that sorts with the library, as a student keeps one to check their own kernel against.
HELPER = ("static int by_value(const void* a, const void* b) { float x = *(const float*)a, y = *(const float*)b; "
          "return (x > y) - (x < y); }\n"
          "void check_sorted(float* values, int n) { qsort(values, n, sizeof(float), by_value); }\n")


def graded(root: Path, body: str, prelude: str = HELPER) -> KernelResult:
    pack = root / "assignments" / "probe"
    pack.mkdir(parents=True)
    (pack / "assignment.toml").write_text(FORBIDS_QSORT.format(init="zeros"))
    (pack / "inputs.py").write_text(INPUTS)
    (pack / "numpy_reference.py").write_text(TRUTH)
    (kernel,) = grade(submission(root, body, prelude), load_assignment(pack), Options(cache_dir=root / "cache")).kernels
    return kernel


def test_a_linked_helper_that_never_runs_costs_nothing_and_is_a_note(tmp_path: Path) -> None:
    kernel = graded(tmp_path, COPY)
    assert kernel.status is KernelStatus.PASSED and kernel.score == kernel.max_score, kernel.message
    assert kernel.forbidden_symbols == []
    (note,) = forbidden_notes(kernel)
    assert note.startswith("src/peek.h:4 names qsort(), which this assignment forbids; it never ran"), note


def test_a_forbidden_function_that_runs_costs_the_penalty_and_says_when(tmp_path: Path) -> None:
    kernel = graded(tmp_path, f"check_sorted((float*)inp, 0); {COPY}")
    assert kernel.status is KernelStatus.FORBIDDEN and kernel.score == 0.0
    assert "calls qsort() (during peek's call)" in kernel.message, kernel.message
    assert forbidden_notes(kernel) == []  # it ran: not "never ran" as well


def test_a_call_in_one_case_only_is_still_a_use(tmp_path: Path) -> None:
    kernel = graded(tmp_path, f"if (N == 9) check_sorted((float*)inp, 0); {COPY}")
    assert kernel.status is KernelStatus.FORBIDDEN, kernel.message
    assert [c.name for c in kernel.cases if c.forbidden_used] == ["nine"]
