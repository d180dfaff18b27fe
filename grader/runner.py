"""Run built kernels on their cases in sandboxed harness processes; collect outputs and timings.

A crash, a sticky CUDA error or a timeout fails the kernel in flight; a fresh harness then goes on
with the next kernel, so one broken kernel never costs the others their points.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from grader.errors import GraderError
from grader.sandbox import LimitKind, Limits, Mounts, Process, Sandbox
from grader.spec import Assignment, Case, Kernel, allocation_of, shape_of

CallStatus = Literal["ok", "crashed", "timeout", "not_run"]
HARNESS_START_LIMIT_S = 120.0  # importing CuPy and creating a context, before any student code runs
# Device memory a call may keep allocated after it returns (a scratch buffer it never frees is fine;
# holding the card is not): the spec's `device_memory_limit_mb`, else this.
DEVICE_MEMORY_LIMIT = 8 << 30
SUBMISSION_SLACK_S = 10.0
POLL_INTERVAL_S = 0.02
LOG_TAIL = 2000  # characters of the harness's stdout/stderr kept in a message
PROGRESS_LIMIT = 8 << 20  # bytes; the harness writes a few hundred per call


@dataclass(frozen=True)
class Call:
    """One kernel on one case, as the harness will perform it."""

    kernel: Kernel
    case: Case
    library: Path
    inputs_dir: Path
    output_dir: Path

    def plan(self) -> dict[str, Any]:
        arguments = []
        for parameter in self.kernel.signature.parameters:
            if not parameter.pointer:
                arguments.append({"kind": "scalar", "name": parameter.name, "ctype": parameter.ctype,
                                  "value": self.case.params[parameter.name]})
                continue
            buffer = self.kernel.buffer(parameter.name)
            arguments.append({"kind": "buffer", "name": buffer.name, "role": buffer.role, "dtype": buffer.dtype,
                              "shape": list(shape_of(buffer, self.case.params)),
                              "allocate": allocation_of(buffer, self.case.params),
                              "null": buffer.name in self.case.null, "mutable": buffer.mutable, "init": buffer.init})
        return {"kernel": self.kernel.name, "case": self.case.name, "library": str(self.library),
                "inputs_dir": str(self.inputs_dir), "output_dir": str(self.output_dir), "arguments": arguments}


@dataclass(frozen=True)
class CallOutcome:
    kernel: str
    case: str
    status: CallStatus
    message: str = ""
    wall_ms: float | None = None
    device_ms: float | None = None
    output_dir: Path | None = None
    inputs_modified: tuple[str, ...] = ()  # input buffers the call wrote into (their hash changed)
    out_of_bounds: tuple[str, ...] = ()  # writes just outside a buffer, in words ("32 element(s) past the end of out")
    while_loading: bool = False  # it crashed while its library was being loaded (static constructors)
    limit: LimitKind | None = None  # the limit that ended it ("processes", "memory", ...; "time": its time limit)


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


def submission_time_limit(calls: list[Call]) -> float:
    """No submission needs longer than the sum of its kernels' budgets (and a little for the grader itself)."""
    return sum({c.kernel.name: c.kernel.budget_s for c in calls}.values()) + SUBMISSION_SLACK_S


def submission_budget(assignment: Assignment, calls: list[Call]) -> float:
    """Seconds for a submission's whole run stage, sanitizer included: the spec's, else the kernels' budgets."""
    return assignment.submission_time_limit_s or submission_time_limit(calls)


def limits_for(assignment: Assignment) -> Limits:
    """The sandbox's limits for a pack: its spec's memory and process limits, else the defaults."""
    defaults = Limits()
    return dataclasses.replace(
        defaults, memory_bytes=(assignment.memory_limit_mb << 20) if assignment.memory_limit_mb else defaults.memory_bytes,
        processes=assignment.process_limit or defaults.processes)


