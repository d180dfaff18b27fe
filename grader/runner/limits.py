"""The limits policy: how long a kernel and a submission may run, what the sandbox bounds, and how
much device memory a call may keep."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from grader.sandbox import Limits
from grader.assignment import Assignment, Kernel

# Device memory a call may keep allocated after it returns (a scratch buffer it never frees is fine;
# holding the card is not): the spec's `device_memory_limit_mb`, else this.
DEVICE_MEMORY_LIMIT = 8 << 30
SUBMISSION_SLACK_S = 10.0


@dataclass(frozen=True)
class Budget:
    """Which whole-time budget ran out: the kernel's or the submission's, and its seconds."""

    scope: Literal["kernel", "submission"]
    seconds: float

    @property
    def words(self) -> str:
        """It in words, with its seconds: "the submission's time limit (70 s)", "the kernel's time budget (20 s)"."""
        if self.scope == "submission":
            return f"the submission's time limit ({self.seconds:g} s)"
        return f"the kernel's time budget ({self.seconds:g} s)"

    @property
    def ran_out(self) -> str:
        """It, ending the case in flight: "the kernel's time budget (20 s for all its cases) ran out"."""
        if self.scope == "submission":
            return f"{self.words} was reached"
        return f"the kernel's time budget ({self.seconds:g} s for all its cases) ran out"

    @property
    def not_run(self) -> str:
        """Why a call it left no time for was not run: "not run: the kernel's time budget (20 s) was spent"."""
        return f"not run: {self.words} was {'reached' if self.scope == 'submission' else 'spent'}"


def call_timeout_words(kernel: Kernel) -> str:
    """A call past its kernel's per-call time limit, in words: "did not finish within 20 s"."""
    return f"did not finish within {kernel.time_limit_s:g} s"


def submission_budget(assignment: Assignment, kernels: Iterable[Kernel]) -> float:
    """Seconds for a submission's whole run stage of `kernels`, sanitizer included: the spec's
    `submission_time_limit_s`, else the sum of their budgets and a little for the grader itself.

    The one rule: the runner's deadline and what a batch says of a run's time limit.
    """
    return assignment.submission_time_limit_s or (sum({k.name: k.budget_s for k in kernels}.values())
                                                   + SUBMISSION_SLACK_S)


def limits_for(assignment: Assignment) -> Limits:
    """The sandbox's limits for an assignment: its assignment.toml's memory and process limits, else the defaults."""
    defaults = Limits()
    memory = (assignment.memory_limit_mb << 20) if assignment.memory_limit_mb else defaults.memory_limit_bytes
    return dataclasses.replace(defaults, memory_limit_bytes=memory,
                               processes=assignment.process_limit or defaults.processes)


def device_memory_limit(assignment: Assignment) -> int:
    """Bytes of device memory a call may keep allocated after it returns."""
    return (assignment.device_memory_limit_mb << 20) if assignment.device_memory_limit_mb else DEVICE_MEMORY_LIMIT
