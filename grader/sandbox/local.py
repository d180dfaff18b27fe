"""The `local` backend: a subprocess in new namespaces (bubblewrap), as nobody, with rlimits and cgroups.

Inside: only loopback (a network namespace with no route out), a private /tmp, its own PID, IPC
and UTS namespaces; the system's /usr, the Python the grader runs on and the paths the runner
names, read-only; one writable folder. When a run ends, its PID namespace and cgroup are killed.
With the GPU requested, /dev/nvidia* and /sys are passed through. Without bubblewrap, root gets
the same sandbox from util-linux `unshare` and `mountns.py`.

Memory and processes are bounded by a cgroup where one can be made; otherwise by the watchdog
(`watchdog.py`: the tree's resident memory, sampled every 20 ms, and as root its threads) and
rlimits (RLIMIT_DATA, RLIMIT_NPROC as a user other than root). The watchdog also
bounds the writable folder and the private tmpfs mounts, everywhere. Each start records what it
applied (`LocalProcess.applied`), and `enforced()` reports the last start's record.

`ProcessSandbox` (`--sandbox process`) is the fallback without bubblewrap: a process group with
rlimits, the watchdog and a clean environment, nothing more.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.sandbox import NOBODY, LimitHit, LimitKind, Limits, Mounts, in_mib, size_in_words
from grader.sandbox.cgroups import Cgroup
from grader.sandbox.streams import CappedLog, drain
from grader.sandbox.watchdog import Watch, Watchdog, kill_tree

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What the dynamic loader, Python and compilers read from /etc; never shadow, sudoers or keys.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "nsswitch.conf", "localtime",
             "passwd", "group", "hosts")
PYTHON_PACKAGES = ("numpy", "cupy", "cupy_backends", "fastrlock", "cuda")
PAGE = os.sysconf("SC_PAGE_SIZE")
RUN_TMPFS_BYTES = 16 << 20  # the private /run holds a socket or two
DEV_TMPFS_BYTES = 1 << 20  # the unshare fallback's /dev: device nodes only
# RLIMIT_DATA sits this far above the memory limit: the watchdog kills at the limit and says so;
# the rlimit is the hard stop for an allocation faster than the watchdog's sampling.
DATA_HEADROOM = 256 << 20
SYSV_QUEUES = 16  # SysV message queues per sandbox (each holds 16 KiB); shared memory gets tmp_bytes


class LocalProcess:
    def __init__(self, popen: subprocess.Popen, threads: list, applied: list[str], cgroup: Cgroup | None = None,
                 reaped: bool = False, watch: Watch | None = None, session: int | None = None) -> None:
        self._popen = popen
        self._threads = threads
        self._cgroup = cgroup
        self._reaped = reaped  # bwrap's init reports a child killed by signal N as status 128 + N
        self._session = session  # without a PID namespace: the session's processes are the tree too
        self._lock = threading.Lock()  # the root is reaped (its pid freed) only while the watchdog cannot kill
        self.applied = tuple(applied)
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
        if self._cgroup is None:
            return None
        if self._cgroup.memory_exhausted():
            return LimitHit("memory", f"exceeded the memory limit ({size_in_words(self._cgroup.limits.memory_bytes or 0)})")
        if self._cgroup.processes_exhausted():
            # A fork or thread creation failed at pids.max: the code may go on (and spin until its time limit).
            return LimitHit("processes", f"reached the process/thread limit ({self._cgroup.limits.processes})")
        return None


@dataclass
class _Plan:
    """What one start applies: rlimits for the child, the watchdog's bounds, and the record of both."""

    rlimits: list[tuple[int, int]] = field(default_factory=list)
    watch: Watch = field(default_factory=Watch)
    applied: list[str] = field(default_factory=list)


