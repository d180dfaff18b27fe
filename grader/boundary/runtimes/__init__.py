"""Runtimes: the Python packages a python assignment's kernels compute with (PyTorch, CuPy), one module each behind one
interface, registered by name like targets, sandboxes and checks. Nothing outside this package names a package:
the targets, the harness, the kernel cache, the exports and the sandbox ask the registry instead.

A runtime says what the grader must know of its package: the python_packages entries it answers to, whether they
need a GPU (or the marker entry that asks for one), the version a grading machine installs, how that machine
installs it where a plain `pip install` does not fit, the environment its harnesses need, the settings they fix
for reproducible runs (recorded in the result), and its harness hooks, called around each graded or timed call
once the kernel's module has imported the runtime's first package: `prepare` before it (a seed, deterministic
algorithms, the peak memory counter reset), `peak_device_bytes` after it, and `timing_events`, the device events
the call is timed by.

    cupy.py   CuPy: its code runs on the GPU; its events time a call; its compiled kernels are carried between a
              submission's harnesses (`grader.runner.kernel_cache`)
    torch.py  PyTorch: a CPU assignment unless it also names the marker "torch.cuda"; seeded and deterministic before each
              call; its CUDA allocator's peak is the call's device memory; its CUDA events time a call

A runtime of an assignment's own is a module in the assignment's folder, named in its assignment.toml
(`[assignment] runtimes = ["my_runtime"]` for my_runtime.py), that defines `RUNTIME = Runtime(...)`: the spec's
loader registers it, and the plan carries its source to the harness, which registers it there too. Being imported
by the harness, a runtime's module keeps to the harness's rule (the standard library, NumPy and
`grader.boundary`): its hooks reach their package through `sys.modules`, never by importing it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

# Runtime name -> the module that holds it as `RUNTIME`; this order is the hooks' (CuPy's events before torch's).
_MODULES = {"cupy": "grader.boundary.runtimes.cupy", "torch": "grader.boundary.runtimes.torch"}
BUILT_IN = tuple(_MODULES)
_OWN: dict[str, Runtime] = {}  # runtimes of assignments' own, registered as their assignments load (`register`)
_OWN_SOURCES: dict[str, str] = {}  # their modules' sources, for the harness (`own_sources`)
OWN_RUNTIME_PREFIX = "kernel_grader_runtime_"  # an assignment's runtime module's name in sys.modules


@dataclass(frozen=True)
class Runtime:
    """What the grader knows of one Python package an assignment's kernels compute with (see the module's docstring)."""

    name: str
    packages: tuple[str, ...]  # the top-level modules whose python_packages entries it answers to; the first turns
    # its hooks on once the kernel's module has imported it
    gpu: bool = False  # its code runs on an NVIDIA GPU: an assignment that names it needs one
    gpu_marker: str = ""  # an entry that asks for a GPU without being a package of its own ("torch.cuda")
    pin: str = ""  # the requirement a machine set up to grade installs for its first package ("torch==2.13.0")
    # The settings its hooks and environment fix for reproducible runs, recorded in the result's environment.
    determinism: tuple[str, ...] = ()
    harness_env: Mapping[str, str] = field(default_factory=dict)  # set for each of its assignments' harnesses
    cpu_harness_env: Mapping[str, str] = field(default_factory=dict)  # added where its assignment needs no GPU
    kernel_cache_env: str = ""  # the variable naming the folder it compiles kernels into at run time, if it does
    # A CI install step's shell lines ("{pip}" stands for the pip install command, "{packages}" for its entries):
    cpu_install: tuple[str, ...] = ()  # where its assignment needs no GPU (a CPU build from an index of its own)
    apart_install: tuple[str, ...] = ()  # for its GPU entries, which no plain requirement names (a CUDA-named wheel)
    # Harness hooks, each None where the runtime has none:
    prepare: Callable[[], Any] | None = None  # before each call; returns what `peak_device_bytes` reads after it
    peak_device_bytes: Callable[[Any], int | None] | None = None  # the call's peak device memory, from prepare's
    timing_events: Callable[[], tuple[Any, Any] | None] | None = None  # a start and an end event (record(),
    # synchronize()), None where it has no device here
    elapsed_ms: Callable[[Any, Any], float] | None = None  # the milliseconds between its two events, both recorded

    def needs_gpu_for(self, entry: str) -> bool:
        """Whether the python_packages entry `entry` (one this runtime answers to) makes its assignment need a GPU."""
        return entry == self.gpu_marker or (self.gpu and entry.split(".")[0] in self.packages)

    def pinned(self, entry: str) -> str:
        """The requirement a grading machine installs for `entry`: the pin for the runtime's first package."""
        return self.pin if self.pin and entry == self.packages[0] else entry


