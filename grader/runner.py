"""Run built kernels on their cases in sandboxed harness processes; collect outputs and timings.

A crash, a sticky CUDA error or a timeout fails the kernel in flight; a fresh harness then goes on
with the next kernel, so one broken kernel never costs the others their points.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from grader.errors import GraderError
from grader.sandbox import Limits, Mounts, Sandbox
from grader.spec import Assignment, Case, Kernel, allocation_of, shape_of

CallStatus = Literal["ok", "crashed", "timeout", "not_run"]
HARNESS_START_LIMIT_S = 120.0  # importing CuPy and creating a context, before any student code runs
POLL_INTERVAL_S = 0.02
LOG_TAIL = 2000  # characters of the harness's stdout/stderr kept in a message


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
                              "null": buffer.name in self.case.null})
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


@dataclass
class RunReport:
    """Everything a run produced: one outcome per call, and what the harness said about itself."""

    outcomes: list[CallOutcome] = field(default_factory=list)
    device: str = ""
    harness_starts: int = 0
    seconds: float = 0.0


def run_calls(assignment: Assignment, calls: list[Call], sandbox: Sandbox, limits: Limits | None = None) -> RunReport:
    """Run every call, restarting the harness after a failure with the next kernel's first call."""
    report = RunReport()
    started = time.perf_counter()
    limits = limits or Limits()
    outcomes: dict[int, CallOutcome] = {}
    with tempfile.TemporaryDirectory(prefix="kg-run-") as scratch:
        workdir = Path(scratch)
        plan_file = workdir / "plan.json"
        plan_file.write_text(json.dumps({"target": assignment.target, "calls": [c.plan() for c in calls]}))
        next_index = 0
        while next_index < len(calls):
            report.harness_starts += 1
            session = _Session(workdir, report.harness_starts)
            events, exit_reason, timed_out_index = session.run(plan_file, next_index, calls, sandbox, limits)
            if not any(e.get("event") == "device" for e in events):
                # No student code was loaded yet: this is the grading machine's problem, not the student's.
                unavailable = next((e for e in events if e.get("event") == "device_unavailable"), None)
                if unavailable:
                    raise GraderError(f"this machine cannot run {assignment.target} kernels: {unavailable['message']}"
                                      + (" (CUDA assignments need a GPU and CuPy: pip install cupy-cuda13x)"
                                         if assignment.target == "cuda" else ""))
                raise GraderError(f"the harness could not start ({exit_reason}): {session.log_tail() or 'no output'}")
            report.device = report.device or next((e["name"] for e in events if e.get("event") == "device"), "")
            next_index = _record(events, exit_reason, timed_out_index, calls, next_index, outcomes, session)
    report.outcomes = [outcomes.get(i) or CallOutcome(c.kernel.name, c.case.name, "not_run", "never reached")
                       for i, c in enumerate(calls)]
    report.seconds = time.perf_counter() - started
    return report


class _Session:
    """One harness process: started, watched for per-call time limits, and read back."""

    def __init__(self, workdir: Path, number: int) -> None:
        self.progress = workdir / f"progress-{number}.jsonl"
        self.stdout = workdir / f"stdout-{number}.txt"
        self.stderr = workdir / f"stderr-{number}.txt"
        self.cwd = workdir / f"cwd-{number}"
        self.cwd.mkdir()

    def run(self, plan_file: Path, start: int, calls: list[Call], sandbox: Sandbox,
            limits: Limits) -> tuple[list[dict], str, int | None]:
        self.progress.touch()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.cwd), "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        for name in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_PATH", "CUPY_CACHE_DIR"):
            if name in os.environ:
                env[name] = os.environ[name]
        command = [sys.executable, "-m", "grader.harness", str(plan_file), str(self.progress), str(start)]
        writable = Path(calls[start].output_dir).parent
        process = sandbox.start(command, cwd=self.cwd, mounts=Mounts(read_only=(plan_file,), writable=writable),
                                limits=limits, stdout=self.stdout, stderr=self.stderr, env=env)
        launched = time.monotonic()
        in_flight: int | None = None
        in_flight_since = launched
        events: list[dict] = []
        offset = 0
        while True:
            returncode = process.poll()
            new, offset = _read_events(self.progress, offset)
            for event in new:
                events.append(event)
                if event.get("event") == "start":
                    in_flight, in_flight_since = event["index"], time.monotonic()
                elif event.get("event") == "end":
                    in_flight = None
            if returncode is not None:
                break
            now = time.monotonic()
            if in_flight is not None and now - in_flight_since > calls[in_flight].kernel.time_limit_s:
                process.kill()
                return events + _read_events(self.progress, offset)[0], "timeout", in_flight
            if in_flight is None and not any(e.get("event") == "start" for e in events) \
                    and now - launched > HARNESS_START_LIMIT_S:
                process.kill()
                return events, f"the harness did not start within {HARNESS_START_LIMIT_S:.0f} s", None
            time.sleep(POLL_INTERVAL_S)
        return events, _describe_exit(returncode), None

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


def _read_events(path: Path, offset: int) -> tuple[list[dict], int]:
    with open(path, "rb") as stream:
        stream.seek(offset)
        data = stream.read()
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
            outcomes: dict[int, CallOutcome], session: _Session) -> int:
    """Turn one session's events into outcomes; return the index the next harness starts at."""
    finished = any(e.get("event") == "finished" for e in events)
    started: int | None = None
    for event in events:
        index = event.get("index")
        if not isinstance(index, int) or not start <= index < len(calls):
            continue
        call = calls[index]
        if event.get("event") == "start":
            started = index
        elif event.get("event") == "end" and index == started:
            started = None
            if event.get("status") == "ok":
                outcomes[index] = CallOutcome(call.kernel.name, call.case.name, "ok", "", event.get("wall_ms"),
                                              event.get("device_ms"), call.output_dir)
            else:
                outcomes[index] = CallOutcome(call.kernel.name, call.case.name, "crashed",
                                              f"CUDA error after the call: {event.get('message', '')}")
                return _skip_rest_of_kernel(index, calls, outcomes, "not run: an earlier case of this kernel crashed")
    if finished:
        return len(calls)
    # The harness ended without finishing: the call in flight (or, if none, the next one) failed.
    failed = started if started is not None else min(
        (i for i in range(start, len(calls)) if i not in outcomes), default=len(calls))
    if failed >= len(calls):
        return len(calls)
    call = calls[failed]
    if timed_out_index is not None:
        outcome = CallOutcome(call.kernel.name, call.case.name, "timeout",
                              f"did not finish within {call.kernel.time_limit_s:g} s; stopped")
    else:
        tail = session.log_tail()
        outcome = CallOutcome(call.kernel.name, call.case.name, "crashed",
                              f"the process {exit_reason} during this case" + (f"\n{tail}" if tail else ""))
    outcomes[failed] = outcome
    return _skip_rest_of_kernel(failed, calls, outcomes, f"not run: an earlier case of this kernel {outcome.status}")


def _skip_rest_of_kernel(index: int, calls: list[Call], outcomes: dict[int, CallOutcome], message: str) -> int:
    kernel = calls[index].kernel.name
    following = index + 1
    while following < len(calls) and calls[following].kernel.name == kernel:
        outcomes[following] = CallOutcome(kernel, calls[following].case.name, "not_run", message)
        following += 1
    return following
