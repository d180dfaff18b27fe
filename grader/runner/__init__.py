"""Run built kernels on their cases in sandboxed harness processes; collect outputs and timings.

Each kernel runs in harnesses of its own (a sandbox seeing only its library, its inputs and its own
writable folder); several kernels' harnesses may run at once (`parallel`). A crash, a sticky CUDA
error or a timeout fails the case in flight; a fresh harness then goes on with the kernel's next
case, so one broken kernel never costs the others their points.

    plan.py     the calls, spelt as the harness's plan (`grader.boundary.protocol`)
    limits.py   the limits policy: time budgets, sandbox limits, device memory a call may keep
    slots.py    how many harnesses run at once (`grader.gate` lets them in, and runs one alone to confirm a GPU failure)
    watch.py    the watchdog: one harness started in the sandbox and watched until it ends
    events.py   the event state machine: a harness's progress events turned into call outcomes
"""

from __future__ import annotations

import compileall
import functools
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.boundary.protocol import Event, Ready, kind_of, message_of
from grader.errors import MachineError
from grader.gate import Gate
from grader.runner.events import CallOutcome, record, skip_rest
from grader.runner.limits import Budget, limits_for, submission_budget
from grader.runner.kernel_cache import KernelCache, kernel_cache_for
from grader.runner.plan import Call, plan_for
from grader.runner.slots import harnesses_for
from grader.runner.watch import BUDGET_SPENT, LOG_TAIL, CaseWatcher, HarnessExit, Session
from grader.sandbox import Limits, Sandbox
from grader.assignment import Assignment, Kernel
from grader.status import CallStatus
from grader.targets import Target, target_of

__all__ = ["Call", "CallOutcome", "CaseWatcher", "FollowUp", "RunReport", "harnesses_for", "limits_for",
           "run_calls", "submission_budget"]

# A harness run chained after a kernel's own (the sanitizer's): given the run's slots, it returns its result.
FollowUp = Callable[[Gate], Any]
# Given a kernel and how its calls ended, the follow-ups to run for it (none: nothing more).
Then = Callable[[Kernel, list[CallOutcome]], Sequence[FollowUp]]


@dataclass
class RunReport:
    """Everything a run produced: one outcome per call, and what the harnesses said about themselves."""

    outcomes: list[CallOutcome] = field(default_factory=list)  # in the order of the calls
    device: str = ""
    harness_starts: int = 0
    # Summed over harnesses, from launch to a usable device (Python, NumPy, a CUDA context): with several at
    # once the sum is CPU and driver time, and may exceed the wall time `seconds`.
    start_seconds: float = 0.0
    seconds: float = 0.0  # wall clock of the whole run, follow-ups included
    calls_seconds: float = 0.0  # wall clock until the last call's harness ended (follow-ups may go on after)
    harnesses_at_once: int = 1  # the most that ran at once (measured): above 1, the cases' times were not exclusive
    logs: list[str] = field(default_factory=list)  # each harness's stdout (capped), kernel by kernel
    kernel_logs: dict[str, str] = field(default_factory=dict)  # kernel -> the tail of its harnesses' stdout/stderr
    # Free device memory each harness saw when it started, kernel by kernel: run one at a time, the
    # next kernel must find the card clean (beside other harnesses it sees theirs too).
    free_bytes_at_start: list[int] = field(default_factory=list)
    sandbox_enforced: tuple[str, ...] = ()  # what the sandbox applied to the last harness, with the values
    after: dict[str, list[Any]] = field(default_factory=dict)  # kernel -> its follow-ups' results, in order


@dataclass(frozen=True)
class _Run:
    """What every kernel's harnesses of one run share; none of it is written while they run."""

    assignment: Assignment
    sandbox: Sandbox
    limits: Limits
    target: Target
    wrapper: tuple[str, ...]
    sanitizer: bool
    budget: float  # the submission's seconds
    deadline: float  # time.monotonic() when they are spent
    slots: Gate
    abandoned: threading.Event  # a kernel hit the machine's problem: the others start no new harness
    on_case: CaseWatcher | None = None  # told as each call starts and ends (a live line)
    bytecode: Path | None = None  # the harness's imports' bytecode, where the machine keeps none (bytecode.py)
    kernel_cache: KernelCache | None = None  # the submission's compiled kernels (CuPy's), carried between harnesses
    preload: Path | None = None  # a library every harness starts with (the counting allocator: CPU kernels' memory)


