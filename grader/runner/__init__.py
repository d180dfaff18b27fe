"""Run built kernels on their cases in sandboxed harness processes; collect outputs and timings.

A crash, a sticky CUDA error or a timeout fails the kernel in flight; a fresh harness then goes on
with the next kernel, so one broken kernel never costs the others their points.

    plan.py     the calls, spelt as the harness's plan (`grader.protocol`)
    limits.py   the limits policy: time budgets, sandbox limits, device memory a call may keep
    watch.py    the watchdog: one harness started in the sandbox and watched until it ends
    events.py   the event state machine: a harness's progress events turned into call outcomes
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.errors import GraderError
from grader.protocol import Event, Ready, kind_of, message_of
from grader.runner.events import CallOutcome, record, skip_rest
from grader.runner.limits import Budget, limits_for, submission_budget, submission_time_limit
from grader.runner.plan import Call, plan_for
from grader.runner.watch import BUDGET_SPENT, LOG_TAIL, Session
from grader.sandbox import Limits, Sandbox
from grader.spec import Assignment
from grader.status import CallStatus
from grader.targets import target_of

__all__ = ["Call", "CallOutcome", "RunReport", "limits_for", "run_calls", "submission_budget", "submission_time_limit"]


@dataclass
class RunReport:
    """Everything a run produced: one outcome per call, and what the harness said about itself."""

    outcomes: list[CallOutcome] = field(default_factory=list)
    device: str = ""
    harness_starts: int = 0
    start_seconds: float = 0.0  # summed over harnesses: from launch to a usable device (CuPy, CUDA context)
    seconds: float = 0.0
    logs: list[str] = field(default_factory=list)  # each harness's stdout (capped), for tools that report there
    kernel_logs: dict[str, str] = field(default_factory=dict)  # kernel -> the tail of its harnesses' stdout/stderr
    # Free device memory each harness saw when it started: the next kernel must find the card clean.
    free_bytes_at_start: list[int] = field(default_factory=list)
    sandbox_enforced: tuple[str, ...] = ()  # what the sandbox applied to the last harness, with the values


def run_calls(assignment: Assignment, calls: list[Call], sandbox: Sandbox, limits: Limits | None = None,
              time_limit_s: float | None = None, wrapper: tuple[str, ...] = (), sanitizer: bool = False) -> RunReport:
    """Run every call, one harness (one sandbox) per kernel, a fresh one after a failed case.

    A kernel's harness sees only that kernel's library and inputs and one writable folder, which is
    emptied before the next kernel's harness starts: one kernel's code cannot touch another's outputs.
    A case that crashes or times out costs that case; the kernel's next case runs in a fresh harness
    while the kernel's time budget lasts. `time_limit_s` bounds the whole submission (default: the
    spec's, else `submission_time_limit`); `wrapper` prefixes the harness's command, and `sanitizer`
    says that it is compute-sanitizer (the harness then leaves out its margins and memory pool).
    """
    report = RunReport()
    started = time.perf_counter()
    limits = limits or limits_for(assignment)
    budget = time_limit_s or submission_budget(assignment, calls)
    deadline = time.monotonic() + budget
    kernel_deadlines: dict[str, float] = {}
    outcomes: dict[int, CallOutcome] = {}
    target = target_of(assignment)
    with tempfile.TemporaryDirectory(prefix="kg-run-") as scratch:
        workdir = Path(scratch)
        outbox = workdir / "out"  # the sandbox's one writable folder
        plan_file = workdir / "plan.json"
        plan_file.write_text(plan_for(assignment, calls, outbox, sanitizer).to_json())
        next_index = 0
        while next_index < len(calls):
            kernel = calls[next_index].kernel
            stop = next_index
            while stop < len(calls) and calls[stop].kernel.name == kernel.name:
                stop += 1
            now = time.monotonic()
            if now >= deadline:
                skip_rest(next_index, calls, outcomes, f"not run: the submission's time limit ({budget:g} s) was reached")
                break
            kernel_deadline = kernel_deadlines.setdefault(kernel.name, now + kernel.budget_s)
            if now >= kernel_deadline:  # spent by earlier cases' harnesses
                for index in range(next_index, stop):
                    outcomes[index] = CallOutcome(kernel.name, calls[index].case.name, CallStatus.NOT_RUN,
                                                  f"not run: the kernel's time budget ({kernel.budget_s:g} s) was spent")
                next_index = stop
                continue
            report.harness_starts += 1
            shutil.rmtree(outbox, ignore_errors=True)
            outbox.mkdir()
            session = Session(workdir, outbox, report.harness_starts)
            launched_at = time.time()
            ended = session.run(plan_file, next_index, stop, calls, sandbox, limits, target,
                                min(deadline, kernel_deadline), wrapper)
            report.logs.append(session.stdout_text(limits.log_bytes))
            report.sandbox_enforced = session.applied or report.sandbox_enforced
            if ended.log_tail:
                logged = report.kernel_logs.get(kernel.name, "") + ended.log_tail + "\n"
                report.kernel_logs[kernel.name] = logged[-LOG_TAIL:]
            unavailable = next((e for e in ended.events if kind_of(e) == Event.DEVICE_UNAVAILABLE), None)
            ready = next((e for e in ended.events if kind_of(e) == Event.DEVICE), None)
            if unavailable is not None and ready is None:
                raise GraderError(f"this machine cannot run {assignment.target} kernels: "
                                  f"{message_of(unavailable)[:LOG_TAIL]}")
            if ready is None and ended.reason != BUDGET_SPENT:
                # No student code was loaded yet: this is the grading machine's problem, not the student's.
                raise GraderError(f"the harness could not start ({ended.reason}): {ended.log_tail or 'no output'}")
            device = Ready.read(ready or {})
            report.device = report.device or device.name
            report.start_seconds += max(0.0, (device.at or launched_at) - launched_at)
            if device.free_bytes is not None:
                report.free_bytes_at_start.append(device.free_bytes)
            timed_out_index, spent = ended.timed_out_index, None
            if ended.reason == BUDGET_SPENT:
                if timed_out_index is None:
                    timed_out_index = next((i for i in range(next_index, stop) if i not in outcomes), None)
                spent = Budget("kernel", kernel.budget_s) if kernel_deadline <= deadline else Budget("submission", budget)
            next_index = record(ended, timed_out_index, calls, next_index, stop, outcomes, spent)
            _collect_outputs(outbox, calls, outcomes)
    report.outcomes = [outcomes.get(i) or CallOutcome(c.kernel.name, c.case.name, CallStatus.NOT_RUN, "never reached")
                       for i, c in enumerate(calls)]
    report.seconds = time.perf_counter() - started
    return report


def _collect_outputs(outbox: Path, calls: list[Call], outcomes: dict[int, CallOutcome]) -> None:
    """Move each finished call's outputs out of the sandbox's folder: only regular files the spec names."""
    for index, outcome in outcomes.items():
        if outcome.status != CallStatus.OK or outcome.output_dir != calls[index].output_dir:
            continue
        produced = outbox / str(index)
        if not produced.is_dir() or produced.is_symlink():
            continue
        calls[index].output_dir.mkdir(parents=True, exist_ok=True)
        for buffer in calls[index].kernel.buffers_with("output"):
            source = produced / f"{buffer.name}.npy"
            # A symlink planted by the code could point at any file of the grader's: never follow one.
            if source.is_file() and not source.is_symlink():
                shutil.copyfile(source, calls[index].output_dir / source.name)
