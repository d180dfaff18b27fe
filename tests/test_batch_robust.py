"""A class of 300 without babysitting: a silent server costs one student its fetch time limit and
nothing more, grading starts with the first fetched repository, one batch holds a store at a time,
what killed batches left behind is cleaned, and a killed regrade is resumed by the same command."""

from __future__ import annotations

import io
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from grader.batch.deadlines import Pin
from grader.batch.fetch import FetchFailed, fetch_submission
from grader.batch.lock import BatchLock, BatchLocked, clean_clone_cache, lock_path
from grader.cli import main
from grader.dispatch import Job
from grader.dispatch.local import LocalExecutor
from grader.options import Options
from grader.samples import compose
from grader.assignment import load_assignment
from grader.store import STORE_VERSION, Store, plan_run

from test_batch import DEADLINE, at, commit, submission
from test_store import result as small_result


@pytest.fixture
def silent_server():
    """A TCP listener on loopback that accepts every connection and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1], accepted
    stop.set()
    thread.join()
    for connection in accepted:
        connection.close()
    listener.close()


def git_processes_naming(text: str) -> list[int]:
    """Processes of ours whose command line names `text` (a URL unique to the test)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes() and int(entry.name) != os.getpid():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def student_repo(root: Path, name: str) -> Path:
    flash = load_assignment("flash-attention-cpu")
    repo = root / "repos" / name
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    commit(repo, submission(flash, None, root / "scratch" / name), at(-1), "solution")
    return repo


def batch(*arguments: str) -> tuple[int, str]:
    """Run `grader batch` in this process; its exit code and everything it printed (a log file's layout)."""
    output = io.StringIO()
    import grader.cli.batch as cli_batch

    original = cli_batch.Console
    cli_batch.Console = lambda *a, **k: Console(file=output, width=100)
    try:
        code = main(["batch", *arguments])
    finally:
        cli_batch.Console = original
    return code, output.getvalue()


# ---------------------------------------------------------------- point 1: a hanging repository


def test_silent_server_is_stopped_at_the_fetch_time_limit(tmp_path: Path, silent_server) -> None:
    port, accepted = silent_server
    url = f"git://127.0.0.1:{port}/x.git"
    started = time.monotonic()
    fetched = fetch_submission("zed", url, tmp_path / "repos", Pin(cutoff=None), timeout_s=2)
    elapsed = time.monotonic() - started
    assert isinstance(fetched, FetchFailed), fetched  # no answer says nothing of the student: tried again
    assert "longer than 2 s" in fetched.reason and url in fetched.reason
    assert accepted, "git never connected to the silent server"
    # Stopped by its limit, not before it (an upper bound in seconds would measure the machine's load; a limit
    # that never acts hangs here on the server that never answers).
    assert elapsed >= 2
    time.sleep(0.2)
    assert git_processes_naming(f"127.0.0.1:{port}") == [], "the killed clone left git processes behind"
    assert not list((tmp_path / "repos").glob("*.partial*")), "the killed clone left its staging folder"


def test_hanging_repository_costs_only_its_student(tmp_path: Path, silent_server, monkeypatch, cache_dir) -> None:
    import grader.batch.progress as progress

    monkeypatch.setattr(progress, "STUCK_S", 0.5)
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.5)
    port, _ = silent_server
    url = f"git://127.0.0.1:{port}/x.git"
    roster = tmp_path / "roster.csv"
    roster.write_text(f"student,repository\nada,{student_repo(tmp_path, 'ada')}\nhung,{url}\n"
                      f"bob,{student_repo(tmp_path, 'bob')}\n")
    store = tmp_path / "grades.sqlite"
    code, output = batch(str(roster), "-a", "flash-attention-cpu", "--deadline", DEADLINE, "--store", str(store),
                         "--cache-dir", str(cache_dir), "--repos-dir", str(tmp_path / "clones"),
                         "--fetch-timeout", "3")
    assert code == 0, output
    results = {r.student: r for r in Store(store).latest("flash-attention-cpu")}
    assert results["hung"].status == "fetch_failed" and "longer than 3 s" in results["hung"].message
    assert results["ada"].status == results["bob"].status == "graded"
    assert results["ada"].score == results["bob"].score == 3
    # The plain layout names the stuck repository, never cut, and the ETA does not guess before a pace exists.
    # (On a loaded machine a local clone can be slow enough to be named first: the hung one's lines are read.)
    stuck = [line for line in output.splitlines() if "waiting" in line and "hung's" in line]
    assert stuck and f"hung's repository {url}" in stuck[0], output
    # Its first stuck line comes long before two results give a pace: the ETA is the fetch's limit left.
    assert "ETA at least 0:00:0" in stuck[0] and "a stuck fetch's time limit" in stuck[0], stuck[0]
    assert "…" not in output


