"""ncu's figures for the optimization variants whose claim is one (a variant's `ncu_metrics`): shared-memory bank
conflicts for gpt2-m3's op_11 (swizzling) and op_12 (padding), the L2 hit rate for op_18 (rasterization).

`grader time SUBMISSION -a gpt2-m3 --ncu` measures them on a GPU runner: reported beside the kernels/ build's
figures, never scored. For every kernel such a variant must change, its build and the base's (kernels/) each run
one call of the kernel's timed case in the timing harness (`grader.boundary.timing_harness`: its L2 flush, spin
kernel and re-check) inside the sandbox, as `grader time` runs it, with the harness under
`ncu --metrics ... --cache-control all` (as compute-sanitizer wraps it for `grader.sanitizer`) and the GPU's timing
lock held. ncu writes its CSV into the sandbox's one writable folder, which the student's code shares with it (the
same uid): it could rewrite the figures, which is why they are reported and never scored.

A call's figure is the sum over its kernels (the harness's own, `kg_*`, left out). `--cache-control all` flushes
the caches before each kernel, so L2 hits are reuse within the kernel: what a rasterized grid improves. ncu needs
the GPU's performance counters; where the driver keeps them for administrators (ERR_NVGPUCTRPERM) the sandbox's
uid cannot read them, and the report says so.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from grader.boundary.timing_harness import Settings
from grader.boundary.timing_statistics import StopRule
from grader.build import Artifact
from grader.cases import Seed
from grader.device import cuda_tool
from grader.options import Options
from grader.runner.limits import limits_for
from grader.runner.plan import plan_for
from grader.runner.watch import HARNESS_START_LIMIT_S, Session
from grader.sandbox import Sandbox, sandbox_named
from grader.assignment import Assignment, Kernel, Variant
from grader.assignment.model import NCU_METRICS
from grader.status import BuildStatus
from grader.targets import target_of
from grader.timing.lock import gpu_lock
from grader.timing.spec import load_timing

# Each variant-level metric (grader.assignment.model.NCU_METRICS) as the ncu counters it is made of.
COUNTERS: dict[str, tuple[str, ...]] = {
    "shared_bank_conflicts": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                              "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    "l2_hit_rate": ("lts__t_sectors_srcunit_tex_lookup_hit.sum", "lts__t_sectors_srcunit_tex_lookup_miss.sum"),
}
HARNESS_PREFIX = "kg_"  # the harness's own kernels (kg_spin, kg_digest)
SPIN = "kg_spin"  # each harness call begins with its spin kernel
TIME_SCALE = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6}
NCU_SLACK_S = 240.0  # ncu's own start and its replays of each kernel (one pass per group of counters)
LOG_LIMIT = 16 * 2**20  # ncu's CSV as read back: a few rows per launch


@dataclass(frozen=True)
class NcuFigure:
    """One metric of one kernel's build (the base's or a variant's) on one call of its timed case."""

    variant: str | None  # None: the base (kernels/)
    kernel: str  # the base kernel's name
    case: str
    metric: str
    value: float  # bank conflicts (a count), or the L2 hit rate in percent


@dataclass(frozen=True)
class NcuReport:
    """What ncu measured of a submission's variants, and why anything asked for was not measured."""

    figures: tuple[NcuFigure, ...] = ()
    notes: tuple[str, ...] = ()
    ncu: str = ""  # the ncu binary that measured them ("" where none was found)

    def to_json(self) -> dict:
        return {"ncu": self.ncu, "counters": COUNTERS, "figures": [dataclasses.asdict(f) for f in self.figures],
                "notes": list(self.notes)}

    def table(self) -> str:
        """Markdown: each variant's figure beside kernels/'s, with their ratio."""
        base = {(f.kernel, f.metric): f.value for f in self.figures if f.variant is None}
        lines = ["| variant | kernel | case | metric | kernels/ | variant | variant / kernels/ |",
                 "|---|---|---|---|---:|---:|---:|"]
        for figure in self.figures:
            if figure.variant is None:
                continue
            was = base.get((figure.kernel, figure.metric), math.nan)
            # No ratio where kernels/ counted none (or was not measured): "-" rather than a bare nan or inf.
            ratio = f"{figure.value / was:.3f}" if was and math.isfinite(was) else "-"
            unit = " %" if figure.metric == "l2_hit_rate" else ""
            lines.append(f"| {figure.variant} | {figure.kernel} | {figure.case} | {figure.metric.replace('_', ' ')} "
                         f"| {was:,.1f}{unit} | {figure.value:,.1f}{unit} | {ratio} |")
        return "\n".join(lines)


def ncu_binary() -> str | None:
    """Nsight Compute's `ncu` on PATH, else in $CUDA_HOME or /usr/local/cuda; None if absent."""
    return cuda_tool("ncu")


