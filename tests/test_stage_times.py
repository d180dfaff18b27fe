"""The stage times a result reports: disjoint stages, and a total that is measured, not summed."""

from __future__ import annotations

import time
from pathlib import Path

from grader.options import Options
from grader.pipeline import StageTimes, build_stage, execute_stage, score_stage
from grader.samples import compose
from grader.assignment import Assignment


def test_total_is_the_wall_time_not_a_sum_that_counts_harness_start_ups_twice(flash: Assignment, tmp_path: Path,
                                                                             cache_dir: Path) -> None:
    submission = compose(flash, None, tmp_path / "submission")
    options = Options(cache_dir=cache_dir)
    build_stage(submission, flash, options)  # warm: the builds and inputs are cached, as in the figures
    started = time.perf_counter()
    built = build_stage(submission, flash, options)
    ran = execute_stage(built, flash, options, tmp_path / "outputs")
    result = score_stage(ran, flash, options)
    wall = time.perf_counter() - started
    stages = result.stages
    assert 0 < stages["run_start"] <= stages["run"], stages
    # `run_start` is a part of `run`: the total is the stages' wall time, never the sum of every figure.
    assert stages["total"] <= wall + 0.001, (stages, wall)  # + the rounding to ms
    disjoint = sum(v for k, v in stages.items() if k not in ("run_start", "total"))
    assert abs(stages["total"] - disjoint) < 0.01 * len(stages), stages
    assert stages["total"] < disjoint + stages["run_start"] - 0.005, stages


def test_waiting_between_segments_is_not_grading_time(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    # A batch builds a submission, and runs it when a run slot is free: the queue is not its grading time.
    submission = compose(flash, None, tmp_path / "submission")
    options = Options(cache_dir=cache_dir)
    built = build_stage(submission, flash, options)
    time.sleep(1.0)
    ran = execute_stage(built, flash, options, tmp_path / "outputs")
    result = score_stage(ran, flash, options)
    assert result.stages["total"] < sum(v for k, v in result.stages.items() if k not in ("run_start", "total")) + 0.5


def test_stage_times_serialise_stages_then_parts_then_total() -> None:
    times = StageTimes(stages=(("build", 1.0), ("run", 2.0)), parts=(("run_start", 0.5),), total=3.01)
    assert list(times.to_dict().items()) == [("build", 1.0), ("run", 2.0), ("run_start", 0.5), ("total", 3.01)]
