"""Grade one submission: fetch → sources → build → cases and gold → run → compare → score → result."""

from __future__ import annotations

import datetime
import math
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from grader import __version__
from grader.build import Artifact, build_submission, toolchain_for
from grader.checks.grading import (check_calls, check_gold, check_results, prepare_check_gold, prepare_check_inputs,
                                   unprepared)
from grader.cases import Seed, prepare_inputs
from grader.compare import Verdict, compare
from grader.device import certainly_unavailable, unavailable_reason
from grader.gold import gold_outputs, judged_with, meaningful_inputs
from grader.checkout import Checkout, checkout_folder
from grader.options import Options
from grader.results import Environment, Result, Submission, SubmissionStatus
from grader.sanitizer import SanitizerReport, sanitizer_check
from grader.runner import Call, CallOutcome, CaseWatcher, harnesses_for, limits_for, run_calls, submission_budget
from grader.runner.bytecode import harness_bytecode
from grader.timing.alloc_counter import counter_library
from grader.sandbox import sandbox_named
from grader.scoring import apply_credit_rules, case_result, score_kernel, score_variants
from grader.sources import VariantSources, gather_sources
from grader.assignment import Assignment, Case, Kernel
from grader.assignment.model import max_score_of
from grader.assignment.shapes import named_axes
from grader.status import BuildStatus, CallStatus
from grader.targets import target_of
from grader.threadsafe import load_npy
from grader.written import find_report


def grade(path: Path | Checkout, assignment: Assignment, options: Options,
          on_case: CaseWatcher | None = None) -> Result:
    """Grade a folder or repository (a batch passes the Checkout its fetch pinned: git is not asked again).

    `on_case` is told as each case starts and ends running (`grader check`'s live line).
    """
    return run_stage(build_stage(path, assignment, options), assignment, options, on_case)


@dataclass(frozen=True)
class Built:
    """A submission after the CPU-side stages (fetch, build, inputs): what the run stage needs.

    Batches build many of these in parallel on the CPU cores while earlier ones run on the GPUs.
    """

    checkout: Checkout
    kernels: tuple[Kernel, ...]
    artifacts: dict[str, Artifact]
    selection: list[tuple[Kernel, Case, Path]]
    seed: Seed
    stages: StageTimes  # so far
    variants: tuple[VariantSources, ...] = ()  # what the sources stage found of the selected kernels' variant folders
    # The checks' kernels whose composed kernels are all selected (grader.checks), and each check's inputs by its
    # name (none where nothing will run).
    checks: tuple[Kernel, ...] = ()
    check_inputs: dict[str, Path] = field(default_factory=dict)


@dataclass(frozen=True)
class StageTimes:
    """Seconds per stage of one grade, and the total as measured: never a sum of figures that overlap.

    `stages` are disjoint and in order; `parts` are figures inside a stage (`run_start`: the harness
    start-ups within `run`). A grade runs in segments (a batch builds in one process, runs in
    another, scores in a third, with queues between): `total` is the wall time of the segments,
    each clocked from its start to its last lap, so that waiting in a queue is not grading time.
    """

    stages: tuple[tuple[str, float], ...] = ()
    parts: tuple[tuple[str, float], ...] = ()
    total: float = 0.0

    def to_dict(self) -> dict[str, float]:
        """As the result stores it: every stage, then its parts, then `total`."""
        return {**dict(self.stages), **dict(self.parts), "total": round(self.total, 3)}


class _Segment:
    """Clocks one segment of a grade: each lap is the time since the previous one."""

    def __init__(self, before: StageTimes | None = None) -> None:
        self.before = before or StageTimes()
        self.stages: list[tuple[str, float]] = []
        self.parts: list[tuple[str, float]] = []
        self.started = self.clock = time.perf_counter()

    def __call__(self, stage: str, at: float | None = None) -> None:
        """The lap `stage` ends now, or `at` (a time.perf_counter() already past, for stages a pool overlapped)."""
        now = time.perf_counter() if at is None else at
        self.stages.append((stage, round(now - self.clock, 3)))
        self.clock = now

    def part(self, name: str, seconds: float) -> None:
        self.parts.append((name, round(seconds, 3)))

    def times(self) -> StageTimes:
        return StageTimes(self.before.stages + tuple(self.stages), self.before.parts + tuple(self.parts),
                          self.before.total + (self.clock - self.started))


