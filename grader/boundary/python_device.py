"""The `python` target's harness half: buffers are NumPy arrays in the harness's own memory (`host_memory`), and
the kernel is the student's Python function, imported from its build's zip archive and called on views of them.

- `load(path)` reads the archive's entry (`ENTRY_FILE`: module, function, forbidden patterns) and installs the
  import guard; it runs no student code. The module is imported by the kernel's first call, so whatever its
  module-level code does (raise, crash, loop) is that case's, in that case's words.
- `call` passes each buffer as an array of its spec's shape (a view between the poisoned margins: outputs are
  written in place), each scalar as an int or a float. An exception the code raises (or its import) is the call's
  error (`Completion.raised`), with the traceback trimmed to the student's own frames, paths relative to the
  submission ("kernels/axpy.py", line 7).
- What a call does that the assignment forbids is recorded while it runs by `ImportGuard`, installed after the
  harness's own imports (`Completion.forbidden`, each use with the submission's file and line): forbidden imports
  through an audit hook on "import" (import statements, `__import__`) and a finder first on `sys.meta_path`
  (importlib, which does not raise that audit event), and, where the spec names methods (".toarray"), the calls
  of functions of those names through a profile function set for the call alone. Forbidden modules the harness
  had already imported are dropped from `sys.modules`, so that reaching them again goes through both. Nothing is
  refused: a forbidden use costs what the spec's `forbidden_penalty` says, with the outputs judged as they are.
  Imports are seen when a module is first loaded: a harness runs one kernel's cases, so its first case that
  imports a module records it, and its later cases find the module loaded.
- The runtimes the kernel's module has imported (`grader.boundary.runtimes`) are asked around each call: prepared
  before it (a seed, deterministic algorithms, a peak memory counter reset), its device memory read after it, and
  the call timed by the first one's device events where it has a device here (the wall clock beside them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import importlib
import json
import sys
import threading
import time
import traceback
import zipfile
from dataclasses import dataclass
from types import FunctionType, MethodType
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from grader.boundary.allocations import rebase
from grader.boundary.device import Completion
from grader.boundary.host_memory import HostMemory
from grader.boundary.protocol import ForbiddenUse, ScalarArgument
from grader.boundary.runtimes import Runtime, imported_runtimes

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from importlib.machinery import ModuleSpec
    from types import CodeType, FrameType

    from grader.boundary.protocol import Argument

ENTRY_FILE = "kg_entry.json"  # the generated entry a build packs beside the sources (grader.targets.python)
BUILD_RECORD_FILE = "kg_build.json"  # the build's record of every import of the kernel's modules, with file and line
FLOAT_CTYPES = ("float", "double")  # scalars passed as a Python float; the others as an int
FRAMES_SHOWN = 20  # the student's innermost frames a traceback keeps (a runaway recursion has a thousand)
CALL_FAILED = 1  # a Completion's status when the call raised
METHOD_PREFIX = "."  # a forbidden pattern that names a method or attribute (".toarray"), not a module
MAX_USES = 16  # forbidden uses one call records (an `end` event carries as many)
MONITORING_TOOL, MONITORING_NAME = 2, "kernel-grader"  # sys.monitoring's PROFILER_ID (Python 3.12 on)
GRADER_FRAME = "the grader's file, not yours"  # a traceback's mark on a frame in a provided file (its adapter)


def forbidding(name: str, patterns: Sequence[str]) -> str | None:
    """The pattern that forbids module `name` (matching it or one of its packages), or None."""
    parts = name.split(".")
    return next((p for depth in range(1, len(parts) + 1) for p in patterns
                 if fnmatch.fnmatchcase(".".join(parts[:depth]), p)), None)


class ImportGuard:
    """Watches what a graded call does that the assignment forbids, from its installation on, and records it with
    the submission's line that did it: the modules it imports (an audit hook on "import" and the first finder of
    sys.meta_path) and, where the spec names methods, the functions of those names it calls (a profile function on
    'call' and 'c_call' events, only while a call runs: Python 3.10 on, unlike sys.monitoring).

    A forbidden import is let through, not refused: the call runs as the student wrote it, its outputs are judged,
    and the kernel is scored `forbidden` as a C kernel linking the forbidden library is (the spec's penalty says
    what that costs). What runs only then counts: an import in a function the grading never calls (nanoGPT's
    `from_pretrained`) is never seen. The guard keeps honest code honest; the sandbox, not this, bounds what code
    that means harm can do (ctypes reaches anything in the process).
    """

    def __init__(self) -> None:
        self.patterns: tuple[str, ...] = ()  # forbidden modules (fnmatch over names)
        self.methods: tuple[str, ...] = ()  # forbidden methods' names (fnmatch), without their leading dot
        self.roots: tuple[str, ...] = ()  # the loaded archives' paths, with a slash: the submission's files
        self.installed = False
        self._uses: dict[tuple[object, ...], ForbiddenUse] | None = None  # None: no call in flight
        self._named: dict[str, bool] = {}  # a function's name -> whether a method pattern matches it

    def forbid(self, patterns: Sequence[str], methods: Sequence[str] = (), root: str | None = None) -> None:
        """Add patterns and the archive of a loaded kernel (installing the hooks at the first): from now on, a
        module they match, imported during a call, or a method of such a name called during one, is recorded."""
        if root is not None and root.rstrip("/") + "/" not in self.roots:
            self.roots += (root.rstrip("/") + "/",)
        if new_methods := tuple(m for m in methods if m not in self.methods):
            self.methods += new_methods
            self._named.clear()
            if getattr(sys, "monitoring", None) is not None:
                sys.monitoring.restart_events()  # type: ignore[attr-defined]  # places switched off may match now
        new = tuple(p for p in patterns if p not in self.patterns)
        if not new:
            return
        if not self.installed:
            sys.addaudithook(self._audit)  # cannot be removed, by design of audit hooks
            sys.meta_path.insert(0, self)  # type: ignore[arg-type]
            self.installed = True
        self.patterns += new
        for name in [n for n in sys.modules if forbidding(n, self.patterns)]:
            del sys.modules[name]  # the harness's own references stay; the student's import must pass the hooks

    @contextlib.contextmanager
    def watching(self) -> Iterator[list[ForbiddenUse]]:
        """Record while the block runs (a graded call); the list it gives holds what was recorded, once it ends."""
        found: list[ForbiddenUse] = []
        self._uses = {}
        stop = self._watch_calls() if self.methods else None  # only then: watching calls costs the kernel's
        try:
            yield found
        finally:
            if stop is not None:
                stop()
            # An import that failed (a module not installed: `try: import torch`) loaded nothing: it does not count.
            found += [u for u in self._uses.values() if u.name.startswith(METHOD_PREFIX) or u.name in sys.modules]
            self._uses = None

    def _watch_calls(self) -> Callable[[], None]:
        """Start seeing the calls of functions a method pattern names; returns what stops it.

        With sys.monitoring (Python 3.12 on): a function's start (PY_START: called from Python or from C, a
        property's getter too) and C functions' calls (CALL), each place that names none of the patterns switched
        off for good (DISABLE), so that a loop of 10,000 calls costs its first. Before 3.12: a profile function on
        'call' and 'c_call', which every call of the kernel's code pays for."""
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is None:
            previous = sys.getprofile()
            threading.setprofile(self._profile)
            sys.setprofile(self._profile)

            def stop_profile() -> None:
                sys.setprofile(previous)
                threading.setprofile(None)  # type: ignore[arg-type]
            return stop_profile
        if monitoring.get_tool(MONITORING_TOOL) != MONITORING_NAME:
            monitoring.use_tool_id(MONITORING_TOOL, MONITORING_NAME)
            monitoring.register_callback(MONITORING_TOOL, monitoring.events.PY_START, self._started)
            monitoring.register_callback(MONITORING_TOOL, monitoring.events.CALL, self._called)
        monitoring.set_events(MONITORING_TOOL, monitoring.events.PY_START | monitoring.events.CALL)
        return lambda: monitoring.set_events(MONITORING_TOOL, 0)

    def _matches(self, name: str) -> bool:
        matched = self._named.get(name)
        if matched is None:
            matched = self._named[name] = any(fnmatch.fnmatchcase(name, m) for m in self.methods)
        return matched

    def _started(self, code: CodeType, offset: int) -> object:
        if not self._matches(code.co_name) or code.co_filename.startswith(self.roots):
            return sys.monitoring.DISABLE  # type: ignore[attr-defined]  # a code object's name never changes
        self._record(f"{METHOD_PREFIX}{code.co_name}", sys._getframe(1).f_back, code.co_name, method=True)
        return None

    def _called(self, code: CodeType, offset: int, called: object, argument: object) -> object:
        name = getattr(called, "__name__", "")
        if not isinstance(name, str) or not self._matches(name):
            return sys.monitoring.DISABLE  # type: ignore[attr-defined]  # this place calls nothing forbidden
        if not isinstance(called, (FunctionType, MethodType)):  # a Python function's start is PY_START's to see
            self._record(f"{METHOD_PREFIX}{name}", sys._getframe(1), name, method=True)
        return None

    def _record(self, name: str, frame: FrameType | None, key: object, method: bool = False) -> None:
        """One use, at the innermost line of the submission on the stack from `frame` out; once per `key` and line.
        A method called by another forbidden method (SciPy's todense calls toarray) is that one's: not recorded."""
        uses = self._uses
        if uses is None:
            return
        while frame is not None and not frame.f_code.co_filename.startswith(self.roots):
            if method and self._matches(frame.f_code.co_name):
                return
            frame = frame.f_back
        file, line = "", 0
        if frame is not None:
            filename = frame.f_code.co_filename
            file = filename[len(next(r for r in self.roots if filename.startswith(r))):]
            line = frame.f_lineno or 0
        if (key, file, line) not in uses and len(uses) < MAX_USES:
            uses[key, file, line] = ForbiddenUse(name, file, line)

    def _imported(self, name: str) -> None:
        if self._uses is not None and forbidding(name, self.patterns) is not None:
            # One import statement imports a package's whole tree: the first name seen is the one on the line.
            self._record(name, sys._getframe(1), "import")

    def _audit(self, event: str, arguments: tuple[Any, ...]) -> None:
        if event == "import" and arguments and isinstance(arguments[0], str):
            self._imported(arguments[0])

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        """A meta path finder that finds nothing: it records a forbidden name and lets the next finder look
        (importlib.import_module raises no "import" audit event)."""
        self._imported(name)
        return None

    def invalidate_caches(self) -> None:
        pass

    def _profile(self, frame: FrameType, event: str, argument: Any) -> None:
        if event == "call":
            name = frame.f_code.co_name
        elif event == "c_call":
            name = getattr(argument, "__name__", "")
        else:
            return
        if not self._matches(name):
            return
        if event == "c_call":
            self._record(f"{METHOD_PREFIX}{name}", frame, name, method=True)
        elif not frame.f_code.co_filename.startswith(self.roots):  # the submission's own function of that name is
            self._record(f"{METHOD_PREFIX}{name}", frame.f_back, name, method=True)  # its code, not a library's