def run_calls(assignment: Assignment, calls: list[Call], sandbox: Sandbox, time_limit_s: float | None = None,
              wrapper: tuple[str, ...] = (), sanitizer: bool = False, parallel: int = 1, then: Then | None = None,
              slots: Gate | None = None, on_case: CaseWatcher | None = None,
              bytecode: Path | None = None, preload: Path | None = None) -> RunReport:
    """Run every call, each kernel in harnesses of its own, up to `parallel` harnesses at once.

    A kernel's harness sees only that kernel's library and inputs and one writable folder of its
    own: one kernel's code cannot touch another's outputs. Within a kernel the cases run in order;
    a case that crashes or times out costs that case, and the kernel's next case runs in a fresh
    harness while the kernel's time budget lasts. A GPU case that failed beside other harnesses
    is run again alone before it counts (`grader.gate`).

    `time_limit_s` bounds the whole run, follow-ups included (default: the spec's, else
    `submission_budget`); `wrapper` prefixes the harness's command, and `sanitizer` says that
    it is compute-sanitizer (the harness then leaves out its margins and memory pool). `then`
    gives each kernel's follow-ups once its harnesses ended: they take a slot as the kernels'
    harnesses do, after those still waiting, and their results are `RunReport.after`. `slots`:
    those of an enclosing run, whose follow-up this run is (it then runs here, in its caller's slot).
    `on_case` is told as each call starts and ends in its harness (from the harnesses' threads). `bytecode`:
    a folder of bytecode the harnesses read their imports from (`grader.runner.bytecode.harness_bytecode`).
    `preload`: a shared library each harness starts with (LD_PRELOAD: the counting allocator, by which each CPU
    call's peak extra heap memory is counted, `grader.boundary.allocations`).
    Every harness is held to the spec's sandbox limits (`limits_for`).
    """
    started = time.perf_counter()
    _compiled()
    budget = time_limit_s or submission_budget(assignment, (c.kernel for c in calls))
    groups = _by_kernel(calls)
    own = slots is None
    slots = slots or Gate(parallel)
    target = target_of(assignment)
    with kernel_cache_for(target) as kernel_cache:
        run = _Run(assignment, sandbox, limits_for(assignment), target, wrapper, sanitizer, budget,
                   time.monotonic() + budget, slots, threading.Event(), on_case, bytecode, kernel_cache, preload)
        if not own or slots.size == 1:
            parts = [_run_kernel(run, [calls[i] for i in group]) for group in groups]
            calls_done = time.perf_counter()
            follow_ups = [[follow_up(slots) for follow_up in _follow_ups(then, calls, group, part)]
                          for group, part in zip(groups, parts)]
        else:
            parts, calls_done, follow_ups = _run_concurrently(run, calls, groups, then)
    report = _merged(calls, groups, parts, follow_ups)
    report.seconds = time.perf_counter() - started
    report.calls_seconds = calls_done - started
    report.harnesses_at_once = slots.peak if own else 1
    return report


@functools.cache
def _compiled() -> None:
    """The grader's modules byte-compiled, once per process, where its folder is writable (a wheel's are already).

    A harness runs as another uid with a read-only view of the package: it cannot write the bytecode of the
    modules only it imports (the harness, the targets' device halves), and would compile them from source at
    every start. Up to date files are only looked at.
    """
    compileall.compile_dir(Path(__file__).resolve().parent.parent, quiet=2)


def _run_concurrently(run: _Run, calls: list[Call], groups: list[list[int]],
                      then: Then | None) -> tuple[list[RunReport], float, list[list[Any]]]:
    """The kernels' harnesses on `run.slots.size` threads; each kernel's follow-ups queue behind the kernels left."""
    with ThreadPoolExecutor(max_workers=run.slots.size, thread_name_prefix="kg-harness") as pool:
        def guarded(work: Callable[[], Any]) -> Any:
            if run.abandoned.is_set():
                return None  # another harness met the machine's problem; its error is what the run raises
            try:
                return work()
            except BaseException:
                run.abandoned.set()  # nobody starts another harness
                raise

        def kernel(group: list[int]) -> tuple[RunReport, float, list[Future]]:
            part = _run_kernel(run, [calls[i] for i in group])
            finished = time.perf_counter()
            # Submitted now, so they queue behind the kernels still waiting for a slot.
            chained = [pool.submit(guarded, lambda f=f: f(run.slots))
                       for f in (() if run.abandoned.is_set() else _follow_ups(then, calls, group, part))]
            return part, finished, chained

        try:
            futures = [pool.submit(guarded, lambda g=group: kernel(g)) for group in groups]
        except BaseException:  # a thread that could not start (the machine's fault): the queued start nothing
            run.abandoned.set()
            raise
        ran = [future.result() for future in futures]  # a kernel's error is raised here
        # A follow-up's error is raised here; past it nothing was abandoned, so every entry is whole.
        follow_ups = [[future.result() for future in entry[2]] if entry else [] for entry in ran]
    return [part for part, _, _ in ran], max((f for _, f, _ in ran), default=time.perf_counter()), follow_ups


