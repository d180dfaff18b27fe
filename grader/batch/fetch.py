"""Fetch: clone or update each student's repository into the clone cache and check out the commit
its deadline, the roster or a push log chooses; for a class, in parallel, each repository under a
time limit, handing each fetched submission on the moment it is ready so grading starts with the first.

A repository that does not exist, is empty or has no commit in time is saved as not submitted
right away; one that could not be fetched (no network, a refused connection, no answer within
its time limit, no access) as fetch_failed, which the next run tries again; the rest of the class
goes on.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from grader.batch.deadlines import Deadlines, Pin
from grader.batch.roster import Entry
from grader.checkout import Checkout
from grader.dispatch import Job, OnResult
from grader.errors import GraderError, SubmissionError
from grader.options import Options
from grader.pipeline import not_graded
from grader.results import Submission
from grader.assignment import Assignment
from grader.status import SubmissionStatus

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
    """A git command that exited non-zero; `stderr` says why, `returncode` how (negative: killed by a signal)."""

    def __init__(self, stderr: str, returncode: int = 128) -> None:
        super().__init__(stderr)
        self.stderr = stderr
        self.returncode = returncode


# git's own words (exit status 128, "fatal") for a repository that does not exist, from git itself
# (local paths, http 404) and from the hosting services (GitHub, GitLab). Anything else git could
# not fetch says nothing of the student: "and the repository exists" in ssh's advice is not a match.
_ABSENT = re.compile(r"does not appear to be a git repository|repository '[^']*' (does not exist|not found)"
                     r"|\bRepository not found\b|project you were looking for could not be found"
                     r"|returned error: 404", re.IGNORECASE)


@dataclass(frozen=True)
class Fetched:
    """A submission fetched and pinned: its work tree at the graded commit, and when it counts as submitted."""

    root: Path
    commit: str | None
    commit_time: datetime.datetime | None
    submitted_at: datetime.datetime | None  # what lateness is measured from (commit, push or roster time)
    pinned_by: str  # "deadline", "roster commit", "push log", "latest commit", "plain folder"
    # The newest commit (or push) after the cutoff, left ungraded: (commit, its time), said in the student's report.
    later: tuple[str, datetime.datetime] | None = None

    @property
    def checkout(self) -> Checkout:
        # Checked out with --force and cleaned: a pinned commit's work tree has no local changes.
        return Checkout(self.root, self.commit, self.commit_time.isoformat() if self.commit_time else None,
                        dirty=False if self.commit else None)


@dataclass(frozen=True)
class NotSubmitted:
    """Nothing to grade: the repository or commit does not exist, the repository is empty, or has no commit in time."""

    reason: str


@dataclass(frozen=True)
class FetchFailed:
    """The repository could not be fetched (no network, no answer in time, no access): nothing is known of it yet."""

    reason: str


def fetch_failure(source: str, error: Exception) -> NotSubmitted | FetchFailed:
    """What a failed clone or fetch means: the repository is not there (git says so), or it could not be reached."""
    message = f"{source}: {_git_message(error)}"
    stderr = str(getattr(error, "stderr", "") or "")
    returncode = getattr(error, "returncode", getattr(error, "status", None))
    if returncode == 128 and _ABSENT.search(stderr):
        return NotSubmitted(message)
    return FetchFailed(message)


def fetch_submission(student: str, source: str, cache_dir: Path, pin: Pin,
                     timeout_s: float = FETCH_TIMEOUT_S) -> Fetched | NotSubmitted | FetchFailed:
    """Clone or update `source` (URL or path) into the cache and check out the commit the pin chooses.

    A plain folder (not a git repository) is graded as it is. A clone or fetch that takes longer
    than `timeout_s` is killed: FetchFailed, with the reason, as for any failure but a repository
    git says does not exist (NotSubmitted). Raises
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
        except (git.GitError, OSError) as error:  # there, but unreadable: nothing says it is not a submission
            return FetchFailed(f"{source}: {_git_message(error)}")
        source = str(local.resolve())
    folder = _clone_folder(cache_dir, student, source)
    try:
        repo = _clone_or_fetch(source, folder, timeout_s)
    except FetchTimeout as error:
        return FetchFailed(f"{source}: fetching took longer than {error.seconds:g} s (the server did not answer "
                           "in time; --fetch-timeout sets the limit), so it was stopped")
    except (git.GitCommandError, GitFailed) as error:
        return fetch_failure(source, error)
    ref = _default_branch(repo)
    if ref is None:
        return NotSubmitted(f"{source}: the repository has no commits")
    choice = choose_commit(repo, ref, pin, student, source)
    if isinstance(choice, NotSubmitted):
        return choice
    chosen, submitted_at, how, later = choice
    repo.git.checkout("--detach", "--force", chosen.hexsha)
    repo.git.clean("-xdffq")
    return Fetched(folder.resolve(), chosen.hexsha, chosen.committed_datetime, submitted_at, how, later)


