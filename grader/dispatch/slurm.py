"""The Slurm executor: one job-array task per submission, results merged from a shared folder.

The shared folder holds `task.json` (what every task grades and how: the assignment, the grading
Options serialised once, where the secret is read, the jobs; see `slurm_task`), `manifest.json`
(the jobs and the Slurm job id), `results/<i>.json` (written by task i), `exit/<i>.rc`,
`logs/<i>.out`, and `collected/<i>` once a result is in the store. The coordinator waits and
collects as tasks finish; `grader batch --collect` does the same later.
"""

from __future__ import annotations

import json
import math
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jinja2

from grader.dispatch import Job, OnResult
from grader.dispatch.slurm_task import TASK_FILE, write_task_file
from grader.errors import GraderError
from grader.options import Options
from grader.pipeline import not_graded
from grader.results import Result, Submission
from grader.assignment import Assignment
from grader.status import SubmissionStatus
from grader.targets import target_of

# The job script template: package data (pyproject), so that an installed grader has it too.
TEMPLATE = Path(__file__).resolve().parent / "templates" / "grade-array.sbatch"
COMPILE_BUDGET_MINUTES = 10  # per task, on top of the spec's run time limits
LOG_TAIL = 1500


class SlurmError(GraderError):
    """sbatch or squeue failed: the cluster, not a submission, is at fault."""


class SlurmExecutor:
    name = "slurm"
    streams = False  # one job array: every repository is fetched first

    def running(self) -> list:
        return []  # its tasks run on the cluster's nodes, which say nothing of them here until they end

    def __init__(self, shared_dir: Path, wait: bool = True, sbatch_args: tuple[str, ...] = (),
                 template: Path | None = None, max_parallel: int | None = None, poll_seconds: float = 2.0,
                 secret_file: Path | None = None) -> None:
        self.shared_dir = shared_dir.resolve()
        self.wait = wait
        self.sbatch_args = sbatch_args
        self.template = template or TEMPLATE
        self.max_parallel = max_parallel
        self.poll_seconds = poll_seconds
        self.secret_file = secret_file

    def grade(self, jobs: list[Job], assignment: Assignment, options: Options, on_result: OnResult) -> int:
        if not jobs:
            return 0
        script = self.prepare(jobs, assignment, options)
        job_id = submit(script)
        manifest = {"slurm_job": job_id, "assignment": assignment.name, "jobs": [j.to_dict() for j in jobs]}
        (self.shared_dir / "manifest.json").write_text(json.dumps(manifest, indent=1))
        if not self.wait:
            return len(jobs)
        return self.collect(assignment, options, on_result, wait=True)

    def prepare(self, jobs: list[Job], assignment: Assignment, options: Options) -> Path:
        """Lay out the shared folder for `jobs`: the task file, the job script (returned), the result folders."""
        if self.shared_dir.exists() and any(self.shared_dir.iterdir()):
            pending = [t for t in _manifest(self.shared_dir).get("jobs", []) if not _collected(self.shared_dir, t["index"])] \
                if (self.shared_dir / "manifest.json").is_file() else []
            if pending:
                raise SlurmError(f"{self.shared_dir}: holds a batch with {len(pending)} result(s) not yet collected; "
                                 "run `grader batch ... --collect` first, or pass another --shared-dir")
            shutil.rmtree(self.shared_dir)
        for sub in ("results", "exit", "logs", "collected"):
            (self.shared_dir / sub).mkdir(parents=True, exist_ok=True)
        write_task_file(self.shared_dir, jobs, assignment, options, self.secret_file)
        script = self.shared_dir / "grade-array.sbatch"
        script.write_text(self.render(assignment, options, len(jobs)))
        return script

    def render(self, assignment: Assignment, options: Options, count: int) -> str:
        """The job script: each array task runs the task entry on the task file, which carries every option."""
        shared = str(self.shared_dir)
        task_command = [sys.executable, "-m", "grader.dispatch.slurm_task", str(self.shared_dir / TASK_FILE)]
        return jinja2.Template(self.template.read_text(), keep_trailing_newline=True).render(
            assignment=assignment.name, last_index=count - 1, max_parallel=self.max_parallel,
            time_limit_minutes=time_limit_minutes(assignment), cpus_per_task=options.jobs or 1,
            gpu=target_of(assignment).needs_gpu,
            shared_dir=shared, shared_dir_quoted=shlex.quote(shared), sbatch_lines=list(self.sbatch_args),
            task_command=shlex.join(task_command),
        )

    def collect(self, assignment: Assignment, options: Options, on_result: OnResult, wait: bool = False) -> int:
        """Hand every finished task's result to `on_result` once; with `wait`, until none is left running.

        Returns how many tasks are still queued or running.
        """
        manifest = _manifest(self.shared_dir)
        if manifest.get("assignment") != assignment.name:
            raise SlurmError(f"{self.shared_dir}/manifest.json: a batch of {manifest.get('assignment')!r}, "
                             f"not {assignment.name!r}")
        jobs = [Job.from_dict(j) for j in manifest["jobs"]]
        while True:
            active = active_tasks(str(manifest["slurm_job"]))
            for job in jobs:
                if _collected(self.shared_dir, job.index) or job.index in active:
                    continue
                result = self._result_of(job, assignment, options, str(manifest["slurm_job"]))
                if result is None:
                    continue  # not started yet and not in the queue listing: look again next round
                on_result(job, result)
                (self.shared_dir / "collected" / str(job.index)).write_text("")
            left = sum(not _collected(self.shared_dir, j.index) for j in jobs)
            if not wait or left == 0:
                return left
            time.sleep(self.poll_seconds)

    def _result_of(self, job: Job, assignment: Assignment, options: Options, slurm_job: str) -> Result | None:
        result_file = self.shared_dir / "results" / f"{job.index}.json"
        exit_file = self.shared_dir / "exit" / f"{job.index}.rc"
        log = _tail(self.shared_dir / "logs" / f"{job.index}.out")
        if result_file.is_file():
            try:
                return Result.from_json(result_file.read_text())
            except (ValueError, TypeError, KeyError) as error:
                return self._failed(job, assignment, options, f"its result file is unreadable ({error})", log)
        if exit_file.is_file():
            code = exit_file.read_text().strip()
            return self._failed(job, assignment, options, f"exited with status {code} and wrote no result", log)
        state = task_state(slurm_job, job.index)
        if "TIME LIMIT" in log or state == "TIMEOUT":
            return self._failed(job, assignment, options, "was stopped at its Slurm time limit (timeout)", log)
        if state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "SUSPENDED"):
            return None
        if not log and state is None and not (self.shared_dir / "logs" / f"{job.index}.out").exists():
            # Never started and no longer known to Slurm: cancelled before it ran, or lost.
            return self._failed(job, assignment, options, "never ran (cancelled, or lost by Slurm)", log)
        return self._failed(job, assignment, options, f"ended {state or 'without a result'} (cancelled, killed or its "
                                                      "node failed)", log)

    def _failed(self, job: Job, assignment: Assignment, options: Options, what: str, log: str) -> Result:
        message = f"Slurm array task {job.index} {what}" + (f"\nlog tail:\n{log}" if log else "")
        return not_graded(assignment, options, SubmissionStatus.ERROR, message,
                          Submission(str(job.root), job.commit, job.commit_time, job.dirty))


