"""gpt2-m3's req_4 (FlashAttention) on a real GPU: the reference's full marks with att never written, the course-style
ports passing, the mutants failing exactly their named cases, the materialising one passing but reported for the
T x T matrix it wrote into att (or costing req_4 where a spec sets the penalty), and the one that builds the matrix in
a cudaMalloc'd buffer of its own reported for the device memory its calls took.

Marked `gpu`: skipped with the reason where there is no CUDA device. Only req_4's kernels are graded (the samples:
req_4/attention alone, every case), which keeps the file to a minute or two on an H200.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from grader.report.render import variant_flags
from grader.results import KernelResult, Result, VariantResult
from grader.samples import Sample, variants
from grader.assignment import Assignment, allocation_of, load_assignment
from grader.status import KernelStatus, Outcome

from conftest import grade_variant, with_time_limit

pytestmark = pytest.mark.gpu

FLASH = "req_4/attention"


@pytest.fixture(scope="module")
def m3() -> Assignment:
    return with_time_limit(load_assignment("gpt2-m3"), 20.0)


def sample(m3: Assignment, name: str) -> Sample:
    return next(v for v in variants(m3) if v.name == name)


def kernels_of(result: Result) -> dict[str, KernelResult]:
    return {k.name: k for k in result.kernels}


def req_4_of(result: Result) -> VariantResult:
    return next(v for v in result.variants if v.name == "req_4")


def att_elements(m3: Assignment) -> dict[str, int]:
    kernel = m3.kernel(FLASH)
    return {case.name: allocation_of(kernel.buffer("att"), case.params) for case in kernel.cases}


def written_of(kernel: KernelResult) -> dict[str, tuple[int, int]]:
    """Per case: (elements of att written, elements of att), as the harness counted them."""
    return {c.name: (w.written, w.elements) for c in kernel.cases for w in c.scratch_written if w.buffer == "att"}


@pytest.fixture(scope="module")
def reference(m3: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Result:
    # One harness at a time: the device memory a call takes is read device-wide (another harness's buffers would show).
    return grade_variant(m3, None, tmp_path_factory.mktemp("m3-flash-reference"), cache_dir, kernels=("req_4",),
                         harnesses=1)


def test_reference_scores_full_marks_on_req_4_without_writing_att(m3: Assignment, reference: Result) -> None:
    req_4 = req_4_of(reference)
    assert (req_4.status, req_4.score, req_4.max_score) == (Outcome.PASSED, 6, 6), req_4.message
    assert {k.name: k.status for k in reference.kernels} == {k.name: KernelStatus.PASSED for k in reference.kernels}
    # att was counted in every case, and not one of its elements was written.
    assert written_of(kernels_of(reference)[FLASH]) == {name: (0, n) for name, n in att_elements(m3).items()}
    assert req_4.untouched == "att" and req_4.overwritten == [] and "of att" not in req_4.message
    # Beside it, the device memory its calls took beyond their arguments: module loading at most, no T x T matrix
    # (gpt2-full's is 192 MiB).
    assert req_4.peak_extra_bytes is not None and req_4.peak_extra_bytes < 32 << 20, req_4.message
    assert "of device memory beyond their arguments" in req_4.message
    # Float32 online softmax against the float64 truth: far inside the inherited tolerance.
    assert all(c.tolerance_used is not None and c.tolerance_used < 0.1 for c in kernels_of(reference)[FLASH].cases)


@pytest.mark.parametrize("name", ["course-flash1-row-per-thread", "course-flash2-warp-per-row"])
def test_course_style_flash_attention_passes_every_case_without_writing_att(m3: Assignment, tmp_path: Path,
                                                                            cache_dir: Path, name: str) -> None:
    result = grade_variant(m3, sample(m3, name), tmp_path, cache_dir, kernels=(FLASH,))
    flash = kernels_of(result)[FLASH]
    assert flash.status is KernelStatus.PASSED and flash.score == flash.max_score, flash.message
    assert written_of(flash) == {case: (0, n) for case, n in att_elements(m3).items()}
    # The FA1 port's l and m (cudaMalloc'd, 384 KiB at gpt2-full) are a page or two, nothing T x T.
    assert req_4_of(result).overwritten == [] and req_4_of(result).peak_extra_bytes < 32 << 20


@pytest.mark.parametrize("name", ["mutant-flash-no-rescale", "mutant-flash-causal-off-by-one"])
def test_a_wrong_flash_attention_fails_exactly_its_named_cases(m3: Assignment, tmp_path: Path, cache_dir: Path,
                                                               name: str) -> None:
    mutant = sample(m3, name)
    result = grade_variant(m3, mutant, tmp_path, cache_dir, kernels=(FLASH,))
    flash = kernels_of(result)[FLASH]
    assert flash.status is KernelStatus.FAILED
    assert {c.name for c in flash.cases if not c.passed} == set(mutant.failed_cases or ()), \
        [(c.name, c.message) for c in flash.cases]
    req_4 = req_4_of(result)
    assert req_4.score == 0 and req_4.message.startswith(
        f"req_4 is all or nothing: attention failed {len(mutant.failed_cases or ())} of 5 cases"), req_4.message


def test_a_materialising_attention_passes_and_is_reported_for_writing_att(m3: Assignment, tmp_path: Path,
                                                                          cache_dir: Path) -> None:
    result = grade_variant(m3, sample(m3, "mutant-flash-materialises-att"), tmp_path, cache_dir, kernels=(FLASH,))
    flash, req_4 = kernels_of(result)[FLASH], req_4_of(result)
    assert flash.status is KernelStatus.PASSED and flash.score == flash.max_score, flash.message
    # att starts zeroed, as the course's program leaves it: the lower triangle is what shows (B * NH * T (T + 1) / 2).
    triangles = {case.name: case.params["B"] * case.params["NH"] * case.params["T"] * (case.params["T"] + 1) // 2
                 for case in m3.kernel(FLASH).cases}
    assert written_of(flash) == {case: (triangles[case], n) for case, n in att_elements(m3).items()}
    assert req_4.overwritten == [f"attention/{case}" for case in att_elements(m3)]
    assert "attention wrote 50% of att (25,190,400 of 50,331,648 elements in case 'gpt2-full'" in req_4.message
    assert "the T x T matrix was materialised (reported, not scored)" in req_4.message
    assert req_4.score == req_4.max_score and req_4.penalty == 0
    assert variant_flags(req_4)[-1].startswith("wrote more than 1% of att, which req_4 must leave untouched, in 5 case")


def test_a_spec_penalty_makes_the_materialised_matrix_cost_req_4(m3: Assignment, tmp_path: Path,
                                                                 cache_dir: Path) -> None:
    variant = m3.variant("req_4")
    costly = replace(m3, variants=(replace(variant, untouched=replace(variant.untouched, penalty=1.0)),))
    result = grade_variant(costly, sample(m3, "mutant-flash-materialises-att"), tmp_path, cache_dir,
                           kernels=(FLASH,), public_only=True)
    req_4 = req_4_of(result)
    assert req_4.score == 0 and req_4.penalty == pytest.approx(req_4.max_score), req_4.message
    assert req_4.overwritten == ["attention/single-token", "attention/odd-sizes"]


def test_a_matrix_built_in_a_buffer_of_its_own_is_reported_by_the_memory_its_calls_took(m3: Assignment,
                                                                                         tmp_path: Path,
                                                                                         cache_dir: Path) -> None:
    result = grade_variant(m3, sample(m3, "mutant-flash-scores-in-own-buffer"), tmp_path, cache_dir, kernels=(FLASH,))
    flash, req_4 = kernels_of(result)[FLASH], req_4_of(result)
    assert flash.status is KernelStatus.PASSED and req_4.score == req_4.max_score, flash.message
    assert written_of(flash) == {case: (0, n) for case, n in att_elements(m3).items()}  # att: nothing
    gpt2_full = att_elements(m3)["gpt2-full"] * 4
    assert req_4.peak_case == "attention/gpt2-full" and req_4.peak_extra_bytes >= gpt2_full, req_4.message
    assert "MiB of device memory beyond their arguments (case 'gpt2-full'; sampled while it ran)" in req_4.message


def test_reference_and_course_port_are_clean_under_compute_sanitizer(m3: Assignment, tmp_path: Path,
                                                                     cache_dir: Path) -> None:
    # memcheck and racecheck (attention's sanitizer tools, from gpt2-m1) on the shared-memory tiles and shuffles.
    for name in (None, "course-flash1-row-per-thread", "course-flash2-warp-per-row"):
        result = grade_variant(m3, sample(m3, name) if name else None, tmp_path / (name or "reference"), cache_dir,
                               kernels=(FLASH,), public_only=True, sanitizer=True)
        flash = kernels_of(result)[FLASH]
        assert flash.status is KernelStatus.PASSED and not flash.deductions, (name, flash.sanitizer)
