"""`grader export gradescope|gradescope-results|junit|gradebook|template`: results where other systems read them
(junit: each format of `grader.report.formats` rendered by `export`), and an assignment's starting repository whole.

An export of one result file takes it the same way in each: `RESULT` or `--result RESULT` (both
forms have always worked somewhere: `junit r.json`, `gradescope-results --result r.json`), and
writes to `--out`.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from grader.cases import read_secret
from grader.errors import GraderError
from grader.cli.report import add_result_argument, load_result, load_results, result_path, stored_results
from grader.competition.results import CompetitionResult, read_competition
from grader.report.formats import EXPORT, format_named, report_formats
from grader.assignment import load_assignment
from grader.store import Store
from grader.timing.table import SpeedupTable, read_table

if TYPE_CHECKING:
    from grader.report.gradescope import Competition, RubricScore, SpeedUp
    from grader.results import Result


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("export", help="Gradescope autograder and results.json, JUnit XML, gradebook CSV")
    kinds = parser.add_subparsers(dest="export", required=True, metavar="KIND")
    zip_ = kinds.add_parser("gradescope", help="build the Gradescope autograder zip for an assignment")
    zip_.add_argument("--assignment", "-a", required=True, help="assignment name (see `grader list`)")
    zip_.add_argument("--out", type=Path, required=True, help="folder for autograder-<assignment>.zip")
    zip_.add_argument("--secret-file", type=Path, default=None,
                      help="secret seed to put in the zip (default: $KERNEL_GRADER_SECRET; none: hidden cases "
                           "use the public seed)")
    zip_.add_argument("--sandbox", default="local",
                      help="where student code runs inside Gradescope's container (default: local; "
                           "`process` where the container allows no namespaces)")
    zip_.set_defaults(run=run_gradescope_zip)
    results = kinds.add_parser("gradescope-results", help="one result as Gradescope's results.json")
    add_result_argument(results, "a result written by `grader grade --json` (missing: grading failed, see --log)")
    results.add_argument("--out", type=Path, required=True, help="results.json to write")
    results.add_argument("--timing", type=Path, default=None,
                         help="a timing file written by `grader time --json`: its leaderboard value leads results.json's")
    results.add_argument("--competition", type=Path, default=None,
                         help="a competition file written by `grader time --competition`: its tokens/s geometric "
                              "mean leads results.json's leaderboard (none where the gate left it out: the words "
                              "say why)")
    results.add_argument("--rubric-store", type=Path, default=None, metavar="STORE",
                         help="the store `grader rubric import` filled: the student's written-part scores, one test "
                              "per rubric item, counted in the score")
    results.add_argument("--log", type=Path, default=None,
                         help="the grading log, shown (its end) when the result is missing because grading failed")
    results.add_argument("--note", action="append", default=[],
                         help="a line above the summary, for staff and students (repeatable): how it was graded")
    results.set_defaults(run=run_gradescope_results)
    for found in report_formats(EXPORT):  # junit
        one = kinds.add_parser(found.name, help=found.command_help)
        add_result_argument(one, "a result (`grade --json`) or a class's list (`batch --json`)")
        one.add_argument("--out", type=Path, required=True, help=f"the {found.what} file to write")
        one.set_defaults(run=run_format, kind=found.name)
    book = kinds.add_parser("gradebook", help="a store's latest results as a gradebook CSV")
    book.add_argument("--store", type=Path, required=True, help="the results store (SQLite file) `grader batch` fills")
    book.add_argument("--assignment", "-a", required=True, help="assignment name (see `grader list`)")
    book.add_argument("--out", type=Path, required=True, help="the CSV file to write")
    book.set_defaults(run=run_gradebook)
    template = kinds.add_parser("template", help="an assignment's starting repository, whole: the folder to hand "
                                                 "out (its bases' files included)")
    template.add_argument("--assignment", "-a", required=True, help="assignment name (see `grader list`)")
    template.add_argument("--out", type=Path, required=True, help="the folder to write (new, or empty)")
    template.set_defaults(run=run_template)


def run_gradescope_zip(arguments: argparse.Namespace) -> int:
    from grader.export import gradescope_zip

    console = Console()
    assignment = load_assignment(arguments.assignment)
    secret = read_secret(arguments.secret_file)
    if secret is None:
        console.print("[yellow]warning:[/] no secret seed (--secret-file or $KERNEL_GRADER_SECRET): hidden cases "
                      "will use the public seed, so their outputs are predictable")
    path = gradescope_zip.build_autograder(assignment, arguments.out, secret, arguments.sandbox)
    console.print(f"Gradescope autograder written to {path}")
    return 0


def run_gradescope_results(arguments: argparse.Namespace) -> int:
    from grader.report import gradescope

    path = result_path(arguments)
    if path.is_file():
        speed = speed_up(read_table(arguments.timing)) if arguments.timing else None
        entry = competition_entry(read_competition(arguments.competition)) if arguments.competition else None
        result = load_result(path)
        document = gradescope.results_json(result, tuple(arguments.note), speed, entry,
                                           _rubric(result, arguments.rubric_store))
    else:
        log = arguments.log.read_text(errors="replace") if arguments.log and arguments.log.is_file() else ""
        tail = "\n".join(log.strip().splitlines()[-30:])
        document = gradescope.failure_json("The autograder could not grade this submission.\n\n" + tail,
                                           tuple(arguments.note))
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")
    Console().print(f"results.json written to {arguments.out} (score {document['score']:g})")
    return 0


def _rubric(result: Result, store_path: Path | None) -> tuple[RubricScore, ...]:
    """The result's student's rubric scores from the store, each item with its score (None: not scored yet)."""
    from grader.report.gradescope import RubricScore

    if store_path is None:
        return ()
    assignment = load_assignment(result.assignment)
    items = assignment.written.rubric if assignment.written else ()
    if not items:
        raise GraderError(f"--rubric-store: {assignment.name} has no rubric items ([assignment.written] rubric)")
    if not store_path.is_file():
        raise GraderError(f"--rubric-store {store_path}: no such store")
    scores = rubric_scores(store_path, assignment.name).get(result.student or "", {})
    return tuple(RubricScore(item.name, item.points, item.earns, scores.get(item.name)) for item in items)


def rubric_scores(store_path: Path, assignment: str) -> dict[str, dict[str, float]]:
    """Each student's imported rubric scores in the store (read only)."""
    store = Store(store_path, read_only=True)
    try:
        return store.rubric_scores(assignment)
    finally:
        store.close()


