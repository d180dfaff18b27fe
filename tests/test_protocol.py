"""The runner↔harness contract (`grader.boundary.protocol`): the plan survives its file, the harness reads the
sanitizer mode from it, and the runner's state machine holds the harness to the event grammar."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grader.boundary.cpp_device import HostDevice
from grader.boundary.harness import allocate
from grader.boundary.protocol import (MARGIN_BYTES, BufferArgument, Ended, EndStatus, Event, ForbiddenUse, Plan,
                                      ScalarArgument, new_event, parse_event)
from grader.build import build_submission
from grader.cases import Seed, prepare_inputs
from grader.runner import Call, run_calls
from grader.runner.events import record
from grader.runner.plan import plan_for
from grader.runner.watch import HarnessExit
from grader.sandbox import sandbox_named
from grader.assignment import Assignment, load_assignment
from grader.status import CallStatus


@pytest.fixture(scope="module")
def flash() -> Assignment:
    return load_assignment("flash-attention-cpu")


def calls_of(assignment: Assignment, tmp: Path) -> list[Call]:
    return [Call(k, c, tmp / f"{k.name}.so", tmp / "inputs" / c.name, tmp / "out" / k.name / c.name)
            for k in assignment.kernels for c in k.cases]


def test_the_plan_reads_back_as_it_was_written(flash: Assignment, tmp_path: Path) -> None:
    plan = plan_for(flash, calls_of(flash, tmp_path), tmp_path / "outbox", sanitizer=True)
    text = plan.to_json()
    assert Plan.from_json(text) == plan
    assert plan.target == flash.target and plan.sanitizer and plan.device_memory_limit
    call = plan.calls[0]
    assert call.output_dir == str(tmp_path / "outbox" / "0")
    assert {type(a) for a in call.arguments} == {ScalarArgument, BufferArgument}
    # The harness's file, as written: one object per call with the keys the harness reads.
    document = json.loads(text)
    assert set(document["calls"][0]) == {"kernel", "case", "library", "inputs_dir", "output_dir", "arguments"}
    assert {a["kind"] for a in document["calls"][0]["arguments"]} == {"scalar", "buffer"}


@pytest.mark.parametrize("sanitizer, margin", [(False, MARGIN_BYTES // 4), (True, 0)])
def test_the_sanitizer_mode_comes_from_the_plan(sanitizer: bool, margin: int, tmp_path: Path) -> None:
    argument = BufferArgument("out", "output", "float32", (2, 3), 6, False, False, "poison")
    buffer = allocate(HostDevice(), argument, tmp_path, sanitizer)
    assert buffer.margin == margin and buffer.size == 6


def test_a_torn_nested_or_non_object_line_is_no_event() -> None:
    assert parse_event(b'{"event": "start", "index": 0}') == {"event": "start", "index": 0}
    assert parse_event(b'{"event": "sta') is None
    assert parse_event(b"[1, 2]") is None
    assert parse_event(b"[" * 100_000 + b"]" * 100_000) is None  # deep enough to exhaust json's recursion


def test_an_end_carries_the_forbidden_uses_and_drops_what_the_harness_never_writes() -> None:
    use = ForbiddenUse(".toarray", "kernels/scipy_sparse.py", 19)
    event = json.loads(json.dumps(Ended(EndStatus.OK, 1.0, forbidden=(use,)).fields()))
    assert Ended.read(event) == Ended(EndStatus.OK, 1.0, forbidden=(use,))
    forged = {**event, "forbidden": [{"name": ".A", "file": "k.py", "line": True}, {"name": 3}, "torch",
                                     {"name": "torch", "file": "k.py", "line": 4}]}
    assert Ended.read(forged).forbidden == (ForbiddenUse("torch", "k.py", 4),)
    assert Ended.read({"status": "ok"}).forbidden == ()  # a harness of before: none


def ended(*events: dict, reason: str = "exited with status 0", signal: str | None = None) -> HarnessExit:
    return HarnessExit(tuple(events), reason, None, None, "", signal, "")


def ok(index: int) -> dict:
    return new_event(Event.END, index, **Ended(EndStatus.OK, 1.0).fields())


def test_a_harness_that_keeps_to_the_grammar_gets_one_outcome_per_call(flash: Assignment, tmp_path: Path) -> None:
    calls = calls_of(flash, tmp_path)
    first = [i for i, c in enumerate(calls) if c.kernel.name == calls[0].kernel.name]
    events = [new_event(Event.HELLO), new_event(Event.DEVICE, name="cpu", at=0.0, free_bytes=None),
              new_event(Event.START, 0), new_event(Event.LOADING, 0), new_event(Event.LOADED, 0), ok(0)]
    for index in first[1:]:
        events += [new_event(Event.START, index), ok(index)]
    outcomes: dict = {}
    stop = first[-1] + 1
    assert record(ended(*events, new_event(Event.FINISHED)), None, calls, 0, stop, outcomes) == stop
    assert [outcomes[i].status for i in first] == [CallStatus.OK] * len(first)
    assert outcomes[0].wall_ms == 1.0 and outcomes[0].output_dir == calls[0].output_dir


@pytest.mark.parametrize("forged", [
    new_event(Event.END, 1, status="ok"),  # the end of a call that never started
    new_event(Event.END, 0, status=0),  # a status that is no word
    new_event(Event.FINISHED),  # finished while a call is in flight
    new_event(Event.OVERSIZED, bytes=1 << 30),  # the runner's own mark of a flooded file
], ids=["end-before-start", "status-no-string", "finished-in-flight", "oversized"])
def test_an_event_out_of_grammar_voids_the_kernel(forged: dict, flash: Assignment, tmp_path: Path) -> None:
    calls = calls_of(flash, tmp_path)
    kernel = calls[0].kernel.name
    outcomes: dict = {}
    after = record(ended(new_event(Event.HELLO), new_event(Event.START, 0), forged), None, calls, 0, 2, outcomes)
    own = [i for i, c in enumerate(calls) if c.kernel.name == kernel]
    assert after == own[-1] + 1
    assert all(outcomes[i].status == CallStatus.CRASHED and "tampered" in outcomes[i].message for i in own)


def test_a_harness_killed_by_a_signal_costs_its_case_and_names_the_signal(flash: Assignment, tmp_path: Path) -> None:
    calls = calls_of(flash, tmp_path)
    outcomes: dict = {}
    events = (new_event(Event.HELLO), new_event(Event.START, 0), ok(0), new_event(Event.START, 1))
    after = record(ended(*events, reason="was killed by signal SIGSEGV", signal="SIGSEGV"), None, calls, 0, 3, outcomes)
    assert after == 2
    assert outcomes[1].status == CallStatus.CRASHED and outcomes[1].signal == "SIGSEGV"
    assert "was killed by signal SIGSEGV during this case" in outcomes[1].message
    assert outcomes[0].signal is None


@pytest.mark.parametrize("signal, words", [("SIGSEGV", "segmentation fault"), ("SIGILL", "illegal instruction"),
                                           ("SIGBUS", "bus error"), ("SIGFPE", "arithmetic error"),
                                           ("SIGABRT", "abort")])
def test_a_crash_while_loading_says_what_crashed_and_where_whatever_the_signal(
        signal: str, words: str, flash: Assignment, tmp_path: Path) -> None:
    calls = calls_of(flash, tmp_path)
    outcomes: dict = {}
    events = (new_event(Event.HELLO), new_event(Event.START, 0), new_event(Event.LOADING, 0))
    record(ended(*events, reason=f"was killed by signal {signal}", signal=signal), None, calls, 0, 3, outcomes)
    crashed = outcomes[0]
    assert crashed.status == CallStatus.CRASHED and crashed.while_loading and crashed.signal == signal
    assert crashed.message.startswith(f"crashed while its library was being loaded ({words} in a static constructor)")
    assert f"killed by signal {signal}" in crashed.message


def test_a_load_time_exit_without_a_signal_still_says_where(flash: Assignment, tmp_path: Path) -> None:
    calls = calls_of(flash, tmp_path)
    outcomes: dict = {}
    events = (new_event(Event.HELLO), new_event(Event.START, 0), new_event(Event.LOADING, 0))
    record(ended(*events, reason="exited with status 7"), None, calls, 0, 3, outcomes)
    assert outcomes[0].message == ("crashed while its library was being loaded (in a static constructor or global "
                                   "initialiser): the process exited with status 7")


def test_a_device_error_costs_its_case_and_a_fresh_harness_takes_the_next(flash: Assignment, tmp_path: Path) -> None:
    calls = calls_of(flash, tmp_path)
    outcomes: dict = {}
    error = new_event(Event.END, 0, **Ended(EndStatus.DEVICE_ERROR, message="cudaErrorIllegalAddress: ...").fields())
    assert record(ended(new_event(Event.START, 0), error), None, calls, 0, 3, outcomes) == 1
    assert outcomes[0].status == CallStatus.CRASHED
    assert outcomes[0].message == "CUDA error after the call: cudaErrorIllegalAddress: ..."


SEGFAULTS = """#include "standard_attention.h"
void standard_attention(const float* Q, const float* K, const float* V, float* O, int N, int d) {
    if (N > 0) *(volatile int*)nullptr = 1;
}
"""


def test_a_real_harness_reports_the_signal_that_killed_it(flash: Assignment, tmp_path: Path, cache_dir: Path) -> None:
    root = shutil.copytree(flash.reference_dir, tmp_path / "submission")
    (root / "src" / "standard_attention.cpp").write_text(SEGFAULTS)
    kernel = flash.kernel("standard_attention")
    artifact = build_submission(flash, root, cache_dir, (kernel,))[kernel.name]
    assert artifact.library is not None, artifact.message
    case = kernel.cases[0]
    inputs = prepare_inputs(flash, kernel, case, Seed(flash.public_seed), cache_dir)
    call = Call(kernel, case, artifact.library, inputs, tmp_path / "out")
    (outcome,) = run_calls(flash, [call], sandbox_named("process")).outcomes
    assert outcome.status == CallStatus.CRASHED and outcome.signal == "SIGSEGV", outcome.message


def test_a_harness_slow_to_start_costs_the_kernel_none_of_its_time_budget(flash: Assignment, tmp_path: Path,
                                                                            cache_dir: Path) -> None:
    """On a loaded machine Python and NumPy alone may take seconds to start: that is the machine's time. A kernel
    whose budget is shorter than its harness's start still runs every case (here the start is made 2.5 s long by
    a wrapper that waits before the harness; the kernel's budget is 1.5 s, its cases take milliseconds)."""
    import dataclasses

    kernel = dataclasses.replace(flash.kernel("standard_attention"), time_limit_s=1.5, time_budget_s=1.5)
    assignment = dataclasses.replace(flash, kernels=(kernel,), submission_time_limit_s=None)
    artifact = build_submission(assignment, flash.reference_dir, cache_dir, (kernel,))[kernel.name]
    assert artifact.library is not None, artifact.message
    calls = [Call(kernel, case, artifact.library, prepare_inputs(assignment, kernel, case, Seed(flash.public_seed),
                                                                 cache_dir), tmp_path / case.name)
             for case in kernel.cases[:2]]
    slow_start = ("/bin/sh", "-c", 'sleep 2.5; exec "$0" "$@"')
    report = run_calls(assignment, calls, sandbox_named("process"), wrapper=slow_start)
    assert [o.status for o in report.outcomes] == [CallStatus.OK, CallStatus.OK], [o.message for o in report.outcomes]
    assert report.start_seconds >= 2.5