def run_calls(assignment: Assignment, calls: list[Call], sandbox: Sandbox, limits: Limits | None = None,
              time_limit_s: float | None = None, wrapper: tuple[str, ...] = ()) -> RunReport:
    """Run every call, one harness (one sandbox) per kernel, a fresh one after a failed case.

    A kernel's harness sees only that kernel's library and inputs and one writable folder, which is
    emptied before the next kernel's harness starts: one kernel's code cannot touch another's outputs.
    A case that crashes or times out costs that case; the kernel's next case runs in a fresh harness
    while the kernel's time budget lasts. `time_limit_s` bounds the whole submission (default: the
    spec's, else `submission_time_limit`); `wrapper` prefixes the harness's command (compute-sanitizer).
    """
    report = RunReport()
    started = time.perf_counter()
    limits = limits or limits_for(assignment)
    budget = time_limit_s or submission_budget(assignment, calls)
    deadline = time.monotonic() + budget
    kernel_deadlines: dict[str, float] = {}
    outcomes: dict[int, CallOutcome] = {}
    device_memory_limit = (assignment.device_memory_limit_mb << 20) if assignment.device_memory_limit_mb \
        else DEVICE_MEMORY_LIMIT
    with tempfile.TemporaryDirectory(prefix="kg-run-") as scratch:
        workdir = Path(scratch)
        outbox = workdir / "out"  # the sandbox's one writable folder
        plan_file = workdir / "plan.json"
        planned = [{**dataclasses.replace(c, output_dir=outbox / str(i)).plan(),
                    "device_memory_limit": device_memory_limit} for i, c in enumerate(calls)]
        plan_file.write_text(json.dumps({"target": assignment.target, "calls": planned}))
        next_index = 0
        while next_index < len(calls):
            kernel = calls[next_index].kernel
            stop = next_index
            while stop < len(calls) and calls[stop].kernel.name == kernel.name:
                stop += 1
            now = time.monotonic()
            if now >= deadline:
                _skip_rest(next_index, calls, outcomes, f"not run: the submission's time limit ({budget:g} s) was reached")
                break
            kernel_deadline = kernel_deadlines.setdefault(kernel.name, now + kernel.budget_s)
            if now >= kernel_deadline:  # spent by earlier cases' harnesses
                for index in range(next_index, stop):
                    outcomes[index] = CallOutcome(kernel.name, calls[index].case.name, "not_run",
                                                  f"not run: the kernel's time budget ({kernel.budget_s:g} s) was spent")
                next_index = stop
                continue
            report.harness_starts += 1
            shutil.rmtree(outbox, ignore_errors=True)
            outbox.mkdir()
            session = _Session(workdir, outbox, report.harness_starts)
            launched_at = time.time()
            events, exit_reason, timed_out_index = session.run(plan_file, next_index, stop, calls, sandbox, limits,
                                                               assignment.target == "cuda",
                                                               min(deadline, kernel_deadline), wrapper)
            report.logs.append(session.stdout_text(limits.log_bytes))
            report.sandbox_enforced = session.applied or report.sandbox_enforced
            if tail := session.log_tail():
                report.kernel_logs[kernel.name] = (report.kernel_logs.get(kernel.name, "") + tail + "\n")[-LOG_TAIL:]
            unavailable = next((e for e in events if e.get("event") == "device_unavailable"), None)
            if unavailable is not None and not any(e.get("event") == "device" for e in events):
                raise GraderError(f"this machine cannot run {assignment.target} kernels: "
                                  f"{str(unavailable.get('message', ''))[:LOG_TAIL]}")
            if not any(e.get("event") == "device" for e in events) and exit_reason != BUDGET_SPENT:
                # No student code was loaded yet: this is the grading machine's problem, not the student's.
                raise GraderError(f"the harness could not start ({exit_reason}): {session.log_tail() or 'no output'}")
            ready = next((e for e in events if e.get("event") == "device"), {})
            report.device = report.device or str(ready.get("name", ""))
            report.start_seconds += max(0.0, (_number(ready.get("at")) or launched_at) - launched_at)
            if isinstance(ready.get("free_bytes"), int):
                report.free_bytes_at_start.append(ready["free_bytes"])
            spent = None
            if exit_reason == BUDGET_SPENT:
                if timed_out_index is None:
                    timed_out_index = next((i for i in range(next_index, stop) if i not in outcomes), None)
                spent = Budget("kernel", kernel.budget_s) if kernel_deadline <= deadline else Budget("submission", budget)
            next_index = _record(events, exit_reason, timed_out_index, calls, next_index, stop, outcomes, session, spent)
            _collect_outputs(outbox, calls, outcomes)
    report.outcomes = [outcomes.get(i) or CallOutcome(c.kernel.name, c.case.name, "not_run", "never reached")
                       for i, c in enumerate(calls)]
    report.seconds = time.perf_counter() - started
    return report


