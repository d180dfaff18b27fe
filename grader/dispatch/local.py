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
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from grader.dispatch import Job, OnResult, Running
from grader.dispatch.faults import FAULT_WORDS, Fault, machine_fault
from grader.errors import GraderError
from grader.pipeline import (Built, Options, Ran, StageTimes, build_stage, execute_stage, not_graded, prepare_gold,
                             score_stage)
from grader.results import Result, Retry, Submission
from grader.runner.slots import HARNESSES_ENV, usable_cores
from grader.spec import Assignment
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


def visible_gpus() -> list[str]:
    """The GPUs this process may use: $CUDA_VISIBLE_DEVICES if set, else every GPU nvidia-smi lists."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        return [d.strip() for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    try:
        listing = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in listing.stdout.splitlines() if line.strip()] if listing.returncode == 0 else []


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
        slots = self.slots(assignment)
        options = harnesses_beside(options, len(slots))
        # A submission's kernels compile side by side, and just enough submissions at once to fill the
        # cores: the first one is ready to run after one compile's time, not one per kernel (with every
        # submission compiling a kernel at a time, the GPU idled for the first 35 s of a class).
        kernels = len(options.kernels) or len(assignment.kernels)
        build_options = dataclasses.replace(options, jobs=max(1, min(kernels, self.build_jobs)))
        building_at_once = max(1, -(-self.build_jobs // build_options.jobs))
        on_gpu = target_of(assignment).needs_gpu
        finished: queue.Queue[tuple[Job, Result] | None] = queue.Queue()
        ready: queue.Queue[tuple[Job, Built | Failed] | None] = queue.Queue()
        # One per GPU, shared by that GPU's slots; the C++ slots share the CPU's. A run again alone waits on it.
        gates = {device: SharedDevice() for device in slots}

        def build(job: Job) -> None:
            try:
                ready.put((job, build_stage(job.checkout, assignment, build_options)))
            except Exception as error:  # one submission's trouble never stops the class
                failed = Failed.of("build", error)
                if failed.fault is not None:  # built again by a run slot, alone
                    ready.put((job, failed))
                else:
                    finished.put((job, _error(assignment, options, job, failed.message)))

        def score(job: Job, ran: Ran, outputs: Path, gate: SharedDevice, retries: tuple[Retry, ...]) -> None:
            first: Failed | None = None
            try:
                try:
                    result = score_stage(ran, assignment, options)
                except Exception as error:
                    first = Failed.of("score", error)
                    if first.fault is None:
                        raise
                    with gate.alone():  # once the neighbour that took the machine's threads has ended
                        result = score_stage(ran, assignment, options)
                    retries += (first.retry(),)
                finished.put((job, dataclasses.replace(result, retries=list(retries))))
            except Exception as error:
                failed = Failed.of("score", error)
                if first is not None and first.fault is not None:
                    failed, retries = failed.alone(first), retries + (first.retry(),)
                finished.put((job, _error(assignment, options, job, failed.message, retries)))
            finally:
                shutil.rmtree(outputs, ignore_errors=True)

        gold_failed: list[str] = []

        def run_slot(device: str | None) -> None:
            pool: ProcessPoolExecutor | None = None  # this slot's own; a broken one is replaced, never shared
            gate = gates[device]

            def execute(job: Job, built: Built, outputs: Path, alone: bool = False) -> Ran | Failed:
                nonlocal pool
                # Alone, its kernels also run one at a time: a kernel that takes the whole GPU (all its memory)
                # then hurts no kernel of its own submission either, and the run says whose fault it is.
                run_options = dataclasses.replace(options, harnesses=1) if alone else options
                limit = assignment.submission_time_limit_s or sum(k.budget_s for k in built.kernels)
                with self._running_lock:
                    self._running[job.student] = (time.monotonic(), limit)
                try:
                    pool = pool or _run_pool(device)
                    # Shared with the other slots; a timing job (`grader time`) holds it alone.
                    with gpu_lock(exclusive=False, gpu=device) if device is not None else contextlib.nullcontext():
                        return pool.submit(execute_stage, built, assignment, run_options, outputs).result()
                except Exception as error:
                    failed = Failed.of("run", error)
                    if failed.fault is not None and pool is not None:  # its process may be gone or half started
                        pool.shutdown(wait=False, cancel_futures=True)
                        pool = None
                    return failed
                finally:
                    with self._running_lock:
                        self._running.pop(job.student, None)

            def done(job: Job, ran: Ran | Failed, outputs: Path, retries: tuple[Retry, ...] = ()) -> None:
                if isinstance(ran, Failed):
                    shutil.rmtree(outputs, ignore_errors=True)
                    finished.put((job, _error(assignment, options, job, ran.message, retries)))
                else:  # compare and score on the CPU: this slot's GPU takes the next submission now
                    scorers.submit(score, job, ran, outputs, gate, retries)

            # Runs to do again with the slot's GPU (or CPU) to itself: a crash beside a neighbour, to
            # confirm; a stage the machine failed, to retry. Not at once: waiting for the GPU to empty
            # would hold every slot of it idle (behind a neighbour's time-out, a minute), so they wait
            # until nothing is ready to run, or until there are too many.
            later: list[Confirm | Again] = []

            def run_alone() -> None:
                while later:
                    item = later.pop(0)
                    with gate.alone():
                        if isinstance(item, Confirm):
                            again = execute(item.job, kernels_again(item.built, item.first, item.crashed), item.outputs, alone=True)
                            done(item.job, with_kernels_again(item.first, again, item.crashed)
                                 if isinstance(again, Ran) else again.alone(), item.outputs)
                            continue
                        retries = (item.failed.retry(),)
                        built = item.built
                        if built is None:  # its build failed for the machine's reasons: built again, alone
                            try:
                                built = build_stage(item.job.checkout, assignment, build_options)
                            except Exception as error:
                                done(item.job, Failed.of("build", error).alone(item.failed), item.outputs, retries)
                                continue
                        _empty(item.outputs)  # what the failed attempt left
                        ran = execute(item.job, built, item.outputs, alone=True)
                        done(item.job, ran.alone(item.failed) if isinstance(ran, Failed) else ran, item.outputs,
                             retries)

            def take(job: Job, built: Built | Failed) -> None:
                if gold_failed:
                    finished.put((job, _error(assignment, options, job, gold_failed[0])))
                    return
                outputs = Path(tempfile.mkdtemp(prefix="kg-outputs-"))
                if isinstance(built, Failed):  # a build the machine failed
                    later.append(Again(job, None, built, outputs))
                    return
                with gate.shared() as turn:
                    ran = execute(job, built, outputs)
                if isinstance(ran, Failed) and ran.fault is not None:
                    later.append(Again(job, built, ran, outputs))  # not the student's: run again alone
                elif on_gpu and turn.beside_another and isinstance(ran, Ran) and (crashed := crashed_kernels(ran)):
                    # The neighbour may have caused them (the GPU's memory is shared): their runs alone count.
                    later.append(Confirm(job, built, ran, crashed, outputs))
                else:
                    done(job, ran, outputs)

            try:
                while True:
                    try:
                        item = ready.get(timeout=IDLE_S if later else None)
                    except queue.Empty:  # nothing ready to run: the GPU is free enough to run alone
                        run_alone()
                        continue
                    if item is None:
                        break
                    try:
                        take(*item)
                        if len(later) >= UNCONFIRMED_LIMIT:  # each holds its outputs on disk
                            run_alone()
                    except Exception as error:  # never lose a job, nor this slot: the next one still runs
                        finished.put((item[0], _error(assignment, options, item[0], Failed.of("run", error).message)))
            finally:
                for entry in later:  # the batch stopped before they could be run again
                    shutil.rmtree(entry.outputs, ignore_errors=True)
                if pool is not None:
                    pool.shutdown(wait=True, cancel_futures=True)

        # Every thread of the coordinator starts here, before any student code runs: one that cannot
        # start later (a neighbour's fork bomb took the machine's processes) cannot lose a submission.
        # Builds are the work ahead: the runs, which hold a GPU, get the cores first (see _build_thread_init).
        builders = Workers(building_at_once, "kg-build", _build_thread_init)
        # Apart from the builds, so that a run's outputs are compared as soon as it ends, not after
        # every build queued before it (each gpt2-m1 run leaves ~250 MB of outputs on disk until then).
        scorers = Workers(max(2, len(slots)), "kg-score")
        fed: list[int] = []  # how many jobs came, once the stream has ended
        feed_error: list[BaseException] = []

        def feed() -> None:  # builds need no gold: they compile while the reference runs
            count = 0
            try:
                for job in jobs:
                    count += 1
                    builders.submit(build, job)
            except BaseException as error:  # noqa: BLE001 -- re-raised in the grading thread
                feed_error.append(error)
            finally:
                fed.append(count)
                finished.put(None)

        feeder = threading.Thread(target=feed, daemon=True, name="kg-feed")
        runners = [threading.Thread(target=run_slot, args=(device,), daemon=True, name=f"kg-slot-{i}")
                   for i, device in enumerate(slots)]
        try:
            feeder.start()
            try:
                # Once, before any run: every score then reads the cache.
                if (failure := prepare_gold_apart(assignment, options)) is not None:
                    gold_failed.append(f"gold outputs could not be prepared: {failure}")
            except GraderError as error:
                gold_failed.append(f"gold outputs could not be prepared: {error}")
            for runner in runners:
                runner.start()
            received = 0
            while not fed or received < fed[0]:
                item = finished.get()
                if item is None:
                    continue
                on_result(*item)
                received += 1
            if feed_error:
                raise feed_error[0]
        finally:
            for runner in runners:
                ready.put(None)
            for runner in runners:
                if runner.is_alive():
                    runner.join()
            builders.shutdown()
            scorers.shutdown()
        return 0


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


@dataclasses.dataclass
class Turn:
    """One submission's run on a device: whether another submission ran on it at any time during it."""

    beside_another: bool = False


