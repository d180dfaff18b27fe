"""The harness: the only process that loads student code. Started by the runner inside a sandbox.

    python -m grader.boundary.harness PLAN.json PROGRESS.jsonl START_INDEX [STOP_INDEX]

For each planned call from START_INDEX up to STOP_INDEX (default: the end): load the kernel's
library, allocate its buffers between poisoned margins (on the target's device: GPU memory
for CUDA, NumPy for C++), fill inputs, poison outputs with a NaN of a known bit pattern,
initialise scratch as the spec says, call the kernel, check that the inputs and the margins are
unchanged and that the call did not keep more device memory than allowed, and save the outputs as
.npy. Where the runner preloaded the counting allocator (CPU targets, `grader.boundary.allocations`), each call's
`end` carries its peak extra heap memory, what it allocated beyond its arguments (a kernel's memory bound). Progress goes to PROGRESS.jsonl one line per event (`grader.boundary.protocol`), so that
when this process dies the runner knows which call was in flight. Gold outputs never enter this
process, with one deliberate exception: a check's composed call may compute a step's swap-in gold
here, just in time, once that step's output is saved and sealed (its check's harness half says why
that is safe).

Only the standard library, NumPy and `grader.boundary` (the protocol, the target's harness half, the plan's
`device_module`, and the runtimes' hooks, `grader.boundary.runtimes`, with the sources of an assignment's own runtime
modules that the plan carries, which keep to the same rule) are imported here; a harness running a composed call
also imports its check's harness half (the composition's `runner`: NumPy, `grader.boundary`, `grader.checks.program`,
and maybe the assignment's numpy_reference.py).
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from grader.boundary.allocations import AllocationMeter
from grader.boundary.protocol import (EXIT_DEVICE_ERROR, EXIT_NO_DEVICE, MARGIN_BYTES, POISON_BITS, BufferArgument,
                                      Ended, EndStatus, Event, Plan, PlannedCall, Ready, Written, event_line,
                                      margin_bits, network_seen)
from grader.boundary.runtimes import load_sources

if TYPE_CHECKING:
    from grader.boundary.device import Completion, Device

LEFTOVER_SEED = 408  # "leftover" scratch: the same finite garbage on every run
COUNT_CHUNK = 16 << 20  # elements read back at a time to count a scratch buffer's writes (64 MiB of floats)
SAMPLE_INTERVAL_S = 2e-4  # how often the memory sampler reads the device's free memory during a call


class MemorySampler:
    """The device's free memory read on a thread while a call runs: the most the call took beyond what was in use when
    it began (what it cudaMalloc'd for itself, a library's workspace), where the target has a device memory to read.

    Device-wide, as the driver counts it: another process on the same GPU shows in it too, and an allocation that
    lives shorter than one interval may go unseen. Run only for the calls that ask (`BufferArgument.count_written`).
    """

    def __init__(self, device: Device) -> None:
        self.device = device
        self.before = device.free_bytes()
        self.least = self.before
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, name="kg-memory", daemon=True)

    def _read(self) -> None:
        free = self.device.free_bytes()
        if free is not None and self.least is not None:
            self.least = min(self.least, free)

    def _sample(self) -> None:
        try:
            while not self.done.is_set():
                self._read()
                self.done.wait(SAMPLE_INTERVAL_S)
        except Exception:  # the device failed under the call (a sticky error): the call's own end says so
            return

    def __enter__(self) -> MemorySampler:
        if self.before is not None:
            self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()

    @property
    def peak_extra_bytes(self) -> int | None:
        return None if self.before is None or self.least is None else max(0, self.before - self.least)


class Progress:
    def __init__(self, path: Path) -> None:
        self._file = open(path, "a", buffering=1)

    def emit(self, kind: Event, index: int | None = None, **fields: Any) -> None:
        self._file.write(event_line(kind, index, **fields) + "\n")
        self._file.flush()


@dataclass
class Buffer:
    """One argument's allocation: a poisoned margin, the buffer the kernel is given, another margin.

    A write into a margin is a write out of bounds, found on every run without compute-sanitizer and
    without depending on what the allocator placed next to the buffer. Under compute-sanitizer the
    margins are left out: it checks every access against the allocation's true end itself.
    """

    name: str
    allocation: Any  # on the target's device (device memory for CUDA, a NumPy array for C++)
    size: int  # elements the kernel is given
    margin: int  # elements in each margin
    poison: tuple[int, int]  # the margins' bit patterns, before and after (`protocol.margin_bits`)
    before: int | None = None  # an input the kernel must not change: the digest of its elements before the call
    fill: int | None = None  # the bit pattern every element of it started as (poison, or zeros); None: not one pattern

    def outside_writes(self, device: Device) -> str:
        """How many elements before and after the buffer were written, in words ("" if none)."""
        if not self.margin:
            return ""
        before, beyond = (int((_bits(device.read(self.allocation, start, self.margin)) != bits).sum())
                          for start, bits in zip((0, self.margin + self.size), self.poison))
        parts = ([f"{before} element(s) before the start of {self.name}"] if before else []) + \
                ([f"{beyond} element(s) past the end of {self.name}"] if beyond else [])
        return " and ".join(parts)

    def inside_changed(self, device: Device) -> bool:
        return self.before is not None and device.digest(self.allocation, self.margin, self.size) != self.before

    def inside(self, device: Device, count: int) -> np.ndarray:
        return device.read(self.allocation, self.margin, count)

    def written(self, device: Device) -> Written:
        """How many of its elements no longer hold the bit pattern they all started as (poison, or zeros: a zero
        written over a zero is not seen), read back a chunk at a time: gpt2-full's att is 200 MB."""
        assert self.fill is not None, f"{self.name} did not start as one bit pattern: its writes cannot be counted"
        changed = sum(int(np.count_nonzero(_bits(device.read(self.allocation, self.margin + start,
                                                             min(COUNT_CHUNK, self.size - start))) != self.fill))
                      for start in range(0, self.size, COUNT_CHUNK))
        return Written(self.name, changed, self.size)