def data_limit(limits: Limits) -> int:
    """RLIMIT_DATA for a memory limit: above it by a margin (see DATA_HEADROOM)."""
    memory = limits.memory_bytes or 0
    return memory + max(DATA_HEADROOM, memory // 4)


def _plan_limits(limits: Limits, gpu: bool, cgroup: Cgroup | None, writable: Path | None,
                 watch_tmpfs: bool) -> _Plan:
    """The limits every local backend applies, and their record (the namespaces are the caller's to add)."""
    plan = _Plan()
    root = os.getuid() == 0
    plan.rlimits += [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, limits.open_files),
                     (resource.RLIMIT_FSIZE, limits.file_size_bytes)]
    if limits.cpu_seconds:
        plan.rlimits.append((resource.RLIMIT_CPU, limits.cpu_seconds))
    watch: dict = {"interval_s": limits.watch_interval_s}
    if cgroup is not None:
        plan.applied += cgroup.enforced()
    elif limits.memory_bytes:
        watch["memory_bytes"] = limits.memory_bytes
        how = f"RSS watchdog every {limits.watch_interval_s * 1000:.0f} ms"
        if limits.rlimit_data:
            plan.rlimits.append((resource.RLIMIT_DATA, data_limit(limits)))
            how += f" + RLIMIT_DATA {in_mib(data_limit(limits))}"
        plan.applied.append(f"memory {in_mib(limits.memory_bytes)} ({how}; no cgroup)")
    else:
        plan.applied.append("memory: no limit")
    if limits.processes:
        if not root:
            # Counted per user (the grader's own processes too), in the sandbox's user namespace.
            plan.rlimits.append((resource.RLIMIT_NPROC, limits.processes))
            if cgroup is None:
                plan.applied.append(f"processes/threads {limits.processes} (RLIMIT_NPROC, counted per user)")
        elif cgroup is None:
            # Not RLIMIT_NPROC as root: every sandbox runs as nobody, and would share that count.
            watch["tasks"] = limits.processes
            plan.applied.append(f"processes/threads {limits.processes} (watchdog: the tree is killed past it)")
    if writable is not None:
        watch.update(output=writable, output_bytes=limits.output_bytes, output_files=limits.output_files)
    if watch_tmpfs:
        watch.update(tmpfs_bytes=limits.tmp_bytes, tmpfs_inodes=limits.tmp_inodes)
    plan.watch = Watch(**watch)
    plan.applied += plan.watch.describe()
    plan.applied += ["no core dumps", f"open files {limits.open_files}",
                     f"file size {size_in_words(limits.file_size_bytes)}"]
    if limits.cpu_seconds:
        plan.applied.append(f"CPU time {limits.cpu_seconds} s (RLIMIT_CPU)")
    plan.applied += [f"stdout/stderr capped at {size_in_words(limits.log_bytes)} each",
                     "clean environment (no secrets)"]
    return plan


def _rlimits(plan: _Plan):
    def apply() -> None:
        for kind, value in plan.rlimits:
            resource.setrlimit(kind, (value, value))
    return apply


def _spawn(command: list[str], cwd: Path, env: dict[str, str], stdout: Path, stderr: Path, limits: Limits,
           before_exec) -> tuple[subprocess.Popen, list]:
    popen = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, env=env, start_new_session=True, preexec_fn=before_exec)
    threads = [drain(popen.stdout, CappedLog(stdout, limits.log_bytes)),  # type: ignore[arg-type]
               drain(popen.stderr, CappedLog(stderr, limits.log_bytes))]  # type: ignore[arg-type]
    return popen, threads


class ProcessSandbox:
    """A process group with rlimits and the watchdog: no isolation of files or network (the fallback)."""

    name = "process"

    def __init__(self) -> None:
        self._applied: tuple[str, ...] | None = None

    def _plan(self, limits: Limits, mounts: Mounts) -> _Plan:
        plan = _plan_limits(limits, mounts.gpu, None, mounts.writable, watch_tmpfs=False)
        plan.applied[:0] = ["own session and process group (the session is killed as a whole)"]
        return plan

    def start(self, command: list[str], *, cwd: Path, mounts: Mounts, limits: Limits,
              stdout: Path, stderr: Path, env: dict[str, str]) -> LocalProcess:
        plan = self._plan(limits, mounts)
        popen, threads = _spawn(command, cwd, env, stdout, stderr, limits, _rlimits(plan))
        # start_new_session: the session's id is the root's pid.
        process = LocalProcess(popen, threads, plan.applied, watch=replace(plan.watch, session=popen.pid),
                               session=popen.pid)
        self._applied = process.applied
        return process

    def enforced(self, limits: Limits | None = None, gpu: bool = False) -> list[str]:
        if limits is None and self._applied is not None:
            return list(self._applied)
        return self._plan(limits or Limits(), Mounts(writable=Path("."), gpu=gpu)).applied