@dataclass
class PythonLibrary:
    """A built kernel: its archive, the module and function the entry names, and the function once imported."""

    path: str
    module: str
    file: str
    function_name: str
    function: Callable[..., Any] | None = None
    grader_files: tuple[str, ...] = ()  # the provided files among the archive's (the entry's "provided")


def student_traceback(error: BaseException, root: str, grader_files: Sequence[str] = ()) -> str:
    """What was raised, then the traceback's frames in the submission's files (paths relative to it); frames in
    `grader_files` (the assignment's provided files, the grader's adapter among them) are marked as the grader's, not
    the student's. Where every frame is the grader's (its adapter raised with a message of its own), the message."""
    prefix = root.rstrip("/") + "/"
    frames = [traceback.FrameSummary(f.filename[len(prefix):], f.lineno, f.name, line=f.line)
              for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith(prefix)]
    what = "".join(traceback.format_exception_only(type(error), error)).strip().replace(prefix, "")
    grader_own = set(grader_files)
    if all(f.filename in grader_own for f in frames):
        return what
    left_out = max(0, len(frames) - FRAMES_SHOWN)
    marked = " the grader's files marked;" if any(f.filename in grader_own for f in frames[left_out:]) else ""
    heading = f"Traceback (your code;{marked} most recent call last" if marked else \
        "Traceback (your code only, most recent call last"
    heading += f"; {left_out} earlier frame(s) left out):" if left_out else "):"
    shown = []
    for frame, text in zip(frames[left_out:], traceback.StackSummary.from_list(frames[left_out:]).format()):
        if frame.filename in grader_own:  # its first line names the file: the mark goes at its end
            first, _, rest = text.partition("\n")
            text = f"{first}  [{GRADER_FRAME}]\n{rest}"
        shown.append(text)
    return f"{what}\n{heading}\n{''.join(shown).rstrip()}"