BUDGET_SPENT = "budget-spent"  # the kernel's or the submission's whole time budget ran out


@dataclass(frozen=True)
class Budget:
    """Which whole-time budget ran out: the kernel's or the submission's, and its seconds."""

    scope: Literal["kernel", "submission"]
    seconds: float


class _Session:
    """One harness process for one kernel's calls: started, watched for limits, and read back."""

    def __init__(self, workdir: Path, outbox: Path, number: int) -> None:
        self.progress = outbox / f".progress-{number}.jsonl"
        self.stdout = workdir / f"stdout-{number}.txt"
        self.stderr = workdir / f"stderr-{number}.txt"
        self.cwd = outbox / "home"
        self.cwd.mkdir()
        self.limit_message = ""
        self.limit: LimitKind | None = None  # which sandbox limit the harness reached (the words: limit_message)
        self.applied: tuple[str, ...] = ()  # the limits the sandbox really applied to this harness

    def run(self, plan_file: Path, start: int, stop: int, calls: list[Call], sandbox: Sandbox, limits: Limits,
            gpu: bool, deadline: float, wrapper: tuple[str, ...] = ()) -> tuple[list[dict], str, int | None]:
        self.progress.touch()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.cwd), "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
               # The harness needs no BLAS threads: a pool per core would exhaust a small process limit.
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        # Not CUPY_CACHE_DIR: a kernel cache shared between submissions could be poisoned; CuPy uses $HOME.
        for name in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_PATH"):
            if name in os.environ:
                env[name] = os.environ[name]
        command = [*wrapper, sys.executable, "-m", "grader.harness", str(plan_file), str(self.progress), str(start),
                   str(stop)]
        own = calls[start:stop]
        # Only this kernel's library and inputs are visible: not the gold, not other kernels' or students' files.
        read_only = tuple(dict.fromkeys([plan_file, *(c.library for c in own), *(c.inputs_dir for c in own)]))
        outbox = self.cwd.parent
        process = sandbox.start(command, cwd=self.cwd, mounts=Mounts(read_only=read_only, writable=outbox, gpu=gpu),
                                limits=limits, stdout=self.stdout, stderr=self.stderr, env=env)
        self.applied = tuple(getattr(process, "applied", ()))
        try:
            return self._watch(process, calls, limits, outbox, deadline)
        finally:
            # Also after a normal exit: whatever the code left running in the background goes now.
            process.kill()

    def _watch(self, process: Process, calls: list[Call], limits: Limits, outbox: Path,
               deadline: float) -> tuple[list[dict], str, int | None]:
        launched = time.monotonic()
        in_flight: int | None = None
        in_flight_since = launched
        events: list[dict] = []
        offset = 0
        # The output folder's bytes and files are bounded by the sandbox's watchdog: limit_hit() says so.
        while True:
            returncode = process.poll()
            new, offset = _read_events(self.progress, offset)
            for event in new:
                events.append(event)
                if event.get("event") == "start" and isinstance(event.get("index"), int) \
                        and 0 <= event["index"] < len(calls):
                    in_flight, in_flight_since = event["index"], time.monotonic()
                elif event.get("event") == "end":
                    in_flight = None
            if returncode is not None:
                break
            if offset > PROGRESS_LIMIT or _size(self.progress) > PROGRESS_LIMIT:
                events.append({"event": "oversized", "bytes": _size(self.progress)})  # voids the kernel in _record
                return self._stop(process, events, offset, "was stopped: its progress file was flooded", None)
            now = time.monotonic()
            if in_flight is not None and now - in_flight_since > calls[in_flight].kernel.time_limit_s:
                return self._stop(process, events, offset, "timeout", in_flight)
            if now > deadline:
                return self._stop(process, events, offset, BUDGET_SPENT, in_flight)
            if in_flight is None and not any(e.get("event") == "start" for e in events) \
                    and now - launched > HARNESS_START_LIMIT_S:
                return self._stop(process, events, offset, f"the harness did not start within {HARNESS_START_LIMIT_S:.0f} s",
                                  None)
            time.sleep(POLL_INTERVAL_S)
        limit = self._read_limit(process)
        reason = _describe_exit(returncode)
        return events + _read_events(self.progress, offset)[0], (f"{reason}: it {limit}" if limit else reason), None

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
        return events + _read_events(self.progress, offset)[0], reason, index

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


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _collect_outputs(outbox: Path, calls: list[Call], outcomes: dict[int, CallOutcome]) -> None:
    """Move each finished call's outputs out of the sandbox's folder: only regular files the spec names."""
    for index, outcome in outcomes.items():
        if outcome.status != "ok" or outcome.output_dir != calls[index].output_dir:
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


