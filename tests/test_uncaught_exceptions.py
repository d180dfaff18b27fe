"""A C++ exception that leaves the kernel uncaught is named in the case (`uncaught`, read from the C++ runtime's own
words before abort()), and a failed allocation gets a hint about memory, not about a library being loaded."""

from __future__ import annotations

from pathlib import Path

from grader.report.hints import case_hints
from grader.runner.events import uncaught_exception
from grader.samples import variants
from grader.assignment import Assignment
from grader.status import KernelStatus

from conftest import grade_variant


def test_the_runtimes_words_name_the_exception_type() -> None:
    assert uncaught_exception("terminate called after throwing an instance of 'std::bad_alloc'\n"
                              "  what():  std::bad_alloc\n") == "std::bad_alloc"
    assert uncaught_exception("libc++abi: terminating due to uncaught exception of type std::runtime_error: boom"
                              ) == "std::runtime_error"
    assert uncaught_exception("Segmentation fault") is None


def test_a_bad_alloc_is_named_and_hinted_as_memory(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    sample = next(v for v in variants(flash) if v.name == "hostile-flash-bad-alloc")
    result = grade_variant(flash, sample, tmp_path, cache_dir, kernels=("flash_attention",), public_only=True)
    kernel = next(k for k in result.kernels if k.name == "flash_attention")
    assert kernel.status is KernelStatus.CRASHED
    case = kernel.cases[0]
    assert case.uncaught == "std::bad_alloc"  # abort() after terminate; the harness may report SIGSEGV
    hints = case_hints(case)
    assert hints and hints[0].startswith("An allocation failed (std::bad_alloc)")
    assert not any("being loaded" in h for h in hints)
