"""The harness's half of a composed call (`grader.boundary.protocol.Composition`), whichever check's: the
program's allocations and its kernels' libraries on the device, its steps called, each output saved and sealed,
and stray writes found beside a step's slices and named. The check's own harness half (the
composition's `runner`) says which steps run, how often, and what is saved.

A step's pointer arguments are slices of the allocations (a `Slice`: the allocation and an element
offset, which the targets' calls add as they add a buffer's margin).

NumPy and `grader.boundary` only (its protocol, and the targets' `Device`): the harness imports it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from grader.boundary.device import Completion
from grader.boundary.protocol import Composition, Event, Region, Sealed, SliceArgument, Step, seal_of

if TYPE_CHECKING:
    from grader.boundary.device import Device

Emit = Callable[..., None]  # Progress.emit(kind, index, **fields)


@dataclass
class Slice:
    """A step's pointer argument: an allocation and the element offset the kernel's pointer starts at."""

    allocation: Any
    margin: int  # named as a Buffer's margin is: the targets' calls pass pointer(allocation) + margin * itemsize


class Program:
    """One composed call's allocations and libraries on the device, and the kernel time its steps took."""

    def __init__(self, composition: Composition, device: Device, libraries: dict[str, Any]) -> None:
        self.composition, self.device, self.libraries = composition, device, libraries
        self.spaces: dict[str, Any] = {}
        for name, space in composition.spaces.items():
            if space.file:  # the weights: the device may keep them between calls, each call sees the file's
                self.spaces[name] = device.upload(space.file, space.count, np.dtype(space.dtype))
            else:  # zeroed, as a program that cudaMemsets its allocations leaves them
                self.spaces[name] = device.allocate(space.count, np.dtype(space.dtype))
                device.fill(self.spaces[name], 0, space.count, 0)
        self.wall_ms, self.device_ms = 0.0, None

    def call(self, step: Step) -> Completion | None:
        """Call one step's kernel; how it failed (its error in words), or None."""
        arguments = [(a, Slice(self.spaces[a.space], a.offset) if isinstance(a, SliceArgument) and not a.null
                      else None) for a in step.arguments]
        completion = self.device.call(self.libraries[step.kernel], arguments)
        if completion.status != 0:
            return dataclasses.replace(completion, error=completion.error or f"error code {completion.status}")
        self.wall_ms += completion.wall_ms
        if completion.device_ms is not None:
            self.device_ms = (self.device_ms or 0.0) + completion.device_ms
        return None

    def read(self, argument: SliceArgument) -> np.ndarray:
        return self.device.read(self.spaces[argument.space], argument.offset,
                                int(np.prod(argument.shape))).reshape(argument.shape)

    def digest(self, space: str, offset: int, count: int) -> int:
        return self.device.digest(self.spaces[space], offset, count)

    def finished(self, failed: Completion | None = None) -> Completion:
        """How the whole call ended: ok, or the failed step's error; the kernel time of its steps, summed."""
        if failed is not None:
            return Completion(failed.status, self.wall_ms, self.device_ms, failed.error)
        return Completion(0, self.wall_ms, self.device_ms)

    def beside(self, space: str, taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The (offset, count) of each region of `space` just before or just after an interval of `taken`
        (offset, count in `space`), itself untaken.

        Not every other region: digesting all of them before and after every step would cost more than
        the program (on the CPU); a stray write past a bound lands beside it.
        """
        regions = [r for r in self.composition.regions if r.space == space]

        def overlaps(region: Region) -> bool:
            return any(o < region.offset + region.count and region.offset < o + c for o, c in taken)

        found = {(r.offset, r.count) for o, c in taken for r in regions
                 if (r.offset <= o - 1 < r.offset + r.count or r.offset <= o + c < r.offset + r.count)
                 and not overlaps(r)}
        return sorted(found)

    def landed(self, space: str, mirror: np.ndarray, changed: list[tuple[int, int]]) -> tuple[str, ...]:
        """Where the stray writes landed: the graded regions of `space` that no longer hold what the mirror (its
        copy on the host) holds; a change only in scratch is named by the scratch it could be."""
        names: list[str] = []
        for offset, count in changed:
            now = self.device.read(self.spaces[space], offset, count)
            inside = [r for r in self.composition.regions
                      if r.space == space and r.offset < offset + count and offset < r.offset + r.count]
            hit = [r.name for r in inside if r.gold and not np.array_equal(  # bit for bit: NaN payloads too
                _bits(now[max(r.offset, offset) - offset: min(r.offset + r.count, offset + count) - offset]),
                _bits(mirror[max(r.offset, offset): min(r.offset + r.count, offset + count)]))]
            scratch = [r.name for r in inside if not r.gold]
            names += hit or ([f"scratch ({scratch[0]}{f' … {scratch[-1]}' if len(scratch) > 1 else ''})"]
                             if scratch else [])
        return tuple(names)


def _bits(array: np.ndarray) -> np.ndarray:
    return array.view(f"u{array.dtype.itemsize}")


def seal(output_dir: Path, stem: str, array: np.ndarray, emit: Emit, index: int, modified: tuple[str, ...] = (),
         outside: tuple[str, ...] = ()) -> None:
    """Save one output and seal it: the runner has its digest before any later student code runs."""
    array = np.ascontiguousarray(array)
    np.save(output_dir / f"{stem}.npy", array)
    emit(Event.SEALED, index, **Sealed(stem, seal_of(array.tobytes()), modified, outside).fields())
