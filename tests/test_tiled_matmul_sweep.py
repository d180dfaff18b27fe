"""tiled-matmul's block-size sweep without a GPU: the sweep cases (N = 256 .. 4096, the tiled kernel at tiles 8, 16
and 32), the page made from timings built by hand (GFLOP/s, the sweet spot, cuBLAS's share, the figure), and the
speed-up points rule with its spec errors. tests/test_gpu_tiled_matmul.py runs the sweep itself."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from grader.boundary.timing_statistics import Summary
from grader.cli import main
from grader.errors import SpecError
from grader.report.matmul_sweep import render, share_words, shares, sweet_spot_words, sweet_spots
from grader.assignment import PROJECT_ROOT, Assignment, load_assignment
from grader.status import TimingStatus
from grader.timing.points import award_words, speedup_awards
from grader.timing.results import KernelTiming, SubmissionTiming
from grader.timing.spec import SpeedupRule, load_timing, parse_timing
from grader.sweeps.matmul import matmul_points

PACK = PROJECT_ROOT / "assignments" / "tiled-matmul"
SIZES = (256, 512, 1024, 2048, 4096)
TILES = (8, 16, 32)


@pytest.fixture(scope="module")
def pack() -> Assignment:
    return load_assignment("tiled-matmul")


def modelled_gflops(kernel: str, n: int, tile: int | None) -> float:
    """A made-up GPU: tile 16 is the fastest up to N = 512, tile 32 from 1024 on; cuBLAS 20 TFLOP/s."""
    if kernel == "naive":
        return 1000.0
    if kernel == "cublas":
        return 20000.0
    return {8: 2000.0, 16: 3000.0 if n <= 512 else 5000.0, 32: 2500.0 if n <= 512 else 6000.0}[tile]


def timed(kernel: str, case: str, median_us: float, status: TimingStatus = TimingStatus.TIMED) -> KernelTiming:
    summary = Summary(5, median_us, median_us, median_us, median_us, 0.0, 0.0, "rse")
    return KernelTiming(kernel, kernel, None, case, status, summary=summary)


def sweep_of(pack: Assignment, crashed: tuple[str, ...] = ()) -> SubmissionTiming:
    """Every sweep case timed at the modelled speed (time = 2 N^3 / GFLOP/s); the `crashed` cases without a speed."""
    timings = []
    for kernel in pack.kernels:
        for case in kernel.sweep_cases:
            n, tile = case.params["N"], case.params.get("tile")
            median_us = 2 * n**3 / (modelled_gflops(kernel.name, n, tile) * 1e3)
            status = TimingStatus.CRASHED if case.name in crashed else TimingStatus.TIMED
            timings.append(timed(kernel.name, case.name, median_us, status))
    return SubmissionTiming("hand-made", pack.name, tuple(timings))


def test_every_kernel_sweeps_the_same_square_sizes_and_the_tiled_one_every_tile(pack: Assignment) -> None:
    timing = load_timing(pack)
    assert timing.sweep_parameter == "N" and timing.sweep_page == "matmul"
    for kernel in pack.kernels:
        params = [c.params for c in kernel.sweep_cases]
        assert all(p["M"] == p["N"] == p["K"] for p in params)
        tiles = TILES if kernel.name == "tiled" else (None,)
        assert [(p["N"], p.get("tile")) for p in params] == [(n, t) for n in SIZES for t in tiles]
        # Never graded: no sweep case is one of the graded cases.
        assert not {c.name for c in kernel.sweep_cases} & {c.name for c in kernel.cases}


def test_the_points_carry_each_cases_gflops_and_tile(pack: Assignment) -> None:
    points = matmul_points(sweep_of(pack), pack, "N")
    assert len(points) == sum(len(k.sweep_cases) for k in pack.kernels)
    for point in points:
        assert point.gflops == pytest.approx(modelled_gflops(point.kernel, int(point.size), point.tile))
        assert point.flops == 2 * int(point.size) ** 3
    assert {p.series for p in points if p.kernel == "tiled"} == {f"tiled (tile {t})" for t in TILES}


def test_a_case_without_a_speed_is_left_out_and_the_sweet_spot_found_among_the_rest(pack: Assignment) -> None:
    points = matmul_points(sweep_of(pack, crashed=("sweep-4096-tile-32",)), pack, "N")
    assert "sweep-4096-tile-32" not in {p.case for p in points}
    spots = {s.size: s for s in sweet_spots(points)}
    assert [t for t, _ in spots[4096].times_us] == [8, 16] and spots[4096].tile == 16
    assert spots[2048].tile == 32


def test_the_sweet_spot_and_cublas_share_in_words(pack: Assignment) -> None:
    points = matmul_points(sweep_of(pack), pack, "N")
    spots = sweet_spots(points)
    assert [(s.size, s.tile) for s in spots] == [(256, 16), (512, 16), (1024, 32), (2048, 32), (4096, 32)]
    assert sweet_spot_words(spots, "N") == \
        ["tiled's sweet spot (its fastest tile): tile 16 at N = 256 and 512; tile 32 at N = 1024, 2048 and 4096"]
    found = {(s.kernel, s.size): s for s in shares(points)}
    best_tiled = max(modelled_gflops("tiled", 4096, t) for t in TILES)
    assert found[("tiled", 4096)].fraction == pytest.approx(best_tiled / modelled_gflops("cublas", 4096, None))
    assert found[("tiled", 4096)].tile == 32
    assert found[("naive", 256)].fraction == pytest.approx(1000.0 / 20000.0)
    assert share_words(shares(points), "N") == [
        "naive reaches 5.0% of cublas's GFLOP/s at N = 4096",
        "tiled (tile 32, its fastest) reaches 30.0% of cublas's GFLOP/s at N = 4096"]


def test_the_page_has_both_plots_the_table_and_the_words(pack: Assignment) -> None:
    pytest.importorskip("matplotlib")
    points = matmul_points(sweep_of(pack), pack, "N")
    page = render(points, pack.title, "N", ["tiled at least 1.25x faster than naive at N = 4096: 6.00x measured"])
    assert page.count("<svg") == 1 and "time against the tile at N = 4096" in page and "GFLOP/s (2·M·N·K" in page
    assert "tile 16 at N = 256 and 512; tile 32 at N = 1024, 2048 and 4096." in page
    assert "reaches 30.0% of cublas" in page and "Points: tiled at least 1.25x" in page
    # Every case's row: its median, its GFLOP/s and its share of cuBLAS at its size, as computed here.
    for point in points:
        share = 100 * 2 * point.size**3 / (modelled_gflops("cublas", 0, None) * 1e3) / point.median_us
        row = re.search(rf"<code>{point.kernel}</code></td><td>{point.tile or '–'}</td>"
                        rf"<td><code>{point.case}</code></td><td>{point.size:g}</td><td class=\"n\">([\d,.]+)</td>"
                        rf"<td class=\"n\">([\d,]+)</td><td class=\"n\">([\d.]+)%</td>", page)
        assert row is not None, point.case
        assert float(row[1].replace(",", "")) == pytest.approx(point.median_us, abs=0.05)
        assert int(row[2].replace(",", "")) == round(modelled_gflops(point.kernel, int(point.size), point.tile))
        assert float(row[3]) == pytest.approx(share, abs=0.05)
    # The tile table: the fastest tile at each size.
    assert re.search(r"<td><code>tiled</code></td><td>4096</td>(<td class=\"n\">[\d.]+</td>){3}<td>tile 32</td>", page)


def test_the_page_without_matplotlib_keeps_its_tables(pack: Assignment, monkeypatch: pytest.MonkeyPatch) -> None:
    import grader.report.matmul_sweep as page_module

    monkeypatch.setattr(page_module, "pyplot_or_none", lambda: None)
    page = render(matmul_points(sweep_of(pack), pack, "N"), pack.title, "N")
    assert "<svg" not in page and "No figure: matplotlib is not installed" in page and "sweep-4096-tile-8" in page


def test_speedup_points_judge_the_fastest_tile_against_the_naive_kernel(pack: Assignment) -> None:
    sweep = sweep_of(pack)
    rules = (SpeedupRule("tiled", "naive", 4096.0, 1.25, 1.0), SpeedupRule("tiled", "naive", 4096.0, 10.0, 2.0),
             SpeedupRule("cublas", "tiled", 256.0, 2.0, 0.5))
    earned, missed, cublas = speedup_awards(rules, sweep, pack, "N")
    assert earned.speedup == pytest.approx(6000.0 / 1000.0) and earned.points == 1.0
    assert missed.points == 0.0 and cublas.speedup == pytest.approx(20000.0 / 3000.0) and cublas.points == 0.5
    assert award_words(earned, "N") == \
        "tiled at least 1.25x faster than naive at N = 4096: 6.00x measured, 1 of 1 point(s)"
    # The naive kernel failed at 4096: nothing to compare, no points, and the words say why.
    (failed,) = speedup_awards(rules[:1], sweep_of(pack, crashed=("sweep-4096",)), pack, "N")
    assert failed.speedup is None and failed.points == 0.0
    assert "naive has no speed there" in award_words(failed, "N")


def test_speedup_points_read_plain_timings_too(pack: Assignment) -> None:
    # `grader time` without --sweep: each kernel on square-4096 (the tiled one at tile 16), N = 4096 too.
    plain = SubmissionTiming("plain", pack.name, (timed("naive", "square-4096", 100_000.0),
                                                  timed("tiled", "square-4096", 50_000.0)))
    (award,) = speedup_awards(load_timing(pack).speedup_points, plain, pack, "N")
    assert award.speedup == pytest.approx(2.0) and award.points == award.rule.points > 0


@pytest.mark.parametrize(("value", "message"), [
    ({"kernel": "tiled"}, "expected a table with exactly kernel, over, at, min_speedup, points"),
    ({"kernel": "tiled", "over": "tiled", "at": 4096, "min_speedup": 1.5, "points": 1}, "'kernel' and 'over' are both"),
    ({"kernel": "tiled", "over": "naive", "at": 4096, "min_speedup": -1, "points": 1}, "'min_speedup' must be above 0"),
    ({"kernel": "tiled", "over": "naive", "at": "big", "min_speedup": 1.5, "points": 1}, "'at' must be float"),
])
def test_a_malformed_speedup_rule_is_a_spec_error_naming_its_place(value: dict, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape("t [timing] speedup_points[0]: ")) as error:
        parse_timing({"speedup_points": [value]}, "t [timing]")
    assert message in str(error.value)
    with pytest.raises(SpecError, match="must be a list of"):
        parse_timing({"speedup_points": value}, "t [timing]")
    with pytest.raises(SpecError, match="'sweep_page' must be one of density, matmul"):
        parse_timing({"sweep_page": "gemm"}, "t [timing]")


def test_a_speedup_rule_must_name_the_packs_kernels(tmp_path: Path) -> None:
    folder = tmp_path / "tiled-matmul"
    shutil.copytree(PACK, folder)
    spec = (folder / "assignment.toml").read_text()
    (folder / "assignment.toml").write_text(spec.replace('over = "naive"', 'over = "simple"', 1))
    with pytest.raises(SpecError, match=r"assignment.toml \[timing\]: key 'speedup_points\[0\]' names \['simple'\]"):
        load_timing(load_assignment(str(folder)))


def test_grader_time_sweep_prints_the_sweet_spot_and_writes_the_page(pack: Assignment, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import grader.cli.time as time_command
    import grader.timing.run as timing_run

    # No GPU here: the timings are the hand-made ones, through the command's own path from there on.
    monkeypatch.setattr(time_command, "unavailable_reason", lambda *_: None)
    monkeypatch.setattr(timing_run, "time_submission", lambda *_, **__: sweep_of(pack))
    page, timings = tmp_path / "out" / "sweep.html", tmp_path / "sweep.json"
    assert main(["time", str(pack.reference_dir), "-a", "tiled-matmul", "--sweep", "--json", str(timings),
                 "--sweep-html", str(page)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "tile 16 at N = 256 and 512; tile 32 at N = 1024, 2048 and 4096" in said
    assert "tiled (tile 32, its fastest) reaches 30.0% of cublas's GFLOP/s at N = 4096" in said
    assert "points: tiled at least 1.25x faster than naive at N = 4096: 6.00x measured, 1 of 1 point(s)" in said
    assert "sweet spot (its fastest tile)" in page.read_text() and "speedup_points" in timings.read_text()
    (award,) = json.loads(timings.read_text())["speedup_points"]
    assert award["speedup"] == pytest.approx(6.0) and award["points"] == 1.0


def test_the_matmul_page_takes_no_other_sweep(pack: Assignment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import grader.cli.time as time_command

    monkeypatch.setattr(time_command, "unavailable_reason", lambda *_: None)
    assert main(["time", str(pack.reference_dir), "-a", "tiled-matmul", "--sweep", "--with",
                 str(tmp_path / "other.json"), "--sweep-html", str(tmp_path / "page.html")]) != 0
    assert "draws this sweep alone" in " ".join(capsys.readouterr().err.split())
