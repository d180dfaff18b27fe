"""What the backends that run code as processes of this machine share (`process`, and `local`'s two launchers).

The limits a start applies to its child (rlimits) and to its whole tree (the watchdog), with their
record in words; the spawn, whose stdout and stderr are drained into capped logs; the process tree
a start returns (`HostProcess`); and the rights the sandbox's user needs on the paths it is given.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader.sandbox import LimitHit, Limits, in_mib, size_in_words
from grader.sandbox.cgroups import Cgroup
from grader.sandbox.streams import CappedLog, drain
from grader.sandbox.uids import UidLease, uid_range
from grader.sandbox.watchdog import Watch, WatchedProcess, Watchdog, kill_tree

# RLIMIT_DATA sits this far above the memory limit: the watchdog kills at the limit and says so;
# the rlimit is the hard stop for an allocation faster than the watchdog's sampling.
DATA_HEADROOM = 256 << 20


@dataclass(frozen=True)
class LimitPlan:
    """What one start applies: rlimits for the child, the watchdog's bounds, and the record of both."""

    rlimits: tuple[tuple[int, int], ...]
    watch: Watch
    applied: tuple[str, ...]

    def apply_rlimits(self) -> None:
        """Set the rlimits on the calling process (the child, before exec)."""
        for kind, value in self.rlimits:
            resource.setrlimit(kind, (value, value))


def data_limit(limits: Limits) -> int:
    """RLIMIT_DATA for a memory limit: above it by a margin (see DATA_HEADROOM)."""
    memory = limits.memory_limit_bytes or 0
    return memory + max(DATA_HEADROOM, memory // 4)


def watch_for(limits: Limits, writable: Path | None, tmpfs: bool, **bounds: int | Path | None) -> Watch:
    """The watchdog's bounds: the writable folder (if any), the private tmpfs (if watched), and `bounds`."""
    output = {"output": writable, "output_bytes": limits.output_bytes, "output_files": limits.output_files}
    tmp = {"tmpfs_bytes": limits.tmp_bytes, "tmpfs_inodes": limits.tmp_inodes}
    return Watch(**(output if writable is not None else {}), **(tmp if tmpfs else {}), **bounds,
                 interval_s=limits.watch_interval_s)


def rlimit_words(limits: Limits) -> list[str]:
    """The per-process limits every backend sets (rlimits, or docker's ulimits) and the log caps, in words."""
    words = ["no core dumps", f"open files {limits.open_files}", f"file size {size_in_words(limits.file_size_bytes)}"]
    if limits.cpu_seconds:
        words.append(f"CPU time {limits.cpu_seconds} s (RLIMIT_CPU)")
    return [*words, f"stdout/stderr capped at {size_in_words(limits.log_bytes)} each"]


def plan_limits(limits: Limits, cgroup: Cgroup | None, writable: Path | None, watch_tmpfs: bool,
                own_uid: bool = False, uid: int | None = None) -> LimitPlan:
    """The limits every backend of this machine applies, and their record (the isolation is the backend's to add).

    `own_uid`: the code runs as a uid of its own (a lease of uids.py, as root): `uid`, or None where
    the record describes a start to come.
    """
    rlimits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, limits.open_files),
               (resource.RLIMIT_FSIZE, limits.file_size_bytes)]
    if limits.cpu_seconds:
        rlimits.append((resource.RLIMIT_CPU, limits.cpu_seconds))
    applied: list[str] = []
    bounds: dict[str, int | Path | None] = {}
    if cgroup is not None:
        applied += cgroup.enforced()
    elif limits.memory_limit_bytes:
        bounds["memory_limit_bytes"] = limits.memory_limit_bytes
        how = f"RSS watchdog every {limits.watch_interval_s * 1000:.0f} ms"
        if limits.rlimit_data:
            rlimits.append((resource.RLIMIT_DATA, data_limit(limits)))
            how += f" + RLIMIT_DATA {in_mib(data_limit(limits))}"
        applied.append(f"memory {in_mib(limits.memory_limit_bytes)} ({how}; no cgroup)")
    else:
        applied.append("memory: no limit")
    if limits.processes:
        applied.append(f"processes/threads {limits.processes} ({process_bound_words(cgroup, own_uid, uid)})")
        if own_uid or os.getuid() != 0:
            # The kernel counts the tasks of the real uid: a sandbox's own as root, the grader's user's otherwise.
            rlimits.append((resource.RLIMIT_NPROC, limits.processes))
        if cgroup is not None or os.getuid() == 0:
            # At the cap a fork fails and a fork bomb spins: the watchdog ends the run there (or past it,
            # where no kernel bound holds it). It counts what the cap counts.
            bounds["tasks"] = limits.processes
            bounds["pids_cgroup"] = cgroup.pids_folder if cgroup is not None else None
            bounds["tasks_uid"] = uid if cgroup is None else None
    watch = watch_for(limits, writable, watch_tmpfs, **bounds)
    applied += [*watch.describe(), *rlimit_words(limits), "clean environment (no secrets)"]
    return LimitPlan(tuple(rlimits), watch, tuple(applied))


