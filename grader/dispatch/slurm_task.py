"""One Slurm array task, and the task file that tells it what to grade and how.

    python -m grader.dispatch.slurm_task TASK_FILE INDEX

The coordinator writes the task file (`task.json` in the shared folder) once for the whole array:
the assignment, the grading Options exactly as `Options.to_dict` writes them, where the
secret seed is read (a file or the environment, with the secret's fingerprint, never the secret
itself) and one job per array index, its pinned commit included. Task INDEX grades its job with
those options and writes `results/<INDEX>.json` beside the task file, whole or not at all.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from grader.cache import publish_file
from grader.cases import SECRET_ENV, read_secret
from grader.dispatch import Job
from grader.errors import GraderError
from grader.options import Options
from grader.pipeline import grade
from grader.assignment import Assignment, load_assignment

TASK_FILE = "task.json"


class TaskFileError(GraderError):
    """The task file is missing, unreadable, or names a secret this node cannot read."""


@dataclass(frozen=True)
class Task:
    """What one array task grades, and how."""

    assignment: Assignment
    options: Options
    job: Job


def write_task_file(shared_dir: Path, jobs: list[Job], assignment: Assignment, options: Options,
                    secret_file: Path | None) -> Path:
    """The task file for `jobs` (array index = position); the secret is named by where it is read, never written."""
    # The tasks start in the shared folder, on other machines: every path they read is made absolute.
    written = dataclasses.replace(options, secret=None, cache_dir=options.cache_dir.resolve())
    secret = None
    if options.secret is not None:
        secret = {"file": str(secret_file.resolve()) if secret_file else None, "environment": SECRET_ENV,
                  "fingerprint": _fingerprint(options.secret)}
    path = shared_dir / TASK_FILE
    path.write_text(json.dumps({"assignment": str(assignment.root.resolve()), "options": written.to_dict(),
                                "secret": secret, "jobs": [job.to_dict() for job in jobs]}, indent=1) + "\n")
    return path


def read_task(path: Path, index: int) -> Task:
    """Task `index` of the task file: its assignment, the coordinator's Options (secret read again here) and its job."""
    try:
        data = json.loads(path.read_text())
    except OSError as error:
        raise TaskFileError(f"task file {path}: cannot be read ({error.strerror})") from None
    except ValueError as error:
        raise TaskFileError(f"task file {path}: unreadable ({error})") from None
    jobs = data["jobs"]
    if not 0 <= index < len(jobs):
        raise TaskFileError(f"task file {path}: no job {index} (it has {len(jobs)})")
    options = dataclasses.replace(Options.from_dict(data["options"]), secret=_secret(path, data["secret"]))
    return Task(load_assignment(Path(data["assignment"])), options, Job.from_dict(jobs[index]))


def run_task(path: Path, index: int, console: Console) -> Path:
    """Grade task `index` and write its result beside the task file; returns the result's path."""
    task = read_task(path, index)
    job = task.job
    console.print(f"task {index}: grading {job.root}" + (f" at {job.commit[:10]}" if job.commit else "")
                  + f" ({job.student}) on {socket.gethostname()} "
                  f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'none')})",
                  highlight=False, soft_wrap=True)
    result = grade(job.checkout, task.assignment, task.options)
    from grader.report import terminal

    terminal.render(result, console, False)  # the task's log: what a `grader grade` would have shown
    final = path.parent / "results" / f"{index}.json"
    publish_file(final, (result.to_json() + "\n").encode())
    return final


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 2 or not arguments[1].isdigit():
        print("usage: python -m grader.dispatch.slurm_task TASK_FILE INDEX", file=sys.stderr)
        return 2
    console = Console()
    try:
        run_task(Path(arguments[0]), int(arguments[1]), console)
    except GraderError as error:
        Console(stderr=True).print(f"[red]error:[/] {error}", highlight=False, soft_wrap=True)
        return 2
    return 0


def _secret(path: Path, source: dict | None) -> str | None:
    """The coordinator's secret, read where it said; refused unless its fingerprint matches."""
    if source is None:
        return None
    secret = read_secret(Path(source["file"]) if source["file"] else None)
    where = f"secret file {source['file']}" if source["file"] else f"${source['environment']}"
    if secret is None:
        raise TaskFileError(f"task file {path}: the batch was graded with a secret seed from {where}, which this "
                            "node does not have; pass --secret-file with a file the nodes can read")
    if _fingerprint(secret) != source["fingerprint"]:
        raise TaskFileError(f"task file {path}: {where} on this node holds another secret than the coordinator's")
    return secret


def _fingerprint(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()[:16]


if __name__ == "__main__":
    sys.exit(main())
