"""`grader report html|markdown RESULT.json --out FILE` (each format of `grader.report.formats` rendered by `report`)
and `grader report dashboard --store FILE ...`.

Every command that reads one result file takes it as `RESULT` or as `--result RESULT`, the same in
`report` and `export`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from grader.errors import StoreError, SubmissionError
from grader.report.formats import REPORT, format_named, report_formats
from grader.results import Result
from grader.store import Store


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("report", help="render stored results: per-submission HTML/Markdown, class dashboard")
    kinds = parser.add_subparsers(dest="report", required=True, metavar="KIND")
    for found in report_formats(REPORT):
        one = kinds.add_parser(found.name, help=found.command_help)
        add_result_argument(one, "a result written by `grader grade/check --json`, or a class's by `batch --json`")
        one.add_argument("--out", type=Path, required=True,
                         help="the file to write (a class's results: the folder to write one file a student into)")
        one.set_defaults(run=run_one, kind=found.name)
    dashboard = kinds.add_parser("dashboard", help="the class dashboard and every student's report, from a store")
    dashboard.add_argument("--store", type=Path, required=True, help="the results store (SQLite file)")
    dashboard.add_argument("--assignment", "-a", required=True, help="assignment name (see `grader list`)")
    dashboard.add_argument("--out", type=Path, required=True, help="folder to write index.html and students/ into")
    dashboard.add_argument("--competition", type=Path, action="append", default=[], metavar="JSON",
                           help="a competition file (`grader time --competition --student NAME`), or a folder of "
                                "them: the competition's leaderboard, ranked by tokens/s (repeatable)")
    dashboard.set_defaults(run=run_dashboard)


def add_result_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """The result file a command reads: `RESULT` or `--result RESULT`, whichever the user is used to."""
    parser.add_argument("result", type=Path, nargs="?", default=None, metavar="RESULT", help=f"{help} (or --result)")
    parser.add_argument("--result", type=Path, default=None, dest="result_option", metavar="RESULT",
                        help="the same as RESULT")


def result_path(arguments: argparse.Namespace) -> Path:
    """The one result file given, as RESULT or as --result."""
    given = [p for p in (arguments.result, arguments.result_option) if p is not None]
    if not given:
        raise SubmissionError("give the result file: RESULT or --result RESULT")
    if len(given) == 2 and given[0] != given[1]:
        raise SubmissionError(f"two result files given ({given[0]} and --result {given[1]}); give one")
    return given[0]


def load_result(path: Path) -> Result:
    try:
        return Result.from_json(path.read_text())
    except OSError as error:
        raise SubmissionError(f"{path}: cannot read the result ({error.strerror})") from None
    except (ValueError, TypeError, KeyError) as error:
        raise SubmissionError(f"{path}: not a result written by `grader --json` (bad or missing field: {error})") from None


def load_results(path: Path) -> Result | list[Result]:
    """A result file as `grade --json` writes it (one object) or as `batch --json` does (a list of them)."""
    try:
        data = json.loads(path.read_text())
    except OSError as error:
        raise SubmissionError(f"{path}: cannot read the result ({error.strerror})") from None
    except ValueError as error:
        raise SubmissionError(f"{path}: not JSON ({error})") from None
    if not isinstance(data, list):
        return load_result(path)
    try:
        return [Result.from_dict(item) for item in data]
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise SubmissionError(f"{path}: a list, but not of results written by `grader batch --json` "
                              f"(bad or missing field: {error})") from None


def stored_results(store_path: Path, assignment: str) -> list[Result]:
    if not store_path.is_file():
        raise StoreError(f"store {store_path}: no such file")
    store = Store(store_path, read_only=True)  # a report never writes, nor turns an empty file into a store
    try:
        results = store.latest(assignment)
    finally:
        store.close()
    if not results:
        raise StoreError(f"store {store_path}: no results for assignment '{assignment}'")
    return results


def run_one(arguments: argparse.Namespace) -> int:
    found = format_named(arguments.kind)
    results = load_results(result_path(arguments))
    renderer = found.renderer()
    if not isinstance(results, list):
        renderer.write(results, arguments.out)
        Console().print(f"{arguments.kind} report written to {arguments.out}")
        return 0
    # A class's list (`batch --json`): --out is a folder, one report a student, named by the roster's id.
    for index, result in enumerate(results):
        name = (result.student or f"result-{index + 1}").replace("/", "_")
        renderer.write(result, arguments.out / f"{name}{found.suffix}")
    Console().print(f"{len(results)} {arguments.kind} reports written to {arguments.out}/")
    return 0


def competition_results(paths: list[Path], assignment: str) -> tuple:
    """The competition files given (a folder: its *.json, by name), each of this assignment."""
    from grader.competition.results import read_competition
    from grader.errors import GraderError

    files = [f for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
    entries = tuple(read_competition(f) for f in files)
    for path, entry in zip(files, entries):
        if entry.assignment != assignment:
            raise GraderError(f"{path}: a competition of {entry.assignment}, not of {assignment}")
    return entries


def run_dashboard(arguments: argparse.Namespace) -> int:
    from grader.report import dashboard

    from grader.assignment import load_assignment
    from grader.errors import GraderError

    results = stored_results(arguments.store, arguments.assignment)
    try:  # the store alone makes the dashboard: an assignment no longer on this machine has no written part here
        asked = load_assignment(arguments.assignment).written
    except GraderError:
        asked = None
    store = Store(arguments.store, read_only=True)
    try:
        history = store.history_with_runs(arguments.assignment)  # every result: the students' history pages
        part = dashboard.WrittenPart(asked.rubric if asked else (), store.rubric_scores(arguments.assignment),
                                     {student: (copy.name, copy.content) for student, copy
                                      in store.written_reports(arguments.assignment).items()})
    finally:
        store.close()
    pages = dashboard.write(results, arguments.assignment, arguments.out, history,
                            competition_results(arguments.competition, arguments.assignment), part)
    Console().print(f"dashboard of {len(results)} students written to {arguments.out / 'index.html'} "
                    f"({len(pages)} pages)")
    return 0
