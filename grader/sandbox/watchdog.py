"""The sandbox's watchdog: a thread in the grader that samples one run (`grader.sandbox.procfs` reads /proc) and
kills its whole tree past a limit; what is over which limit, when to stop, and the words of each.

It bounds what no kernel mechanism bounds on every machine: the tree's resident host memory where
no cgroup does (pinned host memory is resident, and counts), the one writable folder (a host
folder: the machine's disk) in bytes and entries, each private tmpfs of the sandbox (RAM) in bytes
and inodes; and it ends a run whose tasks (processes and threads) sit at the cap a kernel bound holds
them to (the sandbox's uid's RLIMIT_NPROC, its pids cgroup), where a fork fails and a fork bomb would
spin until its time limit, or went past it. Nothing it reads is reachable from inside: it runs in the grader's process, reads /proc and statvfs, and writes nothing.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader.sandbox import LimitHit, LimitKind, in_mib, size_in_words
from grader.sandbox.procfs import (Holdings, ProcessEntry, device_of, filesystem_used, folder_usage, holdings_of,
                                   mount_devices, namespace, pids_current, private_tmpfs, process_table,
                                   real_uid, shared_process_table, status_memory, tmpfs_used, tree_of,
                                   tree_proportional_memory)

TREE_SCAN_INTERVAL_S = 0.1  # a walk of all of /proc finds the tree's new processes (and their open files)
# The writable folder is walked when its filesystem grew by what the folder has left (a statvfs every
# sample), at most every OUTPUT_SCAN_INTERVAL_S (and 4x the walk's own duration), and at least every
# OUTPUT_BACKSTOP_S (another process deleting files on the same disk could hide the growth).
OUTPUT_SCAN_INTERVAL_S = 0.1
OUTPUT_BACKSTOP_S = 0.5
TABLE_SHARED_S = 0.05  # a walk of /proc another watchdog began this recently serves this one too
CAP_RECHECK_S = 0.05  # a tree at its process cap is walked again this soon: still there, the run is ended
PSS_INTERVAL_S = 0.1  # how often a tree whose summed RSS is over the limit is re-measured by PSS
OPEN_FILES_BUDGET_S = 0.05  # a walk's share of reading the tree's open files and mappings (see _scan_open_files)
KILL_ROUNDS = 100  # a fork bomb forks while it is killed: kill what is left until nothing is


@dataclass(frozen=True)
class Watch:
    """What one run's watchdog bounds; None: not watched."""

    memory_limit_bytes: int | None = None  # resident anonymous + shared memory of the tree, and memfds it holds
    # The process/thread cap: the run is stopped past it, or at it on two walks in a row (a kernel's cap,
    # RLIMIT_NPROC or pids.max, makes a fork fail there, and a fork bomb then spins until its time limit).
    tasks: int | None = None
    tasks_uid: int | None = None  # count the tree's tasks of this real uid only (the sandbox's own), not the launcher's
    pids_cgroup: Path | None = None  # count the tasks of this pids cgroup (its pids.current) instead of the tree's
    output: Path | None = None  # the writable host folder
    output_bytes: int | None = None
    output_files: int | None = None
    tmpfs_bytes: int | None = None  # each tmpfs private to the sandbox (mounted in its mount namespace only)
    tmpfs_inodes: int | None = None
    session: int | None = None  # also every process of this session (a backend without a PID namespace)
    interval_s: float = 0.02

    def describe(self) -> list[str]:
        """The output folder's bounds in words, for the enforcement record (the rest is the backend's to say)."""
        out = []
        if self.output is not None and (self.output_bytes or self.output_files):
            out.append(f"output folder {in_mib(self.output_bytes or 0)}, {self.output_files} files "
                       f"(watchdog every {OUTPUT_SCAN_INTERVAL_S * 1000:.0f} ms)")
        return out


