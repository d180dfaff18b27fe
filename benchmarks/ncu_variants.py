"""What ncu measures of the optimization variants whose claim is one (a variant's `ncu_metrics`): shared-memory bank
conflicts for gpt2-m3's op_11 (swizzling) and op_12 (padding), the L2 hit rate for op_18 (rasterization). Reported
beside the base kernels' figures, never scored (issue 23).

    python benchmarks/ncu_variants.py [SUBMISSION] [--assignment gpt2-m3] [--variants op_11,op_12]
                                      [--metrics shared_bank_conflicts,l2_hit_rate] [--out FILE.md] [--json FILE.json]

SUBMISSION (default: the assignment's reference) is a repository laid out as the course's: each variant's folder
that it holds is measured. For every kernel the variant must change, its build and the base's (kernels/) run one
call each on the kernel's largest case in grader.boundary.timing_harness, all of them in one process under
`ncu --metrics ... --cache-control all` (benchmarks/timer_vs_ncu.py's `--child`, as benchmarks/tiled_matmul_traffic.py
runs it: the submission runs outside the grader's sandbox, so run it on code you trust or inside a container). A
call's figure is the sum over its kernels (the harness's own, `kg_*`, left out); the L2 hit rate is the hit sectors'
share of all L2 lookups of the call (`--cache-control all` flushes the caches before each kernel, so hits are
reuse within the call: what a rasterized grid improves). Needs a CUDA GPU and ncu.
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

from grader.boundary.timing_harness import Settings  # noqa: E402
from grader.boundary.timing_statistics import StopRule  # noqa: E402
from grader.device import unavailable_reason  # noqa: E402
from grader.options import Options, default_cache_dir  # noqa: E402
from grader.pipeline import build_stage  # noqa: E402
from grader.spec import Assignment, Kernel, Variant, load_assignment  # noqa: E402
from grader.spec.model import NCU_METRICS  # noqa: E402
from grader.timing.spec import load_timing  # noqa: E402

# Each variant-level metric (grader.spec.model.NCU_METRICS) as the ncu counters it is made of.
COUNTERS = {
    "shared_bank_conflicts": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                              "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    "l2_hit_rate": ("lts__t_sectors_srcunit_tex_lookup_hit.sum", "lts__t_sectors_srcunit_tex_lookup_miss.sum"),
}
WARMUP, CALLS = 0, 1  # per kernel: one timed call, then the harness's re-check (2 calls; the first is counted)


@dataclasses.dataclass(frozen=True)
class Measured:
    """One kernel's build (the base's or a variant's) on one call of its largest case."""

    variant: str | None  # None: the base (kernels/)
    kernel: str  # the base kernel's name
    case: str
    metric: str
    value: float  # bank conflicts (a count), or the L2 hit rate in percent


def value_of(metric: str, counters: dict[str, float]) -> float:
    """The variant-level figure from its counters' values for one call."""
    if metric == "l2_hit_rate":
        hit, miss = (counters[c] for c in COUNTERS[metric])
        return 100.0 * hit / (hit + miss) if hit + miss else float("nan")
    return sum(counters[c] for c in COUNTERS[metric])


def measured(launches: list[tuple[str, dict[str, float]]],
             runs: list[tuple[str | None, Kernel, tuple[str, ...]]]) -> list[Measured]:
    """Each run's timed call (the first of its two), from ncu's launches in the harness's order."""
    per_run = WARMUP + CALLS + 1
    counters = tuple(c for m in NCU_METRICS for c in COUNTERS[m])
    calls = {c: per_call(launches, c) for c in counters}
    if len(calls[counters[0]]) != per_run * len(runs):
        raise RuntimeError(f"ncu listed {len(calls[counters[0]])} calls, expected {per_run * len(runs)}: "
                           "cannot match them to kernels")
    return [Measured(variant, kernel.name, kernel.cases[-1].name, metric,
                     value_of(metric, {c: calls[c][i * per_run + WARMUP] for c in counters}))
            for i, (variant, kernel, wanted) in enumerate(runs) for metric in wanted]


def plan(assignment: Assignment, root: Path, names: list[str] | None,
         metrics: list[str] | None) -> list[tuple[Variant, tuple[str, ...]]]:
    """(variant, metrics) for each variant to measure: named, or those with ncu_metrics whose folder `root` holds."""
    chosen = []
    for variant in assignment.variants:
        if names is not None and variant.name not in names:
            continue
        if names is None and not variant.ncu_metrics:
            continue
        if not (root / variant.folder).is_dir():
            print(f"ncu_variants: {variant.folder}/ is not in {root}: {variant.name} is not measured", file=sys.stderr)
            continue
        chosen.append((variant, tuple(metrics or variant.ncu_metrics or NCU_METRICS)))
    return chosen


def runs_for(assignment: Assignment, chosen: list[tuple[Variant, tuple[str, ...]]]
             ) -> list[tuple[str | None, Kernel, tuple[str, ...]]]:
    """(variant or None, base kernel, metrics) for every run: each kernel's base build once, then each variant's."""
    runs: list[tuple[str | None, Kernel, tuple[str, ...]]] = []
    for variant, wanted in chosen:
        for kernel in kernels_to_measure(assignment, variant):
            if not any(v is None and k.name == kernel.name for v, k, _ in runs):
                runs.append((None, kernel, tuple(NCU_METRICS)))
            runs.append((variant.name, kernel, wanted))
    return runs


