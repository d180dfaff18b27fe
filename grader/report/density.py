"""Runtime against a case parameter: the timings of a sweep (`grader time --sweep`) as one figure, a line per
device and kernel. By default the parameter is `density` and the sweeps a CPU pack's and its GPU pack's
(sparse-spmv-spgemm and sparse-spmv-spgemm-cupy: four lines), with the GPU's speed-up over the CPU at each density
and the density where it crosses 1. A pack may name another ([timing] sweep_parameter: flash-attention-cpu's N);
where the sweep counted each call's peak extra memory, a second panel draws it, with each kernel's fitted exponent,
the kernels flagged for growing faster than the pack allows, and where two kernels' times cross
(`grader.report.scaling`).

The points are plain data (`grader.timing.sweep.sweep_points` makes them from a sweep: the x axis is each case's
value of the parameter, kept in the points' `density`); the figure is matplotlib's SVG, inlined in a
self-contained HTML page (`render`). Where matplotlib is not installed the page says so and keeps the tables,
which have the same figures.
"""

from __future__ import annotations

import io
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CPU, GPU = "CPU", "GPU"
DENSITY = "density"  # the case parameter a sweep's x axis reads unless the pack names another


@dataclass(frozen=True)
class DensityPoint:
    """One kernel timed on one case: where it runs, what it computes, the case's density (or the swept parameter's
    value), the median time and the most heap memory a call held beyond its arguments (None: not counted)."""

    device: str  # CPU or GPU: where the pack's kernels run
    operation: str  # the base kernel ("spmv")
    case: str
    density: float
    median_us: float
    peak_extra_bytes: int | None = None


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


def _geomean(values: Iterable[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def curve(points: Sequence[DensityPoint], device: str, operation: str) -> list[tuple[float, float]]:
    """(density, median µs) of one line, ascending; cases of one density as their geometric mean."""
    by_density: dict[float, list[float]] = {}
    for p in points:
        if p.device == device and p.operation == operation and p.median_us > 0:
            by_density.setdefault(p.density, []).append(p.median_us)
    return [(d, _geomean(times)) for d, times in sorted(by_density.items())]


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
        # Beside the memory panel the pack's title would not fit (FlashAttention (II)'s is cut): the page's heading
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


def pyplot_or_none() -> Any:
    """matplotlib's pyplot, drawing without a display (figures are written, not shown); None where matplotlib is
    not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return None
    return pyplot


def svg_text(figure: Any, pyplot: Any) -> str:
    """A figure as SVG text to inline in HTML (no XML declaration or doctype), the figure closed."""
    try:
        figure.tight_layout()
        svg = io.StringIO()
        figure.savefig(svg, format="svg")
        text = svg.getvalue()
    finally:
        pyplot.close(figure)
    return text[text.index("<svg"):]


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


def render(points: Sequence[DensityPoint], title: str, parameter: str = "density",
           memory_limits: Mapping[str, float] | None = None, award_words: Sequence[str] = ()) -> str:
    """The page: the figure (or why there is none), each operation's speed-ups and crossover, the kernels against
    each other (their times side by side, where they cross, the pack's speed-up points: `award_words`), their
    memory's growth and flags, every point."""
    from grader.report.render import environment
    from grader.report.scaling import flag_words, mebibytes, memory_growths, time_crossovers

    growths = memory_growths(points, memory_limits or {}, fit=parameter != DENSITY)
    return environment(autoescape=True).get_template("density.html.j2").render(
        title=title, parameter=parameter, figure=figure_svg(points, title, parameter),
        # Kernels against each other where the pack swept them for it (a named parameter): SpMV against SpGEMM
        # at one density is no comparison.
        crossovers=crossovers(points), time_crossovers=time_crossovers(points) if parameter != DENSITY else [],
        growths=growths, flags=[flag_words(g, parameter) for g in growths if g.flagged], award_words=award_words,
        points=sorted(points, key=lambda p: (p.operation, p.device, p.density, p.case)), size=mebibytes)
