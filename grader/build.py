"""Build each kernel of a submission into its own shared library, cached by content hash.

A kernel's build gets the files the sources stage (`grader.sources`) gathered for it: the
submission's, a variant's overlay, the grader's provided files. Its library is the shim and the
kernel's own files, linked with an archive of the source folder's other compiled files, from which
the link takes what the kernel calls (`BuildSteps`). A compile error, or a file the
build needs and lacks, is a result with the message (file and line), never an exception. How a
kernel is compiled, and how forbidden things are found in it, is its target's (`grader.targets`).
"""

from __future__ import annotations

import dataclasses
import errno
import fnmatch
import functools
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from grader.cache import content_key, publish_file
from grader.boundary.c_abi import CALLED
from grader.errors import MachineError
from grader.evidence import TILE_EVIDENCE, LibraryEvidence, evidence_of
from grader.includes import compiler_inputs
from grader.sandbox import Limits, Mounts, Sandbox
from grader.sources import KernelSources, Origin, Sources, gather_sources, glob_matches
from grader.assignment import Assignment, Kernel
from grader.results import ForbiddenUse
from grader.assignment.kernels import is_glob
from grader.status import BuildStatus
from grader.targets import LIBRARY_FILE, Target, Toolchain, target_named, target_of
from grader.targets.compiled import ARCHIVE_FILE, WATCH_FILE, CompiledTarget, compiled_sources, watch_source, watchable

COMPILE_TIME_LIMIT_S = 300
# Compilers run on untrusted sources (include tricks, template explosions): bounded like the harness.
COMPILE_LIMITS = Limits(memory_limit_bytes=8 << 30, processes=256, file_size_bytes=1 << 30, log_bytes=1 << 20)
MESSAGE_LIMIT = 4000  # characters of compiler output kept in a result
OBJECTS_DIR = "kg_objects"  # the source folder's other files' objects, in the work folder
BEYOND_FOLDERS = (Origin.INCLUDED, Origin.IMPORTABLE)  # files a build gets for its includes and imports alone


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
    # A variant's kernel: what its library shows of the technique (where the variant asks for
    # evidence), and the required symbols it does not call (where it is one the variant must change).
    evidence: LibraryEvidence | None = None
    missing_symbols: tuple[str, ...] = ()
    # A kernel that accepts several names: which one its files define and the build calls, in words.
    function_found: str = ""
    # What its files name that the forbidden patterns match, as (name, file, line), where only its run can tell
    # whether it is used (a python kernel's imports and methods: the run's records decide, these are notes).
    forbidden_named: tuple[tuple[str, str, int], ...] = ()
    # The forbidden functions (a C kernel's, "cublasSgemm_v2()") the library links and watches: whether each costs the
    # points is the run's to say (`Completion.forbidden`); only these of the run's records are this kernel's.
    watched: tuple[str, ...] = ()

    def forbids(self, use: ForbiddenUse) -> bool:
        """Whether a use its run recorded is one this kernel forbids: a watched function is only where this kernel's
        patterns match it (a variant that allows cuBLAS shares the library of a kernel that forbids it)."""
        return not use.name.endswith(CALLED) or use.name in self.watched


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
    # Kernels built from the same files (a variant's copy of a kernel its folder leaves alone) share one
    # build: one of each compiles first, the others then find it in the cache.
    first: dict[str, Kernel] = {}
    for kernel in selected:
        first.setdefault(build_key(assignment, kernel, sources.of(kernel.name), toolchain, sandbox) or kernel.name,
                         kernel)
    leading = {k.name for k in first.values()}
    rest = [k for k in selected if k.name not in leading]
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        artifacts = {}
        for batch in (list(first.values()), rest):
            artifacts.update({a.kernel: a for a in pool.map(
                lambda k: build_kernel(assignment, k, sources.of(k.name), cache_dir, toolchain, sandbox), batch)})
        return {k.name: artifacts[k.name] for k in selected}


@dataclass(frozen=True)
class BuildSteps:
    """The commands of one kernel's build, run in its work folder: each other compiled file of the source
    folder to an object (`folder_sources`: one that fails is left out), those objects into an archive, then
    the link of the shim and the kernel's own files with that archive, which writes the library."""

    parts: tuple[tuple[str, tuple[str, ...]], ...]  # (the file, the command compiling it to its object)
    objects: tuple[str, ...]  # each part's object, in the same order
    link: tuple[str, ...]

    @property
    def commands(self) -> list[list[str]]:
        return [list(command) for _, command in self.parts] + [list(self.link)]


