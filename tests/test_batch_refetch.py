"""A network outage costs no student their grade: a repository that could not be fetched is
fetch_failed with git's reason, the next run fetches it again (a bounded number of times), and a
batch that keeps results graded at commits chosen otherwise (another deadline) says so."""

from __future__ import annotations

from pathlib import Path

from grader.assignment import load_assignment
from grader.store import FETCH_ATTEMPTS, Store

from git_server import GitServer
from test_batch import DEADLINE, make_repo
from test_batch_robust import batch, student_repo
from test_store import result as small_result

ASSIGNMENT = "flash-attention-cpu"


def test_a_repository_that_could_not_be_fetched_is_graded_by_the_next_run(tmp_path: Path, cache_dir: Path) -> None:
    server = GitServer(tmp_path / "served")
    server.publish("ghost", student_repo(tmp_path, "ghost"))
    roster = tmp_path / "roster.csv"
    roster.write_text(f"student,repository\nada,{student_repo(tmp_path, 'ada')}\nghost,{server.url('ghost')}\n")
    store = tmp_path / "grades.sqlite"
    command = [str(roster), "-a", ASSIGNMENT, "--deadline", DEADLINE, "--store", str(store),
               "--cache-dir", str(cache_dir), "--repos-dir", str(tmp_path / "clones")]
    code, first = batch(*command)  # nothing listens on the server's port yet: connection refused
    assert code == 0, first
    ghost = Store(store).latest(ASSIGNMENT)[1]
    assert ghost.student == "ghost" and ghost.status == "fetch_failed", ghost.status
    assert f"127.0.0.1 port {server.port}" in ghost.message  # git's reason, kept
    assert f"ghost: fetch_failed 0/3 (-): {ghost.message.splitlines()[0]}" in first
    summary = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in first.splitlines()
               if line.count("│") == 3}
    assert summary["fetch_failed"] == "1" and summary["passed"] == "1" and summary["not_submitted"] == "0", first
    assert f"ghost attempt 1 of {FETCH_ATTEMPTS}" in first and "the same command run again tries them again" in first

    server.start()
    try:
        code, second = batch(*command)
    finally:
        server.stop()
    assert code == 0, second
    assert "2 student(s) on the roster; 1 to grade (1 again: their repository could not be fetched last time), " \
           "1 already in" in second, second
    latest = {r.student: r for r in Store(store).latest(ASSIGNMENT)}
    assert latest["ghost"].status == "graded" and latest["ghost"].score == 3, latest["ghost"].message
    assert len(Store(store).history(ASSIGNMENT, "ada")) == 1  # the graded one was not graded again
    assert "fetch_failed:" not in second


def test_fetches_are_tried_a_bounded_number_of_times_then_only_when_asked(tmp_path: Path, cache_dir: Path) -> None:
    server = GitServer(tmp_path / "served")  # never started: every fetch is refused
    roster = tmp_path / "roster.csv"
    roster.write_text(f"student,repository\nghost,{server.url('ghost')}\n")
    store = tmp_path / "grades.sqlite"
    command = [str(roster), "-a", ASSIGNMENT, "--store", str(store), "--cache-dir", str(cache_dir),
               "--repos-dir", str(tmp_path / "clones")]
    for attempt in range(1, FETCH_ATTEMPTS + 1):
        code, output = batch(*command, *(["--failed"] if attempt == 2 else []))  # --failed tries it too
        assert code == 0 and "1 to grade" in output, output
        assert len(Store(store).history(ASSIGNMENT, "ghost")) == attempt
    assert f"ghost: could not be fetched {FETCH_ATTEMPTS} times in a row" in output and "--only ghost" in output
    for plain in ([], ["--failed"]):
        code, output = batch(*command, *plain)
        assert code == 0 and "0 to grade" in output, output
    assert len(Store(store).history(ASSIGNMENT, "ghost")) == FETCH_ATTEMPTS
    code, output = batch(*command, "--only", "ghost")
    assert code == 0 and "1 to grade" in output
    last = Store(store).latest(ASSIGNMENT)[0]
    assert last.status == "fetch_failed" and f"127.0.0.1 port {server.port}" in last.message


