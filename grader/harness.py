"""The harness: the only process that loads student code. Started by the runner inside a sandbox.

    python -m grader.harness PLAN.json PROGRESS.jsonl START_INDEX [STOP_INDEX]

For each planned call from START_INDEX up to STOP_INDEX (default: the end): load the kernel's
library (creating the course's `cublas_handle` for a library that links cuBLAS), allocate its
buffers (CuPy on the device for CUDA, NumPy for C++) between poisoned margins, fill inputs, poison
outputs with a NaN of a known bit pattern, initialise scratch as the spec says, call the shim,
check that the inputs and the margins are unchanged and that the call did not keep more device
memory than allowed, and save the outputs as .npy. Progress goes to
PROGRESS.jsonl one line per event, so that when this process dies the runner knows which call was in flight. Gold outputs
never enter this process. Only the standard library, NumPy and CuPy are imported here.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Quiet NaNs with a payload no arithmetic produces: an element that still holds it was never written.
POISON_BITS = {"float32": (np.uint32, 0x7FC0DEAD), "float64": (np.uint64, 0x7FF8DEADDEADDEAD),
               "int32": (np.uint32, 0x7FC0DEAD), "int64": (np.uint64, 0x7FF8DEADDEADDEAD)}
CTYPES = {"int": ctypes.c_int, "float": ctypes.c_float, "double": ctypes.c_double, "long": ctypes.c_long}
EXIT_DEVICE_ERROR = 3  # the CUDA context is unusable after a sticky error: a fresh harness takes over
EXIT_NO_DEVICE = 4
ERROR_CAPACITY = 1024
MARGIN_BYTES = 1024  # poisoned margin on each side of a buffer; keeps the buffer 256-byte aligned
LEFTOVER_SEED = 408  # "leftover" scratch: the same finite garbage on every run


class Progress:
    def __init__(self, path: Path) -> None:
        self._file = open(path, "a", buffering=1)

    def emit(self, **event: Any) -> None:
        self._file.write(json.dumps(event) + "\n")
        self._file.flush()


class Device:
    """Buffers and synchronisation for one target: CuPy arrays on the GPU, or NumPy arrays."""

    def __init__(self, target: str) -> None:
        self.target = target
        if target == "cuda":
            import cupy

            if os.environ.get("KERNEL_GRADER_SANITIZER"):
                # One cudaMalloc per buffer, so that compute-sanitizer knows each buffer's true end
                # (a pool's sub-allocations would hide a write just past one).
                cupy.cuda.set_allocator(None)
            self.xp = cupy
            properties = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
            name = properties["name"]
            self.name = name.decode() if isinstance(name, bytes) else str(name)
            # What the device holds before any student code ran (this context included).
            self.baseline_used = self.used_bytes()
        else:
            import platform

            self.xp = np
            self.name = platform.processor() or platform.machine()

    def to_host(self, array: Any) -> np.ndarray:
        """The buffer's contents on the host (a NumPy buffer already is: read it in place)."""
        return array.get() if self.target == "cuda" else array

    def release(self) -> None:
        if self.target == "cuda":
            self.xp.get_default_memory_pool().free_all_blocks()

    def used_bytes(self) -> int:
        free, total = self.xp.cuda.runtime.memGetInfo()
        return int(total - free)

    def free_bytes(self) -> int | None:
        return int(self.xp.cuda.runtime.memGetInfo()[0]) if self.target == "cuda" else None