def build_steps(assignment: Assignment, kernel: Kernel, sources: KernelSources, toolchain: Toolchain) -> BuildSteps:
    """How `kernel`'s library is built from its sources with the target's compiler."""
    target = target_of(assignment)
    # Files beyond the source folders are there to be included or imported, never compiled on their own.
    parts = target.folder_sources(kernel, [f.path for f in sources.files if f.origin not in BEYOND_FOLDERS])
    objects = tuple(f"{OBJECTS_DIR}/{part}.o" for part in parts)
    libraries = library_flags(assignment.libraries, toolchain)
    link = target.compile_command(assignment, kernel, toolchain, libraries, ARCHIVE_FILE if parts else None)
    # The libraries' headers (CUTLASS's) for the other files too: a student's .cu may hold the CUTLASS GEMM.
    headers = [flag for i, flag in enumerate(libraries) if flag == "-I" or (i and libraries[i - 1] == "-I")]
    return BuildSteps(tuple((part, (*target.object_command(assignment, toolchain, part, obj), *headers))
                            for part, obj in zip(parts, objects)), objects, tuple(link))


# What a build's folders may hold that no compiler reads unless a file #includes it by name.
DOCUMENT_SUFFIXES = (".md", ".txt", ".rst", ".pdf", ".png", ".jpg", ".jpeg", ".svg", ".csv", ".ipynb")


def build_key(assignment: Assignment, kernel: Kernel, sources: KernelSources, toolchain: Toolchain,
              sandbox: Sandbox | None = None) -> str | None:
    """The build's cache key: its files, shim, compile commands and toolchain; None where there is nothing to build."""
    if sources.problem:
        return None
    kernel = sources.called(kernel)
    target = target_of(assignment)
    steps = build_steps(assignment, kernel, sources, toolchain)
    commands = list(steps.link) if not steps.parts else steps.commands  # one command: the key it always had
    files, shim = sources.contents, target.shim_source(kernel)
    if isinstance(target, CompiledTarget):  # (a Python kernel's imports are not #includes: all its files count)
        # A file beyond the folders counts where the compiled files reach it, as another kernel's source does.
        # A document (a variant folder's README, laid over kernels/ with the rest) counts only where a file includes it.
        droppable = _sources_of_other_kernels(assignment, kernel, files) | {
            f.path for f in sources.files if f.origin in BEYOND_FOLDERS} | {
            path for path in files if PurePosixPath(path).suffix.lower() in DOCUMENT_SUFFIXES}
        files = compiler_inputs(files, [part for part, _ in steps.parts] + compiled_sources(kernel), shim, droppable)
        commands += target.library_versions(assignment.libraries)
        if patterns := watched_patterns(assignment):
            commands.append(f"watch={json.dumps(patterns)}")
        if watches_launches(target, kernel):
            commands.append(f"watch-launches={target.launch_symbol}")
    # A library compiled in a container comes from the image's toolchain: cached apart from the host's.
    return _build_key(files, shim,
                      commands + ([f"sandbox={sandbox.name}"] if sandbox else []), toolchain)


def _sources_of_other_kernels(assignment: Assignment, kernel: Kernel, files: dict[str, bytes]) -> set[str]:
    """The build's files that another kernel's `sources` may name (any alternative, a glob's matches), not its own
    (`kernel`: as the build calls it, its sources as found)."""
    own = set(kernel.sources)
    named = {path for other in (*assignment.kernels, *assignment.variant_only_kernels)
             for entry in other.source_entries for path in entry}
    return {path for path in files if path not in own and (path in named or any(
        is_glob(p) and glob_matches(p, path) for p in named))}


