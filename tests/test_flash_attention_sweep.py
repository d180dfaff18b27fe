"""flash-attention-cpu's sweep: Algorithms 0 and 1 timed on N = 128 .. 8192 (sweep cases, never graded), each call's
peak extra memory counted, its growth fitted against N, and an Algorithm 1 that builds the N x N scores flagged."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.errors import SpecError
from grader.options import Options
from grader.report.density import render
from grader.report.scaling import fit_exponent, memory_growths
from grader.assignment import PROJECT_ROOT, Assignment, load_assignment
from grader.status import TimingStatus
from grader.timing.results import SubmissionTiming
from grader.timing.run import time_submission
from grader.timing.spec import load_timing, parse_timing
from grader.report.swept import DensityPoint
from grader.sweeps.density import sweep_points

from conftest import with_sweep_up_to

PACK = PROJECT_ROOT / "assignments" / "flash-attention-cpu"
MUTANT = PACK / "samples" / "mutant-flash-materialises-scores"
LARGEST = 2048  # the sweep's N cut here: the test stays under a minute (the pack's own goes to 8192)


@pytest.fixture(scope="module")
def pack() -> Assignment:
    return load_assignment("flash-attention-cpu")


def reduced(pack: Assignment) -> Assignment:
    return with_sweep_up_to(pack, LARGEST)


@pytest.fixture(scope="module")
def swept(pack: Assignment, tmp_path_factory: pytest.TempPathFactory,
          cache_dir: Path) -> dict[str, SubmissionTiming]:
    """The reference's two kernels and the mutant's flash_attention, swept up to N = LARGEST."""
    mutant = tmp_path_factory.mktemp("mutant") / "submission"
    shutil.copytree(pack.reference_dir, mutant)
    shutil.copy(MUTANT / "src" / "flash_attention.cpp", mutant / "src" / "flash_attention.cpp")
    small, timing = reduced(pack), load_timing(pack)
    return {"reference": time_submission(pack.reference_dir, small, Options(cache_dir=cache_dir), timing, sweep=True),
            "mutant": time_submission(mutant, small, Options(cache_dir=cache_dir, kernels=("flash_attention",)),
                                      timing, sweep=True)}


def test_the_sweep_cases_double_n_at_d_64_and_are_not_graded(pack: Assignment) -> None:
    for kernel in pack.kernels:
        assert [c.params["N"] for c in kernel.sweep_cases] == [128 * 2**i for i in range(7)]
        assert {c.params["d"] for c in kernel.sweep_cases} == {64}
        # Graded cases stay small: Algorithm 0 at N = 8192 holds 256 MiB of scores and takes seconds. Only
        # Algorithm 1's memory bound has a larger one (N = 2048 at d = 8: a tenth of a second).
        bounded = kernel.memory_bound.case if kernel.memory_bound else None
        assert max(c.params["N"] for c in kernel.cases if c.name != bounded) <= 512
    assert load_timing(pack).sweep_parameter == "N"


def test_a_sweep_case_may_not_share_a_graded_cases_name(tmp_path: Path) -> None:
    spec = (PACK / "assignment.toml").read_text().replace('name = "sweep-128", N = 128, d = 64 }',
                                                           'name = "square-tiles", N = 128, d = 64 }', 1)
    folder = tmp_path / "flash-attention-cpu"
    shutil.copytree(PACK, folder)
    (folder / "assignment.toml").write_text(spec)
    with pytest.raises(SpecError, match="case names repeat"):
        load_assignment(str(folder))


def test_a_memory_limit_must_name_a_kernel(pack: Assignment) -> None:
    assert dict(parse_timing({"memory_exponent_limit": {"flash_attention": 1.6}}, "t").memory_exponent_limit) == \
        {"flash_attention": 1.6}
    with pytest.raises(SpecError, match="above 0"):
        parse_timing({"memory_exponent_limit": {"flash_attention": "two"}}, "t")


def test_the_fit_finds_the_exponent_whatever_each_call_holds_besides() -> None:
    # Memory c + a N^p: the fit of its steps gives p, the constant c notwithstanding.
    for p, c in ((1, 20_000), (2, 70_000)):
        points = [DensityPoint("CPU", "k", f"n{n}", n, 1.0, c + 8 * n**p) for n in (128, 256, 512, 1024, 2048)]
        (growth,) = memory_growths(points, {})
        assert growth.exponent == pytest.approx(p, abs=1e-9)
    assert fit_exponent([(128, 1.0)]) == (None, None)


def test_every_swept_call_is_timed_and_its_memory_counted(swept: dict[str, SubmissionTiming]) -> None:
    for timings in swept.values():
        for timed in timings.kernels:
            assert timed.status is TimingStatus.TIMED, timed.message
            assert timed.summary is not None and timed.summary.calls >= 3
            assert timed.peak_extra_bytes is not None and timed.peak_extra_bytes > 0


def test_algorithm_0_memory_grows_like_n_squared_and_algorithm_1_like_n(swept: dict[str, SubmissionTiming],
                                                                        pack: Assignment) -> None:
    points = sweep_points(swept["reference"], reduced(pack), "N")
    growths = {g.operation: g for g in memory_growths(points, {"flash_attention": 1.6})}
    standard, flash = growths["standard_attention"], growths["flash_attention"]
    assert standard.exponent == pytest.approx(2.0, abs=0.1) and flash.exponent == pytest.approx(1.0, abs=0.1)
    assert not flash.flagged
    # Algorithm 0 holds its N x N scores: at least 4 N^2 bytes at the largest N; Algorithm 1 far less.
    n, held = standard.largest
    assert held >= 4 * n * n and flash.largest[1] < held / 50


def test_an_algorithm_1_that_builds_the_scores_is_flagged_with_its_memory(swept: dict[str, SubmissionTiming],
                                                                          pack: Assignment) -> None:
    points = sweep_points(swept["mutant"], reduced(pack), "N")
    (growth,) = memory_growths(points, dict(load_timing(pack).memory_exponent_limit))
    assert growth.flagged and growth.exponent == pytest.approx(2.0, abs=0.1)
    assert growth.largest[1] >= 4 * LARGEST**2
    page = render(points + sweep_points(swept["reference"], reduced(pack), "N"), pack.title, "N",
                  {"flash_attention": 1.6})
    assert "Flagged:" in page and f"{growth.largest[1] / 2**20:.3g} MiB at N = {LARGEST}" in page


def test_the_page_draws_time_and_memory_against_n(swept: dict[str, SubmissionTiming], pack: Assignment) -> None:
    pytest.importorskip("matplotlib")
    page = render(sweep_points(swept["reference"], reduced(pack), "N"), pack.title, "N", {"flash_attention": 1.6})
    assert "<svg" in page and "runtime and memory against N" in page and "peak extra memory per call" in page
    assert "Flagged" not in page and "GPU speed-up" not in page


def test_the_page_puts_the_two_algorithms_side_by_side_at_each_n(swept: dict[str, SubmissionTiming],
                                                                 pack: Assignment) -> None:
    """Each N both were timed at: their times and Algorithm 1's speed-up over Algorithm 0, from the same medians;
    the x axis reads N's values (128, 256, ...), not log's 10^2."""
    pytest.importorskip("matplotlib")
    from grader.report.scaling import time_crossovers

    points = sweep_points(swept["reference"], reduced(pack), "N")
    (pair,) = time_crossovers(points)
    medians = {(p.operation, p.density): p.median_us for p in points}
    assert [x for x, _, _ in pair.times] == sorted({p.density for p in points})[:len(pair.times)]
    for (x, first, second), (same_x, speedup) in zip(pair.times, pair.speedups):
        # One case per N: the geometric mean of one median is that median.
        assert (first, second) == pytest.approx((medians[(pair.first, x)], medians[(pair.second, x)])) and same_x == x
        assert speedup == pytest.approx(second / first)
    page = render(points, pack.title, "N", {"flash_attention": 1.6}, ["a points line"])
    assert "The kernels against each other" in page and "<p>Points: a points line.</p>" in page
    assert f"<td>{LARGEST}</td>" in page and f"speed-up of <code>{pair.first}</code>" in page
    assert f"<!-- {LARGEST} -->" in page and "times10^{2}" not in page  # the tick's text, as matplotlib writes it
