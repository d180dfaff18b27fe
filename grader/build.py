"""Build each kernel of a submission into its own shared library, cached by content hash.

A kernel's build gets the files the sources stage (`grader.sources`) gathered for it: the
submission's, a variant's overlay, the grader's provided files. A compile error, or a file the
build needs and lacks, is a result with the message (file and line), never an exception. How a
kernel is compiled, and how forbidden things are found in it, is its target's (`grader.targets`).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.cache import content_key, publish_file
from grader.sandbox import Limits, Mounts, Sandbox
from grader.sources import KernelSources, Sources, gather_sources
from grader.spec import Assignment, Kernel
from grader.status import BuildStatus
from grader.targets import LIBRARY_FILE, Toolchain, target_named, target_of

COMPILE_TIME_LIMIT_S = 300
# Compilers run on untrusted sources (include tricks, template explosions): bounded like the harness.
COMPILE_LIMITS = Limits(memory_bytes=8 << 30, processes=256, file_size_bytes=1 << 30, log_bytes=1 << 20)
MESSAGE_LIMIT = 4000  # characters of compiler output kept in a result


@dataclass(frozen=True)
class Artifact:
    """One kernel's build: a library to run, or the reason there is none."""

    kernel: str
    status: BuildStatus
    library: Path | None
    message: str
    forbidden_symbols: tuple[str, ...]
    cached: bool
    seconds: float
    # What the library was built from: the submission's files, then the provided ones; one that is
    # not the submission's own at its path says whence it came (`SourceFile.described`).
    files: tuple[str, ...] = ()


@functools.cache
def toolchain_for(target: str, cuda_arch: str | None = None) -> Toolchain:
    """The compiler that the target named `target` builds with on this machine (probed once)."""
    return target_named(target).toolchain(cuda_arch)


def build_submission(
    assignment: Assignment, sources: Sources | Path, cache_dir: Path, kernels: tuple[Kernel, ...] | None = None,
    jobs: int | None = None, cuda_arch: str | None = None, sandbox: Sandbox | None = None,
) -> dict[str, Artifact]:
    """Build every kernel in parallel on the CPU cores; returns artifacts by kernel name.

    sources: the sources stage's (`grader.sources`), or a checkout's root to gather them from as
    they are (the reference, a plain folder).
    """
    selected = kernels or assignment.kernels
    if isinstance(sources, Path):
        sources = gather_sources(assignment, sources, selected)
    toolchain = toolchain_for(assignment.target, cuda_arch)
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        artifacts = pool.map(lambda k: build_kernel(assignment, k, sources.of(k.name), cache_dir, toolchain, sandbox),
                             selected)
        return {a.kernel: a for a in artifacts}


def build_kernel(assignment: Assignment, kernel: Kernel, sources: KernelSources, cache_dir: Path,
                 toolchain: Toolchain, sandbox: Sandbox | None = None) -> Artifact:
    """Build one kernel from its sources; with a sandbox, the compiler (which reads untrusted sources) runs inside it."""
    started = time.perf_counter()
    files, built_from = sources.contents, sources.built_from
    if sources.problem:
        return Artifact(kernel.name, BuildStatus.COMPILE_ERROR, None, sources.problem, (), False,
                        time.perf_counter() - started, built_from)
    target = target_of(assignment)
    shim = target.shim_source(kernel)
    command = target.compile_command(assignment, kernel, toolchain, library_flags(assignment.libraries, toolchain))
    # A library compiled in a container comes from the image's toolchain: cached apart from the host's.
    key = _build_key(files, shim, command + ([f"sandbox={sandbox.name}"] if sandbox else []), toolchain)
    folder = cache_dir / "builds" / key
    record = folder / "build.json"
    if record.is_file():
        try:
            saved = json.loads(record.read_text())
            status = BuildStatus(saved["status"])
            library = folder / LIBRARY_FILE if status == BuildStatus.BUILT else None
            if library is None or library.is_file():
                return Artifact(kernel.name, status, library, saved["message"],
                                tuple(saved["forbidden_symbols"]), True, time.perf_counter() - started, built_from)
        except (ValueError, KeyError):
            pass  # a damaged cache entry is rebuilt, not trusted
    with tempfile.TemporaryDirectory(prefix=f"kg-build-{kernel.name}-") as scratch:
        workdir = Path(scratch)
        for relative, content in files.items():
            (workdir / relative).parent.mkdir(parents=True, exist_ok=True)
            (workdir / relative).write_bytes(content)
        (workdir / target.shim_file).write_text(shim)
        status, message = _compile_in(sandbox, command, workdir) if sandbox else _compile(command, workdir)
        forbidden: tuple[str, ...] = ()
        folder.mkdir(parents=True, exist_ok=True)
        if status == BuildStatus.BUILT:
            forbidden = target.forbidden_in(workdir / LIBRARY_FILE, kernel.forbidden_symbols)
        save_build(folder, workdir / LIBRARY_FILE if status == BuildStatus.BUILT else None,
                   {"status": status.value, "message": message, "forbidden_symbols": forbidden})
    library = folder / LIBRARY_FILE if status == BuildStatus.BUILT else None
    return Artifact(kernel.name, status, library, message, forbidden, False, time.perf_counter() - started, built_from)


