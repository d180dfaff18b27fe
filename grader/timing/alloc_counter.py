"""The timing harness's counting allocator (`grader/boundary/alloc_counter.c`), built once into the cache.

Preloaded into a CPU kernel's timing harness, it lets the harness read each call's peak extra heap memory
(`KernelTiming.peak_extra_bytes`). Where no C compiler builds it (or the platform is not glibc's), timings go on
without the figure.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "boundary" / "alloc_counter.c"


def counter_library(cache_dir: Path) -> Path | None:
    """The built counter (cached by its source's content); None where it cannot be built here."""
    if not sys.platform.startswith("linux"):
        return None  # it stands in for glibc's malloc by its __libc_ names
    source = SOURCE.read_bytes()
    library = cache_dir / "alloc-counter" / f"{hashlib.sha256(source).hexdigest()[:16]}.so"
    if library.exists():
        return library
    library.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=library.parent) as scratch:
        built = Path(scratch) / library.name
        try:
            subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", str(SOURCE), "-o", str(built)],
                           check=True, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        built.replace(library)  # atomic: a concurrent timing sees the whole library or none
    return library