@dataclass
class Buffer:
    """One argument's allocation: a poisoned margin, the buffer the kernel is given, another margin.

    A write into a margin is a write out of bounds, found on every run without compute-sanitizer and
    without depending on what the allocator placed next to the buffer. Under compute-sanitizer the
    margins are left out: it checks every access against the allocation's true end itself.
    """

    name: str
    allocation: Any  # on the device for CUDA, else a NumPy array
    given: np.ndarray  # host copy of what the whole allocation held before the call
    margin: int  # elements in each margin

    @property
    def size(self) -> int:
        return self.given.size - 2 * self.margin

    def address(self, device: Device) -> ctypes.c_void_p:
        base = self.allocation.data.ptr if device.target == "cuda" else self.allocation.ctypes.data
        return ctypes.c_void_p(base + self.margin * self.given.itemsize)

    def outside_writes(self, after: np.ndarray) -> str:
        """How many elements before and after the buffer were written, in words ("" if none)."""
        changed = _bits(after) != _bits(self.given)
        before, beyond = int(changed[: self.margin].sum()), int(changed[self.margin + self.size:].sum())
        parts = ([f"{before} element(s) before the start of {self.name}"] if before else []) + \
                ([f"{beyond} element(s) past the end of {self.name}"] if beyond else [])
        return " and ".join(parts)

    def inside_changed(self, after: np.ndarray) -> bool:
        inside = slice(self.margin, self.margin + self.size)
        return not np.array_equal(_bits(after[inside]), _bits(self.given[inside]))


def _bits(array: np.ndarray) -> np.ndarray:
    """The raw bits, so that comparisons see NaN payloads."""
    return array.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[array.dtype.itemsize])


def allocate(device: Device, buffer: dict[str, Any], inputs_dir: Path) -> Buffer:
    """Allocate one buffer with its margins: inputs filled from their file, everything else poisoned.

    The contents are composed on the host and copied over in one transfer: a fill or compare on
    the device would JIT-compile a CuPy kernel in every harness (no kernel cache is shared
    between sandboxes).
    """
    unsigned, bits = POISON_BITS[buffer["dtype"]]
    itemsize = np.dtype(buffer["dtype"]).itemsize
    margin = 0 if os.environ.get("KERNEL_GRADER_SANITIZER") else MARGIN_BYTES // itemsize
    given = np.full(buffer["allocate"] + 2 * margin, bits, dtype=unsigned).view(buffer["dtype"])
    inside = slice(margin, margin + buffer["allocate"])
    if buffer["role"] == "input":
        data = np.load(inputs_dir / f"{buffer['name']}.npy").ravel()
        given[margin: margin + data.size] = data
    elif buffer["role"] == "scratch" and buffer.get("init") == "zeros":
        given[inside] = 0
    elif buffer["role"] == "scratch" and buffer.get("init") == "leftover":
        # Finite, deterministic garbage: code that assumes zeros fails the same way on every run.
        rng = np.random.default_rng([LEFTOVER_SEED, len(buffer["name"])])
        given[inside] = rng.uniform(-1e3, 1e3, buffer["allocate"]).astype(buffer["dtype"])
    if device.target != "cuda":
        return Buffer(buffer["name"], given.copy(), given, margin)
    allocation = device.xp.empty(given.shape, dtype=given.dtype)
    allocation.set(given)
    return Buffer(buffer["name"], allocation, given, margin)


def load_library(path: str, progress: Progress, index: int) -> Any:
    """Load a kernel's library; for one that links cuBLAS, create the course's handle first.

    The course's main program calls cublasCreate before any kernel: a kernel written for it
    expects `cublas_handle` to be ready. Only a library that calls cuBLAS resolves cublasCreate_v2.
    """
    progress.emit(index=index, event="loading")  # a crash from here on is the library's static constructors
    library = ctypes.CDLL(path)
    create = getattr(library, "cublasCreate_v2", None)
    try:
        handle = ctypes.c_void_p.in_dll(library, "cublas_handle")
    except ValueError:
        handle = None
    if create is not None and handle is not None and not handle.value:
        create.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        create.restype = ctypes.c_int
        if create(ctypes.byref(handle)) != 0:
            raise RuntimeError("cublasCreate failed: the grading machine cannot start cuBLAS")
    progress.emit(index=index, event="loaded")
    return library


