"""Fetching and pinning real git repositories: deadlines with time zones, clones kept up to date,
and the ways a repository can fail to be a submission."""

from __future__ import annotations

import datetime
import subprocess
from pathlib import Path

import pytest

from grader.errors import SubmissionError
from grader.batch.deadlines import Pin, parse_deadline, read_push_log
from grader.batch.fetch import FetchFailed, Fetched, NotSubmitted, fetch_submission
from grader.batch.roster import read_roster

from git_server import GitServer
from test_batch import DEADLINE_AT, at, commit

CHICAGO = datetime.timezone(datetime.timedelta(hours=-6))


def repo_with(tmp_path: Path, days: list[float], name: str = "repo") -> tuple[Path, list[str]]:
    repo = tmp_path / name
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    shas = []
    for i, day in enumerate(days):
        files = tmp_path / f"{name}-files-{i}"
        files.mkdir()
        (files / "answer.txt").write_text(f"version {i}\n")
        shas.append(commit(repo, files, at(day), f"version {i}"))
    return repo, shas


@pytest.mark.parametrize("text, expected", [
    ("2026-03-01 23:59 America/Chicago", datetime.datetime(2026, 3, 1, 23, 59, tzinfo=CHICAGO)),
    ("2026-07-01 23:59 America/Chicago",  # daylight saving time: UTC-5 in July
     datetime.datetime(2026, 7, 1, 23, 59, tzinfo=datetime.timezone(datetime.timedelta(hours=-5)))),
    ("2026-03-01T23:59:00-06:00", datetime.datetime(2026, 3, 1, 23, 59, tzinfo=CHICAGO)),
    ("2026-03-02 05:59 UTC", datetime.datetime(2026, 3, 1, 23, 59, tzinfo=CHICAGO)),
])
def test_deadline_is_time_zone_aware(text: str, expected: datetime.datetime) -> None:
    assert parse_deadline(text) == expected


