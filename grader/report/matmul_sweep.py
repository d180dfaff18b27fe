"""A matmul assignment's sweep (`grader time --sweep`, [timing] sweep_page = "matmul": tiled-matmul): every kernel's
GFLOP/s against the size, the tiled kernel a line per tile; its time against the tile at the largest size; the sweet
spot (the fastest tile at each size); and the share of cuBLAS's GFLOP/s each kernel reaches.

The points are plain data (`grader.report.swept`; `grader.sweeps.matmul` makes them from a sweep: a case's M, N
and K give its flops, its `tile` the tiled kernel's block edge, the swept parameter the x axis); the figure is
matplotlib's SVG inlined in a self-contained HTML page (`render`), whose tables hold the same figures where
matplotlib is not installed. It is the page of [timing] sweep_page "matmul" (`grader.sweeps.matmul`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grader.report.figures import pyplot_or_none, svg_text
from grader.report.swept import MatmulPoint

BASELINE = "cublas"  # the kernel the others are measured against: the vendor's library
TEMPLATE = "matmul_sweep.html.j2"


@dataclass(frozen=True)
class SweetSpot:
    """A tiled kernel at one size: its time at each tile, ascending tile, and the fastest."""

    kernel: str
    size: float
    times_us: tuple[tuple[int, float], ...]

    @property
    def tile(self) -> int:
        return min(self.times_us, key=lambda pair: pair[1])[0]


@dataclass(frozen=True)
class Share:
    """A kernel's GFLOP/s (its best tile's) as a fraction of the baseline's, at one size."""

    kernel: str
    size: float
    tile: int | None
    fraction: float


def best(points: Sequence[MatmulPoint], kernel: str, size: float) -> MatmulPoint | None:
    """The kernel's fastest point at this size (over its tiles)."""
    return min((p for p in points if p.kernel == kernel and p.size == size), key=lambda p: p.median_us, default=None)


def sweet_spots(points: Sequence[MatmulPoint]) -> list[SweetSpot]:
    """Each kernel timed at two tiles or more at one size: its time by tile there, ascending size."""
    found = []
    for kernel in dict.fromkeys(p.kernel for p in points if p.tile is not None):
        for size in sorted({p.size for p in points if p.kernel == kernel}):
            times = tuple(sorted((p.tile, p.median_us) for p in points
                                 if p.kernel == kernel and p.size == size and p.tile is not None))
            if len(times) >= 2:
                found.append(SweetSpot(kernel, size, times))
    return found


def shares(points: Sequence[MatmulPoint], baseline: str = BASELINE) -> list[Share]:
    """Every other kernel's GFLOP/s (its best tile's) over the baseline's, at each size both were timed at."""
    found = []
    for kernel in dict.fromkeys(p.kernel for p in points if p.kernel != baseline):
        for size in sorted({p.size for p in points if p.kernel == kernel}):
            mine, theirs = best(points, kernel, size), best(points, baseline, size)
            if mine is not None and theirs is not None:
                found.append(Share(kernel, size, mine.tile, theirs.median_us / mine.median_us))
    return found


def sweet_spot_words(spots: Sequence[SweetSpot], parameter: str) -> list[str]:
    """Per tiled kernel, the fastest tile by size in one sentence: "tiled: tile 16 at N = 256 and 512; tile 32 at
    N = 1024, 2048 and 4096"."""
    lines = []
    for kernel in dict.fromkeys(s.kernel for s in spots):
        by_tile: dict[int, list[float]] = {}
        for spot in (s for s in spots if s.kernel == kernel):
            by_tile.setdefault(spot.tile, []).append(spot.size)
        parts = [f"tile {tile} at {parameter} = {_listed(sizes)}" for tile, sizes in by_tile.items()]
        lines.append(f"{kernel}'s sweet spot (its fastest tile): {'; '.join(parts)}")
    return lines


def share_words(found: Sequence[Share], parameter: str, baseline: str = BASELINE) -> list[str]:
    """Per kernel, its share of the baseline's GFLOP/s at the largest size it was timed at."""
    lines = []
    for kernel in dict.fromkeys(s.kernel for s in found):
        largest = max((s for s in found if s.kernel == kernel), key=lambda s: s.size)
        tile = f" (tile {largest.tile}, its fastest)" if largest.tile is not None else ""
        lines.append(f"{kernel}{tile} reaches {largest.fraction:.1%} of {baseline}'s GFLOP/s at "
                     f"{parameter} = {largest.size:g}")
    return lines


