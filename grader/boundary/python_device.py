"""The `python` target's harness half: buffers are NumPy arrays in the harness's own memory (`host_memory`), and
the kernel is the student's Python function, imported from its build's zip archive and called on views of them.

- `load(path)` reads the archive's entry (`ENTRY_FILE`: module, function, forbidden patterns) and installs the
  import guard; it runs no student code. The module is imported by the kernel's first call, so whatever its
  module-level code does (raise, crash, loop) is that case's, in that case's words.
- `call` passes each buffer as an array of its spec's shape (a view between the poisoned margins: outputs are
  written in place), each scalar as an int or a float. An exception the code raises (or its import) is the call's
  error (`Completion.raised`), with the traceback trimmed to the student's own frames, paths relative to the
  submission ("kernels/axpy.py", line 7).
- Forbidden imports are refused at run time by `ImportGuard`, installed after the harness's own imports: an audit
  hook on "import" (import statements, `__import__`) and a finder first on `sys.meta_path` (importlib, which does
  not raise that audit event); forbidden modules the harness had already imported are dropped from `sys.modules`,
  so that reaching them again goes through both. It keeps honest code honest; the sandbox, not this, bounds what
  code that means harm can do (ctypes reaches anything in the process).
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import sys
import time
import traceback
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from grader.boundary.device import Completion
from grader.boundary.host_memory import HostMemory
from grader.boundary.protocol import ScalarArgument

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec

    from grader.boundary.protocol import Argument

ENTRY_FILE = "kg_entry.json"  # the generated entry a build packs beside the sources (grader.targets.python)
BUILD_RECORD_FILE = "kg_build.json"  # the build's record of every import of the kernel's modules, with file and line
FLOAT_CTYPES = ("float", "double")  # scalars passed as a Python float; the others as an int
FRAMES_SHOWN = 20  # the student's innermost frames a traceback keeps (a runaway recursion has a thousand)
CALL_FAILED = 1  # a Completion's status when the call raised
GRADER_FRAME = "the grader's file, not yours"  # a traceback's mark on a frame in a provided file (its adapter)


def forbidding(name: str, patterns: Sequence[str]) -> str | None:
    """The pattern that forbids module `name` (matching it or one of its packages), or None."""
    parts = name.split(".")
    return next((p for depth in range(1, len(parts) + 1) for p in patterns
                 if fnmatch.fnmatchcase(".".join(parts[:depth]), p)), None)


class ImportGuard:
    """Refuses forbidden imports from its installation on: an audit hook and the first finder of sys.meta_path."""

    def __init__(self) -> None:
        self.patterns: tuple[str, ...] = ()

    def forbid(self, patterns: Sequence[str]) -> None:
        """Add patterns (installing the guard at the first): from now on, a module they match cannot be imported."""
        new = tuple(p for p in patterns if p not in self.patterns)
        if not new:
            return
        if not self.patterns:
            sys.addaudithook(self._audit)  # cannot be removed, by design of audit hooks
            sys.meta_path.insert(0, self)  # type: ignore[arg-type]
        self.patterns += new
        for name in [n for n in sys.modules if forbidding(n, self.patterns)]:
            del sys.modules[name]  # the harness's own references stay; a new import must pass the guard

    def check(self, name: str) -> None:
        pattern = forbidding(name, self.patterns)
        if pattern is not None:
            raise ImportError(f"import of {name!r} is forbidden by this assignment (it forbids {pattern!r})",
                              name=name)

    def _audit(self, event: str, arguments: tuple[Any, ...]) -> None:
        if event == "import" and arguments and isinstance(arguments[0], str):
            self.check(arguments[0])

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        """A meta path finder that finds nothing: it raises for a forbidden name and lets the next finder look."""
        self.check(name)
        return None

    def invalidate_caches(self) -> None:
        pass


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

    def load(self, path: str) -> PythonLibrary:
        """The kernel's archive, read (not imported); the import guard installed with its forbidden patterns."""
        with zipfile.ZipFile(path) as archive:
            entry = json.loads(archive.read(ENTRY_FILE))
        self.guard.forbid(tuple(entry["forbidden"]))
        return PythonLibrary(path, entry["module"], entry["file"], entry["function"],
                             grader_files=tuple(entry.get("provided", ())))

    def call(self, library: PythonLibrary, arguments: list[tuple[Argument, Any]]) -> Completion:
        """Import the kernel's module if this is its first call, then call the function on the arrays and scalars."""
        values = [_value(argument, buffer) for argument, buffer in arguments]
        if library.function is None:
            try:
                library.function = _imported(library)
            except BaseException as error:  # SystemExit too: the student's code ended the import, not the harness
                lines = student_traceback(error, library.path, library.grader_files).split("\n", 1)
                return Completion(CALL_FAILED, 0.0, None, "\n".join([f"{lines[0]} (while importing {library.file})",
                                                                     *lines[1:]]), raised=True)
        torch_on = _torch_prepared()
        events = _cuda_events()
        started = time.perf_counter()
        if events is not None:
            events[0].record()
        try:
            returned = library.function(*values)
        except BaseException as error:
            return Completion(CALL_FAILED, (time.perf_counter() - started) * 1e3, None,
                              student_traceback(error, library.path, library.grader_files),
                              raised=True)
        device_ms = _elapsed_ms(events)
        wall_ms = (time.perf_counter() - started) * 1e3
        peak = _torch_peak_bytes(torch_on)
        if returned is not None:
            print(f"kernel-grader: {library.function_name} returned a {type(returned).__name__}, which is ignored: "
                  "outputs are written in place, into the arrays it is given", file=sys.stderr, flush=True)
        return Completion(0, wall_ms, device_ms, peak_device_bytes=peak)


