"""What the sandbox's watchdog reads of the machine, and nothing it decides: the processes of /proc (their
tree, tasks, memory, open files, mappings, namespaces and mounts), a cgroup's task count, and how full a
filesystem or a folder is.

Every reader returns None (or nothing) for what has gone meanwhile: a process that exits while it is read.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessEntry:
    """One process as /proc/PID/stat gives it."""

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


_shared_table: tuple[float, dict[int, ProcessEntry]] = (float("-inf"), {})
_shared_lock = threading.Lock()


def shared_process_table(newer_than: float) -> tuple[float, dict[int, ProcessEntry]]:
    """(when its walk began, the table): a walk of /proc begun after `newer_than` (time.monotonic()).

    Each sandbox's watchdog walks the whole of /proc ten times a second, in the grader's one interpreter:
    with eight harnesses at once (`grader check` of gpt2-m1 on the H200) the walks' threads spent 4.3 s,
    in a run stage of 2.4 s, contending for its lock. One walk serves every watchdog that asks for a table
    no older than it, and the others wait for it.
    """
    global _shared_table
    with _shared_lock:
        if _shared_table[0] > newer_than:
            return _shared_table
        began = time.monotonic()
        _shared_table = (began, process_table())
        return _shared_table


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


def folder_usage(folder: Path, most_bytes: int | None = None,
                 most_files: int | None = None) -> tuple[int, int, str | None]:
    """(bytes, entries, unreadable) under a folder; stops counting past either bound.

    Bytes are the larger of a file's size and its allocated blocks (a sparse file, a preallocated
    one). `unreadable`: why a folder under it could not be listed (the OSError's strerror), else None.
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
            return used, entries, error.strerror
    return used, entries, None


def filesystem_used(folder: Path | None) -> tuple[int, int] | None:
    """(bytes, inodes) in use on the filesystem holding `folder`."""
    try:
        usage = os.statvfs(folder)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None
    return (usage.f_blocks - usage.f_bfree) * usage.f_frsize, usage.f_files - usage.f_ffree


PSS_READINGS = 3  # a tree whose processes end while it is read by PSS is read again, up to this many times


def status_memory(pid: int) -> tuple[int, int] | None:
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


def proportional_memory(pid: int) -> int:
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


def tree_proportional_memory(pids: set[int]) -> int:
    """The tree's PSS (anonymous + shared), read one process after another.

    A process that ends after it was read hands its share of the pages it shared to the processes read
    after it, which then count them again: 700 MiB shared by a parent and three children read as over
    1 GiB in CI (children read first, ended before the parent was read). Such a reading is taken again;
    if every one of PSS_READINGS is such, the smallest counts (an ending process only adds to a reading).
    """
    readings = []
    for _ in range(PSS_READINGS):
        shares = {pid: proportional_memory(pid) for pid in sorted(pids)}
        readings.append(sum(shares.values()))
        if all(status_memory(pid) is not None for pid, share in shares.items() if share):
            break
    return min(readings)


@dataclass(frozen=True)
class Holdings:
    """What one process holds open or maps that no RSS or folder walk shows (inode: bytes)."""

    memfds: dict[int, int]  # open memfds
    deleted: dict[int, int]  # open deleted files on the output folder's disk
    mapped_memfds: set[int]
    mapped_deleted: dict[int, int]  # deleted files it maps shared and writable: their extents


def holdings_of(pid: int, output_device: int | None) -> Holdings:
    """What one process holds open (/proc/PID/fd) and maps (/proc/PID/maps); `output_device`: whose deleted files count."""
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


def real_uid(pid: int) -> int | None:
    """The real uid of a process (what RLIMIT_NPROC counts by), from /proc/PID/status."""
    try:
        with open(f"/proc/{pid}/status", "rb") as stream:
            for line in stream:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def namespace(pid: str, kind: str) -> str | None:
    """A process's namespace of that kind ("mnt"), as its /proc/PID/ns link names it."""
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def mount_devices(pid: str) -> set[str]:
    """The major:minor of every filesystem mounted in a process's mount table."""
    try:
        return {line.split()[2] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()}
    except OSError:
        return set()


def device_of(path: Path | None) -> int | None:
    """The device number of the filesystem holding `path`."""
    try:
        return os.stat(path).st_dev if path is not None else None
    except OSError:
        return None


def _unescape(field: str) -> str:
    """Mount points in mountinfo escape space, tab, newline and backslash as octal."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def pids_current(cgroup: Path) -> int | None:
    """The tasks a pids cgroup counts now (pids.current); None once the group is gone (with its container)."""
    try:
        return int((cgroup / "pids.current").read_text())
    except (OSError, ValueError):
        return None


def private_tmpfs(pid: int, host_devices: set[str]) -> list[str] | None:
    """The mount points of the tmpfs mounts in a process's mount table that are not the host's (`host_devices`);
    None: its mount table could not be read."""
    try:
        lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    except OSError:
        return None
    mounts = []
    for line in lines:
        fields, _, tail = line.partition(" - ")
        parts, kinds = fields.split(), tail.split()
        if len(parts) >= 5 and kinds and kinds[0] == "tmpfs" and parts[2] not in host_devices:
            mounts.append(_unescape(parts[4]))
    return mounts


def tmpfs_used(pid: int, mount_point: str) -> tuple[int, int] | None:
    """(bytes, inodes) in use on a mount of a process's mount namespace, seen through its /proc/PID/root."""
    try:
        usage = os.statvfs(f"/proc/{pid}/root{mount_point if mount_point != '/' else ''}/")
    except OSError:
        return None
    return (usage.f_blocks - usage.f_bfree) * usage.f_frsize, usage.f_files - usage.f_ffree