def _listed(sizes: Sequence[float]) -> str:
    words = [f"{s:g}" for s in sizes]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def figure_svg(points: Sequence[MatmulPoint], parameter: str) -> str | None:
    """GFLOP/s against size, a line per kernel (and tile); beside it, where a kernel was timed at several tiles,
    its time against the tile at the largest size, the other kernels' times there as horizontal lines. None where
    matplotlib is not installed."""
    pyplot = pyplot_or_none()
    if pyplot is None:
        return None
    tiled = [p for p in points if p.tile is not None]
    figure, panels = pyplot.subplots(1, 2 if tiled else 1, figsize=(11 if tiled else 7, 4.4), squeeze=False)
    try:
        axes = panels[0][0]
        for series in dict.fromkeys(p.series for p in points):
            line = [p for p in points if p.series == series]
            axes.plot([p.size for p in line], [p.gflops for p in line], "o-" if line[0].tile is None else "s--",
                      label=series)
        sizes = sorted({p.size for p in points})
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_xticks(sizes, [f"{x:g}" for x in sizes])
        axes.set_xlabel(parameter)
        axes.set_ylabel("GFLOP/s (2·M·N·K / median time)")
        axes.set_title(f"GFLOP/s against {parameter}")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize="small")
        if tiled:
            axes = panels[0][1]
            largest, tiles = max(p.size for p in tiled), sorted({p.tile for p in tiled})
            for kernel in dict.fromkeys(p.kernel for p in tiled):
                line = sorted((p.tile, p.median_us) for p in tiled if p.kernel == kernel and p.size == largest)
                axes.plot([t for t, _ in line], [us / 1000 for _, us in line], "s-", label=kernel)
            for other in dict.fromkeys(p.kernel for p in points if p.tile is None):
                at = best(points, other, largest)
                if at is not None:
                    axes.axhline(at.median_us / 1000, linestyle=":", color="gray" if other != BASELINE else "black")
                    axes.annotate(other, (tiles[0], at.median_us / 1000), fontsize="small", va="bottom")
            axes.set_xscale("log", base=2)
            axes.set_yscale("log")
            axes.set_xticks(tiles, [str(t) for t in tiles])
            axes.set_xlabel("tile (block edge)")
            axes.set_ylabel("median time per call (ms)")
            axes.set_title(f"time against the tile at {parameter} = {largest:g}")
            axes.grid(True, which="both", alpha=0.3)
            axes.legend(fontsize="small")
    except BaseException:
        pyplot.close(figure)
        raise
    return svg_text(figure, pyplot)


def context(points: Sequence[MatmulPoint], title: str, parameter: str, award_words: Sequence[str] = (),
            baseline: str = BASELINE) -> dict[str, Any]:
    """What the page's template is given: the figure (or None), the sweet spot and the shares of the baseline in
    words (and the speed-up points, `award_words`, where the assignment gives some), the tile table at each size, every
    point with its GFLOP/s and share."""
    spots, found = sweet_spots(points), shares(points, baseline)
    # Every point's share of the baseline at its size (each tile's, not only the best's).
    theirs = {p.size: p.median_us for p in points if p.kernel == baseline}
    rows = [(p, theirs[p.size] / p.median_us if p.size in theirs else None) for p in points]
    return dict(
        title=title, parameter=parameter, baseline=baseline, figure=figure_svg(points, parameter),
        sweet_words=sweet_spot_words(spots, parameter), share_words=share_words(found, parameter, baseline),
        award_words=award_words,
        spots=spots, tiles=sorted({t for s in spots for t, _ in s.times_us}), shares=found, rows=rows)


def render(points: Sequence[MatmulPoint], title: str, parameter: str, award_words: Sequence[str] = (),
           baseline: str = BASELINE) -> str:
    """The page (`context`'s, through the template)."""
    from grader.report.render import environment

    return environment(autoescape=True).get_template(TEMPLATE).render(
        context(points, title, parameter, award_words, baseline))
