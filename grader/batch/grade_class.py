"""Grading a class: a roster into the results store, one batch run at a time.

The batch holds the store and the clone cache (one batch each), plans the run or resumes the
unfinished one, fetches every repository in parallel, hands each fetched submission to the
executor, takes the late penalty from each result and saves it the moment it is ready, and ends
with the class's summary. A run stopped at any point (kill -9 included) is resumed by the same
command run again.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from grader.batch.deadlines import CHOICE_WORDS, Deadlines, Push
from grader.batch.fetch import FETCH_TIMEOUT_S, FetchStream, commit_chosen_now
from grader.batch.late import apply_late_policy
from grader.batch.lock import BatchLock, cache_lock_path, clean_clone_cache, lock_path
from grader.batch.progress import Tally
from grader.batch.roster import Entry, read_roster
from grader.batch.summary import summarise
from grader.dispatch import Executor, Job, OnResult
from grader.dispatch.slurm import SlurmExecutor
from grader.errors import StoreError
from grader.options import Options
from grader.results import LaterCommit, Result
from grader.assignment import Assignment
from grader.written import report_bytes
from grader.store import FETCH_ATTEMPTS, Store, plan_run


@dataclass(frozen=True)
class Selection:
    """Whom of the roster a batch grades: by default everyone the store has no result for (a resume)."""

    regrade: bool = False  # everyone again
    only: frozenset[str] = frozenset()  # these students (again)
    failed: bool = False  # those whose last result crashed, timed out, did not run or errored
    new_run: bool = False  # a new run even where the same selection left one unfinished


@dataclass(frozen=True)
class Fetching:
    """Where and how the class's repositories are cloned."""

    repos_dir: Path  # the clone cache
    jobs: int = 8  # repositories cloned or fetched at once
    timeout_s: float = FETCH_TIMEOUT_S  # the most one repository's clone or fetch may take


@dataclass(frozen=True)
class ClassBatch:
    """One `grader batch`: a roster, graded as `assignment` says (its late policy included) into a store."""

    roster: Path
    assignment: Assignment
    options: Options
    store: Path
    executor: Executor
    fetching: Fetching
    deadline: datetime.datetime | None = None
    pushes: dict[str, list[Push]] | None = None  # --pin push-log: pin by push time
    selection: Selection = field(default_factory=Selection)
    command: str = "grader batch"  # the command line, recorded with the run: how to resume it
    json_out: Path | None = None  # every student's latest result, as a JSON list

    @property
    def deadlines(self) -> Deadlines:
        return Deadlines(self.deadline, self.assignment.late, self.pushes)


def grade_class(batch: ClassBatch, console: Console) -> int:
    """Grade the class and print its summary; returns how many submissions are still out on the executor."""
    entries, problems = read_roster(batch.roster)
    # Only now, past every mistake in the arguments, the spec and the roster: a warning, not an error.
    if batch.options.secret is None:
        console.print("[yellow]warning:[/] no secret seed (--secret-file or $KERNEL_GRADER_SECRET): "
                      "hidden cases use the public seed, so their outputs are predictable", soft_wrap=True)
    for problem in problems:
        console.print(f"[yellow]roster {batch.roster} {problem}[/]; going on with the other rows", highlight=False,
                      soft_wrap=True)
    repos_dir = batch.fetching.repos_dir
    with BatchLock(lock_path(batch.store), f"store {batch.store}") as store_lock, \
            BatchLock(cache_lock_path(repos_dir), f"clone cache {repos_dir}"):
        if store_lock.taken_over:
            console.print(f"taking over the lock of a batch that is gone ({store_lock.taken_over.describe()})",
                          highlight=False, soft_wrap=True)
        cleaned = clean_clone_cache(repos_dir)
        if cleaned.partial_folders or cleaned.index_locks:
            console.print(f"cleaned what killed batches left in {repos_dir}: {len(cleaned.partial_folders)} "
                          f"half-finished clone(s), {len(cleaned.index_locks)} stale .git/index.lock file(s)",
                          highlight=False, soft_wrap=True)
        store = Store(batch.store)
        try:
            return _grade_run(batch, entries, len(problems), store, console)
        finally:
            store.close()