def _bits(array: np.ndarray) -> np.ndarray:
    """The raw bits, so that comparisons see NaN payloads."""
    return array.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[array.dtype.itemsize])


def allocate(device: Device, argument: BufferArgument, inputs_dir: Path, sanitizer: bool, position: int = 0) -> Buffer:
    """Allocate one buffer with its margins: inputs filled from their file, everything else poisoned. `position`:
    the buffer's among the call's pointer parameters, which its margins' payload names (`protocol.margin_bits`).

    Poison and zeros are set on the device (a memset); only an input's own data crosses from the
    host, straight from its file's pages; an input the kernel must not change is digested where it
    lies, before and after the call, rather than copied back to compare.
    """
    _, bits = POISON_BITS[argument.dtype]
    dtype = np.dtype(argument.dtype)
    margin = 0 if sanitizer else MARGIN_BYTES // dtype.itemsize
    allocation = device.allocate(argument.allocate + 2 * margin, dtype)
    # The margins hold their own payloads, so that a NaN computed from memory past a buffer's end says so.
    edges = (margin_bits(argument.dtype, position, False), margin_bits(argument.dtype, position, True))
    device.fill(allocation, 0, margin, edges[0])
    device.fill(allocation, margin, argument.allocate, bits)
    device.fill(allocation, margin + argument.allocate, margin, edges[1])
    if argument.role == "input":
        device.write(allocation, margin, np.load(inputs_dir / f"{argument.name}.npy", mmap_mode="r").ravel())
    elif argument.role == "scratch" and argument.init == "zeros":
        device.fill(allocation, margin, argument.allocate, 0)
    elif argument.role == "scratch" and argument.init == "leftover":
        # Finite, deterministic garbage: code that assumes zeros fails the same way on every run.
        rng = np.random.default_rng([LEFTOVER_SEED, len(argument.name)])
        device.write(allocation, margin, rng.uniform(-1e3, 1e3, argument.allocate).astype(dtype))
    # What the inside holds now, where it is one pattern: outputs and poisoned scratch the poison, zeroed scratch 0.
    fill = 0 if argument.role == "scratch" and argument.init == "zeros" else \
        bits if argument.role == "output" or (argument.role == "scratch" and argument.init == "poison") else None
    buffer = Buffer(argument.name, allocation, argument.allocate, margin, edges, fill=fill)
    if argument.role == "input" and not argument.mutable:
        buffer.before = device.digest(allocation, margin, argument.allocate)
    return buffer


def load_library(device: Device, path: str, progress: Progress, index: int) -> Any:
    """Load a kernel's library on the target's device, between the events that tell a crash in loading apart."""
    progress.emit(Event.LOADING, index)  # a crash from here on is the library's static constructors
    library = device.load(path)
    progress.emit(Event.LOADED, index)
    return library


