"""flash-attention-backward's sweep: the backward passes of Algorithms 0 and 1 timed on N = 128 .. 8192 (sweep cases,
never graded), each call's peak extra memory counted and fitted against N, and an Algorithm 1 backward that holds an
N x N matrix (its own, or the student's standard backward's, called) flagged. Real g++ builds and timing harnesses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.options import Options
from grader.report.density import render
from grader.report.scaling import MemoryGrowth, memory_growths
from grader.assignment import PROJECT_ROOT, Assignment, load_assignment
from grader.status import TimingStatus
from grader.timing.results import SubmissionTiming
from grader.timing.run import time_submission
from grader.timing.spec import load_timing
from grader.sweeps.density import sweep_points

from conftest import with_sweep_up_to

PACK = PROJECT_ROOT / "assignments" / "flash-attention-backward"
FLASH = "flash_attention_backward"
# Algorithm 1's backward over the reference's own standard backward: each a flash kernel that holds N x N floats.
MATERIALISING = ("mutant-flash-backward-materialises-scores", "course-flash-backward-calls-standard")
LARGEST = 1024  # the sweep's N cut here: the test stays near a minute on 2 cores (the pack's own goes to 8192)


@pytest.fixture(scope="module")
def pack() -> Assignment:
    return load_assignment("flash-attention-backward")


@pytest.fixture(scope="module")
def swept(pack: Assignment, tmp_path_factory: pytest.TempPathFactory,
          cache_dir: Path) -> dict[str, SubmissionTiming]:
    """The reference's two kernels, and each materialising sample's flash kernel, swept up to N = LARGEST."""
    small, timing = with_sweep_up_to(pack, LARGEST), load_timing(pack)
    found = {"reference": time_submission(pack.reference_dir, small, Options(cache_dir=cache_dir), timing, sweep=True)}
    for sample in MATERIALISING:
        submission = tmp_path_factory.mktemp(sample) / "submission"
        shutil.copytree(pack.reference_dir, submission)
        shutil.copy(PACK / "samples" / sample / "src" / f"{FLASH}.cpp", submission / "src" / f"{FLASH}.cpp")
        found[sample] = time_submission(submission, small, Options(cache_dir=cache_dir, kernels=(FLASH,)), timing,
                                        sweep=True)
    return found


def growths_of(timing: SubmissionTiming, pack: Assignment) -> dict[str, MemoryGrowth]:
    points = sweep_points(timing, with_sweep_up_to(pack, LARGEST), load_timing(pack).sweep_parameter)
    return {g.operation: g for g in memory_growths(points, dict(load_timing(pack).memory_exponent_limit))}


def test_both_kernels_sweep_the_same_n_at_d_64_apart_from_the_graded_cases(pack: Assignment) -> None:
    for kernel in pack.kernels:
        assert [c.params["N"] for c in kernel.sweep_cases] == [128 * 2**i for i in range(7)]
        assert {c.params["d"] for c in kernel.sweep_cases} == {64}
        # The graded cases stay small, but for the memory bound's (N = 2048 at d = 8: a fraction of a second).
        bounded = kernel.memory_bound.case if kernel.memory_bound else None
        assert max(c.params["N"] for c in kernel.cases if c.name != bounded) <= 256
    timing = load_timing(pack)
    assert timing.sweep_parameter == "N" and dict(timing.memory_exponent_limit) == {FLASH: 1.6}


def test_every_swept_call_is_timed_right_and_its_memory_counted(swept: dict[str, SubmissionTiming]) -> None:
    for timings in swept.values():
        assert {t.case for t in timings.kernels} == {f"sweep-{128 * 2**i}" for i in range(4)}
        for timed in timings.kernels:
            assert timed.status is TimingStatus.TIMED, timed.message  # re-checked against the float64 gold
            assert timed.summary is not None and timed.summary.calls >= 3
            assert timed.peak_extra_bytes is not None and timed.peak_extra_bytes > 0


def test_algorithm_0_backward_memory_grows_like_n_squared_and_algorithm_1_like_n(
        swept: dict[str, SubmissionTiming], pack: Assignment) -> None:
    growths = growths_of(swept["reference"], pack)
    standard, flash = growths["standard_attention_backward"], growths[FLASH]
    assert standard.exponent == pytest.approx(2.0, abs=0.1) and flash.exponent == pytest.approx(1.0, abs=0.1)
    assert not flash.flagged and standard.limit is None
    # Algorithm 0's backward holds two N x N float matrices (P, and dP turned dS): 8 N^2 bytes at least.
    n, held = standard.largest
    assert n == LARGEST and held >= 8 * n * n and flash.largest[1] < held / 50


@pytest.mark.parametrize("sample", MATERIALISING)
def test_an_algorithm_1_backward_that_holds_n_by_n_is_flagged_with_its_memory(
        swept: dict[str, SubmissionTiming], pack: Assignment, sample: str) -> None:
    (growth,) = growths_of(swept[sample], pack).values()
    assert growth.operation == FLASH and growth.flagged and growth.exponent == pytest.approx(2.0, abs=0.1)
    assert growth.largest[1] >= 4 * LARGEST**2
    small = with_sweep_up_to(pack, LARGEST)
    page = render(sweep_points(swept[sample], small, "N") + sweep_points(swept["reference"], small, "N"), pack.title,
                  "N", {FLASH: 1.6})
    assert "Flagged:" in page and f"{growth.largest[1] / 2**20:.3g} MiB at N = {LARGEST}" in page


def test_the_page_draws_both_backward_passes_against_n(swept: dict[str, SubmissionTiming], pack: Assignment) -> None:
    pytest.importorskip("matplotlib")
    page = render(sweep_points(swept["reference"], with_sweep_up_to(pack, LARGEST), "N"), pack.title, "N", {FLASH: 1.6})
    assert "<svg" in page and "runtime and memory against N" in page and "peak extra memory per call" in page
    assert "standard_attention_backward" in page and FLASH in page and "Flagged" not in page
