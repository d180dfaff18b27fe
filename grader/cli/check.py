"""`grader check [PATH]`: a student's pre-submission check on the public cases.

Exits 1 when a public case fails, so that CI on a student's push goes red.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from grader.cli.live import LiveLine
from grader.cli.options import add_grading_options, add_report_options, options_from, write_reports
from grader.errors import SubmissionError
from grader.pipeline import grade
from grader.report import terminal
from grader.preflight import preflight
from grader.spec import Assignment, list_assignments, load_assignment


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("check", help="check your repository on the public cases (students)")
    parser.add_argument("path", nargs="?", type=Path, default=Path("."), help="your repository (default: .)")
    parser.add_argument("--assignment", "-a", default=None, help="assignment name (default: recognised from the files)")
    add_grading_options(parser)
    add_report_options(parser)
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> int:
    named = load_assignment(arguments.assignment) if arguments.assignment else None
    root = repository_root(arguments.path, [named] if named else list_assignments())
    assignment = named or recognise(root)
    preflight(assignment)
    console = Console()
    if root.resolve() != arguments.path.resolve():
        console.print(f"checking {root} (the repository's root)", markup=False, highlight=False, style="dim")
    with LiveLine(Console(stderr=True), "checking") as live:
        result = grade(root, assignment, options_from(arguments, public_only=True), live.on_case)
    terminal.render(result, console, arguments.verbose)
    if arguments.json:
        result.write(arguments.json)
    write_reports(result, arguments)
    # Compiled but not run (no GPU here) is not a failure of the code: the compile feedback is all there is.
    return 1 if any(k.status.is_failure_of_student_code for k in result.kernels) else 0


def repository_root(path: Path, assignments: list[Assignment]) -> Path:
    """The folder to check: `path`, or the nearest folder above it that holds an assignment's files
    (a student in `src/` means the repository), never above the git repository's root."""
    if not path.exists():
        raise SubmissionError(f"{path}: no such folder")
    if not path.is_dir():
        raise SubmissionError(f"{path}: is a file; give your repository's folder")
    for folder in (path, *path.resolve().parents):
        if any(_present(a, folder) for a in assignments):
            return folder
        if (folder / ".git").exists():
            break
    return path


def recognise(path: Path) -> Assignment:
    """The assignment whose kernel files the folder holds (most of them)."""
    scored = []
    for assignment in list_assignments():
        # A later milestone's variant folders count too: its repository holds every file of the
        # earlier one (kernels/), and the most files matched breaks the tie.
        if present := _present(assignment, path):
            scored.append((present / (len(_files(assignment)) + len(assignment.variants)), present, assignment))
    if not scored:
        raise SubmissionError(f"{path.resolve()}: holds none of the files of any known assignment, nor does any "
                              "folder above it in its repository; name one with --assignment (see `grader list`)")
    return max(scored, key=lambda entry: entry[:2])[2]


def _files(assignment: Assignment) -> set[str]:
    return {s for k in assignment.kernels for s in k.sources}


def _present(assignment: Assignment, folder: Path) -> int:
    """How many of the assignment's kernel files and variant folders `folder` holds."""
    return sum((folder / f).is_file() for f in _files(assignment)) + sum(
        (folder / v.folder).is_dir() for v in assignment.variants)