def process_bound_words(cgroup: Cgroup | None, own_uid: bool, uid: int | None) -> str:
    """How the process/thread limit holds, in words for the record."""
    user = f"uid {uid}" if uid is not None else f"a uid of its own from {uid_range()}"
    if cgroup is not None:
        also = f"; also RLIMIT_NPROC of {user}, this sandbox's own" if own_uid else ""
        return f"cgroup v{cgroup.version} pids.max{also}; the run is ended at the limit"
    if own_uid:
        return f"RLIMIT_NPROC of {user}, this sandbox's own; watchdog as a second line"
    if os.getuid() != 0:
        return "RLIMIT_NPROC, counted per user: the grader's own processes count too"
    return "watchdog: the tree is killed past it"


def spawn(command: list[str], *, cwd: Path, env: dict[str, str], stdout: Path, stderr: Path, limits: Limits,
          before_exec: Callable[[], None]) -> tuple[subprocess.Popen, list[threading.Thread]]:
    """Start `command` in its own session, its stdout and stderr drained into logs capped at `limits.log_bytes`."""
    popen = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, env=env, start_new_session=True, preexec_fn=before_exec)
    threads = [drain(popen.stdout, CappedLog(stdout, limits.log_bytes)),  # type: ignore[arg-type]
               drain(popen.stderr, CappedLog(stderr, limits.log_bytes))]  # type: ignore[arg-type]
    return popen, threads


class HostProcess(WatchedProcess):
    """One started process and its whole tree; `kill` leaves nothing of it running."""

    def __init__(self, popen: subprocess.Popen, threads: list[threading.Thread], applied: tuple[str, ...],
                 cgroup: Cgroup | None = None, reaped: bool = False, watch: Watch | None = None,
                 session: int | None = None, lease: UidLease | None = None) -> None:
        self._popen = popen
        self._lease = lease  # the sandbox's uid, freed (and what is left of it killed) by `kill`
        self._threads = threads
        self._cgroup = cgroup
        self._reaped = reaped  # a namespace's init reports a child killed by signal N as status 128 + N
        self._session = session  # without a PID namespace: the session's processes are the tree too
        self._lock = threading.Lock()  # the root is reaped (its pid freed) only while the watchdog cannot kill
        self.applied = applied
        self._watchdog = Watchdog(popen.pid, watch, self._kill_tree).start() if watch is not None else None

    def _status(self, code: int | None) -> int | None:
        if code is not None and self._reaped and 128 < code < 128 + 65:
            return -(code - 128)
        return code

    def _kill_tree(self) -> None:
        members = self._watchdog.members() if self._watchdog is not None else {}
        with self._lock:
            if self._popen.returncode is None:
                kill_tree(self._popen.pid, self._session, members)  # before the group: children stay below the root
                try:
                    os.killpg(self._popen.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            else:
                kill_tree(None, self._session, members)

    def poll(self) -> int | None:
        with self._lock:
            code = self._popen.poll()
            if code is not None and self._watchdog is not None:
                self._watchdog.root_reaped()
        return self._status(code)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.001
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self._popen.args, timeout or 0)
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        return code

    def kill(self) -> None:
        """Kill the whole tree: the process group, the PID namespace (via its init), the session and the cgroup."""
        if self._watchdog is not None:
            self._watchdog.stop()
        self._kill_tree()
        self._popen.wait()
        members = self._watchdog.members() if self._watchdog is not None else {}
        if self._session is not None or members:
            kill_tree(None, self._session, members)  # what double-forked out of the tree, or setsid'd
        if self._cgroup is not None:
            self._cgroup.kill()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._cgroup is not None:
            self._cgroup.remove()
        if self._lease is not None:
            self._lease.release()

    def _bound_hit(self) -> LimitHit | None:
        if self._cgroup is None:
            return None
        if self._cgroup.memory_exhausted():
            return LimitHit.memory(self._cgroup.limits.memory_limit_bytes)
        if self._cgroup.processes_exhausted():
            # A fork or thread creation failed at pids.max: the code may go on (and spin until its time limit).
            return LimitHit.processes(self._cgroup.limits.processes)
        return None


def make_readable(path: Path) -> None:
    """Let the sandbox's user read a path it is given read-only (a umask of 077 would hide the runner's own files)."""
    for root, dirs, files in os.walk(path) if path.is_dir() else [(str(path.parent), [], [path.name])]:
        if path.is_dir():
            mode = os.stat(root).st_mode
            if mode & 0o005 != 0o005:
                os.chmod(root, stat.S_IMODE(mode) | 0o005)
        for name in files:
            full = os.path.join(root, name)
            mode = os.lstat(full).st_mode
            if stat.S_ISREG(mode) and not mode & 0o004:
                os.chmod(full, stat.S_IMODE(mode) | 0o004)


def give_to(folder: Path, uid: int, gid: int) -> None:
    """The writable folder (and what the runner put in it) belongs to the sandbox's user."""
    for root, dirs, files in os.walk(folder):
        os.chown(root, uid, gid)
        for name in files:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def make_searchable(path: Path) -> None:
    """Let any user pass through the folders above `path` (search, o+x), never list them: for a backend
    without a mount namespace, whose unprivileged code must reach the paths it is given where they are."""
    for folder in reversed(path.parents):
        mode = os.stat(folder).st_mode
        if not mode & 0o001:
            os.chmod(folder, stat.S_IMODE(mode) | 0o001)


def drop_to(uid: int, gid: int) -> None:
    """Become `uid`:`gid` with no supplementary groups, no capabilities and no_new_privs (in the child, as root)."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # from root to another uid: every capability goes (no SECBIT_KEEP_CAPS)
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        os._exit(126)


PR_SET_NO_NEW_PRIVS = 38
_libc = ctypes.CDLL(None, use_errno=True)