def build_kernel(assignment: Assignment, kernel: Kernel, sources: KernelSources, cache_dir: Path,
                 toolchain: Toolchain, sandbox: Sandbox | None = None) -> Artifact:
    """Build one kernel from its sources; with a sandbox, the compiler (which reads untrusted sources) runs inside it."""
    started = time.perf_counter()
    files, built_from = sources.contents, sources.built_from
    if sources.problem:
        return Artifact(kernel.name, BuildStatus.COMPILE_ERROR, None, sources.problem, (), False,
                        time.perf_counter() - started, built_from)
    target = target_of(assignment)
    called = sources.called(kernel)  # under the name its files define, where it accepts several
    shim = target.shim_source(called)
    steps = build_steps(assignment, called, sources, toolchain)
    key = build_key(assignment, kernel, sources, toolchain, sandbox)
    folder = cache_dir / "builds" / str(key)
    record = folder / "build.json"
    if record.is_file():
        try:
            saved = json.loads(record.read_text())
            status = BuildStatus(saved["status"])
            library = folder / LIBRARY_FILE if status == BuildStatus.BUILT else None
            if library is None or library.is_file():
                found = _library_facts(assignment, kernel, folder, saved) if library else {"forbidden_symbols": ()}
                return Artifact(kernel.name, status, library, saved["message"], cached=True,
                                seconds=time.perf_counter() - started, files=built_from,
                                function_found=sources.function_found, **found)
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache entry is rebuilt, not trusted
    with tempfile.TemporaryDirectory(prefix=f"kg-build-{kernel.name.replace('/', '-')}-") as scratch:
        workdir = Path(scratch)
        for relative, content in files.items():
            (workdir / relative).parent.mkdir(parents=True, exist_ok=True)
            (workdir / relative).write_bytes(content)
        (workdir / target.shim_file).write_text(shim)
        launches = isinstance(target, CompiledTarget) and watches_launches(target, kernel)
        linked = steps
        if launches:  # known before the build: watched from its first link (forbidden functions are found after it)
            assert isinstance(target, CompiledTarget) and target.launch_symbol
            (workdir / WATCH_FILE).write_text(watch_source((), target.launch_symbol))
            linked = dataclasses.replace(steps, link=tuple(target.watched_link(list(steps.link), (), True)))
        status, message = _run_steps(linked, target, sandbox, workdir)
        watched: list[list[Any]] = []
        if status is BuildStatus.BUILT and isinstance(target, CompiledTarget):
            watched = _watch(assignment, target, steps, sandbox, workdir, files, launches)
        missing = target.library_missing(assignment.libraries, message) \
            if status is BuildStatus.COMPILE_ERROR and isinstance(target, CompiledTarget) else None
        if missing:  # not the submission's error, and not kept in the build cache: a machine with it builds it
            raise MachineError(missing, "library")
        folder.mkdir(parents=True, exist_ok=True)
        built: dict[str, Any] = {"status": status.value, "message": message, "watched": watched}
        save_build(folder, workdir / LIBRARY_FILE if status == BuildStatus.BUILT else None, built)
    library = folder / LIBRARY_FILE if status == BuildStatus.BUILT else None
    found = _library_facts(assignment, kernel, folder, built) if library else {"forbidden_symbols": ()}
    return Artifact(kernel.name, status, library, message, cached=False, seconds=time.perf_counter() - started,
                    files=built_from, function_found=sources.function_found, **found)


def _library_facts(assignment: Assignment, kernel: Kernel, folder: Path, saved: dict[str, Any]) -> dict[str, Any]:
    """What the built library in `folder` shows that the spec asks about: its forbidden symbols, and for a
    variant's kernel its evidence and missing required symbols. Kept in the build's record, so that a
    cached build is read once per question: a variant whose file is unchanged shares the base's build,
    and may forbid other symbols than the base."""
    target, library = target_of(assignment), folder / LIBRARY_FILE
    record = dict(saved)
    patterns = json.dumps(list(kernel.forbidden_symbols))
    forbidden = dict(record.get("forbidden_by_patterns") or {})  # patterns (JSON) -> the symbols they match
    if patterns not in forbidden:
        forbidden[patterns] = list(target.forbidden_in(library, kernel.forbidden_symbols))
        record["forbidden_by_patterns"] = forbidden
    named = dict(record.get("named_by_patterns") or {})
    if patterns not in named:
        named[patterns] = [list(n) for n in target.forbidden_named(library, kernel.forbidden_symbols)]
        record["named_by_patterns"] = named
    # A forbidden function the library watches is the run's to judge: named here, charged only where it ran.
    watched = {str(name): (str(file), int(line)) for name, file, line in record.get("watched") or []}
    facts: dict[str, Any] = {
        "forbidden_symbols": tuple(s for s in forbidden[patterns] if s not in watched),
        "forbidden_named": (*((str(n), str(f), int(line)) for n, f, line in named[patterns]),
                            *((f"{s}{CALLED}", *watched[s]) for s in forbidden[patterns] if s in watched)),
        "watched": tuple(f"{s}{CALLED}" for s in forbidden[patterns] if s in watched)}
    variant = assignment.variant(kernel.variant) if kernel.variant else None
    if kernel.evidence or (variant is not None and (variant.evidence or variant.tensor_core_precisions)):
        if "evidence" not in record:  # cuobjdump: seconds on a big library, so only where a spec asks
            record["evidence"] = evidence_of(library).to_dict()
        facts["evidence"] = LibraryEvidence.from_dict({**record["evidence"], "library": str(library)})
    required = kernel.required_symbols
    if variant is not None and variant.required_symbols and variant.must_change_kernel(assignment.kernel(kernel.base)):
        required = (*required, *variant.required_symbols)
    if required:
        called = target.forbidden_in(library, required)  # the undefined symbols that match
        facts["missing_symbols"] = tuple(p for p in required if not any(fnmatch.fnmatchcase(c, p) for c in called))
    if record != saved:
        publish_file(folder / "build.json", json.dumps(record).encode())
    return facts


