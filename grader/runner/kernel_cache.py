"""A compiled-kernel cache carried from one harness to the next of the same submission (a runtime's that compiles
kernels at run time into a folder a variable names: `Runtime.kernel_cache_env`, CuPy's).

CuPy compiles each elementwise and reduction kernel with NVRTC on its first use and keeps the binary in its cache
folder, which is the harness's home: fresh for every harness, so every harness paid the compiles again (~4 s on an
H200 for the sparse assignment's first call; a sweep starts one timing harness per case). Here the folder is copied into
each harness's home before it starts and what it compiled is copied back after it ends, so that the submission's
later harnesses find it.

Only ever between the harnesses of one submission: what one harness leaves there (it runs the student's code, which
can write anything into its home) is read by that same student's later harnesses alone, never by another
submission's or the reference's. Taking back reads regular files only (no links), of bounded number and size.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grader.boundary.runtimes import runtimes_of
from grader.targets import Target

FOLDER = ".kernel-cache"  # the cache's folder in a harness's home
# CuPy's cache files are named by a hash and an extension (<hex>_2.0.cubin); anything else is not taken back.
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
MAX_FILES, MAX_FILE_BYTES, MAX_TOTAL_BYTES = 2000, 16 << 20, 256 << 20


class KernelCache:
    """One submission's cache folder, filled from and into its harnesses' homes (thread-safe: a submission's
    kernels run in parallel slots)."""

    def __init__(self, folder: Path, variables: tuple[str, ...]) -> None:
        self.folder = folder
        self.variables = variables  # the runtimes' variables that name where they keep their compiled kernels
        self._lock = threading.Lock()

    def env(self, home: Path) -> dict[str, str]:
        """The harness's environment entries that point the runtimes at the cache's copy in `home`."""
        return {variable: str(home / FOLDER) for variable in self.variables}

    def seed(self, home: Path) -> None:
        """The cache's files copied into `home` before a harness starts there."""
        target = home / FOLDER
        target.mkdir(exist_ok=True)
        with self._lock:
            for path in self.folder.iterdir():
                shutil.copyfile(path, target / path.name)

    def take_back(self, home: Path) -> None:
        """The regular files a harness left in its copy, added to the cache (existing names kept: the first
        compile of a kernel is as good as a later one)."""
        source = home / FOLDER
        try:
            if not stat.S_ISDIR(os.lstat(source).st_mode):
                return
            entries = list(os.scandir(source))[:MAX_FILES]
        except OSError:
            return
        with self._lock:
            total = sum(p.stat().st_size for p in self.folder.iterdir())
            for entry in entries:
                if not NAME.match(entry.name) or (self.folder / entry.name).exists():
                    continue
                try:
                    size = entry.stat(follow_symlinks=False).st_size
                    if not entry.is_file(follow_symlinks=False) or size > MAX_FILE_BYTES or \
                            total + size > MAX_TOTAL_BYTES:
                        continue
                    _copy_regular(Path(entry.path), self.folder / entry.name)
                    total += size
                except OSError:
                    continue  # a file the harness was still writing, or removed: not cached


def _copy_regular(source: Path, destination: Path) -> None:
    """A copy that refuses to follow a link put where the file was, written whole or not at all."""
    descriptor = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor, "rb") as read, tempfile.NamedTemporaryFile(dir=destination.parent, delete=False) as out:
        shutil.copyfileobj(read, out)
    os.replace(out.name, destination)


def cache_variables(target: Target) -> tuple[str, ...]:
    """The variables naming where the target's runtimes keep the kernels they compile at run time (CuPy's)."""
    return tuple(r.kernel_cache_env for r in runtimes_of(target.python_packages) if r.kernel_cache_env)


def uses_kernel_cache(target: Target) -> bool:
    """Whether the target's harnesses compile kernels at run time into a cache worth carrying (a runtime's)."""
    return bool(cache_variables(target))


@contextmanager
def kernel_cache_for(target: Target) -> Iterator[KernelCache | None]:
    """A fresh cache for one submission's harnesses where the target has one (else None), removed afterwards."""
    if not uses_kernel_cache(target):
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="kg-kernel-cache-") as folder:
        yield KernelCache(Path(folder), cache_variables(target))