def speed_up(table: SpeedupTable) -> SpeedUp | None:
    """The table's leaderboard value as results.json takes it (`gradescope.SpeedUp`); None where none was measured."""
    from grader.report import gradescope

    if table.leaderboard_value is None:
        return None
    return gradescope.SpeedUp(table.leaderboard, table.leaderboard_value, table.leaderboard_rows)


def competition_entry(competition: CompetitionResult) -> Competition:
    """A competition result as results.json takes it (`gradescope.Competition`)."""
    from grader.report import gradescope

    return gradescope.Competition(competition.geomean_tokens_per_s,
                                  tuple((r.name, r.tokens_per_s) for r in competition.runs), competition.words)


def run_format(arguments: argparse.Namespace) -> int:
    """One result (`grade --json`), or a class's list of them (`batch --json`) in one file."""
    found = format_named(arguments.kind)
    renderer = found.renderer()
    results = load_results(result_path(arguments))
    if isinstance(results, list):
        arguments.out.parent.mkdir(parents=True, exist_ok=True)
        arguments.out.write_text(renderer.render_class(results), encoding="utf-8")
        Console().print(f"{found.what} of {len(results)} students written to {arguments.out}", highlight=False)
        return 0
    renderer.write(results, arguments.out)
    Console().print(f"{found.what} written to {arguments.out}")
    return 0


def run_gradebook(arguments: argparse.Namespace) -> int:
    from grader.report import gradebook

    results = stored_results(arguments.store, arguments.assignment)
    assignment = load_assignment(arguments.assignment)
    rubric = assignment.written.rubric if assignment.written else ()
    scores = rubric_scores(arguments.store, assignment.name) if rubric else {}
    gradebook.write(results, arguments.out, rubric, scores)
    Console().print(f"gradebook of {len(results)} students written to {arguments.out}"
                    + (f" (rubric scores of {len(scores)} imported)" if rubric else ""), highlight=False)
    return 0


def run_template(arguments: argparse.Namespace) -> int:
    """The template as students fork it: `template/` holds only what it adds to its bases' (grader.assignment.trees)."""
    console = Console()
    assignment = load_assignment(arguments.assignment)
    out: Path = arguments.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        console.print(f"[red]error:[/] {out}: exists and is not an empty folder; name a new one")
        return 2
    shutil.copytree(assignment.template_dir, out, dirs_exist_ok=True)
    count = sum(1 for p in out.rglob("*") if p.is_file())
    console.print(f"{assignment.name}'s template ({count} files) written to {out}: `git init` it and push it as the "
                  "repository students fork")
    return 0