def test_grading_starts_before_the_last_repository_is_fetched(tmp_path: Path, cache_dir: Path) -> None:
    flash = load_assignment("flash-attention-cpu")
    first_result = threading.Event()
    woke: list[bool] = []  # whether the second fetch ended because a result came (True), not its time-out

    def fetches():
        yield Job(0, "early", compose(flash, None, tmp_path / "early"))
        # A fetch that finishes only once the first submission is graded: a batch that waits for
        # every fetch before grading would wait here for the whole 120 s, and find no result.
        woke.append(first_result.wait(timeout=120))
        yield Job(1, "late", compose(flash, None, tmp_path / "late"))

    order = []

    def on_result(job, result):
        order.append((job.student, result.status, first_result.is_set()))
        first_result.set()

    LocalExecutor(build_jobs=2).grade(fetches(), flash, Options(cache_dir=cache_dir), on_result)
    assert [(s, st) for s, st, _ in order] == [("early", "graded"), ("late", "graded")]
    # The order of events, not seconds: the first result came while the second fetch was still waiting.
    assert woke == [True], "the second fetch waited for its time-out: grading did not start early"


# ---------------------------------------------------------------- point 3: one batch per store


HOLD = """
import sys, time
from pathlib import Path
from grader.batch.lock import BatchLock
lock = BatchLock(Path(sys.argv[1]), 'store').acquire()
print('held', flush=True)
time.sleep(120)
"""


def test_second_batch_on_a_store_is_refused_naming_the_first(tmp_path: Path, capsys) -> None:
    store = tmp_path / "grades.sqlite"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock_path(store))], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        roster = tmp_path / "roster.csv"
        roster.write_text(f"ada,{tmp_path / 'nowhere'}\n")
        code = main(["batch", str(roster), "-a", "flash-attention-cpu", "--store", str(store),
                     "--cache-dir", str(tmp_path / "cache")])
        error = " ".join(capsys.readouterr().err.split())
        assert code == 2
        assert f"pid {holder.pid} on host {socket.gethostname()}" in error and "in use by another batch" in error
        assert not store.exists(), "the refused batch wrote the store"
    finally:
        holder.kill()
        holder.wait()
    # Its holder gone (killed, never unlocked), the lock is taken over and the file names the new holder.
    with BatchLock(lock_path(store), "store") as lock:
        assert lock.taken_over is not None and lock.taken_over.pid == holder.pid
        assert json.loads(lock_path(store).read_text())["pid"] == os.getpid()
    assert not lock_path(store).exists()


def test_lock_is_refused_to_a_second_holder_in_the_same_process(tmp_path: Path) -> None:
    with BatchLock(tmp_path / "x.lock", "store x"):
        with pytest.raises(BatchLocked, match=f"pid {os.getpid()} on host"):
            BatchLock(tmp_path / "x.lock", "store x").acquire()


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_leftovers_of_dead_batches_are_cleaned(tmp_path: Path) -> None:
    repos = tmp_path / "repos"
    (repos / f"ada-0123456789.partial{dead_pid()}-140000").mkdir(parents=True)
    ours = repos / f"bob-0123456789.partial{os.getpid()}-140001"
    ours.mkdir()
    (repos / "cy-0123456789" / ".git").mkdir(parents=True)
    (repos / "cy-0123456789" / ".git" / "index.lock").write_text("")
    cleaned = clean_clone_cache(repos)
    assert len(cleaned.partial_folders) == 1
    assert cleaned.partial_folders[0].name.startswith("ada-") and not cleaned.partial_folders[0].exists()
    assert ours.exists(), "a clone in progress in this very process was removed"
    assert not (repos / "cy-0123456789" / ".git" / "index.lock").exists() and len(cleaned.index_locks) == 1


def test_stale_index_lock_no_longer_makes_a_student_an_error(tmp_path: Path, cache_dir: Path) -> None:
    roster = tmp_path / "roster.csv"
    roster.write_text(f"ada,{student_repo(tmp_path, 'ada')}\n")
    store, clones = tmp_path / "grades.sqlite", tmp_path / "clones"
    flags = ["-a", "flash-attention-cpu", "--store", str(store), "--cache-dir", str(cache_dir),
             "--repos-dir", str(clones)]
    assert batch(str(roster), *flags)[0] == 0
    (clone,) = [p for p in clones.iterdir() if p.is_dir()]
    (clone / ".git" / "index.lock").write_text("")  # what kill -9 during a checkout leaves
    (clones / f"{clone.name}.partial{dead_pid()}-1").mkdir()
    code, output = batch(str(roster), *flags, "--regrade")
    assert code == 0, output
    assert "1 half-finished clone(s), 1 stale .git/index.lock file(s)" in " ".join(output.split())
    latest = Store(store).latest("flash-attention-cpu")[0]
    assert latest.status == "graded" and latest.score == 3, latest.message


