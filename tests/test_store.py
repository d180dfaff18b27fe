"""The results store: resume and selection queries, whole-row transactions, clear errors."""

from __future__ import annotations

import dataclasses
import os
import signal
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from grader.errors import StoreError
from grader.results import Environment, KernelResult, Result, Submission
from grader.store import Store


def result(student: str, kernel_status: str = "passed", status: str = "graded") -> Result:
    kernels = [KernelResult("k", 1.0 if kernel_status == "passed" else 0.0, 1.0, kernel_status, "", [])]  # type: ignore[arg-type]
    return Result(assignment="a", assignment_version="1", title="A", score=kernels[0].score, max_score=1.0,
                  kernels=kernels if status == "graded" else [], submission=Submission("/x", "abc"),
                  environment=Environment("0.1.0", "cpp", "", "g++", "local", [], "host", "3.11"), stages={},
                  seed={}, public_only=False, graded_at="2026-01-01T00:00:00+00:00", student=student,
                  status=status)  # type: ignore[arg-type]


def test_resume_skips_students_with_a_result(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite")
    store.save(result("b"))
    assert store.to_grade("a", ["a", "b", "c"]) == ["a", "c"]
    assert store.to_grade("other-assignment", ["a", "b"]) == ["a", "b"]


def test_regrade_only_and_failed_select_in_roster_order(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite")
    for student, status in (("a", "passed"), ("b", "timeout"), ("c", "crashed"), ("d", "failed"), ("e", "not_run")):
        store.save(result(student, status))
    store.save(result("f", status="error"))
    store.save(result("g", status="not_submitted"))
    roster = ["g", "f", "e", "d", "c", "b", "a"]
    assert store.to_grade("a", roster, regrade=True) == roster
    assert store.to_grade("a", roster, only={"c", "a", "zz"}) == ["c", "a"]
    assert store.to_grade("a", roster, failed=True) == ["f", "e", "c", "b"]
    # A later good result takes a student off the failed list: only the newest result counts.
    store.save(result("b", "passed"))
    assert store.to_grade("a", roster, failed=True) == ["f", "e", "c"]
    assert [r.student for r in store.latest("a")] == ["a", "b", "c", "d", "e", "f", "g"]
    assert len(store.history("a", "b")) == 2


def test_store_of_another_schema_version_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match=r"old.sqlite: schema version 0, this grader reads version 1"):
        Store(path)


def test_a_store_of_layout_2_is_migrated_and_its_runs_are_not_compared_for_commit_choices(tmp_path: Path) -> None:
    from grader.store import _RUNS, _SCHEMA, STORE_VERSION

    path = tmp_path / "layout2.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(_SCHEMA + _RUNS.replace("IF NOT EXISTS ", ""))
        db.execute("ALTER TABLE results ADD COLUMN run_id INTEGER REFERENCES runs (id)")
        db.executemany("INSERT INTO meta VALUES (?, ?)", [("schema_version", "1"), ("store_version", "2")])
        db.execute("INSERT INTO runs (assignment, mode, selection, students, command, host, pid, started_at)"
                   " VALUES ('a', 'new', '', '[\"ada\"]', 'grader batch', 'h', 1, '2026-01-01T00:00:00+00:00')")
        r = result("ada")
        db.execute("INSERT INTO results (student, assignment, spec_version, commit_sha, status, score, max_score,"
                   " grader_version, graded_at, result_json, run_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                   ("ada", "a", "1", "abc", "graded", 1.0, 1.0, "0.1.0", r.graded_at, r.to_json(indent=None)))
    db.close()
    store = Store(path)
    assert store.run(1).pins == {} and store.run(1).done == {"ada"}
    now = {"ada": {"deadline": "2026-03-02T23:59:00-06:00"}}
    assert store.graded_under_other_pins("a", ["ada"], now) == {}  # nothing recorded then: nothing to compare
    run = store.start_run("a", "regrade", ["ada"], pins=now)
    store.save(result("ada"), run.id)
    later = {"ada": {"deadline": "2026-03-03T23:59:00-06:00"}}
    assert store.graded_under_other_pins("a", ["ada"], later) == {"ada": (now["ada"], later["ada"])}
    store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'store_version'").fetchone() == (str(STORE_VERSION),)
    db.close()


def test_a_store_of_a_newer_layout_is_refused_by_batches_and_reports_alike(tmp_path: Path) -> None:
    path = tmp_path / "newer.sqlite"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'store_version'")
    db.close()
    for read_only in (False, True):
        with pytest.raises(StoreError, match=r"newer.sqlite: store layout version 99, this grader reads up to"):
            Store(path, read_only=read_only)


def test_a_file_that_is_not_a_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite"
    path.write_bytes(b"these are my lecture notes, not a database" * 100)
    with pytest.raises(StoreError, match="notes.sqlite: not a readable results store"):
        Store(path)


def test_crash_inside_a_write_leaves_no_half_written_row(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    store = Store(path)
    store.save(result("kept"))
    store.close()
    # A process that inserts a row and dies by SIGKILL before its transaction commits.
    crash = f"""
import os, signal
from pathlib import Path
from grader.store import Store
store = Store(Path({str(path)!r}))
with store._db:
    store._db.execute("INSERT INTO results (student, assignment, spec_version, status, score, max_score,"
                      " grader_version, graded_at, result_json) VALUES ('lost', 'a', '1', 'graded', 1, 1, 'x', 'x', '{{')")
    os.kill(os.getpid(), signal.SIGKILL)
"""
    done = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    store = Store(path)
    store.check()
    assert [r.student for r in store.latest("a")] == ["kept"]


def test_result_without_a_student_is_not_stored(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite")
    with pytest.raises(ValueError):
        store.save(dataclasses.replace(result("x"), student=None))
    assert store.latest("a") == []


def test_results_stored_before_their_facts_were_fields_get_them_once_in_the_upgrade(tmp_path: Path) -> None:
    """Layout 3 to 4: a case's signal, writes out of bounds and inputs written, which old results said only in the
    message, become fields; a kernel named after a check is that check's. The upgrade writes them back once, so that
    reading a result never parses a message."""
    from grader.checks import CHECK_NAMES
    from grader.store import _RUNS, _SCHEMA, STORE_VERSION

    path = tmp_path / "layout3.sqlite"
    old = json.loads(result("ada").to_json(indent=None))
    check = CHECK_NAMES[0]
    old["kernels"] = [{**old["kernels"][0], "cases": [
        {"name": "c", "public": True, "status": "crashed", "passed": False,
         "message": "wrote out of bounds: 4 element(s) past the end of out; killed by signal SIGSEGV; "
                    "wrote into its input(s) inp, which it must only read; "}]},
        {**old["kernels"][0], "name": f"req_0/{check}", "cases": []}]
    for kernel in old["kernels"]:
        kernel.pop("check", None)
    with sqlite3.connect(path) as db:
        db.executescript(_SCHEMA + _RUNS.replace("IF NOT EXISTS ", ""))
        db.execute("ALTER TABLE results ADD COLUMN run_id INTEGER REFERENCES runs (id)")
        db.execute("ALTER TABLE runs ADD COLUMN pins TEXT NOT NULL DEFAULT '{}'")
        db.executemany("INSERT INTO meta VALUES (?, ?)", [("schema_version", "1"), ("store_version", "3")])
        db.execute("INSERT INTO results (student, assignment, spec_version, commit_sha, status, score, max_score,"
                   " grader_version, graded_at, result_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   ("ada", "a", "1", "abc", "graded", 1.0, 1.0, "0.1.0", old["graded_at"], json.dumps(old)))
    db.close()
    store = Store(path)
    (upgraded,) = store.latest("a")
    store.close()
    (case,) = upgraded.kernels[0].cases
    assert (case.signal, case.out_of_bounds, case.inputs_modified) == ("SIGSEGV", ["4 element(s) past the end of out"],
                                                                      ["inp"])
    assert [k.check for k in upgraded.kernels] == [None, check]
    with sqlite3.connect(path) as db:  # written back: the stored JSON itself has the fields now
        stored = json.loads(db.execute("SELECT result_json FROM results").fetchone()[0])
        assert stored["kernels"][0]["cases"][0]["signal"] == "SIGSEGV" and stored["kernels"][1]["check"] == check
        assert db.execute("SELECT value FROM meta WHERE key = 'store_version'").fetchone() == (str(STORE_VERSION),)
    db.close()
