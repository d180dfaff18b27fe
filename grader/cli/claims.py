"""`grader claims SUBMISSION -a NAME`: the figures the student's results file states, each beside what the runner
measures of the same submission, a claim far from its measurement flagged (grader.claims).

    grader claims . -a flash-attention-cpu --html claims.html        # times the claimed cases here, then compares
    grader time . -a tiled-matmul --sweep --json sweep.json          # or time once (on the GPU runner) ...
    grader claims . -a tiled-matmul --timing sweep.json --html claims.html   # ... and compare against that sweep
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grader.assignment import load_assignment
from grader.device import unavailable_reason
from grader.errors import GraderError, SubmissionError
from grader.options import Options, default_cache_dir
from grader.sandbox import SANDBOX_NAMES
from grader.status import ClaimStatus

if TYPE_CHECKING:
    from grader.assignment import Assignment
    from grader.claims import ClaimsReport
    from grader.timing.results import SubmissionTiming

STYLE = {ClaimStatus.AGREES: "green", ClaimStatus.FLAGGED: "bold red", ClaimStatus.NOT_CLAIMED: "yellow",
         ClaimStatus.NOT_MEASURED: "dim"}


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("claims", help="a study's stated figures (its results file) against the runner's "
                                                "measurement of the same code")
    parser.add_argument("submission", type=Path, help="the submission's folder (its results file is read there)")
    parser.add_argument("--assignment", "-a", required=True, help="assignment name (see `grader list`)")
    parser.add_argument("--timing", type=Path, action="append", default=[], metavar="JSON",
                        help="a sweep's JSON (`grader time --sweep --json`) to compare against instead of timing "
                             "here; repeatable (another assignment's, for a speed-up against its kernel)")
    parser.add_argument("--html", type=Path, default=None, help="write the claims page (table and figure) here")
    parser.add_argument("--json", type=Path, default=None, help="write the checks as JSON here")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="builds, inputs and gold outputs (default: $KERNEL_GRADER_CACHE or ~/.cache/kernel-grader)")
    parser.add_argument("--sandbox", default="local", choices=SANDBOX_NAMES, help="where student code runs")
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> int:
    from grader.claims import ClaimsReport, check_claims, measurements, read_claims
    from grader.timing.results import SubmissionTiming

    console = Console()
    assignment = load_assignment(arguments.assignment)
    part = assignment.claims
    if part is None:
        raise GraderError(f"{assignment.name} asks for no measured figures (its assignment.toml has no "
                          "[assignment.claims])")
    if not arguments.submission.is_dir():
        raise SubmissionError(f"submission {arguments.submission}: no such folder")
    file, why, claims, problems = read_claims(part, arguments.submission)
    timings = []
    for path in arguments.timing:  # read before any timing: a wrong path costs nothing
        try:
            timings.append(SubmissionTiming.from_dict(json.loads(path.read_text())["student"]))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise GraderError(f"--timing {path}: not the JSON of `grader time --sweep` ({error})") from None
    if not arguments.timing:
        timings.append(_measure(arguments, assignment, claims))
    checks = check_claims(part, assignment.name, claims, measurements(timings))
    report = ClaimsReport(assignment.name, str(arguments.submission), file, why, tuple(problems), tuple(checks),
                          part.off_by)
    _show(report, console)
    if arguments.json:
        arguments.json.write_text(json.dumps(report.to_dict(), indent=2))
    if arguments.html:
        from grader.report.claims import render_page

        arguments.html.parent.mkdir(parents=True, exist_ok=True)
        arguments.html.write_text(render_page(report.to_dict(), assignment.title), encoding="utf-8")
        console.print(f"claims page written to {escape(str(arguments.html))}", highlight=False, soft_wrap=True)
    return 0


def _measure(arguments: argparse.Namespace, assignment: Assignment,
             claims: dict[tuple[str, str], float | str]) -> SubmissionTiming:
    """The cases the student's claims name (and their baselines') timed here, on this submission."""
    from grader.claims import cases_to_time
    from grader.timing.run import time_submission
    from grader.timing.spec import load_timing

    part = assignment.claims
    assert part is not None
    if reason := unavailable_reason(assignment.target, assignment.python_packages):
        raise GraderError(f"cannot time {assignment.name}'s kernels on this machine: {reason}. Time them on the "
                          f"runner (`grader time --sweep --json`) and pass that file with --timing")
    cases = cases_to_time(part, claims)
    if not cases:  # nothing claimed: nothing to time (the report says what the file lacks)
        from grader.timing.results import SubmissionTiming

        return SubmissionTiming(str(arguments.submission), assignment.name, ())
    options = Options(cache_dir=arguments.cache_dir or default_cache_dir(), sandbox=arguments.sandbox,
                      kernels=tuple(cases))
    return time_submission(arguments.submission, assignment, options, load_timing(assignment), sweep=True,
                           cases=cases)


def _show(report: ClaimsReport, console: Console) -> None:
    if report.message:
        console.print(f"[yellow]{escape(report.message)}[/]", soft_wrap=True)
    for problem in report.problems:
        console.print(f"[red]left out:[/] {escape(problem)}", soft_wrap=True)
    table = Table(title=f"{report.assignment}: claims against measurement ({report.file or 'no results file'})",
                  title_justify="left")
    for column in ("figure", "case", "claimed", "measured", "verdict"):
        table.add_column(column)
    for check in report.checks:
        table.add_row(check.figure, check.case or "–", _cell(check.claimed), _cell(check.measured),
                      f"[{STYLE[check.status]}]{check.status.value.replace('_', ' ')}[/]")
    console.print(table)
    for check in report.checks:
        if check.status is not ClaimStatus.AGREES:
            console.print(f"[{STYLE[check.status]}]{check.status.value.replace('_', ' ')}:[/] {escape(check.words)}",
                          soft_wrap=True, highlight=False)
    agrees = sum(c.status is ClaimStatus.AGREES for c in report.checks)
    console.print(f"{agrees} of {len(report.checks)} claims within {report.off_by:g}x of the measurement, "
                  f"{len(report.flagged)} flagged", highlight=False)


def _cell(value: float | str | None) -> str:
    if value is None:
        return "–"
    return value if isinstance(value, str) else f"{value:.4g}"
