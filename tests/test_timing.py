"""The timing protocol on the CPU: statistics, the stop rule, the spec's [timing], the pool, the speed-up table."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from grader.boundary.timing_statistics import StopRule, geometric_mean, relative_standard_error, stop_reason, summarise
from grader.cases import Seed, load_inputs, prepare_inputs
from grader.errors import GraderError, SpecError
from grader.assignment import load_assignment
from grader.status import TimingStatus
from grader.timing.results import KernelTiming, SubmissionTiming
from grader.timing.run import pool_inputs
from grader.timing.spec import load_timing, parse_timing
from grader.timing.table import markdown, read_table, speedup_table
from conftest import copy_assignment

RULE = StopRule(min_calls=10, max_calls=50, rse=0.01, cap_s=2.0)


class FakeClock:
    """Timed calls of a known length and noise, on a clock that advances by what each call takes."""

    def __init__(self, mean_us: float, noise: float, seed: int = 1) -> None:
        self.rng = np.random.default_rng(seed)
        self.mean_us, self.noise, self.now = mean_us, noise, 0.0

    def call(self) -> float:
        took = self.mean_us * (1 + self.noise * self.rng.standard_normal())
        self.now += took / 1e6
        return took


def timed_until_stop(clock: FakeClock, rule: StopRule) -> tuple[list[float], str]:
    samples: list[float] = []
    while (reason := stop_reason(samples, clock.now, rule)) is None:
        samples.append(clock.call())
    return samples, reason


def test_a_steady_kernel_stops_at_min_calls_once_the_standard_error_is_small() -> None:
    samples, reason = timed_until_stop(FakeClock(100.0, 0.001), RULE)
    assert (len(samples), reason) == (RULE.min_calls, "rse")
    assert relative_standard_error(samples) < RULE.rse


def test_a_noisy_kernel_goes_on_until_the_standard_error_is_below_the_target() -> None:
    samples, reason = timed_until_stop(FakeClock(100.0, 0.08), StopRule(10, 10_000, 0.01, 60.0))
    assert reason == "rse" and len(samples) > 20
    assert relative_standard_error(samples) < 0.01 <= relative_standard_error(samples[:-1])


def test_the_time_cap_stops_a_noisy_kernel_but_never_below_min_calls() -> None:
    slow = FakeClock(500_000.0, 0.5)  # 0.5 s a call, 50% noise: the 2 s cap is spent after 4 calls
    samples, reason = timed_until_stop(slow, RULE)
    assert reason == "cap" and len(samples) == RULE.min_calls and slow.now > RULE.cap_s


def test_max_calls_bounds_a_kernel_that_never_settles() -> None:
    samples, reason = timed_until_stop(FakeClock(10.0, 0.9), StopRule(10, 30, 0.0001, 1e9))
    assert (len(samples), reason) == (30, "max_calls")


def test_summary_is_the_median_not_the_mean() -> None:
    samples = [10.0] * 9 + [1000.0]  # one call preempted
    summary = summarise(samples, "rse")
    assert summary is not None and summary.median_us == 10.0 and summary.mean_us == statistics.fmean(samples)
    assert summarise([], "too_few") is None
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0) and geometric_mean([]) is None


def test_timing_table_parses_with_every_knob() -> None:
    timing = parse_timing({"case": "gpt2-full", "cases": {"attention": "gpt2-small-batch"}, "warmup": 2,
                           "min_calls": 12, "max_calls": 40, "rse": 0.02, "cap_s": 1.5, "pool": 3, "spin_us": 0,
                           "leaderboard": "geomean_speedup_vs_m1",
                           "tiers": [{"name": "close", "min_speedup": 0.5}, {"name": "fast", "min_speedup": 1}]},
                          "pack [timing]")
    assert timing.rule == StopRule(12, 40, 0.02, 1.5) and (timing.pool, timing.warmup, timing.spin_us) == (3, 2, 0)
    assert [t.name for t in timing.tiers] == ["fast", "close"]  # the highest first
    assert (timing.tier_of(1.2), timing.tier_of(0.7), timing.tier_of(0.2), timing.tier_of(None)) == \
        ("fast", "close", None, None)


@pytest.mark.parametrize("table, words", [
    ({"cap": 1}, ["unknown key(s) ['cap']", "cap_s"]),
    ({"rse": 1.5}, ["key 'rse'", "between 0 and 1"]),
    ({"min_calls": 20, "max_calls": 10}, ["key 'max_calls' is 10, below min_calls (20)"]),
    ({"min_calls": 1}, ["key 'min_calls' must be at least 2"]),
    ({"pool": "4"}, ["key 'pool' must be int, found '4'"]),
    ({"leaderboard": "fastest"}, ["key 'leaderboard'", "geomean_speedup_vs_reference", "'fastest'"]),
    ({"tiers": [{"name": "gold"}]}, ["tiers[0]", "exactly 'name' and 'min_speedup'"]),
    ({"cases": {"matmul": 3}}, ["key 'cases'", "['matmul']"]),
])
def test_a_broken_timing_table_names_the_key_and_what_was_expected(table: dict, words: list[str]) -> None:
    with pytest.raises(SpecError) as error:
        parse_timing(table, "pack/assignment.toml [timing]")
    assert "pack/assignment.toml [timing]" in str(error.value)
    for word in words:
        assert word in str(error.value)


def test_without_a_timing_table_each_kernel_is_timed_on_its_last_case() -> None:
    assignment = load_assignment("gpt2-m2")
    timing = load_timing(assignment)
    assert {k.name: timing.timed_case(k).name for k in assignment.base_kernels} == \
        {k.name: k.cases[-1].name for k in assignment.base_kernels}
    assert timing.timed_case(assignment.kernel("req_0/matmul")).name == "gpt2-full"  # a variant's copy: its base's


def test_a_based_on_pack_inherits_the_timing_table_and_a_missing_case_is_named(tmp_path: Path) -> None:
    copy_assignment("gpt2-m2", tmp_path)
    parent = copy_assignment("gpt2-m1", tmp_path) / "assignment.toml"
    parent.write_text(parent.read_text() + '\n[timing]\ncase = "gpt2-full"\ncases = { residual = "one-row" }\n'
                      'leaderboard = ""\n')
    assignment = load_assignment(tmp_path / "assignments" / "gpt2-m2")
    timing = load_timing(assignment)
    assert timing.where == f"{parent.resolve()} [timing]" and timing.leaderboard == ""
    assert timing.timed_case(assignment.kernel("req_3/residual")).name == "one-row"
    parent.write_text(parent.read_text().replace('case = "gpt2-full"', 'case = "gpt2-huge"'))
    with pytest.raises(SpecError, match=r"key 'case': kernel 'encoder' has no case 'gpt2-huge' \(its cases: "
                                        r"single-token, .*gpt2-full\)"):
        load_timing(load_assignment(tmp_path / "assignments" / "gpt2-m2"))


def test_the_pool_is_the_case_own_inputs_then_fresh_draws_from_its_generator(tmp_path: Path) -> None:
    assignment = load_assignment("gpt2-m2")
    kernel = assignment.kernel("req_0/matmul")
    case = next(c for c in kernel.cases if c.name == "qkv-projection")
    seed = Seed(assignment.public_seed)
    folders = pool_inputs(assignment, kernel, case, seed, 3, tmp_path)
    assert folders[0] == prepare_inputs(assignment, assignment.kernel("matmul"), case, seed, tmp_path)
    pools = [load_inputs(f) for f in folders]
    assert len(set(folders)) == 3
    for name in ("inp", "weight", "bias"):
        shapes = {p[name].shape for p in pools}
        assert len(shapes) == 1  # the same case: the same sizes
        assert all(not np.array_equal(pools[i][name], pools[j][name]) for i in range(3) for j in range(i))
    # Drawn again, each set is the same: the pool is deterministic, the gold of pool[0] is the case's.
    assert pool_inputs(assignment, kernel, case, seed, 3, tmp_path) == folders


def timed(base: str, variant: str | None, median: float | None, status: TimingStatus = TimingStatus.TIMED,
          message: str = "") -> KernelTiming:
    summary = summarise([median] * 10, "rse") if median is not None else None
    return KernelTiming(f"{variant}/{base}" if variant else base, base, variant, "gpt2-full", status, message, summary)


def test_speedups_against_the_students_kernels_and_the_reference_with_tiers_and_leaderboard() -> None:
    student = SubmissionTiming("alice", "gpt2-m2", (
        timed("matmul", None, 8000.0), timed("gelu", None, 100.0),
        timed("matmul", "req_0", 1000.0), timed("gelu", "req_0", 100.0),
        timed("matmul", "req_1", 400.0, TimingStatus.WRONG, "outputs after timing do not match gold"),
        timed("gelu", "req_1", 50.0)))
    reference = SubmissionTiming("reference", "gpt2-m2", (
        timed("matmul", None, 4000.0), timed("gelu", None, 100.0), timed("matmul", "req_0", 500.0),
        timed("gelu", "req_0", 100.0), timed("matmul", "req_1", 200.0), timed("gelu", "req_1", 100.0)))
    timing = parse_timing({"tiers": [{"name": "reference pace", "min_speedup": 1.0},
                                     {"name": "half", "min_speedup": 0.5}]}, "t")
    table = speedup_table(student, reference, timing)
    rows = {(r.variant, r.kernel): r for r in table.rows}
    assert rows[("req_0", "matmul")].vs_m1 == pytest.approx(8.0)
    assert rows[("req_0", "matmul")].vs_reference == pytest.approx(0.5)
    assert rows[("req_0", "matmul")].tier == "half"
    assert rows[("req_1", "gelu")].vs_reference == pytest.approx(2.0) and rows[("req_1", "gelu")].tier == "reference pace"
    wrong = rows[("req_1", "matmul")]  # fast and wrong: no speed, whatever its samples say
    assert (wrong.median_us, wrong.vs_m1, wrong.vs_reference, wrong.tier) == (None, None, None, None)
    assert "do not match gold" in wrong.note
    # The variants' rows that have a speed: 0.5, 1.0 and 2.0.
    assert table.leaderboard_rows == 3 and table.leaderboard_value == pytest.approx(1.0)
    text = markdown(table, "gpt2-m2")
    assert "### kernels/" in text and "### req_1" in text and "| matmul | gpt2-full | 1,000.0 |" in text
    assert "8.00×" in text


def test_without_the_reference_only_the_students_own_speedups_are_shown() -> None:
    student = SubmissionTiming("bob", "gpt2-m2", (timed("matmul", None, 900.0), timed("matmul", "req_2", 300.0)))
    table = speedup_table(student, None, parse_timing({"leaderboard": "geomean_speedup_vs_m1"}, "t"))
    row = next(r for r in table.rows if r.variant == "req_2")
    assert (row.vs_m1, row.vs_reference) == (pytest.approx(3.0), None)
    assert table.leaderboard_value == pytest.approx(3.0)
    against_reference = speedup_table(student, None, parse_timing({}, "t"))  # the default measure: none timed
    assert (against_reference.leaderboard_rows, against_reference.leaderboard_value) == (0, None)


def test_timings_and_the_table_round_trip_through_the_json_file(tmp_path: Path) -> None:
    timing = SubmissionTiming("carol", "gpt2-m2", (timed("gelu", "req_3", 42.0), timed("matmul", None, None,
                                                                                          TimingStatus.CRASHED, "x")))
    assert SubmissionTiming.from_dict(timing.to_dict()) == timing
    table = speedup_table(timing, None, parse_timing({"leaderboard": "geomean_speedup_vs_m1"}, "t"))
    written = tmp_path / "timing.json"
    written.write_text(json.dumps({"student": timing.to_dict(), "table": table.to_dict()}))
    assert read_table(written) == table
    written.write_text("{}")
    with pytest.raises(GraderError, match=r"timing.json: not a timing file written by `grader time`"):
        read_table(written)


def test_time_without_a_gpu_says_what_cannot_run_and_where(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from grader.cli import main
    from grader.device import unavailable_reason

    monkeypatch.setenv("KERNEL_GRADER_NO_GPU", "1")
    unavailable_reason.cache_clear()
    try:
        code = main(["time", str(load_assignment("gpt2-m2").reference_dir), "--assignment", "gpt2-m2"])
    finally:
        unavailable_reason.cache_clear()
    error = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert "cannot time gpt2-m2's kernels on this machine: no GPU is used here (KERNEL_GRADER_NO_GPU is set)" in error
    assert "`grader grade` still compiles them here" in error


def test_gradescope_leaderboard_carries_the_specs_speedup_value(tmp_path: Path) -> None:
    from grader.cli.export import speed_up
    from grader.options import Options
    from grader.pipeline import not_graded
    from grader.report import gradescope
    from grader.results import Submission, SubmissionStatus

    assignment = load_assignment("flash-attention-cpu")
    result = not_graded(assignment, Options(cache_dir=tmp_path), SubmissionStatus.GRADED, "", Submission("alice"))
    student = SubmissionTiming("alice", "gpt2-m2", (timed("matmul", None, 900.0), timed("matmul", "req_0", 300.0),
                                                    timed("gelu", "req_0", 100.0)))
    reference = SubmissionTiming("ref", "gpt2-m2", (timed("matmul", "req_0", 150.0), timed("gelu", "req_0", 200.0)))
    table = speedup_table(student, reference, parse_timing({}, "t"))
    board = gradescope.results_json(result, speed=speed_up(table))["leaderboard"]
    assert board[0] == {"name": "speed-up vs the reference (geometric mean of 2 kernels)", "value": 1.0, "order": "desc"}
    assert "leaderboard" not in gradescope.results_json(result)  # nothing timed, nothing graded: no board


def test_export_results_puts_the_timing_files_leaderboard_value_first(tmp_path: Path) -> None:
    from grader.cli import main
    from grader.options import Options
    from grader.pipeline import not_graded
    from grader.results import Submission, SubmissionStatus

    assignment = load_assignment("flash-attention-cpu")
    result = not_graded(assignment, Options(cache_dir=tmp_path), SubmissionStatus.GRADED, "", Submission("alice"))
    result.write(tmp_path / "result.json")
    student = SubmissionTiming("alice", "gpt2-m2", (timed("matmul", None, 900.0), timed("matmul", "req_0", 300.0)))
    reference = SubmissionTiming("ref", "gpt2-m2", (timed("matmul", "req_0", 600.0),))
    table = speedup_table(student, reference, parse_timing({}, "t"))
    (tmp_path / "timing.json").write_text(json.dumps({"table": table.to_dict()}))
    out = tmp_path / "results.json"
    assert main(["export", "gradescope-results", "--result", str(tmp_path / "result.json"), "--timing",
                 str(tmp_path / "timing.json"), "--out", str(out)]) == 0
    board = json.loads(out.read_text())["leaderboard"]
    assert board[0] == {"name": "speed-up vs the reference (geometric mean of 1 kernel)", "value": 2.0, "order": "desc"}
