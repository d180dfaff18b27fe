"""The tiled-matmul reference's global-memory traffic (issue 26): its naive kernel and its tiled kernel at tile 8, 16
and 32 on one square N x N x N product, each call's loads counted by Nsight Compute, so that "tiling cuts the global
loads per output by the tile width" (the project's "mathematically show why") shows as numbers.

    python benchmarks/tiled_matmul_traffic.py [--size 2048] [--tiles 8,16,32] [--out FILE.md] [--json FILE.json]

Each kernel runs in grader.boundary.timing_harness (the grader's build of the reference, the pack's own input
generator), one timed call and its re-check, all of them in one process under
`ncu --metrics <METRICS> --cache-control all` (benchmarks/timer_vs_ncu.py's `--child`: the reference is our own
code, so outside the sandbox). A call's figure is the sum over its kernels (the harness's own, `kg_*`, left out).
Global loads per output (L1's global-load requests, one per warp-wide load instruction, times 32 threads, per
output) are the loads that tiling divides: a naive thread loads 2 N floats, a tiled one 2 N / tile, so the ratio
is the tile exactly. What reaches the memory below divides less: L1 catches much of the naive kernel's reuse (the
L2 read sectors, 32 bytes each, fell only 2.06x at tile 32 on the H200), and at N = 2048 A and B (32 MiB) fit in
the H200's L2, so every kernel reads them from DRAM about once (the DRAM bytes, printed beside). Needs a CUDA GPU and ncu; ~1 minute on an H200 (--budget-s bounds it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS.parent))
sys.path.insert(0, str(BENCHMARKS))

from timer_vs_ncu import harness_entry, ncu_launches, per_call  # noqa: E402

from grader.boundary.protocol import Event, Ready, kind_of  # noqa: E402
from grader.boundary.timing_harness import Settings  # noqa: E402
from grader.boundary.timing_statistics import StopRule  # noqa: E402
from grader.device import unavailable_reason  # noqa: E402
from grader.options import Options, default_cache_dir  # noqa: E402
from grader.pipeline import build_stage  # noqa: E402
from grader.runner.watch import read_events  # noqa: E402
from grader.assignment import Case, load_assignment  # noqa: E402
from grader.timing.spec import load_timing  # noqa: E402

ASSIGNMENT = "tiled-matmul"
L1_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"  # warp-wide global-load instructions L1 served
L1_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"  # global-load sectors the kernel's loads ask L1 for
L2_SECTORS = "lts__t_sectors_srcunit_tex_op_read.sum"  # of those, the sectors L1 read from L2
DRAM_BYTES = "dram__bytes_read.sum"
METRICS = (L1_REQUESTS, L1_SECTORS, L2_SECTORS, DRAM_BYTES)
WARP = 32
SECTOR_BYTES = 32
WARMUP, CALLS = 0, 1  # per kernel: one timed call, then the harness's re-check (2 calls; the first is counted)


@dataclasses.dataclass(frozen=True)
class Traffic:
    """One kernel's loads on one call of an N x N x N product."""

    kernel: str
    tile: int | None  # None: the naive kernel
    l1_requests: float
    l1_sectors: float
    l2_sectors: float
    dram_bytes: float
    outputs: int

    @property
    def loads_per_output(self) -> float:
        """Thread-level global loads per output: every warp's lanes all load (N a multiple of 32 and of the tile)."""
        return self.l1_requests * WARP / self.outputs

    @property
    def l2_bytes_per_output(self) -> float:
        return self.l2_sectors * SECTOR_BYTES / self.outputs


def device_of(progress: Path) -> str:
    """The device a harness reported in its progress file (its `device` event)."""
    events, _ = read_events(progress, 0)
    found = next((e for e in events if kind_of(e) == Event.DEVICE), None)
    return Ready.read(found).name if found is not None else "device not reported"


def cases_for(size: int, tiles: list[int]) -> list[tuple[str, Case]]:
    """(kernel, case) for each run: the naive kernel, then the tiled one at each tile."""
    square = {"M": size, "N": size, "K": size}
    return [("naive", Case(f"traffic-{size}", False, square))] + \
        [("tiled", Case(f"traffic-{size}-tile-{t}", False, {**square, "tile": t})) for t in tiles]


def measured(launches: list[tuple[str, dict[str, float]]], runs: list[tuple[str, Case]], size: int) -> list[Traffic]:
    """Each run's first timed call, from ncu's launches in the harness's order."""
    per_run = WARMUP + CALLS + 1
    by_metric = {metric: per_call(launches, metric) for metric in METRICS}
    if len(by_metric[L2_SECTORS]) != per_run * len(runs):
        raise RuntimeError(f"ncu listed {len(by_metric[L2_SECTORS])} calls, expected {per_run * len(runs)}: "
                           "cannot match them to kernels")
    return [Traffic(kernel, case.params.get("tile"), *(by_metric[m][i * per_run + WARMUP] for m in METRICS),
                    outputs=size * size)
            for i, (kernel, case) in enumerate(runs)]


