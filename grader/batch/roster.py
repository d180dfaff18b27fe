"""The class roster: a CSV of student id, repository (URL or path), extension days, commit and submitted_at.

A bad row is a problem named by its line; the rest of the roster is still graded.
"""

from __future__ import annotations

import csv
import datetime
from dataclasses import dataclass
from pathlib import Path

from grader.errors import SubmissionError
from grader.timestamps import parse_timestamp

# Header names the roster may use for each column; without a header the columns are positional.
COLUMNS = {
    "student": ("student", "id", "student_id", "login", "username"),
    "repository": ("repository", "repo", "url", "path", "repo_url"),
    "extension_days": ("extension_days", "extension", "extra_days"),
    "commit": ("commit", "sha", "commit_sha"),
    "submitted_at": ("submitted_at", "pushed_at"),
}
POSITIONAL = ("student", "repository", "extension_days", "commit", "submitted_at")


@dataclass(frozen=True)
class Entry:
    student: str
    repository: str  # a URL, or a path (relative paths are relative to the roster's folder)
    line: int
    extension_days: float = 0.0
    commit: str | None = None  # grade exactly this commit
    submitted_at: datetime.datetime | None = None  # when it was submitted (push time), for lateness


@dataclass(frozen=True)
class Problem:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def read_roster(path: Path) -> tuple[list[Entry], list[Problem]]:
    """Entries in roster order, and the rows that could not be read (each naming its line)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as error:
        raise SubmissionError(f"roster {path}: cannot be read ({error.strerror})") from None
    rows, unreadable = _rows(text)
    if not rows:
        raise SubmissionError(f"roster {path}: no students (expected lines 'student,repository[,extension_days,commit[,submitted_at]]')")
    columns = _header(rows[0][1])
    if columns is not None:
        rows = rows[1:]
    else:
        columns = {name: i for i, name in enumerate(POSITIONAL)}
    if "student" not in columns or "repository" not in columns:
        raise SubmissionError(f"roster {path} line 1: the header must name a 'student' and a 'repository' column")
    entries: list[Entry] = []
    problems: list[Problem] = list(unreadable)
    seen: dict[str, int] = {}
    for number, row in rows:
        cells = {name: row[i].strip() if i < len(row) else "" for name, i in columns.items()}
        entry_or_problem = _entry(cells, number, path.parent)
        if isinstance(entry_or_problem, Problem):
            problems.append(entry_or_problem)
        elif entry_or_problem.student in seen:
            problems.append(Problem(number, f"student {entry_or_problem.student!r} is already on line "
                                            f"{seen[entry_or_problem.student]}; this row is ignored"))
        else:
            seen[entry_or_problem.student] = number
            entries.append(entry_or_problem)
    return entries, problems


def _rows(text: str) -> tuple[list[tuple[int, list[str]]], list[Problem]]:
    """The non-blank, non-comment rows with their line numbers, and the lines that are not CSV.

    Each line is read on its own: a roster row never spans lines, and an unterminated quote must
    cost its own row only, not swallow the rows after it.
    """
    rows, problems = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            cells = next(csv.reader([line], strict=True), [])
        except csv.Error as error:
            problems.append(Problem(number, f"unterminated quote (\") or broken CSV ({error}): {line.strip()!r}; "
                                            "this row is ignored"))
            continue
        if cells and any(cell.strip() for cell in cells) and not cells[0].lstrip().startswith("#"):
            rows.append((number, cells))
    return rows, problems


def _header(row: list[str]) -> dict[str, int] | None:
    found = {}
    for i, cell in enumerate(row):
        for name, aliases in COLUMNS.items():
            if cell.strip().lower() in aliases:
                found[name] = i
    return found or None


def _entry(cells: dict[str, str], number: int, base: Path) -> Entry | Problem:
    if not cells.get("student"):
        return Problem(number, "no student id in the first column")
    if not cells.get("repository"):
        return Problem(number, f"student {cells['student']!r} has no repository URL or path")
    extension = 0.0
    if cells.get("extension_days"):
        try:
            extension = float(cells["extension_days"])
        except ValueError:
            return Problem(number, f"extension_days {cells['extension_days']!r} is not a number of days")
        if extension < 0:
            return Problem(number, f"extension_days {extension:g} is negative")
    submitted_at = None
    if cells.get("submitted_at"):
        try:
            submitted_at = parse_timestamp(cells["submitted_at"])
        except ValueError:
            return Problem(number, f"submitted_at {cells['submitted_at']!r} is not ISO 8601")
        if submitted_at.tzinfo is None:
            return Problem(number, f"submitted_at {cells['submitted_at']!r} has no UTC offset")
    repository = cells["repository"]
    if "://" not in repository and "@" not in repository.split("/")[0] and not Path(repository).expanduser().is_absolute():
        repository = str(base / repository)
    return Entry(cells["student"], repository, number, extension, cells.get("commit") or None, submitted_at)
