"""The harness's half of the forward-pass check: the student's kernels composed on the device.

Activations live in one zeroed allocation and parameters in another, laid out as the course's
program lays them out; each step's kernel gets pointers into them (a `Slice`: the allocation and an
element offset, which the targets' calls add as they add a buffer's margin).

Gold enters this process deliberately, and only just in time (the one exception to "gold never
enters the harness"): in the layer-by-layer pass, a step's swap-in gold is computed here, in
float64 with the pack's trusted numpy_reference.py, from the gold already swapped in, and only
after the student's step returned and its output was saved and sealed (its digest in a `sealed`
event, which the runner reads as it is written). Student code therefore never sees a step's gold
before that step ran, and a lingering thread that rewrites a saved output afterwards is caught by
its seal. The grader computes the same gold outside, for the compare (`grader.forward.gold`).

NumPy, `grader.protocol` and `grader.forward.compose` only.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from grader.forward.compose import gold_of_step, next_tokens, put
from grader.protocol import POISON_BITS, Event, ForwardPlan, ForwardStep, Region, Sealed, SliceArgument, seal_of

if TYPE_CHECKING:
    from grader.targets import Device

Emit = Callable[..., None]  # Progress.emit(kind, index, **fields)


@dataclass
class Slice:
    """A step's pointer argument: an allocation and the element offset the kernel's pointer starts at."""

    allocation: Any
    margin: int  # named as a Buffer's margin is: the targets' calls pass pointer(allocation) + margin * itemsize


@dataclass(frozen=True)
class Ran:
    """How a forward-pass call ended: ok, or the step's error in the runtime's words; its summed times."""

    ok: bool
    wall_ms: float = 0.0
    device_ms: float | None = None
    error: str = ""


class _Pass:
    """One forward-pass call's allocations and libraries on the device."""

    def __init__(self, forward: ForwardPlan, device: Device, libraries: dict[str, Any]) -> None:
        self.forward, self.device, self.libraries = forward, device, libraries
        self.spaces = {"activations": device.allocate(forward.sizes["activations"], np.dtype(np.float32)),
                       "parameters": device.allocate(forward.sizes["parameters"], np.dtype(np.float32)),
                       "tokens": device.allocate(forward.sizes["tokens"], np.dtype(np.int32))}
        device.fill(self.spaces["activations"], 0, forward.sizes["activations"], 0)  # as the course cudaMemsets them
        # Straight from the file's pages: the weights are never copied on the host.
        device.write(self.spaces["parameters"], 0, np.load(forward.parameters_file, mmap_mode="r"))
        self.tokens = np.load(forward.tokens_file).astype(np.int32)
        self.wall_ms, self.device_ms = 0.0, None

    def call(self, step: ForwardStep) -> str | None:
        """Call one step's kernel; its error in words, or None."""
        arguments = [(a, Slice(self.spaces[a.space], a.offset) if isinstance(a, SliceArgument) and not a.null
                      else None) for a in step.arguments]
        completion = self.device.call(self.libraries[step.kernel], arguments)
        if completion.status != 0:
            return completion.error or f"error code {completion.status}"
        self.wall_ms += completion.wall_ms
        if completion.device_ms is not None:
            self.device_ms = (self.device_ms or 0.0) + completion.device_ms
        return None

    def read(self, argument: SliceArgument) -> np.ndarray:
        return self.device.read(self.spaces[argument.space], argument.offset,
                                int(np.prod(argument.shape))).reshape(argument.shape)

    def digest(self, space: str, offset: int, count: int) -> int:
        return self.device.digest(self.spaces[space], offset, count)

    def ran(self, error: str | None = None) -> Ran:
        return Ran(error is None, self.wall_ms, self.device_ms, error or "")


def run_forward(forward: ForwardPlan, output_dir: Path, device: Device, libraries: dict[str, Any], emit: Emit,
                index: int) -> Ran:
    """Run the call's pass (`forward.mode`); every output is saved under `output_dir` and sealed."""
    output_dir.mkdir(parents=True, exist_ok=True)
    run = _Pass(forward, device, libraries)
    device.write(run.spaces["tokens"], 0, run.tokens.reshape(-1))
    if forward.mode == "layers":
        return _layer_by_layer(run, output_dir, emit, index)
    if forward.mode == "logits":
        for step in forward.steps:
            if error := run.call(step):
                return run.ran(error)
        logits = device.read(run.spaces["activations"], forward.logits_offset, forward.B * forward.T * forward.Vp)
        _save(output_dir, "logits", logits.reshape(forward.B, forward.T, forward.Vp), emit, index)
        return run.ran()
    return _generation(run, output_dir, emit, index)


