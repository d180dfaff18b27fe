"""The harness: the only process that loads student code. Started by the runner inside a sandbox.

    python -m grader.harness PLAN.json PROGRESS.jsonl START_INDEX [STOP_INDEX]

For each planned call from START_INDEX up to STOP_INDEX (default: the end): load the kernel's library, allocate its buffers (CuPy
on the device for CUDA, NumPy for C++), fill inputs, poison outputs with a NaN of a known bit
pattern, call the shim, check that the inputs are unchanged, and save the outputs as .npy. Progress goes to PROGRESS.jsonl one line per
event, so that when this process dies the runner knows which call was in flight. Gold outputs
never enter this process. Only the standard library, NumPy and CuPy are imported here.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
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
        else:
            import platform

            self.xp = np
            self.name = platform.processor() or platform.machine()

    def pointer(self, array: Any) -> ctypes.c_void_p:
        address = array.data.ptr if self.target == "cuda" else array.ctypes.data
        return ctypes.c_void_p(address)

    def to_host(self, array: Any) -> np.ndarray:
        return array.get() if self.target == "cuda" else array.copy()

    def release(self) -> None:
        if self.target == "cuda":
            self.xp.get_default_memory_pool().free_all_blocks()


def allocate(device: Device, buffer: dict[str, Any], inputs_dir: Path) -> Any:
    """Allocate one buffer: inputs filled from their file, everything else poisoned."""
    xp = device.xp
    array = xp.empty(buffer["allocate"], dtype=buffer["dtype"])
    unsigned, bits = POISON_BITS[buffer["dtype"]]
    array.view(unsigned).fill(bits)
    if buffer["role"] == "input":
        data = np.load(inputs_dir / f"{buffer['name']}.npy").ravel()
        array[: data.size] = xp.asarray(data)
    return array


def same_bytes(device: Device, array: Any, copy: Any) -> bool:
    """Bit-for-bit equality (NaN payloads included), on the device where the buffers live."""
    unsigned = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}[array.dtype.itemsize]
    return bool(device.xp.array_equal(array.view(unsigned), copy.view(unsigned)))


def run_call(call: dict[str, Any], device: Device, libraries: dict[str, Any], progress: Progress, index: int) -> bool:
    library = libraries.get(call["library"])
    if library is None:
        library = libraries[call["library"]] = ctypes.CDLL(call["library"])
    function = library.kg_call
    function.restype = ctypes.c_int
    arrays: dict[str, Any] = {}
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
            arrays[argument["name"]] = allocate(device, argument, Path(call["inputs_dir"]))
            argtypes.append(ctypes.c_void_p)
            arguments.append(device.pointer(arrays[argument["name"]]))
    # A pristine copy of each input the kernel must not write: compared byte for byte after the call.
    pristine = {a["name"]: arrays[a["name"]].copy() for a in call["arguments"]
                if a["kind"] == "buffer" and a["role"] == "input" and not a["null"] and not a.get("mutable")}
    wall_ms, device_ms = ctypes.c_double(-1), ctypes.c_double(-1)
    error = ctypes.create_string_buffer(ERROR_CAPACITY)
    function.argtypes = [*argtypes, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double),
                         ctypes.c_char_p, ctypes.c_int]
    status = function(*arguments, ctypes.byref(wall_ms), ctypes.byref(device_ms), error, ERROR_CAPACITY)
    if status != 0:
        progress.emit(index=index, event="end", status="device_error",
                      message=error.value.decode(errors="replace") or f"error code {status}")
        return False
    modified = [name for name, copy in pristine.items() if not same_bytes(device, arrays[name], copy)]
    del pristine
    output_dir = Path(call["output_dir"])
    output_dir.mkdir(parents=True, exist_ok=True)
    for argument in call["arguments"]:
        if argument["kind"] == "buffer" and argument["role"] == "output" and not argument["null"]:
            size = int(np.prod(argument["shape"]))
            host = device.to_host(arrays[argument["name"]][:size]).reshape(argument["shape"])
            np.save(output_dir / f"{argument['name']}.npy", host)
    del arrays
    device.release()
    progress.emit(index=index, event="end", status="ok", wall_ms=wall_ms.value,
                  device_ms=device_ms.value if device_ms.value >= 0 else None, inputs_modified=modified)
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
    progress.emit(event="device", name=device.name)
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