def table(rows: list[Traffic], size: int, device: str) -> str:
    naive = next(r for r in rows if r.tile is None)
    lines = [f"## Global loads of tiled-matmul's reference, N = {size} ({device})", "",
             f"One call each under ncu (`--cache-control all`). Global loads per output: `{L1_REQUESTS}` x {WARP} "
             f"/ outputs (2 N for the naive kernel, 2 N / tile for the tiled one); L1 global-load sectors: "
             f"`{L1_SECTORS}`; L2 read sectors: `{L2_SECTORS}` ({SECTOR_BYTES} B each); DRAM: `{DRAM_BYTES}`.", "",
             "| kernel | tile | global loads per output | naive / this (loads) | expected = tile "
             "| L1 global-load sectors | L2 read sectors | naive / this (L2) | L2 bytes per output | DRAM bytes read |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        loads = naive.l1_requests / row.l1_requests if row.l1_requests else float("nan")
        ratio = naive.l2_sectors / row.l2_sectors if row.l2_sectors else float("nan")
        lines.append(f"| {row.kernel} | {row.tile or '–'} | {row.loads_per_output:,.1f} | {loads:.2f} | {row.tile or 1} "
                     f"| {row.l1_sectors:,.0f} | {row.l2_sectors:,.0f} | {ratio:.2f} | {row.l2_bytes_per_output:,.1f} "
                     f"| {row.dram_bytes:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048, help="N of the N x N x N product (default 2048)")
    parser.add_argument("--tiles", default="8,16,32", help="the tiled kernel's tiles, comma-separated")
    parser.add_argument("--out", type=Path, help="write the Markdown table here")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--budget-s", type=float, default=130.0,
                        help="seconds for the whole run: ncu (it replays each kernel) gets what the build leaves")
    arguments = parser.parse_args(argv)
    try:
        tiles = [int(t) for t in arguments.tiles.split(",")]
    except ValueError:
        parser.error(f"--tiles: expected integers separated by commas, got {arguments.tiles!r}")
    if unwritable := [t for t in tiles if t not in (8, 16, 32)]:
        parser.error(f"--tiles: the reference takes tiles 8, 16 and 32, not {unwritable}")
    if (reason := unavailable_reason("cuda")) is not None:
        print(f"tiled_matmul_traffic: cannot measure here: {reason} (run it on the GPU machine)", file=sys.stderr)
        return 2
    if not Path(arguments.ncu).is_file():
        print(f"tiled_matmul_traffic: no ncu at {arguments.ncu} (install Nsight Compute or pass --ncu PATH)",
              file=sys.stderr)
        return 2
    started = time.perf_counter()
    assignment = load_assignment(ASSIGNMENT)
    options = Options(cache_dir=arguments.cache_dir or default_cache_dir(), kernels=("naive", "tiled"), sanitizer=False)
    built = build_stage(assignment.reference_dir, assignment, options)
    # The spin kernel (kg_spin) marks where each call begins in ncu's list: on even where the pack turns it off.
    settings = Settings(WARMUP, StopRule(CALLS, CALLS, 0.01, 1e9), load_timing(assignment).spin_us or 200.0)
    runs = cases_for(arguments.size, tiles)
    with tempfile.TemporaryDirectory(prefix="kg-traffic-") as scratch:
        folder = Path(scratch)
        entries = [harness_entry(assignment, assignment.kernel(kernel), case, built.artifacts[kernel].library,
                                 built.seed, settings, 1, folder / case.name, options.cache_dir, case.name)
                   for kernel, case in runs]
        left = max(30.0, arguments.budget_s - (time.perf_counter() - started))
        launches, note = ncu_launches(arguments.ncu, METRICS, entries, folder, left)
        device = device_of(Path(entries[0]["progress"]))
    if note:
        print(f"tiled_matmul_traffic: {note}", file=sys.stderr)
        return 1
    rows = measured(launches, runs, arguments.size)
    took = time.perf_counter() - started
    text = f"{table(rows, arguments.size, device)}\n\nMeasured in {took:.0f} s (build included)."
    print(text)
    if arguments.out:
        arguments.out.parent.mkdir(parents=True, exist_ok=True)
        arguments.out.write_text(text + "\n")
    if arguments.json:
        arguments.json.parent.mkdir(parents=True, exist_ok=True)
        naive = rows[0]
        arguments.json.write_text(json.dumps(
            {"size": arguments.size, "metrics": list(METRICS),
             "rows": [{**dataclasses.asdict(r), "loads_per_output": r.loads_per_output,
                       "naive_over_this_loads": naive.l1_requests / r.l1_requests if r.l1_requests else None,
                       "l2_bytes_per_output": r.l2_bytes_per_output,
                       "naive_over_this_l2": naive.l2_sectors / r.l2_sectors if r.l2_sectors else None}
                      for r in rows]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
