"""Build each kernel of a submission into its own shared library, cached by content hash.

Only the files the spec names are taken from the submission; the grader's provided files
(`utils/` of the student template) always come from the grader. A compile error is a result
with the compiler's message (file and line), never an exception.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from grader.sandbox import Limits, Mounts, Sandbox
from grader.shim import shim_filename, shim_source
from grader.spec import Assignment, Kernel, Target

BuildStatus = Literal["built", "compile_error"]
COMPILE_TIME_LIMIT_S = 300
# Compilers run on untrusted sources (include tricks, template explosions): bounded like the harness.
COMPILE_LIMITS = Limits(memory_bytes=8 << 30, processes=256, file_size_bytes=1 << 30, log_bytes=1 << 20)
MESSAGE_LIMIT = 4000  # characters of compiler output kept in a result
COMPILED_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx")


@dataclass(frozen=True)
class Toolchain:
    compiler: str  # "nvcc" or "g++"
    version: str
    arch_flags: tuple[str, ...]  # e.g. ("-arch=sm_90",)

    @property
    def description(self) -> str:
        return f"{self.version} {' '.join(self.arch_flags)}".strip()


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


@functools.cache
def toolchain_for(target: Target, cuda_arch: str | None = None) -> Toolchain:
    compiler = "nvcc" if target == "cuda" else os.environ.get("CXX", "g++")
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        return Toolchain(compiler, f"{compiler} unavailable ({error})", ())
    lines = [line for line in out.splitlines() if line.strip()]
    version = (lines[-1] if target == "cuda" else lines[0]) if lines else compiler
    arch = () if target != "cuda" else (f"-arch={cuda_arch or detect_cuda_arch()}",)
    return Toolchain(compiler, version, arch)


def detect_cuda_arch() -> str:
    """The arch of GPU 0 (`sm_90` on an H200); $KERNEL_GRADER_CUDA_ARCH wins; sm_90 without a GPU."""
    if os.environ.get("KERNEL_GRADER_CUDA_ARCH"):
        return os.environ["KERNEL_GRADER_CUDA_ARCH"]
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        ).stdout.split()
        if out:
            return "sm_" + out[0].replace(".", "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "sm_90"


def build_submission(
    assignment: Assignment, root: Path, cache_dir: Path, kernels: tuple[Kernel, ...] | None = None,
    jobs: int | None = None, cuda_arch: str | None = None, sandbox: Sandbox | None = None,
) -> dict[str, Artifact]:
    """Build every kernel in parallel on the CPU cores; returns artifacts by kernel name."""
    selected = kernels or assignment.kernels
    toolchain = toolchain_for(assignment.target, cuda_arch)
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        artifacts = pool.map(lambda k: build_kernel(assignment, k, root, cache_dir, toolchain, sandbox), selected)
        return {a.kernel: a for a in artifacts}


def build_kernel(assignment: Assignment, kernel: Kernel, root: Path, cache_dir: Path, toolchain: Toolchain,
                 sandbox: Sandbox | None = None) -> Artifact:
    """Build one kernel; with a sandbox, the compiler (which reads untrusted sources) runs inside it."""
    started = time.perf_counter()
    files, missing = _collect_files(assignment, kernel, root)
    if missing:
        return Artifact(kernel.name, "compile_error", None, f"missing file(s) {', '.join(missing)}: the assignment needs them",
                        (), False, time.perf_counter() - started)
    shim = shim_source(kernel, assignment.target)
    command = _compile_command(assignment, kernel, toolchain)
    # A library compiled in a container comes from the image's toolchain: cached apart from the host's.
    key = _build_key(files, shim, command + ([f"sandbox={sandbox.name}"] if sandbox else []), toolchain)
    folder = cache_dir / "builds" / key
    record = folder / "build.json"
    if record.is_file():
        try:
            saved = json.loads(record.read_text())
            library = folder / "lib.so" if saved["status"] == "built" else None
            if library is None or library.is_file():
                return Artifact(kernel.name, saved["status"], library, saved["message"],
                                tuple(saved["forbidden_symbols"]), True, time.perf_counter() - started)
        except (ValueError, KeyError):
            pass  # a damaged cache entry is rebuilt, not trusted
    with tempfile.TemporaryDirectory(prefix=f"kg-build-{kernel.name}-") as scratch:
        workdir = Path(scratch)
        for relative, content in files.items():
            (workdir / relative).parent.mkdir(parents=True, exist_ok=True)
            (workdir / relative).write_bytes(content)
        (workdir / shim_filename(assignment.target)).write_text(shim)
        status, message = _compile_in(sandbox, command, workdir) if sandbox else _compile(command, workdir)
        forbidden: tuple[str, ...] = ()
        folder.mkdir(parents=True, exist_ok=True)
        if status == "built":
            forbidden = forbidden_symbols_in(workdir / "lib.so", kernel.forbidden_symbols)
        save_build(folder, workdir / "lib.so" if status == "built" else None,
                   {"status": status, "message": message, "forbidden_symbols": forbidden})
    library = folder / "lib.so" if status == "built" else None
    return Artifact(kernel.name, status, library, message, forbidden, False, time.perf_counter() - started)


def save_build(folder: Path, library: Path | None, record: dict[str, Any]) -> None:
    """Put a build into its cache entry: the library (if any), then the record that vouches for it.

    Other graders (Slurm tasks, batch threads) may be writing the same entry at once: each writes
    files of its own and renames them into place, so a reader sees a whole file or none.
    """
    unique = f".tmp-{uuid.uuid4().hex}"
    if library is not None:
        shutil.copyfile(library, folder / f"lib.so{unique}")
        os.replace(folder / f"lib.so{unique}", folder / "lib.so")
    (folder / f"build.json{unique}").write_text(json.dumps(record))
    os.replace(folder / f"build.json{unique}", folder / "build.json")


def _collect_files(assignment: Assignment, kernel: Kernel, root: Path) -> tuple[dict[str, bytes], list[str]]:
    """The kernel's own sources from the submission, plus the grader's provided files."""
    files: dict[str, bytes] = {}
    missing = []
    for relative in kernel.sources:
        path = root / relative
        # A symlink could point at the grader's own files (gold, secret): only regular files count.
        if path.is_file() and not path.is_symlink():
            files[relative] = path.read_bytes()
        else:
            missing.append(relative)
    for relative in assignment.provided:
        files[relative] = (assignment.template_dir / relative).read_bytes()
    return files, missing


def _compile_command(assignment: Assignment, kernel: Kernel, toolchain: Toolchain) -> list[str]:
    compiled = [s for s in kernel.sources if s.endswith(COMPILED_SUFFIXES)]
    if assignment.target == "cuda":
        return [toolchain.compiler, *assignment.compile_flags, *toolchain.arch_flags, "-Xcompiler", "-fPIC", "-shared",
                "-I.", shim_filename("cuda"), *compiled, "-o", "lib.so"]
    return [toolchain.compiler, *assignment.compile_flags, "-fPIC", "-shared", "-I.", shim_filename("cpp"), *compiled,
            "-o", "lib.so"]


def _build_key(files: dict[str, bytes], shim: str, command: list[str], toolchain: Toolchain) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps([command, toolchain.version, shim]).encode())
    for relative in sorted(files):
        digest.update(relative.encode() + b"\0" + hashlib.sha256(files[relative]).digest())
    return digest.hexdigest()[:32]


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
            return "compile_error", f"cannot run {command[0]}: {error.strerror}"
        try:
            returncode = process.wait(COMPILE_TIME_LIMIT_S)
        except subprocess.TimeoutExpired:
            return "compile_error", f"compilation took longer than {COMPILE_TIME_LIMIT_S} s and was stopped"
        finally:
            process.kill()
        output = (err.read_text(errors="replace") + out.read_text(errors="replace")).strip()
    if returncode != 0 or not (workdir / "lib.so").is_file():
        return "compile_error", summarise_compiler_output(output) or f"{command[0]} exited with {returncode}"
    return "built", summarise_compiler_output(output)


def _compile(command: list[str], workdir: Path) -> tuple[BuildStatus, str]:
    try:
        completed = subprocess.run(command, cwd=workdir, capture_output=True, text=True, errors="replace",
                                   timeout=COMPILE_TIME_LIMIT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "compile_error", f"compilation took longer than {COMPILE_TIME_LIMIT_S} s and was stopped"
    except OSError as error:
        return "compile_error", f"cannot run {command[0]}: {error.strerror}"
    output = (completed.stderr + completed.stdout).strip()
    if completed.returncode != 0 or not (workdir / "lib.so").is_file():
        return "compile_error", summarise_compiler_output(output) or f"{command[0]} exited with {completed.returncode}"
    return "built", summarise_compiler_output(output)  # warnings, if any


def summarise_compiler_output(output: str) -> str:
    """Errors first (they name file and line), then as much of the rest as fits."""
    lines = output.splitlines()
    errors = [line for line in lines if re.search(r"\berror\b", line)]
    rest = [line for line in lines if line not in errors]
    text = "\n".join(errors + ([""] if errors and rest else []) + rest)
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + "\n[... compiler output truncated]"


def forbidden_symbols_in(library: Path, patterns: tuple[str, ...]) -> tuple[str, ...]:
    """Symbols the library needs from elsewhere that match the spec's forbidden patterns.

    Only undefined symbols count: the provided header itself defines `cublas_handle`, while a call
    into cuBLAS shows up as an undefined `cublas...` symbol.
    """
    if not patterns:
        return ()
    try:
        listing = subprocess.run(["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    names = {line.split()[-1].split("@")[0] for line in listing.splitlines() if line.split()}
    return tuple(sorted(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)))
