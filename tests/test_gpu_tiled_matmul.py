"""tiled-matmul on a real GPU: the reference scores full marks within a third of every tolerance, the template
nothing, each sample exactly its expected verdict and failed cases, the reference's tiled kernel is faster
than its naive kernel at N = 4096 (and cuBLAS than both), and its block-size sweep (N = 1024 and 4096 here, every
tile) makes the page of GFLOP/s and time against the tile, and earns the pack's speed-up points.

Marked `gpu`: skipped with the reason where there is no CUDA device. The CPU side (spec, gold, builds, SASS
evidence) is tests/test_tiled_matmul_pack.py.
"""

from __future__ import annotations

import re

from dataclasses import replace
from pathlib import Path

import pytest

from grader.options import Options
from grader.pipeline import grade
from grader.report.matmul_sweep import render, shares, sweet_spots
from grader.results import Result
from grader.samples import Sample
from grader.sanitizer import sanitizer_binary
from grader.assignment import Assignment, load_assignment
from grader.status import KernelStatus, TimingStatus
from grader.timing.points import speedup_awards
from grader.timing.run import time_submission
from grader.timing.spec import load_timing, parse_timing
from grader.sweeps.matmul import matmul_points

from conftest import grade_variant, variant_params, with_time_limit
from pack_samples import Graded, assert_expected_verdicts, graded_once, sample_named

pytestmark = pytest.mark.gpu

# Short: three kernels on square-4096, the naive one ~0.1 s a call.
QUICK = parse_timing({"warmup": 2, "min_calls": 5, "max_calls": 30, "cap_s": 1.0, "pool": 2}, "tests [timing]")
SWEPT = (1024, 4096)  # the sweep's sizes cut to two: ten timings, well under a minute


@pytest.fixture(scope="module")
def pack() -> Assignment:
    return with_time_limit(load_assignment("tiled-matmul"), 20.0)