def save_build(folder: Path, library: Path | None, record: dict[str, Any]) -> None:
    """Put a build into its cache entry: the library (if any), then the record that vouches for it.

    Other graders (Slurm tasks, batch threads) may be writing the same entry at once: each file is
    published whole (`grader.cache`), the record last.
    """
    if library is not None:
        publish_file(folder / LIBRARY_FILE, library)
    publish_file(folder / "build.json", json.dumps(record).encode())


@functools.cache
def library_flags(libraries: tuple[str, ...], toolchain: Toolchain) -> tuple[str, ...]:
    """Compiler flags that link the pack's libraries where this machine has them (the toolchain's target says how)."""
    return target_named(toolchain.target).library_flags(libraries)


def _build_key(files: dict[str, bytes], shim: str, command: list[str], toolchain: Toolchain) -> str:
    return content_key(json.dumps([command, toolchain.version, shim]),
                       *(part for relative in sorted(files) for part in (relative, files[relative])))


def _compile_in(sandbox: Sandbox, command: list[str], workdir: Path) -> tuple[BuildStatus, str]:
    """Compile inside the sandbox: no network, bounded memory and processes, the time limit, only `workdir` writable."""
    with tempfile.TemporaryDirectory(prefix="kg-compile-logs-") as logs:
        out, err = Path(logs) / "stdout", Path(logs) / "stderr"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir), "LANG": "C"}
        if "LD_LIBRARY_PATH" in os.environ:
            env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
        try:
            process = sandbox.start(command, cwd=workdir, mounts=Mounts(writable=workdir), limits=COMPILE_LIMITS,
                                    stdout=out, stderr=err, env=env)
        except OSError as error:
            return BuildStatus.COMPILE_ERROR, f"cannot run {command[0]}: {error.strerror}"
        try:
            returncode = process.wait(COMPILE_TIME_LIMIT_S)
        except subprocess.TimeoutExpired:
            return BuildStatus.COMPILE_ERROR, f"compilation took longer than {COMPILE_TIME_LIMIT_S} s and was stopped"
        finally:
            process.kill()
        output = (err.read_text(errors="replace") + out.read_text(errors="replace")).strip()
    if returncode != 0 or not (workdir / LIBRARY_FILE).is_file():
        return BuildStatus.COMPILE_ERROR, summarise_compiler_output(output) or f"{command[0]} exited with {returncode}"
    return BuildStatus.BUILT, summarise_compiler_output(output)


def _compile(command: list[str], workdir: Path) -> tuple[BuildStatus, str]:
    try:
        completed = subprocess.run(command, cwd=workdir, capture_output=True, text=True, errors="replace",
                                   timeout=COMPILE_TIME_LIMIT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return BuildStatus.COMPILE_ERROR, f"compilation took longer than {COMPILE_TIME_LIMIT_S} s and was stopped"
    except OSError as error:
        return BuildStatus.COMPILE_ERROR, f"cannot run {command[0]}: {error.strerror}"
    output = (completed.stderr + completed.stdout).strip()
    if completed.returncode != 0 or not (workdir / LIBRARY_FILE).is_file():
        return (BuildStatus.COMPILE_ERROR,
                summarise_compiler_output(output) or f"{command[0]} exited with {completed.returncode}")
    return BuildStatus.BUILT, summarise_compiler_output(output)  # warnings, if any


def summarise_compiler_output(output: str) -> str:
    """Errors first (they name file and line), then as much of the rest as fits."""
    lines = output.splitlines()
    errors = [line for line in lines if re.search(r"\berror\b", line)]
    rest = [line for line in lines if line not in errors]
    text = "\n".join(errors + ([""] if errors and rest else []) + rest)
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + "\n[... compiler output truncated]"
