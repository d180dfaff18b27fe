"""What the commands print and write: full names in a pipe, every file listed, errors before
warnings, read-only exports that never write, rosters whose broken rows are named and counted."""

from __future__ import annotations

import datetime
import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from grader.batch.progress import LONG_RUN_S, STUCK_S, Tally, eta_seconds
from grader.cli import main
from grader.dispatch import local
from grader.runner.limits import submission_budget
from grader.batch.roster import read_roster
from grader.samples import compose
from grader.assignment import PROJECT_ROOT, load_assignment

from test_batch_robust import batch
from test_store import result as small_result

ENV = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "COLUMNS": "80"}


def grader(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", *arguments], capture_output=True, text=True, env=ENV,
                          timeout=300)


def test_list_through_a_pipe_shows_whole_names() -> None:
    listed = grader("list")
    assert listed.returncode == 0
    assert "flash-attention-cpu" in listed.stdout and "standard_attention" in listed.stdout
    assert "…" not in listed.stdout


def test_check_of_a_missing_folder_says_so() -> None:
    checked = grader("check", "/nonexistent-kg-folder")
    assert checked.returncode == 2 and "/nonexistent-kg-folder: no such folder" in checked.stderr
    assert "known assignment" not in checked.stderr


def test_missing_secret_warning_comes_after_argument_errors() -> None:
    graded = grader("grade", "/nonexistent-kg-folder", "-a", "no-such-assignment")
    assert graded.returncode == 2 and "no assignment named 'no-such-assignment'" in graded.stderr
    assert "secret" not in graded.stdout + graded.stderr
    graded = grader("grade", "/nonexistent-kg-folder", "-a", "flash-attention-cpu")
    assert graded.returncode == 2 and "no such folder" in graded.stderr and "secret" not in graded.stdout


def test_grade_lists_every_file_it_wrote(tmp_path: Path, cache_dir: Path) -> None:
    submission = compose(load_assignment("flash-attention-cpu"), None, tmp_path / "sub")
    files = {flag: tmp_path / "out" / name for flag, name in
             (("--json", "r.json"), ("--html", "r.html"), ("--markdown", "r.md"), ("--junit", "r.xml"))}
    graded = grader("grade", str(submission), "-a", "flash-attention-cpu", "--cache-dir", str(cache_dir),
                    *(part for flag, path in files.items() for part in (flag, str(path))))
    assert graded.returncode == 0, graded.stderr
    for path in files.values():
        assert path.is_file() and f"written to {path}" in " ".join(graded.stdout.split()), path


@pytest.mark.parametrize("make", ["empty", "missing"])
def test_gradebook_of_an_empty_or_missing_store_writes_nothing(tmp_path: Path, make: str, capsys) -> None:
    store = tmp_path / "empty.sqlite"
    if make == "empty":
        store.touch()
    code = main(["export", "gradebook", "--store", str(store), "-a", "flash-attention-cpu", "--out",
                 str(tmp_path / "book.csv")])
    error = " ".join(capsys.readouterr().err.split())
    assert code == 2 and ("is empty" in error if make == "empty" else "no such file" in error)
    assert (store.stat().st_size == 0) if make == "empty" else not store.exists()
    assert not (tmp_path / "book.csv").exists()


def test_unterminated_quote_costs_only_its_row_and_names_its_line(tmp_path: Path) -> None:
    roster = tmp_path / "roster.csv"
    roster.write_text('student,repository\nada,"/srv/ada\nbob,/srv/bob\ncy,/srv/cy\n')
    entries, problems = read_roster(roster)
    assert [e.student for e in entries] == ["bob", "cy"]
    assert len(problems) == 1 and problems[0].line == 2 and "unterminated quote" in problems[0].message


