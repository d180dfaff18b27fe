"""What `local`'s two launchers share: the sandbox's layout, declared once, its record, and its start.

Inside: only loopback (a network namespace with no route out), a private /tmp, /dev/shm and /run,
its own PID, IPC and UTS namespaces; the system's /usr, the Python the grader runs on, the Python
packages the caller names and the paths the runner names, read-only; one writable folder. With
the GPU requested, /dev/nvidia* and /sys are passed through (/sys/class/net hidden). As root the code
runs as a uid of its own (uids.py), whose RLIMIT_NPROC is the process limit.
When a run ends, its PID namespace and cgroup are killed.

`layout_for` says what the sandbox holds (`Layout`); bubblewrap (`bwrap.py`) and util-linux
unshare with `mountns.py` (`unshare.py`) each build it their way. Memory and processes are
bounded by a cgroup where one can be made, else by the watchdog and rlimits (`host.py`).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from grader.sandbox import HARNESS_PACKAGE, Limits, Mounts, in_mib
from grader.sandbox.cgroups import Cgroup
from grader.sandbox.host import HostProcess, LimitPlan, give_to, make_readable, plan_limits, spawn
from grader.sandbox.uids import lease_uid, uid_range

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What the dynamic loader, Python and compilers read from /etc; never shadow, sudoers or keys.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "nsswitch.conf", "localtime",
             "passwd", "group", "hosts")
PAGE = os.sysconf("SC_PAGE_SIZE")
RUN_TMPFS_BYTES = 16 << 20  # the private /run holds a socket or two
SYSV_QUEUES = 16  # SysV message queues per sandbox (each holds 16 KiB); shared memory gets tmp_bytes


@dataclass(frozen=True)
class Bind:
    """A host path mounted at the same path inside."""

    path: str
    access: Literal["ro", "rw", "dev"]  # read-only, writable, a device node


@dataclass(frozen=True)
class Link:
    """A symbolic link inside (`/bin` -> `usr/bin` on a merged /usr)."""

    path: str
    target: str


@dataclass(frozen=True)
class Tmpfs:
    """A private tmpfs: RAM, so bounded in bytes (and in inodes, `Layout.inodes`)."""

    path: str
    size: int
    mode: str


@dataclass(frozen=True)
class Layout:
    """What the sandbox's file system and IPC namespace hold, in the order they are built."""

    root: Tmpfs  # the new root, where the launcher mounts one (bwrap makes its own)
    system: tuple[Bind | Link, ...]  # the system's folders and /etc files, before /proc, /dev and the tmpfs
    tmpfs: tuple[Tmpfs, ...]
    binds: tuple[Bind, ...]  # after the tmpfs: a bind under /tmp (the run's plan) must sit on top of the private /tmp
    cwd: str
    inodes: int  # each private tmpfs's inodes
    sysctls: tuple[tuple[str, int], ...]  # the IPC namespace's SysV bounds: a detached segment is in no RSS
    hidden: tuple[str, ...] = ()  # folders of a bind covered by an empty read-only tmpfs, after the binds