def _follow_ups(then: Then | None, calls: list[Call], group: list[int], part: RunReport) -> Sequence[FollowUp]:
    return then(calls[group[0]].kernel, part.outcomes) if then is not None else ()


def _by_kernel(calls: list[Call]) -> list[list[int]]:
    """The calls' indices, kernel by kernel in the order the kernels first come, each kernel's in order."""
    groups: dict[str, list[int]] = {}
    for index, call in enumerate(calls):
        groups.setdefault(call.kernel.name, []).append(index)
    return list(groups.values())


def _merged(calls: list[Call], groups: list[list[int]], parts: list[RunReport],
            follow_ups: list[list[Any]]) -> RunReport:
    """One report of the kernels' own: outcomes back in the calls' order, everything else kernel by kernel."""
    report = RunReport()
    outcomes: dict[int, CallOutcome] = {}
    for group, part, after in zip(groups, parts, follow_ups):
        outcomes.update(zip(group, part.outcomes))
        report.device = report.device or part.device
        report.harness_starts += part.harness_starts
        report.start_seconds += part.start_seconds
        report.logs += part.logs
        report.kernel_logs.update(part.kernel_logs)
        report.free_bytes_at_start += part.free_bytes_at_start
        report.sandbox_enforced = part.sandbox_enforced or report.sandbox_enforced
        if after:
            report.after[calls[group[0]].kernel.name] = after
    report.outcomes = [outcomes[i] for i in range(len(calls))]
    return report


def _emptied(outbox: Path, seconds: float = 10.0) -> None:
    """`outbox` made anew and empty for the next harness.

    A killed harness's files may still be going (a container being removed, a tree of 10000 files on a
    loaded machine): removing is tried again until the folder can be made, within `seconds`.
    """
    deadline = time.monotonic() + seconds
    while True:
        shutil.rmtree(outbox, ignore_errors=True)
        try:
            outbox.mkdir()
            return
        except FileExistsError:
            if time.monotonic() > deadline:
                raise MachineError(f"could not empty the kernel's output folder {outbox} for its next harness "
                                   f"within {seconds:g} s", "harness") from None
            time.sleep(0.05)


