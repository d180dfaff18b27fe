"""One batch per store: a lock file beside the store naming the batch that holds it (pid, host).

The lock is an `flock` on `<store>.lock`, so a batch that dies (kill -9 included) releases it
with its process; the file's contents (pid, host, start time, command) only name the holder in
the message another batch prints. A lock file left by a dead process is taken over, and the
holder's leftovers in the clone cache (a `.git/index.lock` from a checkout killed half-way,
`<folder>.partial<pid>-<tid>` from a killed clone) are cleaned while the lock is held.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from grader.errors import StoreError
from grader.batch.fetch import PARTIAL


CACHE_LOCK = ".grader-batch.lock"


class BatchLocked(StoreError):
    """Another batch holds the store (or the clone cache)."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a lock, as its file says."""

    pid: int | None
    host: str
    started_at: str
    command: str

    def describe(self) -> str:
        return (f"pid {self.pid if self.pid is not None else '?'} on host {self.host or '?'}"
                + (f", started {self.started_at}" if self.started_at else "")
                + (f": {self.command}" if self.command else ""))


class BatchLock:
    """Hold `path` (a lock file) for the life of a batch: `with BatchLock(store.with_suffix(...)) as lock:`."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what  # "store grades.sqlite", named in the messages
        self.taken_over: Holder | None = None  # the dead batch whose lock file this one found
        self._fd: int | None = None

    def acquire(self) -> BatchLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = read_holder(self.path)
                os.close(fd)
                raise BatchLocked(f"{self.what} is in use by another batch ("
                                  f"{holder.describe() if holder else 'holder unknown'}); wait for it to finish or "
                                  f"stop it, then run this again (lock file {self.path})") from None
            # The file may have been removed (and re-created) by its previous holder between our open and flock.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        holder = read_holder(self.path)
        if holder is not None and holder.pid is not None and holder.host != socket.gethostname() \
                and holder.host and _file_locks_may_not_reach(self.path):
            os.close(fd)
            raise BatchLocked(f"{self.what} is in use by another batch ({holder.describe()}) on another host; "
                              f"if that batch is gone, delete {self.path}")
        if holder is not None and holder.pid is not None:
            self.taken_over = holder  # it held no flock: its process is gone
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started_at": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                                 "command": " ".join(["grader", *sys.argv[1:]])[:500]}).encode() + b"\n")
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        os.close(self._fd)  # closing drops the flock
        self._fd = None

    def __enter__(self) -> BatchLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_path(store: Path) -> Path:
    """The lock file beside a store: grades.sqlite -> grades.sqlite.lock."""
    return store.with_name(store.name + ".lock")


def cache_lock_path(repos_dir: Path) -> Path:
    """The lock file in a clone cache: one batch at a time checks out there."""
    return repos_dir / CACHE_LOCK


def read_holder(path: Path) -> Holder | None:
    try:
        data = json.loads(path.read_text() or "null")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid = data.get("pid")
    return Holder(pid if isinstance(pid, int) else None, str(data.get("host", "")), str(data.get("started_at", "")),
                  str(data.get("command", "")))


def _file_locks_may_not_reach(path: Path) -> bool:
    """True where flock may not see another host's lock (a network file system)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return True
    resolved = str(path.resolve())
    best, kind = "", ""
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and (resolved == parts[1] or resolved.startswith(parts[1].rstrip("/") + "/")) \
                and len(parts[1]) >= len(best):
            best, kind = parts[1], parts[2]
    return kind.startswith(("nfs", "cifs", "smb", "fuse", "lustre", "gpfs", "beegfs"))


@dataclass(frozen=True)
class Cleaned:
    partial_folders: list[Path]
    index_locks: list[Path]


def clean_clone_cache(repos_dir: Path) -> Cleaned:
    """Remove what killed batches left in the clone cache; call only while holding the cache's lock.

    `<folder>.partial<pid>-<tid>` clones whose process is gone, and every `.git/index.lock` (with
    the lock held no git command of ours runs there, so any such file is a killed checkout's).
    """
    partial, locks = [], []
    if not repos_dir.is_dir():
        return Cleaned(partial, locks)
    for entry in repos_dir.iterdir():
        name = entry.name
        if PARTIAL in name and entry.is_dir():
            pid_text = name.rpartition(PARTIAL)[2].partition("-")[0]
            if not pid_text.isdigit() or not _alive(int(pid_text)):
                shutil.rmtree(entry, ignore_errors=True)
                partial.append(entry)
            continue
        index_lock = entry / ".git" / "index.lock"
        if index_lock.is_file():
            index_lock.unlink(missing_ok=True)
            locks.append(index_lock)
    return Cleaned(partial, locks)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
