"""How a sweep's kernels grow with the swept parameter (N): the fitted exponent of their peak extra memory, the
kernels whose memory grows faster than the assignment allows (FlashAttention's Algorithm 1 that builds the N x N score
matrix), and where one kernel's time overtakes another's on the same device.

Plain functions over `grader.report.swept.DensityPoint`s; the density page (`grader.report.density`) draws
them, the sweep pages' plug-ins (`grader.sweeps`) print their words.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from grader.report.swept import DensityPoint


@dataclass(frozen=True)
class MemoryGrowth:
    """One kernel's peak extra memory against the swept parameter, and its fitted exponent."""

    operation: str
    points: tuple[tuple[float, int], ...]  # (x, peak extra bytes), ascending x
    # Least squares of log(growth from the x before) on log x, over the upper half of x (None: too few points).
    # For memory c + a x^p on x doubling, the growth is a (2^p - 1) x^p / 2^p: p exactly, whatever the constant c
    # every call holds (its tiles, the call's own cost), which would bend a fit of the bytes themselves.
    exponent: float | None
    fitted_from: float | None  # the smallest x of the fit
    limit: float | None  # the assignment's memory_exponent_limit for it (None: none)

    @property
    def flagged(self) -> bool:
        return self.limit is not None and self.exponent is not None and self.exponent >= self.limit

    @property
    def largest(self) -> tuple[float, int]:
        return self.points[-1]


@dataclass(frozen=True)
class TimeCrossover:
    """Two kernels on one device: where the first stops (or starts) being the faster."""

    device: str
    first: str
    second: str
    x: float | None  # where first's time / second's crosses 1 (log-log interpolation); None: never
    first_faster_below: bool | None
    times: tuple[tuple[float, float, float], ...] = ()  # (x, first's µs, second's µs) at each x both were timed

    @property
    def speedups(self) -> tuple[tuple[float, float], ...]:
        """(x, second's time / first's): how many times faster the first is (a KV cache over recomputing)."""
        return tuple((x, second / first) for x, first, second in self.times)


def _geomean(values: Iterable[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def curve(points: Sequence[DensityPoint], device: str, operation: str) -> list[tuple[float, float]]:
    """(density, median µs) of one line, ascending; cases of one density as their geometric mean."""
    by_density: dict[float, list[float]] = {}
    for p in points:
        if p.device == device and p.operation == operation and p.median_us > 0:
            by_density.setdefault(p.density, []).append(p.median_us)
    return [(d, _geomean(times)) for d, times in sorted(by_density.items())]


def fit_exponent(points: Sequence[tuple[float, float]]) -> tuple[float | None, float | None]:
    """The slope of log y on log x (least squares) over the upper half of the points by x (at least two, y > 0),
    and the smallest x it used: where a constant overhead no longer hides the growth."""
    usable = sorted((x, y) for x, y in points if x > 0 and y > 0)
    upper = usable[len(usable) // 2:] if len(usable) >= 4 else usable
    if len(upper) < 2:
        return None, None
    xs, ys = [math.log(x) for x, _ in upper], [math.log(y) for _, y in upper]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None, None
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread, upper[0][0]


def memory_growths(points: Sequence[DensityPoint], limits: Mapping[str, float], fit: bool = True) -> list[MemoryGrowth]:
    """Each kernel's peak extra memory by x (the most of its cases at one x), fitted where `fit` (a size sweep: not
    against a density at one size, where a fixed cost dominates and the steps' slope says nothing); kernels without
    any counted memory are left out."""
    found = []
    for operation in dict.fromkeys(p.operation for p in points):
        by_x: dict[float, int] = {}
        for p in points:
            if p.operation == operation and p.peak_extra_bytes is not None:
                by_x[p.density] = max(by_x.get(p.density, 0), p.peak_extra_bytes)
        if by_x:
            line = tuple(sorted(by_x.items()))
            steps = [(x, float(b - before)) for (_, before), (x, b) in zip(line, line[1:])]
            exponent, start = fit_exponent(steps) if fit else (None, None)
            found.append(MemoryGrowth(operation, line, exponent, start, limits.get(operation)))
    return found


def time_crossovers(points: Sequence[DensityPoint]) -> list[TimeCrossover]:
    """Each pair of kernels timed on one device at two x or more in common: where their times cross."""
    found = []
    for device in dict.fromkeys(p.device for p in points):
        operations = list(dict.fromkeys(p.operation for p in points if p.device == device))
        for i, first in enumerate(operations):
            for second in operations[i + 1:]:
                a, b = dict(curve(points, device, first)), dict(curve(points, device, second))
                common = sorted(a.keys() & b.keys())
                if len(common) >= 2:
                    found.append(TimeCrossover(device, first, second, *_crossing([(x, a[x] / b[x]) for x in common]),
                                               tuple((x, a[x], b[x]) for x in common)))
    return found


def _crossing(ratios: Sequence[tuple[float, float]]) -> tuple[float | None, bool | None]:
    for (x0, r0), (x1, r1) in zip(ratios, ratios[1:]):
        a, b = math.log(r0), math.log(r1)
        if a * b < 0 or b == 0:
            x = math.exp(math.log(x0) + a / (a - b) * (math.log(x1) - math.log(x0)))
            return x, b > a  # the ratio rises through 1: the first is faster below
    return None, None


def growth_words(growth: MemoryGrowth, parameter: str) -> str:
    """A fitted kernel's memory growth, in words."""
    return (f"{growth.operation}: peak extra memory grows like {parameter}^{growth.exponent:.2f} (fitted from "
            f"{parameter} = {growth.fitted_from:g})")


def flag_words(growth: MemoryGrowth, parameter: str) -> str:
    """A flagged kernel, in words, with its measured memory."""
    x, most = growth.largest
    return (f"{growth.operation}'s peak extra memory grows like {parameter}^{growth.exponent:.2f} (the assignment allows "
            f"less than {parameter}^{growth.limit:g}): {mebibytes(most)} at {parameter} = {x:g}. It holds memory "
            f"that grows with {parameter}² (an {parameter} x {parameter} matrix, e.g. all the scores at once)")


def mebibytes(count: int) -> str:
    return f"{count / 2**20:.3g} MiB" if count >= 2**20 else f"{count / 1024:.3g} KiB"