def _grade_run(batch: ClassBatch, entries: list[Entry], rejected: int, store: Store, console: Console) -> int:
    """Plan (or resume) the run, fetch and grade it, and print the summary."""
    assignment, selection = batch.assignment, batch.selection
    roster = [e.student for e in entries]
    if selection.only:
        unknown = sorted(selection.only - set(roster))
        if unknown:
            console.print(f"[yellow]--only: not on the roster: {', '.join(unknown)}[/]", soft_wrap=True)
    pins = {e.student: batch.deadlines.choice(e) for e in entries}
    refetch = store.fetch_failures(assignment.name)  # before this run: whose fetch failed, how many times in a row
    plan = plan_run(store, assignment.name, roster, regrade=selection.regrade, only=set(selection.only) or None,
                    failed=selection.failed, fresh=selection.new_run, command=batch.command, pins=pins)
    for line in plan.notes:
        console.print(line, highlight=False, soft_wrap=True)
    todo = set(plan.students)
    skipped = len(roster) - len(todo)
    again = sum(1 for s in todo if s in refetch)
    console.print(f"{assignment.name}: {len(roster)} student(s) on the roster; {len(todo)} to grade"
                  + (f" ({again} again: their repository could not be fetched last time)" if again else "")
                  + (f", {skipped} already in {batch.store} (skipped; --regrade grades them again)"
                     if skipped and plan.run.mode == "new" else "")
                  + f" (run {plan.run.id})", highlight=False, soft_wrap=True)
    _warn_other_choices(store, batch, [e for e in entries if e.student not in todo], pins, console)
    tally = Tally(console)
    save = _saver(store, assignment, plan.run.id, tally)
    selected = [e for e in entries if e.student in todo]
    fetches = FetchStream(selected, assignment, batch.options, batch.deadlines, batch.fetching.repos_dir,
                          jobs=batch.fetching.jobs, timeout_s=batch.fetching.timeout_s, save=save)
    tally.waiting = fetches.waiting
    tally.fetch_limit_s = batch.fetching.timeout_s
    tally.running = batch.executor.running
    executor = batch.executor
    with tally.progress(len(selected), "grading" if executor.streams else "fetching"):
        if executor.streams:  # each repository is graded once it is fetched
            out = executor.grade(fetches, assignment, batch.options, save)
        else:
            jobs = fetches.in_roster_order()  # every repository first
            tally.describe(f"grading on {executor.name}")
            out = executor.grade(jobs, assignment, batch.options, save)
    if not store.run(plan.run.id).left:
        store.finish_run(plan.run.id)
    tally.show_summary(summarise(store.latest(assignment.name), assignment.name, assignment.max_score, rejected),
                       batch.store)
    _tell_fetch_failures(store.fetch_failures(assignment.name), roster, console)
    if batch.json_out:
        batch.json_out.write_text(json.dumps([r.to_dict() for r in store.latest(assignment.name)], indent=1) + "\n")
    return out


def collect_class(store_path: Path, assignment: Assignment, options: Options, executor: SlurmExecutor,
                  console: Console, wait: bool = True) -> int:
    """Merge the finished Slurm tasks' results into the store; returns how many are still queued or running."""
    with BatchLock(lock_path(store_path), f"store {store_path}"):
        store = Store(store_path)
        try:
            tally = Tally(console)
            pending = store.unfinished_runs(assignment.name)
            with tally.progress(None, "collecting"):
                left = executor.collect(assignment, options, _saver(store, assignment,
                                                                    pending[-1].id if pending else None, tally),
                                        wait=wait)
            for started in pending:
                if not store.run(started.id).left:
                    store.finish_run(started.id)
            tally.show_summary(summarise(store.latest(assignment.name), assignment.name, assignment.max_score),
                               store_path)
        finally:
            store.close()
    return left


def show_status(store_path: Path, assignment: str, console: Console) -> None:
    """Every batch run of the assignment in the store, and whom each left ungraded."""
    if not store_path.is_file() or store_path.stat().st_size == 0:
        raise StoreError(f"store {store_path}: no such store (nothing has been graded into it)")
    store = Store(store_path, read_only=True)
    try:
        runs = store.runs(assignment)
        latest = {r.student for r in store.latest(assignment)}
    finally:
        store.close()
    if not runs:
        console.print(f"{store_path}: no batch runs of {assignment} recorded ({len(latest)} student(s) with results)",
                      highlight=False, soft_wrap=True)
        return
    for r in runs:
        state = f"finished {r.finished_at}" if r.finished_at else "UNFINISHED"
        what = r.mode + (f" {r.selection}" if r.selection else "")
        console.print(f"run {r.id} ({what}), started {r.started_at} by pid {r.pid} on {r.host}, {state}: "
                      f"{len(r.done & set(r.students))} of {len(r.students)} graded", highlight=False, soft_wrap=True)
        if r.left:
            console.print(f"  left undone ({len(r.left)}): {', '.join(r.left)}", highlight=False, soft_wrap=True)
            console.print(f"  resume it with: {r.command}", highlight=False, soft_wrap=True, markup=False)