def _read_events(path: Path, offset: int) -> tuple[list[dict], int]:
    # Bounded reads: the file is writable by the code under test, which could make it huge.
    try:
        with open(path, "rb") as stream:
            stream.seek(offset)
            data = stream.read(PROGRESS_LIMIT)
    except OSError:
        return [], offset
    complete = data[: data.rfind(b"\n") + 1]
    events = []
    for line in complete.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a torn or forged line carries no information the runner relies on
        if isinstance(event, dict):
            events.append(event)
    return events, offset + len(complete)


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _record(events: list[dict], exit_reason: str, timed_out_index: int | None, calls: list[Call], start: int,
            stop: int, outcomes: dict[int, CallOutcome], session: _Session, spent: Budget | None = None) -> int:
    """Turn one session's events into outcomes; return the index the next harness starts at.

    The events must follow the harness's grammar (start i, [loading, loaded,] end i, start i+1, ...,
    finished) from `start` to `stop`: anything else was written by the code under test, and fails
    its kernel. A failed case costs itself: the next harness starts at the case after it.
    """
    finished = False
    started: int | None = None
    loading = False  # between "loading" and "loaded": the library's static constructors run
    expected = start
    for event in events:
        kind, index = event.get("event"), event.get("index")
        if kind in ("hello", "device") and started is None and expected == start:
            continue
        if kind == "start" and started is None and index == expected:
            started = index
        elif kind == "loading" and started is not None and index == started and not loading:
            loading = True
        elif kind == "loaded" and loading and index == started:
            loading = False
        elif kind == "end" and started is not None and not loading and index == started \
                and isinstance(event.get("status"), str) and not finished:
            call = calls[index]
            started, expected = None, index + 1
            if event["status"] == "ok":
                outcomes[index] = CallOutcome(call.kernel.name, call.case.name, "ok", "", _number(event.get("wall_ms")),
                                              _number(event.get("device_ms")), call.output_dir,
                                              _strings(event.get("inputs_modified")), _strings(event.get("out_of_bounds")))
                continue
            if event["status"] == "device_memory":
                held, limit = _number(event.get("held_bytes")) or 0, _number(event.get("limit_bytes")) or 0
                message = (f"kept {_gib(held)} of device memory allocated after returning (the limit is "
                           f"{_gib(limit)}); free what you cudaMalloc")
            else:
                message = f"CUDA error after the call: {str(event.get('message', ''))[:LOG_TAIL]}"
            outcomes[index] = CallOutcome(call.kernel.name, call.case.name, "crashed", message)
            return index + 1  # the CUDA context is unusable: a fresh harness takes the kernel's next case
        elif kind == "finished" and started is None and expected == stop and not finished:
            finished = True
        else:
            return _tampered(event, calls, start, outcomes)
    if finished:
        return stop
    # The harness ended without finishing: the call in flight (or, if none, the next one) failed.
    failed = started if started is not None else min(
        (i for i in range(start, stop) if i not in outcomes), default=stop)
    if failed >= stop:
        return stop
    call = calls[failed]
    # The sandbox's limit, where one was reached, says more than the time limit that then ran out.
    limit = session.limit or "time"
    reached = f" (it had {session.limit_message})" if session.limit else ""
    if spent is not None and spent.scope == "submission":
        outcomes[failed] = CallOutcome(call.kernel.name, call.case.name, "timeout",
                                       f"the submission's time limit ({spent.seconds:g} s) was reached during this "
                                       f"case; stopped{reached}", limit=limit)
        _skip_rest(failed + 1, calls, outcomes, "not run: the submission's time limit was reached")
        return len(calls)
    if spent is not None:
        outcomes[failed] = CallOutcome(call.kernel.name, call.case.name, "timeout",
                                       f"the kernel's time budget ({spent.seconds:g} s for all its cases) ran out "
                                       f"during this case; stopped{reached}", limit=limit)
        return _skip_rest_of_kernel(failed, calls, outcomes,
                                    f"not run: the kernel's time budget ({spent.seconds:g} s) was spent")
    if timed_out_index is not None:
        outcomes[failed] = CallOutcome(call.kernel.name, call.case.name, "timeout",
                                       f"did not finish within {call.kernel.time_limit_s:g} s; stopped{reached}",
                                       limit=limit)
        return failed + 1
    tail = session.log_tail()
    where = "while its library was being loaded (in a static constructor or global initialiser)" if loading \
        else "during this case"
    outcomes[failed] = CallOutcome(call.kernel.name, call.case.name, "crashed",
                                   f"the process {exit_reason} {where}" + (f"\n{tail}" if tail else ""),
                                   while_loading=loading, limit=session.limit)
    if loading:  # every case loads the same library: it would crash the same way
        return _skip_rest_of_kernel(failed, calls, outcomes, "not run: the kernel's library crashed while loading")
    return failed + 1


