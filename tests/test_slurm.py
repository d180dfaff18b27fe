"""`grader batch --executor slurm` for real: a one-node Slurm cluster on 127.0.0.1 (started by ci/setup/slurm.sh,
which .ci/run runs before the tests; where none is up, these tests skip and say so) grades a small class of the
C++ assignment through sbatch job arrays."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.batch.deadlines import Pin
from grader.batch.fetch import fetch_submission
from grader.cases import SECRET_ENV, Seed
from grader.cli import main
from grader.dispatch import Job
from grader.dispatch.slurm import SlurmExecutor
from grader.dispatch.slurm_task import TaskFileError, read_task, write_task_file
from grader.options import Options
from grader.results import Result
from grader.assignment import PROJECT_ROOT, load_assignment
from grader.store import Store

from test_batch import DEADLINE, make_repo



SETUP_SCRIPT = "ci/setup/slurm.sh"  # installs and starts the cluster; .ci/run runs it before the tests


@functools.cache
def cluster_unavailable() -> str | None:
    """The reason the one-node cluster can't be used here, or None. Never installs nor starts it."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return f"Slurm is not installed: `bash {SETUP_SCRIPT}` (as root) installs and starts it; .ci/run does"
    try:
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return f"sinfo did not answer within 60 s: is slurmctld up? `bash {SETUP_SCRIPT}` starts it"
    if not {"idle", "mixed", "allocated"} & set(states.stdout.split()):
        said = (states.stdout + states.stderr).strip()[-300:] or "no node"
        return f"no Slurm node is up ({said}): `bash {SETUP_SCRIPT}` (as root) starts the cluster; .ci/run does"
    return None


@pytest.fixture(scope="module")
def slurm() -> None:
    reason = cluster_unavailable()
    if reason:
        pytest.skip(reason)


def batch(*arguments: str) -> int:
    return main(["batch", *arguments])