class PythonDevice(HostMemory):
    """The CPU the harness runs on; the kernel is a Python function that writes its output arrays in place."""

    def __init__(self) -> None:
        super().__init__()
        self.guard = ImportGuard()
        # Whether calls are watched for forbidden uses: the grading harness's are; the timing harness turns it off,
        # since its figures are the kernel's own (a profile function slows a Python loop several times on 3.11).
        self.watch_forbidden = True

    def load(self, path: str) -> PythonLibrary:
        """The kernel's archive, read (not imported); the import guard installed with its forbidden patterns."""
        with zipfile.ZipFile(path) as archive:
            entry = json.loads(archive.read(ENTRY_FILE))
        self.guard.forbid(tuple(entry["forbidden"]), tuple(entry.get("methods", ())), path)
        return PythonLibrary(path, entry["module"], entry["file"], entry["function"],
                             grader_files=tuple(entry.get("provided", ())))

    def call(self, library: PythonLibrary, arguments: list[tuple[Argument, Any]]) -> Completion:
        """Import the kernel's module if this is its first call, then call the function on the arrays and scalars;
        what it did that the assignment forbids (its module's import included) is the completion's `forbidden`."""
        values = [_value(argument, buffer) for argument, buffer in arguments]
        if not self.watch_forbidden:
            return self._call(library, values)
        with self.guard.watching() as found:
            completion = self._call(library, values)
        return dataclasses.replace(completion, forbidden=tuple(found)) if found else completion

    def _call(self, library: PythonLibrary, values: list[Any]) -> Completion:
        if library.function is None:
            try:
                library.function = _imported(library)
            except BaseException as error:  # SystemExit too: the student's code ended the import, not the harness
                lines = student_traceback(error, library.path, library.grader_files).split("\n", 1)
                return Completion(CALL_FAILED, 0.0, None, "\n".join([f"{lines[0]} (while importing {library.file})",
                                                                     *lines[1:]]), raised=True)
            rebase()  # what the import keeps (the module, SciPy's) is not the call's memory
        prepared = _prepared()
        events = _device_events()
        started = time.perf_counter()
        if events is not None:
            events[1].record()
        try:
            returned = library.function(*values)
        except BaseException as error:
            return Completion(CALL_FAILED, (time.perf_counter() - started) * 1e3, None,
                              student_traceback(error, library.path, library.grader_files),
                              raised=True)
        device_ms = _elapsed_ms(events)
        wall_ms = (time.perf_counter() - started) * 1e3
        peak = _peak_device_bytes(prepared)
        if returned is not None:
            print(f"kernel-grader: {library.function_name} returned a {type(returned).__name__}, which is ignored: "
                  "outputs are written in place, into the arrays it is given", file=sys.stderr, flush=True)
        return Completion(0, wall_ms, device_ms, peak_device_bytes=peak)