NAMED = 10  # students a line names before it says "..."


def _warn_other_choices(store: Store, batch: ClassBatch, kept: list[Entry], pins: dict[str, dict[str, str | None]],
                        console: Console) -> None:
    """One warning where results this run keeps were graded at commits chosen otherwise than now, counting only
    those whose clone shows another commit would be chosen now (a moved deadline changes one student's, not all)."""
    assignment = batch.assignment.name
    differ = store.graded_under_other_pins(assignment, [e.student for e in kept], pins)
    if not differ:
        return
    graded = {r.student: r.submission.commit for r in store.latest(assignment)}
    by_student = {e.student: e for e in kept}
    moved, unknown = {}, []
    for student in differ:
        entry = by_student[student]
        now = commit_chosen_now(student, entry.repository, batch.fetching.repos_dir, batch.deadlines.pin(entry))
        if now is None:
            unknown.append(student)
        elif now != graded.get(student):
            moved[student] = (graded.get(student), now)
    if moved:
        student, (then, now) = next(iter(moved.items()))
        key = next(k for k in CHOICE_WORDS if differ[student][0].get(k) != differ[student][1].get(k))
        names = ",".join(list(moved)[:NAMED]) + (",..." if len(moved) > NAMED else "")
        words = (f"{len(moved)} of the {len(kept)} result(s) kept in {batch.store} would be graded at another commit "
                 f"under this run's {CHOICE_WORDS[key]}, and keep the commit graded then: e.g. {student}'s was "
                 f"{(then or 'none')[:7]}, now {now[:7]}. --regrade grades everyone at the commits chosen now "
                 f"(--only {names}: those)")
        console.print(f"[yellow]warning:[/] {escape(words)}", highlight=False, soft_wrap=True)
    if unknown:
        names = ",".join(unknown[:NAMED]) + (",..." if len(unknown) > NAMED else "")
        words = (f"{len(unknown)} kept result(s) were graded under another choice of commit, and their clone "
                 f"cannot say which commit this choice picks: --regrade --only {names} grades them at the commits "
                 "chosen now")
        console.print(f"[yellow]warning:[/] {escape(words)}", highlight=False, soft_wrap=True)


def _tell_fetch_failures(failures: dict[str, int], roster: list[str], console: Console) -> None:
    """Whose repository could not be fetched, and whether the next run tries it again."""
    on_roster = [s for s in roster if s in failures]
    if not on_roster:
        return
    retried = [s for s in on_roster if failures[s] < FETCH_ATTEMPTS]
    given_up = [s for s in on_roster if failures[s] >= FETCH_ATTEMPTS]
    if retried:
        named = ", ".join(f"{s} attempt {failures[s]} of {FETCH_ATTEMPTS}" for s in retried[:NAMED])
        console.print(f"fetch_failed: {len(retried)} repositor{'y' if len(retried) == 1 else 'ies'} could not be "
                      f"fetched ({named}{', ...' if len(retried) > NAMED else ''}); the same command run again "
                      "tries them again (and so does --failed)", highlight=False, soft_wrap=True, markup=False)
    if given_up:
        console.print(f"fetch_failed: {', '.join(given_up)}: could not be fetched {FETCH_ATTEMPTS} times in a row, "
                      f"so plain runs and --failed no longer try; --only {','.join(given_up)} tries again",
                      highlight=False, soft_wrap=True, markup=False)


def _saver(store: Store, assignment: Assignment, run: int | None, tally: Tally) -> OnResult:
    """Save each result as it comes, its late penalty taken first (the job knows the student's deadline)."""

    def save(job: Job, result: Result) -> None:
        result = apply_late_policy(dataclasses.replace(result, student=job.student), assignment.late,
                                   job.deadline, job.submitted_at)
        if job.later_commit and job.later_committed_at and job.deadline:
            later = LaterCommit(job.later_commit, job.later_committed_at, job.deadline.isoformat(),
                                assignment.late.accepted_days if assignment.late else 0.0)
            result = dataclasses.replace(result, submission=dataclasses.replace(result.submission, later=later))
        store.save(result, run)
        if (content := report_bytes(result.written, job.root)) is not None:  # read back at the commit it was found at
            store.save_written(assignment.name, job.student, result.submission.commit, result.written.file,
                               result.written.sha256, content)
        tally.record(job, result)

    return save
