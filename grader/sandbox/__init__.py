"""Where student code runs: one small interface, one class per backend.

The pipeline calls `Sandbox.start`; it never asks which backend it holds. Every backend mounts
paths at the same place inside as outside, so a plan written by the runner reads the same in both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

NOBODY = 65534  # the uid and gid student code runs as, where the backend can switch users


@dataclass(frozen=True)
class Limits:
    """Resource limits for one harness process tree."""

    memory_bytes: int | None = 8 << 30  # host memory, by cgroup (an address-space cap would break CUDA)
    processes: int | None = 512  # processes and threads: CUDA and OpenBLAS start a few per core
    open_files: int = 1024
    file_size_bytes: int = 1 << 30  # no single file larger than this
    output_bytes: int = 2 << 30  # the whole writable folder
    cpu_seconds: int | None = None
    log_bytes: int = 1 << 20  # stdout and stderr each keep this much; the rest is counted, not kept
    cpus: float | None = None  # CPU share (docker), None: all


@dataclass(frozen=True)
class Mounts:
    """What the process may read, the one folder it may write, and whether it sees the GPU."""

    read_only: tuple[Path, ...] = ()
    writable: Path | None = None
    gpu: bool = False


class Process(Protocol):
    def poll(self) -> int | None: ...
    def kill(self) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...


class Sandbox(Protocol):
    name: str

    def start(self, command: list[str], *, cwd: Path, mounts: Mounts, limits: Limits,
              stdout: Path, stderr: Path, env: dict[str, str]) -> Process: ...

    def enforced(self) -> list[str]:
        """The limits this backend really enforces here, for the result."""
        ...


def sandbox_named(name: str) -> Sandbox:
    from grader.sandbox.docker import DockerSandbox
    from grader.sandbox.local import LocalSandbox, ProcessSandbox

    backends = {"local": LocalSandbox, "docker": DockerSandbox, "process": ProcessSandbox}
    if name not in backends:
        raise ValueError(f"unknown sandbox {name!r} (have {', '.join(backends)})")
    return backends[name]()  # type: ignore[return-value]


SANDBOX_NAMES = ("local", "docker", "process")
