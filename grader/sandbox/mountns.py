"""Inside the unshare fallback's new namespaces (root only): build the layout that unshare.py wrote as SPEC_JSON.

    unshare --mount --net --pid --ipc --uts --fork --kill-child python .../mountns.py SPEC_JSON -- COMMAND...

Runs as root, first in the new namespaces: bounds the new IPC namespace's SysV memory, builds a
root of tmpfs with the layout's binds (read-only but for the writable ones), a fresh /proc, a
minimal /dev, every tmpfs bounded in bytes and inodes (they are RAM), an empty read-only tmpfs over
each hidden folder, brings up the loopback interface, chroots into it and execs COMMAND (which drops to the sandbox's uid with setpriv). It imports
nothing of the grader's: it runs as `python -I` on the file.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import socket
import struct
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
NEW_ROOT = "/mnt"  # any existing folder: the tmpfs mounted on it exists only in this mount namespace
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(source and source.encode(), target.encode(), kind and kind.encode(), flags,
                   data and data.encode()) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {source} on {target}: {os.strerror(error)}")


def _place(source: str, target: str) -> None:
    """An empty folder or file at `target` to mount `source` over."""
    if os.path.isdir(source):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if not os.path.exists(target):
            open(target, "w").close()


def _bind(source: str, target: str, read_only: bool) -> None:
    _place(source, target)
    _mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, request))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 1))  # SIOCSIFFLAGS, IFF_UP


def _tmpfs(spec: dict, size: int, mode: str) -> str:
    """Mount options of one private tmpfs: its mode and its bounds."""
    return f"mode={mode},size={size},nr_inodes={spec['inodes']}"


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    command = argv[argv.index("--") + 1:]
    for name, value in spec["sysctls"].items():  # the IPC namespace's own: a detached segment is in no RSS
        with open(f"/proc/sys/kernel/{name}", "w") as setting:
            setting.write(str(value))
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, _tmpfs(spec, *spec["root"]))
    for link, target in spec["links"]:
        os.symlink(target, NEW_ROOT + link)
    os.makedirs(NEW_ROOT + "/proc", exist_ok=True)
    _mount("proc", NEW_ROOT + "/proc", "proc", MS_NOSUID | MS_NODEV)
    os.makedirs(NEW_ROOT + "/dev", exist_ok=True)
    _mount("tmpfs", NEW_ROOT + "/dev", "tmpfs", MS_NOSUID, _tmpfs(spec, *spec["dev"]))
    for device in [f"/dev/{d}" for d in DEVICES] + spec["devices"]:
        if os.path.exists(device):
            _bind(device, NEW_ROOT + device, False)
    for folder, size, mode in spec["tmpfs"]:
        os.makedirs(NEW_ROOT + folder, exist_ok=True)
        _mount("tmpfs", NEW_ROOT + folder, "tmpfs", MS_NOSUID | MS_NODEV, _tmpfs(spec, size, mode))
    # Binds after the tmpfs folders: a bind under /tmp (the run's plan) must sit on top of the private /tmp.
    for source in spec["read_only"]:
        if os.path.exists(source):
            _bind(source, NEW_ROOT + source, True)
    for source in spec["writable"]:
        _bind(source, NEW_ROOT + source, False)
    for folder in spec.get("hidden", ()):  # an empty read-only tmpfs over what the sandbox must not see
        if os.path.isdir(NEW_ROOT + folder):
            _mount("tmpfs", NEW_ROOT + folder, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0555,size=4096,nr_inodes=16")
    _loopback_up()
    os.chroot(NEW_ROOT)
    os.chdir(spec["cwd"])
    # This launcher stays the PID namespace's init; the command runs as its child. As init, the command would ignore
    # its own abort() (a signal from inside the namespace to its init is dropped: glibc then faults, and SIGABRT read
    # as SIGSEGV), and unshare does not pass a signal's death on (it exits 1). So the command's status is said here,
    # as bubblewrap says it: 128 + N for a death by signal N (HostProcess(reaped=True) reads it back).
    child = os.fork()
    if child == 0:
        try:
            os.execvp(command[0], command)
        finally:
            os._exit(127)
    return _reaped_until(child)


def _reaped_until(child: int) -> int:
    """Reap every process of the namespace (orphans come to its init) until `child` ends; its status, as an exit code."""
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 127
        except InterruptedError:
            continue
        if pid == child:
            return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
