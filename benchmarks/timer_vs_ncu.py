"""Validate the timer (issue 14, point 5): the reference's kernels of >= 50 µs timed by `grader time`'s protocol and by
Nsight Compute's `gpu__time_duration.sum`, and the timer's run-to-run spread.

    python benchmarks/timer_vs_ncu.py --out DIR [--assignment gpt2-m2] [--repeats 3] [--ncu PATH]

1. Our timer: every kernel of the reference (base and variants) timed as `grader time` does, each in
   its sandboxed timing harness; the kernels whose median is >= 50 µs are timed `--repeats` times in
   all, and their spread is (max - min) / min of the medians (target: <= 2%).
2. ncu: the same timing harness (grader.boundary.timing_harness, the very calls: L2 flush, spin kernel, the
   pool's rotation) run on those kernels under
   `ncu --metrics gpu__time_duration.sum --clock-control none --cache-control all`, in one process
   (this script's `--child`, outside the sandbox: the reference is our own code). Clocks are left as
   they are for both (ncu would lock them to base otherwise). Every launch after a call's spin
   kernel (`kg_spin`) and before the next belongs to that call, the harness's own kernels (`kg_*`)
   left out; a call's ncu time is the sum of its kernels' durations, and the figure is the median
   over the timed calls. Agreement: our median over ncu's, within 3%.
3. The speed-up table of the first run (what speedups.py measures alone), so that one call gives both.
Prints Markdown tables, and writes DIR/timer_vs_ncu.md and DIR/timer_vs_ncu.json. About 3 minutes
on an H200 from a cold cache (`--budget-s`, default 230, bounds the ncu step).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY_ROOT))

from grader.boundary.timing_harness import Settings  # noqa: E402
from grader.cases import Seed  # noqa: E402
from grader.ncu import launches_of, per_call  # noqa: E402
from grader.boundary.timing_statistics import StopRule  # noqa: E402
from grader.options import Options, default_cache_dir  # noqa: E402
from grader.pipeline import build_stage  # noqa: E402
from grader.runner.plan import plan_for  # noqa: E402
from grader.assignment import Assignment, Case, Kernel, load_assignment  # noqa: E402
from grader.timing.run import pool_inputs, time_submission, timing_calls  # noqa: E402
from grader.timing.spec import load_timing  # noqa: E402
from grader.timing.table import clocks_summary, markdown, speedup_table  # noqa: E402

LONG_US = 50.0  # kernels at least this long are compared (ncu and events differ by a launch's microseconds)
AGREEMENT, SPREAD = 0.03, 0.02
NCU_CALLS, NCU_WARMUP, NCU_POOL = 5, 1, 2  # exactly this many timed calls under ncu: the launches are counted


def child(manifest: Path) -> int:
    """Under ncu: the timing harness on each planned kernel in turn, in this one process."""
    from grader.boundary import timing_harness

    for entry in json.loads(manifest.read_text()):
        code = timing_harness.main(["harness", entry["plan"], entry["progress"], "0", str(entry["calls"]),
                                    entry["settings"]])
        if code != 0:
            print(f"timing harness failed on {entry['kernel']} (exit {code})", file=sys.stderr)
            return code
    return 0


def harness_entry(assignment: Assignment, kernel: Kernel, case: Case, library: Path, seed: Seed, settings: Settings,
                  pool: int, outbox: Path, cache_dir: Path, label: str) -> dict:
    """One kernel's timing harness on `case` as the `--child` runs it: its plan (a pool of `pool` input sets) written
    under `outbox`, named `label` in the manifest."""
    outbox.mkdir(parents=True)
    inputs = pool_inputs(assignment, kernel, case, seed, pool, cache_dir)
    calls = timing_calls(kernel, case, library, inputs, outbox)
    plan = outbox / "plan.json"
    plan.write_text(plan_for(assignment, calls, outbox, sanitizer=False).to_json())
    return {"kernel": label, "settings": settings.to_json(), "plan": str(plan),
            "progress": str(outbox / "progress.jsonl"), "calls": len(calls)}


def ncu_launches(ncu: str, metrics: tuple[str, ...], entries: list[dict], folder: Path,
                 timeout_s: float) -> tuple[list[tuple[str, dict[str, float]]], str]:
    """The planned kernels' timing harnesses (this script's `--child`) under ncu: every launch in order, as
    (kernel name, {metric: value in base units, times in ns}), and a note if ncu failed."""
    manifest = folder / "manifest.json"
    manifest.write_text(json.dumps(entries))
    log = folder / "ncu.csv"
    command = [ncu, "--metrics", ",".join(metrics), "--clock-control", "none", "--cache-control", "all",
               "--print-units", "base", "--csv", "--log-file", str(log), sys.executable, str(Path(__file__).resolve()),
               "--child", str(manifest)]
    try:
        ran = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return [], f"ncu ran past the {timeout_s:.0f} s left of the budget (--budget-s)"
    except OSError as error:
        return [], f"ncu could not be started ({error})"
    if ran.returncode != 0 or not log.is_file():
        return [], f"ncu failed (exit {ran.returncode}): {(ran.stderr or ran.stdout)[-600:]}"
    return launches_of(log.read_text(), metrics), ""


def ncu_times(ncu: str, entries: list[dict], folder: Path, timeout_s: float) -> tuple[dict[str, float], str]:
    """Each kernel's median ncu time per timed call (µs), and a note if ncu failed."""
    launches, note = ncu_launches(ncu, ("gpu__time_duration.sum",), entries, folder, timeout_s)
    if note:
        return {}, note
    calls = per_call(launches, "gpu__time_duration.sum")
    per_kernel = NCU_WARMUP + NCU_CALLS + 1  # warm-up, timed, re-check
    if len(calls) != per_kernel * len(entries):
        return {}, f"ncu listed {len(calls)} calls, expected {per_kernel * len(entries)}: cannot match them to kernels"
    times = {}
    for index, entry in enumerate(entries):
        timed = calls[index * per_kernel + NCU_WARMUP: index * per_kernel + NCU_WARMUP + NCU_CALLS]
        times[entry["kernel"]] = statistics.median(timed) / 1000
    return times, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for timer_vs_ncu.md and timer_vs_ncu.json")
    parser.add_argument("--assignment", default="gpt2-m2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cap-s", type=float, default=1.0, help="the stop rule's time cap per kernel (seconds)")
    parser.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--budget-s", type=float, default=230.0,
                        help="seconds for the whole run: ncu gets what the timing runs leave of it")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.child:
        return child(arguments.child)
    if arguments.out is None:
        parser.error("--out is required")
    started = time.perf_counter()
    assignment = load_assignment(arguments.assignment)
    timing = load_timing(assignment)
    timing = dataclasses.replace(timing, rule=dataclasses.replace(timing.rule, cap_s=arguments.cap_s))
    options = Options(cache_dir=arguments.cache_dir or default_cache_dir())
    first = time_submission(assignment.reference_dir, assignment, options, timing)
    medians = {k.kernel: [k.median_us] for k in first.kernels if k.median_us is not None}
    long = [name for name, (median,) in medians.items() if median >= LONG_US]
    failed = {k.kernel: k.message or k.status.value for k in first.kernels if k.median_us is None}
    for _ in range(arguments.repeats - 1):
        again = time_submission(assignment.reference_dir, assignment, dataclasses.replace(options, kernels=tuple(long)),
                                timing)
        for k in again.kernels:
            medians[k.kernel].append(k.median_us)
    built = build_stage(assignment.reference_dir, assignment, dataclasses.replace(options, kernels=tuple(long),
                                                                                  sanitizer=False))
    settings = Settings(NCU_WARMUP, StopRule(NCU_CALLS, NCU_CALLS, timing.rule.rse, 1e9), timing.spin_us)
    with tempfile.TemporaryDirectory(prefix="kg-ncu-") as scratch:
        folder = Path(scratch)
        entries = [harness_entry(assignment, kernel, timing.timed_case(kernel), built.artifacts[kernel.name].library,
                                 built.seed, settings, NCU_POOL, folder / kernel.name.replace("/", "_"),
                                 options.cache_dir, kernel.name)
                   for kernel in built.kernels]
        left = max(30.0, arguments.budget_s - (time.perf_counter() - started))
        ncu, ncu_note = ncu_times(arguments.ncu, entries, folder, left) if long else ({}, "no kernel of 50 µs or more")
    device = next((k.device for k in first.kernels if k.device), "no device")
    rows = []
    for name in long:
        ours = [m for m in medians[name] if m is not None]
        our = statistics.median(ours)
        spread = (max(ours) - min(ours)) / min(ours)
        theirs = ncu.get(name)
        difference = our / theirs - 1 if theirs else None
        rows.append({"kernel": name, "medians_us": ours, "median_us": our, "spread": spread, "ncu_us": theirs,
                     "difference": difference,
                     "agrees": difference is not None and abs(difference) <= AGREEMENT, "steady": spread <= SPREAD})
    lines = [f"## Timer against ncu ({assignment.name} reference, {device})", "",
             f"Kernels whose median is at least {LONG_US:g} µs; our median of {arguments.repeats} runs, each the "
             f"median of >= {timing.rule.min_calls} calls; ncu: gpu__time_duration.sum summed per call, median of "
             f"{NCU_CALLS} calls.", "",
             "| kernel | ours µs | runs µs | spread | ncu µs | ours − ncu | within 3% | spread ≤ 2% |",
             "|---|---:|---|---:|---:|---:|---|---|"]
    for row in rows:
        difference = f"{100 * row['difference']:+.1f}%" if row["difference"] is not None else "–"
        ncu_figure = f"{row['ncu_us']:,.1f}" if row["ncu_us"] else "–"
        lines.append(f"| {row['kernel']} | {row['median_us']:,.1f} | {', '.join(f'{m:,.1f}' for m in row['medians_us'])} "
                     f"| {100 * row['spread']:.2f}% | {ncu_figure} | {difference} | "
                     f"{'yes' if row['agrees'] else 'no'} | {'yes' if row['steady'] else 'no'} |")
    if ncu_note:
        lines += ["", f"ncu: {ncu_note}"]
    if failed:
        lines += ["", "Not timed: " + "; ".join(f"{k}: {v}" for k, v in failed.items())]
    lines += ["", f"{sum(r['agrees'] for r in rows)}/{len(rows)} within 3% of ncu, "
                  f"{sum(r['steady'] for r in rows)}/{len(rows)} with a spread of at most 2%; "
                  f"measured in {time.perf_counter() - started:.0f} s (builds included)."]
    # The first run's timings are the reference's speed-up table too (what benchmarks/speedups.py prints alone).
    speedups = speedup_table(first, None, dataclasses.replace(timing, leaderboard="geomean_speedup_vs_m1"))
    lines += ["", markdown(speedups, f"Speed-ups of the reference's optimizations ({assignment.name}, {device})"),
              "", clocks_summary(first.kernels)]
    text = "\n".join(lines)
    print(text)
    arguments.out.mkdir(parents=True, exist_ok=True)
    (arguments.out / "timer_vs_ncu.md").write_text(text + "\n")
    (arguments.out / "timer_vs_ncu.json").write_text(json.dumps(
        {"device": device, "rows": rows, "ncu_note": ncu_note, "not_timed": failed, "speedups": speedups.to_dict(),
         "all_medians_us": {k: v for k, v in medians.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