def launches_of(text: str, counters: tuple[str, ...]) -> list[tuple[str, dict[str, float]]]:
    """Every profiled launch in ncu's `--csv --print-units base` output, in order: (kernel name, {counter: value}),
    times in ns. Lines that are not CSV rows (ncu's ==PROF== and the program's own output) are skipped."""
    rows = csv.DictReader(line for line in text.splitlines() if line.startswith('"'))
    launches: dict[str, tuple[str, dict[str, float]]] = {}  # ID -> (kernel name, counters)
    for row in rows:
        if row.get("Metric Name") not in counters or not (row.get("ID") or "").isdigit():
            continue
        try:
            value = float((row.get("Metric Value") or "").replace(",", ""))
        except ValueError:
            continue  # "n/a": the counter was not collected for that launch
        scale = TIME_SCALE.get(row.get("Metric Unit") or "", 1.0)
        launches.setdefault(row["ID"], (row.get("Kernel Name") or "", {}))[1][row["Metric Name"]] = value * scale
    return [launches[i] for i in sorted(launches, key=int)]


def per_call(launches: list[tuple[str, dict[str, float]]], counter: str) -> list[float]:
    """`counter` summed over each harness call's kernels: a call begins with its spin kernel, and the harness's own
    kernels (`kg_*`) are left out."""
    calls: list[float] = []
    for name, values in launches:
        if name.startswith(SPIN):
            calls.append(0.0)
        elif not name.startswith(HARNESS_PREFIX) and calls:
            calls[-1] += values.get(counter, 0.0)
    return calls


def value_of(metric: str, counters: dict[str, float]) -> float:
    """The variant-level figure from its counters' values for one call."""
    if metric == "l2_hit_rate":
        hit, miss = (counters[c] for c in COUNTERS[metric])
        return 100.0 * hit / (hit + miss) if hit + miss else math.nan
    return sum(counters[c] for c in COUNTERS[metric])


def ncu_errors(text: str) -> str:
    """ncu's own error lines (==ERROR==), in its words, with the meaning of the one a locked-down driver gives."""
    errors = [line.split("==ERROR==", 1)[1].strip() for line in text.splitlines() if "==ERROR==" in line]
    words = "; ".join(dict.fromkeys(errors))[:600]
    if "ERR_NVGPUCTRPERM" in words:
        words += (" (the driver lets only administrators read the GPU's performance counters, and the sandbox runs "
                  "the harness as a user of its own: the runner's admin can allow them with the nvidia module's "
                  "NVreg_RestrictProfilingToAdminUsers=0)")
    return words


def chosen_variants(assignment: Assignment, names: list[str] | None = None) -> list[tuple[Variant, tuple[str, ...]]]:
    """(variant, metrics) for each variant to measure: those named (every metric where it claims none), else those
    with `ncu_metrics`."""
    return [(v, tuple(v.ncu_metrics or NCU_METRICS)) for v in assignment.variants
            if (v.name in names if names is not None else bool(v.ncu_metrics))]


def kernels_to_measure(assignment: Assignment, variant: Variant) -> list[Kernel]:
    """The base kernels the variant must change (all of them where it names none)."""
    changed = [k for k in assignment.base_kernels if variant.must_change_kernel(k)]
    return changed or list(assignment.base_kernels)


def runs_for(assignment: Assignment, chosen: list[tuple[Variant, tuple[str, ...]]]
             ) -> list[tuple[str | None, Kernel, tuple[str, ...]]]:
    """(variant or None, base kernel, metrics) for every run: each kernel's base build once, then each variant's."""
    runs: list[tuple[str | None, Kernel, tuple[str, ...]]] = []
    for variant, wanted in chosen:
        for kernel in kernels_to_measure(assignment, variant):
            if not any(v is None and k.name == kernel.name for v, k, _ in runs):
                runs.append((None, kernel, NCU_METRICS))
            runs.append((variant.name, kernel, wanted))
    return runs


def submitted_runs(runs: list[tuple[str | None, Kernel, tuple[str, ...]]], submitted: set[str]
                   ) -> list[tuple[str | None, Kernel, tuple[str, ...]]]:
    """The runs of the variants the submission has, and of the base kernels they change."""
    changed = {k.name for v, k, _ in runs if v in submitted}
    return [(v, k, m) for v, k, m in runs if v in submitted or (v is None and k.name in changed)]


