"""`grader rubric sheet|import|show`: the TA's scores of an assignment's written part ([[assignment.written.rubric]]).

    grader rubric sheet  --store grades.sqlite -a flash-attention-cpu --out rubric.csv   # one row per student
    grader rubric import --store grades.sqlite -a flash-attention-cpu rubric.csv         # checked whole, then kept
    grader rubric show   --store grades.sqlite -a flash-attention-cpu                    # every import, newest last

The imported scores join `grader export gradebook` (a column per item, in the total) and the dashboard
(`grader report dashboard`). A sheet with any problem is refused whole (grader.rubric); a corrected one imported
again replaces what it gives, and `show` lists every import.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from grader.assignment import load_assignment
from grader.cli.report import stored_results
from grader.rubric import items_of, read_sheet, render_sheet
from grader.store import Store


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("rubric", help="TA scores of the written part: write the sheet, import it filled")
    kinds = parser.add_subparsers(dest="rubric", required=True, metavar="KIND")
    sheet = kinds.add_parser("sheet", help="write the sheet a TA fills: students x rubric items (CSV)")
    imported = kinds.add_parser("import", help="import a filled sheet: every cell checked, refused whole on a problem")
    show = kinds.add_parser("show", help="the imports kept in the store, oldest first")
    for one in (sheet, imported, show):
        one.add_argument("--store", type=Path, required=True, help="the results store (SQLite file) `grader batch` fills")
        one.add_argument("--assignment", "-a", required=True, help="assignment name (see `grader list`)")
    sheet.add_argument("--out", type=Path, required=True, help="the CSV file to write")
    sheet.set_defaults(run=run_sheet)
    imported.add_argument("sheet", type=Path, help="the filled sheet (CSV, as `grader rubric sheet` wrote it)")
    imported.set_defaults(run=run_import)
    show.set_defaults(run=run_show)


def run_sheet(arguments: argparse.Namespace) -> int:
    assignment = load_assignment(arguments.assignment)
    items = items_of(assignment)
    students = [r.student for r in stored_results(arguments.store, assignment.name) if r.student]
    store = Store(arguments.store, read_only=True)
    try:
        scores = store.rubric_scores(assignment.name)
    finally:
        store.close()
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(render_sheet(assignment, students, scores), encoding="utf-8")
    Console().print(f"rubric sheet of {len(students)} students x {len(items)} items written to {arguments.out} "
                    + ("(the scores imported so far filled in)" if scores else "(empty: fill each cell, 0 for none)"),
                    highlight=False)
    return 0


def run_import(arguments: argparse.Namespace) -> int:
    assignment = load_assignment(arguments.assignment)
    students = {r.student for r in stored_results(arguments.store, assignment.name) if r.student}
    scores = read_sheet(assignment, arguments.sheet, students)
    store = Store(arguments.store)
    try:
        replaced = set(store.rubric_scores(assignment.name))
        number = store.import_rubric(assignment.name, str(arguments.sheet), scores)
    finally:
        store.close()
    again = len(replaced & set(scores))
    Console().print(f"rubric import {number}: {len(scores)} students' scores of {assignment.name} kept"
                    + (f" ({again} replace an earlier import's; `grader rubric show` lists every import)"
                       if again else ""), highlight=False)
    return 0


def run_show(arguments: argparse.Namespace) -> int:
    store = Store(arguments.store, read_only=True)
    try:
        imports = store.rubric_imports(arguments.assignment)
    finally:
        store.close()
    console = Console()
    if not imports:
        console.print(f"no rubric scores of {arguments.assignment} in {arguments.store}", highlight=False)
    for entry in imports:
        console.print(f"import {entry.number}  {entry.imported_at}  {entry.sheet}  {entry.students} students",
                      highlight=False)
    return 0
