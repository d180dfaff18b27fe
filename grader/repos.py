"""Fetch: turn what the user named into a checkout on disk, and record what was graded.

A local folder (a student's own checkout, or a plain folder) is graded as it is; a folder that is
a git work tree records its commit, the commit's time and whether it had local changes. In a
batch, each student's repository (URL or path) is cloned or fetched into a cache folder and
checked out at the commit its deadline, the roster or a push log chooses.
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import zoneinfo
from dataclasses import dataclass
from pathlib import Path

from grader.errors import SubmissionError
from grader.timestamps import parse_timestamp


@dataclass(frozen=True)
class Checkout:
    root: Path
    commit: str | None = None
    commit_time: str | None = None  # ISO 8601 with the author's UTC offset
    dirty: bool | None = None


def checkout_folder(path: Path) -> Checkout:
    """A local folder as a submission; its git commit is recorded when it is a git work tree."""
    root = path.expanduser().resolve()
    if not root.exists():
        raise SubmissionError(f"submission {path}: no such folder")
    if not root.is_dir():
        raise SubmissionError(f"submission {path}: is a file; expected the repository's folder")
    import git  # GitPython; imported here so that plain folders never need git at all

    try:
        repo = git.Repo(root)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return Checkout(root)
    try:
        head = repo.head.commit
    except ValueError:  # a repository with no commits yet
        return Checkout(root, dirty=True)
    return Checkout(root, head.hexsha, head.committed_datetime.isoformat(), repo.is_dirty(untracked_files=True))


# ---------------------------------------------------------------- batches: deadlines, clones, pins

DAY = datetime.timedelta(days=1)
# Never wait for a password, and give up on a transfer that stalls: one dead server must not hold
# up the class. The low-speed abort covers http(s); the hard limit per repository (FETCH_TIMEOUT_S,
# `--fetch-timeout`) covers every protocol, git:// and a silent ssh server included.
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true",
            "GIT_SSH_COMMAND": "ssh -o BatchMode=yes -o ConnectTimeout=30 -o ServerAliveInterval=15",
            "GIT_HTTP_LOW_SPEED_LIMIT": "1000", "GIT_HTTP_LOW_SPEED_TIME": "30"}
_GIT_CONFIG = ("-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=30")
FETCH_TIMEOUT_S = 120.0


class FetchTimeout(Exception):
    """A clone or fetch that ran past its time limit (its git processes were killed)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds = seconds


class GitFailed(Exception):
    """A git command that exited non-zero; `stderr` says why."""

    def __init__(self, stderr: str) -> None:
        super().__init__(stderr)
        self.stderr = stderr


def parse_deadline(text: str) -> datetime.datetime:
    """A time-zone aware deadline: '2026-12-05 23:59 America/Chicago', '... UTC' or ISO 8601 with an offset."""
    text = text.strip()
    zone: datetime.tzinfo | None = None
    moment = text
    head, _, last = text.rpartition(" ")
    if head and any(ch.isalpha() for ch in last) and _looks_like_a_time(head):
        try:
            zone = datetime.timezone.utc if last.upper() in ("UTC", "Z") else zoneinfo.ZoneInfo(last)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise SubmissionError(f"deadline {text!r}: unknown time zone {last!r}; use an IANA name such as "
                                  "'America/Chicago', 'UTC', or an offset such as '-06:00'") from None
        moment = head
    try:
        parsed = parse_timestamp(moment.replace(" +", "+").replace(" -", "-"))
    except ValueError:
        raise SubmissionError(f"deadline {text!r}: expected 'YYYY-MM-DD HH:MM ZONE', e.g. "
                              "'2026-12-05 23:59 America/Chicago'") from None
    if zone is not None:
        if parsed.tzinfo is not None:
            raise SubmissionError(f"deadline {text!r}: gives both an offset and a time zone; give one")
        parsed = parsed.replace(tzinfo=zone)
    if parsed.tzinfo is None:
        raise SubmissionError(f"deadline {text!r}: no time zone; add one, e.g. '{text} America/Chicago' or "
                              f"'{text} UTC', so that nobody's deadline moves with the grading machine's clock")
    return parsed