def build_stage(path: Path | Checkout, assignment: Assignment, options: Options) -> Built:
    """Fetch, gather each kernel's sources, build them and prepare the case inputs: all before student code runs."""
    lap = _Segment()
    checkout = checkout_folder(path)
    lap("fetch")
    kernels = assignment.select(options.kernels)
    sources = gather_sources(assignment, checkout.root, kernels, upload=options.upload)
    lap("sources")
    # The compiler reads the student's sources: it runs in the same sandbox as their code.
    artifacts = build_submission(assignment, sources, options.cache_dir, kernels, options.jobs, options.cuda_arch,
                                 sandbox=sandbox_named(options.sandbox))
    lap("build")
    seed, selection = _selection(assignment, kernels, options)
    checks = assignment.checks_among(kernels)
    # Not where nothing will run (a laptop, CI): a check's inputs may be large (GPT-2's weights: half a gigabyte).
    # Known without the driver, since batches build in worker processes that must not initialise CUDA.
    check_inputs = prepare_check_inputs(assignment, checks, options.cache_dir) \
        if checks and not certainly_unavailable(assignment.target, assignment.python_packages) else {}
    lap("inputs")
    return Built(checkout, kernels, artifacts, selection, seed, lap.times(), sources.variants, checks, check_inputs)


def run_stage(built: Built, assignment: Assignment, options: Options, on_case: CaseWatcher | None = None) -> Result:
    """Run (sandboxed), then gold, compare and score a built submission into its result."""
    with tempfile.TemporaryDirectory(prefix="kg-outputs-") as scratch:
        return score_stage(execute_stage(built, assignment, options, Path(scratch), on_case), assignment, options)


@dataclass(frozen=True)
class Ran:
    """A submission after its code ran: how each call ended, its outputs in a folder the caller owns."""

    built: Built
    outcomes: dict[tuple[str, str], CallOutcome]  # (kernel, case) -> outcome
    device: str
    stages: StageTimes
    sanitizer: dict[str, list[SanitizerReport]] = field(default_factory=dict)  # kernel -> compute-sanitizer's reports
    logs: dict[str, str] = field(default_factory=dict)  # kernel -> the tail of its harnesses' stdout/stderr
    sandbox_enforced: tuple[str, ...] = ()  # what the sandbox applied to the harnesses, with the values
    not_run_reason: str = ""  # why nothing ran (no GPU here): the kernels were compiled only
    harnesses_at_once: int = 1  # the most harnesses that ran at once: the cases' times were not exclusive


def execute_stage(built: Built, assignment: Assignment, options: Options, outputs_dir: Path,
                  on_case: CaseWatcher | None = None) -> Ran:
    """Run every built kernel on its cases in the sandbox, outputs under `outputs_dir`: the GPU's part.

    Batches run this in one process per GPU and score in the CPU pool, so the GPU never waits on a compare.
    """
    lap = _Segment(built.stages)
    calls = [Call(k, c, built.artifacts[k.name].library, inputs, outputs_dir / k.name / c.name)  # type: ignore[arg-type]
             for k, c, inputs in built.selection if built.artifacts[k.name].status == BuildStatus.BUILT]
    # The checks' calls, in harnesses of their own beside the kernels'.
    calls += check_calls(assignment, built.checks, built.artifacts, built.check_inputs, outputs_dir)
    reason = unavailable_reason(assignment.target, assignment.python_packages) if calls or built.checks else None
    if reason:
        # Compile feedback still counts on a laptop: every kernel was built; none can run here.
        keys = [(c.kernel.name, c.case.name) for c in calls]
        # Inputs not prepared: the checks whose kernels built, not run either.
        keys += unprepared(assignment, built.checks, built.artifacts, built.check_inputs)
        outcomes = {key: CallOutcome(*key, CallStatus.NOT_RUN, f"not run: {reason}") for key in keys}
        return Ran(built, outcomes, "", lap.times(), not_run_reason=reason)
    # The run slot's, sanitizer included.
    deadline = time.monotonic() + submission_budget(assignment, (c.kernel for c in calls))
    sandbox = sandbox_named(options.sandbox)
    inputs = {(k.name, c.name): i for k, c, i in built.selection}
    # Untimed and on one small case, each tool in a slot of its own beside the other kernels' runs,
    # once the kernel's own ended without a time-out.
    check = sanitizer_check(assignment, built.artifacts, inputs, sandbox, deadline,
                            options.cache_dir) if options.sanitizer and calls else None
    harnesses = harnesses_for(len({c.kernel.name for c in calls}), options.harnesses)
    started = time.perf_counter()
    # compute-sanitizer checks kernels, not the checks that compose them.
    then = (lambda kernel, ended: () if kernel in built.checks else check.after_run(kernel, ended)) \
        if check else None
    # CPU kernels' memory is the harness's heap: counted per case (a kernel's memory bound reads it).
    preload = None if target_of(assignment).needs_gpu else counter_library(options.cache_dir)
    report = run_calls(assignment, calls, sandbox, parallel=harnesses, then=then, on_case=on_case,
                       bytecode=harness_bytecode(options.cache_dir), preload=preload) if calls else None
    sanitizer: dict[str, list[SanitizerReport]] = report.after if report else {}
    if sanitizer and report is not None:
        # "run": until the last kernel's harness ended; "sanitizer": what its runs added after that.
        lap("run", at=started + report.calls_seconds)
        lap("sanitizer")
    else:
        lap("run")
    if report is not None:
        lap.part("run_start", report.start_seconds)  # within "run": harness start-ups, not student code
    if sanitizer:
        reports = [r for found in sanitizer.values() for r in found]
        # Summed over the tool's harnesses, beside the kernels' runs or after them; none for a cached report.
        lap.part("sanitizer_harnesses", sum(r.seconds for r in reports))
        lap.part("sanitizer_cached", sum(r.cached for r in reports))
    outcomes = {(o.kernel, o.case): o for o in report.outcomes} if report else {}
    return Ran(built, outcomes, report.device if report else "", lap.times(), sanitizer,
               report.kernel_logs if report else {}, report.sandbox_enforced if report else (),
               harnesses_at_once=report.harnesses_at_once if report else 1)


