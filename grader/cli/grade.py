"""`grader grade SUBMISSION --assignment NAME`: grade one repository or folder on every case."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from grader.cli.live import LiveLine
from grader.cli.options import add_grading_options, add_report_options, exposure_warning, options_from, write_reports
from grader.errors import SubmissionError
from grader.pipeline import grade
from grader.report import terminal
from grader.preflight import preflight
from grader.assignment import load_assignment


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("grade", help="grade one submission on all cases (instructors)")
    parser.add_argument("submission", type=Path, help="the submission's folder (a git checkout or a plain folder)")
    parser.add_argument("--assignment", "-a", required=True, help="assignment name (see `grader list`)")
    parser.add_argument("--secret-file", type=Path, default=None,
                        help="file holding the secret seed (default: $KERNEL_GRADER_SECRET)")
    parser.add_argument("--upload", action="store_true",
                        help="the submission is an upload (Gradescope's run_autograder): a file missing at its path "
                             "is taken from elsewhere in it by name, a missing interface header from the template")
    add_grading_options(parser)
    add_report_options(parser)
    parser.set_defaults(run=run)


def run(arguments: argparse.Namespace) -> int:
    console = Console()
    options = options_from(arguments, public_only=False)
    assignment = load_assignment(arguments.assignment)  # a spec or argument error first, then the warning
    if not arguments.submission.exists():
        raise SubmissionError(f"submission {arguments.submission}: no such folder")
    preflight(assignment)
    if options.secret is None:
        console.print("[yellow]warning:[/] no secret seed (--secret-file or $KERNEL_GRADER_SECRET): "
                      "hidden cases use the public seed, so their outputs are predictable")
    if exposed := exposure_warning(options):
        console.print(f"[yellow]warning:[/] {escape(exposed)}", soft_wrap=True)
    with LiveLine(Console(stderr=True), "grading") as live:
        result = grade(arguments.submission, assignment, options, live.on_case)
    terminal.render(result, console, arguments.verbose)
    written = []
    if arguments.json:
        result.write(arguments.json)
        written.append(("result (JSON)", arguments.json))
    written += write_reports(result, arguments)
    for what, path in written:  # every file, so that none is looked for in vain
        console.print(f"{what} written to {escape(str(path))}", highlight=False, soft_wrap=True)
    return 0
