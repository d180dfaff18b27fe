"""The timing harness: the correctness harness's plan performed timed, in the same sandbox. Started by
`grader.timing.run` through the correctness harness's watchdog, with the same plan, progress file
and call range, and the timing's settings after them:

    python -m grader.boundary.timing_harness PLAN PROGRESS START STOP SETTINGS_JSON

The plan's calls START..STOP are one kernel on one case, one call per input set of the pool: call
START has the case's own inputs (its gold is known), the others fresh inputs from the same
generator. Each set gets its own buffers (between poisoned margins, as `grader.boundary.harness`
allocates them) and a pristine copy of its inputs. Then: `warmup` untimed calls, timed calls rotating
through the sets' buffers, each time holding another set's data (`KernelTimer.rotation`), until the
stop rule (`grader.boundary.timing_statistics`) says so, and the re-check: the case's own set called
once more, its outputs saved for the grader to compare with gold outside the sandbox. Before every call
the outputs are poisoned again, scratch set as the spec says and the inputs filled, so that a call
that does no work leaves poison, never the previous call's answer; then the timer readies the
device (`grader.boundary.timers`: the L2 flush, the spin).

Progress lines (`grader.boundary.protocol`'s events, so that the watchdog sees which call is in flight):

    hello, (device | device_unavailable), then per call: start i, [loading i, loaded i,] end i
    (`end` with `phase` warmup/timed/recheck, and a timed call's `time_ms`, `wall_ms`, `gap_ms`,
    `written`), then `timing` (the clocks, the timer's facts and `peak_extra_bytes`), finished

Where the grader preloaded its counting allocator (`grader/boundary/alloc_counter.c`: CPU kernels), each call's
peak extra heap memory is read around it; `peak_extra_bytes` is the most of any call (None: not counted).
"""

from __future__ import annotations

import enum
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grader.boundary.allocations import AllocationMeter
from grader.boundary.harness import Buffer, Progress, allocate, announced_device, failed, load_library
from grader.boundary.protocol import (EXIT_DEVICE_ERROR, EXIT_NO_DEVICE, POISON_BITS, BufferArgument, Ended, EndStatus,
                                      Event, Plan, PlannedCall)
from grader.boundary.timers import WallTimer, timer_for
from grader.boundary.timing_statistics import StopRule, stop_reason

POOL_MEMORY_SHARE = 0.5  # the pool's buffers may take this share of the device's free memory


class Phase(str, enum.Enum):
    """Which part of the protocol a call belongs to (its `end` event's `phase`)."""

    WARMUP = "warmup"
    TIMED = "timed"
    RECHECK = "recheck"


@dataclass(frozen=True)
class Settings:
    """The protocol's knobs for one kernel, passed on the command line."""

    warmup: int
    rule: StopRule
    spin_us: float

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Settings:
        document = json.loads(text)
        return cls(document["warmup"], StopRule(**document["rule"]), document["spin_us"])


class TimingEvent(str, enum.Enum):
    """The timing harness's event beside `grader.boundary.protocol.Event`'s."""

    TIMING = "timing"  # after the re-check: the clocks and the timer's facts


class InputSet:
    """One input set of the pool: its buffers, and a pristine copy of its inputs on the device.

    The copy is what any set's buffers are refilled from before a call (`reset`): a set's buffers
    hold another set's data at each visit, so an answer kept per pointer is stale the next time.
    """

    def __init__(self, device: Any, call: PlannedCall, sanitizer: bool) -> None:
        self.call = call
        pointers = [a for a in call.arguments if isinstance(a, BufferArgument)]
        self.arguments = [a for a in pointers if not a.null]
        # Each at its position among the pointer parameters, as a case's harness allocates it (its margins' payload).
        self.buffers = {a.name: allocate(device, a, Path(call.inputs_dir), sanitizer, pointers.index(a))
                        for a in self.arguments}
        self.pristine: dict[str, tuple[Any, int]] = {}
        for argument in self.arguments:
            if argument.role == "input":
                buffer, count = self.buffers[argument.name], int(np.prod(argument.shape))
                copy = device.allocate(count, np.dtype(argument.dtype))
                device.write(copy, 0, device.read(buffer.allocation, buffer.margin, count))
                self.pristine[argument.name] = (copy, count)

    def reset(self, device: Any, timer: WallTimer, data: InputSet) -> None:
        """Outputs poisoned, scratch as the spec says, inputs holding `data`'s: no call sees another's leftovers."""
        for argument in self.arguments:
            buffer = self.buffers[argument.name]
            bits = POISON_BITS[argument.dtype][1]
            if argument.role == "output" or (argument.role == "scratch" and argument.init == "poison"):
                device.fill(buffer.allocation, buffer.margin, buffer.size, bits)
            elif argument.role == "scratch" and argument.init == "zeros":
                device.fill(buffer.allocation, buffer.margin, buffer.size, 0)
            elif argument.role == "input":
                if argument.mutable:  # used as scratch last time, maybe past its shape: as allocated again
                    device.fill(buffer.allocation, buffer.margin, buffer.size, bits)
                copy, count = data.pristine[argument.name]
                timer.copy(buffer.allocation, buffer.margin, copy, count)

    def outputs(self) -> list[tuple[BufferArgument, Buffer]]:
        return [(a, self.buffers[a.name]) for a in self.arguments if a.role == "output"]

    def digests(self, device: Any) -> dict[str, int]:
        return {a.name: device.digest(b.allocation, b.margin, int(np.prod(a.shape))) for a, b in self.outputs()}

    def argument_list(self) -> list[tuple[Any, Buffer | None]]:
        return [(a, self.buffers.get(a.name)) for a in self.call.arguments]


