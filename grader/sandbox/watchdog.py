"""The sandbox's watchdog: a thread in the grader that samples one run from /proc and kills its whole tree past a limit.

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
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader.sandbox import LimitHit, LimitKind, in_mib, size_in_words

TREE_SCAN_INTERVAL_S = 0.1  # a walk of all of /proc finds the tree's new processes (and their open files)
# The writable folder is walked when its filesystem grew by what the folder has left (a statvfs every
# sample), at most every OUTPUT_SCAN_INTERVAL_S (and 4x the walk's own duration), and at least every
# OUTPUT_BACKSTOP_S (another process deleting files on the same disk could hide the growth).
OUTPUT_SCAN_INTERVAL_S = 0.1
OUTPUT_BACKSTOP_S = 0.5
CAP_RECHECK_S = 0.05  # a tree at its process cap is walked again this soon: still there, the run is ended
PSS_INTERVAL_S = 0.1  # how often a tree whose summed RSS is over the limit is re-measured by PSS
OPEN_FILES_BUDGET_S = 0.05  # a walk's share of reading the tree's open files and mappings (see _scan_open_files)
KILL_ROUNDS = 100  # a fork bomb forks while it is killed: kill what is left until nothing is


@dataclass(frozen=True)
class Watch:
    """What one run's watchdog bounds; None: not watched."""

    memory_bytes: int | None = None  # resident anonymous + shared memory of the tree, and memfds it holds
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
        self._tmpfs: list[tuple[int, str]] = []  # (a pid inside, mount point) of each private tmpfs
        self._host_devices = _mount_devices("self")
        self._own_mount_ns = _namespace("self", "mnt")
        self._output_device = _device(watch.output)
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
            if now >= next_tree and self.root is not None:
                next_tree = now + TREE_SCAN_INTERVAL_S
                reason = self._scan_tree()
                if self._stop.is_set():
                    return
                if self._at_cap:  # at the cap: the next walk says whether it stays there
                    next_tree = min(next_tree, time.monotonic() + CAP_RECHECK_S)
            if self.root is not None:
                self._find_tmpfs()  # each time: the sandbox mounts its tmpfs while it starts
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
        table = process_table()
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
            return LimitHit("output", f"wrote more than {size_in_words(self.watch.output_bytes)} into its output "
                            "folder (in deleted files it kept open or mapped)")
        return None

    def _tasks(self, table: dict[int, ProcessEntry]) -> int:
        """The tasks the cap counts: the pids cgroup's, else the tree's of the sandbox's uid, else the tree's."""
        if self.watch.pids_cgroup is not None:
            try:
                return int((self.watch.pids_cgroup / "pids.current").read_text())
            except (OSError, ValueError):
                pass  # the group went with its container: count the tree
        return sum(table[p].threads for p in self._pids
                   if self.watch.tasks_uid is None or _real_uid(p) == self.watch.tasks_uid)

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
            self._holdings[key] = (time.monotonic(), _holdings_of(key[0], self._output_device))
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
        limit = self.watch.memory_bytes
        if not limit:
            return None
        charged, peak, counted = self._hidden_memory, 0, 0
        for pid in self._pids:
            usage = _status_memory(pid)
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
            charged = self._hidden_memory + sum(_proportional_memory(p) for p in self._pids)
            if charged <= limit:
                return None
        return LimitHit.memory(limit)

    def _find_tmpfs(self) -> None:
        """The tmpfs mounts only the sandbox has (their devices are not in the grader's own mount table)."""
        if self.watch.tmpfs_bytes is None and self.watch.tmpfs_inodes is None:
            return
        for pid in sorted(self._pids, reverse=True):  # the newest first: past the launcher's set-up
            if _namespace(str(pid), "mnt") in (None, self._own_mount_ns):
                continue
            mounts = []
            try:
                lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                fields, _, tail = line.partition(" - ")
                parts, kinds = fields.split(), tail.split()
                if len(parts) >= 5 and kinds and kinds[0] == "tmpfs" and parts[2] not in self._host_devices:
                    mounts.append((pid, _unescape(parts[4])))
            self._tmpfs = mounts
            return

    def _check_tmpfs(self) -> LimitHit | None:
        for pid, mount_point in self._tmpfs:
            try:
                usage = os.statvfs(f"/proc/{pid}/root{mount_point if mount_point != '/' else ''}/")
            except OSError:
                continue
            where = "root folder" if mount_point == "/" else mount_point
            used = (usage.f_blocks - usage.f_bfree) * usage.f_frsize
            if self.watch.tmpfs_bytes and used >= self.watch.tmpfs_bytes:
                return LimitHit("tmp", f"filled its private {where} ({size_in_words(self.watch.tmpfs_bytes)})")
            if self.watch.tmpfs_inodes and usage.f_files - usage.f_ffree >= self.watch.tmpfs_inodes:
                return LimitHit("tmp", f"filled its private {where} ({self.watch.tmpfs_inodes} files)")
        return None

    def _output_may_be_full(self) -> bool:
        """Whether the folder's filesystem grew, since the last walk, by as much as the folder had left."""
        if self._output_room is None:
            return True
        disk = _used(self.watch.output)
        if disk is None:
            return True
        used_bytes, used_inodes, room_bytes, room_files = self._output_room
        return disk[0] - used_bytes >= room_bytes or disk[1] - used_inodes >= room_files

    def _check_output(self) -> LimitHit | None:
        assert self.watch.output is not None
        most_bytes, most_files = self.watch.output_bytes, self.watch.output_files
        disk = _used(self.watch.output)
        used, entries, problem = folder_usage(self.watch.output, most_bytes, most_files)
        if disk is not None:
            self._output_room = (disk[0], disk[1], (most_bytes or 1 << 62) - used - self._hidden_output,
                                 (most_files or 1 << 62) - entries)
        if problem:
            return LimitHit("output", problem)
        if most_files and entries > most_files:
            return LimitHit("output", f"created more than {most_files} files in its output folder")
        if most_bytes and used + self._hidden_output > most_bytes:
            return LimitHit("output", f"wrote more than {size_in_words(most_bytes)} into its output folder")
        return None


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