def runtime_named(name: str) -> Runtime:
    """The runtime registered under `name`: a built-in one or an assignment's own."""
    if name in _OWN:
        return _OWN[name]
    if name not in _MODULES:
        raise ValueError(f"unknown runtime {name!r} (have {', '.join(runtime_names())})")
    return importlib.import_module(_MODULES[name]).RUNTIME


def runtime_names() -> tuple[str, ...]:
    return (*BUILT_IN, *(n for n in _OWN if n not in _MODULES))


def runtimes() -> tuple[Runtime, ...]:
    """Every runtime registered, the built-in ones first."""
    return tuple(runtime_named(name) for name in runtime_names())


def runtime_for(entry: str) -> Runtime | None:
    """The runtime a python_packages entry names ("torch", "torch.cuda", "cupyx.scipy"), None for a plain package."""
    top = entry.split(".")[0]
    return next((r for r in runtimes() if top in r.packages or entry == r.gpu_marker), None)


def runtimes_of(entries: Iterable[str]) -> tuple[Runtime, ...]:
    """The runtimes some python_packages entries name, each once, in the registry's order."""
    named = {r.name for e in entries if (r := runtime_for(e)) is not None}
    return tuple(r for r in runtimes() if r.name in named)


def needs_gpu_for(entry: str) -> bool:
    """Whether a python_packages entry makes an assignment need a GPU (a GPU runtime's package, or a runtime's marker)."""
    runtime = runtime_for(entry)
    return runtime is not None and runtime.needs_gpu_for(entry)


def pinned(entry: str) -> str:
    """The requirement a machine set up to grade installs for a python_packages entry (a runtime's pin)."""
    runtime = runtime_for(entry)
    return entry if runtime is None else runtime.pinned(entry)


def environment_names() -> tuple[str, ...]:
    """The environment variables the registered runtimes set for a harness (a sandbox that filters keeps them)."""
    names: dict[str, None] = {}
    for runtime in runtimes():
        names.update(dict.fromkeys([*runtime.harness_env, *runtime.cpu_harness_env]))
        if runtime.kernel_cache_env:
            names[runtime.kernel_cache_env] = None
    return tuple(names)


def imported_runtimes() -> tuple[Runtime, ...]:
    """The harness side: the registered runtimes whose first package the process has imported (their hooks on)."""
    return tuple(r for r in runtimes() if sys.modules.get(r.packages[0]) is not None)


def register(runtime: Runtime, source: str = "") -> Runtime:
    """Add a runtime of an assignment's own (its module's `source`, carried to the harness by the plan)."""
    if runtime.name in _MODULES:
        raise ValueError(f"runtime {runtime.name!r} is built in; an assignment's own runtime needs a name of its own")
    _OWN[runtime.name] = runtime
    if source:
        _OWN_SOURCES[runtime.name] = source
    return runtime


def load_runtime(module_name: str, source: str, origin: str) -> Runtime:
    """Run a runtime module's `source` (from `origin`, for tracebacks) as the module `module_name` and register the
    `RUNTIME` it defines."""
    module = ModuleType(OWN_RUNTIME_PREFIX + module_name)
    module.__file__ = origin
    sys.modules[module.__name__] = module  # a dataclass defined in it finds its module
    exec(compile(source, origin, "exec"), module.__dict__)  # noqa: S102  # an assignment's own code, trusted like its spec
    runtime = getattr(module, "RUNTIME", None)
    if not isinstance(runtime, Runtime):
        raise ValueError("it defines no RUNTIME = Runtime(...)")
    return register(runtime, source)


def load_pack_runtime(folder: Path, module_name: str) -> Runtime:
    """An assignment's own runtime: `folder`/`module_name`.py, registered (again, where the assignment is loaded twice)."""
    path = folder / f"{module_name}.py"
    return load_runtime(module_name, path.read_text(), str(path))


def own_sources(names: Iterable[str]) -> dict[str, str]:
    """The sources of the assignments' own runtimes among `names`, for a harness's plan (`load_sources` there)."""
    return {name: _OWN_SOURCES[name] for name in names if name in _OWN_SOURCES}


def load_sources(sources: Mapping[str, str]) -> None:
    """The harness side: register the assignments' own runtimes its plan carries."""
    for name, source in sources.items():
        if name not in _OWN and load_runtime(name, source, f"<runtime {name}>").name != name:
            raise ValueError(f"the plan's runtime {name!r} defines another name")