def _run_kernel(run: _Run, calls: list[Call]) -> RunReport:
    """One kernel's calls, in order, in as many harnesses as its failures need; outcomes in the calls' order."""
    report = RunReport()
    kernel = calls[0].kernel
    outcomes: dict[int, CallOutcome] = {}
    kernel_deadline: float | None = None
    alone = False  # the next harness runs with no other beside it
    confirming: int | None = None  # the case it runs again, which failed beside others
    # Once a failure alone confirmed one beside others, the kernel's later failures are its own too.
    fails_alone = False
    with tempfile.TemporaryDirectory(prefix="kg-run-") as scratch:
        workdir = Path(scratch)
        outbox = workdir / "out"  # the sandbox's one writable folder: this kernel's alone
        plan_file = workdir / "plan.json"
        plan_file.write_text(plan_for(run.assignment, calls, outbox, run.sanitizer).to_json())
        next_index = 0
        while next_index < len(calls) and not run.abandoned.is_set():
            now = time.monotonic()
            if now >= run.deadline:
                skip_rest(next_index, calls, outcomes, Budget("submission", run.budget).not_run)
                break
            if kernel_deadline is None:
                kernel_deadline = now + kernel.budget_s
            if now >= kernel_deadline:  # spent by earlier cases' harnesses
                skip_rest(next_index, calls, outcomes, Budget("kernel", kernel.budget_s).not_run)
                break
            report.harness_starts += 1
            _emptied(outbox)
            session = Session(workdir, outbox, report.harness_starts, run.on_case)
            stop = next_index + 1 if alone else len(calls)  # alone for the one case only: it holds the card
            with run.slots.hold(alone) as held:
                kernel_deadline += held.waited  # waiting for a slot is not the kernel's time
                launched_at = time.time()
                ended = session.run(plan_file, next_index, stop, calls, run.sandbox, run.limits, run.target,
                                    min(run.deadline, kernel_deadline), run.wrapper, bytecode=run.bytecode,
                                    preload=run.preload, kernel_cache=run.kernel_cache)
            # Beside others on a GPU, a neighbour may have held the card: only a failure alone counts.
            confirm = run.target.needs_gpu and held.shared and not fails_alone
            alone = False
            report.logs.append(session.stdout_text(run.limits.log_bytes))
            report.sandbox_enforced = session.applied or report.sandbox_enforced
            if ended.log_tail:
                logged = report.kernel_logs.get(kernel.name, "") + ended.log_tail + "\n"
                report.kernel_logs[kernel.name] = logged[-LOG_TAIL:]
            ready = next((e for e in ended.events if kind_of(e) == Event.DEVICE), None)
            if ready is None and ended.reason != BUDGET_SPENT and confirm:
                alone = True  # no device beside the others (a neighbour took its memory): try alone
                continue
            # The kernel's own budget (not the submission's, which its other kernels spend too).
            _check_started(run.assignment, ended, ready, first=not report.device and kernel_deadline <= run.deadline)
            device = Ready.read(ready or {})
            report.device = report.device or device.name
            report.start_seconds += max(0.0, (device.at or launched_at) - launched_at)
            if device.free_bytes is not None:
                report.free_bytes_at_start.append(device.free_bytes)
            first = next_index
            next_index = _record(run, kernel, ended, calls, first, stop, outcomes, kernel_deadline)
            kernel_deadline += ended.start_seconds  # nor is a harness's start (the watch did not count it either)
            _collect_outputs(outbox, calls, outcomes)
            failed = next((i for i in range(first, next_index) if (o := outcomes.get(i)) is not None
                           and o.status == CallStatus.CRASHED and not o.tampered), None)
            if confirming is not None:
                fails_alone = failed == confirming
                confirming = None
            elif confirm and failed is not None:
                for index in range(failed, len(calls)):  # set by this harness: the case and what it skipped
                    outcomes.pop(index, None)
                next_index, alone, confirming = failed, True, failed
    report.outcomes = [outcomes.get(i) or CallOutcome(c.kernel.name, c.case.name, CallStatus.NOT_RUN, "never reached")
                       for i, c in enumerate(calls)]
    return report


def _check_started(assignment: Assignment, ended: HarnessExit, ready: dict | None, first: bool) -> None:
    """A harness that never got a device is the grading machine's problem, not the student's: said once, plainly.

    No student code was loaded yet: a batch grades the submission again alone (`MachineError`).
    A harness's start counts against no budget (only HARNESS_START_LIMIT_S bounds it), so a budget spent before
    the device was reached means the first harness was launched already past its deadline: the machine's too;
    a later harness's budget was spent by the kernel's own cases.
    """
    unavailable = next((e for e in ended.events if kind_of(e) == Event.DEVICE_UNAVAILABLE), None)
    if unavailable is not None and ready is None:
        raise MachineError(f"this machine cannot run {assignment.target} kernels: "
                           f"{message_of(unavailable)[:LOG_TAIL]}", "device")
    if ready is None and (ended.reason != BUDGET_SPENT or first):
        reason = "its time budget ran out before it reached the device" if ended.reason == BUDGET_SPENT \
            else ended.reason
        raise MachineError(f"the harness could not start ({reason}): {ended.log_tail or 'no output'}", "harness")


def _record(run: _Run, kernel: Kernel, ended: HarnessExit, calls: list[Call], first: int, stop: int,
            outcomes: dict[int, CallOutcome], kernel_deadline: float) -> int:
    """The harness's outcomes, with the budget that stopped it if one did; returns where the next harness starts."""
    timed_out_index, spent = ended.timed_out_index, None
    if ended.reason == BUDGET_SPENT:
        if timed_out_index is None:
            timed_out_index = next((i for i in range(first, stop) if i not in outcomes), None)
        spent = Budget("kernel", kernel.budget_s) if kernel_deadline <= run.deadline \
            else Budget("submission", run.budget)
    return record(ended, timed_out_index, calls, first, stop, outcomes, spent)


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