def test_batch_summary_counts_rejected_rows(tmp_path: Path, cache_dir: Path) -> None:
    roster = tmp_path / "roster.csv"
    roster.write_text(f'student,repository\nada,{tmp_path / "nowhere"}\nbob,"/srv/bob\ncy,\n')
    code, output = batch(str(roster), "-a", "flash-attention-cpu", "--store", str(tmp_path / "s.sqlite"),
                         "--cache-dir", str(cache_dir), "--repos-dir", str(tmp_path / "clones"))
    assert code == 0, output
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in output.splitlines()
            if line.count("│") >= 3}
    assert rows["roster rows rejected"] == "2" and rows["not_submitted"] == "1"
    assert "line 3: unterminated quote" in output and "line 4: student 'cy' has no repository" in output


def test_junit_export_reads_the_list_batch_writes(tmp_path: Path) -> None:
    graded = small_result("ada")
    missing = small_result("bob", status="not_submitted")
    listing = tmp_path / "class.json"
    listing.write_text(json.dumps([graded.to_dict(), {**missing.to_dict(), "message": "no commits"}]))
    out = tmp_path / "class.xml"
    assert main(["export", "junit", str(listing), "--out", str(out)]) == 0
    suites = ET.parse(out).getroot()
    names = [s.get("name") for s in suites.iter("testsuite")]
    assert names == ["a.ada.k", "a.bob"]
    assert suites.get("errors") == "1" and "no commits" in ET.tostring(suites, encoding="unicode")
    broken = tmp_path / "broken.json"
    broken.write_text("[{\"student\": 1}]")
    assert main(["export", "junit", str(broken), "--out", str(out)]) == 2


@pytest.mark.parametrize("cores, slots", [(1, 1), (2, 2), (3, 2), (8, 4), (64, 32)])
def test_default_run_slots_are_at_least_two_on_two_cores(monkeypatch, cores: int, slots: int) -> None:
    monkeypatch.setattr(local.os, "cpu_count", lambda: cores)
    assert local.default_run_slots() == slots
    assert local.LocalExecutor().slots(load_assignment("flash-attention-cpu")) == [None] * slots


def test_eta_waits_for_a_pace_and_then_uses_it() -> None:
    # Quick outcomes (not submitted) and the first graded result (after gold and builds) set no pace.
    assert eta_seconds(300, 40, []) is None and eta_seconds(300, 41, [24.0]) is None
    assert eta_seconds(300, 42, [24.0, 25.0]) == pytest.approx(258.0)
    assert eta_seconds(300, 300, [24.0, 25.0, 26.0]) == 0.0


def test_eta_counts_what_a_stuck_fetch_may_still_take() -> None:

    tally = Tally(Console(file=io.StringIO()))
    tally.total, tally.done, tally.fetch_limit_s = 10, 8, 300.0
    tally.graded_at = [0.0, 1.0, 2.0]  # a pace of 1 s: 2 s left, were nothing stuck
    assert tally.eta_text() == "ETA 0:00:02"
    tally.waiting = lambda: ("hung", "git://10.255.255.1/x.git", STUCK_S + 40.0)
    # The batch can't end before the stuck fetch's limit stops it: 300 - 50 s.
    assert tally.eta_text() == f"ETA {datetime.timedelta(seconds=int(300 - STUCK_S - 40))} (a stuck fetch may take that long)"
    tally.graded_at = []  # no pace yet: the bound alone, said as a bound
    assert tally.eta_text().startswith(f"ETA at least {datetime.timedelta(seconds=int(300 - STUCK_S - 40))}")
    tally.waiting = lambda: ("slow", "https://example.invalid/x.git", STUCK_S - 1)  # not stuck yet
    assert tally.eta_text() == "ETA after the first graded submissions (gold, builds)"