class SharedDevice:
    """The run slots of one GPU (or of the CPU, for C++ packs): each runs beside the others (`shared`), or
    with the device to itself (`alone`).

    A slot waiting to run alone goes first: new shared runs wait until it has run.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running: list[Turn] = []
        self._alone = False
        self._waiting_alone = 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[Turn]:
        turn = Turn()
        with self._changed:
            self._changed.wait_for(lambda: not self._alone and not self._waiting_alone)
            self._running.append(turn)
            if len(self._running) > 1:
                for running in self._running:
                    running.beside_another = True
        try:
            yield turn
        finally:
            with self._changed:
                self._running.remove(turn)
                self._changed.notify_all()

    @contextlib.contextmanager
    def alone(self) -> Iterator[Turn]:
        with self._changed:
            self._waiting_alone += 1
            self._changed.wait_for(lambda: not self._alone and not self._running)
            self._waiting_alone -= 1
            self._alone = True
        try:
            yield Turn()
        finally:
            with self._changed:
                self._alone = False
                self._changed.notify_all()


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


def _error(assignment: Assignment, options: Options, job: Job, message: str, retries: tuple[Retry, ...] = ()) -> Result:
    result = not_graded(assignment, options, SubmissionStatus.ERROR, message,
                        Submission(str(job.root), job.commit, job.commit_time, job.dirty))
    return dataclasses.replace(result, retries=list(retries))
