"""The event state machine: one harness's progress events (`grader.boundary.protocol`) turned into call outcomes.

The events must follow the protocol's grammar from the harness's first call to its last: anything
else was written by the code under test, and voids its kernel. A harness that ends without
finishing fails the call in flight, as a crash, a time-out or a spent budget.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

from grader.boundary.protocol import Ended, EndStatus, Event, ForbiddenUse, Launch, Sealed, Written, index_of, kind_of
from grader.runner.limits import Budget, call_timeout_words
from grader.runner.plan import Call
from grader.runner.watch import LOG_TAIL, HarnessExit
from grader.sandbox import LimitKind, size_in_words
from grader.status import CallStatus


# What a signal that ended a harness of itself means, in the words a student searches for.
SIGNAL_WORDS = {"SIGSEGV": "segmentation fault", "SIGBUS": "bus error", "SIGILL": "illegal instruction",
                "SIGFPE": "arithmetic error", "SIGABRT": "abort",
                "SIGTRAP": "trap"}


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
    signal: str | None = None  # the signal that killed the harness during it ("SIGSEGV"), where one did
    uncaught: str | None = None  # the C++ exception that ended it uncaught ("std::bad_alloc"), where one did
    tampered: bool = False  # its kernel's code forged or flooded the progress channel: its results are void
    # A composed call's outputs as the harness sealed them while it ran, in order (also for one that
    # crashed later: how far it got).
    seals: tuple[Sealed, ...] = ()
    # The scratch buffers it was to leave unwritten (a variant's `untouched`): how much of each it wrote.
    written: tuple[Written, ...] = ()
    peak_extra_bytes: float | None = None  # for those calls: the device memory it took beyond its arguments (sampled)
    forbidden: tuple[ForbiddenUse, ...] = ()  # what it did that the assignment forbids, seen while it ran
    launched: tuple[Launch, ...] = ()  # the kernels it launched, where its library watches launches


def record(ended: HarnessExit, timed_out_index: int | None, calls: list[Call], start: int, stop: int,
           outcomes: dict[int, CallOutcome], spent: Budget | None = None) -> int:
    """Turn one harness's events into outcomes; return the index the next harness starts at.

    The events must follow the harness's grammar (start i, [loading, loaded,] end i, start i+1, ...,
    finished) from `start` to `stop`: anything else was written by the code under test, and fails
    its kernel. A failed case costs itself: the next harness starts at the case after it. A
    composed call's `sealed` events (between its loads and its end) are kept on its outcome.
    """
    seals: dict[int, list[Sealed]] = {}
    following = _record(ended, timed_out_index, calls, start, stop, outcomes, spent, seals)
    for index, sealed in seals.items():
        if index in outcomes and not outcomes[index].tampered:
            outcomes[index] = dataclasses.replace(outcomes[index], seals=tuple(sealed))
    return following


def _record(ended: HarnessExit, timed_out_index: int | None, calls: list[Call], start: int, stop: int,
            outcomes: dict[int, CallOutcome], spent: Budget | None, seals: dict[int, list[Sealed]]) -> int:
    finished = False
    started: int | None = None
    loading = False  # between "loading" and "loaded": the library's static constructors run
    expected = start
    for event in ended.events:
        kind, index = kind_of(event), index_of(event)
        if kind in (Event.HELLO, Event.DEVICE) and started is None and expected == start:
            continue
        if kind == Event.START and started is None and index == expected:
            started = index
        elif kind == Event.LOADING and started is not None and index == started and not loading:
            loading = True
        elif kind == Event.LOADED and loading and index == started:
            loading = False
        elif kind == Event.SEALED and started is not None and not loading and index == started \
                and (sealed := Sealed.read(event)) is not None and _next_seal(calls[index], seals.get(index, [])) \
                == sealed.file:
            # Only in the plan's order: a seal forged for a file the code rewrote breaks it, and voids the kernel.
            seals.setdefault(index, []).append(sealed)
        elif kind == Event.END and started is not None and not loading and index == started \
                and (end := Ended.read(event)) is not None and not finished:
            call = calls[index]
            started, expected = None, index + 1
            if end.status == EndStatus.OK:
                outcomes[index] = CallOutcome(call.kernel.name, call.case.name, CallStatus.OK, "", end.wall_ms,
                                              end.device_ms, call.output_dir, end.inputs_modified, end.out_of_bounds,
                                              written=end.written, peak_extra_bytes=end.peak_extra_bytes,
                                              forbidden=end.forbidden, launched=end.launched)
                continue
            if end.status == EndStatus.DEVICE_MEMORY:
                held, limit = end.held_bytes or 0, end.device_memory_limit or 0
                message = (f"kept {size_in_words(held)} of device memory allocated after returning (the limit is "
                           f"{size_in_words(limit)}); free what you cudaMalloc")
            elif end.status == EndStatus.EXCEPTION:  # the kernel's code raised: what, and where in its own files
                message = f"raised {end.message[:LOG_TAIL]}"
            else:
                message = f"CUDA error after the call: {end.message[:LOG_TAIL]}"
            outcomes[index] = CallOutcome(call.kernel.name, call.case.name, CallStatus.CRASHED, message,
                                          forbidden=end.forbidden)
            # The CUDA context is unusable (a Python kernel's module state, after an exception, untrusted): a fresh
            # harness takes the kernel's next case.
            return index + 1
        elif kind == Event.FINISHED and started is None and expected == stop and not finished:
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
    limit = ended.limit or "time"
    reached = f" (it had {ended.limit_message})" if ended.limit else ""
    if spent is not None:
        outcomes[failed] = CallOutcome(call.kernel.name, call.case.name, CallStatus.TIMEOUT,
                                       f"{spent.ran_out} during this case; stopped{reached}", limit=limit)
        if spent.scope == "submission":
            skip_rest(failed + 1, calls, outcomes, spent.not_run)
            return len(calls)
        return skip_rest_of_kernel(failed, calls, outcomes, spent.not_run)
    if timed_out_index is not None:
        outcomes[failed] = CallOutcome(call.kernel.name, call.case.name, CallStatus.TIMEOUT,
                                       f"{call_timeout_words(call.kernel)}; stopped{reached}", limit=limit)
        return failed + 1
    tail = ended.log_tail
    message = crashed_while_loading(ended) if loading else f"the process {ended.reason} during this case"
    outcomes[failed] = CallOutcome(call.kernel.name, call.case.name, CallStatus.CRASHED,
                                   message + (f"\n{tail}" if tail else ""),
                                   while_loading=loading, limit=ended.limit, signal=ended.signal,
                                   uncaught=uncaught_exception(tail))
    if loading:  # every case loads the same library: it would crash the same way
        return skip_rest_of_kernel(failed, calls, outcomes, "not run: the kernel's library crashed while loading")
    return failed + 1


# What libstdc++ (and libc++) print when a C++ exception leaves main uncaught, before abort() raises SIGABRT.
UNCAUGHT = re.compile(r"terminate called after throwing an instance of '([^'\n]+)'"
                      r"|terminating due to uncaught exception of type ([\w<>]+(?:::[\w<>]+)*)")


def uncaught_exception(log_tail: str) -> str | None:
    """The type of the C++ exception the harness's own runtime said ended it uncaught ("std::bad_alloc"), or None:
    the C++ runtime's words, read as the signal is read from the exit status (a fact, before any words of ours)."""
    found = UNCAUGHT.search(log_tail or "")
    return next(group for group in found.groups() if group) if found else None