def _prepared() -> list[tuple[Runtime, Any]]:
    """Each runtime the kernel's module has imported, prepared for the call (`grader.boundary.runtimes`: torch's seed
    and deterministic algorithms, its peak memory counter reset), with what its `peak_device_bytes` reads after."""
    return [(runtime, runtime.prepare()) for runtime in imported_runtimes() if runtime.prepare is not None]


def _peak_device_bytes(prepared: list[tuple[Runtime, Any]]) -> int | None:
    """The call's peak device memory as the first runtime that counts it says (None where none does)."""
    for runtime, state in prepared:
        if runtime.peak_device_bytes is not None and (peak := runtime.peak_device_bytes(state)) is not None:
            return peak
    return None


def _device_events() -> tuple[Runtime, Any, Any] | None:
    """A start and an end event on the current stream of the first runtime the kernel's module has imported that
    has a device here (CuPy, torch with a GPU), else None: the call is then timed by its events, the end one waited
    for, so the GPU's work is inside."""
    try:
        for runtime in imported_runtimes():
            if runtime.timing_events is not None and (events := runtime.timing_events()) is not None:
                return runtime, *events
    except Exception:  # no device (or a broken context): the wall clock is all there is
        return None
    return None


def _elapsed_ms(events: tuple[Runtime, Any, Any] | None) -> float | None:
    """The milliseconds between the events, the end one recorded now and waited for; None where that failed (a
    CUDA error the call left behind is the call's outputs' to show, not the clock's)."""
    if events is None:
        return None
    try:
        runtime, start, end = events
        end.record()
        end.synchronize()
        return float(runtime.elapsed_ms(start, end)) if runtime.elapsed_ms is not None else None
    except Exception:
        return None


def _imported(library: PythonLibrary) -> Callable[..., Any]:
    """The kernel's function, its module imported from the archive (the submission's root on the import path)."""
    if library.path not in sys.path:
        sys.path.insert(0, library.path)
    module = importlib.import_module(library.module)
    function = getattr(module, library.function_name, None)
    if not callable(function):
        raise AttributeError(f"{library.file} defines no function {library.function_name!r}")
    return function


def _value(argument: Argument, buffer: Any) -> Any:
    """A scalar as int or float; a buffer as a view of its inside, of the spec's shape (flat where scratch is
    allocated larger than its shape); a NULL buffer as None."""
    if isinstance(argument, ScalarArgument):
        return float(argument.value) if argument.ctype in FLOAT_CTYPES else int(argument.value)
    if buffer is None:
        return None
    inside = buffer.allocation[buffer.margin: buffer.margin + argument.allocate]
    return inside.reshape(argument.shape) if argument.allocate == int(np.prod(argument.shape)) else inside


def open_device(sanitizer: bool, device_code: str = "") -> PythonDevice:
    """The harness's device; `sanitizer` changes nothing (compute-sanitizer is CUDA's), nor has it device code."""
    return PythonDevice()
