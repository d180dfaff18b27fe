"""The results store: one SQLite file keeping every result with its student and commit.

Every write is one transaction, so a crash never leaves a half-written row; a store written by
another schema version is refused with a clear message rather than misread, and a store of an
older layout is migrated in place (its results kept).

A batch is a *run*: a row in `runs` naming the students it set out to grade; each result it saves
carries the run's id. A run stopped half-way (kill -9, a crash) is resumed by the next batch of
the same kind, which grades only the students the run has no result for yet. A run also records,
per student, what chose the graded commit (deadline, extension, late window, pin, roster commit),
so that a later run that keeps those results can say they were graded under another choice.

A repository that could not be fetched is a `fetch_failed` result; the next batch (and `--failed`)
fetches it again until FETCH_ATTEMPTS results in a row say so, counted from the stored history.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

from grader.errors import StoreError
from grader.results import SCHEMA_VERSION, Result
from grader.status import SubmissionStatus

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
# The store's own layout (the results' JSON has its own SCHEMA_VERSION). 1: results only; 2: runs;
# 3: each run's commit choices (runs.pins), and results that may be fetch_failed; 4: results stored before some facts
# were fields rewritten with them, once (`upgraded_result_json`); 5: the written part, students' reports as collected
# at the graded commit (`written`) and the TA's rubric sheets as imported (`rubric_imports`).
STORE_VERSION = 5
_WRITTEN = """
CREATE TABLE IF NOT EXISTS written (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    assignment TEXT NOT NULL,
    student TEXT NOT NULL,
    commit_sha TEXT,
    name TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    content BLOB NOT NULL,
    saved_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rubric_imports (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    assignment TEXT NOT NULL,
    sheet TEXT NOT NULL,
    imported_at TEXT NOT NULL,
    scores TEXT NOT NULL
);
"""
_RUNS = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    assignment TEXT NOT NULL,
    mode TEXT NOT NULL,
    selection TEXT NOT NULL,
    students TEXT NOT NULL,
    command TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT
);
"""
# Fetches of one repository that fail in a row before plain runs and `--failed` stop trying it
# (`--regrade` and `--only` always try).
FETCH_ATTEMPTS = 3
# What a batch sets out to do: `new` grades those without a result; `regrade` everyone; `only` the
# named students; `failed` those whose newest result failed (see KernelStatus.worth_regrading).
RUN_MODES = ("new", "regrade", "only", "failed")


@dataclass(frozen=True)
class Run:
    """One batch: whom it set out to grade, and whom it has graded so far."""

    id: int
    assignment: str
    mode: str
    selection: str  # `only`: the named students, comma-separated; else ""
    students: tuple[str, ...]
    command: str
    host: str
    pid: int
    started_at: str
    finished_at: str | None
    done: frozenset[str]
    # Per student, what chose the graded commit (Deadlines.choice); empty for runs stored before layout 3.
    pins: dict[str, dict[str, str | None]] = field(default_factory=dict)

    @property
    def left(self) -> list[str]:
        """The students this run has no result for yet, in its order."""
        return [s for s in self.students if s not in self.done]


# A case stored before its facts were fields said them only in its message, in scoring's and the runner's words.
_LEGACY_FACTS = {
    "signal": re.compile(r"killed by signal (SIG[A-Z0-9]+)"),
    "out_of_bounds": re.compile(r"^wrote out of bounds: "
                                r"((?:\d+ element\(s\) (?:before the start|past the end) of \w+(?:; )?)+)"),
    "inputs_modified": re.compile(r"wrote into its input\(s\) (.+?), which it must only read; "),
}


def upgraded_result_json(text: str) -> str:
    """A stored result's JSON with the fields later graders keep (the store's upgrade to layout 4): a case's facts its
    message said (signal, writes out of bounds, inputs written), and a kernel's check (a check's result by its name)."""
    from grader.checks import CHECK_NAMES  # the registry's names only: no plug-in is imported

    try:
        data = json.loads(text)
        kernels = data["kernels"]
    except (ValueError, KeyError, TypeError):
        return text  # not a result this grader can read: left as it is, and reading it says so
    for kernel in kernels:
        if "check" not in kernel:
            kernel["check"] = name if (name := kernel["name"].split("/")[-1]) in CHECK_NAMES else None
        for case in kernel.get("cases", []):
            if all(name in case for name in _LEGACY_FACTS):
                continue
            found = {name: pattern.search(case.get("message", "")) for name, pattern in _LEGACY_FACTS.items()}
            signal, out_of_bounds, inputs = found["signal"], found["out_of_bounds"], found["inputs_modified"]
            case.setdefault("signal", signal.group(1) if signal else None)
            case.setdefault("out_of_bounds", [part for part in out_of_bounds.group(1).split("; ") if part]
                            if out_of_bounds else [])
            case.setdefault("inputs_modified", inputs.group(1).split(", ") if inputs else [])
    return json.dumps(data)


@dataclass(frozen=True)
class WrittenCopy:
    """A student's report as the store keeps it: its name in the repository, the commit it was read at, its bytes."""

    name: str
    commit: str | None
    sha256: str
    content: bytes


@dataclass(frozen=True)
class RubricImport:
    """One imported rubric sheet: its number, where it was read from, when, and each student's scores on it."""

    number: int
    sheet: str
    imported_at: str
    scores: dict[str, dict[str, float]]

    @property
    def students(self) -> int:
        return len(self.scores)


class Store:
    def __init__(self, path: Path, read_only: bool = False) -> None:
        """Open (or create) a store; `read_only` never creates, migrates or writes (reports and exports)."""
        self.path = path
        self.read_only = read_only
        # Fetch threads save not-submitted results while the grading thread saves the rest: one
        # connection, used under one lock.
        self._lock = threading.RLock()
        if read_only:
            self._open_read_only()
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(path, timeout=60, check_same_thread=False)
            with self._db:
                self._db.executescript(_SCHEMA)
                row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if row is None:
                    self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                elif row[0] != str(SCHEMA_VERSION):
                    raise StoreError(f"store {path}: schema version {row[0]}, this grader reads version "
                                     f"{SCHEMA_VERSION}; use a new store file or the matching grader version")
                self._migrate()
        except sqlite3.DatabaseError as error:
            raise StoreError(f"store {path}: not a readable results store ({error})") from None

    def _open_read_only(self) -> None:
        if not self.path.is_file() or self.path.stat().st_size == 0:
            raise StoreError(f"store {self.path}: " + ("no such file" if not self.path.exists() else
                                                       "is empty (not a results store)"))
        try:
            self._db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=60,
                                       check_same_thread=False)
            tables = {name for (name,) in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "results" not in tables:
                raise StoreError(f"store {self.path}: not a results store (it has no results table)")
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() \
                if "meta" in tables else None
            if row is not None and row[0] != str(SCHEMA_VERSION):
                raise StoreError(f"store {self.path}: schema version {row[0]}, this grader reads version "
                                 f"{SCHEMA_VERSION}; use the matching grader version")
            layout = self._db.execute("SELECT value FROM meta WHERE key = 'store_version'").fetchone() \
                if "meta" in tables else None
            if layout is not None and int(layout[0]) > STORE_VERSION:
                raise StoreError(f"store {self.path}: store layout version {layout[0]}, this grader reads up to "
                                 f"{STORE_VERSION}; use the matching grader version")
            self._has_runs = "runs" in tables
            self._has_written = "written" in tables
            self._has_pins = self._has_runs and "pins" in {c[1] for c in self._db.execute("PRAGMA table_info(runs)")}
        except sqlite3.DatabaseError as error:
            raise StoreError(f"store {self.path}: not a readable results store ({error})") from None

    def _migrate(self) -> None:
        """Bring an older layout up to STORE_VERSION, keeping every result (inside the opening transaction)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'store_version'").fetchone()
        version = int(row[0]) if row else 1
        if version > STORE_VERSION:
            raise StoreError(f"store {self.path}: store layout version {version}, this grader reads up to "
                             f"{STORE_VERSION}; use the matching grader version")
        if version < 2:
            self._db.executescript(_RUNS)
            columns = {c[1] for c in self._db.execute("PRAGMA table_info(results)")}
            if "run_id" not in columns:
                self._db.execute("ALTER TABLE results ADD COLUMN run_id INTEGER REFERENCES runs (id)")
        if version < 3:
            self._db.execute("ALTER TABLE runs ADD COLUMN pins TEXT NOT NULL DEFAULT '{}'")
        if version < 4:
            for row_id, text in self._db.execute("SELECT id, result_json FROM results").fetchall():
                if (upgraded := upgraded_result_json(text)) != text:
                    self._db.execute("UPDATE results SET result_json = ? WHERE id = ?", (upgraded, row_id))
        if version < 5:
            self._db.executescript(_WRITTEN)
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('store_version', ?)", (str(STORE_VERSION),))
        self._has_runs = self._has_pins = self._has_written = True

    def save(self, result: Result, run: int | None = None) -> None:
        """Append a result, from batch run `run` if given (older results of the same student stay, as history)."""
        if result.student is None:
            raise ValueError("a stored result needs a student id")
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO results (student, assignment, spec_version, commit_sha, status, score, max_score,"
                " grader_version, graded_at, result_json, run_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (result.student, result.assignment, result.assignment_version, result.submission.commit,
                 result.status.value, result.score, result.max_score, result.environment.grader_version,
                 result.graded_at, result.to_json(indent=None), run),
            )

    # ------------------------------------------------------------------ runs

    def start_run(self, assignment: str, mode: str, students: list[str], selection: str = "",
                  command: str = "", pins: dict[str, dict[str, str | None]] | None = None) -> Run:
        """Record a new batch run that sets out to grade `students`; `pins`: what chooses each one's commit."""
        if mode not in RUN_MODES:
            raise ValueError(f"unknown run mode {mode!r}")
        now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        chosen = {s: pins[s] for s in students if s in pins} if pins else {}
        with self._lock, self._db:
            cursor = self._db.execute(
                "INSERT INTO runs (assignment, mode, selection, students, command, host, pid, started_at, pins)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (assignment, mode, selection, json.dumps(students), command, socket.gethostname(), os.getpid(), now,
                 json.dumps(chosen, sort_keys=True)))
        return self.run(cursor.lastrowid)

    def run(self, run_id: int) -> Run:
        with self._lock:
            row = self._db.execute("SELECT id, assignment, mode, selection, students, command, host, pid, started_at,"
                                   " finished_at, " + ("pins" if self._has_pins else "'{}'") + " FROM runs WHERE id = ?",
                                   (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"store {self.path}: no run {run_id}")
            done = {s for (s,) in self._db.execute("SELECT DISTINCT student FROM results WHERE run_id = ?", (run_id,))}
        return Run(row[0], row[1], row[2], row[3], tuple(json.loads(row[4])), row[5], row[6], row[7], row[8], row[9],
                   frozenset(done), json.loads(row[10]))

    def runs(self, assignment: str | None = None) -> list[Run]:
        """Every run (of one assignment), oldest first."""
        if not self._has_runs:  # an old store opened read-only: no runs recorded
            return []
        with self._lock:
            ids = [i for (i,) in self._db.execute(
                "SELECT id FROM runs" + (" WHERE assignment = ?" if assignment else "") + " ORDER BY id",
                (assignment,) if assignment else ())]
        return [self.run(i) for i in ids]

    def unfinished_run(self, assignment: str, mode: str, selection: str = "") -> Run | None:
        """The newest run of this kind that stopped before grading everyone it set out to, if any."""
        for run in reversed(self.runs(assignment)):
            if run.mode == mode and run.selection == selection and run.finished_at is None:
                return run
        return None

    def unfinished_runs(self, assignment: str) -> list[Run]:
        return [r for r in self.runs(assignment) if r.finished_at is None]

    def set_run_students(self, run_id: int, students: list[str],
                         pins: dict[str, dict[str, str | None]] | None = None) -> None:
        """A resumed run's students; `pins` (for those it grades now) replace what the run recorded for them."""
        with self._lock, self._db:
            recorded = json.loads(self._db.execute("SELECT pins FROM runs WHERE id = ?", (run_id,)).fetchone()[0])
            recorded.update(pins or {})
            self._db.execute("UPDATE runs SET students = ?, pins = ? WHERE id = ?",
                             (json.dumps(students), json.dumps(recorded, sort_keys=True), run_id))

    def latest_runs(self, assignment: str) -> dict[str, int | None]:
        """Each student's newest result's run id (None: saved outside a run)."""
        if not self._has_runs:
            return {}
        with self._lock:
            rows = self._db.execute("SELECT student, run_id FROM results WHERE id IN (SELECT MAX(id) FROM results"
                                    " WHERE assignment = ? GROUP BY student)", (assignment,)).fetchall()
        return dict(rows)

    def graded_under_other_pins(self, assignment: str, students: list[str],
                                pins: dict[str, dict[str, str | None]]) -> dict[str, tuple[dict, dict]]:
        """Of `students`, those whose newest result's run chose their commit otherwise than `pins` would now:
        student -> (then, now). A result whose run recorded no choice (an older store) is not compared."""
        runs: dict[int, Run] = {}
        differ = {}
        latest = self.latest_runs(assignment)
        for student in students:
            run_id = latest.get(student)
            if run_id is None or student not in pins:
                continue
            if run_id not in runs:
                runs[run_id] = self.run(run_id)
            then = runs[run_id].pins.get(student)
            if then is not None and then != pins[student]:
                differ[student] = (then, pins[student])
        return differ

    def history_with_runs(self, assignment: str) -> list[tuple[int | None, Result]]:
        """Every stored result of the assignment (regrades included) with its run's id, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT " + ("run_id" if self._has_runs else "NULL") + ", result_json FROM results"
                                    " WHERE assignment = ? ORDER BY id", (assignment,)).fetchall()
        return [(run, self._load(text)) for run, text in rows]

    def finish_run(self, run_id: int) -> None:
        """Mark a run finished (every student it set out to grade has a result from it, or was given up on)."""
        now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        with self._lock, self._db:
            self._db.execute("UPDATE runs SET finished_at = ? WHERE id = ?", (now, run_id))

    def latest(self, assignment: str) -> list[Result]:
        """The newest result of each student for an assignment, ordered by student id."""
        with self._lock:
            rows = self._db.execute(
                "SELECT result_json FROM results WHERE id IN (SELECT MAX(id) FROM results WHERE assignment = ?"
                " GROUP BY student) ORDER BY student", (assignment,)).fetchall()
        return [self._load(text) for (text,) in rows]

    def history(self, assignment: str, student: str) -> list[Result]:
        with self._lock:
            rows = self._db.execute("SELECT result_json FROM results WHERE assignment = ? AND student = ? ORDER BY id",
                                    (assignment, student)).fetchall()
        return [self._load(text) for (text,) in rows]

    def graded_students(self, assignment: str) -> set[str]:
        """Students with any stored result for the assignment: what a resumed batch skips."""
        with self._lock:
            rows = self._db.execute("SELECT DISTINCT student FROM results WHERE assignment = ?",
                                    (assignment,)).fetchall()
        return {student for (student,) in rows}

    def fetch_failures(self, assignment: str) -> dict[str, int]:
        """Students whose newest result is fetch_failed -> how many results in a row are (the attempts so far)."""
        with self._lock:
            rows = self._db.execute("SELECT student, status FROM results WHERE assignment = ? ORDER BY id",
                                    (assignment,)).fetchall()
        failures: dict[str, int] = {}
        for student, status in rows:
            failures[student] = (failures.get(student, 0) + 1) if SubmissionStatus(status).fetch_again else 0
        return {student: count for student, count in failures.items() if count}

    def fetch_retries(self, assignment: str) -> set[str]:
        """Students whose repository could not be fetched, fewer than FETCH_ATTEMPTS times in a row: tried again."""
        return {s for s, count in self.fetch_failures(assignment).items() if count < FETCH_ATTEMPTS}

    def failed_students(self, assignment: str) -> set[str]:
        """Students whose newest result had a kernel crash, time out or not run, that the grader could not grade,
        or whose repository could not be fetched (fewer than FETCH_ATTEMPTS times in a row)."""
        retried = self.fetch_retries(assignment)
        return {r.student for r in self.latest(assignment)
                if r.student is not None and (r.student in retried if r.status.fetch_again
                                              else (r.status.worth_regrading
                                                    or any(k.status.worth_regrading for k in r.kernels)))}

    def to_grade(self, assignment: str, roster: list[str], *, regrade: bool = False, only: set[str] | None = None,
                 failed: bool = False) -> list[str]:
        """The roster's students a batch grades now, in roster order.

        Default: those without a stored result (so a stopped batch resumes) and those whose repository
        could not be fetched (see fetch_retries). `regrade`: everyone; `only`: the named students;
        `failed`: those whose newest result failed as KernelStatus/SubmissionStatus.worth_regrading say.
        """
        if only is not None:
            return [s for s in roster if s in only]
        if regrade:
            return list(roster)
        if failed:
            chosen = self.failed_students(assignment)
            return [s for s in roster if s in chosen]
        done = self.graded_students(assignment) - self.fetch_retries(assignment)
        return [s for s in roster if s not in done]

    def check(self) -> None:
        """Raise StoreError unless SQLite finds the file intact."""
        try:
            verdict = self._db.execute("PRAGMA integrity_check").fetchone()[0]
        except sqlite3.DatabaseError as error:
            verdict = str(error)
        if verdict != "ok":
            raise StoreError(f"store {self.path}: damaged ({verdict})")

    # ------------------------------------------------------------------ the written part

    def save_written(self, assignment: str, student: str, commit: str | None, name: str, sha256: str,
                     content: bytes) -> None:
        """Keep a student's report as the graded commit holds it (once: the same bytes again add nothing)."""
        with self._lock, self._db:
            newest = self._db.execute("SELECT sha256, name FROM written WHERE assignment = ? AND student = ?"
                                      " ORDER BY id DESC LIMIT 1", (assignment, student)).fetchone()
            if newest != (sha256, name):
                self._db.execute("INSERT INTO written (assignment, student, commit_sha, name, sha256, content,"
                                 " saved_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 (assignment, student, commit, name, sha256, content, _now()))

    def written_reports(self, assignment: str) -> dict[str, WrittenCopy]:
        """Each student's newest collected report."""
        if not self._has_written:
            return {}
        with self._lock:
            rows = self._db.execute("SELECT student, name, commit_sha, sha256, content FROM written WHERE id IN"
                                    " (SELECT MAX(id) FROM written WHERE assignment = ? GROUP BY student)",
                                    (assignment,)).fetchall()
        return {student: WrittenCopy(name, commit, sha, bytes(content)) for student, name, commit, sha, content in rows}

    def import_rubric(self, assignment: str, sheet: str, scores: dict[str, dict[str, float]]) -> int:
        """Keep a checked sheet's scores (grader.rubric) as one import; its number."""
        with self._lock, self._db:
            cursor = self._db.execute("INSERT INTO rubric_imports (assignment, sheet, imported_at, scores)"
                                      " VALUES (?, ?, ?, ?)", (assignment, sheet, _now(),
                                                               json.dumps(scores, sort_keys=True)))
        return int(cursor.lastrowid)

    def rubric_imports(self, assignment: str) -> list[RubricImport]:
        """Every import of the assignment's rubric scores, oldest first: the history."""
        if not self._has_written:
            return []
        with self._lock:
            rows = self._db.execute("SELECT id, sheet, imported_at, scores FROM rubric_imports WHERE assignment = ?"
                                    " ORDER BY id", (assignment,)).fetchall()
        return [RubricImport(number, sheet, at, json.loads(scores)) for number, sheet, at, scores in rows]

    def rubric_scores(self, assignment: str) -> dict[str, dict[str, float]]:
        """Each student's rubric scores: of the newest import that gives them a row."""
        scores: dict[str, dict[str, float]] = {}
        for entry in self.rubric_imports(assignment):
            scores.update(entry.scores)
        return scores

    def close(self) -> None:
        self._db.close()

    def _load(self, text: str) -> Result:
        try:
            return Result.from_json(text)
        except (ValueError, TypeError, KeyError) as error:
            raise StoreError(f"store {self.path}: a stored result cannot be read ({error})") from None


@dataclass(frozen=True)
class Plan:
    """What a batch grades now: its run (new or resumed), the students, and what to tell the user."""

    run: Run
    students: list[str]
    resumed: bool
    notes: list[str]


def plan_run(store: Store, assignment: str, roster: list[str], *, regrade: bool = False,
             only: set[str] | None = None, failed: bool = False, fresh: bool = False, command: str = "",
             pins: dict[str, dict[str, str | None]] | None = None) -> Plan:
    """Start a run, or resume the unfinished run of the same kind (same mode, same --only list).

    A resumed run grades only the roster's students it has no result for yet; `fresh` starts a new
    run whatever was left. A plain batch also says which runs of another kind are unfinished.
    `pins`: what chooses each student's commit now, recorded with the run for those it grades.
    """
    pins = pins or {}
    mode = "only" if only else "regrade" if regrade else "failed" if failed else "new"
    selection = ",".join(sorted(only)) if only else ""
    notes = []
    unfinished = None if fresh else store.unfinished_run(assignment, mode, selection)
    if mode == "new":
        for other in store.unfinished_runs(assignment):
            if other.mode != "new" and other.left:
                notes.append(f"run {other.id} ({other.mode}{' ' + other.selection if other.selection else ''}, "
                             f"started {other.started_at}) is unfinished: {len(other.left)} of {len(other.students)} "
                             f"left; run `{other.command}` again to resume it (`grader batch --status` lists them)")
        students = store.to_grade(assignment, roster)
        if unfinished is not None:
            # A student whose fetch failed in it is done (it has a result) and is tried again: listed once.
            kept = [s for s in unfinished.students if s in unfinished.done and s not in students]
            store.set_run_students(unfinished.id, kept + students, {s: pins[s] for s in students if s in pins})
            notes.append(f"resuming run {unfinished.id} (started {unfinished.started_at}): "
                         f"{len(unfinished.done)} graded, {len(students)} to go")
            return Plan(store.run(unfinished.id), students, True, notes)
        return Plan(store.start_run(assignment, mode, students, selection, command, pins), students, False, notes)
    if unfinished is not None:
        on_roster = set(roster)
        students = [s for s in unfinished.left if s in on_roster]
        store.set_run_students(unfinished.id, list(unfinished.students), {s: pins[s] for s in students if s in pins})
        notes.append(f"resuming run {unfinished.id} ({mode}{' ' + selection if selection else ''}, started "
                     f"{unfinished.started_at}): {len(unfinished.done)} of {len(unfinished.students)} already "
                     f"graded in it, {len(students)} to go (--new-run starts over)")
        return Plan(store.run(unfinished.id), students, True, notes)
    students = store.to_grade(assignment, roster, regrade=regrade, only=only, failed=failed)
    return Plan(store.start_run(assignment, mode, students, selection, command, pins), students, False, notes)



def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")
