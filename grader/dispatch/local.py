"""The local pool: builds in parallel on the CPU cores while runs go one at a time per GPU.

Each run slot is a process of its own that sees one GPU (CUDA_VISIBLE_DEVICES), so a stuck or
crashed harness on one GPU never touches another; the CPU pool keeps compiling the next
submissions and comparing the last ones meanwhile, so compiles, compares and GPU work overlap.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import traceback
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from collections.abc import Iterable
from pathlib import Path

from grader.dispatch import Job, OnResult
from grader.errors import GraderError
from grader.pipeline import Built, Options, Ran, build_stage, execute_stage, not_graded, prepare_gold, score_stage
from grader.results import Result, Submission
from grader.spec import Assignment
from grader.status import SubmissionStatus
from grader.targets import target_of


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

    def slots(self, assignment: Assignment) -> list[str | None]:
        """One entry per run slot: the GPU it sees (CUDA), or None (C++ runs on the CPU)."""
        if target_of(assignment).needs_gpu:
            gpus = self.gpus if self.gpus is not None else visible_gpus()
            return list(gpus) if gpus else [None]
        return [None] * (self.run_slots or default_run_slots())

    def grade(self, jobs: Iterable[Job], assignment: Assignment, options: Options, on_result: OnResult) -> int:
        """Grade the jobs as they come: `jobs` may be a stream (a batch's fetches), each built the moment it arrives."""
        if isinstance(jobs, (list, tuple)) and not jobs:
            return 0
        # Each submission compiles its kernels one after another; the pool runs many submissions at once.
        build_options = dataclasses.replace(options, jobs=1)
        finished: queue.Queue[tuple[Job, Result]] = queue.Queue()
        ready: queue.Queue[tuple[Job, Built] | None] = queue.Queue()
        slots = self.slots(assignment)

        def build(job: Job) -> None:
            try:
                ready.put((job, build_stage(job.checkout, assignment, build_options)))
            except Exception as error:  # one submission's trouble never stops the class
                finished.put((job, _error(assignment, options, job, _describe(error))))

        def score(job: Job, ran: Ran, outputs: Path) -> None:
            try:
                finished.put((job, score_stage(ran, assignment, options)))
            except Exception as error:
                finished.put((job, _error(assignment, options, job, _describe(error))))
            finally:
                shutil.rmtree(outputs, ignore_errors=True)

        gold_failed: list[str] = []

        def run_slot(device: str | None) -> None:
            pool = _run_pool(device)
            try:
                while (item := ready.get()) is not None:
                    job, built = item
                    if gold_failed:
                        finished.put((job, _error(assignment, options, job, gold_failed[0])))
                        continue
                    outputs = Path(tempfile.mkdtemp(prefix="kg-outputs-"))
                    try:
                        ran = pool.submit(execute_stage, built, assignment, options, outputs).result()
                    except BrokenProcessPool:
                        pool = _run_pool(device)
                        ran = _error(assignment, options, job, "the grading process for this submission died")
                    except Exception as error:
                        ran = _error(assignment, options, job, _describe(error))
                    if isinstance(ran, Result):
                        shutil.rmtree(outputs, ignore_errors=True)
                        finished.put((job, ran))
                    else:  # compare and score on the CPU pool: this slot's GPU takes the next submission now
                        builders.submit(score, job, ran, outputs)
            finally:
                pool.shutdown(wait=True, cancel_futures=True)

        builders = ThreadPoolExecutor(max_workers=self.build_jobs, thread_name_prefix="kg-build")
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
        feeder.start()
        try:
            prepare_gold(assignment, options)  # once, before any run: every score then reads the cache
        except GraderError as error:
            gold_failed.append(f"gold outputs could not be prepared: {error}")
        runners = [threading.Thread(target=run_slot, args=(device,), daemon=True) for device in slots]
        for runner in runners:
            runner.start()
        try:
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
            for _ in runners:
                ready.put(None)
            for runner in runners:
                runner.join()
            builders.shutdown(wait=True, cancel_futures=True)
        return 0


def default_run_slots() -> int:
    """C++ harness runs at once: half the cores, and at least two where there are two cores.

    Each slot is a process of its own running one harness at a time, so slots never share state;
    on two cores a second slot runs while the first waits on its harness's start-up and I/O.
    """
    cores = os.cpu_count() or 1
    return max(min(2, cores), cores // 2)


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
    if isinstance(error, GraderError):
        return str(error)
    return f"the grader failed on this submission: {type(error).__name__}: {error}\n" + \
        "".join(traceback.format_exception(error)[-3:])


def _error(assignment: Assignment, options: Options, job: Job, message: str) -> Result:
    return not_graded(assignment, options, SubmissionStatus.ERROR, message,
                      Submission(str(job.root), job.commit, job.commit_time, job.dirty))
