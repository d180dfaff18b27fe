"""`local` through bubblewrap: the namespace sandbox's layout as `bwrap` arguments (see namespaces.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from grader.sandbox.namespaces import Bind, Layout, Link, NamespaceSandbox

NAMESPACES = ("--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
              "--unshare-net", "--unshare-cgroup-try", "--hostname", "sandbox")
BIND_OPTIONS = {"ro": "--ro-bind", "rw": "--bind", "dev": "--dev-bind"}
HIDING_TMPFS_BYTES = 4096  # the empty tmpfs over a hidden folder


class BwrapSandbox(NamespaceSandbox):
    """The namespace sandbox, built by bubblewrap (`bwrap`, the path given)."""

    def __init__(self, bwrap: str) -> None:
        super().__init__()
        self.bwrap = bwrap

    def _command(self, layout: Layout, inner: list[str]) -> list[str]:
        if self.as_root and self.setpriv:
            inner = [*ipc_limits_prelude(layout), *inner]
        return [self.bwrap, *self.arguments(layout), *inner]

    def _tmpfs_bounds(self) -> str:
        if supports_size(self.bwrap):
            return "bytes by bwrap --size, inodes by the watchdog"
        return "by the watchdog: this bwrap has no --size"

    def arguments(self, layout: Layout) -> list[str]:
        """Bubblewrap's options that build `layout` (the command to run follows them)."""
        args = [*NAMESPACES, *([] if self.as_root else ["--unshare-user"])]
        folders = _Folders()
        for entry in layout.system:
            args += folders.mount(entry)
        args += ["--proc", "/proc", "--dev", "/dev"]
        sized = supports_size(self.bwrap)
        for tmpfs in layout.tmpfs:
            # RAM-backed, so bounded: bytes here (bwrap >= 0.5), inodes by the watchdog.
            args += ["--perms", tmpfs.mode, *(["--size", str(tmpfs.size)] if sized else []), "--tmpfs", tmpfs.path]
        folders.made |= {"/proc", "/dev", *(tmpfs.path for tmpfs in layout.tmpfs)}
        for bind in layout.binds:
            args += folders.mount(bind)
        for folder in layout.hidden:
            args += ["--perms", "0555", *(["--size", str(HIDING_TMPFS_BYTES)] if sized else []), "--tmpfs", folder,
                     "--remount-ro", folder]
        return [*args, "--chdir", layout.cwd]


class _Folders:
    """Each mount's missing parent folders, made 0755 first: bwrap would copy the host's modes (/root is 0700)."""

    def __init__(self) -> None:
        self.made: set[str] = {"/"}  # folders bwrap makes empty (what goes under them needs its parents made)
        self.bound: list[str] = []

    def mount(self, entry: Bind | Link) -> list[str]:
        """The options for `entry`, after those making its parents."""
        out: list[str] = []
        for parent in reversed(Path(entry.path).parents):
            text = str(parent)
            if text in self.made or any(text == b or text.startswith(b + "/") for b in self.bound):
                continue
            out += ["--perms", "0755", "--dir", text]
            self.made.add(text)
        self.bound.append(entry.path)
        if isinstance(entry, Link):
            return [*out, "--symlink", entry.target, entry.path]
        return [*out, BIND_OPTIONS[entry.access], entry.path, entry.path]


def ipc_limits_prelude(layout: Layout) -> list[str]:
    """A root shell inside the new IPC namespace that bounds its SysV memory, then execs the rest.

    A detached SysV segment is in no process's RSS; its namespace's sysctls bound it. Fails closed:
    if they cannot be written, the harness does not start.
    """
    script = " && ".join(f"echo {value} > /proc/sys/kernel/{name}" for name, value in layout.sysctls)
    return ["/bin/sh", "-c", f'{script} && exec "$@"', "sandbox-limits"]


_SIZE_SUPPORT: dict[str, bool] = {}


def supports_size(bwrap: str) -> bool:
    """Whether this bubblewrap takes `--size` before `--tmpfs` (0.5 and later)."""
    if bwrap not in _SIZE_SUPPORT:
        try:
            listing = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
            _SIZE_SUPPORT[bwrap] = "--size" in listing.stdout + listing.stderr
        except (OSError, subprocess.TimeoutExpired):
            _SIZE_SUPPORT[bwrap] = False
    return _SIZE_SUPPORT[bwrap]