def test_eta_says_when_the_time_limits_of_long_runs_end() -> None:
    """The pace of the results so far can't foresee submissions that loop to their time limits: the
    line says how many run long and when their limits end at the latest."""
    tally = Tally(Console(file=io.StringIO()))
    tally.total, tally.done, tally.graded_at = 300, 285, [0.0, 1.0, 2.0]
    tally.running = lambda: [("s299-timeout", 5.0, 60.0)]  # not long yet: the plain ETA
    assert tally.eta_text() == "ETA 0:00:15"
    tally.running = lambda: [("s290-timeout", LONG_RUN_S + 10, 80.0), ("s291-timeout", LONG_RUN_S + 1, 80.0),
                             ("s292-correct", 2.0, 80.0)]
    assert tally.eta_text() == (f"ETA 0:00:15 (2 running over {LONG_RUN_S:.0f} s, e.g. s290-timeout: their time "
                                f"limits end within {datetime.timedelta(seconds=int(80 - LONG_RUN_S - 1))})")


def test_the_local_executor_says_which_submissions_are_running(tmp_path: Path, monkeypatch) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from grader.dispatch import Job
    from grader.options import Options

    flash = load_assignment("flash-attention-cpu")
    executor = local.LocalExecutor(build_jobs=2)
    seen: list[list] = []
    original = local.execute_stage

    def execute(built, assignment, options, outputs):
        seen.append(executor.running())
        return original(built, assignment, options, outputs)

    # The run slot in a thread of this process, so that what it runs can be watched.
    monkeypatch.setattr(local, "_run_pool", lambda device: ThreadPoolExecutor(max_workers=1))
    monkeypatch.setattr(local, "execute_stage", execute)
    executor.grade([Job(0, "ada", compose(flash, None, tmp_path / "ada"))], flash,
                   Options(cache_dir=tmp_path / "cache"), lambda job, result: None)
    budget = submission_budget(flash, flash.kernels)  # the runner's deadline for the run
    assert [[(student, limit) for student, _, limit in now] for now in seen] == [[("ada", budget)]]
    assert executor.running() == []


def test_a_log_says_which_runs_are_long_when_no_result_comes(monkeypatch) -> None:
    """In a log (no terminal), a tail of looping submissions would print nothing for minutes."""
    import time as clock

    import grader.batch.progress as progress

    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.05)
    monkeypatch.setattr(progress, "LONG_RUN_S", 0.2)
    output = io.StringIO()
    tally = Tally(Console(file=output))
    tally.running = lambda: [("s299-timeout", 0.5, 40.0)]

    def long_lines() -> list[str]:
        return [line for line in output.getvalue().splitlines() if "running over" in line]

    started = clock.monotonic()
    with tally.progress(300, "grading"):
        clock.sleep(0.6)
        while not long_lines() and clock.monotonic() - started < 30:  # a loaded machine's thread ticks late
            clock.sleep(0.05)
        quiet = clock.monotonic() - started
    lines = long_lines()
    assert lines and "s299-timeout: their time limits end within 0:00:39" in lines[0], output.getvalue()
    assert len(lines) <= quiet / 0.2 + 1  # once per quiet LONG_RUN_S, not every tick (every 0.05 s)


@pytest.mark.parametrize("euid, sandbox, secret, warned", [
    (1000, "process", "s3cr3t", "can read the secret file and the gold outputs in "),
    (1000, "process", None, "can read the gold outputs in "),
    (0, "process", "s3cr3t", None),  # as root: a uid of its own per harness, which opens neither
    (1000, "local", "s3cr3t", None),
])
def test_process_as_another_user_than_root_says_what_student_code_can_read(
        euid: int, sandbox: str, secret: str | None, warned: str | None, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.cli.options import exposure_warning
    from grader.options import Options

    monkeypatch.setattr(os, "geteuid", lambda: euid)
    words = exposure_warning(Options(cache_dir=tmp_path / "cache", sandbox=sandbox, secret=secret))
    if warned is None:
        assert words is None
    else:
        assert words is not None and warned in words and str(tmp_path / "cache") in words
        assert "hidden cases are not secret" in words and "--sandbox local or docker" in words