def _package_roots() -> list[Path]:
    """Where the harness's imports live: the interpreter's prefixes and NumPy/CuPy's folders."""
    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent.parent}
    for name in PYTHON_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin:
            roots.add(Path(spec.origin).resolve().parent.parent)
    return sorted(r for r in roots if not str(r).startswith(SYSTEM_DIRS) and r.is_dir())


class NamespaceSandbox:
    """Bubblewrap namespaces + a drop to nobody + rlimits + cgroups or the watchdog (see the module docstring)."""

    name = "local"

    def __init__(self) -> None:
        self.bwrap = shutil.which("bwrap")
        self.as_root = os.geteuid() == 0
        self.setpriv = shutil.which("setpriv")
        self._applied: tuple[str, ...] | None = None

    def start(self, command: list[str], *, cwd: Path, mounts: Mounts, limits: Limits,
              stdout: Path, stderr: Path, env: dict[str, str]) -> LocalProcess:
        if self.bwrap is None and not self._can_unshare():
            from grader.errors import GraderError

            raise GraderError("the local sandbox needs bubblewrap (`apt-get install bubblewrap`), or root with "
                              "util-linux's unshare; or choose --sandbox docker, or --sandbox process (no isolation)")
        cgroup = Cgroup.create(limits)
        plan = self._plan(limits, mounts, cgroup)
        if self.as_root:
            for path in mounts.read_only:
                make_readable(path)
            if mounts.writable is not None:
                _give_to_nobody(mounts.writable)
        arguments = self._bwrap_arguments(cwd, mounts, limits)
        inner = list(command)
        if self.as_root and self.setpriv:
            # bwrap runs as root without a user namespace (so it can bind anything); the code runs as nobody.
            inner = [self.setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--no-new-privs",
                     "--inh-caps=-all", "--bounding-set=-all", "--", *inner]
            if self.bwrap:
                inner = [*_ipc_limits_prelude(limits), *inner]
        rlimits = _rlimits(plan)

        def before_exec() -> None:
            if cgroup is not None:
                cgroup.attach_self()
            rlimits()

        wrapped = [self.bwrap, *arguments, *inner] if self.bwrap else _unshare_command(arguments, cwd, inner, limits)
        try:
            popen, threads = _spawn(wrapped, cwd, env, stdout, stderr, limits, before_exec)
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            raise
        process = LocalProcess(popen, threads, plan.applied, cgroup, reaped=True, watch=plan.watch)
        self._applied = process.applied
        return process

    def _can_unshare(self) -> bool:
        return self.as_root and self.setpriv is not None and shutil.which("unshare") is not None

    def _bwrap_sizes_tmpfs(self) -> bool:
        return self.bwrap is not None and _supports_size(self.bwrap)

    def _plan(self, limits: Limits, mounts: Mounts, cgroup: Cgroup | None) -> _Plan:
        plan = _plan_limits(limits, mounts.gpu, cgroup, mounts.writable, watch_tmpfs=True)
        isolation = ["network namespace (loopback only, no route out)", "mount namespace: read-only system, "
                     "inputs and library; one writable output folder", "PID/IPC/UTS namespaces",
                     "whole tree killed at the end"]
        if self.as_root and self.setpriv:
            isolation.append(f"runs as nobody ({NOBODY}), no capabilities, no-new-privs")
        else:
            isolation.append("user namespace, no capabilities")
        tmpfs = f"private /tmp, /dev/shm: tmpfs {in_mib(limits.tmp_bytes)}, {limits.tmp_inodes} inodes each"
        if self.bwrap is None:
            tmpfs += " (tmpfs size=, nr_inodes=)"
        elif self._bwrap_sizes_tmpfs():
            tmpfs += " (bytes by bwrap --size, inodes by the watchdog)"
        else:
            tmpfs += " (by the watchdog: this bwrap has no --size)"
        isolation.append(tmpfs)
        if self.as_root:
            isolation.append(f"SysV shared memory {in_mib(limits.tmp_bytes)}, {SYSV_QUEUES} message queues "
                             "(IPC namespace sysctls)")
        plan.applied[:0] = isolation
        return plan

    def _bwrap_arguments(self, cwd: Path, mounts: Mounts, limits: Limits = Limits()) -> list[str]:
        args = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                "--unshare-net", "--unshare-cgroup-try", "--hostname", "sandbox"]
        if not self.as_root:
            args += ["--unshare-user"]
        for folder in SYSTEM_DIRS:
            if os.path.islink(folder):
                args += ["--symlink", os.readlink(folder), folder]
            elif os.path.isdir(folder):
                args += ["--ro-bind", folder, folder]
        for name in ETC_FILES:
            if os.path.exists(f"/etc/{name}"):
                args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        # RAM-backed, so bounded: bytes here (bwrap >= 0.5), inodes by the watchdog.
        sized = self._bwrap_sizes_tmpfs()
        for folder, size in (("/dev/shm", limits.tmp_bytes), ("/tmp", limits.tmp_bytes),
                             ("/run", min(limits.tmp_bytes, RUN_TMPFS_BYTES))):
            args += ["--perms", "1777" if folder != "/run" else "0755"]
            args += ["--size", str(size)] if sized else []
            args += ["--tmpfs", folder]
        for root in _package_roots():
            args += ["--ro-bind", str(root), str(root)]
        for entry in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
            if entry and os.path.isdir(entry) and not entry.startswith(SYSTEM_DIRS):
                args += ["--ro-bind", entry, entry]
        if mounts.gpu:
            for device in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*")):
                args += ["--dev-bind", device, device]
            args += ["--ro-bind", "/sys", "/sys"]
            # The persistence daemon's socket lives under /run, which is private here: without it every
            # harness may initialise the GPU from scratch, which takes seconds on a large card.
            if os.path.isdir("/run/nvidia-persistenced"):
                args += ["--bind", "/run/nvidia-persistenced", "/run/nvidia-persistenced"]
            for extra in ("/opt", "/etc/OpenCL", "/proc/driver/nvidia"):
                if os.path.isdir(extra) and extra != "/proc/driver/nvidia":
                    args += ["--ro-bind", extra, extra]
        package = Path(__file__).resolve().parent.parent  # the harness itself, not the repository around it
        args += ["--ro-bind", str(package), str(package)]
        for path in mounts.read_only:
            args += ["--ro-bind", str(path), str(path)]
        if mounts.writable is not None:
            args += ["--bind", str(mounts.writable), str(mounts.writable)]
        args += ["--chdir", str(cwd)]
        return _with_parent_folders(args)

    def enforced(self, limits: Limits | None = None, gpu: bool = False) -> list[str]:
        """What the last start applied; else (or with `limits`) what a start would apply here."""
        if self.bwrap is None and not self._can_unshare():
            return ["nothing: bubblewrap is not installed"]
        if limits is None and self._applied is not None:
            return list(self._applied)
        limits = limits or Limits()
        probe = Cgroup.create(limits)
        try:
            return self._plan(limits, Mounts(writable=Path("."), gpu=gpu), probe).applied
        finally:
            if probe is not None:
                probe.remove()