def kernels_to_measure(assignment: Assignment, variant: Variant) -> list[Kernel]:
    """The base kernels the variant must change (all of them where it names none)."""
    changed = [k for k in assignment.base_kernels if variant.must_change_kernel(k)]
    return changed or list(assignment.base_kernels)


def table(rows: list[Measured], device: str) -> str:
    base = {(r.kernel, r.metric): r.value for r in rows if r.variant is None}
    lines = [f"## ncu's figures of the optimization variants ({device})", "",
             "One call each on the kernel's largest case, under ncu (`--cache-control all`). Bank conflicts: "
             f"`{' + '.join(COUNTERS['shared_bank_conflicts'])}`; L2 hit rate: hit / (hit + miss) of "
             f"`{COUNTERS['l2_hit_rate'][0].removesuffix('_hit.sum')}_*`. Reported, not scored.", "",
             "| variant | kernel | case | metric | kernels/ | variant | variant / kernels/ |", "|---|---|---|---|---:|---:|---:|"]
    for row in rows:
        if row.variant is None:
            continue
        was = base.get((row.kernel, row.metric), float("nan"))
        # No ratio where kernels/ counted none (or was not measured): "-" rather than a bare nan or inf.
        ratio = f"{row.value / was:.3f}" if was else "-"
        unit = " %" if row.metric == "l2_hit_rate" else ""
        lines.append(f"| {row.variant} | {row.kernel} | {row.case} | {row.metric} | {was:,.1f}{unit} "
                     f"| {row.value:,.1f}{unit} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submission", nargs="?", type=Path, help="a repository (default: the reference)")
    parser.add_argument("--assignment", default="gpt2-m3")
    parser.add_argument("--variants", help="comma-separated (default: those with ncu_metrics that it holds)")
    parser.add_argument("--metrics", help=f"comma-separated, of {', '.join(NCU_METRICS)} (default: the variant's)")
    parser.add_argument("--out", type=Path, help="write the Markdown table here")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--budget-s", type=float, default=300.0, help="seconds for ncu (it replays each kernel)")
    arguments = parser.parse_args(argv)
    metrics = arguments.metrics.split(",") if arguments.metrics else None
    if metrics and (unknown := [m for m in metrics if m not in NCU_METRICS]):
        parser.error(f"--metrics: unknown {unknown}; expected some of {', '.join(NCU_METRICS)}")
    if (reason := unavailable_reason("cuda")) is not None:
        print(f"ncu_variants: cannot measure here: {reason} (run it on the GPU machine)", file=sys.stderr)
        return 2
    if not Path(arguments.ncu).is_file():
        print(f"ncu_variants: no ncu at {arguments.ncu} (install Nsight Compute or pass --ncu PATH)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    assignment = load_assignment(arguments.assignment)
    root = (arguments.submission or assignment.reference_dir).resolve()
    chosen = plan(assignment, root, arguments.variants.split(",") if arguments.variants else None, metrics)
    if not chosen:
        print("ncu_variants: no variant to measure", file=sys.stderr)
        return 1
    runs = runs_for(assignment, chosen)
    names = tuple(dict.fromkeys(k.name if v is None else f"{v}/{k.name}" for v, k, _ in runs))
    options = Options(cache_dir=arguments.cache_dir or default_cache_dir(), kernels=names, sanitizer=False)
    built = build_stage(root, assignment, options)
    broken = [n for n in names if built.artifacts[n].status != "built"]
    if broken:
        print(f"ncu_variants: {', '.join(broken)} did not build: {built.artifacts[broken[0]].message[:400]}",
              file=sys.stderr)
        return 1
    settings = Settings(WARMUP, StopRule(CALLS, CALLS, 0.01, 1e9), load_timing(assignment).spin_us or 200.0)
    counters = tuple(c for m in NCU_METRICS for c in COUNTERS[m])
    with tempfile.TemporaryDirectory(prefix="kg-ncu-variants-") as scratch:
        folder = Path(scratch)
        entries = []
        for index, (variant, kernel, _) in enumerate(runs):
            name = kernel.name if variant is None else f"{variant}/{kernel.name}"
            case = kernel.cases[-1]  # the largest: GPT-2's own sizes
            entries.append(harness_entry(assignment, assignment.kernel(name), case, built.artifacts[name].library,
                                         built.seed, settings, 1, folder / f"{index}-{name.replace('/', '-')}",
                                         options.cache_dir, name))
        left = max(60.0, arguments.budget_s - (time.perf_counter() - started))
        launches, note = ncu_launches(arguments.ncu, counters, entries, folder, left)
    if note:
        print(f"ncu_variants: {note}", file=sys.stderr)
        return 1
    try:
        rows = measured(launches, runs)
    except RuntimeError as error:
        print(f"ncu_variants: {error}", file=sys.stderr)
        return 1
    text = f"{table(rows, 'the GPU ncu ran on')}\n\nMeasured in {time.perf_counter() - started:.0f} s (build included)."
    print(text)
    if arguments.out:
        arguments.out.parent.mkdir(parents=True, exist_ok=True)
        arguments.out.write_text(text + "\n")
    if arguments.json:
        arguments.json.parent.mkdir(parents=True, exist_ok=True)
        arguments.json.write_text(json.dumps({"counters": COUNTERS, "rows": [dataclasses.asdict(r) for r in rows]},
                                             indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
