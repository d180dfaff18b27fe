"""`grader demo`: grade the bundled sample submissions of every assignment this machine can run.

C++ assignments run anywhere; CUDA ones need a GPU and nvcc, and a Python assignment the packages it names (scipy), and
are skipped (with the reason) elsewhere.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grader.cli.listing import table_width
from grader.cli.options import add_grading_options, options_from
from grader.pipeline import grade
from grader.report import terminal
from grader.samples import compose, variants
from grader.device import unavailable_reason
from grader.preflight import missing_for
from grader.results import Result
from grader.assignment import Assignment, survey_assignments
from grader.status import KernelStatus

# The samples shown per assignment: one correct alternative, one bug, one attack, where bundled.
SHOWN_KINDS = ("alternative", "mutant", "hostile")


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("demo", help="grade the bundled sample submissions")
    add_grading_options(parser)
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> int:
    """Grade each assignment's reference, template and a few samples; exit 1 where one misses what it is expected to get."""
    console = Console()
    summary = Table(title="grader demo: bundled samples")
    for column in ("assignment", "sample", "expected", "score", "statuses"):
        summary.add_column(column)
    assignments, broken = survey_assignments()
    skipped = [(b.name, f"it does not load: {b.error}") for b in broken]
    missed: list[str] = []
    for assignment in assignments:
        # What is missing: a package a CPU assignment imports (scipy), its compiler, or a GPU.
        reason = missing_for(assignment) or unavailable_reason(assignment.target, assignment.python_packages)
        if reason:
            skipped.append((assignment.name, reason))
            console.print(f"[yellow]skipping {assignment.name}[/]: {escape(reason)}", soft_wrap=True)
            continue
        for label, expected, submission, met in _samples(assignment):
            with tempfile.TemporaryDirectory(prefix="kg-demo-") as scratch:
                folder = submission(Path(scratch) / label)
                result = grade(folder, assignment, options_from(arguments, public_only=False))
            terminal.render(result, console)
            statuses = ", ".join(f"{k.name}: {k.status}" for k in result.kernels)
            summary.add_row(assignment.name, label, expected, f"{result.score:.4g}/{result.max_score:g}", statuses)
            if not met(result):
                missed.append(f"{assignment.name} {label}: expected {expected}, got "
                              f"{result.score:.4g}/{result.max_score:g} ({statuses})")
    if not console.is_terminal:  # a pipe or a file: every name whole, as `grader list` prints them
        console = Console(width=max(console.width, table_width(summary, console)))
    console.print(summary)
    for name, reason in skipped:
        console.print(f"[yellow]skipped[/] {name}: {escape(reason)}", soft_wrap=True)
    for miss in missed:
        console.print(f"[red]not as expected[/]: {escape(miss)}", soft_wrap=True)
    return 1 if missed else 0


Expectation = Callable[[Result], bool]


def _samples(assignment: Assignment) -> Iterator[tuple[str, str, Callable[[Path], Path], Expectation]]:
    """(label, what it is expected to get, how to lay it out, whether a result got it) for each sample shown."""
    yield ("reference", "full marks", lambda d: compose(assignment, None, d),
           lambda r: r.score == r.max_score)
    yield ("template", "0, every kernel compiled", lambda d: _copy_template(assignment, d),
           lambda r: not any(k.status is KernelStatus.COMPILE_ERROR for k in r.kernels))
    bundled = variants(assignment)
    for kind in SHOWN_KINDS:
        # A hostile sample that visibly costs its kernel (crash), not a slow time-out or a contained attack.
        wanted = (KernelStatus.CRASHED,) if kind == "hostile" else (KernelStatus.PASSED, KernelStatus.FAILED)
        variant = next((v for v in bundled if v.kind == kind and v.expect in wanted), None)
        if variant:
            yield (variant.name, f"{variant.kernel}: {variant.expect}", lambda d, v=variant: compose(assignment, v, d),
                   lambda r, v=variant: all(k.status is v.expect for k in r.kernels
                                            if v.whole or k.name == v.kernel))


def _copy_template(assignment: Assignment, destination: Path) -> Path:
    import shutil

    return Path(shutil.copytree(assignment.template_dir, destination))
