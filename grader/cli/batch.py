"""`grader batch ROSTER --assignment NAME`: grade a whole class into the results store.

Fetches every repository in parallel (each under a time limit), pins each to its student's
deadline, grades on this machine (`--executor local`, each submission as soon as it is fetched) or
through Slurm (`--executor slurm`), and saves each result the moment it is ready. One batch holds
a store at a time; each batch is a run in the store, and a run stopped at any point (kill -9
included) is resumed by the same command run again. The work is `grader.batch`'s; this module
only turns the command line into its call.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from grader.batch.deadlines import Push, parse_deadline, read_push_log
from grader.batch.fetch import FETCH_TIMEOUT_S
from grader.batch.grade_class import ClassBatch, Fetching, Selection, collect_class, grade_class, show_status
from grader.batch.late import with_overrides
from grader.cli.options import add_grading_options, exposure_warning, options_from
from grader.dispatch import Executor, executor_named
from grader.dispatch.slurm import SlurmExecutor
from grader.errors import SubmissionError
from grader.preflight import preflight
from grader.assignment import load_assignment

DEFAULT_STORE = Path("grades.sqlite")
LATE_HELP = {"grace_days": "late days that cost nothing",
             "penalty_per_day": "share of the max score taken per late day past the grace days",
             "cap": "the most the penalty takes, as a share of the max score",
             "max_late_days": "commits more than this many days late are not accepted (default: until the cap is "
                              "reached)"}


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("batch", help="grade a class from a roster into the results store (instructors)")
    parser.add_argument("roster", type=Path, nargs="?", help="CSV: student,repository[,extension_days,commit[,submitted_at]] "
                             "(see the README's 'The roster')")
    parser.add_argument("--assignment", "-a", required=True, help="assignment name (see `grader list`)")
    parser.add_argument("--deadline", default=None,
                        help="e.g. '2026-12-05 23:59 America/Chicago' (default: grade each repository's latest commit)")
    parser.add_argument("--pin", nargs="+", metavar=("MODE", "FILE"), default=["commit-time"],
                        help="how the graded commit is chosen: 'commit-time' (default: the last commit at or before "
                             "the deadline) or 'push-log FILE' (the last push at or before it)")
    parser.add_argument("--store", type=Path, default=DEFAULT_STORE, help=f"results store (default: ./{DEFAULT_STORE})")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--regrade", action="store_true",
                       help="grade everyone again, at the commits chosen now (default: resume, skipping students "
                            "already in the store, but fetching again those whose repository could not be fetched)")
    which.add_argument("--only", default=None, help="comma-separated student ids to grade (again)")
    which.add_argument("--failed", action="store_true",
                       help="grade again the students whose last result crashed, timed out, did not run, errored, "
                            "or whose repository could not be fetched (fetch_failed)")
    parser.add_argument("--new-run", action="store_true",
                        help="start a new run even where the same command left one unfinished (default: resume it)")
    parser.add_argument("--status", action="store_true",
                        help="show every batch run of the assignment in the store and whom each left ungraded")
    parser.add_argument("--executor", choices=("local", "slurm"), default="local", help="where to grade (default: local)")
    parser.add_argument("--gpus", default=None, help="local: comma-separated GPU ids the run slots use "
                                                      "(default: $CUDA_VISIBLE_DEVICES or every GPU)")
    parser.add_argument("--run-slots", type=int, default=None,
                        help="local: submissions run at once; CUDA assignments: per GPU (default: 4, fewer where "
                             "there are fewer cores; a kernel that crashed beside another submission is run again "
                             "with the GPU to itself), C++ assignments: in all (default: half the cores, at least 2)")
    parser.add_argument("--fetch-jobs", type=int, default=8, help="repositories cloned or fetched at once (default: 8)")
    parser.add_argument("--fetch-timeout", type=float, default=FETCH_TIMEOUT_S, metavar="SECONDS",
                        help=f"the most one repository's clone or fetch may take; past it the student is "
                             f"fetch_failed with the reason, and the next run tries again (default: {FETCH_TIMEOUT_S:g})")
    parser.add_argument("--repos-dir", type=Path, default=None,
                        help="clone cache (default: <cache-dir>/repos; on Slurm, a folder the nodes see)")
    parser.add_argument("--secret-file", type=Path, default=None,
                        help="file holding the secret seed (default: $KERNEL_GRADER_SECRET)")
    late = parser.add_argument_group("late policy (overrides the spec's [assignment.late])")
    # The README's [assignment.late] example says each of these in the same words (a test compares them).
    late.add_argument("--grace-days", type=float, default=None, help=LATE_HELP["grace_days"])
    late.add_argument("--penalty-per-day", type=float, default=None, help=LATE_HELP["penalty_per_day"])
    late.add_argument("--late-cap", type=float, default=None, help=LATE_HELP["cap"])
    late.add_argument("--max-late-days", type=float, default=None, help=LATE_HELP["max_late_days"])
    slurm = parser.add_argument_group("slurm")
    slurm.add_argument("--shared-dir", type=Path, default=None,
                       help="folder the nodes share for task inputs, results and logs "
                            "(default: ./grader-batch/<assignment>)")
    slurm.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                       help="extra #SBATCH line, e.g. --sbatch-arg=--partition=gpu (repeatable)")
    slurm.add_argument("--sbatch-template", type=Path, default=None,
                       help="job script template (default: the grader's own, grader/dispatch/templates/)")
    slurm.add_argument("--max-parallel", type=int, default=None, help="array tasks running at once (sbatch %%N)")
    slurm.add_argument("--no-wait", action="store_true", help="submit and return; collect later with --collect")
    slurm.add_argument("--collect", action="store_true",
                       help="merge the finished Slurm tasks' results into the store (no roster needed)")
    add_grading_options(parser)
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> int:
    console = Console()
    if arguments.status:
        show_status(arguments.store, arguments.assignment, console)
        return 0
    assignment = load_assignment(arguments.assignment)
    assignment = dataclasses.replace(assignment, late=with_overrides(
        assignment.late, grace_days=arguments.grace_days, penalty_per_day=arguments.penalty_per_day,
        cap=arguments.late_cap, max_late_days=arguments.max_late_days))
    options = options_from(arguments, public_only=False)
    if exposed := exposure_warning(options):
        console.print(f"[yellow]warning:[/] {escape(exposed)}", soft_wrap=True)
    shared_dir = arguments.shared_dir or Path("grader-batch") / assignment.name
    if arguments.collect:
        left = collect_class(arguments.store, assignment, options, SlurmExecutor(shared_dir), console,
                             wait=not arguments.no_wait)
        if left:
            console.print(f"{left} Slurm task(s) still queued or running: run --collect again later")
        return 0
    if arguments.roster is None and len(arguments.pin) == 3:  # `--pin push-log FILE ROSTER`: argparse took the roster
        arguments.roster, arguments.pin = Path(arguments.pin[2]), arguments.pin[:2]
    if arguments.roster is None:
        raise SubmissionError("grader batch: give a ROSTER (or --collect to merge Slurm results, --status to see runs)")
    preflight(assignment)  # before the first student: a package missing here is not the class's fault
    deadline = parse_deadline(arguments.deadline) if arguments.deadline else None
    pushes = _push_log(arguments.pin)
    only = frozenset(s.strip() for s in arguments.only.split(",") if s.strip()) if arguments.only else frozenset()
    batch = ClassBatch(
        roster=arguments.roster, assignment=assignment, options=options, store=arguments.store,
        executor=_executor(arguments, shared_dir),
        fetching=Fetching(arguments.repos_dir or options.cache_dir / "repos", arguments.fetch_jobs,
                          arguments.fetch_timeout),
        deadline=deadline, pushes=pushes,
        selection=Selection(arguments.regrade, only, arguments.failed, arguments.new_run),
        command=" ".join(["grader", *sys.argv[1:]]), json_out=arguments.json)
    out = grade_class(batch, console)
    if out:
        console.print(f"submitted {out} Slurm task(s); results go to {shared_dir}; merge them with "
                      f"`grader batch --assignment {assignment.name} --collect --shared-dir {shared_dir} "
                      f"--store {arguments.store}`", soft_wrap=True)
    return 0


def _executor(arguments: argparse.Namespace, shared_dir: Path) -> Executor:
    if arguments.executor == "local":
        return executor_named("local", build_jobs=arguments.jobs, run_slots=arguments.run_slots,
                              gpus=arguments.gpus.split(",") if arguments.gpus else None)
    return executor_named("slurm", shared_dir=shared_dir, wait=not arguments.no_wait,
                          sbatch_args=tuple(arguments.sbatch_arg), template=arguments.sbatch_template,
                          max_parallel=arguments.max_parallel, secret_file=arguments.secret_file)


def _push_log(pin: list[str]) -> dict[str, list[Push]] | None:
    if pin == ["commit-time"]:
        return None
    if len(pin) == 2 and pin[0] == "push-log":
        return read_push_log(Path(pin[1]))
    raise SubmissionError(f"--pin {' '.join(pin)}: expected 'commit-time' or 'push-log FILE'")