def run_call(plan: Plan, call: PlannedCall, device: Device, libraries: dict[str, Any], progress: Progress,
             index: int, meter: AllocationMeter | None = None) -> bool:
    """One planned call, its `end` written; False after a device error. `meter`: the counting allocator's reader
    (host memory, where the runner preloaded it): the call's peak extra heap memory is its `peak_extra_bytes`."""
    meter = meter or AllocationMeter()
    if call.composition is not None:
        return _run_composed_call(plan, call, device, libraries, progress, index)
    library = libraries.get(call.library)
    if library is None:
        library = libraries[call.library] = load_library(device, call.library, progress, index)
    # Only `buffers` holds them: each is freed when its outputs are read back (before the memory check).
    pointers = [a for a in call.arguments if isinstance(a, BufferArgument)]
    buffers = {a.name: allocate(device, a, Path(call.inputs_dir), plan.sanitizer, position)
               for position, a in enumerate(pointers) if not a.null}
    arguments = [(a, buffers.get(a.name)) for a in call.arguments]
    meter.reset()  # the buffers just allocated are the baseline
    if any(isinstance(a, BufferArgument) and a.count_written for a in call.arguments):
        with MemorySampler(device) as sampler:
            completion = device.call(library, arguments)
        peak: int | None = sampler.peak_extra_bytes
    else:
        completion, peak = device.call(library, arguments), None
    host_peak = meter.read()
    if peak is None:
        peak = completion.peak_device_bytes  # the allocator's own count (torch on CUDA), per case
    if peak is None:
        peak = host_peak  # the counting allocator's (CPU kernels: what the call malloc'd beyond its arguments)
    if completion.status != 0:
        progress.emit(Event.END, index, **failed(completion).fields())
        return False
    output_dir = Path(call.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    modified: list[str] = []
    out_of_bounds: list[str] = []
    written: list[Written] = []
    for argument in call.arguments:
        if not isinstance(argument, BufferArgument) or argument.null:
            continue
        buffer = buffers.pop(argument.name)
        if outside := buffer.outside_writes(device):
            out_of_bounds.append(outside)
        if argument.count_written:
            written.append(buffer.written(device))
        if buffer.inside_changed(device):
            modified.append(buffer.name)  # the next case, or the caller in the real program, would read garbage
        if argument.role == "output":
            inside = buffer.inside(device, int(np.prod(argument.shape)))
            np.save(output_dir / f"{buffer.name}.npy", inside.reshape(argument.shape))
        del buffer
    device.release()
    if not _memory_kept_within(plan, device, progress, index):
        return False
    progress.emit(Event.END, index, **Ended(EndStatus.OK, completion.wall_ms, completion.device_ms, tuple(modified),
                                            tuple(out_of_bounds), written=tuple(written),
                                            peak_extra_bytes=peak, forbidden=completion.forbidden,
                                            launched=completion.launched).fields())
    return True


def failed(completion: Completion) -> Ended:
    """The `end` of a call whose completion is an error: the device's, or an exception the kernel's code raised."""
    return Ended(EndStatus.EXCEPTION if completion.raised else EndStatus.DEVICE_ERROR,
                 message=completion.error or f"error code {completion.status}", forbidden=completion.forbidden)


def _memory_kept_within(plan: Plan, device: Device, progress: Progress, index: int) -> bool:
    limit = plan.device_memory_limit
    if limit and (held := device.held_bytes()) is not None and held > limit:
        # Memory the code allocated and kept: the next case (or the real program) would run out.
        ended = Ended(EndStatus.DEVICE_MEMORY, held_bytes=held, device_memory_limit=limit)
        progress.emit(Event.END, index, **ended.fields())
        return False
    return True


def _run_composed_call(plan: Plan, call: PlannedCall, device: Device, libraries: dict[str, Any], progress: Progress,
                       index: int) -> bool:
    """A composed call: its kernels' libraries loaded once per harness, then its program, run by its check's
    harness half (the composition's `runner`), which saves and seals each output as it goes."""
    composition = call.composition
    assert composition is not None
    for path in composition.libraries.values():
        if path not in libraries:
            libraries[path] = load_library(device, path, progress, index)
    loaded = {kernel: libraries[path] for kernel, path in composition.libraries.items()}
    # Imported here: a kernel's harness, which runs none, keeps to the protocol and its target's half.
    runner = importlib.import_module(composition.runner)
    completion = runner.run(composition, Path(call.output_dir), device, loaded, progress.emit, index)
    device.release()
    if completion.status != 0:
        progress.emit(Event.END, index, **failed(completion).fields())
        return False
    if not _memory_kept_within(plan, device, progress, index):
        return False
    progress.emit(Event.END, index, **Ended(EndStatus.OK, completion.wall_ms, completion.device_ms,
                                            forbidden=completion.forbidden).fields())
    return True


def open_device(plan: Plan) -> Device:
    """The plan's target's device, from its harness half, the assignments' own runtimes it carries registered first."""
    load_sources(plan.runtimes)
    return importlib.import_module(plan.device_module).open_device(plan.sanitizer, plan.device_code)


def announced_device(plan: Plan, progress: Progress) -> Device | None:
    """Say hello, open the plan's device and announce it (or why there is none: then None)."""
    progress.emit(Event.HELLO, at=time.time())
    try:
        device = open_device(plan)
    except Exception as error:  # no driver, no GPU: the machine's problem, said once and plainly
        progress.emit(Event.DEVICE_UNAVAILABLE, message=f"{type(error).__name__}: {error}")
        return None
    progress.emit(Event.DEVICE, **Ready(device.name, time.time(), device.free_bytes(), network_seen()).fields())
    return device


def main(argv: list[str]) -> int:
    plan = Plan.from_json(Path(argv[1]).read_text())
    progress = Progress(Path(argv[2]))
    start = int(argv[3])
    stop = int(argv[4]) if len(argv) > 4 else len(plan.calls)
    device = announced_device(plan, progress)
    if device is None:
        return EXIT_NO_DEVICE
    libraries: dict[str, Any] = {}
    meter = AllocationMeter()
    for index in range(start, stop):
        # "start" precedes loading the library: a crash in its static constructors is this call's.
        progress.emit(Event.START, index, at=time.time())
        if not run_call(plan, plan.calls[index], device, libraries, progress, index, meter):
            return EXIT_DEVICE_ERROR
    progress.emit(Event.FINISHED)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
