"""A pack's samples, each graded once per test module, and the rule every sample's verdicts must meet: shared by
the tests of the python packs (array-kernels-python, autodiff-reverse, sparse-spmv-spgemm)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

import pytest

from grader.results import KernelResult, Result
from grader.samples import Sample, variants
from grader.assignment import Assignment

from conftest import grade_variant

Graded = Callable[[Sample | None], Result]


def graded_once(pack: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path,
                whole: Collection[str] = ()) -> Graded:
    """Each sample graded once, by name (a single-kernel sample on its kernel only, unless named in `whole`); the
    reference as "reference"."""
    results: dict[str, Result] = {}

    def result_of(sample: Sample | None) -> Result:
        name = sample.name if sample else "reference"
        if name not in results:
            kernels = (sample.kernel,) if sample is not None and not sample.whole and name not in whole else ()
            results[name] = grade_variant(pack, sample, tmp_path_factory.mktemp(name), cache_dir, kernels=kernels)
        return results[name]

    return result_of


def kernel_of(result: Result, name: str) -> KernelResult:
    return next(k for k in result.kernels if k.name == name)


def sample_named(pack: Assignment, name: str) -> Sample:
    return next(v for v in variants(pack) if v.name == name)


def assert_expected_verdicts(result: Result, sample: Sample) -> None:
    """The sample's kernel (every kernel, for a whole sample) has the status its VARIANT.toml expects, full marks
    exactly when that is "passed", and exactly the failed cases it lists, where it lists them."""
    for kernel in (result.kernels if sample.whole else [kernel_of(result, sample.kernel)]):
        assert kernel.status == sample.expect, kernel.message
        assert (kernel.score == kernel.max_score) == (sample.expect == "passed"), kernel.message
        if sample.failed_cases is not None:
            assert [c.name for c in kernel.cases if not c.passed] == list(sample.failed_cases), kernel.message
