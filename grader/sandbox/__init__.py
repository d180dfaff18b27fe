"""Where student code runs: one small interface, one module per backend, registered by name.

The pipeline calls `Sandbox.start`; it never asks which backend it holds. Every backend mounts
paths at the same place inside as outside, so a plan written by the runner reads the same in all.

    process.py     `process`: a process group with rlimits and the watchdog, no isolation
    local.py       `local`: bubblewrap where it is installed, else (as root) the unshare fallback
    bwrap.py       `local` through bubblewrap
    unshare.py     `local`'s fallback: util-linux unshare, and mountns.py inside it
    docker.py      `docker`: one container per harness
    namespaces.py  what bwrap and unshare share: the layout (mounts, tmpfs, SysV bounds), the start, the record
    host.py        what the backends of this machine's processes share: limits, spawn, the process tree
    watchdog.py    the watchdog: a run sampled, and its tree killed past a limit, said in words
    procfs.py      what the watchdog reads of /proc and the filesystems, with no decision in it
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

NOBODY = 65534  # the uid and gid student code runs as, where the backend can switch users
HARNESS_PACKAGE = Path(__file__).resolve().parent.parent  # the grader package (the harness), not the repository


@dataclass(frozen=True)
class Limits:
    """Resource limits for one harness process tree."""

    memory_limit_bytes: int | None = 8 << 30  # host memory: by cgroup, else by the RSS watchdog (+ RLIMIT_DATA)
    processes: int | None = 512  # processes and threads: CUDA and OpenBLAS start a few per core
    open_files: int = 1024
    file_size_bytes: int = 1 << 30  # no single file larger than this
    output_bytes: int = 2 << 30  # the whole writable folder (a host folder: the machine's disk)
    output_files: int = 10_000  # entries (files, folders, links) in the writable folder
    tmp_bytes: int = 256 << 20  # each private tmpfs (/tmp, /dev/shm): RAM, outside the memory limit
    tmp_inodes: int = 10_000  # files in each private tmpfs (an inode costs kernel memory, not tmpfs bytes)
    # RLIMIT_DATA (private writable mappings) where no cgroup bounds memory, behind the watchdog.
    # Measured on an H200: a CUDA context (and CuPy, which harnesses imported then), kernels and copies
    # start under it (CUDA's large reservations are PROT_NONE) and a malloc past it fails. False: off.
    rlimit_data: bool = True
    watch_interval_s: float = 0.02  # how often the watchdog samples the tree's memory and tmpfs
    cpu_seconds: int | None = None
    log_bytes: int = 1 << 20  # stdout and stderr each keep this much; the rest is counted, not kept
    cpus: float | None = None  # CPU share (docker), None: all


@dataclass(frozen=True)
class Mounts:
    """What the process may read, the one folder it may write, and whether it sees the GPU."""

    read_only: tuple[Path, ...] = ()
    writable: Path | None = None
    gpu: bool = False
    # Python packages made importable inside (their folders, read-only), beside the interpreter's own
    # prefix: which ones is the caller's to say (a harness: its target's `python_packages`).
    python_packages: tuple[str, ...] = ()


# Which limit ended a run, as one word (hints choose by it; messages keep the words and values):
# host memory, processes/threads, the writable output folder, a private tmpfs, the time limit.
LimitKind = Literal["memory", "processes", "output", "tmp", "time"]


@dataclass(frozen=True)
class LimitHit:
    """A limit that ended a run: which one, and in words with its value ("exceeded the memory limit (1 GiB)")."""

    kind: LimitKind | None  # None: no limit of the code's, the grader's own fault (its watchdog failed)
    words: str

    # Each limit in words once, whichever backend or watchdog found it reached.
    @classmethod
    def memory(cls, memory_limit_bytes: int | None) -> LimitHit:
        """The memory limit reached: "exceeded the memory limit (1 GiB)"."""
        return cls("memory", f"exceeded the memory limit ({size_in_words(memory_limit_bytes or 0)})")

    @classmethod
    def processes(cls, limit: int | None) -> LimitHit:
        """The process/thread limit reached: "reached the process/thread limit (64)"."""
        return cls("processes", f"reached the process/thread limit ({limit})")


class Process(Protocol):
    applied: tuple[str, ...]  # the limits its start really applied, with their values

    def poll(self) -> int | None: ...
    def kill(self) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def limit_hit(self) -> str | None:
        """Which limit ended the run, in words ("exceeded the memory limit (1 GiB)"); read before `kill`."""
        ...
    def limit_kind(self) -> LimitKind | None:
        """The same limit as one word ("memory", "processes", ...), for what chooses by it; read before `kill`."""
        ...


class Sandbox(Protocol):
    name: str

    def start(self, command: list[str], *, cwd: Path, mounts: Mounts, limits: Limits,
              stdout: Path, stderr: Path, env: dict[str, str]) -> Process: ...

    def enforced(self, limits: Limits | None = None, gpu: bool = False) -> list[str]:
        """What the last `start` applied; with `limits` (or before any start), what a start would apply here."""
        ...


def in_mib(count: int) -> str:
    """Bytes as the enforcement record writes a limit: exact MiB where whole (4096 MiB), else in words."""
    return f"{count >> 20} MiB" if count % (1 << 20) == 0 else size_in_words(count)


def size_in_words(count: int) -> str:
    """Bytes as a person writes them: 4 GiB, 1.25 GiB, 256 MiB, 64 KiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            return f"{count / (1 << shift):.2f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{count} bytes"


# Each backend by the name `--sandbox` takes: its module and class, imported when first asked for.
BACKENDS = {"local": ("grader.sandbox.local", "LocalSandbox"), "docker": ("grader.sandbox.docker", "DockerSandbox"),
            "process": ("grader.sandbox.process", "ProcessSandbox")}
SANDBOX_NAMES = tuple(BACKENDS)


def sandbox_named(name: str) -> Sandbox:
    """A fresh backend of that name."""
    if name not in BACKENDS:
        raise ValueError(f"unknown sandbox {name!r} (have {', '.join(BACKENDS)})")
    module, backend = BACKENDS[name]
    return getattr(importlib.import_module(module), backend)()