def _torch_prepared() -> int | None:
    """Where the kernel's module has imported torch: its random state fixed (seed 0, deterministic algorithms, TF32
    off: the settings `grader.targets.TORCH_DETERMINISM` records), and on CUDA the peak memory counter reset.
    Returns the CUDA memory allocated now (the base the call's peak is read against), None without CUDA."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        torch.manual_seed(0)
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        if not torch.cuda.is_available():
            return None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return int(torch.cuda.memory_allocated())
    except Exception as error:  # a broken CUDA context: the call's own outputs show it; the log says why
        print(f"kernel-grader: torch's CUDA memory counter could not be reset ({error!r}): no device memory for "
              "this case", file=sys.stderr, flush=True)
        return None


def _torch_peak_bytes(base: int | None) -> int | None:
    """The most CUDA memory torch's allocator held during the call beyond what it held before (None without CUDA)."""
    if base is None:
        return None
    try:
        torch = sys.modules["torch"]
        torch.cuda.synchronize()
        return max(0, int(torch.cuda.max_memory_allocated()) - base)
    except Exception as error:
        print(f"kernel-grader: torch's CUDA memory counter could not be read ({error!r}): no device memory for "
              "this case", file=sys.stderr, flush=True)
        return None


def _cuda_events() -> tuple[Any, Any] | None:
    """A start and an end event on the current stream where the kernel's module has imported CuPy or torch with a
    GPU, else None: the call is then timed by CUDA events, the end one waited for, so the GPU's work is inside."""
    try:
        if (cupy := sys.modules.get("cupy")) is not None:
            return cupy.cuda.Event(), cupy.cuda.Event()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            return start, end
    except Exception:  # no device (or a broken context): the wall clock is all there is
        return None
    return None


def _elapsed_ms(events: tuple[Any, Any] | None) -> float | None:
    """The milliseconds between the events, the end one recorded now and waited for; None where that failed (a
    CUDA error the call left behind is the call's outputs' to show, not the clock's)."""
    if events is None:
        return None
    try:
        start, end = events
        end.record()
        end.synchronize()
        if "cupy" in sys.modules:
            return float(sys.modules["cupy"].cuda.get_elapsed_time(start, end))
        return float(start.elapsed_time(end))  # torch's events
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