def choose_commit(repo, ref: str, pin: Pin, student: str, source: str):
    """The commit `pin` chooses on `ref` of a clone, with when it counts as submitted, how it was chosen and the
    newest commit (or push) after the cutoff; NotSubmitted where none is in time. Reads the clone, fetches nothing."""
    import git

    if pin.commit:
        try:
            chosen = repo.commit(repo.git.rev_parse("--verify", "--quiet", f"{pin.commit}^{{commit}}"))
        except (git.BadName, ValueError, git.GitCommandError):
            raise SubmissionError(f"student {student}: the roster names commit {pin.commit!r}, which {source} "
                                  "does not have") from None
        submitted_at, how = pin.submitted_at or chosen.committed_datetime, "roster commit"
        later = None  # the roster chose the commit
    elif pin.pushes is not None:
        in_time = [p for p in pin.pushes if pin.cutoff is None or p.pushed_at <= pin.cutoff]
        if not in_time:
            first = min((p.pushed_at for p in pin.pushes), default=None)
            return NotSubmitted(f"no push at or before {_when(pin.cutoff)} in the push log"
                                + (f" (the first is at {first.isoformat()})" if first else ""))
        push = max(in_time, key=lambda p: p.pushed_at)
        after = [p for p in pin.pushes if p.pushed_at > pin.cutoff] if pin.cutoff else []
        newest = max(after, key=lambda p: p.pushed_at, default=None)
        later = (newest.commit, newest.pushed_at) if newest else None
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
        newest = max((c for c in commits if pin.cutoff and c.committed_datetime > pin.cutoff),
                     key=lambda c: c.committed_date, default=None)
        later = (newest.hexsha, newest.committed_datetime) if newest else None
    return chosen, submitted_at, how, later


def commit_chosen_now(student: str, source: str, cache_dir: Path, pin: Pin) -> str | None:
    """The commit `pin` would choose in the student's clone as it is (no fetch), or None where that is unknown
    (no clone yet, a plain folder, nothing in time)."""
    import git

    local = Path(source).expanduser()
    if _is_local(source):
        source = str(local.resolve())
    folder = _clone_folder(cache_dir, student, source)
    try:
        repo = git.Repo(folder)
        ref = _default_branch(repo)
        choice = choose_commit(repo, ref, pin, student, source) if ref else None
    except (git.GitError, OSError, ValueError, SubmissionError):
        return None
    return None if choice is None or isinstance(choice, NotSubmitted) else choice[0].hexsha


def _clone_folder(cache_dir: Path, student: str, source: str) -> Path:
    return cache_dir / f"{_slug(student)}-{hashlib.sha256(source.encode()).hexdigest()[:10]}"


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
        raise GitFailed(stderr, process.returncode)
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


class FetchStream:
    """Iterate to get each fetched student's Job as soon as its fetch finishes (in finishing order)."""

    def __init__(self, entries: list[Entry], assignment: Assignment, options: Options, deadlines: Deadlines,
                 repos_dir: Path, *, jobs: int = 8, timeout_s: float = FETCH_TIMEOUT_S,
                 save: OnResult | None = None) -> None:
        self.entries = entries
        self.assignment = assignment
        self.options = options
        self.deadlines = deadlines
        self.repos_dir = repos_dir
        self.jobs = max(1, jobs)
        self.timeout_s = timeout_s
        self.save = save  # for the ungradable; called from the iterating thread
        self.position: dict[str, int] = {e.student: i for i, e in enumerate(entries)}
        self._in_flight: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def waiting(self) -> tuple[str, str, float] | None:
        """(student, repository, seconds) of the fetch that has run longest, if any is running."""
        with self._lock:
            if not self._in_flight:
                return None
            student, (repository, started) = min(self._in_flight.items(), key=lambda item: item[1][1])
        return student, repository, time.monotonic() - started

    def __iter__(self) -> Iterator[Job]:
        pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="kg-fetch")
        try:
            futures = [pool.submit(self._fetch, e) for e in self.entries]
            index = 0
            for future in as_completed(futures):
                entry, fetched = future.result()
                deadline = self.deadlines.deadline_of(entry)
                if isinstance(fetched, Fetched):
                    # The pinned commit travels with the job: nobody asks git for it again.
                    checkout = fetched.checkout
                    yield Job(index, entry.student, checkout.root, deadline, fetched.submitted_at, fetched.pinned_by,
                              checkout.commit, checkout.commit_time, checkout.dirty,
                              *((fetched.later[0], fetched.later[1].isoformat()) if fetched.later else ()))
                    index += 1
                    continue
                status, message = (SubmissionStatus.NOT_SUBMITTED, fetched.reason) if isinstance(fetched, NotSubmitted) \
                    else (SubmissionStatus.FETCH_FAILED, fetched.reason) if isinstance(fetched, FetchFailed) \
                    else (SubmissionStatus.ERROR, fetched)
                job = Job(-1, entry.student, Path(entry.repository), deadline)
                if self.save is not None:
                    self.save(job, not_graded(self.assignment, self.options, status, message,
                                              Submission(entry.repository)))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def in_roster_order(self) -> list[Job]:
        """Every fetched Job, in roster order, indexed from 0 (for executors that need the whole list)."""
        jobs = sorted(self, key=lambda job: self.position[job.student])
        return [dataclasses.replace(job, index=i) for i, job in enumerate(jobs)]

    def _fetch(self, entry: Entry) -> tuple[Entry, Fetched | NotSubmitted | FetchFailed | str]:
        with self._lock:
            self._in_flight[entry.student] = (entry.repository, time.monotonic())
        try:
            return entry, fetch_submission(entry.student, entry.repository, self.repos_dir, self.deadlines.pin(entry),
                                           self.timeout_s)
        except GraderError as error:
            return entry, str(error)
        except Exception as error:  # one repository's trouble never stops the class
            return entry, f"fetching {entry.repository} failed: {type(error).__name__}: {error}"
        finally:
            with self._lock:
                self._in_flight.pop(entry.student, None)
