"""The local pool: builds in parallel on the CPU cores while a few submissions at a time run on each GPU.

Each run slot is a process of its own that sees one GPU (CUDA_VISIBLE_DEVICES) and runs one
submission at a time; a GPU has `run_slots` of them (default 4), so that one submission's harness
start-ups, copies and host-side checks overlap another's kernels. The CPU pool keeps compiling the
next submissions (at a lower CPU priority) and comparing the last ones meanwhile, so compiles,
compares and GPU work overlap.

Sharing a GPU is safe for correctness runs (no assignment times its runs for the score): each harness
has its own CUDA context, so a neighbour's sticky error, crash or time-out stays its own. What
submissions on one GPU do share is its memory, which no sandbox bounds per process: a neighbour
that takes it all can make a kernel crash that would have passed alone. So the kernels that
crashed while another submission ran on their GPU are run again with the GPU to themselves, and
those runs are the ones kept (the first run's time stays in the result, as `shared_run`). A slot
runs them once nothing is ready for it to run, not at once: the GPU to itself means waiting for its
other slots' submissions to end, and they would wait too.
Not covered: a sanitizer finding that such a neighbour caused (a failed allocation under memcheck).

One `grade` call is a `ClassRun` (its queues, workers and gates); each run slot a `RunSlot` (its
process, and the runs it holds back to do again alone); a GPU's slots share a `grader.gate.Gate`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import queue
import shutil
import tempfile
import threading
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from grader.device import visible_gpus
from grader.dispatch import Job, OnResult, Running
from grader.dispatch.faults import FAULT_WORDS, Fault, machine_fault
from grader.errors import GraderError
from grader.gate import Gate
from grader.options import Options
from grader.pipeline import Built, Ran, StageTimes, build_stage, execute_stage, not_graded, prepare_gold, score_stage
from grader.results import Result, Retry, Submission
from grader.runner.limits import submission_budget
from grader.runner.slots import HARNESSES_ENV, usable_cores
from grader.assignment import Assignment
from grader.status import CallStatus, SubmissionStatus
from grader.targets import target_of
from grader.timing.lock import gpu_lock

# Submissions at once on one GPU, by default. A class of 24 gpt2-m1 submissions on an H200 with 16
# cores: 582/hour with 2, 689 with 4 (benchmarks/RESULTS.md, "A class on one GPU").
GPU_RUN_SLOTS = 4
SHARED_RUN = "shared_run"  # the stage of a result whose first run (beside a neighbour) was run again alone
BUILD_NICE_INCREMENT = 10  # builds' CPU priority below the runs'
IDLE_S = 0.5  # a run slot with nothing ready for this long confirms its crashes with the GPU to itself
UNCONFIRMED_LIMIT = 4  # crashes a run slot holds for confirming before it confirms them anyway


class LocalExecutor:
    name = "local"
    streams = True

    def __init__(self, build_jobs: int | None = None, gpus: list[str] | None = None, run_slots: int | None = None) -> None:
        self.build_jobs = build_jobs or os.cpu_count() or 1
        self.gpus = gpus
        self.run_slots = run_slots
        self._running: dict[str, tuple[float, float]] = {}  # student -> (when its run began, its time limit)
        self._running_lock = threading.Lock()

    def running(self) -> list[Running]:
        now = time.monotonic()
        with self._running_lock:
            return [(student, now - began, limit) for student, (began, limit) in self._running.items()]

    def slots(self, assignment: Assignment) -> list[str | None]:
        """One entry per run slot: the GPU it sees (CUDA: `run_slots` per GPU), or None (C++ runs on the CPU).

        A GPU's slots are spread over the list (0, 1, 0, 1), so that a class smaller than the slots
        still gets every GPU.
        """
        if target_of(assignment).needs_gpu:
            gpus = self.gpus if self.gpus is not None else visible_gpus()
            devices: list[str | None] = list(gpus) if gpus else [None]
            per_gpu = self.run_slots or default_gpu_run_slots(len(devices))
            return [device for _ in range(per_gpu) for device in devices]
        return [None] * (self.run_slots or default_run_slots())

    def grade(self, jobs: Iterable[Job], assignment: Assignment, options: Options, on_result: OnResult) -> int:
        """Grade the jobs as they come: `jobs` may be a stream (a batch's fetches), each built the moment it arrives."""
        if isinstance(jobs, (list, tuple)) and not jobs:
            return 0
        return ClassRun(self, jobs, assignment, options, on_result).run()

    @contextlib.contextmanager
    def _on_slot(self, student: str, limit: float) -> Iterator[None]:
        """A submission on a run slot, for `running` while it runs there."""
        with self._running_lock:
            self._running[student] = (time.monotonic(), limit)
        try:
            yield
        finally:
            with self._running_lock:
                self._running.pop(student, None)


class ClassRun:
    """One `LocalExecutor.grade` call: its jobs built on the CPU cores while the run slots run them.

    The feeder hands each job to the builders as it comes; a build goes to `ready`, where the run
    slots (`RunSlot`, one thread each) take it; a run's outputs are compared and scored by the
    scorers; every result goes to `finished`, which the grading thread hands to `on_result`.
    """

    def __init__(self, executor: LocalExecutor, jobs: Iterable[Job], assignment: Assignment, options: Options,
                 on_result: OnResult) -> None:
        self.executor = executor
        self.jobs = jobs
        self.assignment = assignment
        self.on_result = on_result
        self.devices = executor.slots(assignment)  # one per run slot
        self.options = harnesses_beside(options, len(self.devices))
        # A submission's kernels compile side by side, and just enough submissions at once to fill the
        # cores: the first one is ready to run after one compile's time, not one per kernel (with every
        # submission compiling a kernel at a time, the GPU idled for the first 35 s of a class).
        kernels = len(self.options.kernels) or len(assignment.kernels)
        self.build_options = dataclasses.replace(self.options, jobs=max(1, min(kernels, executor.build_jobs)))
        self.on_gpu = target_of(assignment).needs_gpu
        self.ready: queue.Queue[tuple[Job, Built | Failed] | None] = queue.Queue()  # built, for a run slot
        self.finished: queue.Queue[tuple[Job, Result] | None] = queue.Queue()  # results; None: the feed ended
        # One per GPU, shared by that GPU's slots; the C++ slots share the CPU's. A run again alone waits on it.
        self.gates = {device: Gate() for device in self.devices}
        self.gold_failed: str | None = None  # why the gold could not be prepared: every result says so
        self.fed: int | None = None  # how many jobs came, once the stream has ended
        self.feed_error: BaseException | None = None  # what ended the stream early, re-raised in the grading thread
        # Every thread of the coordinator starts here, before any student code runs: one that cannot
        # start later (a neighbour's fork bomb took the machine's processes) cannot lose a submission.
        # Builds are the work ahead: the runs, which hold a GPU, get the cores first (see _build_thread_init).
        self.builders = Workers(max(1, -(-executor.build_jobs // self.build_options.jobs)), "kg-build",
                                _build_thread_init)
        # Apart from the builds, so that a run's outputs are compared as soon as it ends, not after
        # every build queued before it (each gpt2-m1 run leaves ~250 MB of outputs on disk until then).
        self.scorers = Workers(max(2, len(self.devices)), "kg-score")

    def run(self) -> int:
        feeder = threading.Thread(target=self.feed, daemon=True, name="kg-feed")
        runners = [threading.Thread(target=RunSlot(self, device).serve, daemon=True, name=f"kg-slot-{i}")
                   for i, device in enumerate(self.devices)]
        try:
            feeder.start()
            try:
                # Once, before any run: every score then reads the cache.
                if (failure := prepare_gold_apart(self.assignment, self.options)) is not None:
                    self.gold_failed = f"gold outputs could not be prepared: {failure}"
            except GraderError as error:
                self.gold_failed = f"gold outputs could not be prepared: {error}"
            for runner in runners:
                runner.start()
            received = 0
            while self.fed is None or received < self.fed:
                item = self.finished.get()
                if item is None:
                    continue
                self.on_result(*item)
                received += 1
            if self.feed_error is not None:
                raise self.feed_error
        finally:
            for runner in runners:
                self.ready.put(None)
            for runner in runners:
                if runner.is_alive():
                    runner.join()
            self.builders.shutdown()
            self.scorers.shutdown()
        return 0

    def feed(self) -> None:  # builds need no gold: they compile while the reference runs
        count = 0
        try:
            for job in self.jobs:
                count += 1
                self.builders.submit(self.build, job)
        except BaseException as error:  # noqa: BLE001 -- re-raised in the grading thread
            self.feed_error = error
        finally:
            self.fed = count
            self.finished.put(None)

    def build(self, job: Job) -> None:
        try:
            self.ready.put((job, build_stage(job.checkout, self.assignment, self.build_options)))
        except Exception as error:  # one submission's trouble never stops the class
            failed = Failed.of("build", error)
            if failed.fault is not None:  # built again by a run slot, alone
                self.ready.put((job, failed))
            else:
                self.error(job, failed.message)

    def score(self, job: Job, ran: Ran, outputs: Path, gate: Gate, retries: tuple[Retry, ...]) -> None:
        first: Failed | None = None
        try:
            try:
                result = score_stage(ran, self.assignment, self.options)
            except Exception as error:
                first = Failed.of("score", error)
                if first.fault is None:
                    raise
                with gate.hold(alone=True):  # once the neighbour that took the machine's threads has ended
                    result = score_stage(ran, self.assignment, self.options)
                retries += (first.retry(),)
            self.finished.put((job, dataclasses.replace(result, retries=list(retries))))
        except Exception as error:
            failed = Failed.of("score", error)
            if first is not None and first.fault is not None:
                failed, retries = failed.alone(first), retries + (first.retry(),)
            self.error(job, failed.message, retries)
        finally:
            shutil.rmtree(outputs, ignore_errors=True)

    def error(self, job: Job, message: str, retries: tuple[Retry, ...] = ()) -> None:
        """The job's result: the grader failed on it (`message` says how)."""
        result = not_graded(self.assignment, self.options, SubmissionStatus.ERROR, message,
                            Submission(str(job.root), job.commit, job.commit_time, job.dirty))
        self.finished.put((job, dataclasses.replace(result, retries=list(retries))))


class RunSlot:
    """One run slot of a ClassRun: a process of its own that sees `device`, running one submission at a time.

    It holds back the runs to do again with its device to itself (`later`): a crash beside a
    neighbour, to confirm; a stage the machine failed, to retry. Not at once: waiting for the GPU
    to empty would hold every slot of it idle (behind a neighbour's time-out, a minute), so they
    wait until nothing is ready to run, or until there are too many.
    """

    def __init__(self, run: ClassRun, device: str | None) -> None:
        self.run = run
        self.device = device
        self.gate = run.gates[device]
        self.pool: ProcessPoolExecutor | None = None  # this slot's own; a broken one is replaced, never shared
        self.later: list[Confirm | Again] = []

    def serve(self) -> None:
        """Take built jobs until told to stop (None), running the held-back ones whenever nothing is ready."""
        try:
            while True:
                try:
                    item = self.run.ready.get(timeout=IDLE_S if self.later else None)
                except queue.Empty:  # nothing ready to run: the GPU is free enough to run alone
                    self.run_alone()
                    continue
                if item is None:
                    break
                try:
                    self.take(*item)
                    if len(self.later) >= UNCONFIRMED_LIMIT:  # each holds its outputs on disk
                        self.run_alone()
                except Exception as error:  # never lose a job, nor this slot: the next one still runs
                    self.run.error(item[0], Failed.of("run", error).message)
        finally:
            for entry in self.later:  # the batch stopped before they could be run again
                shutil.rmtree(entry.outputs, ignore_errors=True)
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)

    def take(self, job: Job, built: Built | Failed) -> None:
        if self.run.gold_failed is not None:
            self.run.error(job, self.run.gold_failed)
            return
        outputs = Path(tempfile.mkdtemp(prefix="kg-outputs-"))
        if isinstance(built, Failed):  # a build the machine failed
            self.later.append(Again(job, None, built, outputs))
            return
        with self.gate.hold() as held:
            ran = self.execute(job, built, outputs)
        if isinstance(ran, Failed) and ran.fault is not None:
            self.later.append(Again(job, built, ran, outputs))  # not the student's: run again alone
        elif self.run.on_gpu and held.shared and isinstance(ran, Ran) and (crashed := crashed_kernels(ran)):
            # The neighbour may have caused them (the GPU's memory is shared): their runs alone count.
            self.later.append(Confirm(job, built, ran, crashed, outputs))
        else:
            self.done(job, ran, outputs)

    def execute(self, job: Job, built: Built, outputs: Path, alone: bool = False) -> Ran | Failed:
        run = self.run
        # Alone, its kernels also run one at a time: a kernel that takes the whole GPU (all its memory) then
        # hurts no kernel of its own submission either, and the run says whose fault it is.
        options = dataclasses.replace(run.options, harnesses=1) if alone else run.options
        with run.executor._on_slot(job.student, submission_budget(run.assignment, built.kernels)):
            try:
                self.pool = self.pool or _run_pool(self.device)
                # Shared with the other slots; a timing job (`grader time`) holds it alone.
                with gpu_lock(exclusive=False, gpu=self.device) if self.device is not None else contextlib.nullcontext():
                    return self.pool.submit(execute_stage, built, run.assignment, options, outputs).result()
            except Exception as error:
                failed = Failed.of("run", error)
                if failed.fault is not None and self.pool is not None:  # its process may be gone or half started
                    self.pool.shutdown(wait=False, cancel_futures=True)
                    self.pool = None
                return failed

    def done(self, job: Job, ran: Ran | Failed, outputs: Path, retries: tuple[Retry, ...] = ()) -> None:
        if isinstance(ran, Failed):
            shutil.rmtree(outputs, ignore_errors=True)
            self.run.error(job, ran.message, retries)
        else:  # compare and score on the CPU: this slot's GPU takes the next submission now
            self.run.scorers.submit(self.run.score, job, ran, outputs, self.gate, retries)

    def run_alone(self) -> None:
        """Run the held-back runs again, each with the slot's device to itself."""
        while self.later:
            item = self.later.pop(0)
            with self.gate.hold(alone=True):
                if isinstance(item, Confirm):
                    again = self.execute(item.job, kernels_again(item.built, item.first, item.crashed), item.outputs,
                                     alone=True)
                    self.done(item.job, with_kernels_again(item.first, again, item.crashed)
                              if isinstance(again, Ran) else again.alone(), item.outputs)
                    continue
                retries = (item.failed.retry(),)
                built = item.built
                if built is None:  # its build failed for the machine's reasons: built again, alone
                    try:
                        built = build_stage(item.job.checkout, self.run.assignment, self.run.build_options)
                    except Exception as error:
                        self.done(item.job, Failed.of("build", error).alone(item.failed), item.outputs, retries)
                        continue
                _empty(item.outputs)  # what the failed attempt left
                ran = self.execute(item.job, built, item.outputs, alone=True)
                self.done(item.job, ran.alone(item.failed) if isinstance(ran, Failed) else ran, item.outputs,
                          retries)


class Workers:
    """`count` threads started at once, taking work from one queue until shut down.

    Unlike a ThreadPoolExecutor, which starts a thread when work comes, none starts later: under a
    neighbour's fork bomb a thread that cannot start would leave its work queued for nobody.
    """

    def __init__(self, count: int, name: str, initializer: Callable[[], None] | None = None) -> None:
        self._work: queue.Queue[tuple[Callable[..., None], tuple] | None] = queue.Queue()
        self._initializer = initializer
        self._threads = [threading.Thread(target=self._serve, daemon=True, name=f"{name}-{i}") for i in range(count)]
        for thread in self._threads:
            thread.start()

    def submit(self, work: Callable[..., None], *arguments: object) -> None:
        self._work.put((work, arguments))

    def shutdown(self) -> None:
        """Stop once the work queued so far is done."""
        for _ in self._threads:
            self._work.put(None)
        for thread in self._threads:
            thread.join()

    def _serve(self) -> None:
        if self._initializer is not None:
            self._initializer()
        while (item := self._work.get()) is not None:
            work, arguments = item
            try:
                work(*arguments)
            except Exception:  # the work says its own failures (an error result); the thread goes on
                traceback.print_exc()


@dataclasses.dataclass(frozen=True)
class Failed:
    """A stage of one submission's grade that raised: the machine's fault (run again alone), or the grader's."""

    stage: str  # "build", "run" or "score"
    fault: Fault | None  # None: a bug in the grader (or, for a GraderError, a mistake the instructor can fix)
    message: str  # the result's message, should it be recorded as it is

    @classmethod
    def of(cls, stage: str, error: Exception) -> Failed:
        fault = machine_fault(error)
        if fault is not None:
            return cls(stage, fault, _machine_failed(fault, alone=False))
        return cls(stage, None, _describe(error))

    def retry(self) -> Retry:
        assert self.fault is not None
        return Retry(self.stage, self.fault.kind, self.fault.detail)

    def alone(self, first: Failed | None = None) -> Failed:
        """This failure, of an attempt made alone (after `first`): recorded as it is, in words saying so."""
        if self.fault is None:
            return self
        return dataclasses.replace(self, message=_machine_failed(self.fault, alone=True,
                                                                 first=first.fault if first else None))


@dataclasses.dataclass(frozen=True)
class Confirm:
    """Kernels that crashed beside another submission on the GPU, to run again with the GPU to themselves."""

    job: Job
    built: Built
    first: Ran
    crashed: set[str]
    outputs: Path


@dataclasses.dataclass(frozen=True)
class Again:
    """A submission whose build or run the machine failed, to grade again alone (`built` None: build it too)."""

    job: Job
    built: Built | None
    failed: Failed
    outputs: Path


def crashed_kernels(ran: Ran) -> set[str]:
    """The kernels with a crashed call: what a neighbour that took the GPU's memory could have caused."""
    return {kernel for (kernel, _), o in ran.outcomes.items() if o.status == CallStatus.CRASHED}


def kernels_again(built: Built, ran: Ran, kernels: set[str]) -> Built:
    """The built submission cut down to `kernels`, its stage times followed by the first run as one stage.

    The first run's time stays in the result (`shared_run`), since it was spent; the run again follows it.
    """
    before = built.stages
    stages = StageTimes(before.stages + ((SHARED_RUN, round(ran.stages.total - before.total, 3)),), before.parts,
                        ran.stages.total)
    return dataclasses.replace(built, kernels=tuple(k for k in built.kernels if k.name in kernels),
                               selection=[s for s in built.selection if s[0].name in kernels], stages=stages,
                               checks=tuple(k for k in built.checks if k.name in kernels))


def with_kernels_again(first: Ran, again: Ran, kernels: set[str]) -> Ran:
    """The first run with `kernels`' outcomes, sanitizer reports and logs taken from the run again alone."""
    def kept(by_kernel: dict) -> dict:
        return {key: value for key, value in by_kernel.items() if key not in kernels}

    outcomes = {key: o for key, o in first.outcomes.items() if key[0] not in kernels}
    return dataclasses.replace(again, built=first.built, outcomes={**outcomes, **again.outcomes},
                               sanitizer={**kept(first.sanitizer), **again.sanitizer},
                               logs={**kept(first.logs), **again.logs},
                               harnesses_at_once=max(first.harnesses_at_once, again.harnesses_at_once))


def default_gpu_run_slots(gpus: int) -> int:
    """Submissions at once per GPU: GPU_RUN_SLOTS, fewer where there are fewer cores than slots.

    Each slot's submission runs its own harnesses (Python, NumPy, a CUDA context each) on the cores.
    """
    return max(1, min(GPU_RUN_SLOTS, usable_cores() // max(1, gpus)))


def harnesses_beside(options: Options, slots: int) -> Options:
    """The options with each slot's share of the cores for its submission's harnesses, where none was asked for.

    Every slot runs its submission's kernels side by side (`Options.harnesses`): `slots` of them
    at once should not ask for more harnesses than there are cores (2 slots on 16 cores: 8 each).
    An explicit `--harnesses` or $KERNEL_GRADER_HARNESSES stands as given.
    """
    if options.harnesses is not None or os.environ.get(HARNESSES_ENV, "").strip():
        return options
    return dataclasses.replace(options, harnesses=max(1, usable_cores() // max(1, slots)))


def default_run_slots() -> int:
    """C++ harness runs at once: half the cores, and at least two where there are two cores.

    Each slot is a process of its own running one harness at a time, so slots never share state;
    on two cores a second slot runs while the first waits on its harness's start-up and I/O.
    """
    cores = os.cpu_count() or 1
    return max(min(2, cores), cores // 2)


def _build_thread_init() -> None:
    """Lower this build thread's CPU priority, and so its compilers' (a child inherits its thread's).

    The run slots are what a batch waits on: a harness starting while every core compiles would
    hold its GPU idle. The builds still use every core the runs leave.
    """
    try:
        thread = threading.get_native_id()  # on Linux a priority is a thread's own
        now = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(19, now + BUILD_NICE_INCREMENT))
    except (OSError, AttributeError):
        pass


def prepare_gold_apart(assignment: Assignment, options: Options) -> str | None:
    """`prepare_gold` in a process of its own; why it failed, or None.

    Not in the grader's process: while NumPy's BLAS threads compute there, each fork of a build or a harness
    waits on them (OpenBLAS's fork handler), and on the H200 a cold class stalled behind its gold with not one
    submission graded in 480 s (benchmarks/spawn_under_load.py). Spawned, not forked, for the same reason.
    """
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(_prepare_gold_in_words, assignment, options).result()
        except BrokenProcessPool:
            return "the process computing them died (out of memory?)"



def _prepare_gold_in_words(assignment: Assignment, options: Options) -> str | None:
    try:
        prepare_gold(assignment, options)
    except GraderError as error:  # as words: an exception with its own arguments may not unpickle
        return str(error)
    return None


def _run_pool(device: str | None) -> ProcessPoolExecutor:
    # spawn, not fork: the coordinator has threads, and a forked copy of a held lock never unlocks.
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_run_slot_init, initargs=(device,))


def _run_slot_init(device: str | None) -> None:
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
    try:  # die with the coordinator (kill -9 included) rather than linger as an orphan
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _describe(error: Exception) -> str:
    """A failure that is not the machine's: an instructor's mistake in its own words, else the grader's bug, said so."""
    if isinstance(error, GraderError):
        return str(error)
    return f"the grader failed on this submission (a bug in the grader, not in your code): " \
           f"{type(error).__name__}: {error}\n" + "".join(traceback.format_exception(error)[-3:])


def _machine_failed(fault: Fault, alone: bool, first: Fault | None = None) -> str:
    """The words of a result the machine failed: what it could not do, and that it was tried alone."""
    if not alone:
        return f"the grader failed on this submission (not in your code): the grading machine could not " \
               f"{FAULT_WORDS[fault.kind]} beside other submissions: {fault.detail}"
    before = f" (beside other submissions it could not {FAULT_WORDS[first.kind]}: {first.detail})" if first else ""
    return f"the grader failed on this submission (a bug in the grader or its machine, not in your code): " \
           f"graded again with nothing beside it, the machine could not {FAULT_WORDS[fault.kind]}: " \
           f"{fault.detail}{before}"


def _empty(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)

