"""The limits policy: how long a kernel and a submission may run, what the sandbox bounds, and how
much device memory a call may keep."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from grader.sandbox import Limits
from grader.spec import Assignment

if TYPE_CHECKING:
    from grader.runner.plan import Call

# Device memory a call may keep allocated after it returns (a scratch buffer it never frees is fine;
# holding the card is not): the spec's `device_memory_limit_mb`, else this.
DEVICE_MEMORY_LIMIT = 8 << 30
SUBMISSION_SLACK_S = 10.0


@dataclass(frozen=True)
class Budget:
    """Which whole-time budget ran out: the kernel's or the submission's, and its seconds."""

    scope: Literal["kernel", "submission"]
    seconds: float


def submission_time_limit(calls: list[Call]) -> float:
    """No submission needs longer than the sum of its kernels' budgets (and a little for the grader itself)."""
    return sum({c.kernel.name: c.kernel.budget_s for c in calls}.values()) + SUBMISSION_SLACK_S


def submission_budget(assignment: Assignment, calls: list[Call]) -> float:
    """Seconds for a submission's whole run stage, sanitizer included: the spec's, else the kernels' budgets."""
    return assignment.submission_time_limit_s or submission_time_limit(calls)


def limits_for(assignment: Assignment) -> Limits:
    """The sandbox's limits for an assignment: its assignment.toml's memory and process limits, else the defaults."""
    defaults = Limits()
    return dataclasses.replace(
        defaults, memory_bytes=(assignment.memory_limit_mb << 20) if assignment.memory_limit_mb else defaults.memory_bytes,
        processes=assignment.process_limit or defaults.processes)


def device_memory_limit(assignment: Assignment) -> int:
    """Bytes of device memory a call may keep allocated after it returns."""
    return (assignment.device_memory_limit_mb << 20) if assignment.device_memory_limit_mb else DEVICE_MEMORY_LIMIT
