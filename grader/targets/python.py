"""The `python` target: kernels written as Python functions (NumPy, or the packages an assignment adds), called on NumPy
arrays in a sandboxed harness, exactly where C kernels run.

The spec declares a Python kernel as it does a C one, so that cases, buffers, poison, margins and gold read the same:

- `signature` is the C-style signature (`void axpy(float a, const float* x, const float* y, float* out, int n)`): it
  names the Python function and its parameters in order, and each pointer's dtype (float: float32, double: float64,
  int: int32, long: int64);
- `header` is the module file that defines the function (`kernels/axpy.py`, imported as `kernels.axpy` with the
  submission's root on the import path: a student's `from kernels.util import ...` works as in their repository);
- `forbidden_symbols` are forbidden imports: fnmatch patterns over module names, each matching a module and its
  submodules ("scipy" forbids scipy.linalg); a pattern with a leading dot is a forbidden method (".toarray": a
  function of that name, a library's, called). Both count where they run during a graded call (the harness half
  records them with the submission's file and line); a file that names one its graded calls never reach (an
  unused helper, nanoGPT's `from_pretrained`) costs nothing, and the reports note it.

The calling convention (one rule): the function gets each buffer as a NumPy array of the spec's shape and dtype
(a view into the harness's allocation, between poisoned margins), each scalar as a Python int or float, positionally
in the signature's order. **Outputs are written in place** (`out[i] = ...`, `out[:] = ...`), into arrays that arrive
poisoned, as a C kernel writes through its pointer: an element left unwritten is reported as never written. A value
the function returns is ignored (the harness's log says so); rebinding a parameter (`out = x + y`) writes nothing.

The "build" (`python_build.py`, run in the build sandbox like a compiler) byte-compiles the kernel's module and the
submission's modules it imports, without importing any: a syntax error is a compile error with file and line. It
records every import it finds (statements, and `importlib.import_module`/`__import__` with a literal name) with file
and line, and every attribute named (`A.toarray()`) with file and line; `forbidden_named` matches them against the
spec's patterns, for the reports' notes of what was named but never ran. The library is a zip archive of the
submission's source files with the generated entry (`kg_entry.json`: module, function, forbidden modules and
methods), imported by the harness half (`grader.boundary.python_device`) with zipimport, which records the
forbidden imports and methods as they run (`forbidden_in` finds nothing in the library itself).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import inspect
import json
import platform
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from grader.boundary.python_device import BUILD_RECORD_FILE, ENTRY_FILE, METHOD_PREFIX
from grader.targets import LIBRARY_FILE, HostTarget, Toolchain, target_named
from grader.targets import python_build

if TYPE_CHECKING:
    from grader.assignment import Assignment, Kernel


def module_name(path: str) -> str:
    """The module a file of the submission is imported as ("kernels/axpy.py": "kernels.axpy")."""
    parts = PurePosixPath(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_patterns(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The patterns that forbid imports (the import guard's), the method patterns left out."""
    return tuple(p for p in patterns if not p.startswith(METHOD_PREFIX))