@dataclass(frozen=True)
class ProcessEntry:
    parent: int
    session: int
    threads: int
    started: int  # clock ticks after boot: with the pid, names one process for good
    zombie: bool


def process_table() -> dict[int, ProcessEntry]:
    """Every process of the machine (this PID namespace), from /proc/*/stat."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stream:
                data = stream.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2:].split()  # the command name may hold spaces and parentheses
        try:
            table[int(name)] = ProcessEntry(int(fields[1]), int(fields[3]), int(fields[17]), int(fields[19]),
                                            fields[0] in (b"Z", b"X"))
        except (IndexError, ValueError):
            continue
    return table


def tree_of(table: dict[int, ProcessEntry], root: int | None, session: int | None = None,
            also: dict[int, int] | None = None) -> set[int]:
    """The live processes descending from `root` (in a PID namespace orphans go to its init, inside), plus
    `session`'s, plus those descending from `also` (pid: start time, members seen before; an orphan that
    left the session is below neither), each still the same process."""
    children: dict[int, list[int]] = {}
    for pid, entry in table.items():
        children.setdefault(entry.parent, []).append(pid)
    found: set[int] = set()
    pending = [root] if root is not None and root in table else []
    pending += [pid for pid, started in (also or {}).items() if pid in table and table[pid].started == started]
    pending += [pid for pid, entry in table.items() if session is not None and entry.session == session]
    while pending:
        pid = pending.pop()
        if pid in found:
            continue
        found.add(pid)
        pending.extend(children.get(pid, ()))
    return {pid for pid in found if not table[pid].zombie}


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


def folder_usage(folder: Path, most_bytes: int | None = None,
                 most_files: int | None = None) -> tuple[int, int, str | None]:
    """(bytes, entries, problem) under a folder; stops counting past either bound.

    Bytes are the larger of a file's size and its allocated blocks (a sparse file, a preallocated
    one). A problem is a folder the grader cannot list: what it holds cannot be bounded.
    """
    used = entries = 0
    pending = [str(folder)]
    while pending:
        path = pending.pop()
        try:
            with os.scandir(path) as listing:
                for entry in listing:
                    entries += 1
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    used += max(info.st_size if stat.S_ISREG(info.st_mode) else 0, info.st_blocks * 512)
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(entry.path)
                    if (most_files and entries > most_files) or (most_bytes and used > most_bytes):
                        return used, entries, None
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as error:
            return used, entries, f"made part of its output folder unreadable to the grader ({error.strerror})"
    return used, entries, None


def _used(folder: Path | None) -> tuple[int, int] | None:
    """(bytes, inodes) in use on the filesystem holding `folder`."""
    try:
        usage = os.statvfs(folder)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None
    return (usage.f_blocks - usage.f_bfree) * usage.f_frsize, usage.f_files - usage.f_ffree


def _status_memory(pid: int) -> tuple[int, int] | None:
    """(anonymous + shared resident bytes now, peak resident bytes less file-backed ones) of one process."""
    try:
        with open(f"/proc/{pid}/status", "rb") as stream:
            text = stream.read()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(b":")
        if key in (b"VmHWM", b"RssAnon", b"RssFile", b"RssShmem"):
            values[key] = int(rest.split()[0]) * 1024
    if not values:
        return None  # a kernel thread, or a zombie
    now = values.get(b"RssAnon", 0) + values.get(b"RssShmem", 0)
    # File-backed pages (libraries) are clean page cache, not what the limit is for.
    return now, max(now, values.get(b"VmHWM", 0) - values.get(b"RssFile", 0))


def _proportional_memory(pid: int) -> int:
    """Anonymous + shared PSS of one process: a page shared by n processes counts 1/n in each."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as stream:
            text = stream.read()
    except OSError:
        return 0
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(b":")
        if key in (b"Pss", b"Pss_Anon", b"Pss_Shmem", b"Pss_File"):
            values[key] = int(rest.split()[0]) * 1024
    if b"Pss_Anon" in values:
        return values[b"Pss_Anon"] + values.get(b"Pss_Shmem", 0)
    return values.get(b"Pss", 0) - values.get(b"Pss_File", 0)


