"""Runtime against a case parameter: the timings of a sweep (`grader time --sweep`) as one figure, a line per
device and kernel. By default the parameter is `density` and the sweeps a CPU assignment's and its GPU assignment's
(sparse-spmv-spgemm and sparse-spmv-spgemm-cupy: four lines), with the GPU's speed-up over the CPU at each density
and the density where it crosses 1. An assignment may name another ([timing] sweep_parameter: flash-attention-cpu's N);
where the sweep counted each call's peak extra memory, a second panel draws it, with each kernel's fitted exponent,
the kernels flagged for growing faster than the assignment allows, and where two kernels' times cross
(`grader.report.scaling`).

The points are plain data (`grader.report.swept`; `grader.sweeps.density` makes them from a sweep: the x axis is
each case's value of the parameter, kept in the points' `density`); the figure is matplotlib's SVG, inlined in a
self-contained HTML page (`render`). Where matplotlib is not installed the page says so and keeps the tables,
which have the same figures. It is the page of [timing] sweep_page "density" (`grader.sweeps.density`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grader.report.figures import pyplot_or_none, svg_text
from grader.report.scaling import curve, flag_words, mebibytes, memory_growths, time_crossovers
from grader.report.swept import CPU, DENSITY, GPU, DensityPoint

TEMPLATE = "density.html.j2"


@dataclass(frozen=True)
class SpeedUp:
    """The GPU against the CPU at one density (the geometric mean over that density's cases)."""

    density: float
    cpu_us: float
    gpu_us: float

    @property
    def speedup(self) -> float:
        return self.cpu_us / self.gpu_us


@dataclass(frozen=True)
class Crossover:
    """One operation's speed-ups by density, and where the GPU starts (or stops) being faster."""

    operation: str
    speedups: tuple[SpeedUp, ...]  # ascending density
    density: float | None  # where the speed-up crosses 1 (log-log interpolation between neighbours); None: never
    gpu_faster_above: bool | None  # the GPU wins at densities above the crossing (False: below it)


def crossovers(points: Sequence[DensityPoint]) -> list[Crossover]:
    """Each operation timed on both devices: its speed-up at each density both have, and its crossing of 1."""
    found = []
    for operation in dict.fromkeys(p.operation for p in points):
        cpu, gpu = dict(curve(points, CPU, operation)), dict(curve(points, GPU, operation))
        speedups = tuple(SpeedUp(d, cpu[d], gpu[d]) for d in sorted(cpu.keys() & gpu.keys()))
        if speedups:
            found.append(Crossover(operation, speedups, *_crossing(speedups)))
    return found


def _crossing(speedups: Sequence[SpeedUp]) -> tuple[float | None, bool | None]:
    """The first density where the speed-up crosses 1, interpolated in log density and log speed-up."""
    for low, high in zip(speedups, speedups[1:]):
        a, b = math.log(low.speedup), math.log(high.speedup)
        if a == 0:
            return low.density, b > 0
        if a * b < 0 or b == 0:
            share = a / (a - b)
            x = math.log(low.density) + share * (math.log(high.density) - math.log(low.density))
            return math.exp(x), b > a
    return None, None


def figure_svg(points: Sequence[DensityPoint], title: str = "", parameter: str = "density") -> str | None:
    """The figure (runtime against the parameter, log-log, a line per device and operation; beside it the peak
    extra memory where it was counted) as SVG text; None where matplotlib is not installed."""
    pyplot = pyplot_or_none()
    if pyplot is None:
        return None
    memory = any(p.peak_extra_bytes for p in points)
    figure, panels = pyplot.subplots(1, 2 if memory else 1, figsize=(10 if memory else 7, 4.2), squeeze=False)
    try:
        axes = panels[0][0]
        for operation in dict.fromkeys(p.operation for p in points):
            for device, style in ((CPU, "o-"), (GPU, "s--")):
                line = curve(points, device, operation)
                if line:
                    axes.plot([d for d, _ in line], [t / 1000 for _, t in line], style, label=f"{device} {operation}")
        axes.set_ylabel("median time per call (ms)")
        # Beside the memory panel the assignment's title would not fit (FlashAttention (II)'s is cut): the page's heading
        # carries it, the panels say what they draw.
        _axes(axes, parameter, "runtime" if memory else title)
        if memory:
            axes = panels[0][1]
            for operation in dict.fromkeys(p.operation for p in points):
                line = sorted((p.density, p.peak_extra_bytes) for p in points
                              if p.operation == operation and p.peak_extra_bytes)
                if line:
                    axes.plot([x for x, _ in line], [b / 2**20 for _, b in line], "o-", label=operation)
            axes.set_ylabel("peak extra memory per call (MiB)")
            _axes(axes, parameter, "peak extra memory")
    except BaseException:
        pyplot.close(figure)
        raise
    return svg_text(figure, pyplot)


def _axes(axes: Any, parameter: str, title: str) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axes.set_xscale("log")
    axes.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    xs = sorted({x for line in axes.get_lines() for x in line.get_xdata()})
    if parameter != DENSITY and 0 < len(xs) <= 12:
        # A named parameter's values (N, new_tokens: 32 ... 512) as its ticks, in plain numbers: log's minor labels
        # (3 x 10^1, 4 x 10^1) overlap there.
        axes.set_xticks(xs, [f"{x:g}" for x in xs])
        axes.xaxis.set_minor_formatter(NullFormatter())
    low, high = axes.get_ylim()
    if high < 10 * low:  # less than a decade (memory over a constant): plain numbers, not 1.05 x 10^2
        axes.yaxis.set_major_formatter(plain)
        axes.yaxis.set_minor_formatter(plain)
    axes.set_xlabel("density (stored entries / (rows x columns))" if parameter == "density" else parameter)
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()


def context(points: Sequence[DensityPoint], title: str, parameter: str = DENSITY,
            memory_limits: Mapping[str, float] | None = None, award_words: Sequence[str] = ()) -> dict[str, Any]:
    """What the page's template is given: the figure (or None), each operation's speed-ups and crossover, the kernels
    against each other (their times side by side, where they cross, the assignment's speed-up points: `award_words`),
    their memory's growth and flags, every point."""
    growths = memory_growths(points, memory_limits or {}, fit=parameter != DENSITY)
    return dict(
        title=title, parameter=parameter, figure=figure_svg(points, title, parameter),
        # Kernels against each other where the assignment swept them for it (a named parameter): SpMV against SpGEMM
        # at one density is no comparison.
        crossovers=crossovers(points), time_crossovers=time_crossovers(points) if parameter != DENSITY else [],
        growths=growths, flags=[flag_words(g, parameter) for g in growths if g.flagged], award_words=award_words,
        points=sorted(points, key=lambda p: (p.operation, p.device, p.density, p.case)), size=mebibytes)


def render(points: Sequence[DensityPoint], title: str, parameter: str = DENSITY,
           memory_limits: Mapping[str, float] | None = None, award_words: Sequence[str] = ()) -> str:
    """The page (`context`'s, through the template)."""
    from grader.report.render import environment

    return environment(autoescape=True).get_template(TEMPLATE).render(
        context(points, title, parameter, memory_limits, award_words))