def method_patterns(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The method patterns' names without their leading dot (".toarray": "toarray"), which the harness watches for."""
    return tuple(p[len(METHOD_PREFIX):] for p in patterns if p.startswith(METHOD_PREFIX))


def named_methods(attributes: list[tuple[str, str, int]], patterns: tuple[str, ...]) -> list[tuple[str, str, int]]:
    """The attributes a method pattern (".toarray", ".to*") matches, as (".toarray", file, line), in file and line
    order."""
    methods = method_patterns(patterns)
    found = sorted({(path, line, name) for name, path, line in attributes
                    if any(fnmatch.fnmatchcase(name, m) for m in methods)})
    return [(f"{METHOD_PREFIX}{name}", path, line) for path, line, name in found]


def named_imports(imports: list[tuple[str, str, int]], patterns: tuple[str, ...]) -> list[tuple[str, str, int]]:
    """The imports a pattern matches (a module or one of its packages: "scipy" matches scipy.linalg), as (name,
    file, line), one per line of code (`from scipy.linalg import blas` records scipy.linalg and scipy.linalg.blas,
    and names the first), in file and line order."""
    found: dict[tuple[str, int], str] = {}
    for name, path, line in imports:
        parts = name.split(".")
        if (path, line) not in found and any(fnmatch.fnmatchcase(".".join(parts[:depth]), p)
                                             for depth in range(1, len(parts) + 1) for p in patterns):
            found[path, line] = name
    return [(name, path, line) for (path, line), name in sorted(found.items())]


class PythonTarget(HostTarget):
    """A target whose kernels are Python functions (see the module's docstring and `grader.targets.Target`)."""

    name = "python"
    needs_gpu = False
    compute_sanitizer = False
    python_packages: tuple[str, ...] = ("numpy",)  # an assignment adds its own ([assignment] python_packages)
    harness_env: dict[str, str] = {}
    determinism: tuple[str, ...] = ()
    device_module = "grader.boundary.python_device"
    shim_file = ENTRY_FILE
    importable = ("*.py",)  # a fork's sibling module (model.py's `import inference`): packed where imported

    def unavailable_reason(self) -> str | None:
        """None where the kernels can run here; an assignment whose packages need a GPU (cupy) also needs the package, the
        driver and a GPU (asked of the driver as the cuda target asks it)."""
        if reason := self.driver_missing():
            return reason
        return target_named("cuda").unavailable_reason() if self.needs_gpu else None

    def driver_missing(self) -> str | None:
        # A package the assignment names but this machine lacks (scipy for a CPU assignment too): the student's import would
        # fail in the harness, a ModuleNotFoundError that is not theirs.
        absent = [p for p in self.python_packages if importlib.util.find_spec(p.split(".")[0]) is None]
        if absent:
            # CuPy's wheel is named for the CUDA version (cupy-cuda12x, cupy-cuda13x): no one command fits.
            why = (" (the assignment's kernels run on a GPU with it)" if self.needs_gpu
                   else f": pip install {' '.join(absent)}")
            return f"this machine has no {', '.join(absent)} installed{why}"
        return target_named("cuda").driver_missing() if self.needs_gpu else None

    def toolchain(self, cuda_arch: str | None = None) -> Toolchain:
        # The harness's interpreter: the build compiles with it, and the bytecode it accepts is its version's.
        return Toolchain(self.name, sys.executable, f"Python {platform.python_version()}", ())

    def shim_source(self, kernel: Kernel) -> str:
        return json.dumps({"module": module_name(kernel.header), "file": kernel.header,
                           "function": kernel.signature.function,
                           "parameters": [p.name for p in kernel.signature.parameters],
                           "forbidden": list(import_patterns(kernel.forbidden_symbols)),
                           "methods": list(method_patterns(kernel.forbidden_symbols)),
                           "provided": list(kernel.provided)}, indent=1) + "\n"  # a traceback marks their frames

    def library_flags(self, libraries: tuple[str, ...]) -> tuple[str, ...]:
        return ()

    def compile_command(self, assignment: Assignment, kernel: Kernel, toolchain: Toolchain,
                        libraries: tuple[str, ...], archive: str | None = None) -> list[str]:
        # -I -S: the build step is the standard library alone; no site, no user or PYTHONPATH packages.
        return [toolchain.compiler, "-I", "-S", "-c", inspect.getsource(python_build), self.shim_file,
                BUILD_RECORD_FILE, LIBRARY_FILE]

    def folder_sources(self, kernel: Kernel, files: Iterable[str]) -> list[str]:
        return []  # nothing is linked: the modules a kernel imports are packed whole

    def object_command(self, assignment: Assignment, toolchain: Toolchain, source: str, output: str) -> list[str]:
        raise NotImplementedError("a python build has no objects: its modules are packed, not linked")

    def archive_command(self, objects: list[str]) -> list[str]:
        raise NotImplementedError("a python build has no objects: its modules are packed, not linked")

    def forbidden_in(self, library: Path, patterns: tuple[str, ...]) -> tuple[str, ...]:
        return ()  # a file's text does not say what runs: the harness records the forbidden uses as they happen

    def forbidden_named(self, library: Path, patterns: tuple[str, ...]) -> tuple[tuple[str, str, int], ...]:
        """The imports and methods of the kernel's modules that the spec's patterns forbid, each (name, file, line):
        the build's record, whether they run or not."""
        if not patterns:
            return ()
        try:
            with zipfile.ZipFile(library) as archive:
                record = json.loads(archive.read(BUILD_RECORD_FILE))
            imports = [(str(name), str(path), int(line)) for name, path, line in record["imports"]]
            attributes = [(str(name), str(path), int(line)) for name, path, line in record.get("attributes", [])]
        except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile):
            return ()
        return tuple(named_imports(imports, import_patterns(patterns)) + named_methods(attributes, patterns))


TARGET = PythonTarget()
