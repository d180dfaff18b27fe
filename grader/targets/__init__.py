"""Targets: what an assignment's kernels are written in, one module each behind one interface, registered by name.

Nothing outside this package asks which target it has: the build, the runner, the sandbox and the
reports ask the target instead. A target has two halves:

- its build half (`Target`, here, imported by the grader): the toolchain, the generated shim, the compile
  command, the libraries it links, how forbidden things are found, and what its runs need;
- its harness half (`grader.boundary.device.Device`, in the sandbox boundary, imported by the harness process
  alone): where a kernel's buffers live and how the kernel is called.

    cpp.py       C++ on the CPU: g++ (its harness half: grader.boundary.cpp_device, NumPy buffers)
    cuda.py      CUDA: nvcc, cuBLAS, compute-sanitizer (its harness half: grader.boundary.cuda_device, buffers on
                 the GPU through the CUDA driver by ctypes)
    python.py    Python functions on NumPy arrays: modules byte-compiled and packed into a zip, forbidden imports
                 and methods seen as they run (its harness half: grader.boundary.python_device records them);
                 python_build.py is its build step, run in the build sandbox
    compiled.py  the C targets' shared build half: toolchain probe, forbidden symbols (nm) and their watch
    shim.py      the C targets' generated `kg_call` shim (called by ctypes in the harness: grader.boundary.c_abi)
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from grader.boundary.runtimes import needs_gpu_for, pinned, runtimes_of

if TYPE_CHECKING:
    from pathlib import Path

    from grader.assignment import Assignment, Kernel

# Target name (the spec's `target`) -> the module that holds it as `TARGET`.
_MODULES = {"cuda": "grader.targets.cuda", "cpp": "grader.targets.cpp", "python": "grader.targets.python"}
TARGET_NAMES = tuple(_MODULES)

LIBRARY_FILE = "lib.so"  # what a target's compile command writes in its work folder, and its harness half loads


@dataclass(frozen=True)
class Toolchain:
    target: str
    compiler: str  # "nvcc" or "g++"
    version: str
    arch_flags: tuple[str, ...]  # e.g. ("-arch=sm_90",)

    @property
    def description(self) -> str:
        return f"{self.version} {' '.join(self.arch_flags)}".strip()


class Target(Protocol):
    """The build half of a target, and what its runs need from the machine and the sandbox."""

    name: str
    needs_gpu: bool  # its kernels run on a GPU: run slots per GPU, the GPU visible in the sandbox
    compute_sanitizer: bool  # compute-sanitizer can check its kernels
    # What its harness half imports, made visible inside the sandbox; `target_of` adds the assignment's own.
    python_packages: tuple[str, ...]
    harness_env: dict[str, str]  # set for each correctness harness (and the sanitizer's)
    determinism: tuple[str, ...]  # the settings its harnesses fix for reproducible runs (its runtimes'), for the result
    device_module: str  # its harness half, a module with `open_device(sanitizer: bool, device_code: str) -> Device`
    shim_file: str  # the generated file a build gets beside the sources
    # fnmatch patterns of the submission's files its code may import by name from anywhere in the checkout (Python's
    # modules: "*.py"), which every build gets beside its folders (grader.sources), to pack where imported; a C
    # target's reach is its #includes, which the sources stage follows itself: ().
    importable: tuple[str, ...]

    def toolchain(self, cuda_arch: str | None = None) -> Toolchain:
        """The compiler this machine has for the target, with its version (part of every build's key)."""
        ...

    def shim_source(self, kernel: Kernel) -> str:
        """The generated `shim_file` that gives the harness one calling convention for `kernel`."""
        ...

    def library_flags(self, libraries: tuple[str, ...]) -> tuple[str, ...]:
        """Flags that link the assignment's libraries (cuBLAS), where this machine has them."""
        ...

    def compile_command(self, assignment: Assignment, kernel: Kernel, toolchain: Toolchain,
                        libraries: tuple[str, ...], archive: str | None = None) -> list[str]:
        """The command, run in the work folder, that writes LIBRARY_FILE there (linking `archive` where given)."""
        ...

    def folder_sources(self, kernel: Kernel, files: Iterable[str]) -> list[str]:
        """The files of the kernel's build compiled apart, each to an object of the archive its link takes from
        (C targets: the source folder's other compiled files; a target that links nothing: none)."""
        ...

    def object_command(self, assignment: Assignment, toolchain: Toolchain, source: str, output: str) -> list[str]:
        """The command that compiles one other file of the source folder to the object `output`."""
        ...

    def archive_command(self, objects: list[str]) -> list[str]:
        """The command that puts those objects into the archive the link takes what the kernel calls from."""
        ...

    def forbidden_in(self, library: Path, patterns: tuple[str, ...]) -> tuple[str, ...]:
        """What the built library uses that the spec's forbidden patterns match (C targets: undefined symbols); a
        target that watches its kernels run for them (python) finds nothing here."""
        ...

    def forbidden_named(self, library: Path, patterns: tuple[str, ...]) -> tuple[tuple[str, str, int], ...]:
        """What the library's files name that the patterns forbid, as (name, file, line), where only a run shows
        whether it is used (python: imports and methods named; its harness records those that run); C targets:
        none."""
        ...

    def unavailable_reason(self) -> str | None:
        """None if this machine can run the target's kernels, else why not, in a student's words."""
        ...

    def driver_missing(self) -> str | None:
        """unavailable_reason's answer where files alone give it (no driver installed), without initialising
        the driver; None where the driver must be asked."""
        ...

    def device_code(self) -> str:
        """The harness's own device code (CUDA: PTX of its checksum kernel), handed over in the plan; "" if none."""
        ...


class HostTarget:
    """What a target whose kernels run on the CPU the harness runs on says of the machine (a GPU target overrides)."""

    def unavailable_reason(self) -> str | None:
        return None  # the CPU runs it

    def driver_missing(self) -> str | None:
        return None

    def device_code(self) -> str:
        return ""

    def forbidden_named(self, library: Path, patterns: tuple[str, ...]) -> tuple[tuple[str, str, int], ...]:
        return ()


def target_named(name: str) -> Target:
    """The target registered under `name` (the spec's `target`)."""
    if name not in _MODULES:
        raise ValueError(f"unknown target {name!r} (have {', '.join(TARGET_NAMES)})")
    return importlib.import_module(_MODULES[name]).TARGET


def target_with(name: str, packages: tuple[str, ...] = ()) -> Target:
    """The target registered under `name`, its harnesses also seeing `packages` (a python assignment's scipy, or a
    runtime's package: `grader.boundary.runtimes`); a package that runs its code on a GPU makes the target need one,
    and the runtimes the packages name add their harnesses' environment and determinism settings."""
    target = target_named(name)
    extra = tuple(p for p in packages if p not in target.python_packages)
    if not extra:
        return target
    widened = copy.copy(target)
    widened.python_packages = (*target.python_packages, *extra)
    # Its harness must see the GPU, run in a GPU slot, and is not run where there is none.
    widened.needs_gpu = target.needs_gpu or any(needs_gpu_for(p) for p in extra)
    for runtime in runtimes_of(extra):
        if runtime.harness_env or (runtime.cpu_harness_env and not widened.needs_gpu):
            widened.harness_env = {**widened.harness_env, **runtime.harness_env,
                                   **({} if widened.needs_gpu else runtime.cpu_harness_env)}
        widened.determinism = (*widened.determinism, *runtime.determinism)
    return widened


def packages_to_install(assignment: Assignment) -> tuple[str, ...]:
    """The Python packages an assignment's harnesses import that installing the grader does not bring (scipy), for
    a machine set up to grade it (Gradescope's setup.sh, a template's CI workflow), each as its runtime pins it. NumPy
    is the grader's own; an entry that needs a GPU is left out (a GPU runtime's wheel is named for the CUDA version,
    its runtime's `apart_install` says how; a marker is no package)."""
    own = target_named(assignment.target).python_packages
    return tuple(pinned(p) for p in assignment.python_packages if p not in own and not needs_gpu_for(p))


def target_of(assignment: Assignment) -> Target:
    """The target of an assignment's kernels, its harnesses also seeing the Python packages the assignment names
    (`python_packages` in [assignment]: a python assignment's scipy, a runtime's package)."""
    return target_with(assignment.target, assignment.python_packages)
