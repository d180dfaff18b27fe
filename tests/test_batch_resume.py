"""A batch killed with SIGKILL mid-way loses nothing, and running it again finishes the class
without grading again what was already graded."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path


from grader.assignment import load_assignment
from grader.store import Store

from test_batch import DEADLINE, commit, at, submission

STUDENTS = 8


def stored_rows(store: Path) -> int:
    if not store.exists():
        return 0
    try:
        with sqlite3.connect(store, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
    except sqlite3.OperationalError:  # no table yet
        return 0


def test_kill_9_mid_batch_then_resume_finishes_without_regrading(tmp_path: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    lines = ["student,repository"]
    for i in range(STUDENTS):
        repo = tmp_path / "repos" / f"s{i}"
        repo.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
        files = submission(flash, None, tmp_path / "scratch" / f"s{i}")
        # A comment of its own in every file: each student's kernels really compile.
        for source in (files / "src").glob("*.cpp"):
            source.write_text(source.read_text() + f"\n// student s{i}\n")
        commit(repo, files, at(-1), "solution")
        lines.append(f"s{i},{repo}")
    roster = tmp_path / "roster.csv"
    roster.write_text("\n".join(lines) + "\n")
    store = tmp_path / "grades.sqlite"
    command = [sys.executable, "-m", "grader", "batch", str(roster), "-a", "flash-attention-cpu", "--deadline",
               DEADLINE, "--store", str(store), "--cache-dir", str(tmp_path / "cache"), "--jobs", "1"]
    # A SIGKILL leaves the batch's temporary folders behind (nothing can remove them): under tmp_path, not /tmp.
    scratch = tmp_path / "tmp"
    scratch.mkdir(mode=0o755)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "TMPDIR": str(scratch)}

    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
    deadline = time.monotonic() + 240
    while stored_rows(store) < 2 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.poll() is None, "the batch finished before it could be killed: " + first.stdout.read().decode()
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    first.stdout.close()
    assert first.returncode == -signal.SIGKILL

    saved = Store(store)
    saved.check()  # no half-written row: SQLite's journal rolled back whatever was in flight
    before = {r.student: r for r in saved.latest("flash-attention-cpu")}
    assert 2 <= len(before) < STUDENTS, f"killed after {len(before)} of {STUDENTS}"
    assert all(r.status == "graded" and r.score == 3 for r in before.values())
    saved.close()

    second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"{STUDENTS - len(before)} to grade, {len(before)} already in" in " ".join(second.stdout.split())

    store_after = Store(store)
    after = {r.student: r for r in store_after.latest("flash-attention-cpu")}
    assert sorted(after) == sorted(f"s{i}" for i in range(STUDENTS))
    for student, result in after.items():
        assert len(store_after.history("flash-attention-cpu", student)) == 1, f"{student} was graded twice"
        assert result.status == "graded" and result.score == 3
        if student in before:
            assert result.graded_at == before[student].graded_at
    # What the first run had graded was not regraded: its lines are absent from the second run's log.
    for student in before:
        assert f"\n{student}: " not in "\n" + second.stdout
