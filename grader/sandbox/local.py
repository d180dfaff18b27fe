"""The `local` backend: a subprocess in new namespaces (bubblewrap), as nobody, with rlimits and cgroups.

Inside: only loopback (a network namespace with no route out), a private /tmp, its own PID, IPC
and UTS namespaces; the system's /usr, the Python the grader runs on and the paths the runner
names, read-only; one writable folder. When a run ends, its PID namespace and cgroup are killed.
With the GPU requested, /dev/nvidia* and /sys are passed through. Without bubblewrap, root gets
the same sandbox from util-linux `unshare` and `mountns.py`.

`ProcessSandbox` (`--sandbox process`) is the fallback without bubblewrap: a process group with
rlimits and a clean environment, nothing more.
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
from pathlib import Path

from grader.sandbox import NOBODY, Limits, Mounts
from grader.sandbox.cgroups import Cgroup
from grader.sandbox.streams import CappedLog, drain

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What the dynamic loader, Python and compilers read from /etc; never shadow, sudoers or keys.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "nsswitch.conf", "localtime",
             "passwd", "group", "hosts")
PYTHON_PACKAGES = ("numpy", "cupy", "cupy_backends", "fastrlock", "cuda")


class LocalProcess:
    def __init__(self, popen: subprocess.Popen, threads: list, cgroup: Cgroup | None = None,
                 reaped: bool = False) -> None:
        self._popen = popen
        self._threads = threads
        self._cgroup = cgroup
        self._reaped = reaped  # bwrap's init reports a child killed by signal N as status 128 + N

    def _status(self, code: int | None) -> int | None:
        if code is not None and self._reaped and 128 < code < 128 + 65:
            return -(code - 128)
        return code

    def poll(self) -> int | None:
        return self._status(self._popen.poll())

    def wait(self, timeout: float | None = None) -> int:
        return self._status(self._popen.wait(timeout))  # type: ignore[return-value]

    def kill(self) -> None:
        """Kill the whole tree: the process group, the PID namespace (via its init) and the cgroup."""
        try:
            os.killpg(self._popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._popen.wait()
        if self._cgroup is not None:
            self._cgroup.kill()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._cgroup is not None:
            self._cgroup.remove()

    def limit_hit(self) -> str | None:
        """Which limit, if any, ended the run (read before `kill`)."""
        if self._cgroup is None:
            return None
        if self._cgroup.memory_exhausted():
            return f"reached the memory limit ({(self._cgroup.limits.memory_bytes or 0) >> 20} MiB)"
        if self._cgroup.processes_exhausted():
            return f"reached the process/thread limit ({self._cgroup.limits.processes})"
        return None


def _rlimits(limits: Limits, address_space: bool):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes))
        if limits.cpu_seconds:
            resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
        if address_space and limits.memory_bytes:
            # Only without a GPU: CUDA reserves a huge virtual range that an address-space cap breaks.
            resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        if limits.processes and os.getuid() != 0:
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    return apply


def _spawn(command: list[str], cwd: Path, env: dict[str, str], stdout: Path, stderr: Path, limits: Limits,
           before_exec) -> tuple[subprocess.Popen, list]:
    popen = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, env=env, start_new_session=True, preexec_fn=before_exec)
    threads = [drain(popen.stdout, CappedLog(stdout, limits.log_bytes)),  # type: ignore[arg-type]
               drain(popen.stderr, CappedLog(stderr, limits.log_bytes))]  # type: ignore[arg-type]
    return popen, threads


class ProcessSandbox:
    """A process group with rlimits: no isolation of files or network (the fallback)."""

    name = "process"

    def start(self, command: list[str], *, cwd: Path, mounts: Mounts, limits: Limits,
              stdout: Path, stderr: Path, env: dict[str, str]) -> LocalProcess:
        popen, threads = _spawn(command, cwd, env, stdout, stderr, limits, _rlimits(limits, address_space=False))
        return LocalProcess(popen, threads)

    def enforced(self) -> list[str]:
        return ["own process group (killed as a whole)", "no core dumps", "open-file limit", "output file-size limit",
                "stdout/stderr capped", "clean environment (no secrets)"]


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
    """Bubblewrap namespaces + a drop to nobody + rlimits + cgroups (see the module docstring)."""

    name = "local"

    def __init__(self) -> None:
        self.bwrap = shutil.which("bwrap")
        self.as_root = os.geteuid() == 0
        self.setpriv = shutil.which("setpriv")
        self._cgroups_work: bool | None = None

    def start(self, command: list[str], *, cwd: Path, mounts: Mounts, limits: Limits,
              stdout: Path, stderr: Path, env: dict[str, str]) -> LocalProcess:
        if self.bwrap is None and not self._can_unshare():
            from grader.errors import GraderError

            raise GraderError("the local sandbox needs bubblewrap (`apt-get install bubblewrap`), or root with "
                              "util-linux's unshare; or choose --sandbox docker, or --sandbox process (no isolation)")
        cgroup = Cgroup.create(limits)
        self._cgroups_work = cgroup is not None
        if self.as_root:
            for path in mounts.read_only:
                make_readable(path)
            if mounts.writable is not None:
                _give_to_nobody(mounts.writable)
        arguments = self._bwrap_arguments(cwd, mounts)
        inner = list(command)
        if self.as_root and self.setpriv:
            # bwrap runs as root without a user namespace (so it can bind anything); the code runs as nobody.
            inner = [self.setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--no-new-privs",
                     "--inh-caps=-all", "--bounding-set=-all", "--", *inner]
        rlimits = _rlimits(limits, address_space=cgroup is None and not mounts.gpu)

        def before_exec() -> None:
            if cgroup is not None:
                cgroup.attach_self()
            rlimits()

        wrapped = [self.bwrap, *arguments, *inner] if self.bwrap else _unshare_command(arguments, cwd, inner)
        popen, threads = _spawn(wrapped, cwd, env, stdout, stderr, limits, before_exec)
        return LocalProcess(popen, threads, cgroup, reaped=True)

    def _can_unshare(self) -> bool:
        return self.as_root and self.setpriv is not None and shutil.which("unshare") is not None

    def _bwrap_arguments(self, cwd: Path, mounts: Mounts) -> list[str]:
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
        args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm", "--perms", "1777", "--tmpfs", "/tmp", "--tmpfs", "/run"]
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

    def enforced(self) -> list[str]:
        if self.bwrap is None and not self._can_unshare():
            return ["nothing: bubblewrap is not installed"]
        enforced = ["network namespace (loopback only, no route out)", "mount namespace: read-only system, "
                    "inputs and library; one writable output folder", "private /tmp", "PID/IPC/UTS namespaces",
                    "whole tree killed at the end"]
        if self.as_root and self.setpriv:
            enforced.append(f"runs as nobody ({NOBODY}), no capabilities, no-new-privs")
        else:
            enforced.append("user namespace, no capabilities")
        limits = Limits()
        cgroup = Cgroup.create(limits) if self._cgroups_work is None else None
        works = self._cgroups_work if self._cgroups_work is not None else cgroup is not None
        if cgroup is not None:
            cgroup.remove()
        if works:
            enforced.append("memory and processes/threads by cgroup")
        else:
            enforced.append("no cgroup (not writable here): processes by RLIMIT_NPROC, memory by RLIMIT_AS (CPU only)")
        enforced += ["no core dumps", "open-file limit", "file-size limit", "stdout/stderr capped",
                     "clean environment (no secrets)"]
        return enforced


def _unshare_command(arguments: list[str], cwd: Path, inner: list[str]) -> list[str]:
    """The same namespaces and mounts without bubblewrap: util-linux unshare + grader/sandbox/mountns.py (root)."""
    from grader.sandbox import mountns

    spec: dict = {"binds": [], "writable": [], "devices": [], "symlinks": [], "cwd": str(cwd)}
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