def measure_call(assignment: Assignment, kernel: Kernel, artifact: Artifact | None, seed: Seed, cache_dir: Path,
                 sandbox: Sandbox, ncu: str, metrics: tuple[str, ...]) -> tuple[dict[str, float], str]:
    """One call of the kernel's timed case under ncu, in the sandbox: {metric: value}, or the words why none."""
    # Imported here: grader.timing.run imports the pipeline, which a spec-only user of this module does not need.
    from grader.timing.run import HARNESS_MODULE, pool_inputs, timing_calls

    if artifact is None or artifact.status != BuildStatus.BUILT or artifact.library is None:
        return {}, f"{kernel.name} did not build: nothing to measure"
    timing = load_timing(assignment)
    case = timing.timed_case(kernel)
    counters = tuple(c for m in metrics for c in COUNTERS[m])
    # One call and the harness's re-check: the spin kernels mark them, the first is counted.
    settings = Settings(0, StopRule(1, 1, 1.0, 1e9), timing.spin_us)
    # ncu replays each kernel once per pass over its counters: the call's own limit is not the kernel's.
    slow = dataclasses.replace(kernel, time_limit_s=kernel.time_limit_s + NCU_SLACK_S,
                               time_budget_s=kernel.time_limit_s + NCU_SLACK_S)
    inputs = pool_inputs(assignment, kernel, case, seed, 1, cache_dir)
    target = target_of(assignment)
    with tempfile.TemporaryDirectory(prefix="kg-ncu-") as scratch:
        workdir = Path(scratch)
        outbox = workdir / "out"  # the sandbox's one writable folder: ncu's CSV goes there too
        outbox.mkdir()
        calls = timing_calls(slow, case, artifact.library, inputs, outbox)
        plan_file = workdir / "plan.json"
        plan_file.write_text(plan_for(assignment, calls, outbox, sanitizer=False).to_json())
        log = outbox / "ncu.csv"
        wrapper = (ncu, "--metrics", ",".join(counters), "--clock-control", "none", "--cache-control", "all",
                   "--print-units", "base", "--csv", "--log-file", str(log))
        deadline = time.monotonic() + HARNESS_START_LIMIT_S + 2 * slow.time_limit_s
        with gpu_lock(exclusive=True) if target.needs_gpu else nullcontext():
            ended = Session(workdir, outbox, 1).run(plan_file, 0, len(calls), calls, sandbox, limits_for(assignment),
                                                     target, deadline, wrapper=wrapper,
                                                     module=HARNESS_MODULE,
                                                     options=(settings.to_json(),), harness_env={})
        text = _read(log)
    tail = ended.log_tail[-300:]
    if errors := ncu_errors(text + "\n" + tail):
        return {}, f"ncu on {kernel.name}: {errors}"
    values = {c: per_call(launches_of(text, counters), c) for c in counters}
    if not values[counters[0]]:
        why = f"the harness {ended.reason}" if ended.reason else "ncu listed no call of it"
        return {}, f"ncu on {kernel.name}: no figures ({why}{'; its output ends: ' + tail if tail else ''})"
    return {m: value_of(m, {c: values[c][0] for c in COUNTERS[m]}) for m in metrics}, ""


def _read(log: Path) -> str:
    """ncu's CSV, bounded (the sandbox's uid wrote it); "" where it wrote none."""
    try:
        with log.open("rb") as handle:
            return handle.read(LOG_LIMIT).decode(errors="replace")
    except OSError:
        return ""


def measure_variants(path: Path, assignment: Assignment, options: Options,
                     names: list[str] | None = None) -> NcuReport:
    """Build the submission's chosen variants and their base kernels, and measure each under ncu in the sandbox.

    `names`: the variants to measure (default: those with `ncu_metrics`). Needs a GPU and ncu: a report of notes
    alone otherwise, or where the submission holds none of the variants.
    """
    from grader.pipeline import build_stage

    ncu = ncu_binary()
    if ncu is None:
        return NcuReport(notes=("ncu (Nsight Compute) is not installed on this machine: nothing measured; install it "
                                "or put it on PATH",))
    unknown = sorted(set(names or ()) - {v.name for v in assignment.variants})
    if unknown:
        return NcuReport(notes=(f"{assignment.name} has no variant {', '.join(unknown)}; its variants: "
                                f"{', '.join(v.name for v in assignment.variants)}",), ncu=ncu)
    chosen = chosen_variants(assignment, names)
    runs = runs_for(assignment, chosen)
    kernels = tuple(dict.fromkeys(k.name if v is None else f"{v}/{k.name}" for v, k, _ in runs))
    built = build_stage(path, assignment, dataclasses.replace(options, kernels=kernels, sanitizer=False))
    submitted = {v.variant for v in built.variants if v.submitted}
    notes = [f"{v.folder}/ is not in the submission: {v.name} is not measured" for v, _ in chosen
             if v.name not in submitted]
    runs = submitted_runs(runs, submitted)
    if not runs:
        return NcuReport(notes=(*notes, "no variant to measure"), ncu=ncu)
    sandbox = sandbox_named(options.sandbox)
    figures = []
    for variant, kernel, metrics in runs:
        name = kernel.name if variant is None else f"{variant}/{kernel.name}"
        measured, note = measure_call(assignment, assignment.kernel(name), built.artifacts.get(name), built.seed,
                                      options.cache_dir, sandbox, ncu, metrics)
        if note:
            notes.append(f"{variant or 'kernels/'}: {note}")
            if "ERR_NVGPUCTRPERM" in note:
                break  # the machine's, not the build's: every other run would say the same
        case = load_timing(assignment).timed_case(kernel).name
        figures += [NcuFigure(variant, kernel.name, case, metric, value) for metric, value in measured.items()]
    return NcuReport(tuple(figures), tuple(notes), ncu)


__all__ = ["COUNTERS", "NcuFigure", "NcuReport", "chosen_variants", "launches_of", "measure_variants", "ncu_binary",
           "ncu_errors", "per_call", "runs_for", "submitted_runs",
           "value_of"]