def test_class_graded_through_sbatch_array(slurm, tmp_path: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    alice, alice_shas = make_repo(tmp_path, flash, [(None, -1), ("mutant-flash-no-rescale", 2)])
    bob, _ = make_repo(tmp_path, flash, [("mutant-standard-transposed-k", -1)])
    roster = tmp_path / "roster.csv"
    roster.write_text(f"student,repository\nalice,{alice}\nbob,{bob}\nerin,{tmp_path / 'missing'}\n")
    store = tmp_path / "grades.sqlite"
    shared = tmp_path / "shared"
    assert batch(str(roster), "-a", "flash-attention-cpu", "--deadline", DEADLINE, "--executor", "slurm",
                 "--store", str(store), "--shared-dir", str(shared), "--cache-dir", str(tmp_path / "cache")) == 0
    results = {r.student: r for r in Store(store).latest("flash-attention-cpu")}
    assert results["alice"].score == 3 and results["alice"].submission.commit == alice_shas[0]
    kernels = {k.name: k.status for k in results["bob"].kernels}
    assert kernels == {"standard_attention": "failed", "flash_attention": "passed"}
    assert results["erin"].status == "not_submitted"
    # Each task really ran under Slurm: its log names the array task.
    script = (shared / "grade-array.sbatch").read_text()
    assert "#SBATCH --array=0-1" in script and "--gres" not in script
    assert "task 0: grading" in (shared / "logs" / "0.out").read_text()


def test_cancelled_task_is_an_error_and_collect_merges_later(slurm, tmp_path: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    repos = [make_repo(tmp_path, flash, [(None, -1)])[0] for _ in range(3)]
    roster = tmp_path / "roster.csv"
    roster.write_text("student,repository\n" + "".join(f"s{i},{repo}\n" for i, repo in enumerate(repos)))
    store = tmp_path / "grades.sqlite"
    shared = tmp_path / "shared"
    common = ["--store", str(store), "--shared-dir", str(shared)]
    assert batch(str(roster), "-a", "flash-attention-cpu", "--executor", "slurm", "--no-wait", "--max-parallel", "1",
                 "--cache-dir", str(tmp_path / "cache"), *common) == 0
    job = json.loads((shared / "manifest.json").read_text())["slurm_job"]
    # One task at a time: the last one is still pending and can be cancelled before it runs.
    subprocess.run(["scancel", f"{job}_2"], check=True)
    assert batch("-a", "flash-attention-cpu", "--collect", *common) == 0
    results = {r.student: r for r in Store(store).latest("flash-attention-cpu")}
    assert results["s0"].score == results["s1"].score == 3
    assert results["s2"].status == "error" and "Slurm array task 2" in results["s2"].message
    # Collecting again adds nothing: every task's result is in the store once.
    assert batch("-a", "flash-attention-cpu", "--collect", *common) == 0
    assert len(Store(store).history("flash-attention-cpu", "s0")) == 1
    # --failed picks the cancelled one up again.
    assert batch(str(roster), "-a", "flash-attention-cpu", "--executor", "slurm", "--failed",
                 "--cache-dir", str(tmp_path / "cache"), *common) == 0
    assert Store(store).latest("flash-attention-cpu")[2].score == 3


def test_task_stopped_at_its_time_limit_is_stored_as_a_timeout(slurm, tmp_path: Path) -> None:
    from grader.dispatch import Job
    from grader.dispatch.slurm import SlurmExecutor
    from grader.options import Options

    shared = tmp_path / "shared"
    for sub in ("results", "exit", "logs", "collected"):
        (shared / sub).mkdir(parents=True)
    # What slurmstepd writes into a task's log when it kills it at --time; the job is long gone.
    (shared / "logs" / "0.out").write_text("task 0: grading /x\nslurmstepd: error: *** JOB 99999_0 ON vm "
                                           "CANCELLED AT 2026-03-02T01:00:00 DUE TO TIME LIMIT ***\n")
    (shared / "manifest.json").write_text(json.dumps({"slurm_job": "99999", "assignment": "flash-attention-cpu",
                                                      "jobs": [Job(0, "slow", tmp_path / "x").to_dict()]}))
    flash = load_assignment("flash-attention-cpu")
    seen = []
    left = SlurmExecutor(shared).collect(flash, Options(cache_dir=tmp_path / "cache"), lambda j, r: seen.append(r))
    assert left == 0 and seen[0].status == "error"
    assert "stopped at its Slurm time limit (timeout)" in seen[0].message and "DUE TO TIME LIMIT" in seen[0].message


# ---------------------------------------------------------------- the task file and the job script (no cluster)


def every_option_set(cache_dir: Path) -> Options:
    """Options with every field away from its default, built from the fields so that a new one can't be missed."""
    values: dict[str, object] = {}
    for number, option in enumerate(dataclasses.fields(Options)):
        default = option.default
        if option.name == "cache_dir":
            values[option.name] = cache_dir
        elif option.type == "bool":
            values[option.name] = not default
        elif option.type in ("str", "str | None"):
            values[option.name] = f"{option.name}-value"
        elif option.type in ("int", "int | None"):
            values[option.name] = 3 + number
        elif option.type == "tuple[str, ...]":
            values[option.name] = (f"{option.name}-a", f"{option.name}-b")
        elif option.type == "Path":
            values[option.name] = Path(f"/srv/{option.name}")
        else:
            pytest.fail(f"Options.{option.name}: give this test a value of type {option.type!r}")
        assert values[option.name] != default, option.name
    return Options(**values)  # type: ignore[arg-type]


def test_every_option_survives_the_round_trip_through_json(tmp_path: Path) -> None:
    options = every_option_set(tmp_path / "cache")
    assert Options.from_dict(json.loads(json.dumps(options.to_dict()))) == options


def test_task_file_carries_every_option_and_never_the_secret(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    flash = load_assignment("flash-attention-cpu")
    secret_file = tmp_path / "secret.txt"
    options = dataclasses.replace(every_option_set(tmp_path / "cache"), secret="correct horse battery staple")
    secret_file.write_text(options.secret + "\n")
    job = Job(0, "ada", tmp_path / "ada", pinned_by="deadline", commit="a" * 40, commit_time="2026-03-01T10:00:00-06:00",
              dirty=False)
    task_file = write_task_file(tmp_path, [job], flash, options, secret_file)
    assert options.secret not in task_file.read_text()
    task = read_task(task_file, 0)
    assert task.options == options and task.job == job and task.assignment.root == flash.root
    # A node whose secret file holds another secret refuses to grade on the wrong seed.
    secret_file.write_text("another secret\n")
    with pytest.raises(TaskFileError, match="holds another secret"):
        read_task(task_file, 0)


def test_job_script_grades_with_the_coordinator_s_options(tmp_path: Path, cache_dir: Path, monkeypatch) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    flash = load_assignment("flash-attention-cpu")
    repo, shas = make_repo(tmp_path, flash, [(None, -1)])
    fetched = fetch_submission("ada", str(repo), tmp_path / "clones", Pin(cutoff=None))
    checkout = fetched.checkout
    job = Job(0, "ada", checkout.root, None, fetched.submitted_at, fetched.pinned_by, checkout.commit,
              checkout.commit_time, checkout.dirty)
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text("s3cret-seed\n")
    # Options the old flags lost: no sanitizer, three compiles at once; one kernel of two.
    options = Options(cache_dir=cache_dir.resolve(), secret="s3cret-seed", sanitizer=False, jobs=3,
                      kernels=("flash_attention",))
    shared = tmp_path / "shared"
    script = SlurmExecutor(shared, secret_file=secret_file).prepare([job], flash, options)
    text = script.read_text()
    assert "#SBATCH --cpus-per-task=3" in text and "#SBATCH --array=0-0\n" in text
    assert not any("s3cret-seed" in f.read_text() for f in shared.rglob("*") if f.is_file())
    # What the script's task reads back is exactly what the coordinator graded with.
    assert read_task(shared / "task.json", 0).options == options

    env = {**os.environ, "SLURM_ARRAY_TASK_ID": "0", "PYTHONPATH": str(PROJECT_ROOT)}
    ran = subprocess.run(["bash", str(script)], cwd=shared, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert (shared / "exit" / "0.rc").read_text().strip() == "0"
    assert "task 0: grading" in ran.stdout and sys.executable in text
    result = Result.from_json((shared / "results" / "0.json").read_text())
    assert result.status == "graded" and [k.name for k in result.kernels] == ["flash_attention"]
    assert result.score == result.max_score == 2
    assert result.submission.commit == shas[0] and result.submission.dirty is False
    assert result.seed == {"mode": "secret", "fingerprint": Seed(flash.public_seed, "s3cret-seed").fingerprint}
    assert "sanitizer" not in result.stages and all(not k.sanitizer for k in result.kernels)