_SIZE_SUPPORT: dict[str, bool] = {}


def _supports_size(bwrap: str) -> bool:
    """Whether this bubblewrap takes `--size` before `--tmpfs` (0.5 and later)."""
    if bwrap not in _SIZE_SUPPORT:
        try:
            listing = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
            _SIZE_SUPPORT[bwrap] = "--size" in listing.stdout + listing.stderr
        except (OSError, subprocess.TimeoutExpired):
            _SIZE_SUPPORT[bwrap] = False
    return _SIZE_SUPPORT[bwrap]


def _ipc_limits_prelude(limits: Limits) -> list[str]:
    """A root shell inside the new IPC namespace that bounds its SysV memory, then execs the rest.

    A detached SysV segment is in no process's RSS; its namespace's sysctls bound it. Fails closed:
    if they cannot be written, the harness does not start.
    """
    settings = {"shmmax": limits.tmp_bytes, "shmall": max(1, limits.tmp_bytes // PAGE), "msgmni": SYSV_QUEUES}
    script = " && ".join(f"echo {value} > /proc/sys/kernel/{name}" for name, value in settings.items())
    return ["/bin/sh", "-c", f'{script} && exec "$@"', "sandbox-limits"]


def _unshare_command(arguments: list[str], cwd: Path, inner: list[str], limits: Limits = Limits()) -> list[str]:
    """The same namespaces and mounts without bubblewrap: util-linux unshare + grader/sandbox/mountns.py (root)."""
    from grader.sandbox import mountns

    spec: dict = {"binds": [], "writable": [], "devices": [], "symlinks": [], "cwd": str(cwd),
                  "tmpfs": {"/dev/shm": limits.tmp_bytes, "/tmp": limits.tmp_bytes,
                            "/run": min(limits.tmp_bytes, RUN_TMPFS_BYTES), "/dev": DEV_TMPFS_BYTES,
                            "/": limits.tmp_bytes},
                  "inodes": limits.tmp_inodes,
                  "sysctls": {"shmmax": limits.tmp_bytes, "shmall": max(1, limits.tmp_bytes // PAGE),
                              "msgmni": SYSV_QUEUES}}
    i = 0
    while i < len(arguments):
        option = arguments[i]
        if option == "--ro-bind":
            spec["binds"].append((arguments[i + 1], True))
        elif option == "--bind":
            spec["writable"].append(arguments[i + 1])
        elif option == "--dev-bind":
            spec["devices"].append(arguments[i + 1])
        elif option == "--symlink":
            spec["symlinks"].append((arguments[i + 2], arguments[i + 1]))
        i += 3 if option in ("--ro-bind", "--bind", "--dev-bind", "--symlink") else 1
    unshare = shutil.which("unshare") or "unshare"
    return [unshare, "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", sys.executable, "-I",
            mountns.__file__, json.dumps(spec), "--", *inner]


def _with_parent_folders(args: list[str]) -> list[str]:
    """Create each bind's missing parents as 0755 first: bwrap would copy the host's modes (/root is 0700)."""
    out: list[str] = []
    made: set[str] = {"/"}
    bound: list[str] = []
    i = 0
    while i < len(args):
        option = args[i]
        if option in ("--ro-bind", "--bind", "--dev-bind", "--symlink"):
            destination = args[i + 2]
            for parent in reversed(Path(destination).parents):
                text = str(parent)
                if text in made or any(text == b or text.startswith(b + "/") for b in bound):
                    continue
                out += ["--perms", "0755", "--dir", text]
                made.add(text)
            bound.append(destination)
            out += args[i:i + 3]
            i += 3
            continue
        if option in ("--tmpfs", "--proc", "--dev", "--dir"):
            made.add(args[i + 1])  # an empty folder of bwrap's: what goes under it needs its parents made
            out += args[i:i + 2]
            i += 2
            continue
        out.append(option)
        i += 1
    return out


def make_readable(path: Path) -> None:
    """Let nobody read a path it is given read-only (a umask of 077 would hide the runner's own files)."""
    import stat

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


def _give_to_nobody(folder: Path) -> None:
    """The writable folder (and what the runner put in it) belongs to the sandbox's user."""
    for root, dirs, files in os.walk(folder):
        os.chown(root, NOBODY, NOBODY)
        for name in files:
            os.chown(os.path.join(root, name), NOBODY, NOBODY)


# The default until the namespace sandbox has passed the whole suite (then it becomes `LocalSandbox`).
LocalSandbox = NamespaceSandbox