# ---------------------------------------------------------------- point 2: runs, resumed


def test_killed_regrade_is_resumed_by_the_same_command(tmp_path: Path, cache_dir: Path) -> None:
    students = ["s0", "s1", "s2"]
    roster = tmp_path / "roster.csv"
    roster.write_text("".join(f"{s},{student_repo(tmp_path, s)}\n" for s in students))
    store_file = tmp_path / "grades.sqlite"
    flags = ["-a", "flash-attention-cpu", "--store", str(store_file), "--cache-dir", str(cache_dir),
             "--repos-dir", str(tmp_path / "clones")]
    assert batch(str(roster), *flags)[0] == 0
    # A regrade that died after one student: its run is recorded, one result carries its id.
    store = Store(store_file)
    killed = plan_run(store, "flash-attention-cpu", students, regrade=True, command="grader batch --regrade")
    store.save(store.latest("flash-attention-cpu")[0], killed.run.id)  # s0, regraded
    store.close()

    code, plain = batch(str(roster), *flags)  # the plain command says the regrade is unfinished
    assert code == 0 and f"run {killed.run.id} (regrade" in plain and "is unfinished: 2 of 3 left" in plain
    code, output = batch(str(roster), *flags, "--regrade")
    assert code == 0, output
    text = " ".join(output.split())
    assert f"resuming run {killed.run.id} (regrade" in text and "1 of 3 already graded in it, 2 to go" in text
    assert "\ns0: " not in "\n" + output and "\ns1: " in "\n" + output and "\ns2: " in "\n" + output
    store = Store(store_file)
    assert [len(store.history("flash-attention-cpu", s)) for s in students] == [2, 2, 2]
    run = store.run(killed.run.id)
    assert run.finished_at is not None and run.left == []
    store.close()

    code, status = batch("--status", *flags)
    assert code == 0 and f"run {killed.run.id} (regrade)" in status and "UNFINISHED" not in status


def test_status_lists_what_each_run_left_undone(tmp_path: Path) -> None:
    store_file = tmp_path / "grades.sqlite"
    store = Store(store_file)
    run = plan_run(store, "a", ["ada", "bob", "cy", "dee"], regrade=True, command="grader batch r.csv --regrade").run
    store.save(small_result("bob"), run.id)
    store.close()
    code, output = batch("--status", "-a", "a", "--store", str(store_file))
    text = " ".join(output.split())
    assert code == 0 and "UNFINISHED: 1 of 4 graded" in text and "left undone (3): ada, cy, dee" in text
    assert "resume it with: grader batch r.csv --regrade" in text


OLD_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE results (id INTEGER PRIMARY KEY AUTOINCREMENT, student TEXT NOT NULL, assignment TEXT NOT NULL,
    spec_version TEXT NOT NULL, commit_sha TEXT, status TEXT NOT NULL, score REAL NOT NULL, max_score REAL NOT NULL,
    grader_version TEXT NOT NULL, graded_at TEXT NOT NULL, result_json TEXT NOT NULL);
CREATE INDEX results_by_student ON results (assignment, student, id);
INSERT INTO meta VALUES ('schema_version', '1');
"""


def test_a_store_of_the_old_layout_is_migrated_keeping_its_results(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
        for student in ("ada", "bob"):
            r = small_result(student)
            db.execute("INSERT INTO results (student, assignment, spec_version, commit_sha, status, score, max_score,"
                       " grader_version, graded_at, result_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (student, "a", "1", "abc", "graded", 1.0, 1.0, "0.1.0", r.graded_at, r.to_json(indent=None)))
    db.close()
    read_only = Store(path, read_only=True)  # a report reads the old layout as it is
    assert [r.student for r in read_only.latest("a")] == ["ada", "bob"] and read_only.runs("a") == []
    read_only.close()
    store = Store(path)
    assert [r.student for r in store.latest("a")] == ["ada", "bob"]
    run = store.start_run("a", "regrade", ["ada", "bob"])
    store.save(small_result("ada"), run.id)
    assert store.run(run.id).left == ["bob"]
    store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'store_version'").fetchone() == (str(STORE_VERSION),)
        assert db.execute("SELECT COUNT(*) FROM results").fetchone() == (3,)
    db.close()