def pool_size(device: Any, calls: tuple[PlannedCall, ...]) -> int:
    """How many input sets fit in the device's free memory (at least the case's own)."""
    free = device.free_bytes()
    if free is None:
        return len(calls)
    # Its buffers, and the pristine copy of its inputs.
    per_set = sum((a.allocate + (int(np.prod(a.shape)) if a.role == "input" else 0)) * np.dtype(a.dtype).itemsize
                  for a in calls[0].arguments if isinstance(a, BufferArgument) and not a.null) or 1
    return max(1, min(len(calls), int(free * POOL_MEMORY_SHARE // per_set)))


class KernelTimer:
    """One kernel's timing in this harness: its library, its pool of input sets, the device's timer."""

    def __init__(self, plan: Plan, start: int, stop: int, settings: Settings, device: Any,
                 progress: Progress) -> None:
        self.plan, self.start, self.settings, self.device, self.progress = plan, start, settings, device, progress
        calls = plan.calls[start:stop]
        self.timer = timer_for(plan.device_module, device, settings.spin_us)
        if hasattr(device, "watch_forbidden"):  # a Python kernel: timed as it runs, unwatched (grading judged it)
            device.watch_forbidden = False
        # "start" precedes loading the library: a crash in its static constructors is the first call's.
        progress.emit(Event.START, start, at=time.time())
        self.library = load_library(device, calls[0].library, progress, start)
        self.pool = [InputSet(device, call, plan.sanitizer) for call in calls[:pool_size(device, calls)]]
        self.pool[0].reset(device, self.timer, self.pool[0])
        self.unwritten = self.pool[0].digests(device)  # what an output that only holds poison digests to
        self.calls_made = 0
        self.meter = AllocationMeter()

    def rotation(self) -> tuple[int, int]:
        """The next call's buffers and data: the sets' buffers in turn, each holding the next set's data at each
        visit (with two sets or more: never the same buffers twice running, nor the same data in a set's buffers)."""
        size, number = len(self.pool), self.calls_made
        return number % size, (number % size + 1 + number // size) % size

    def call(self, index: int, data: int, phase: Phase) -> dict[str, Any] | None:
        """One call on input set `index`'s buffers holding set `data`'s inputs, its `end` event written; None after
        a device error."""
        if self.calls_made:
            self.progress.emit(Event.START, self.start + index, at=time.time())
        self.calls_made += 1
        entry = self.pool[index]
        entry.reset(self.device, self.timer, self.pool[data])
        ready_at = self.timer.prepare()
        arguments = entry.argument_list()
        self.meter.reset()
        called_at = time.perf_counter()
        completion = self.device.call(self.library, arguments)
        self.meter.read()
        if completion.status != 0:
            self.progress.emit(Event.END, self.start + index, phase=phase, **failed(completion).fields())
            return None
        if phase == Phase.RECHECK:
            return self._save(entry, completion)
        sample = self.timer.sample(completion, ready_at, called_at)
        # A call after which an output digests as pure poison did no work (a replayed or skipped call).
        done = entry.digests(self.device)
        fields = {"phase": phase, "data": data, "written": all(done[n] != self.unwritten[n] for n in done),
                  **asdict(sample)}
        self.progress.emit(Event.END, self.start + index,
                           **{**Ended(EndStatus.OK, device_ms=completion.device_ms).fields(), **fields})
        return fields

    def _save(self, entry: InputSet, completion: Any) -> dict[str, Any]:
        """The re-check's outputs saved for the grader's compare with gold, as the correctness harness saves them."""
        output_dir = Path(entry.call.output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        out_of_bounds = [outside for b in entry.buffers.values() if (outside := b.outside_writes(self.device))]
        modified = [b.name for b in entry.buffers.values() if b.inside_changed(self.device)]
        for argument, buffer in entry.outputs():
            inside = buffer.inside(self.device, int(np.prod(argument.shape)))
            np.save(output_dir / f"{buffer.name}.npy", inside.reshape(argument.shape))
        self.progress.emit(Event.END, self.start, phase=Phase.RECHECK, **Ended(
            EndStatus.OK, completion.wall_ms, completion.device_ms, tuple(modified), tuple(out_of_bounds)).fields())
        return {"phase": Phase.RECHECK}

    def run(self) -> bool:
        """Warm-up, the timed calls until the stop rule says so, the re-check; False after a device error."""
        for _ in range(self.settings.warmup):
            if self.call(*self.rotation(), Phase.WARMUP) is None:
                return False
        clocks_before = self.timer.clocks()
        samples: list[float] = []
        began = time.perf_counter()
        reason = None
        while reason is None:
            fields = self.call(*self.rotation(), Phase.TIMED)
            if fields is None:
                return False
            samples.append(fields["time_ms"])
            reason = stop_reason(samples, time.perf_counter() - began, self.settings.rule)
        timed_s = time.perf_counter() - began
        clocks_after = self.timer.clocks()
        if self.call(0, 0, Phase.RECHECK) is None:  # the case's own inputs in their own buffers: gold is known
            return False
        self.progress.emit(TimingEvent.TIMING, pool=len(self.pool), stopped_by=reason, timed_s=timed_s,
                           clocks_before=clocks_before, clocks_after=clocks_after,
                           peak_extra_bytes=self.meter.most, **self.timer.facts())
        return True


def main(argv: list[str]) -> int:
    plan_file, progress_file, start, stop, settings_json = argv[1:6]
    settings = Settings.from_json(settings_json)
    plan = Plan.from_json(Path(plan_file).read_text())
    progress = Progress(Path(progress_file))
    device = announced_device(plan, progress)
    if device is None:
        return EXIT_NO_DEVICE
    if not KernelTimer(plan, int(start), int(stop), settings, device, progress).run():
        return EXIT_DEVICE_ERROR
    progress.emit(Event.FINISHED)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