def watched_patterns(assignment: Assignment) -> list[str]:
    """Every forbidden pattern of the assignment's kernels and variants: what a C library's watch looks for, whichever
    of its kernels (sharing one build) forbids it."""
    kernels = (*assignment.kernels, *assignment.variant_only_kernels)
    return sorted({p for k in kernels for p in k.forbidden_symbols if not p.startswith(".")})


def watches_launches(target: CompiledTarget, kernel: Kernel) -> bool:
    """Whether the kernel's library records its launches: where its spec asks each case's tile of it (a case's
    launched kernel must have that tile's shared memory, `grader.evidence.launch_shortfalls`)."""
    return target.launch_symbol is not None and TILE_EVIDENCE in kernel.evidence


def _watch(assignment: Assignment, target: CompiledTarget, steps: BuildSteps, sandbox: Sandbox | None, workdir: Path,
           files: dict[str, bytes], launches: bool = False) -> list[list[Any]]:
    """Link the library again with the watch where it links forbidden functions or its launches are watched
    (`watch_source`); returns each watched function as [name, the file and line of the submission that names it
    first]. Where that link fails, the library stays as first linked, unwatched: its forbidden symbols then cost
    what they cost before the watch, and its tiles are judged from the binary alone."""
    library = workdir / LIBRARY_FILE
    symbols = watchable(target.forbidden_in(library, tuple(watched_patterns(assignment))))
    if not symbols:  # (launches alone were watched from the first link)
        return []
    plain = library.with_name("kg_unwatched.so")
    library.rename(plain)
    (workdir / WATCH_FILE).write_text(watch_source(symbols, target.launch_symbol if launches else None))
    returncode, _ = _run(sandbox, target.watched_link(list(steps.link), symbols, launches), workdir,
                         time.monotonic() + COMPILE_TIME_LIMIT_S)
    if returncode != 0 or not library.is_file():
        plain.replace(library)
        return []
    return [[s, *_named_where(s, files)] for s in symbols]


def _named_where(symbol: str, files: dict[str, bytes]) -> tuple[str, int]:
    """The first file and line that name `symbol` or the macro cuBLAS's header maps to it (`cublasSgemm` for
    cublasSgemm_v2); ("", 0) where none does (a provided file's call)."""
    names = {symbol, symbol.removesuffix("_v2")}
    pattern = re.compile(rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in sorted(names)) + rb")\b")
    for path in sorted(files):
        if path.endswith(COMPILED_OR_HEADER) and (found := pattern.search(files[path])):
            return path, files[path].count(b"\n", 0, found.start()) + 1
    return "", 0


COMPILED_OR_HEADER = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh")


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
    """Compiler flags that link the assignment's libraries where this machine has them (the toolchain's target says how)."""
    return target_named(toolchain.target).library_flags(libraries)


def _build_key(files: dict[str, bytes], shim: str, command: list[str], toolchain: Toolchain) -> str:
    return content_key(json.dumps([command, toolchain.version, shim]),
                       *(part for relative in sorted(files) for part in (relative, files[relative])))


def _run_steps(steps: BuildSteps, target: Target, sandbox: Sandbox | None, workdir: Path) -> tuple[BuildStatus, str]:
    """Run a build's steps in `workdir` (in the sandbox where given), within one time limit for them all.

    A part that fails to compile is left out of the archive: it costs the kernel only where the kernel
    calls it, and then the link's "undefined reference" comes with that file's own errors.
    """
    deadline = time.monotonic() + COMPILE_TIME_LIMIT_S
    failed: list[tuple[str, str]] = []  # (a part that did not compile, its compiler output)
    compiled = []
    for (part, command), obj in zip(steps.parts, steps.objects):
        (workdir / obj).parent.mkdir(parents=True, exist_ok=True)
        returncode, output = _run(sandbox, list(command), workdir, deadline)
        if returncode is None:
            return BuildStatus.COMPILE_ERROR, output
        if returncode == 0 and (workdir / obj).is_file():
            compiled.append(obj)
        else:
            failed.append((part, output))
    if steps.parts:
        archive = target.archive_command(compiled)
        returncode, output = _run(sandbox, archive, workdir, deadline)
        if returncode != 0:
            return BuildStatus.COMPILE_ERROR, output if returncode is None else (
                summarise_compiler_output(output) or f"{archive[0]} exited with {returncode}")
    returncode, output = _run(sandbox, list(steps.link), workdir, deadline)
    if returncode is None:
        return BuildStatus.COMPILE_ERROR, output
    if returncode != 0 or not (workdir / LIBRARY_FILE).is_file():
        message = summarise_compiler_output(output) or f"{steps.link[0]} exited with {returncode}"
        if failed and "undefined reference" in output:
            message = "\n\n".join([message, *(f"{part} did not compile, so nothing in it could be linked:\n"
                                                + summarise_compiler_output(text) for part, text in failed)])
        return BuildStatus.COMPILE_ERROR, message
    return BuildStatus.BUILT, summarise_compiler_output(output)  # warnings, if any