def _layer_by_layer(run: _Pass, output_dir: Path, emit: Emit, index: int) -> Ran:
    forward = run.forward
    truth = _module(forward.reference_file)
    host = {"activations": np.zeros(forward.sizes["activations"], np.float32),
            "parameters": np.load(forward.parameters_file, mmap_mode="r"), "tokens": run.tokens.reshape(-1)}
    for number, step in enumerate(forward.steps):
        slices = [a for a in step.arguments if isinstance(a, SliceArgument) and not a.null]
        inputs = [a for a in slices if a.role == "input" and not a.mutable]
        # The activations beside the step's own slices (its outputs, scratch and mutable inputs), where a write
        # past an end lands: the next layer's slice of the same tensor, or the next tensor.
        guarded = _beside([(a.offset, a.count) for a in slices if a.space == "activations"
                           and (a.role != "input" or a.mutable)], forward.regions)
        (output,) = [a for a in slices if a.role == "output"]
        # Poisoned, as a kernel's case poisons its outputs: an element the step never wrote is named so.
        run.device.fill(run.spaces["activations"], output.offset, int(np.prod(output.shape)),
                        POISON_BITS[output.dtype][1])
        inputs_before = [run.digest(a.space, a.offset, a.count) for a in inputs]
        guarded_before = [run.digest("activations", o, c) for o, c in guarded]
        if error := run.call(step):
            return run.ran(error)
        produced = run.read(output)
        modified = tuple(a.name for a, d in zip(inputs, inputs_before) if run.digest(a.space, a.offset, a.count) != d)
        changed = [(o, c) for (o, c), d in zip(guarded, guarded_before) if run.digest("activations", o, c) != d]
        outside = _named(run, host["activations"], changed) if changed else ()
        _save(output_dir, step.output, produced, emit, index, modified, outside)
        if number + 1 < len(forward.steps):  # sealed: only now may its gold exist here
            for name, gold in gold_of_step(truth, step.kernel, step.arguments, host).items():
                put(host, output, gold)
                run.device.write(run.spaces["activations"], output.offset,
                                 host["activations"][output.offset: output.offset + gold.size])
    return run.ran()


def _generation(run: _Pass, output_dir: Path, emit: Emit, index: int) -> Ran:
    """Greedy tokens: pass after pass at the fixed B, T, each reading position t - 1 (causal attention makes
    the padding after it irrelevant); the activations are reused between passes, as the course's loop does."""
    forward = run.forward
    tokens = np.zeros((forward.B, forward.T), np.int32)
    tokens[:, :forward.prompt] = run.tokens[:, :forward.prompt]
    for position in range(forward.prompt, forward.prompt + forward.generate):
        run.device.write(run.spaces["tokens"], 0, tokens.reshape(-1))
        for step in forward.steps:
            if error := run.call(step):
                return run.ran(error)
        rows = np.stack([run.device.read(run.spaces["activations"],
                                         forward.logits_offset + (b * forward.T + position - 1) * forward.Vp, forward.Vp)
                         for b in range(forward.B)])
        tokens[:, position] = next_tokens(rows, forward.V)
    _save(output_dir, "tokens", np.ascontiguousarray(tokens[:, forward.prompt:]), emit, index)
    return run.ran()


def _save(output_dir: Path, stem: str, array: np.ndarray, emit: Emit, index: int, modified: tuple[str, ...] = (),
          outside: tuple[str, ...] = ()) -> None:
    """Save one output and seal it: the runner has its digest before any later student code runs."""
    array = np.ascontiguousarray(array)
    np.save(output_dir / f"{stem}.npy", array)
    emit(Event.SEALED, index, **Sealed(stem, seal_of(array.tobytes()), modified, outside).fields())


def _beside(taken: list[tuple[int, int]], regions: tuple[Region, ...]) -> list[tuple[int, int]]:
    """The (offset, count) of each region just before or just after an interval of `taken`, itself untaken.

    Not every other activation: digesting all of them before and after every step would cost more
    than the pass (on the CPU); a stray write past a bound lands beside it.
    """
    def overlaps(region: Region) -> bool:
        return any(o < region.offset + region.count and region.offset < o + c for o, c in taken)

    beside = {(r.offset, r.count) for o, c in taken for r in regions
              if (r.offset <= o - 1 < r.offset + r.count or r.offset <= o + c < r.offset + r.count)
              and not overlaps(r)}
    return sorted(beside)


def _named(run: _Pass, mirror: np.ndarray, changed: list[tuple[int, int]]) -> tuple[str, ...]:
    """Where the stray writes landed: the graded activations that no longer hold their swapped-in values
    (the mirror holds them); a change only in scratch is named by the scratch it could be."""
    names: list[str] = []
    for offset, count in changed:
        now = run.device.read(run.spaces["activations"], offset, count)
        inside = [r for r in run.forward.regions if r.offset < offset + count and offset < r.offset + r.count]
        hit = [r.name for r in inside if r.gold and not np.array_equal(
            now[max(r.offset, offset) - offset: min(r.offset + r.count, offset + count) - offset].view(np.uint32),
            mirror[max(r.offset, offset): min(r.offset + r.count, offset + count)].view(np.uint32))]
        scratch = [r.name for r in inside if not r.gold]
        names += hit or ([f"scratch ({scratch[0]}{f' … {scratch[-1]}' if len(scratch) > 1 else ''})"] if scratch else [])
    return tuple(names)


def _module(path: str) -> ModuleType:
    """The pack's numpy_reference.py (trusted pack code, copied beside the inputs) as a module."""
    spec = importlib.util.spec_from_file_location("kernel_grader_forward_truth", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
