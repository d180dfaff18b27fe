"""Memory and process limits by cgroup, for one sandboxed run: v1 (memory + pids) or v2.

Only where this process may create groups (root, or a delegated v2 subtree); otherwise `create`
returns None and the backend falls back to its watchdog and rlimits, and says so in what it
enforced. `KERNEL_GRADER_NO_CGROUPS=1` forces that fallback on any machine (for tests and CI).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

from grader.sandbox import Limits, in_mib

ROOT = Path("/sys/fs/cgroup")
NO_CGROUPS = "KERNEL_GRADER_NO_CGROUPS"  # set to 1: behave as on a machine without writable cgroups


def cgroups_disabled() -> bool:
    return os.environ.get(NO_CGROUPS, "").strip() not in ("", "0")


def _own_path(controller: str) -> str:
    """This process's group in one v1 controller ('' for v2), from /proc/self/cgroup."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers.split(",") == [controller] or (controller == "" and controllers == ""):
                return path.lstrip("/")
    except OSError:
        pass
    return ""


class Cgroup:
    """One leaf group per run; `kill` empties it, `remove` deletes it."""

    def __init__(self, folders: list[Path], version: int, limits: Limits) -> None:
        self.folders = folders
        self.version = version
        self.limits = limits

    @classmethod
    def create(cls, limits: Limits) -> Cgroup | None:
        if cgroups_disabled():
            return None
        name = f"kernel-grader/{uuid.uuid4().hex[:12]}"
        if (ROOT / "memory" / "memory.limit_in_bytes").exists() or (ROOT / "memory").is_dir() and (ROOT / "pids").is_dir():
            folders = [ROOT / c / _own_path(c) / name for c in ("memory", "pids")]
            try:
                for folder in folders:
                    folder.mkdir(parents=True)
                if limits.memory_limit_bytes:
                    (folders[0] / "memory.limit_in_bytes").write_text(str(limits.memory_limit_bytes))
                    swap = folders[0] / "memory.memsw.limit_in_bytes"
                    if swap.exists():
                        swap.write_text(str(limits.memory_limit_bytes))
                if limits.processes:
                    (folders[1] / "pids.max").write_text(str(limits.processes))
            except OSError:
                cls(folders, 1, limits).remove()
                return None
            return cls(folders, 1, limits)
        if (ROOT / "cgroup.controllers").exists():
            folder = ROOT / _own_path("") / name
            try:
                folder.mkdir(parents=True)
                if limits.memory_limit_bytes:
                    (folder / "memory.max").write_text(str(limits.memory_limit_bytes))
                    (folder / "memory.swap.max").write_text("0")
                if limits.processes:
                    (folder / "pids.max").write_text(str(limits.processes))
            except OSError:
                cls([folder], 2, limits).remove()
                return None
            return cls([folder], 2, limits)
        return None

    @property
    def pids_folder(self) -> Path:
        """The group that counts its tasks (pids.current, pids.max)."""
        return self.folders[1] if self.version == 1 else self.folders[0]

    def attach_self(self) -> None:
        """Move the calling process into the group (run in the child before exec)."""
        for folder in self.folders:
            (folder / "cgroup.procs").write_text(str(os.getpid()))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for folder in self.folders:
            try:
                found |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return found

    def kill(self) -> None:
        """SIGKILL every process in the group until none is left (a fork bomb races the loop)."""
        for _ in range(200):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.005)

    def memory_exhausted(self) -> bool:
        """Whether the memory limit was reached (v1 failcnt, v2 oom events)."""
        try:
            if self.version == 1:
                control = (self.folders[0] / "memory.oom_control").read_text().split()
                killed = int(control[control.index("oom_kill") + 1]) if "oom_kill" in control else 0
                return killed > 0 or int((self.folders[0] / "memory.failcnt").read_text()) > 0
            events = (self.folders[0] / "memory.events").read_text().split()
            return int(events[events.index("oom_kill") + 1]) > 0
        except (OSError, ValueError):
            return False

    def processes_exhausted(self) -> bool:
        try:
            events = (self.pids_folder / "pids.events").read_text().split()
            return int(events[events.index("max") + 1]) > 0
        except (OSError, ValueError, IndexError):
            return False

    def remove(self) -> None:
        for folder in self.folders:
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)

    def enforced(self) -> list[str]:
        """The memory limit it holds, in words (the process limit's words are the backend's: it adds more)."""
        if not self.limits.memory_limit_bytes:
            return []
        swap_bounded = self.version == 2 or (self.folders[0] / "memory.memsw.limit_in_bytes").exists()
        swap = ", swap off" if swap_bounded else ""
        return [f"memory {in_mib(self.limits.memory_limit_bytes)} (cgroup v{self.version}{swap})"]


def pids_cgroup_of(pid: int) -> Path | None:
    """The pids cgroup a process is in, as this machine mounts it (a container's: its pids limit's counter)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        folder = ROOT / "pids" / path.lstrip("/") if "pids" in controllers.split(",") else \
            ROOT / path.lstrip("/") if controllers == "" else None
        if folder is not None and (folder / "pids.current").exists():
            return folder
    return None
