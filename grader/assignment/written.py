"""The [assignment.written] table into a `WrittenPart`: the study's report file (alternatives) and the rubric items
a TA scores by hand (grader.rubric), each with its points and what earns them.

    [assignment.written]
    report = ["REPORT.md", "report.pdf"]   # the first the graded commit holds is the report
    max_mib = 20                           # a larger file is flagged, not collected
    [[assignment.written.rubric]]
    name = "explanation"
    points = 4
    earns = "explains why the running maximum makes the softmax exact, in the student's own words"
"""

from __future__ import annotations

import re
from typing import Any

from grader.assignment.document import Reader
from grader.assignment.model import RubricItem, WrittenPart
from grader.errors import SpecError

WRITTEN_KEYS = ("report", "max_mib", "rubric")
ITEM_KEYS = ("name", "points", "earns")
ITEM_NAME = re.compile(r"[a-z][a-z0-9_]*")  # a column of the TA's sheet and of the gradebook


def load_written(table: Any, where: str) -> WrittenPart | None:
    """The written part, or None where the assignment asks for none."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise SpecError(f"{where}: expected a table with {', '.join(WRITTEN_KEYS)}")
    if unknown := sorted(set(table) - set(WRITTEN_KEYS)):
        raise SpecError(f"{where}: unknown key(s) {unknown}; expected {', '.join(WRITTEN_KEYS)}")
    read = Reader(table, where)
    report = read.strings("report", ())
    if any(not name or name.startswith("/") or ".." in name.split("/") for name in report):
        raise SpecError(f"{where}: key 'report': each name is a path inside the repository, found {list(report)}")
    items = table.get("rubric", [])
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise SpecError(f"{where}: [[assignment.written.rubric]] must be tables with {', '.join(ITEM_KEYS)}")
    rubric = tuple(_item(item, f"{where.replace('[assignment.written]', '')}[assignment.written] rubric[{i}]")
                   for i, item in enumerate(items))
    names = [item.name for item in rubric]
    if len(set(names)) != len(names):
        raise SpecError(f"{where}: rubric item names repeat: {names}")
    if not report and not rubric:
        raise SpecError(f"{where}: give a 'report' file, rubric items, or both")
    return WrittenPart(report=report, max_bytes=int(read.at_least("max_mib", 0.001, 20.0) * 2**20), rubric=rubric)


def _item(table: dict[str, Any], where: str) -> RubricItem:
    if unknown := sorted(set(table) - set(ITEM_KEYS)):
        raise SpecError(f"{where}: unknown key(s) {unknown}; expected {', '.join(ITEM_KEYS)}")
    read = Reader(table, where)
    name = read.get("name", str)
    if not ITEM_NAME.fullmatch(name):
        raise SpecError(f"{where}: key 'name' is a sheet's column: lower-case letters, digits and _, found {name!r}")
    points = read.get("points", float)
    if points <= 0:
        raise SpecError(f"{where}: key 'points' must be > 0, found {points}")
    return RubricItem(name, points, read.get("earns", str, ""))
