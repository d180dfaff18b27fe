"""The watchdog: one harness process for one kernel's calls, started in the sandbox, watched for its
time limits and a flooded progress file, and read back when it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grader
from grader.boundary.protocol import Event, Ready, index_of, kind_of, new_event, parse_event
from grader.runner.kernel_cache import KernelCache
from grader.runner.plan import Call
from grader.sandbox import LimitKind, Limits, Mounts, Process, Sandbox
from grader.sandbox.namespaces import import_paths
from grader.targets import Target

HARNESS_START_LIMIT_S = 120.0  # Python, NumPy and a CUDA context, before any student code runs
POLL_INTERVAL_S = 0.02
LOG_TAIL = 2000  # characters of the harness's stdout/stderr kept in a message
PROGRESS_LIMIT = 8 << 20  # bytes; the harness writes a few hundred per call
BUDGET_SPENT = "budget-spent"  # the kernel's or the submission's whole time budget ran out
LIMIT_KILL_GRACE_S = 5.0  # how long a run its sandbox is ending for a bound it reached may take to die
SANDBOX_USER = "kg-student"  # the name a harness is told it runs as (its uid has no passwd entry)
# Told when a call starts (True) and when it ends (False) in its harness: a live line's hook (`grader check`).
CaseWatcher = Callable[[Call, bool], None]
# The folder that holds the grader package: the harness imports it from there.
GRADER_ROOT = Path(grader.__file__).resolve().parent.parent


@dataclass(frozen=True)
class HarnessExit:
    """How one harness ended: what it wrote, why it stopped, and the limit or signal that stopped it."""

    events: tuple[dict[str, Any], ...]
    reason: str  # "exited with status 1", "was killed by signal SIGSEGV: it ...", "timeout", BUDGET_SPENT, ...
    timed_out_index: int | None  # the call in flight when its time limit or a budget ran out
    limit: LimitKind | None  # which sandbox limit the harness reached (the words: limit_message)
    limit_message: str
    signal: str | None  # the signal that ended it of itself ("SIGSEGV"); not the watchdog's kill
    log_tail: str  # the end of its stderr and stdout
    # From launch to its first call's start (Python, NumPy, the device): the machine's time, which no budget counts.
    start_seconds: float = 0.0


class Session:
    """One harness process for one kernel's calls: started, watched for limits, and read back."""

    def __init__(self, workdir: Path, outbox: Path, number: int, on_case: CaseWatcher | None = None) -> None:
        self.progress = outbox / f".progress-{number}.jsonl"
        self.stdout = workdir / f"stdout-{number}.txt"
        self.stderr = workdir / f"stderr-{number}.txt"
        self.cwd = outbox / "home"
        self.cwd.mkdir()
        self.limit_message = ""
        self.limit: LimitKind | None = None
        self.signal: str | None = None
        self.start_seconds = 0.0  # launch to the first call's start (HarnessExit.start_seconds)
        self.applied: tuple[str, ...] = ()  # the limits the sandbox really applied to this harness
        self.on_case = on_case
        self.running: Call | None = None  # the call in flight, as its events say

    def run(self, plan_file: Path, start: int, stop: int, calls: list[Call], sandbox: Sandbox, limits: Limits,
            target: Target, deadline: float, wrapper: tuple[str, ...] = (), module: str = "grader.boundary.harness",
            options: tuple[str, ...] = (), harness_env: dict[str, str] | None = None,
            bytecode: Path | None = None, preload: Path | None = None,
            kernel_cache: KernelCache | None = None) -> HarnessExit:
        """`module`: the harness's (the timing harness: "grader.boundary.timing_harness", with its `options`
        after the plan's four arguments); `harness_env`: set for it (default: the target's, for correctness runs);
        `bytecode`: a folder of bytecode for its imports, read-only (`grader.runner.bytecode`); `preload`: a shared
        library the harness starts with (LD_PRELOAD, read-only: the timing's counting allocator); `kernel_cache`: the
        submission's compiled kernels (CuPy's), copied into the harness's home and what it compiled taken back."""
        self.progress.touch()
        # USER and LOGNAME: the sandbox's uid has no passwd entry, and getpass.getuser() (torch's compile caches)
        # fails without them, leaving torch half imported for every later call.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.cwd), "PYTHONDONTWRITEBYTECODE": "1",
               "USER": SANDBOX_USER, "LOGNAME": SANDBOX_USER,
               # A package the assignment names that the grader finds through its PYTHONPATH is found there too.
               "PYTHONPATH": os.pathsep.join(dict.fromkeys([str(GRADER_ROOT), *import_paths(target.python_packages)])),
               # The harness needs no BLAS threads: a pool per core would exhaust a small process limit.
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        for name in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_PATH"):
            if name in os.environ:
                env[name] = os.environ[name]
        env.update(target.harness_env if harness_env is None else harness_env)
        if bytecode is not None:
            env["PYTHONPYCACHEPREFIX"] = str(bytecode)
        if preload is not None:
            env["LD_PRELOAD"] = str(preload)
        if kernel_cache is not None:
            kernel_cache.seed(self.cwd)
            env.update(kernel_cache.env(self.cwd))
        command = [*wrapper, sys.executable, "-m", module, str(plan_file), str(self.progress), str(start), str(stop),
                   *options]
        own = calls[start:stop]
        # Only this kernel's library and inputs are visible: not the gold, not other kernels' or students' files.
        read_only = tuple(dict.fromkeys([plan_file, *(c.library for c in own), *(c.inputs_dir for c in own),
                                         *([bytecode] if bytecode is not None else []),
                                         *([preload] if preload is not None else [])]))
        outbox = self.cwd.parent
        mounts = Mounts(read_only=read_only, writable=outbox, gpu=target.needs_gpu,
                        python_packages=target.python_packages)
        process = sandbox.start(command, cwd=self.cwd, mounts=mounts, limits=limits, stdout=self.stdout,
                                stderr=self.stderr, env=env)
        self.applied = tuple(getattr(process, "applied", ()))
        try:
            events, reason, timed_out_index = self._watch(process, calls, deadline)
        finally:
            # Also after a normal exit: whatever the code left running in the background goes now.
            process.kill()
            self._ended()  # a crash or a time-out ends its call without an end event
            if kernel_cache is not None:
                kernel_cache.take_back(self.cwd)
        # The network as the harness saw it from its own namespace, before any student code ran.
        ready = next((e for e in events if kind_of(e) == Event.DEVICE), None)
        network = Ready.read(ready).network if ready is not None else None
        if network is not None:
            self.applied = (*self.applied, network.words())
        return HarnessExit(tuple(events), reason, timed_out_index, self.limit, self.limit_message, self.signal,
                           self.log_tail(), self.start_seconds)

    def _watch(self, process: Process, calls: list[Call], deadline: float) -> tuple[list[dict], str, int | None]:
        """`deadline` bounds the student's time: the harness's start, until its first call starts, is added to it
        (on a loaded machine Python alone may take seconds; HARNESS_START_LIMIT_S bounds that)."""
        launched = time.monotonic()
        in_flight: int | None = None
        in_flight_since = launched
        started: float | None = None  # its first call's start
        events: list[dict] = []
        offset = 0
        # The output folder's bytes and files are bounded by the sandbox's watchdog: limit_hit() says so.
        while True:
            returncode = process.poll()
            new, offset = read_events(self.progress, offset)
            for event in new:
                events.append(event)
                index = index_of(event)
                if kind_of(event) == Event.START and isinstance(index, int) and 0 <= index < len(calls):
                    in_flight, in_flight_since = index, time.monotonic()
                    if started is None:
                        started = in_flight_since
                        self.start_seconds = started - launched
                    self._started(calls[in_flight])
                elif kind_of(event) == Event.END:
                    in_flight = None
                    self._ended()
            if returncode is not None:
                break
            if offset > PROGRESS_LIMIT or _size(self.progress) > PROGRESS_LIMIT:
                # Voids the kernel: no harness writes this event, so the state machine calls it tampering.
                events.append(new_event(Event.OVERSIZED, bytes=_size(self.progress)))
                return self._stop(process, events, offset, "was stopped: its progress file was flooded", None)
            now = time.monotonic()
            due = deadline + ((started if started is not None else now) - launched)
            over = now > due or (in_flight is not None
                                      and now - in_flight_since > calls[in_flight].kernel.time_limit_s)
            if over and self._read_limit(process):
                # The sandbox's watchdog saw a bound reached first and is ending the run; on a loaded machine a
                # large process takes a while to die. That bound ended it, not the time: its end is awaited.
                try:
                    returncode = process.wait(LIMIT_KILL_GRACE_S)
                    break
                except subprocess.TimeoutExpired:
                    pass  # still running: stopped below, its words naming the bound it had reached
            if in_flight is not None and now - in_flight_since > calls[in_flight].kernel.time_limit_s:
                return self._stop(process, events, offset, "timeout", in_flight)
            if now > due:
                return self._stop(process, events, offset, BUDGET_SPENT, in_flight)
            if in_flight is None and not any(kind_of(e) == Event.START for e in events) \
                    and now - launched > HARNESS_START_LIMIT_S:
                return self._stop(process, events, offset, f"the harness did not start within {HARNESS_START_LIMIT_S:.0f} s",
                                  None)
            time.sleep(POLL_INTERVAL_S)
        limit = self._read_limit(process)
        reason = _describe_exit(returncode)
        self.signal = _signal_name(returncode)
        return events + read_events(self.progress, offset)[0], (f"{reason}: it {limit}" if limit else reason), None

    def _read_limit(self, process: Process) -> str | None:
        """The limit the sandbox saw the run reach, kept as words and kind (before `kill`, which forgets it)."""
        words = process.limit_hit()
        if words:
            self.limit_message, self.limit = words, process.limit_kind()
        return words

    def _stop(self, process: Process, events: list[dict], offset: int, reason: str,
              index: int | None) -> tuple[list[dict], str, int | None]:
        # A fork bomb at a cgroup's pids.max spins until its time limit: the limit it reached says why.
        self._read_limit(process)
        process.kill()
        return events + read_events(self.progress, offset)[0], reason, index

    def _started(self, call: Call) -> None:
        self.running = call
        if self.on_case is not None:
            self.on_case(call, True)

    def _ended(self) -> None:
        call, self.running = self.running, None
        if call is not None and self.on_case is not None:
            self.on_case(call, False)

    def stdout_text(self, limit: int) -> str:
        try:
            with open(self.stdout, "rb") as stream:
                return stream.read(limit + 200).decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self) -> str:
        parts = []
        for path in (self.stderr, self.stdout):
            try:
                size = path.stat().st_size
                with open(path, "rb") as stream:
                    stream.seek(max(0, size - LOG_TAIL))
                    text = stream.read().decode(errors="replace").strip()
            except OSError:
                text = ""
            if text:
                parts.append(text)
        return "\n".join(parts)[-LOG_TAIL:]


def read_events(path: Path, offset: int) -> tuple[list[dict], int]:
    """The whole lines written since `offset`, as events, and the offset after them."""
    # Bounded reads: the file is writable by the code under test, which could make it huge.
    try:
        with open(path, "rb") as stream:
            stream.seek(offset)
            data = stream.read(PROGRESS_LIMIT)
    except OSError:
        return [], offset
    complete = data[: data.rfind(b"\n") + 1]
    events = [event for event in map(parse_event, complete.splitlines()) if event is not None]
    return events, offset + len(complete)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        return f"was killed by signal {_signal_name(returncode) or -returncode}"
    return f"exited with status {returncode}"


def _signal_name(returncode: int) -> str | None:
    """The name of the signal that killed the process ("SIGSEGV"); None if none did, or one without a name."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return None