def test_fetch_attempts_count_the_failures_in_a_row_from_the_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite")
    for _ in range(FETCH_ATTEMPTS - 1):
        store.save(small_result("ghost", status="fetch_failed"))
    store.save(small_result("gone", status="not_submitted"))
    store.save(small_result("ok"))
    roster = ["ghost", "gone", "ok"]
    assert store.to_grade("a", roster) == ["ghost"] and store.to_grade("a", roster, failed=True) == ["ghost"]
    store.save(small_result("ghost", status="fetch_failed"))
    assert store.fetch_failures("a") == {"ghost": FETCH_ATTEMPTS}
    assert store.to_grade("a", roster) == [] and store.to_grade("a", roster, failed=True) == []
    assert store.to_grade("a", roster, only={"ghost"}) == ["ghost"]
    # A graded result ends the streak; a later failure starts counting again from one.
    store.save(small_result("ghost"))
    store.save(small_result("ghost", status="fetch_failed"))
    assert store.fetch_failures("a") == {"ghost": 1} and store.to_grade("a", roster) == ["ghost"]


def test_a_changed_deadline_or_late_window_warns_only_of_kept_results_whose_commit_it_changes(
        tmp_path: Path, cache_dir: Path) -> None:
    # ada's one commit is before every deadline tried; bea pushed a second one half a day after the first deadline.
    bea, bea_shas = make_repo(tmp_path, load_assignment(ASSIGNMENT), [(None, -1), ("mutant-flash-no-rescale", 0.5)])
    roster = tmp_path / "roster.csv"
    roster.write_text(f"student,repository,extension_days\nada,{student_repo(tmp_path, 'ada')},\nbea,{bea},\n")
    store = tmp_path / "grades.sqlite"
    common = [str(roster), "-a", ASSIGNMENT, "--store", str(store), "--cache-dir", str(cache_dir),
              "--repos-dir", str(tmp_path / "clones")]
    code, output = batch(*common, "--deadline", DEADLINE)
    assert code == 0 and "would be graded at another commit" not in output, output
    code, same = batch(*common, "--deadline", DEADLINE)
    assert code == 0 and "0 to grade" in same and "another commit" not in same, same

    code, moved = batch(*common, "--deadline", "2026-03-02 23:59 America/Chicago")
    assert code == 0 and "0 to grade" in moved
    warning = [line for line in moved.splitlines() if "another commit" in line]
    assert len(warning) == 1, moved
    # Both students' deadline moved; only bea's graded commit would change.
    assert warning[0].startswith(f"warning: 1 of the 2 result(s) kept in {store} would be graded at another "
                                 "commit under this run's deadline (--deadline, extension_days)"), warning[0]
    assert f"bea's was {bea_shas[0][:7]}, now {bea_shas[1][:7]}" in warning[0]
    assert "--regrade" in warning[0] and "--only bea: those" in warning[0] and "ada" not in warning[0]

    code, window = batch(*common, "--deadline", DEADLINE, "--max-late-days", "2")
    assert "1 of the 2 result(s)" in window and "under this run's last accepted commit time (--max-late-days)" \
        in window, window
    roster.write_text(roster.read_text().replace(f"bea,{bea},", f"bea,{bea},1"))
    code, extended = batch(*common, "--deadline", DEADLINE)
    assert "1 of the 2 result(s)" in extended and "deadline (--deadline, extension_days)" in extended, extended

    code, regraded = batch(*common, "--deadline", DEADLINE, "--regrade")
    assert code == 0 and "2 to grade" in regraded and "another commit" not in regraded
    code, after = batch(*common, "--deadline", DEADLINE)
    assert "another commit" not in after, after  # graded at the commit chosen now
