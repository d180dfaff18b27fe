"""Where a batch's submissions are graded: one small interface, one class per place.

`local` grades on this machine (builds in parallel on the CPU cores, `--run-slots` submissions at once per GPU);
`slurm` submits one job-array task per submission. The batch calls `Executor.grade` and never asks
which one it holds.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable
from typing import Callable, Protocol

from grader.checkout import Checkout
from grader.options import Options
from grader.results import Result
from grader.assignment import Assignment
from grader.timestamps import parse_timestamp


@dataclass(frozen=True)
class Job:
    """One roster row, fetched and pinned: what to grade, and what its lateness is measured against."""

    index: int  # position in this batch, from 0
    student: str
    root: Path  # the work tree at the pinned commit
    deadline: datetime.datetime | None = None  # the student's own, extensions included
    submitted_at: datetime.datetime | None = None
    pinned_by: str = ""
    commit: str | None = None  # the commit the fetch pinned (None: a plain folder)
    commit_time: str | None = None  # ISO 8601 with the author's UTC offset
    dirty: bool | None = None
    later_commit: str | None = None  # the newest commit after the cutoff, left ungraded
    later_committed_at: str | None = None  # ISO 8601

    @property
    def checkout(self) -> Checkout:
        """What the fetch checked out, for the pipeline: its commit is known, git is not asked again."""
        return Checkout(self.root, self.commit, self.commit_time, self.dirty)

    def to_dict(self) -> dict:
        return {"index": self.index, "student": self.student, "root": str(self.root), "pinned_by": self.pinned_by,
                "deadline": self.deadline.isoformat() if self.deadline else None,
                "submitted_at": self.submitted_at.isoformat() if self.submitted_at else None,
                "commit": self.commit, "commit_time": self.commit_time, "dirty": self.dirty,
                "later_commit": self.later_commit, "later_committed_at": self.later_committed_at}

    @classmethod
    def from_dict(cls, data: dict) -> Job:
        def when(text: str | None) -> datetime.datetime | None:
            return parse_timestamp(text) if text else None

        return cls(data["index"], data["student"], Path(data["root"]), when(data["deadline"]),
                   when(data["submitted_at"]), data.get("pinned_by", ""), data.get("commit"),
                   data.get("commit_time"), data.get("dirty"), data.get("later_commit"),
                   data.get("later_committed_at"))


# Called once per job as it finishes, in the thread that called `grade`, so that it may write the store.
OnResult = Callable[[Job, Result], None]
# A submission on a run slot now: (student, seconds it has run, seconds its time limits allow in all).
Running = tuple[str, float, float]


class Executor(Protocol):
    name: str
    streams: bool  # True: grades each job the moment it is fetched; False: needs the whole list first

    def grade(self, jobs: Iterable[Job], assignment: Assignment, options: Options, on_result: OnResult) -> int:
        """Grade every job; a job the grader fails on still yields a result (status `error`).

        `jobs` may be a stream that yields each job as its repository is fetched (an executor that
        `streams` starts on each at once); one that does not is given a list. Returns how many jobs
        are still out (submitted without waiting: their results are collected later), else 0.
        """
        ...

    def running(self) -> list[Running]:
        """The submissions running on this executor's slots now (none known: an empty list)."""
        ...


def executor_named(name: str, **settings: object) -> Executor:
    from grader.dispatch.local import LocalExecutor
    from grader.dispatch.slurm import SlurmExecutor

    executors = {"local": LocalExecutor, "slurm": SlurmExecutor}
    if name not in executors:
        raise ValueError(f"unknown executor {name!r} (have {', '.join(executors)})")
    return executors[name](**settings)  # type: ignore[return-value]