def layout_for(cwd: Path, mounts: Mounts, limits: Limits) -> Layout:
    """The layout of one start: the system read-only, the harness's imports, the GPU if asked, the caller's mounts."""
    system: list[Bind | Link] = []
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            system.append(Link(folder, os.readlink(folder)))
        elif os.path.isdir(folder):
            system.append(Bind(folder, "ro"))
    system += [Bind(f"/etc/{name}", "ro") for name in ETC_FILES if os.path.exists(f"/etc/{name}")]
    hidden: list[str] = []
    tmpfs = (Tmpfs("/dev/shm", limits.tmp_bytes, "1777"), Tmpfs("/tmp", limits.tmp_bytes, "1777"),
             Tmpfs("/run", min(limits.tmp_bytes, RUN_TMPFS_BYTES), "0755"))
    binds = [Bind(str(root), "ro") for root in package_roots(mounts.python_packages)]
    binds += [Bind(entry, "ro") for entry in os.environ.get("LD_LIBRARY_PATH", "").split(":")
              if entry and os.path.isdir(entry) and not entry.startswith(SYSTEM_DIRS)]
    if mounts.gpu:
        binds += [Bind(device, "dev") for device in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*"))]
        binds.append(Bind("/sys", "ro"))
        hidden.append("/sys/class/net")  # the runner's interfaces: not the sandbox's (its namespace has only lo)
        # The persistence daemon's socket lives under /run, which is private here: without it every
        # harness may initialise the GPU from scratch, which takes seconds on a large card.
        if os.path.isdir("/run/nvidia-persistenced"):
            binds.append(Bind("/run/nvidia-persistenced", "rw"))
        binds += [Bind(extra, "ro") for extra in ("/opt", "/etc/OpenCL") if os.path.isdir(extra)]
    binds.append(Bind(str(HARNESS_PACKAGE), "ro"))
    binds += [Bind(str(path), "ro") for path in mounts.read_only]
    if mounts.writable is not None:
        binds.append(Bind(str(mounts.writable), "rw"))
    sysctls = (("shmmax", limits.tmp_bytes), ("shmall", max(1, limits.tmp_bytes // PAGE)), ("msgmni", SYSV_QUEUES))
    return Layout(Tmpfs("/", limits.tmp_bytes, "0755"), tuple(system), tmpfs, tuple(binds), str(cwd),
                  limits.tmp_inodes, sysctls, tuple(h for h in hidden if os.path.isdir(h)))


def package_roots(packages: tuple[str, ...]) -> list[Path]:
    """Where the harness's imports live: the interpreter's prefixes and the named packages' folders."""
    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent.parent}
    for name in packages:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin:
            roots.add(Path(spec.origin).resolve().parent.parent)
    return sorted(r for r in roots if not str(r).startswith(SYSTEM_DIRS) and r.is_dir())


def import_paths(packages: tuple[str, ...]) -> list[str]:
    """The folders of this process's import path that hold the named packages outside the interpreter's own
    prefixes (a package found through PYTHONPATH), for the harness's PYTHONPATH: it sees them as the grader does."""
    prefixes = tuple(dict.fromkeys(str(p) for p in (sys.prefix, sys.base_prefix)))
    paths: list[str] = []
    for name in packages:
        try:
            spec = importlib.util.find_spec(name.split(".")[0])  # the top level alone: a submodule's imports its parent
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.origin or not Path(spec.origin).is_file():
            continue
        origin = Path(spec.origin).resolve()
        folder = str(origin.parent.parent if spec.submodule_search_locations else origin.parent)
        if not folder.startswith(prefixes) and folder not in paths:
            paths.append(folder)
    return paths


class NamespaceSandbox:
    """Namespaces + a drop to a uid of its own + rlimits + a cgroup or the watchdog; a launcher builds the layout."""

    name = "local"

    def __init__(self) -> None:
        self.as_root = os.geteuid() == 0
        self.setpriv = shutil.which("setpriv")
        self._applied: tuple[str, ...] | None = None

    def _command(self, layout: Layout, inner: list[str]) -> list[str]:
        """The launcher's command line that builds `layout` and runs `inner` in it."""
        raise NotImplementedError

    def _tmpfs_bounds(self) -> str:
        """How this launcher bounds the private tmpfs, in words for the record."""
        raise NotImplementedError

    def start(self, command: list[str], *, cwd: Path, mounts: Mounts, limits: Limits,
              stdout: Path, stderr: Path, env: dict[str, str]) -> HostProcess:
        # As root the code runs as a uid of its own: its RLIMIT_NPROC counts this sandbox's tasks alone.
        lease = lease_uid() if self.drops_user else None
        cgroup = None
        try:
            cgroup = Cgroup.create(limits)
            plan = self._plan(limits, mounts.writable, cgroup, lease.uid if lease else None)
            if self.as_root:
                for path in mounts.read_only:
                    make_readable(path)
            inner = list(command)
            if lease is not None:
                if mounts.writable is not None:
                    give_to(mounts.writable, lease.uid, lease.gid)
                # The launcher runs as root without a user namespace (so it can bind anything); the code does not.
                inner = [self.setpriv, f"--reuid={lease.uid}", f"--regid={lease.gid}", "--clear-groups",
                         "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--", *inner]

            def before_exec() -> None:
                if cgroup is not None:
                    cgroup.attach_self()
                plan.apply_rlimits()  # RLIMIT_NPROC binds once setpriv leaves root (root is exempt)

            popen, threads = spawn(self._command(layout_for(cwd, mounts, limits), inner), cwd=cwd, env=env,
                                   stdout=stdout, stderr=stderr, limits=limits, before_exec=before_exec)
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            if lease is not None:
                lease.release()
            raise
        process = HostProcess(popen, threads, plan.applied, cgroup, reaped=True, watch=plan.watch, lease=lease)
        self._applied = process.applied
        return process

    @property
    def drops_user(self) -> bool:
        """Whether the code leaves root for a uid of its own (as root, with setpriv)."""
        return self.as_root and self.setpriv is not None

    def _plan(self, limits: Limits, writable: Path | None, cgroup: Cgroup | None, uid: int | None) -> LimitPlan:
        plan = plan_limits(limits, cgroup, writable, watch_tmpfs=True, own_uid=self.drops_user, uid=uid)
        isolation = ["network namespace (loopback only, no route out)", "mount namespace: read-only system, "
                     "inputs and library; one writable output folder", "PID/IPC/UTS namespaces",
                     "whole tree killed at the end"]
        if self.drops_user:
            user = f"uid {uid}" if uid is not None else f"a uid of its own from {uid_range()}"
            isolation.append(f"runs as {user} (this sandbox's alone), no capabilities, no-new-privs")
        else:
            isolation.append("user namespace, no capabilities")
        isolation.append(f"private /tmp, /dev/shm: tmpfs {in_mib(limits.tmp_bytes)}, {limits.tmp_inodes} inodes each "
                         f"({self._tmpfs_bounds()})")
        if self.as_root:
            isolation.append(f"SysV shared memory {in_mib(limits.tmp_bytes)}, {SYSV_QUEUES} message queues "
                             "(IPC namespace sysctls)")
        return replace(plan, applied=(*isolation, *plan.applied))

    def enforced(self, limits: Limits | None = None, gpu: bool = False) -> list[str]:
        """What the last start applied; else (or with `limits`) what a start would apply here."""
        if limits is None and self._applied is not None:
            return list(self._applied)
        limits = limits or Limits()
        probe = Cgroup.create(limits)
        try:
            return list(self._plan(limits, Path("."), probe, None).applied)
        finally:
            if probe is not None:
                probe.remove()