def time_limit_minutes(assignment: Assignment) -> int:
    """Every case at its time limit, plus compiling: a task over this is surely stuck."""
    run_seconds = sum(k.time_limit_s * len(k.cases) for k in assignment.kernels)
    return COMPILE_BUDGET_MINUTES + math.ceil(run_seconds / 60)


def submit(script: Path) -> str:
    try:
        done = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=120,
                              cwd=script.parent)
    except FileNotFoundError:
        raise SlurmError("sbatch not found: --executor slurm needs a Slurm client on this machine "
                         "(ci/setup/slurm.sh starts a one-node cluster)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError("sbatch did not answer within 120 s") from None
    if done.returncode != 0:
        raise SlurmError(f"sbatch {script} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout.strip().split(";")[0]


def active_tasks(slurm_job: str) -> set[int]:
    """Array indices of the job still queued or running."""
    done = subprocess.run(["squeue", "-h", "-r", "-j", slurm_job, "-o", "%K %T"], capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return set()  # the whole array has left the queue
        raise SlurmError(f"squeue -j {slurm_job} failed: {done.stderr.strip()}")
    active = set()
    for line in done.stdout.splitlines():
        index, _, state = line.partition(" ")
        if index.strip().isdigit() and state.strip() not in ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"):
            active.add(int(index))
    return active


def task_state(slurm_job: str, index: int) -> str | None:
    """A finished task's state from scontrol (kept for MinJobAge), or None once Slurm has forgotten it."""
    try:
        done = subprocess.run(["scontrol", "-o", "show", "job", f"{slurm_job}_{index}"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for field in done.stdout.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return None


def _manifest(shared_dir: Path) -> dict:
    try:
        return json.loads((shared_dir / "manifest.json").read_text())
    except OSError:
        raise SlurmError(f"{shared_dir}: no manifest.json; nothing was submitted from this shared folder") from None
    except ValueError as error:
        raise SlurmError(f"{shared_dir}/manifest.json: unreadable ({error})") from None


def _collected(shared_dir: Path, index: int) -> bool:
    return (shared_dir / "collected" / str(index)).is_file()


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-LOG_TAIL:].strip()
    except OSError:
        return ""