def _gib(count: float) -> str:
    return f"{count / (1 << 30):.3g} GiB" if count >= 1 << 30 else f"{count / (1 << 20):.0f} MiB"


def _tampered(event: dict, calls: list[Call], start: int, outcomes: dict[int, CallOutcome]) -> int:
    """A forged or out-of-order progress event: the kernel whose code ran in this harness fails as a whole."""
    kernel = calls[start].kernel.name
    shown = json.dumps(event)[:200]
    for index, call in enumerate(calls):  # its earlier cases too: none of its figures can be trusted
        if call.kernel.name == kernel:
            outcomes[index] = CallOutcome(kernel, call.case.name, "crashed",
                                          f"the harness's progress channel was tampered with (unexpected event {shown}); "
                                          "the kernel's results are void")
    return max(i for i, c in enumerate(calls) if c.kernel.name == kernel) + 1


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(item)[:200] for item in value[:16] if isinstance(item, str)) if isinstance(value, list) else ()


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _skip_rest(index: int, calls: list[Call], outcomes: dict[int, CallOutcome], message: str) -> None:
    for following in range(index, len(calls)):
        outcomes.setdefault(following, CallOutcome(calls[following].kernel.name, calls[following].case.name,
                                                   "not_run", message))


def _skip_rest_of_kernel(index: int, calls: list[Call], outcomes: dict[int, CallOutcome], message: str) -> int:
    kernel = calls[index].kernel.name
    following = index + 1
    while following < len(calls) and calls[following].kernel.name == kernel:
        outcomes[following] = CallOutcome(kernel, calls[following].case.name, "not_run", message)
        following += 1
    return following