def crashed_while_loading(ended: HarnessExit) -> str:
    """A harness that died between `loading` and `loaded`, in a student's words: what went wrong, and where.

    "crashed while its library was being loaded (segmentation fault in a static constructor): the
    process was killed by signal SIGSEGV". A limit that killed it (memory, processes) is said by
    its reason instead of the signal the watchdog sent.
    """
    what = SIGNAL_WORDS.get(ended.signal or "") if ended.limit is None else None
    where = f"{what} in a static constructor" if what else "in a static constructor or global initialiser"
    return f"crashed while its library was being loaded ({where}): the process {ended.reason}"


def _next_seal(call: Call, sealed: list[Sealed]) -> str | None:
    """The file a composed call seals next (None: it seals nothing more, or is no composed call)."""
    files = call.composition.sealed if call.composition is not None else ()
    return files[len(sealed)] if len(sealed) < len(files) else None


def skip_rest(index: int, calls: list[Call], outcomes: dict[int, CallOutcome], message: str) -> None:
    """Every call from `index` on that has no outcome yet is not run, for `message`'s reason."""
    for following in range(index, len(calls)):
        outcomes.setdefault(following, CallOutcome(calls[following].kernel.name, calls[following].case.name,
                                                   CallStatus.NOT_RUN, message))


def skip_rest_of_kernel(index: int, calls: list[Call], outcomes: dict[int, CallOutcome], message: str) -> int:
    """The kernel's calls after `index` are not run; returns the index of the next kernel's first call."""
    kernel = calls[index].kernel.name
    following = index + 1
    while following < len(calls) and calls[following].kernel.name == kernel:
        outcomes[following] = CallOutcome(kernel, calls[following].case.name, CallStatus.NOT_RUN, message)
        following += 1
    return following


def _tampered(event: dict, calls: list[Call], start: int, outcomes: dict[int, CallOutcome]) -> int:
    """A forged or out-of-order progress event: the kernel whose code ran in this harness fails as a whole."""
    kernel = calls[start].kernel.name
    shown = json.dumps(event)[:200]
    for index, call in enumerate(calls):  # its earlier cases too: none of its figures can be trusted
        if call.kernel.name == kernel:
            outcomes[index] = CallOutcome(kernel, call.case.name, CallStatus.CRASHED,
                                          f"the harness's progress channel was tampered with (unexpected event {shown}); "
                                          "the kernel's results are void", tampered=True)
    return max(i for i, c in enumerate(calls) if c.kernel.name == kernel) + 1
