"""One unprivileged uid for each running sandbox: its RLIMIT_NPROC then counts that sandbox's tasks alone.

As root, every start of the namespace and process backends leases a uid (and the gid of the same
number) from `KERNEL_GRADER_SANDBOX_UIDS` (FIRST-LAST; default 60000-60999, below systemd's dynamic
users, 61184-65519). A uid that names an account or a group (`getpwuid`, `getgrgid`) is never
handed out. The lease is a non-blocking `flock` on one file per uid under a root-only folder
(`/run/kernel-grader/uids`), held by the grader while the harness runs: run slots are separate
processes and two `grader` commands may run at once, and a grader that dies frees its uids with
its file descriptors. Every process of the uid still alive is killed when a lease is taken and
when it is released, so a sandbox never meets another's leftovers.

Graders that share a kernel but not this folder (two containers) must be given ranges that do
not overlap.
"""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.errors import GraderError

UIDS_VARIABLE = "KERNEL_GRADER_SANDBOX_UIDS"
DEFAULT_UIDS = (60000, 60999)
LEASES = Path("/run/kernel-grader/uids")  # one lock file per uid, root's alone
KILL_ROUNDS = 200  # a leftover fork bomb forks while it is killed: kill what is left until nothing is


@dataclass(frozen=True)
class UidRange:
    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


def uid_range() -> UidRange:
    """The range leases come from: `$KERNEL_GRADER_SANDBOX_UIDS` (FIRST-LAST), else the default."""
    text = os.environ.get(UIDS_VARIABLE, "").strip()
    if not text:
        return UidRange(*DEFAULT_UIDS)
    first, _, last = text.partition("-")
    try:
        chosen = UidRange(int(first), int(last or first))
    except ValueError:
        chosen = None
    if chosen is None or not 1000 <= chosen.first <= chosen.last < 2**32 - 2:
        raise GraderError(f"{UIDS_VARIABLE}={text!r}: expected a range of unused uids as FIRST-LAST, "
                          f"each 1000 or more (e.g. {DEFAULT_UIDS[0]}-{DEFAULT_UIDS[1]})")
    return chosen


@dataclass
class UidLease:
    """One uid held for one sandbox; `release` kills what is left of it and frees it."""

    uid: int
    _lock: int | None = field(default=None, repr=False)

    @property
    def gid(self) -> int:
        return self.uid

    def release(self) -> None:
        if self._lock is None:
            return
        try:
            kill_processes_of(self.uid)
        finally:
            os.close(self._lock)  # closing the file descriptor drops the flock
            self._lock = None


def lease_uid(uids: UidRange | None = None, folder: Path = LEASES) -> UidLease:
    """A uid of the range that no other sandbox holds, with no process left of it (root only)."""
    uids = uids or uid_range()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    count = uids.last - uids.first + 1
    offset = random.randrange(count)  # graders starting at once try different uids first
    for step in range(count):
        uid = uids.first + (offset + step) % count
        if _names_an_account(uid):
            continue
        lock = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
            continue
        try:
            kill_processes_of(uid)
            os.ftruncate(lock, 0)
            os.write(lock, f"{os.getpid()}\n".encode())  # who holds it, for a person looking
        except BaseException:
            os.close(lock)
            raise
        return UidLease(uid, lock)
    raise GraderError(f"every sandbox uid of {uids} is held by a running sandbox; set {UIDS_VARIABLE} to a "
                      "larger range of unused uids")


def _names_an_account(uid: int) -> bool:
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            continue
    return False


def processes_of(uid: int) -> set[int]:
    """The live processes whose real, effective, saved or file-system uid is `uid` (this PID namespace's view).

    Zombies are left out: a kill cannot end them, their parent (or init) reaps them.
    """
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as stream:
                for line in stream:
                    if line.startswith(b"State:") and line.split()[1] in (b"Z", b"X"):
                        break
                    if line.startswith(b"Uid:"):
                        if uid in (int(value) for value in line.split()[1:]):
                            found.add(int(name))
                        break
        except (OSError, ValueError):
            continue
    return found


def kill_processes_of(uid: int) -> None:
    """SIGKILL every process of `uid` until none is left; a GraderError if some outlive every round."""
    for _ in range(KILL_ROUNDS):
        pids = processes_of(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)
    left = processes_of(uid)
    if left:
        raise GraderError(f"processes of sandbox uid {uid} survived {KILL_ROUNDS} rounds of SIGKILL: "
                          f"{', '.join(map(str, sorted(left)[:10]))}")
