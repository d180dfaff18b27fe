"""`grader check [PATH]`: a student's pre-submission check on the public cases.

Exits 1 when a public case fails, so that CI on a student's push goes red. The assignment is the one `--assignment`
names, else the one the repository's `.kernel-grader.toml` names (every assignment's template carries it), else the one
whose files the repository holds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from rich.console import Console

from grader.cli.live import LiveLine
from grader.cli.options import add_grading_options, add_report_options, options_from, write_reports
from grader.errors import SpecError, SubmissionError
from grader.pipeline import grade
from grader.report import terminal
from grader.preflight import preflight
from grader.assignment import Assignment, find_assignment, list_assignments, load_assignment

# A template's own file, at its repository's root, naming its assignment: read before the files are recognised, since
# a GPU assignment's template holds its CPU base's files (sparse-spmv-spgemm-cupy's are sparse-spmv-spgemm's). Hidden, so
# no build takes it for a source.
ASSIGNMENT_FILE = ".kernel-grader.toml"


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("check", help="check your repository on the public cases (students)")
    parser.add_argument("path", nargs="?", type=Path, default=Path("."), help="your repository (default: .)")
    parser.add_argument("--assignment", "-a", default=None, help="assignment name (default: the one the repository's "
                        f"{ASSIGNMENT_FILE} names, else recognised from the files)")
    add_grading_options(parser)
    add_report_options(parser)
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> int:
    root, assignment, marked = chosen(arguments.path, arguments.assignment)
    preflight(assignment)
    console = Console()
    if root.resolve() != arguments.path.resolve():
        console.print(f"checking {root} (the repository's root)", markup=False, highlight=False, style="dim")
    if marked is not None:
        console.print(f"assignment {assignment.name}, as {ASSIGNMENT_FILE} names it", markup=False,
                      highlight=False, style="dim")
    with LiveLine(Console(stderr=True), "checking") as live:
        result = grade(root, assignment, options_from(arguments, public_only=True), live.on_case)
    terminal.render(result, console, arguments.verbose)
    if arguments.json:
        result.write(arguments.json)
    write_reports(result, arguments)
    # Compiled but not run (no GPU here) is not a failure of the code: the compile feedback is all there is.
    return 1 if any(k.status.is_failure_of_student_code for k in result.kernels) else 0


def chosen(path: Path, name: str | None) -> tuple[Path, Assignment, Path | None]:
    """The folder to check for `path`, its assignment, and the ASSIGNMENT_FILE that named it (None where `name`, the
    --assignment given, or the files did)."""
    named = load_assignment(name) if name else None
    marked = None if named else assignment_file(path)
    if marked is not None:
        return marked.parent, assignment_named_in(marked), marked
    root = repository_root(path, [named] if named else list_assignments())
    return root, named or recognise(root), None


def assignment_file(path: Path) -> Path | None:
    """The ASSIGNMENT_FILE in `path` or the nearest folder above it, never above the git repository's root; None
    where there is none."""
    for folder in _up_to_git_root(path):
        if (folder / ASSIGNMENT_FILE).is_file():
            return folder / ASSIGNMENT_FILE
    return None


def assignment_named_in(file: Path) -> Assignment:
    """The assignment that `file` (an ASSIGNMENT_FILE: `assignment = "NAME"`) names."""
    file = file.resolve()  # named whole in an error, wherever the check was run from
    try:
        document = tomllib.loads(file.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise SubmissionError(f"{file}: not readable as TOML ({error}); it should hold one line, "
                              'assignment = "NAME" (see `grader list`)') from error
    name = document.get("assignment")
    if not isinstance(name, str) or not name or Path(name).name != name or name.startswith("."):
        raise SubmissionError(f'{file}: expected assignment = "NAME", an assignment\'s name (see `grader list`), '
                              f"found {'no assignment key' if name is None else repr(name)}")
    try:
        find_assignment(name)
    except SpecError as error:  # an unknown name: the file is what is wrong, not the grader's assignments
        raise SubmissionError(f"{file}: {error}; correct the file, or name the assignment with --assignment") \
            from error
    return load_assignment(name)


def repository_root(path: Path, assignments: list[Assignment]) -> Path:
    """The folder to check: `path`, or the nearest folder above it that holds an assignment's files
    (a student in `src/` means the repository), never above the git repository's root."""
    for folder in _up_to_git_root(path):
        if any(_present(a, folder) for a in assignments):
            return folder
    return path


def _up_to_git_root(path: Path) -> list[Path]:
    """`path` (a folder), then each folder above it up to the git repository's root, that root the last."""
    if not path.exists():
        raise SubmissionError(f"{path}: no such folder")
    if not path.is_dir():
        raise SubmissionError(f"{path}: is a file; give your repository's folder")
    folders = []
    for folder in (path, *path.resolve().parents):
        folders.append(folder)
        if (folder / ".git").exists():
            break
    return folders


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