CASES_AT_ONCE = 4  # cases a score stage reads and compares at once


def score_stage(ran: Ran, assignment: Assignment, options: Options) -> Result:
    """Compare a run's outputs with gold (computed once, then cached) and score them into the result."""
    lap = _Segment(ran.stages)
    kernels, artifacts, selection = ran.built.kernels, ran.built.artifacts, ran.built.selection
    seed, checkout, outcomes = ran.built.seed, ran.built.checkout, ran.outcomes
    sandbox = sandbox_named(options.sandbox)
    ran_ok = {key for key, o in outcomes.items() if o.status == CallStatus.OK}
    # Gold only where something ran: a compile-only grade (no GPU here) needs none.
    needed = [(k, c, i) for k, c, i in selection if (k.name, c.name) in ran_ok]
    gold = gold_outputs(assignment, needed, options.cache_dir, sandbox, options.cuda_arch,
                        strict=seed.secret is None) if needed else {}
    checks_gold = check_gold(assignment, ran.built.checks, outcomes, ran.built.check_inputs, options.cache_dir)
    lap("gold")

    Reported = dict[str, list[float | None]]

    def verdict_of(kernel: Kernel, case: Case) -> tuple[Verdict | None, Reported, Reported]:
        outcome = outcomes.get((kernel.name, case.name))
        if outcome is None or outcome.status != CallStatus.OK or outcome.output_dir is None:
            return None, {}, {}
        produced = load_outputs(outcome.output_dir, kernel)
        expected = judged_with(kernel, produced, gold[(kernel.name, case.name)])
        axes = {b.name: named_axes(b, case.params) for b in kernel.buffers_with("output")}
        words = {b.name: b.element for b in kernel.buffers_with("output") if b.element}
        return (compare(produced, expected, kernel.tolerance_for(case), pointers_of(kernel), axes, words),
                reported_values(kernel, produced), reported_values(kernel, expected))

    # A few cases at once: one case's outputs are read from disk while another's are compared (each
    # compare spreads its blocks over the cores itself).
    with ThreadPoolExecutor(max_workers=CASES_AT_ONCE, thread_name_prefix="kg-score") as pool:
        verdicts = dict(zip([(k.name, c.name) for k, c, _ in selection],
                            pool.map(lambda item: verdict_of(item[0], item[1]), selection)))
    kernel_results = []
    for kernel in kernels:
        cases = []
        for case in (c for k, c, _ in selection if k is kernel):
            verdict, reported, reported_gold = verdicts[(kernel.name, case.name)]
            cases.append(case_result(case, outcomes.get((kernel.name, case.name)), verdict,
                                     kernel.tolerance_for(case), reported, reported_gold))
        kernel_results.append(score_kernel(kernel, artifacts[kernel.name], cases, ran.sanitizer.get(kernel.name),
                                           ran.logs.get(kernel.name, "")))
    kernel_results += check_results(assignment, ran.built.checks, artifacts, outcomes, checks_gold, ran.logs,
                                    ran.not_run_reason)
    kernel_results, variants = score_variants(assignment, kernel_results, ran.built.variants, artifacts)
    kernel_results, variants, additional, zeroed_by = apply_credit_rules(assignment, kernel_results, variants)
    lap("compare_and_score")

    return Result(
        assignment=assignment.name,
        assignment_version=assignment.version,
        title=assignment.title,
        score=round(sum(k.score for k in kernel_results), 6),
        # An [assignment.additional] group counts its minimum; its extra credit can take the score above this.
        max_score=max_score_of(assignment.additional, [(k.variant, k.max_score) for k in kernel_results]),
        kernels=kernel_results,
        variants=variants,
        additional=additional,
        zeroed_by=zeroed_by,
        submission=Submission(str(checkout.root), checkout.commit, checkout.commit_time, checkout.dirty),
        environment=_environment(assignment, options, sandbox, ran.device, ran.sandbox_enforced,
                                 ran.harnesses_at_once),
        stages=lap.times().to_dict(),
        seed={"mode": seed.mode, "fingerprint": seed.fingerprint},
        public_only=options.public_only,
        graded_at=_now(),
        message=f"compiled only: {ran.not_run_reason}; the cases run where there is a GPU" if ran.not_run_reason else "",
        written=find_report(assignment.written, checkout.root),
    )