class Watchdog:
    """Samples one run until `stop`; on a limit it records why (`hit`), then calls `kill`."""

    def __init__(self, root: int | None, watch: Watch, kill: Callable[[], None]) -> None:
        """`root`: the tree's first process (None: no tree, only the folder, as for a container)."""
        self.root = root
        self.watch = watch
        self.hit: LimitHit | None = None
        self._kill = kill
        self._stop = threading.Event()
        self._pids: set[int] = {root} if root is not None else set()
        self._members: dict[int, int] = {}  # pid: start time, of the tree at the last walk
        self._root_started: int | None = None
        self._at_cap = False  # the last walk found the tasks at the cap
        self._root_gone = False
        self._hidden_memory = 0  # bytes of memfds the tree holds open (in no process's RSS until mapped)
        self._hidden_output = 0  # bytes of deleted files on the output folder's disk still held open
        self._holdings: dict[tuple[int, int], tuple[float, Holdings]] = {}  # (pid, start time): (read at, what)
        self._pss_checked = 0.0
        self._walked = time.monotonic()  # when the process table last walked began (the first: after the start)
        self._tmpfs: list[tuple[int, str]] = []  # (a pid inside, mount point) of each private tmpfs
        self._host_devices = mount_devices("self")
        self._own_mount_ns = namespace("self", "mnt")
        self._output_device = device_of(watch.output)
        self._output_room: tuple[int, int, int, int] | None = None  # filesystem's used bytes, inodes; folder's room
        self._thread = threading.Thread(target=self._run, name="kg-sandbox-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (before the root process is reaped: its pid must not be reused under us)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def members(self) -> dict[int, int]:
        """The tree at the last walk (pid: start time): what to kill even once it left the root and session."""
        return dict(self._members)

    def root_reaped(self) -> None:
        """The root was reaped, its pid is free: from now on only the session (if watched) is the run's."""
        self._root_gone = True
        if self.watch.session is None:
            self._stop.set()

    def _run(self) -> None:
        try:
            self._sample()
        except Exception as error:  # a bug here must not leave a run unbounded: fail closed, and loudly
            import traceback

            traceback.print_exc()
            if not self._stop.is_set():
                self.hit = LimitHit(None, "could not be watched (a fault of the grader: its sandbox watchdog "
                                         f"failed with {error!r})")
                self._kill()

    def _sample(self) -> None:
        next_tree = next_output = backstop = 0.0
        output_cost = 0.0
        while not self._stop.wait(self.watch.interval_s):
            now = time.monotonic()
            reason = None
            walked = False
            if now >= next_tree and self.root is not None:
                next_tree = now + TREE_SCAN_INTERVAL_S
                reason = self._scan_tree()
                walked = True
                if self._stop.is_set():
                    return
                if self._at_cap:  # at the cap: the next walk says whether it stays there
                    next_tree = min(next_tree, time.monotonic() + CAP_RECHECK_S)
            if self.root is not None and (walked or not self._tmpfs):
                self._find_tmpfs()  # each sample while the sandbox starts (it mounts them then), then each walk
            reason = reason or self._check_memory() or self._check_tmpfs()
            if reason is None and self.watch.output is not None and now >= next_output \
                    and (now >= backstop or self._output_may_be_full()):
                started = time.monotonic()
                reason = self._check_output()
                output_cost = time.monotonic() - started
                next_output = time.monotonic() + max(OUTPUT_SCAN_INTERVAL_S, 4 * output_cost)
                backstop = time.monotonic() + OUTPUT_BACKSTOP_S
            if reason is not None and not self._stop.is_set():
                self.hit = reason
                self._kill()
                return

    def _scan_tree(self) -> LimitHit | None:
        # Another watchdog's walk, if it began in the last TABLE_SHARED_S and after this one's last.
        self._walked, table = shared_process_table(max(self._walked, time.monotonic() - TABLE_SHARED_S))
        root = None if self._root_gone else table.get(self.root)
        if root is not None:
            if self._root_started is None:
                self._root_started = root.started
            elif root.started != self._root_started:  # the pid was reused: the run is long gone
                self._stop.set()
                return None
        self._pids = tree_of(table, self.root if root is not None else None, self.watch.session, self._members)
        self._members = {pid: table[pid].started for pid in self._pids}
        if self.watch.tasks:
            tasks = self._tasks(table)
            if tasks > self.watch.tasks or (tasks >= self.watch.tasks and self._at_cap):
                return LimitHit.processes(self.watch.tasks)
            self._at_cap = tasks >= self.watch.tasks
        self._scan_open_files()
        if self.watch.output_bytes and self._hidden_output > self.watch.output_bytes:
            return _output_over(self.watch.output_bytes, " (in deleted files it kept open or mapped)")
        return None

    def _tasks(self, table: dict[int, ProcessEntry]) -> int:
        """The tasks the cap counts: the pids cgroup's, else the tree's of the sandbox's uid, else the tree's."""
        if self.watch.pids_cgroup is not None:
            counted = pids_current(self.watch.pids_cgroup)
            if counted is not None:
                return counted  # else the group went with its container: count the tree
        return sum(table[p].threads for p in self._pids
                   if self.watch.tasks_uid is None or real_uid(p) == self.watch.tasks_uid)

    def _scan_open_files(self) -> None:
        """Memfds and deleted files the tree holds open or mapped: memory or disk no folder walk or RSS shows.

        Read within OPEN_FILES_BUDGET_S a walk, the processes never read first, then the longest unread:
        a forking process's maps wait on its memory lock, and a fork bomb's would otherwise hold back
        the count of its processes for seconds. What is not re-read this walk counts as last read.
        """
        deadline = time.monotonic() + OPEN_FILES_BUDGET_S
        tree = set(self._members.items())
        self._holdings = {key: held for key, held in self._holdings.items() if key in tree}
        for number, key in enumerate(sorted(tree, key=lambda k: self._holdings[k][0] if k in self._holdings else -1.0)):
            if number and time.monotonic() > deadline:
                break
            self._holdings[key] = (time.monotonic(), holdings_of(key[0], self._output_device))
        memfds: dict[int, int] = {}
        deleted: dict[int, int] = {}
        mapped: set[int] = set()
        for _, held in self._holdings.values():
            memfds.update(held.memfds)
            mapped |= held.mapped_memfds
            for inode, extent in (*held.deleted.items(), *held.mapped_deleted.items()):
                deleted[inode] = max(deleted.get(inode, 0), extent)
        for inode in mapped:  # a mapped memfd is in its mappers' RSS already (shared memory)
            memfds.pop(inode, None)
        self._hidden_memory, self._hidden_output = sum(memfds.values()), sum(deleted.values())

    def _check_memory(self) -> LimitHit | None:
        limit = self.watch.memory_limit_bytes
        if not limit:
            return None
        charged, peak, counted = self._hidden_memory, 0, 0
        for pid in self._pids:
            usage = status_memory(pid)
            if usage is None:
                continue
            counted += 1
            charged += usage[0]
            peak = max(peak, usage[1])
        if peak > limit:  # one process's own peak: between two samples is not a way out
            return LimitHit.memory(limit)
        if charged <= limit:
            return None
        now = time.monotonic()
        if counted > 1:
            # Pages shared after a fork are in every process's RSS: PSS splits them (and costs more to read).
            if now - self._pss_checked < PSS_INTERVAL_S:
                return None
            self._pss_checked = now
            charged = self._hidden_memory + tree_proportional_memory(self._pids)
            if charged <= limit:
                return None
        return LimitHit.memory(limit)

    def _find_tmpfs(self) -> None:
        """The tmpfs mounts only the sandbox has (their devices are not in the grader's own mount table)."""
        if self.watch.tmpfs_bytes is None and self.watch.tmpfs_inodes is None:
            return
        for pid in sorted(self._pids, reverse=True):  # the newest first: past the launcher's set-up
            if namespace(str(pid), "mnt") in (None, self._own_mount_ns):
                continue
            mounts = private_tmpfs(pid, self._host_devices)
            if mounts is None:
                continue
            self._tmpfs = [(pid, mount_point) for mount_point in mounts]
            return

    def _check_tmpfs(self) -> LimitHit | None:
        for pid, mount_point in self._tmpfs:
            usage = tmpfs_used(pid, mount_point)
            if usage is None:
                continue
            where = "root folder" if mount_point == "/" else mount_point
            used, inodes = usage
            if self.watch.tmpfs_bytes and used >= self.watch.tmpfs_bytes:
                return LimitHit("tmp", f"filled its private {where} ({size_in_words(self.watch.tmpfs_bytes)})")
            if self.watch.tmpfs_inodes and inodes >= self.watch.tmpfs_inodes:
                return LimitHit("tmp", f"filled its private {where} ({self.watch.tmpfs_inodes} files)")
        return None

    def _output_may_be_full(self) -> bool:
        """Whether the folder's filesystem grew, since the last walk, by as much as the folder had left."""
        if self._output_room is None:
            return True
        disk = filesystem_used(self.watch.output)
        if disk is None:
            return True
        used_bytes, used_inodes, room_bytes, room_files = self._output_room
        return disk[0] - used_bytes >= room_bytes or disk[1] - used_inodes >= room_files

    def _check_output(self) -> LimitHit | None:
        assert self.watch.output is not None
        most_bytes, most_files = self.watch.output_bytes, self.watch.output_files
        disk = filesystem_used(self.watch.output)
        used, entries, unreadable = folder_usage(self.watch.output, most_bytes, most_files)
        if disk is not None:
            self._output_room = (disk[0], disk[1], (most_bytes or 1 << 62) - used - self._hidden_output,
                                 (most_files or 1 << 62) - entries)
        if unreadable:  # what it holds cannot be bounded
            return LimitHit("output", f"made part of its output folder unreadable to the grader ({unreadable})")
        if most_files and entries > most_files:
            return LimitHit("output", f"created more than {most_files} files in its output folder")
        if most_bytes and used + self._hidden_output > most_bytes:
            return _output_over(most_bytes)
        return None


def _output_over(most_bytes: int, how: str = "") -> LimitHit:
    """The output folder's byte bound reached, in words once (`how`: where the bytes were hiding)."""
    return LimitHit("output", f"wrote more than {size_in_words(most_bytes)} into its output folder{how}")


class WatchedProcess:
    """A started process's word on the limit that ended it: its watchdog's, else its backend's own bound."""

    _watchdog: Watchdog | None = None

    def _bound_hit(self) -> LimitHit | None:
        """A limit the backend's own bound reports (a cgroup's counters, docker's OOM kill)."""
        return None

    def limit_hit(self) -> str | None:
        """Which limit, if any, ended the run (read before `kill`)."""
        hit = self._limit()
        return hit.words if hit else None

    def limit_kind(self) -> LimitKind | None:
        hit = self._limit()
        return hit.kind if hit else None

    def _limit(self) -> LimitHit | None:
        if self._watchdog is not None and self._watchdog.hit:
            return self._watchdog.hit
        return self._bound_hit()


def kill_tree(root: int | None, session: int | None = None, also: dict[int, int] | None = None) -> None:
    """SIGKILL every process of the tree until none is left (call while `root` is not yet reaped).

    What was found once stays known (by pid and start time): a member whose parent died first is no
    longer below the root.
    """
    known = dict(also or {})
    for _ in range(KILL_ROUNDS):
        table = process_table()
        pids = tree_of(table, root, session, known)
        if not pids:
            return
        known.update((pid, table[pid].started) for pid in pids)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.002)

