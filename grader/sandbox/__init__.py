"""Where student code runs: one small interface, one class per backend.

The pipeline calls `Sandbox.start`; it never asks which backend it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Limits:
    """Resource limits for one harness process tree."""

    memory_bytes: int | None = None  # host memory; None where only cgroups could enforce it
    processes: int | None = None
    open_files: int = 1024
    file_size_bytes: int = 4 << 30  # no single output file larger than this
    cpu_seconds: int | None = None


@dataclass(frozen=True)
class Mounts:
    """What the process may read and the one folder it may write."""

    read_only: tuple[Path, ...] = ()
    writable: Path | None = None


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
    from grader.sandbox.local import LocalSandbox

    backends = {"local": LocalSandbox}
    if name not in backends:
        raise ValueError(f"unknown sandbox {name!r} (have {', '.join(backends)})")
    return backends[name]()