@pytest.fixture(scope="module")
def graded(pack: Assignment, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Graded:
    return graded_once(pack, tmp_path_factory, cache_dir)


def test_reference_scores_full_marks_within_a_third_of_every_tolerance(graded) -> None:
    result: Result = graded(None)
    assert result.score == result.max_score == 5, [(k.name, k.message) for k in result.kernels]
    for kernel in result.kernels:
        assert kernel.status == KernelStatus.PASSED and not kernel.deductions, kernel.message
        for case in kernel.cases:
            assert case.passed and case.tolerance_used is not None and case.tolerance_used <= 1 / 3, \
                (kernel.name, case.name, case.tolerance_used)


def test_template_scores_zero_its_outputs_never_written(pack: Assignment, cache_dir: Path) -> None:
    result = grade(pack.template_dir, pack, Options(cache_dir=cache_dir))
    assert result.score == 0 and {k.status for k in result.kernels} == {KernelStatus.FAILED}
    assert all("never written" in c.message for k in result.kernels for c in k.cases)


RACE = "mutant-tiled-no-second-sync"


@pytest.mark.parametrize("sample", variant_params("tiled-matmul"))
def test_each_sample_gets_exactly_its_expected_verdict(sample: Sample, graded, pack: Assignment, cache_dir: Path,
                                                       tmp_path: Path) -> None:
    if sample.name == RACE:
        if sanitizer_binary() is None:
            pytest.skip("its verdict is racecheck's (which cases its race spoils varies): compute-sanitizer is not "
                        "installed")
        # As `grader grade` runs it: with the sanitizer (on the H200 the race spoiled 3 of 9 cases once; another
        # run may spoil none, and racecheck's finding fails the kernel either way).
        result = grade_variant(pack, sample, tmp_path, cache_dir, kernels=("tiled",), sanitizer=True)
    else:
        result = graded(sample)
    assert_expected_verdicts(result, sample)
    if sample.expect == KernelStatus.FORBIDDEN:
        assert "which this assignment forbids (its outputs were correct)" in result.kernels[0].message
    if sample.name == RACE:
        tiled = next(k for k in result.kernels if k.name == "tiled")
        assert any("racecheck" in d.reason for d in tiled.deductions), tiled.deductions


def test_the_tiled_kernel_beats_the_naive_one_at_4096_and_cublas_beats_both(pack: Assignment, cache_dir: Path) -> None:
    timings = time_submission(pack.reference_dir, pack, Options(cache_dir=cache_dir), QUICK)
    timed = {t.kernel: t for t in timings.kernels}
    for timing in timed.values():
        assert timing.status is TimingStatus.TIMED and timing.case == "square-4096", timing.message
    naive, tiled, cublas = (timed[k].median_us for k in ("naive", "tiled", "cublas"))
    assert cublas < tiled < naive, (naive, tiled, cublas)


def test_the_block_size_sweep_finds_tiles_of_16_or_more_beat_naive_and_draws_its_page(pack: Assignment,
                                                                                      cache_dir: Path) -> None:
    small = replace(pack, kernels=tuple(
        replace(k, sweep_cases=tuple(c for c in k.sweep_cases if c.params["N"] in SWEPT)) for k in pack.kernels))
    timing = load_timing(pack)
    sweep = time_submission(pack.reference_dir, small, Options(cache_dir=cache_dir),
                            replace(QUICK, sweep_parameter="N"), sweep=True)
    for timed in sweep.kernels:
        assert timed.status is TimingStatus.TIMED, (timed.case, timed.message)
    assert len(sweep.kernels) == 2 + 2 * 3 + 2
    points = matmul_points(sweep, small, "N")
    at = {(p.kernel, p.tile): p.median_us for p in points if p.size == 4096}
    for tile in (16, 32):
        assert at[("tiled", tile)] < at[("naive", None)], at
    assert at[("cublas", None)] < min(at[("tiled", t)] for t in (8, 16, 32)), at
    assert {s.size for s in sweet_spots(points)} == set(SWEPT)
    assert all(0 < s.fraction < 1 for s in shares(points))
    (award,) = speedup_awards(timing.speedup_points, sweep, small, "N")
    assert award.points == award.rule.points, award
    page = render(points, pack.title, "N")
    assert "<svg" in page and "time against the tile at N = 4096" in page and "sweet spot (its fastest tile)" in page


TILE_IGNORED, TILE_KEPT = "mutant-tile-ignored-always-16", "course-template-tile"
LAUNCHED_16, DYNAMIC = "mutant-every-tile-built-16-launched", "course-dynamic-shared-tile"


def test_check_takes_the_tiled_points_of_a_kernel_fixed_at_16_and_keeps_them_where_each_tile_is_its_own(
        pack: Assignment, cache_dir: Path, tmp_path: Path) -> None:
    """As `grader check` grades (the public cases, at tiles 16 and 32, without the sanitizer): the launch watch sees
    which kernel the tile-32 case ran, so a kernel that ignores `tile` learns it before the deadline, also one whose
    binary has every tile's instantiation (which the binary alone could not tell)."""
    names = (TILE_IGNORED, TILE_KEPT, LAUNCHED_16, DYNAMIC)
    results = {name: grade_variant(pack, sample_named(pack, name), tmp_path / name, cache_dir, kernels=("tiled",),
                                   public_only=True, sanitizer=False) for name in names}
    for name, result in results.items():
        (tiled,) = result.kernels
        assert tiled.cases and all(c.passed and c.public for c in tiled.cases), (name, tiled.message)
        assert {c.params["tile"] for c in tiled.cases} == {16, 32}
        assert all(c.launched for c in tiled.cases), (name, [c.launched for c in tiled.cases])
        if name in (TILE_KEPT, DYNAMIC):
            assert tiled.status == KernelStatus.PASSED and tiled.score == tiled.max_score, tiled.message
        else:
            assert tiled.status == KernelStatus.FAILED and tiled.score == 0, tiled.message
            # The launched kernel by its name in the binary, as the runner's demangler writes it (tiledMatMul<16>, or
            # tiledMatMul<(int)16> on the H100 runner), and its shared memory as the binary gives it: 2 KiB declared;
            # 3 KiB on the H100 runner, where the reserved 1 KiB of sm_90 was not told apart (its cuobjdump's symbols).
            kernel = r"matmul_tiled_kernel" if name == TILE_IGNORED else r"tiledMatMul<(\(int\))?16>"
            assert re.match(r"tiled must show its technique: case tile-32-ragged asks for tile 32, and the kernel it "
                            rf"launched, {kernel} \(block 16 x 16\), has [23] KiB of shared memory, a 16 x 16 tile's, "
                            r"less than a 32 x 32 tile needs \(8 KiB", tiled.message), tiled.message