def prepare_gold(assignment: Assignment, options: Options) -> None:
    """Compute every case's inputs and gold once, before a batch fans out (they are cached by content)."""
    kernels = assignment.select(options.kernels)
    seed, selection = _selection(assignment, kernels, options)
    gold_outputs(assignment, selection, options.cache_dir, sandbox_named(options.sandbox), options.cuda_arch,
                 strict=seed.secret is None)
    prepare_check_gold(assignment, kernels, options.cache_dir)


def not_graded(assignment: Assignment, options: Options, status: SubmissionStatus, message: str,
               submission: Submission) -> Result:
    """The result of a submission with nothing to grade (`not_submitted`) or that the grader failed on (`error`)."""
    kernels = assignment.select(options.kernels)
    return Result(
        assignment=assignment.name, assignment_version=assignment.version, title=assignment.title, score=0.0,
        max_score=max_score_of(assignment.additional, [(k.variant, k.weight)
                                                       for k in (*kernels, *assignment.checks_among(kernels))]),
        kernels=[], submission=submission,
        environment=_environment(assignment, options, sandbox_named(options.sandbox), ""), stages={},
        seed={}, public_only=options.public_only, graded_at=_now(), status=status, message=message,
    )


def _selection(assignment: Assignment, kernels: tuple[Kernel, ...],
               options: Options) -> tuple[Seed, list[tuple[Kernel, Case, Path]]]:
    seed = Seed(assignment.public_seed, None if options.public_only else options.secret)
    # Under a secret, a case whose NumPy gold is too small for its tolerance is drawn again (gold.meaningful_inputs);
    # not where nothing will run, which needs no gold.
    redraw = seed.secret is not None and assignment.gold == "numpy" and \
        not certainly_unavailable(assignment.target, assignment.python_packages)
    inputs_of = meaningful_inputs if redraw else prepare_inputs
    selection = [(k, c, inputs_of(assignment, k, c, seed, options.cache_dir))
                 for k in kernels for c in k.cases if c.public or not options.public_only]
    return seed, selection


def _environment(assignment: Assignment, options: Options, sandbox, device: str,
                 enforced: tuple[str, ...] = (), harnesses_at_once: int = 1) -> Environment:
    """Where it was graded; `enforced`: what the sandbox applied to this run (else what it would apply);
    `harnesses_at_once`: the most harnesses the run had at once."""
    toolchain = toolchain_for(assignment.target, options.cuda_arch)
    return Environment(
        grader_version=__version__, target=assignment.target, device=device,
        compiler=toolchain.description, sandbox=sandbox.name,
        sandbox_enforced=list(enforced) or sandbox.enforced(limits_for(assignment), gpu=target_of(assignment).needs_gpu),
        host=platform.node(), python=sys.version.split()[0], harnesses_at_once=harnesses_at_once,
        determinism=list(target_of(assignment).determinism),
    )


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def reported_values(kernel: Kernel, produced: dict[str, np.ndarray]) -> dict[str, list[float | None]]:
    """The values of the outputs the spec marks `report`, as the result keeps them (None where not finite: JSON)."""
    with np.errstate(invalid="ignore"):  # widening the poison (a signalling NaN) raises the invalid flag
        return {b.name: [float(v) if math.isfinite(v) else None for v in produced[b.name].astype(np.float64).ravel()]
                for b in kernel.buffers_with("output") if b.report and b.name in produced}


def pointers_of(kernel: Kernel) -> tuple[str, ...]:
    """The kernel's pointer parameters in the signature's order: the positions its margins' poison names."""
    return tuple(p.name for p in kernel.signature.parameters if p.pointer)


def load_outputs(folder: Path, kernel: Kernel) -> dict[str, np.ndarray]:
    outputs = {}
    for buffer in kernel.buffers_with("output"):
        path = folder / f"{buffer.name}.npy"
        try:
            outputs[buffer.name] = load_npy(path)  # never unpickles: a forged .npy cannot run code here
        except (OSError, ValueError):
            continue  # compare names a missing or unreadable output as such
    return outputs