def _looks_like_a_time(text: str) -> bool:
    try:
        parse_timestamp(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Push:
    """One line of a push log: when the server received a commit (times the student cannot set)."""

    commit: str
    pushed_at: datetime.datetime


def read_push_log(path: Path) -> dict[str, list[Push]]:
    """A CSV with a header `student,commit,pushed_at` (ISO 8601 with an offset), as a git server's hook writes it."""
    try:
        text = path.read_text()
    except OSError as error:
        raise SubmissionError(f"push log {path}: cannot be read ({error.strerror})") from None
    rows = csv.DictReader(text.splitlines())
    needed = {"student", "commit", "pushed_at"}
    if not rows.fieldnames or not needed <= {f.strip() for f in rows.fieldnames}:
        raise SubmissionError(f"push log {path}: line 1 must be the header 'student,commit,pushed_at', found "
                              f"{','.join(rows.fieldnames or [])!r}")
    pushes: dict[str, list[Push]] = {}
    for number, row in enumerate(rows, start=2):
        row = {k.strip(): (v or "").strip() for k, v in row.items() if k}
        try:
            moment = parse_timestamp(row["pushed_at"])
        except ValueError:
            raise SubmissionError(f"push log {path} line {number}: pushed_at {row['pushed_at']!r} is not ISO 8601") from None
        if moment.tzinfo is None:
            raise SubmissionError(f"push log {path} line {number}: pushed_at {row['pushed_at']!r} has no UTC offset")
        pushes.setdefault(row["student"], []).append(Push(row["commit"], moment))
    return pushes


@dataclass(frozen=True)
class Fetched:
    """A submission fetched and pinned: its work tree at the graded commit, and when it counts as submitted."""

    root: Path
    commit: str | None
    commit_time: datetime.datetime | None
    submitted_at: datetime.datetime | None  # what lateness is measured from (commit, push or roster time)
    pinned_by: str  # "deadline", "roster commit", "push log", "latest commit", "plain folder"


@dataclass(frozen=True)
class NotSubmitted:
    """Nothing to grade: the repository is unreachable or empty, or has no commit in time."""

    reason: str


@dataclass(frozen=True)
class Pin:
    """How to choose the graded commit of one student."""

    cutoff: datetime.datetime | None  # the last moment a commit counts (deadline + extension + accepted late days)
    commit: str | None = None  # the roster names one
    submitted_at: datetime.datetime | None = None  # the roster says when it was submitted
    pushes: list[Push] | None = None  # --pin push-log: this student's pushes


def fetch_submission(student: str, source: str, cache_dir: Path, pin: Pin,
                     timeout_s: float = FETCH_TIMEOUT_S) -> Fetched | NotSubmitted:
    """Clone or update `source` (URL or path) into the cache and check out the commit the pin chooses.

    A plain folder (not a git repository) is graded as it is. A clone or fetch that takes longer
    than `timeout_s` is killed and the student is not submitted, with the reason. Raises
    SubmissionError for the instructor's mistakes (a roster commit or a pushed commit that the
    repository lacks).
    """
    import git

    local = Path(source).expanduser()
    if _is_local(source):
        if not local.exists():
            return NotSubmitted(f"{source}: no such folder or repository")
        try:
            git.Repo(local)
        except git.InvalidGitRepositoryError:
            return Fetched(local.resolve(), None, None, None, "plain folder")
        except git.GitError as error:
            return NotSubmitted(f"{source}: {_git_message(error)}")
        source = str(local.resolve())
    folder = cache_dir / f"{_slug(student)}-{hashlib.sha256(source.encode()).hexdigest()[:10]}"
    try:
        repo = _clone_or_fetch(source, folder, timeout_s)
    except FetchTimeout as error:
        return NotSubmitted(f"{source}: fetching took longer than {error.seconds:g} s (the server did not answer "
                            "in time; --fetch-timeout sets the limit), so it was stopped")
    except (git.GitCommandError, GitFailed) as error:
        return NotSubmitted(f"{source}: {_git_message(error)}")
    ref = _default_branch(repo)
    if ref is None:
        return NotSubmitted(f"{source}: the repository has no commits")
    if pin.commit:
        try:
            chosen = repo.commit(repo.git.rev_parse("--verify", "--quiet", f"{pin.commit}^{{commit}}"))
        except (git.BadName, ValueError, git.GitCommandError):
            raise SubmissionError(f"student {student}: the roster names commit {pin.commit!r}, which {source} "
                                  "does not have") from None
        submitted_at, how = pin.submitted_at or chosen.committed_datetime, "roster commit"
    elif pin.pushes is not None:
        in_time = [p for p in pin.pushes if pin.cutoff is None or p.pushed_at <= pin.cutoff]
        if not in_time:
            first = min((p.pushed_at for p in pin.pushes), default=None)
            return NotSubmitted(f"no push at or before {_when(pin.cutoff)} in the push log"
                                + (f" (the first is at {first.isoformat()})" if first else ""))
        push = max(in_time, key=lambda p: p.pushed_at)
        try:
            chosen = repo.commit(repo.git.rev_parse("--verify", "--quiet", f"{push.commit}^{{commit}}"))
        except (git.BadName, ValueError, git.GitCommandError):
            raise SubmissionError(f"student {student}: the push log names commit {push.commit!r}, which {source} "
                                  "does not have") from None
        submitted_at, how = push.pushed_at, "push log"
    else:
        commits = list(repo.iter_commits(ref))
        in_time = [c for c in commits if pin.cutoff is None or c.committed_datetime <= pin.cutoff]
        if not in_time:
            first = min(c.committed_datetime for c in commits)
            return NotSubmitted(f"no commit on {ref} at or before {_when(pin.cutoff)} "
                                f"(the first is from {first.isoformat()})")
        chosen = max(in_time, key=lambda c: c.committed_date)
        submitted_at, how = chosen.committed_datetime, "deadline" if pin.cutoff else "latest commit"
    repo.git.checkout("--detach", "--force", chosen.hexsha)
    repo.git.clean("-xdffq")
    return Fetched(folder.resolve(), chosen.hexsha, chosen.committed_datetime, submitted_at, how)


def _is_local(source: str) -> bool:
    return "://" not in source and not re.match(r"^[\w.-]+@[\w.-]+:", source)


def _clone_or_fetch(source: str, folder: Path, timeout_s: float):
    import git

    started = time.monotonic()
    if (folder / ".git").is_dir():
        _git(["fetch", "--prune", "--force", "origin", "+refs/heads/*:refs/remotes/origin/*"], folder, timeout_s)
        try:
            _git(["remote", "set-head", "origin", "--auto"], folder, max(1.0, timeout_s - (time.monotonic() - started)))
        except GitFailed:
            pass  # still empty: _default_branch says so
        return git.Repo(folder)
    # Clone beside the final folder and rename: an interrupted clone never looks like a finished one.
    staging = folder.with_name(folder.name + f"{PARTIAL}{os.getpid()}-{threading.get_ident()}")
    shutil.rmtree(staging, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        _git(["clone", "--no-checkout", "--", source, str(staging)], folder.parent, timeout_s)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return git.Repo(folder)


PARTIAL = ".partial"  # a clone in progress: <folder>.partial<pid>-<thread id>


def _git(arguments: list[str], cwd: Path, timeout_s: float) -> str:
    """Run one network git command with the batch's settings; kill it (and its helpers) past `timeout_s`."""
    command = ["git", *_GIT_CONFIG, *arguments]
    # A session of its own: the kill reaches git-remote-http and ssh too, which hold the pipes open.
    process = subprocess.Popen(command, cwd=cwd, env={**os.environ, **_GIT_ENV}, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_session(process)
        raise FetchTimeout(timeout_s) from None
    except BaseException:
        _kill_session(process)
        raise
    if process.returncode != 0:
        raise GitFailed(stderr)
    return stdout


def _kill_session(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.communicate()


def _default_branch(repo) -> str | None:
    """The remote's default branch (origin/HEAD), else origin/main or origin/master, else any branch."""
    names = [r.name for r in repo.remotes.origin.refs] if repo.remotes else []
    for candidate in ("origin/HEAD", "origin/main", "origin/master"):
        if candidate in names:
            return candidate
    branches = [n for n in names if not n.endswith("/HEAD")]
    return branches[0] if branches else None


def _git_message(error: Exception) -> str:
    stderr = getattr(error, "stderr", "") or str(error)
    lines = [line.strip().removeprefix("stderr: ").strip("' ") for line in str(stderr).splitlines() if line.strip()]
    # "Cloning into <our staging folder>" says nothing about the student's repository.
    return "; ".join(line for line in lines if line and not line.startswith("Cloning into"))[:500] or type(error).__name__


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:60] or "student"


def _when(moment: datetime.datetime | None) -> str:
    return moment.isoformat() if moment else "now"
