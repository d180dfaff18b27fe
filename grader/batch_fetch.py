"""A batch's fetch stage: clone or fetch the class in parallel, each repository under a time limit,
and hand each fetched submission on the moment it is ready, so grading starts with the first.

A repository that cannot be graded (unreachable, empty, too late, past its time limit) is saved
as not submitted (or an error) right away; the rest of the class goes on.
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from grader.dispatch import Job
from grader.errors import GraderError
from grader.pipeline import Options, not_graded
from grader.repos import DAY, FETCH_TIMEOUT_S, Fetched, NotSubmitted, Pin, fetch_submission
from grader.results import Submission
from grader.roster import Entry
from grader.spec import Assignment


class FetchStream:
    """Iterate to get each fetched student's Job as soon as its fetch finishes (in finishing order)."""

    def __init__(self, entries: list[Entry], assignment: Assignment, options: Options,
                 deadline: datetime.datetime | None, pushes: dict | None, repos_dir: Path, *, jobs: int = 8,
                 timeout_s: float = FETCH_TIMEOUT_S, save=None) -> None:
        self.entries = entries
        self.assignment = assignment
        self.options = options
        self.deadline = deadline
        self.pushes = pushes
        self.repos_dir = repos_dir
        self.jobs = max(1, jobs)
        self.timeout_s = timeout_s
        self.save = save  # save(job, result) for the ungradable; called from the iterating thread
        self.position: dict[str, int] = {e.student: i for i, e in enumerate(entries)}
        self._in_flight: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def waiting(self) -> tuple[str, str, float] | None:
        """(student, repository, seconds) of the fetch that has run longest, if any is running."""
        with self._lock:
            if not self._in_flight:
                return None
            student, (repository, started) = min(self._in_flight.items(), key=lambda item: item[1][1])
        return student, repository, time.monotonic() - started

    def __iter__(self) -> Iterator[Job]:
        pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="kg-fetch")
        try:
            futures = [pool.submit(self._fetch, e) for e in self.entries]
            index = 0
            for future in as_completed(futures):
                entry, fetched, own_deadline = future.result()
                if isinstance(fetched, Fetched):
                    yield Job(index, entry.student, fetched.root, own_deadline, fetched.submitted_at, fetched.pinned_by)
                    index += 1
                    continue
                status, message = ("not_submitted", fetched.reason) if isinstance(fetched, NotSubmitted) \
                    else ("error", fetched)
                job = Job(-1, entry.student, Path(entry.repository), own_deadline)
                if self.save is not None:
                    self.save(job, not_graded(self.assignment, self.options, status, message,
                                              Submission(entry.repository)))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def in_roster_order(self) -> list[Job]:
        """Every fetched Job, in roster order, indexed from 0 (for executors that need the whole list)."""
        jobs = sorted(self, key=lambda job: self.position[job.student])
        return [dataclasses.replace(job, index=i) for i, job in enumerate(jobs)]

    def _fetch(self, entry: Entry) -> tuple[Entry, Fetched | NotSubmitted | str, datetime.datetime | None]:
        accepted = DAY * (self.assignment.late.accepted_days if self.assignment.late else 0)
        own_deadline = self.deadline + DAY * entry.extension_days if self.deadline else None
        pin = Pin(cutoff=own_deadline + accepted if own_deadline else None, commit=entry.commit,
                  submitted_at=entry.submitted_at,
                  pushes=None if self.pushes is None or entry.commit else self.pushes.get(entry.student, []))
        with self._lock:
            self._in_flight[entry.student] = (entry.repository, time.monotonic())
        try:
            return entry, fetch_submission(entry.student, entry.repository, self.repos_dir, pin,
                                           self.timeout_s), own_deadline
        except GraderError as error:
            return entry, str(error), own_deadline
        except Exception as error:  # one repository's trouble never stops the class
            return entry, f"fetching {entry.repository} failed: {type(error).__name__}: {error}", own_deadline
        finally:
            with self._lock:
                self._in_flight.pop(entry.student, None)
