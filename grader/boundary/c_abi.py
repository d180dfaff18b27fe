"""The harness half the C targets share: load a kernel's library, call its `kg_call` shim through ctypes.

A target's device (`cpp_device`, `cuda_device`) adds where the buffers live (`pointer` gives the
address of an allocation; the shim gets each buffer's address past its margin) and what loading a
library takes besides (CUDA: the course's cuBLAS handle).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np

from grader.boundary.device import Completion
from grader.boundary.protocol import SCALAR_DTYPES, ForbiddenUse, Launch, ScalarArgument

if TYPE_CHECKING:
    from grader.boundary.protocol import Argument

SHIM_SYMBOL = "kg_call"  # the one function of a library the harness calls (see grader.targets.shim)
# The watch a library has where it links a forbidden function (grader.targets.compiled.watch_source): how many it
# watches, each one's name, and whether it ran since last asked (asking clears it).
WATCH_COUNT, WATCH_NAME, WATCH_TAKE = "kg_watched_count", "kg_watched_name", "kg_watched_take"
LAUNCH_TAKE = "kg_launches_take"  # the launch watch's records since last asked, then cleared
LAUNCHES_KEPT = 64  # launches one call records (a call launching more keeps its first)
CALLED = "()"  # a forbidden function's use is named with it ("cublasSgemm_v2()"), as a method's carries its dot
CTYPES = {name: getattr(ctypes, f"c_{name}") for name in SCALAR_DTYPES}
ERROR_CAPACITY = 1024


class SharedLibraryDevice:
    """Loading and calling a C target's library; subclasses say where buffers live."""

    def pointer(self, allocation: Any) -> int:
        """The address of an allocation's first element."""
        raise NotImplementedError

    def upload(self, path: str, count: int, dtype: np.dtype) -> Any:
        """The file's elements in a new allocation, straight from its pages (never copied on the host)."""
        allocation = self.allocate(count, dtype)  # type: ignore[attr-defined]
        self.write(allocation, 0, np.load(path, mmap_mode="r").reshape(-1))  # type: ignore[attr-defined]
        return allocation

    def load(self, path: str) -> Any:
        """Load a kernel's library (its static constructors run now); the forbidden functions it watches, if any."""
        library = ctypes.CDLL(path)
        library.kg_watched = watched(library)
        try:
            take = getattr(library, LAUNCH_TAKE)
            take.restype, take.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_int]
            library.kg_launch_watch = take
        except AttributeError:
            library.kg_launch_watch = None
        return library

    def call(self, library: Any, arguments: list[tuple[Argument, Any]]) -> Completion:
        """Call kg_call with each argument as its C type: a scalar's value, a buffer's address past its margin."""
        function = getattr(library, SHIM_SYMBOL)
        function.restype = ctypes.c_int
        values: list[Any] = []
        argtypes: list[Any] = []
        for argument, buffer in arguments:
            if isinstance(argument, ScalarArgument):
                argtypes.append(CTYPES[argument.ctype])
                values.append(CTYPES[argument.ctype](argument.value))
            elif buffer is None:  # a NULL buffer
                argtypes.append(ctypes.c_void_p)
                values.append(None)
            else:
                argtypes.append(ctypes.c_void_p)
                itemsize = np.dtype(argument.dtype).itemsize
                values.append(ctypes.c_void_p(self.pointer(buffer.allocation) + buffer.margin * itemsize))
        wall_ms, device_ms = ctypes.c_double(-1), ctypes.c_double(-1)
        error = ctypes.create_string_buffer(ERROR_CAPACITY)
        function.argtypes = [*argtypes, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double),
                             ctypes.c_char_p, ctypes.c_int]
        status = function(*values, ctypes.byref(wall_ms), ctypes.byref(device_ms), error, ERROR_CAPACITY)
        return Completion(status, wall_ms.value, device_ms.value if device_ms.value >= 0 else None,
                          error.value.decode(errors="replace"), forbidden=called(library),
                          launched=self.launched(library))

    def kernel_name(self, handle: int) -> str:
        """The name in the binary of the kernel a launch's handle names ("" where the target can't tell)."""
        return ""

    def launched(self, library: Any) -> tuple[Launch, ...]:
        """The launches the library's launch watch recorded since last asked (none without one), each distinct once."""
        take = getattr(library, "kg_launch_watch", None)
        if take is None:
            return ()
        records = (ctypes.c_ulonglong * (4 * LAUNCHES_KEPT))()
        count = take(records, LAUNCHES_KEPT)
        launches = (Launch(self.kernel_name(records[4 * i]), (records[4 * i + 1] & 0xFFFFFFFF,
                                                              records[4 * i + 1] >> 32, records[4 * i + 2] & 0xFFFFFFFF),
                           records[4 * i + 3]) for i in range(count))
        return tuple(dict.fromkeys(launch for launch in launches if launch.kernel))


def watched(library: Any) -> list[tuple[int, str]]:
    """The forbidden functions the library's watch marks, as (index, name); none where it has no watch."""
    try:
        count = getattr(library, WATCH_COUNT)
        name = getattr(library, WATCH_NAME)
    except AttributeError:
        return []
    count.restype, name.restype, name.argtypes = ctypes.c_int, ctypes.c_char_p, [ctypes.c_int]
    return [(i, name(i).decode(errors="replace")) for i in range(count())]


def called(library: Any) -> tuple[ForbiddenUse, ...]:
    """The watched functions that ran since last asked (during the call just made), each cleared for the next."""
    watching = getattr(library, "kg_watched", None)
    if not watching:
        return ()
    take = getattr(library, WATCH_TAKE)
    take.restype, take.argtypes = ctypes.c_int, [ctypes.c_int]
    return tuple(ForbiddenUse(f"{name}{CALLED}", "", 0) for i, name in watching if take(i))
