"""Build each kernel of a submission into its own shared library, cached by content hash.

A kernel's build gets the files the spec names plus every file of the spec's `source_dirs` (the
course compiles `kernels/` as one program, so kernel files include each other); the grader's
provided files (`utils/` of the student template) always come from the grader. A compile error
is a result with the compiler's message (file and line), never an exception.
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
# A source folder is copied into every kernel's build: bounded, so a submission can't make it huge.
SOURCE_DIR_FILES = 256
SOURCE_DIR_BYTES = 8 << 20


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
    files: tuple[str, ...] = ()  # what the library was built from: the submission's files, then the provided ones


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
    files, problem = collect_files(assignment, kernel, root)
    if problem:
        return Artifact(kernel.name, "compile_error", None, problem, (), False, time.perf_counter() - started,
                        tuple(files))
    shim = shim_source(kernel, assignment.target)
    command = _compile_command(assignment, kernel, toolchain, library_flags(assignment.libraries, toolchain))
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
                                tuple(saved["forbidden_symbols"]), True, time.perf_counter() - started, tuple(files))
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
    return Artifact(kernel.name, status, library, message, forbidden, False, time.perf_counter() - started, tuple(files))


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


def collect_files(assignment: Assignment, kernel: Kernel, root: Path) -> tuple[dict[str, bytes], str]:
    """The files of one kernel's build, and what is wrong with the submission's ("" if nothing).

    The spec's `source_dirs` come whole (regular files only), the kernel's `sources` must exist,
    and the grader's provided files replace any of the submission's with the same name.
    """
    files: dict[str, bytes] = {}
    total = 0
    for folder in assignment.source_dirs:
        base = root / folder
        if not base.is_dir() or base.is_symlink():
            continue  # the kernel's own missing files say what is wrong
        for path in sorted(base.rglob("*")):
            # A symlink could point at the grader's own files (gold, secret): only regular files count.
            if path.is_symlink() or not path.is_file() or any(p.startswith(".") for p in path.relative_to(root).parts):
                continue
            total += path.stat().st_size
            if len(files) >= SOURCE_DIR_FILES or total > SOURCE_DIR_BYTES:
                return files, (f"{folder}/ holds more than {SOURCE_DIR_FILES} files or {SOURCE_DIR_BYTES >> 20} MiB; "
                               "every kernel's build copies it whole, so keep only your sources there")
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    missing, links = [], []
    for relative in kernel.sources:
        path = root / relative
        if path.is_symlink():
            links.append(relative)
        elif path.is_file():
            files[relative] = path.read_bytes()
        else:
            missing.append(relative)
    problems = ([f"missing file(s) {', '.join(missing)}: the assignment needs them"] if missing else []) + \
               ([f"{', '.join(links)} is a symbolic link; submit the file itself"] if links else [])
    for relative in assignment.provided:
        files[relative] = (assignment.template_dir / relative).read_bytes()
    return files, "; ".join(problems)


@functools.cache
def library_flags(libraries: tuple[str, ...], toolchain: Toolchain) -> tuple[str, ...]:
    """Compiler flags that link the pack's libraries where this machine has them.

    Linked "as needed": only a library that calls cuBLAS depends on it (and loads it). Looked for
    beside the CUDA toolkit, then in PyPI's nvidia-cublas package.
    """
    if "cublas" not in libraries or toolchain.compiler != "nvcc":
        return ()
    nvcc = shutil.which("nvcc")
    toolkit = Path(nvcc).resolve().parent.parent if nvcc else None
    if toolkit and any((toolkit / d / "cublas_v2.h").is_file() for d in ("include", "targets/x86_64-linux/include")):
        return ("-Xlinker", "--as-needed", "-lcublas")
    package = _pip_cuda_folder("cublas_v2.h")
    if package is None:
        return ()
    library = next(iter(sorted((package / "lib").glob("libcublas.so.*"))), None)
    if library is None:
        return ()
    return ("-I", str(package / "include"), "-L", str(package / "lib"), "-Xlinker", "--as-needed",
            f"-l:{library.name}", "-Xlinker", f"-rpath={package / 'lib'}")


def _pip_cuda_folder(header: str) -> Path | None:
    """The nvidia/cuNN folder of a PyPI CUDA library package that ships `header`, if installed."""
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    for location in (spec.submodule_search_locations or []) if spec else []:
        for include in sorted(Path(location).glob(f"*/include/{header}"), reverse=True):
            return include.parent.parent
    return None


def _compile_command(assignment: Assignment, kernel: Kernel, toolchain: Toolchain,
                     libraries: tuple[str, ...] = ()) -> list[str]:
    compiled = [s for s in kernel.sources if s.endswith(COMPILED_SUFFIXES)]
    if assignment.target == "cuda":
        return [toolchain.compiler, *assignment.compile_flags, *toolchain.arch_flags, "-Xcompiler", "-fPIC", "-shared",
                "-I.", shim_filename("cuda"), *compiled, "-o", "lib.so", *libraries]
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