def _run(sandbox: Sandbox | None, command: list[str], workdir: Path, deadline: float) -> tuple[int | None, str]:
    """One build command's exit status and output; None and the reason where it could not run or took too long."""
    left = max(deadline - time.monotonic(), 1.0)
    return _compile_in(sandbox, command, workdir, left) if sandbox else _compile(command, workdir, left)


def _compile_in(sandbox: Sandbox, command: list[str], workdir: Path, seconds: float) -> tuple[int | None, str]:
    """Compile inside the sandbox: no network, bounded memory and processes, the time limit, only `workdir` writable."""
    with tempfile.TemporaryDirectory(prefix="kg-compile-logs-") as logs:
        out, err = Path(logs) / "stdout", Path(logs) / "stderr"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir), "LANG": "C"}
        if "LD_LIBRARY_PATH" in os.environ:
            env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
        try:
            process = sandbox.start(command, cwd=workdir, mounts=Mounts(read_only=_include_folders(command),
                                                                        writable=workdir),
                                    limits=COMPILE_LIMITS, stdout=out, stderr=err, env=env)
        except OSError as error:
            return None, _cannot_run(command, error)
        try:
            returncode = process.wait(seconds)
            hit = process.limit_hit()
        except subprocess.TimeoutExpired:
            return None, f"compilation took longer than {COMPILE_TIME_LIMIT_S} s and was stopped"
        finally:
            process.kill()
        output = (err.read_text(errors="replace") + out.read_text(errors="replace")).strip()
        if hit is not None:  # the sources made the compiler exceed a bound (a template explosion, an include of /dev/zero)
            return None, "\n".join([f"{command[0]} was stopped: it {hit}", output]).strip()
        if returncode == -signal.SIGKILL:
            # Killed from outside (the machine's OOM killer, a container's limit), no bound of ours named: not the
            # sources' doing, and no compile error to keep in the build cache.
            raise MachineError(f"{command[0]} was killed (SIGKILL) by the machine, not by a limit of the grader's: "
                               "it had too little memory, or it was being shut down", "resources")
        return returncode, output


def _include_folders(command: list[str]) -> tuple[Path, ...]:
    """The grader's own include folders in a build command (a library's headers: CUTLASS), shown read-only in the
    sandbox: a container sees only its image otherwise. The commands are the spec's and the grader's, never a student's."""
    return tuple(Path(folder) for flag, folder in zip(command, command[1:]) if flag == "-I" and Path(folder).is_absolute())


def _compile(command: list[str], workdir: Path, seconds: float) -> tuple[int | None, str]:
    try:
        completed = subprocess.run(command, cwd=workdir, capture_output=True, text=True, errors="replace",
                                   timeout=seconds, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"compilation took longer than {COMPILE_TIME_LIMIT_S} s and was stopped"
    except OSError as error:
        return None, _cannot_run(command, error)
    return completed.returncode, (completed.stderr + completed.stdout).strip()


def _cannot_run(command: list[str], error: OSError) -> str:
    """A compiler that is not there is a result; one the machine could not start now is not (nor cached)."""
    if error.errno in (errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE):
        raise MachineError(f"cannot start {command[0]}: {error.strerror}", "resources") from error
    return f"cannot run {command[0]}: {error.strerror}"


def summarise_compiler_output(output: str) -> str:
    """Errors first (they name file and line), then as much of the rest as fits."""
    lines = output.splitlines()
    errors = [line for line in lines if re.search(r"\berror\b", line)]
    rest = [line for line in lines if line not in errors]
    text = "\n".join(errors + ([""] if errors and rest else []) + rest)
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + "\n[... compiler output truncated]"