@dataclass(frozen=True)
class Holdings:
    """What one process holds open or maps that no RSS or folder walk shows (inode: bytes)."""

    memfds: dict[int, int]  # open memfds
    deleted: dict[int, int]  # open deleted files on the output folder's disk
    mapped_memfds: set[int]
    mapped_deleted: dict[int, int]  # deleted files it maps shared and writable: their extents


def _holdings_of(pid: int, output_device: int | None) -> Holdings:
    folder = f"/proc/{pid}/fd"
    memfds: dict[int, int] = {}
    deleted: dict[int, int] = {}
    try:
        fds = os.listdir(folder)
    except OSError:
        fds = []
    for fd in fds:
        try:
            info = os.stat(f"{folder}/{fd}")
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        if info.st_nlink == 0 and info.st_dev == output_device:
            deleted[info.st_ino] = max(info.st_blocks * 512, info.st_size)
        elif info.st_blocks:
            try:
                if os.readlink(f"{folder}/{fd}").startswith("/memfd:"):
                    memfds[info.st_ino] = info.st_blocks * 512
            except OSError:
                continue
    mapped_memfds, mapped_deleted = _mappings(pid)
    return Holdings(memfds, deleted, mapped_memfds, mapped_deleted)


def _mappings(pid: int) -> tuple[set[int], dict[int, int]]:
    """From /proc/PID/maps: the memfds a process maps, and the deleted files it maps shared and writable.

    A shared writable mapping of a deleted file keeps writing to a disk after the fd is closed and
    the name is gone; its extent (offset + length) bounds the bytes it can hold there.
    """
    memfds: set[int] = set()
    deleted: dict[int, int] = {}
    try:
        with open(f"/proc/{pid}/maps", "rb") as stream:
            for line in stream:
                parts = line.split(None, 5)
                if len(parts) < 6:
                    continue
                name = parts[5].rstrip(b"\n")
                if name.startswith(b"/memfd:"):
                    memfds.add(int(parts[4]))
                elif name.endswith(b" (deleted)") and b"w" in parts[1] and b"s" in parts[1] \
                        and not name.startswith((b"/dev/shm/", b"/SYSV", b"/dev/zero")):
                    start, end = (int(x, 16) for x in parts[0].split(b"-"))
                    inode = int(parts[4])
                    deleted[inode] = max(deleted.get(inode, 0), int(parts[2], 16) + end - start)
    except (OSError, ValueError):
        pass
    return memfds, deleted


def _real_uid(pid: int) -> int | None:
    """The real uid of a process (what RLIMIT_NPROC counts by), from /proc/PID/status."""
    try:
        with open(f"/proc/{pid}/status", "rb") as stream:
            for line in stream:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _namespace(pid: str, kind: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def _mount_devices(pid: str) -> set[str]:
    """The major:minor of every filesystem mounted in a process's mount table."""
    try:
        return {line.split()[2] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()}
    except OSError:
        return set()


def _device(path: Path | None) -> int | None:
    try:
        return os.stat(path).st_dev if path is not None else None
    except OSError:
        return None


def _unescape(field: str) -> str:
    """Mount points in mountinfo escape space, tab, newline and backslash as octal."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field