@pytest.mark.parametrize("text, says", [
    ("2026-03-01 23:59", "no time zone"),
    ("2026-03-01 23:59 Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
    ("next friday", "expected 'YYYY-MM-DD HH:MM ZONE'"),
])
def test_bad_deadline_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(SubmissionError, match=says):
        parse_deadline(text)


def test_pins_newest_commit_at_or_before_the_cutoff(tmp_path: Path) -> None:
    repo, shas = repo_with(tmp_path, [-3, -1, 0, 0.01])
    fetched = fetch_submission("s", str(repo), tmp_path / "cache", Pin(cutoff=DEADLINE_AT))
    assert isinstance(fetched, Fetched)
    assert fetched.commit == shas[2]  # committed exactly at the deadline: on time
    assert (fetched.root / "answer.txt").read_text() == "version 2\n"
    assert fetched.submitted_at == DEADLINE_AT and fetched.pinned_by == "deadline"
    assert fetched.root != repo.resolve()  # graded from the cache, the student's folder is untouched


def test_commit_dated_earlier_but_made_later_is_pinned_by_its_date(tmp_path: Path) -> None:
    # The student's clock (or a rebase) gives the last commit an earlier date than its parent.
    repo, shas = repo_with(tmp_path, [-1, 2, -2])
    fetched = fetch_submission("s", str(repo), tmp_path / "cache", Pin(cutoff=DEADLINE_AT))
    assert fetched.commit == shas[0]


def test_clone_is_fetched_again_when_the_student_pushes_more(tmp_path: Path) -> None:
    repo, shas = repo_with(tmp_path, [-2])
    cache = tmp_path / "cache"
    assert fetch_submission("s", str(repo), cache, Pin(cutoff=None)).commit == shas[0]
    files = tmp_path / "more"
    files.mkdir()
    (files / "answer.txt").write_text("newer\n")
    newer = commit(repo, files, at(-1), "newer")
    fetched = fetch_submission("s", str(repo), cache, Pin(cutoff=None))
    assert fetched.commit == newer and fetched.pinned_by == "latest commit"
    assert (fetched.root / "answer.txt").read_text() == "newer\n"


def test_missing_empty_and_too_late_repositories_are_not_submitted_with_git_s_reason(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=empty, check=True)
    cache = tmp_path / "cache"
    assert fetch_submission("s", str(empty), cache, Pin(None)) == NotSubmitted(f"{empty.resolve()}: the repository has no commits")
    missing = fetch_submission("s", str(tmp_path / "nope"), cache, Pin(None))
    assert isinstance(missing, NotSubmitted) and "no such folder" in missing.reason
    url = (tmp_path / "never-created.git").as_uri()
    missing_url = fetch_submission("s", url, cache, Pin(None))
    assert isinstance(missing_url, NotSubmitted) and "does not appear to be a git repository" in missing_url.reason
    assert "Cloning into" not in missing_url.reason
    late, _ = repo_with(tmp_path, [3], "late")
    too_late = fetch_submission("s", str(late), cache, Pin(cutoff=DEADLINE_AT))
    assert isinstance(too_late, NotSubmitted) and "no commit on origin/HEAD at or before" in too_late.reason


def test_a_server_that_refuses_is_a_fetch_failure_and_one_that_says_not_found_is_not_submitted(tmp_path: Path) -> None:
    server = GitServer(tmp_path / "served")
    repo, shas = repo_with(tmp_path, [-1])
    server.publish("there", repo)
    cache = tmp_path / "cache"
    refused = fetch_submission("s", server.url("there"), cache, Pin(None))
    assert isinstance(refused, FetchFailed) and f"127.0.0.1 port {server.port}" in refused.reason, refused
    server.start()
    try:
        assert fetch_submission("s", server.url("there"), cache, Pin(None)).commit == shas[0]
        absent = fetch_submission("t", server.url("never-created"), cache, Pin(None))
        assert isinstance(absent, NotSubmitted) and "not found" in absent.reason, absent
    finally:
        server.stop()
    # The clone is in the cache now; the fetch that updates it meets the refusal again, and says so.
    again = fetch_submission("s", server.url("there"), cache, Pin(None))
    assert isinstance(again, FetchFailed) and f"127.0.0.1 port {server.port}" in again.reason, again


def test_roster_commit_and_push_log_name_commits_the_repository_must_have(tmp_path: Path) -> None:
    repo, shas = repo_with(tmp_path, [-2, 1])
    cache = tmp_path / "cache"
    chosen = fetch_submission("s", str(repo), cache, Pin(cutoff=DEADLINE_AT, commit=shas[1][:12]))
    assert chosen.commit == shas[1] and chosen.pinned_by == "roster commit" and chosen.submitted_at == at(1)
    with pytest.raises(SubmissionError, match="roster names commit 'deadbeef'"):
        fetch_submission("s", str(repo), cache, Pin(cutoff=DEADLINE_AT, commit="deadbeef"))
    log = tmp_path / "pushes.csv"
    log.write_text(f"student,commit,pushed_at\ns,{shas[0]},{at(-2).isoformat()}\ns,{shas[1]},{at(-0.5).isoformat()}\n"
                   f"t,{'0' * 40},{at(-1).isoformat()}\n")
    pushes = read_push_log(log)
    pushed = fetch_submission("s", str(repo), cache, Pin(cutoff=DEADLINE_AT, pushes=pushes["s"]))
    assert pushed.commit == shas[1] and pushed.submitted_at == at(-0.5) and pushed.pinned_by == "push log"
    with pytest.raises(SubmissionError, match="push log names commit '0000"):
        fetch_submission("t", str(repo), cache, Pin(cutoff=DEADLINE_AT, pushes=pushes["t"]))
    nothing = fetch_submission("u", str(repo), cache, Pin(cutoff=DEADLINE_AT, pushes=[]))
    assert isinstance(nothing, NotSubmitted) and "no push" in nothing.reason


def test_push_log_without_offsets_is_refused_by_line(tmp_path: Path) -> None:
    log = tmp_path / "pushes.csv"
    log.write_text("student,commit,pushed_at\ns,abc,2026-03-01T10:00:00\n")
    with pytest.raises(SubmissionError, match="line 2: pushed_at .* has no UTC offset"):
        read_push_log(log)


def test_plain_folder_is_graded_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    fetched = fetch_submission("s", str(folder), tmp_path / "cache", Pin(cutoff=DEADLINE_AT))
    assert fetched == Fetched(folder.resolve(), None, None, None, "plain folder")


def test_roster_reads_headers_positions_and_names_bad_lines(tmp_path: Path) -> None:
    roster = tmp_path / "class" / "roster.csv"
    roster.parent.mkdir()
    roster.write_text("# section A\nid,url,extension,sha\nann,repos/ann,1.5,\nben,https://git.example.edu/ben.git,,abc123\n"
                      "ann,repos/ann2,,\ncat,,,\n,repos/x,,\n")
    entries, problems = read_roster(roster)
    assert [(e.student, e.extension_days, e.commit, e.line) for e in entries] == [("ann", 1.5, None, 3), ("ben", 0, "abc123", 4)]
    assert entries[0].repository == str(roster.parent / "repos" / "ann")  # relative to the roster's folder
    assert entries[1].repository == "https://git.example.edu/ben.git"
    assert [str(p) for p in problems] == [
        "line 5: student 'ann' is already on line 3; this row is ignored",
        "line 6: student 'cat' has no repository URL or path",
        "line 7: no student id in the first column",
    ]
    positional = tmp_path / "plain.csv"
    positional.write_text("dan,/srv/dan,2\n")
    assert read_roster(positional)[0][0].extension_days == 2
