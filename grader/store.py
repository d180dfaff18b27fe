"""The results store: one SQLite file keeping every result with its student and commit.

Every write is one transaction, so a crash never leaves a half-written row; a store written by
another schema version is refused with a clear message rather than misread.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from grader.errors import StoreError
from grader.results import SCHEMA_VERSION, Result

# Kernel statuses that `--failed` grades again (a flaky machine, a time limit set too tight).
FAILED_STATUSES = ("crashed", "timeout", "not_run")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    student TEXT NOT NULL,
    assignment TEXT NOT NULL,
    spec_version TEXT NOT NULL,
    commit_sha TEXT,
    status TEXT NOT NULL,
    score REAL NOT NULL,
    max_score REAL NOT NULL,
    grader_version TEXT NOT NULL,
    graded_at TEXT NOT NULL,
    result_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_by_student ON results (assignment, student, id);
"""


class Store:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(path, timeout=60)
            with self._db:
                self._db.executescript(_SCHEMA)
                row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if row is None:
                    self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                elif row[0] != str(SCHEMA_VERSION):
                    raise StoreError(f"store {path}: schema version {row[0]}, this grader reads version "
                                     f"{SCHEMA_VERSION}; use a new store file or the matching grader version")
        except sqlite3.DatabaseError as error:
            raise StoreError(f"store {path}: not a readable results store ({error})") from None

    def save(self, result: Result) -> None:
        """Append a result (older results of the same student stay, as history)."""
        if result.student is None:
            raise ValueError("a stored result needs a student id")
        with self._db:
            self._db.execute(
                "INSERT INTO results (student, assignment, spec_version, commit_sha, status, score, max_score,"
                " grader_version, graded_at, result_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (result.student, result.assignment, result.assignment_version, result.submission.commit,
                 result.status, result.score, result.max_score, result.environment.grader_version,
                 result.graded_at, result.to_json(indent=None)),
            )

    def latest(self, assignment: str) -> list[Result]:
        """The newest result of each student for an assignment, ordered by student id."""
        rows = self._db.execute(
            "SELECT result_json FROM results WHERE id IN (SELECT MAX(id) FROM results WHERE assignment = ?"
            " GROUP BY student) ORDER BY student", (assignment,)).fetchall()
        return [self._load(text) for (text,) in rows]

    def history(self, assignment: str, student: str) -> list[Result]:
        rows = self._db.execute("SELECT result_json FROM results WHERE assignment = ? AND student = ? ORDER BY id",
                                (assignment, student)).fetchall()
        return [self._load(text) for (text,) in rows]

    def graded_students(self, assignment: str) -> set[str]:
        """Students with any stored result for the assignment: what a resumed batch skips."""
        rows = self._db.execute("SELECT DISTINCT student FROM results WHERE assignment = ?", (assignment,)).fetchall()
        return {student for (student,) in rows}

    def failed_students(self, assignment: str) -> set[str]:
        """Students whose newest result had a kernel crash, time out or not run, or that the grader could not grade."""
        return {r.student for r in self.latest(assignment)
                if r.student is not None and (r.status == "error" or any(k.status in FAILED_STATUSES for k in r.kernels))}

    def to_grade(self, assignment: str, roster: list[str], *, regrade: bool = False, only: set[str] | None = None,
                 failed: bool = False) -> list[str]:
        """The roster's students a batch grades now, in roster order.

        Default: those without a stored result (so a stopped batch resumes). `regrade`: everyone;
        `only`: the named students; `failed`: those whose newest result failed as FAILED_STATUSES says.
        """
        if only is not None:
            return [s for s in roster if s in only]
        if regrade:
            return list(roster)
        if failed:
            chosen = self.failed_students(assignment)
            return [s for s in roster if s in chosen]
        done = self.graded_students(assignment)
        return [s for s in roster if s not in done]

    def check(self) -> None:
        """Raise StoreError unless SQLite finds the file intact."""
        try:
            verdict = self._db.execute("PRAGMA integrity_check").fetchone()[0]
        except sqlite3.DatabaseError as error:
            verdict = str(error)
        if verdict != "ok":
            raise StoreError(f"store {self.path}: damaged ({verdict})")

    def close(self) -> None:
        self._db.close()

    def _load(self, text: str) -> Result:
        try:
            return Result.from_json(text)
        except (ValueError, TypeError, KeyError) as error:
            raise StoreError(f"store {self.path}: a stored result cannot be read ({error})") from None
