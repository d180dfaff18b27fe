"""The executors: run slots that each see one GPU, one submission's failure kept to itself, and the
Slurm job script filled in from the spec."""

from __future__ import annotations

from pathlib import Path

from grader.dispatch import Job, executor_named
from grader.dispatch.local import LocalExecutor, _run_pool
from grader.dispatch.slurm import SlurmExecutor, time_limit_minutes
from grader.pipeline import Options
from grader.samples import compose
from grader.spec import load_assignment


def test_each_run_slot_process_sees_only_its_gpu() -> None:
    import os

    pools = [_run_pool("2"), _run_pool("5")]
    try:
        seen = [pool.submit(os.getenv, "CUDA_VISIBLE_DEVICES").result(timeout=60) for pool in pools]
        pids = {pool.submit(os.getpid).result(timeout=60) for pool in pools}
    finally:
        for pool in pools:
            pool.shutdown()
    assert seen == ["2", "5"] and len(pids) == 2 and os.getpid() not in pids


def test_one_slot_per_gpu_for_cuda_and_run_slots_for_cpp() -> None:
    assert LocalExecutor(gpus=["0", "1", "3"]).slots(load_assignment("gpt2-m1")) == ["0", "1", "3"]
    assert LocalExecutor(run_slots=3).slots(load_assignment("flash-attention-cpu")) == [None] * 3


def test_a_submission_the_grader_fails_on_is_an_error_and_the_rest_are_graded(tmp_path: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    good = compose(flash, None, tmp_path / "good")
    jobs = [Job(0, "gone", tmp_path / "deleted-after-fetch"), Job(1, "good", good)]
    results = {}
    executor_named("local", build_jobs=2).grade(jobs, flash, Options(cache_dir=tmp_path / "cache"),
                                                lambda job, result: results.__setitem__(job.student, result))
    assert results["good"].status == "graded" and results["good"].score == 3
    assert results["gone"].status == "error" and "deleted-after-fetch" in results["gone"].message


def test_sbatch_script_asks_for_a_gpu_and_the_spec_s_time(tmp_path: Path) -> None:
    gpt2 = load_assignment("gpt2-m1")
    script = SlurmExecutor(tmp_path / "shared", sbatch_args=("--partition=gpu",)).render(
        gpt2, Options(cache_dir=tmp_path / "cache"), 300)
    assert "#SBATCH --array=0-299\n" in script and "#SBATCH --gres=gpu:1" in script
    assert f"#SBATCH --time={time_limit_minutes(gpt2)}\n" in script and "#SBATCH --partition=gpu" in script
    assert time_limit_minutes(gpt2) >= 10
    cpu = SlurmExecutor(tmp_path / "shared", max_parallel=4).render(
        load_assignment("flash-attention-cpu"), Options(cache_dir=tmp_path / "cache"), 3)
    assert "#SBATCH --array=0-2%4" in cpu and "--gres" not in cpu
