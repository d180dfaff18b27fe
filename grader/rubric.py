"""The TA's scores of an assignment's rubric items ([[assignment.written.rubric]]): the sheet a TA fills, read back.

`grader rubric sheet` writes a CSV, one row per student of the store, one column per item, the scores already
imported filled in. `grader rubric import` reads a filled sheet and checks all of it before anything is kept: a
student not in the store, a row given twice, a column that is no item, an item with no column, an empty cell, a
cell that is no number, or a score below 0 or over the item's points are each an error naming its row and
column, and the sheet is refused whole. An accepted sheet is stored as one import (`Store.import_rubric`); a
later import replaces the scores it gives, and the store keeps every import, so the history stays.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from grader.assignment import Assignment
from grader.errors import GraderError

STUDENT_COLUMN = "student_id"
SHOWN_PROBLEMS = 30  # a sheet with more problems than this says how many more


class SheetError(GraderError):
    """A filled sheet that cannot be imported: every problem, by row and column."""


@dataclass(frozen=True)
class SheetProblem:
    row: int  # the sheet's line, the header being 1 (as a spreadsheet numbers it)
    column: str
    words: str

    def __str__(self) -> str:
        return f"row {self.row}" + (f", {self.column}" if self.column else "") + f": {self.words}"


def items_of(assignment: Assignment) -> tuple:
    """The assignment's rubric items; an assignment without them has no sheet."""
    if assignment.written is None or not assignment.written.rubric:
        raise GraderError(f"{assignment.spec_file}: {assignment.name} has no rubric items "
                          "([[assignment.written.rubric]]), so there is nothing for a TA to score")
    return assignment.written.rubric


def render_sheet(assignment: Assignment, students: list[str], scores: dict[str, dict[str, float]]) -> str:
    """The sheet: a header of the item names, a row per student, the scores already imported filled in."""
    items = items_of(assignment)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([STUDENT_COLUMN, *(item.name for item in items)])
    for student in students:
        given = scores.get(student, {})
        writer.writerow([student, *(_points(given[item.name]) if item.name in given else "" for item in items)])
    return out.getvalue()


def read_sheet(assignment: Assignment, path: Path, students: set[str]) -> dict[str, dict[str, float]]:
    """Each student's scores on the filled sheet at `path`, every cell checked; SheetError lists what is wrong."""
    items = {item.name: item for item in items_of(assignment)}
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's export may start with a byte-order mark
    except (OSError, UnicodeDecodeError) as error:
        raise SheetError(f"{path}: cannot read the sheet ({error})") from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not any(cell.strip() for cell in rows[0]):
        raise SheetError(f"{path}: the sheet is empty; write one with `grader rubric sheet`")
    header = [cell.strip() for cell in rows[0]]
    problems: list[SheetProblem] = []
    if header[0] != STUDENT_COLUMN:
        problems.append(SheetProblem(1, header[0], f"the first column must be {STUDENT_COLUMN}"))
    columns = header[1:]
    for name in columns:
        if name not in items:
            problems.append(SheetProblem(1, name, f"no rubric item of {assignment.name} is named so "
                                                  f"(its items: {', '.join(items)})"))
    problems += [SheetProblem(1, name, "this item has no column") for name in items if name not in columns]
    repeated = {name for name in columns if columns.count(name) > 1}
    problems += [SheetProblem(1, name, "the column is given twice") for name in sorted(repeated)]
    scores: dict[str, dict[str, float]] = {}
    seen: dict[str, int] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue  # a blank line at the end
        student = row[0].strip() if row else ""
        if not student:
            problems.append(SheetProblem(number, STUDENT_COLUMN, "no student id"))
            continue
        if student not in students:
            problems.append(SheetProblem(number, STUDENT_COLUMN, f"{student!r} has no result of {assignment.name} "
                                                                 "in the store"))
        if student in seen:
            problems.append(SheetProblem(number, STUDENT_COLUMN, f"{student!r} is also on row {seen[student]}"))
        seen.setdefault(student, number)
        if len(row) > len(header):
            problems.append(SheetProblem(number, "", f"{len(row)} cells, but the header has {len(header)}"))
        given: dict[str, float] = {}
        for index, name in enumerate(header[1:], start=1):
            if name not in items or name in repeated:
                continue
            cell = row[index].strip() if index < len(row) else ""
            problem = _cell_problem(cell, items[name].points)
            if problem:
                problems.append(SheetProblem(number, name, f"{student}: {problem}"))
            else:
                given[name] = float(cell)
        scores[student] = given
    if missing := sorted(students - set(seen)):
        problems.append(SheetProblem(len(rows) + 1, STUDENT_COLUMN,
                                     f"no row for {len(missing)} student(s) of the store: {', '.join(missing[:10])}"
                                     + (" ..." if len(missing) > 10 else "")))
    if problems:
        shown = "\n".join(f"  {p}" for p in problems[:SHOWN_PROBLEMS])
        more = f"\n  ... and {len(problems) - SHOWN_PROBLEMS} more" if len(problems) > SHOWN_PROBLEMS else ""
        raise SheetError(f"{path}: {len(problems)} problem(s); nothing was imported:\n{shown}{more}")
    return scores


def _cell_problem(cell: str, points: float) -> str:
    if not cell:
        return "the cell is empty (give 0 for no points)"
    try:
        value = float(cell)
    except ValueError:
        return f"{cell!r} is not a number"
    if not math.isfinite(value) or value < 0:
        return f"{cell} is not a score between 0 and {_points(points)}"
    if value > points:
        return f"{cell} is over the item's {_points(points)} point(s)"
    return ""


def total(scores: dict[str, float]) -> float:
    return round(sum(scores.values()), 6)


def _points(value: float) -> str:
    return f"{round(value, 4):g}"
