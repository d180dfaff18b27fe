"""`grader batch ROSTER --assignment NAME`: grade a whole class into the results store.

Fetches every repository in parallel, pins each to its student's deadline, grades on this machine
(`--executor local`) or through Slurm (`--executor slurm`), and saves each result the moment it is
ready: a batch stopped at any point (kill -9 included) resumes where it stopped when run again.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from grader.cli.options import add_grading_options, options_from
from grader.dispatch import Job, executor_named
from grader.dispatch.slurm import SlurmExecutor
from grader.errors import GraderError, SubmissionError
from grader.pipeline import Options, not_graded
from grader.repos import DAY, Fetched, NotSubmitted, Pin, fetch_submission, parse_deadline, read_push_log
from grader.results import Result, Submission
from grader.roster import Entry, read_roster
from grader.scoring import apply_late_policy
from grader.spec import Assignment, LatePolicy, load_assignment
from grader.store import Store

DEFAULT_STORE = Path("grades.sqlite")
OUTCOMES = ("passed", "failed", "compile_error", "crashed", "not_submitted", "error")


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
    parser.add_argument("--executor", choices=("local", "slurm"), default="local", help="where to grade (default: local)")
    parser.add_argument("--gpus", default=None, help="local: comma-separated GPU ids, one run slot each "
                                                      "(default: $CUDA_VISIBLE_DEVICES or every GPU)")
    parser.add_argument("--run-slots", type=int, default=None,
                        help="local, C++ assignments: harness runs at once (default: half the cores)")
    parser.add_argument("--fetch-jobs", type=int, default=8, help="repositories cloned or fetched at once (default: 8)")
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
    assignment = load_assignment(arguments.assignment)
    policy = late_policy(assignment, arguments)
    assignment = dataclasses.replace(assignment, late=policy)
    options = options_from(arguments, public_only=False)
    store = Store(arguments.store)
    shared_dir = arguments.shared_dir or Path("grader-batch") / assignment.name
    tally = Tally(console)
    if arguments.collect:
        executor = SlurmExecutor(shared_dir)
        with tally.progress(None, "collecting"):
            left = executor.collect(assignment, options, tally.saver(store, assignment), wait=not arguments.no_wait)
        tally.summary(store, assignment)
        if left:
            console.print(f"{left} Slurm task(s) still queued or running: run --collect again later")
        return 0
    if arguments.roster is None and len(arguments.pin) == 3:  # `--pin push-log FILE ROSTER`: argparse took the roster
        arguments.roster, arguments.pin = Path(arguments.pin[2]), arguments.pin[:2]
    if arguments.roster is None:
        raise SubmissionError("grader batch: give a ROSTER (or --collect to merge Slurm results)")
    if options.secret is None:
        console.print("[yellow]warning:[/] no secret seed (--secret-file or $KERNEL_GRADER_SECRET): "
                      "hidden cases use the public seed, so their outputs are predictable")

    entries, problems = read_roster(arguments.roster)
    for problem in problems:
        console.print(f"[yellow]roster {arguments.roster} {problem}[/]; going on with the other rows", highlight=False)
    roster = [e.student for e in entries]
    only = {s.strip() for s in arguments.only.split(",") if s.strip()} if arguments.only else None
    if only:
        unknown = sorted(only - set(roster))
        if unknown:
            console.print(f"[yellow]--only: not on the roster: {', '.join(unknown)}[/]")
    todo = set(store.to_grade(assignment.name, roster, regrade=arguments.regrade, only=only, failed=arguments.failed))
    skipped = len(roster) - len(todo)
    console.print(f"{assignment.name}: {len(roster)} student(s) on the roster; {len(todo)} to grade"
                  + (f", {skipped} already in {arguments.store} (skipped; --regrade grades them again)"
                     if skipped and not only and not arguments.failed else ""))
    deadline = parse_deadline(arguments.deadline) if arguments.deadline else None
    pushes = _push_log(arguments.pin)
    repos_dir = arguments.repos_dir or options.cache_dir / "repos"
    save = tally.saver(store, assignment)
    selected = [e for e in entries if e.student in todo]

    with tally.progress(len(selected), "fetching"):
        jobs = fetch_all(selected, assignment, options, deadline, pushes, repos_dir, arguments.fetch_jobs, save)
        tally.describe("grading" if arguments.executor == "local" else "grading on Slurm")
        if arguments.executor == "local":
            executor = executor_named("local", build_jobs=arguments.jobs, run_slots=arguments.run_slots,
                                      gpus=arguments.gpus.split(",") if arguments.gpus else None)
        else:
            executor = executor_named("slurm", shared_dir=shared_dir, wait=not arguments.no_wait,
                                      sbatch_args=tuple(arguments.sbatch_arg), template=arguments.sbatch_template,
                                      max_parallel=arguments.max_parallel, secret_file=arguments.secret_file)
        executor.grade(jobs, assignment, options, save)
    if arguments.executor == "slurm" and arguments.no_wait:
        console.print(f"submitted {len(jobs)} Slurm task(s); results go to {shared_dir}; merge them with "
                      f"`grader batch --assignment {assignment.name} --collect --shared-dir {shared_dir} "
                      f"--store {arguments.store}`")
    tally.summary(store, assignment)
    if arguments.json:
        arguments.json.write_text(json.dumps([r.to_dict() for r in store.latest(assignment.name)], indent=1) + "\n")
    store.close()
    return 0


def _push_log(pin: list[str]) -> dict | None:
    if pin == ["commit-time"]:
        return None
    if len(pin) == 2 and pin[0] == "push-log":
        return read_push_log(Path(pin[1]))
    raise SubmissionError(f"--pin {' '.join(pin)}: expected 'commit-time' or 'push-log FILE'")


def fetch_all(entries: list[Entry], assignment: Assignment, options: Options, deadline: datetime.datetime | None,
              pushes: dict | None, repos_dir: Path, fetch_jobs: int, save) -> list[Job]:
    """Clone or fetch every repository in parallel; the ungradable are saved right away, the rest become jobs."""
    accepted = DAY * (assignment.late.accepted_days if assignment.late else 0)

    def fetch(entry: Entry) -> tuple[Entry, Fetched | NotSubmitted | str, datetime.datetime | None]:
        own_deadline = deadline + DAY * entry.extension_days if deadline else None
        pin = Pin(cutoff=own_deadline + accepted if own_deadline else None, commit=entry.commit,
                  submitted_at=entry.submitted_at,
                  pushes=None if pushes is None or entry.commit else pushes.get(entry.student, []))
        try:
            return entry, fetch_submission(entry.student, entry.repository, repos_dir, pin), own_deadline
        except GraderError as error:
            return entry, str(error), own_deadline
        except Exception as error:  # one repository's trouble never stops the class
            return entry, f"fetching {entry.repository} failed: {type(error).__name__}: {error}", own_deadline

    jobs = []
    with ThreadPoolExecutor(max_workers=max(1, fetch_jobs)) as pool:
        futures = [pool.submit(fetch, e) for e in entries]
        for future in as_completed(futures):
            entry, fetched, own_deadline = future.result()
            if isinstance(fetched, Fetched):
                jobs.append((entries.index(entry), Job(0, entry.student, fetched.root, own_deadline,
                                                        fetched.submitted_at, fetched.pinned_by)))
                continue
            status, message = ("not_submitted", fetched.reason) if isinstance(fetched, NotSubmitted) else ("error", fetched)
            job = Job(-1, entry.student, Path(entry.repository), own_deadline)
            save(job, not_graded(assignment, options, status, message, Submission(entry.repository)))
    jobs.sort(key=lambda pair: pair[0])  # roster order, whatever order the fetches finished in
    return [dataclasses.replace(job, index=i) for i, (_, job) in enumerate(jobs)]


def outcome(result: Result) -> str:
    """One word per submission for counts: passed, failed, compile_error, crashed, not_submitted, error."""
    if result.status != "graded":
        return result.status
    statuses = {k.status for k in result.kernels}
    if statuses & {"crashed", "timeout"}:
        return "crashed"
    if "compile_error" in statuses:
        return "compile_error"
    return "passed" if statuses <= {"passed"} else "failed"


class Tally:
    """Counts per outcome, the progress bar, and the end-of-batch summary."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.counts = {o: 0 for o in OUTCOMES}
        self._progress: Progress | None = None
        self._task = None

    def progress(self, total: int | None, what: str) -> Progress:
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                  TimeRemainingColumn(), console=self.console, transient=False)
        self._task = self._progress.add_task(what, total=total, counts="")
        return self._progress

    def describe(self, what: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=what)

    def saver(self, store: Store, assignment: Assignment):
        def save(job: Job, result: Result) -> None:
            result = apply_late_policy(dataclasses.replace(result, student=job.student), assignment.late,
                                       job.deadline, job.submitted_at)
            store.save(result)
            kind = outcome(result)
            self.counts[kind] += 1
            late = f", {result.late.days_late:g} day(s) late, -{result.late.points_deducted:g}" \
                if result.late and result.late.days_late else ""
            line = (f"{job.student}: {kind} {result.score:.4g}/{result.max_score:g}{late}"
                    f" ({(result.submission.commit or '')[:10] or job.pinned_by or '-'})")
            if result.status != "graded":
                line += f": {result.message.splitlines()[0] if result.message else ''}"
            if self._progress is not None:
                self._progress.console.print(line, highlight=False, markup=False)
                self._progress.update(self._task, advance=1,
                                      counts=" ".join(f"{k} {v}" for k, v in self.counts.items() if v))
            else:
                self.console.print(line, highlight=False, markup=False)
        return save

    def summary(self, store: Store, assignment: Assignment) -> None:
        results = store.latest(assignment.name)
        table = Table(title=f"{assignment.name}: {len(results)} student(s) in {store.path}")
        table.add_column("outcome")
        table.add_column("students", justify="right")
        counts = {o: 0 for o in OUTCOMES}
        for result in results:
            counts[outcome(result)] += 1
        for name, count in counts.items():
            table.add_row(name, str(count))
        graded = [r for r in results if r.status == "graded"]
        if graded:
            mean = sum(r.score for r in graded) / len(graded)
            table.add_row("mean score (graded)", f"{mean:.2f}/{assignment.max_score:g}", end_section=True)
        self.console.print(table)
        slowest = sorted(graded, key=lambda r: r.stages.get("total", 0.0), reverse=True)[:5]
        if slowest:
            self.console.print("slowest: " + ", ".join(f"{r.student} {r.stages.get('total', 0.0):.1f} s" for r in slowest))