def run_call(call: dict[str, Any], device: Device, libraries: dict[str, Any], progress: Progress, index: int) -> bool:
    library = libraries.get(call["library"])
    if library is None:
        library = libraries[call["library"]] = load_library(call["library"], progress, index)
    function = library.kg_call
    function.restype = ctypes.c_int
    buffers: dict[str, Buffer] = {}
    arguments: list[Any] = []
    argtypes: list[Any] = []
    for argument in call["arguments"]:
        if argument["kind"] == "scalar":
            argtypes.append(CTYPES[argument["ctype"]])
            arguments.append(CTYPES[argument["ctype"]](argument["value"]))
        elif argument["null"]:
            argtypes.append(ctypes.c_void_p)
            arguments.append(None)
        else:
            buffer = buffers[argument["name"]] = allocate(device, argument, Path(call["inputs_dir"]))
            argtypes.append(ctypes.c_void_p)
            arguments.append(buffer.address(device))
    wall_ms, device_ms = ctypes.c_double(-1), ctypes.c_double(-1)
    error = ctypes.create_string_buffer(ERROR_CAPACITY)
    function.argtypes = [*argtypes, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double),
                         ctypes.c_char_p, ctypes.c_int]
    status = function(*arguments, ctypes.byref(wall_ms), ctypes.byref(device_ms), error, ERROR_CAPACITY)
    if status != 0:
        progress.emit(index=index, event="end", status="device_error",
                      message=error.value.decode(errors="replace") or f"error code {status}")
        return False
    output_dir = Path(call["output_dir"])
    output_dir.mkdir(parents=True, exist_ok=True)
    modified: list[str] = []
    out_of_bounds: list[str] = []
    for argument in call["arguments"]:
        if argument["kind"] != "buffer" or argument["null"]:
            continue
        buffer = buffers.pop(argument["name"])
        after = device.to_host(buffer.allocation)
        if outside := buffer.outside_writes(after):
            out_of_bounds.append(outside)
        if argument["role"] == "input" and not argument.get("mutable") and buffer.inside_changed(after):
            modified.append(buffer.name)  # the next case, or the caller in the real program, would read garbage
        if argument["role"] == "output":
            inside = after[buffer.margin: buffer.margin + int(np.prod(argument["shape"]))]
            np.save(output_dir / f"{buffer.name}.npy", inside.reshape(argument["shape"]))
        del buffer, after
    device.release()
    if device.target == "cuda" and call.get("device_memory_limit"):
        held = device.used_bytes() - device.baseline_used
        if held > call["device_memory_limit"]:
            # Memory the code allocated and kept: the next case (or the real program) would run out.
            progress.emit(index=index, event="end", status="device_memory", held_bytes=held,
                          limit_bytes=call["device_memory_limit"])
            return False
    progress.emit(index=index, event="end", status="ok", wall_ms=wall_ms.value,
                  device_ms=device_ms.value if device_ms.value >= 0 else None, inputs_modified=modified,
                  out_of_bounds=out_of_bounds)
    return True


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[1]).read_text())
    progress = Progress(Path(argv[2]))
    start = int(argv[3])
    stop = int(argv[4]) if len(argv) > 4 else len(plan["calls"])
    progress.emit(event="hello", at=time.time())
    try:
        device = Device(plan["target"])
    except Exception as error:  # no CuPy, no driver, no GPU: the machine's problem, said once and plainly
        progress.emit(event="device_unavailable", message=f"{type(error).__name__}: {error}")
        return EXIT_NO_DEVICE
    progress.emit(event="device", name=device.name, at=time.time(), free_bytes=device.free_bytes())
    libraries: dict[str, Any] = {}
    for index in range(start, stop):
        # "start" precedes loading the library: a crash in its static constructors is this call's.
        progress.emit(index=index, event="start", at=time.time())
        if not run_call(plan["calls"][index], device, libraries, progress, index):
            return EXIT_DEVICE_ERROR
    progress.emit(event="finished")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
