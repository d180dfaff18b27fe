"""Time a submission's kernels: each kernel's timing harness in the sandbox, alone on its GPU, re-checked against gold.

For each kernel (base and variants): the timed case from [timing], a pool of input sets (the
case's own, then fresh ones from the same generator under derived seeds), the plan the correctness
harness would get for one call per set, and the timing harness (`grader.boundary.timing_harness`) started
by the correctness harness's watchdog (`grader.runner.watch.Session`: the sandbox, its mounts and
limits, the per-call time limit) with the GPU's lock held exclusively. What it reports is read
back here: the median is computed from its samples, the re-check's outputs compared with gold.
A crash, a time-out or a wrong answer costs only that kernel's timing.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from grader.boundary.protocol import Ended, EndStatus, Event, Ready, kind_of, message_of, number
from grader.boundary.timing_harness import Phase, Settings, TimingEvent
from grader.boundary.timing_statistics import summarise
from grader.build import Artifact
from grader.cases import Seed, prepare_inputs
from grader.compare import compare
from grader.errors import GraderError
from grader.gold import gold_outputs, judged_with
from grader.options import Options
from grader.pipeline import build_stage
from grader.runner.kernel_cache import KernelCache, kernel_cache_for
from grader.runner.limits import call_timeout_words, limits_for
from grader.runner.plan import Call, plan_for
from grader.runner.watch import BUDGET_SPENT, HARNESS_START_LIMIT_S, HarnessExit, Session
from grader.sandbox import Sandbox, sandbox_named
from grader.assignment import Assignment, Case, Kernel
from grader.status import BuildStatus, TimingStatus
from grader.targets import target_of
from grader.threadsafe import load_npy
from grader.timing.alloc_counter import counter_library
from grader.timing.lock import gpu_lock
from grader.timing.results import KernelTiming, SubmissionTiming
from grader.timing.spec import TimingSpec

HARNESS_MODULE = "grader.boundary.timing_harness"
# The events explain all but this much of the wall clock (the spin's rest, the synchronisation, the
# shim): a larger gap is work the events did not see, on a stream that does not wait for them.
GAP_SLACK_US, GAP_SHARE = 100.0, 0.10
TIMER_FACTS = ("clock", "l2_bytes", "flush_bytes", "spin_us", "nvml", "persisting_l2_reset")
LOCK_WAIT_S = 1800.0  # a timing job waits this long for correctness runs on its GPU to end


def pool_seed(seed: Seed, index: int) -> Seed:
    """The seed of the pool's input set `index` (0: the case's own seed)."""
    return seed if index == 0 else Seed(seed.public, f"{seed.secret or ''}/timing-pool-{index}")


def pool_inputs(assignment: Assignment, kernel: Kernel, case: Case, seed: Seed, size: int, cache_dir: Path) -> list[Path]:
    """The pool's input folders: the case's own first, then fresh draws from the same generator (cached by content)."""
    return [prepare_inputs(assignment, kernel, case, pool_seed(seed, i), cache_dir) for i in range(size)]


def timing_calls(kernel: Kernel, case: Case, library: Path, inputs: list[Path], outbox: Path) -> list[Call]:
    """One call per input set of the pool, each writing to its own folder of the sandbox's `outbox`: the plan's calls."""
    return [Call(kernel, case, library, folder, outbox / str(i)) for i, folder in enumerate(inputs)]


def time_kernel(assignment: Assignment, kernel: Kernel, artifact: Artifact | None, timing: TimingSpec, seed: Seed,
                cache_dir: Path, sandbox: Sandbox, cuda_arch: str | None = None,
                kernel_cache: KernelCache | None = None) -> KernelTiming:
    """One kernel's timing on its timed case, re-checked against the case's gold. `kernel_cache`: the submission's
    compiled kernels (CuPy's), carried from its earlier harnesses (`grader.runner.kernel_cache`)."""
    case = timing.timed_case(kernel)
    blank = KernelTiming(kernel.name, kernel.base, kernel.variant, case.name, TimingStatus.NOT_SUBMITTED)
    if artifact is None:
        return replace(blank, message="not submitted: nothing to time")
    if artifact.status != BuildStatus.BUILT or artifact.library is None:
        return replace(blank, status=TimingStatus.COMPILE_ERROR, message="does not compile: nothing to time")
    inputs = pool_inputs(assignment, kernel, case, seed, timing.pool, cache_dir)
    gold = gold_outputs(assignment, [(kernel, case, inputs[0])], cache_dir, sandbox, cuda_arch)[(kernel.name, case.name)]
    settings = Settings(timing.warmup, timing.rule, timing.spin_us)
    with tempfile.TemporaryDirectory(prefix="kg-time-") as scratch:
        workdir = Path(scratch)
        outbox = workdir / "out"  # the sandbox's one writable folder
        outbox.mkdir()
        calls = timing_calls(kernel, case, artifact.library, inputs, outbox)
        plan_file = workdir / "plan.json"
        plan_file.write_text(plan_for(assignment, calls, outbox, sanitizer=False).to_json())
        target = target_of(assignment)
        # Every call may take its time limit; the stop rule's cap and the harness's start come on top.
        budget = HARNESS_START_LIMIT_S + timing.rule.cap_s + (timing.warmup + timing.rule.min_calls + 1) * \
            kernel.time_limit_s
        with gpu_lock(exclusive=True, timeout_s=LOCK_WAIT_S) if target.needs_gpu else nullcontext():
            # The GPU's default hardware queues (harness_env {}): work on side streams overlaps, as it
            # does in the student's program.
            ended = Session(workdir, outbox, 1).run(plan_file, 0, len(calls), calls, sandbox, limits_for(assignment),
                                                     target, time.monotonic() + budget, module=HARNESS_MODULE,
                                                     options=(settings.to_json(),), harness_env={},
                                                     # CPU kernels' memory is the harness's heap: counted.
                                                     preload=None if target.needs_gpu else counter_library(cache_dir),
                                                     kernel_cache=kernel_cache)
        timed = read_timing(ended.events, blank)
        if timed.status is not TimingStatus.TIMED:
            return timed
        if not any(kind_of(e) == Event.FINISHED for e in ended.events):
            return unfinished(timed, ended, kernel, budget)
        return recheck(timed, ended.events, outbox / "0", kernel, case, gold)


def unfinished(timed: KernelTiming, ended: HarnessExit, kernel: Kernel, budget: float) -> KernelTiming:
    """A timing harness that ended before its `finished`: the call in flight timed out, or it crashed."""
    if ended.reason == "timeout":
        status, words = TimingStatus.TIMEOUT, f"a call {call_timeout_words(kernel)} (timeout)"
    elif ended.reason == BUDGET_SPENT:
        status, words = TimingStatus.TIMEOUT, f"timing ran past its budget ({budget:g} s, timeout)"
    else:
        status, words = TimingStatus.CRASHED, f"the timing harness {ended.reason}"
    calls = timed.summary.calls if timed.summary else 0
    tail = f"; its output ends: {ended.log_tail[-300:]}" if ended.log_tail else ""
    return replace(timed, status=status, summary=None,
                   message=f"{words} after {calls} timed call(s): no speed{tail}")


def read_timing(events: tuple[dict[str, Any], ...], blank: KernelTiming) -> KernelTiming:
    """The timing harness's events as a KernelTiming (status TIMED until the re-check and the harness's end judge it)."""
    if not any(kind_of(e) == Event.DEVICE for e in events):
        unavailable = next((e for e in events if kind_of(e) == Event.DEVICE_UNAVAILABLE), None)
        if unavailable is not None:
            raise GraderError(f"this machine cannot time kernels: {message_of(unavailable)[:300]}")
    device = Ready.read(next((e for e in events if kind_of(e) == Event.DEVICE), {})).name
    ends = [e for e in events if kind_of(e) == Event.END]
    failed = next((e for e in ends if e.get("status") != EndStatus.OK.value), None)
    if failed is not None:
        phase = str(failed.get("phase", "a"))
        return replace(blank, status=TimingStatus.CRASHED, device=device,
                       message=f"a {phase} call failed: {message_of(failed)[:300] or failed.get('status')}")
    timed = [e for e in ends if e.get("phase") == Phase.TIMED.value]
    samples = [v * 1000 for e in timed if (v := number(e.get("time_ms"))) is not None and v >= 0]
    walls = [v * 1000 for e in timed if (v := number(e.get("wall_ms"))) is not None]
    gaps = [v * 1000 for e in timed if (v := number(e.get("gap_ms"))) is not None]
    facts = next((e for e in events if kind_of(e) == TimingEvent.TIMING.value), {})
    stopped_by = str(facts.get("stopped_by", "")) or "too_few"
    summary = summarise(samples, stopped_by)
    gap = statistics.median(gaps) if gaps else None
    side = gap is not None and summary is not None and gap > GAP_SLACK_US + GAP_SHARE * summary.median_us
    return replace(blank, status=TimingStatus.TIMED, summary=summary, samples_us=tuple(samples),
                   wall_median_us=statistics.median(walls) if walls else None, gap_median_us=gap, side_streams=side,
                   unwritten_calls=sum(e.get("written") is not True for e in timed),
                   pool=int(number(facts.get("pool")) or 0), stopped_by=stopped_by,
                   clocks_before=_mapping(facts.get("clocks_before")), clocks_after=_mapping(facts.get("clocks_after")),
                   timer={k: v for k, v in facts.items() if k in TIMER_FACTS},
                   device=device, peak_extra_bytes=_bytes(facts.get("peak_extra_bytes")))


def recheck(timed: KernelTiming, events: tuple[dict[str, Any], ...], produced: Path, kernel: Kernel, case: Case,
            gold: dict[str, Any]) -> KernelTiming:
    """Judge the timing: no timed call may skip its work, and the case's own inputs, run again after the timed
    calls, must give gold's answer, as in a correctness case."""
    if timed.summary is None or timed.summary.calls < 1:
        return replace(timed, status=TimingStatus.CRASHED, message="no timed call was reported")
    if timed.unwritten_calls:
        return replace(timed, status=TimingStatus.NO_WORK,
                       message=f"{timed.unwritten_calls} of {timed.summary.calls} timed calls left an output "
                               "unwritten (a call that skips its work, e.g. one that recognises inputs it has "
                               "seen): no speed")
    check = next((e for e in events if kind_of(e) == Event.END and e.get("phase") == Phase.RECHECK.value), None)
    ended = Ended.read(check) if check is not None else None
    if ended is None:
        return replace(timed, status=TimingStatus.CRASHED, message="the re-check after timing did not run")
    if ended.out_of_bounds or ended.inputs_modified:
        what = "; ".join([*(f"wrote {o}" for o in ended.out_of_bounds),
                          *(f"changed its input {n}" for n in ended.inputs_modified)])
        return replace(timed, status=TimingStatus.WRONG, message=f"the re-check after timing {what}: no speed")
    outputs = {}
    for buffer in kernel.buffers_with("output"):
        try:
            outputs[buffer.name] = load_npy(produced / f"{buffer.name}.npy")
        except (OSError, ValueError):
            continue  # compare names a missing output as such
    verdict = compare(outputs, judged_with(kernel, outputs, gold), kernel.tolerance_for(case))
    if not verdict.passed:
        return replace(timed, status=TimingStatus.WRONG,
                       message=f"its outputs after timing do not match gold on case '{case.name}' "
                               f"({verdict.message}): fast and wrong gets no speed")
    return timed


def _bytes(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _mapping(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)}


def time_submission(path: Path, assignment: Assignment, options: Options, timing: TimingSpec,
                    sweep: bool = False, cases: dict[str, tuple[str, ...]] | None = None) -> SubmissionTiming:
    """Build a submission's kernels (base and variants, as `options.kernels` selects) and time each in turn.

    Inputs use the assignment's public seed with nothing secret mixed in (`options.secret` is not asked
    for): a timing is a figure, not a grade, and the re-check's gold is the timed case's. sweep: time each
    kernel on every one of its sweep cases (`swept_cases`), one timing per case in the spec's order, not on its timed
    case alone; `cases`, with sweep: only these of each kernel's (by its name: a study's claimed figures,
    grader.claims), from its sweep cases and cases. The submission's harnesses share its compiled-kernel cache (CuPy's:
    each would compile again).
    """
    built = build_stage(path, assignment, replace(options, sanitizer=False))
    missing = {v.variant for v in built.variants if not v.submitted}
    sandbox = sandbox_named(options.sandbox)
    timings = []
    with kernel_cache_for(target_of(assignment)) as kernel_cache:
        for kernel in built.kernels:
            artifact = None if kernel.variant in missing else built.artifacts.get(kernel.name)
            swept = swept_cases(kernel, timing.sweep_parameter) if cases is None else tuple(
                c for c in kernel.sweep_cases + kernel.cases if c.name in cases.get(kernel.name, ()))
            specs = [replace(timing, cases=((kernel.base, c.name),)) for c in swept] if sweep else [timing]
            timings += [time_kernel(assignment, kernel, artifact, spec, built.seed, options.cache_dir, sandbox,
                                    options.cuda_arch, kernel_cache) for spec in specs]
    return SubmissionTiming(str(path), assignment.name, tuple(timings))


def swept_cases(kernel: Kernel, parameter: str) -> tuple[Case, ...]:
    """The cases a sweep times: the kernel's `sweep_cases`; without them, its cases that carry the swept
    parameter (the sparse assignments' density sweep, not their edge cases); without those, all its cases."""
    return kernel.sweep_cases or tuple(c for c in kernel.cases if parameter in c.params) or kernel.cases
