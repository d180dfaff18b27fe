"""`grader batch ROSTER --assignment NAME`: grade a whole class into the results store.

Fetches every repository in parallel (each under a time limit), pins each to its student's
deadline, grades on this machine (`--executor local`, each submission as soon as it is fetched) or
through Slurm (`--executor slurm`), and saves each result the moment it is ready. One batch holds
a store at a time; each batch is a run in the store, and a run stopped at any point (kill -9
included) is resumed by the same command run again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from rich.console import Console

from grader.batch_fetch import FetchStream
from grader.batch_lock import BatchLock, clean_clone_cache, lock_path
from grader.batch_progress import Tally
from grader.cli.options import add_grading_options, options_from
from grader.dispatch import executor_named
from grader.dispatch.slurm import SlurmExecutor
from grader.errors import StoreError, SubmissionError
from grader.pipeline import Options
from grader.repos import FETCH_TIMEOUT_S, parse_deadline, read_push_log
from grader.roster import Entry, read_roster
from grader.spec import Assignment, LatePolicy, load_assignment
from grader.store import Store, plan_run

DEFAULT_STORE = Path("grades.sqlite")
CACHE_LOCK = ".grader-batch.lock"  # in the clone cache: one batch at a time checks out there


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("batch", help="grade a class from a roster into the results store (instructors)")
    parser.add_argument("roster", type=Path, nargs="?", help="CSV: student,repository[,extension_days,commit]")
    parser.add_argument("--assignment", "-a", required=True, help="assignment name (see `grader list`)")
    parser.add_argument("--deadline", default=None,
                        help="e.g. '2026-12-05 23:59 America/Chicago' (default: grade each repository's latest commit)")
    parser.add_argument("--pin", nargs="+", metavar=("MODE", "FILE"), default=["commit-time"],
                        help="how the graded commit is chosen: 'commit-time' (default: the last commit at or before "
                             "the deadline) or 'push-log FILE' (the last push at or before it)")
    parser.add_argument("--store", type=Path, default=DEFAULT_STORE, help=f"results store (default: ./{DEFAULT_STORE})")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--regrade", action="store_true", help="grade everyone again (default: resume, skipping "
                                                               "students already in the store)")
    which.add_argument("--only", default=None, help="comma-separated student ids to grade (again)")
    which.add_argument("--failed", action="store_true",
                       help="grade again the students whose last result crashed, timed out, did not run, or errored")
    parser.add_argument("--new-run", action="store_true",
                        help="start a new run even where the same command left one unfinished (default: resume it)")
    parser.add_argument("--status", action="store_true",
                        help="show every batch run of the assignment in the store and whom each left ungraded")
    parser.add_argument("--executor", choices=("local", "slurm"), default="local", help="where to grade (default: local)")
    parser.add_argument("--gpus", default=None, help="local: comma-separated GPU ids, one run slot each "
                                                      "(default: $CUDA_VISIBLE_DEVICES or every GPU)")
    parser.add_argument("--run-slots", type=int, default=None,
                        help="local, C++ assignments: harness runs at once (default: half the cores, at least 2)")
    parser.add_argument("--fetch-jobs", type=int, default=8, help="repositories cloned or fetched at once (default: 8)")
    parser.add_argument("--fetch-timeout", type=float, default=FETCH_TIMEOUT_S, metavar="SECONDS",
                        help=f"the most one repository's clone or fetch may take; past it the student is "
                             f"not_submitted with the reason (default: {FETCH_TIMEOUT_S:g})")
    parser.add_argument("--repos-dir", type=Path, default=None,
                        help="clone cache (default: <cache-dir>/repos; on Slurm, a folder the nodes see)")
    parser.add_argument("--secret-file", type=Path, default=None,
                        help="file holding the secret seed (default: $KERNEL_GRADER_SECRET)")
    late = parser.add_argument_group("late policy (overrides the spec's [assignment.late])")
    late.add_argument("--grace-days", type=float, default=None, help="late days that cost nothing")
    late.add_argument("--penalty-per-day", type=float, default=None, help="fraction of the score per late day")
    late.add_argument("--late-cap", type=float, default=None, help="the most the penalty takes, as a fraction")
    late.add_argument("--max-late-days", type=float, default=None,
                      help="commits later than this many days are not accepted (default: until the cap is reached)")
    slurm = parser.add_argument_group("slurm")
    slurm.add_argument("--shared-dir", type=Path, default=None,
                       help="folder the nodes share for task inputs, results and logs "
                            "(default: ./grader-batch/<assignment>)")
    slurm.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                       help="extra #SBATCH line, e.g. --sbatch-arg=--partition=gpu (repeatable)")
    slurm.add_argument("--sbatch-template", type=Path, default=None, help="job script template (default: ci/slurm/)")
    slurm.add_argument("--max-parallel", type=int, default=None, help="array tasks running at once (sbatch %%N)")
    slurm.add_argument("--no-wait", action="store_true", help="submit and return; collect later with --collect")
    slurm.add_argument("--collect", action="store_true",
                       help="merge the finished Slurm tasks' results into the store (no roster needed)")
    add_grading_options(parser)
    parser.set_defaults(run=run)


def late_policy(assignment: Assignment, arguments: argparse.Namespace) -> LatePolicy | None:
    """The spec's policy with the command line's overrides."""
    overrides = {"grace_days": arguments.grace_days, "penalty_per_day": arguments.penalty_per_day,
                 "cap": arguments.late_cap, "max_late_days": arguments.max_late_days}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if not overrides:
        return assignment.late
    for key, value in overrides.items():
        if value < 0 or (key == "cap" and value > 1):
            raise SubmissionError(f"--{key.replace('_', '-')} {value:g}: must be >= 0" + (" and <= 1" if key == "cap" else ""))
    return dataclasses.replace(assignment.late or LatePolicy(), **overrides)


def run(arguments: argparse.Namespace) -> int:
    console = Console()
    if arguments.status:
        return show_status(arguments.store, arguments.assignment, console)
    assignment = load_assignment(arguments.assignment)
    policy = late_policy(assignment, arguments)
    assignment = dataclasses.replace(assignment, late=policy)
    options = options_from(arguments, public_only=False)
    shared_dir = arguments.shared_dir or Path("grader-batch") / assignment.name
    tally = Tally(console)
    if arguments.collect:
        with BatchLock(lock_path(arguments.store), f"store {arguments.store}"):
            store = Store(arguments.store)
            executor = SlurmExecutor(shared_dir)
            pending = store.unfinished_runs(assignment.name)
            with tally.progress(None, "collecting"):
                left = executor.collect(assignment, options,
                                        tally.saver(store, assignment, pending[-1].id if pending else None),
                                        wait=not arguments.no_wait)
            for started in pending:
                if not store.run(started.id).left:
                    store.finish_run(started.id)
            tally.summary(store, assignment)
            store.close()
        if left:
            console.print(f"{left} Slurm task(s) still queued or running: run --collect again later")
        return 0
    if arguments.roster is None and len(arguments.pin) == 3:  # `--pin push-log FILE ROSTER`: argparse took the roster
        arguments.roster, arguments.pin = Path(arguments.pin[2]), arguments.pin[:2]
    if arguments.roster is None:
        raise SubmissionError("grader batch: give a ROSTER (or --collect to merge Slurm results, --status to see runs)")
    deadline = parse_deadline(arguments.deadline) if arguments.deadline else None
    pushes = _push_log(arguments.pin)
    entries, problems = read_roster(arguments.roster)
    # Only now, past every mistake in the arguments, the spec and the roster: a warning, not an error.
    if options.secret is None:
        console.print("[yellow]warning:[/] no secret seed (--secret-file or $KERNEL_GRADER_SECRET): "
                      "hidden cases use the public seed, so their outputs are predictable", soft_wrap=True)
    for problem in problems:
        console.print(f"[yellow]roster {arguments.roster} {problem}[/]; going on with the other rows", highlight=False,
                      soft_wrap=True)
    tally.rejected = len(problems)
    repos_dir = arguments.repos_dir or options.cache_dir / "repos"
    with BatchLock(lock_path(arguments.store), f"store {arguments.store}") as store_lock, \
            BatchLock(repos_dir / CACHE_LOCK, f"clone cache {repos_dir}"):
        if store_lock.taken_over:
            console.print(f"taking over the lock of a batch that is gone ({store_lock.taken_over.describe()})",
                          highlight=False, soft_wrap=True)
        cleaned = clean_clone_cache(repos_dir)
        if cleaned.partial_folders or cleaned.index_locks:
            console.print(f"cleaned what killed batches left in {repos_dir}: {len(cleaned.partial_folders)} "
                          f"half-finished clone(s), {len(cleaned.index_locks)} stale .git/index.lock file(s)",
                          highlight=False, soft_wrap=True)
        store = Store(arguments.store)
        try:
            grade_class(arguments, console, tally, store, assignment, options, entries, deadline, pushes, repos_dir,
                        shared_dir)
        finally:
            store.close()
    return 0


def grade_class(arguments: argparse.Namespace, console: Console, tally: Tally, store: Store, assignment: Assignment,
                options: Options, entries: list[Entry], deadline, pushes, repos_dir: Path, shared_dir: Path) -> None:
    """Plan (or resume) the run, fetch and grade it, and print the summary."""
    roster = [e.student for e in entries]
    only = {s.strip() for s in arguments.only.split(",") if s.strip()} if arguments.only else None
    if only:
        unknown = sorted(only - set(roster))
        if unknown:
            console.print(f"[yellow]--only: not on the roster: {', '.join(unknown)}[/]", soft_wrap=True)
    plan = plan_run(store, assignment.name, roster, regrade=arguments.regrade, only=only, failed=arguments.failed,
                    fresh=arguments.new_run, command=" ".join(["grader", *sys.argv[1:]]))
    for line in plan.notes:
        console.print(line, highlight=False, soft_wrap=True)
    todo = set(plan.students)
    skipped = len(roster) - len(todo)
    console.print(f"{assignment.name}: {len(roster)} student(s) on the roster; {len(todo)} to grade"
                  + (f", {skipped} already in {arguments.store} (skipped; --regrade grades them again)"
                     if skipped and plan.run.mode == "new" else "")
                  + f" (run {plan.run.id})", highlight=False, soft_wrap=True)
    save = tally.saver(store, assignment, plan.run.id)
    selected = [e for e in entries if e.student in todo]
    fetches = FetchStream(selected, assignment, options, deadline, pushes, repos_dir, jobs=arguments.fetch_jobs,
                          timeout_s=arguments.fetch_timeout, save=save)
    tally.waiting = fetches.waiting
    with tally.progress(len(selected), "grading" if arguments.executor == "local" else "fetching"):
        if arguments.executor == "local":
            executor = executor_named("local", build_jobs=arguments.jobs, run_slots=arguments.run_slots,
                                      gpus=arguments.gpus.split(",") if arguments.gpus else None)
            executor.grade(fetches, assignment, options, save)  # each repository is graded once it is fetched
        else:
            jobs = fetches.in_roster_order()  # one job array: every repository first
            tally.describe("grading on Slurm")
            executor = executor_named("slurm", shared_dir=shared_dir, wait=not arguments.no_wait,
                                      sbatch_args=tuple(arguments.sbatch_arg), template=arguments.sbatch_template,
                                      max_parallel=arguments.max_parallel, secret_file=arguments.secret_file)
            executor.grade(jobs, assignment, options, save)
            if arguments.no_wait:
                console.print(f"submitted {len(jobs)} Slurm task(s); results go to {shared_dir}; merge them with "
                              f"`grader batch --assignment {assignment.name} --collect --shared-dir {shared_dir} "
                              f"--store {arguments.store}`", soft_wrap=True)
    if not store.run(plan.run.id).left:
        store.finish_run(plan.run.id)
    tally.summary(store, assignment)
    if arguments.json:
        arguments.json.write_text(json.dumps([r.to_dict() for r in store.latest(assignment.name)], indent=1) + "\n")


def show_status(store_path: Path, assignment: str, console: Console) -> int:
    """`--status`: every run of the assignment in the store, and whom each left ungraded."""
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
        return 0
    for r in runs:
        state = f"finished {r.finished_at}" if r.finished_at else "UNFINISHED"
        what = r.mode + (f" {r.selection}" if r.selection else "")
        console.print(f"run {r.id} ({what}), started {r.started_at} by pid {r.pid} on {r.host}, {state}: "
                      f"{len(r.done & set(r.students))} of {len(r.students)} graded", highlight=False, soft_wrap=True)
        if r.left:
            console.print(f"  left undone ({len(r.left)}): {', '.join(r.left)}", highlight=False, soft_wrap=True)
            console.print(f"  resume it with: {r.command}", highlight=False, soft_wrap=True, markup=False)
    return 0


def _push_log(pin: list[str]) -> dict | None:
    if pin == ["commit-time"]:
        return None
    if len(pin) == 2 and pin[0] == "push-log":
        return read_push_log(Path(pin[1]))
    raise SubmissionError(f"--pin {' '.join(pin)}: expected 'commit-time' or 'push-log FILE'")
