"""A sweep's timings (`grader time --sweep`: every sweep case of each kernel) read against one case parameter:
`density` by default, or what [timing] `sweep_parameter` names (flash-attention-cpu: N). The sweep pages
(`grader.sweeps`) make their points from these, the speed-up points (`grader.timing.points`) their rules' values."""

from __future__ import annotations

from grader.assignment import Assignment, Case
from grader.timing.results import KernelTiming


def case_of(timed: KernelTiming, assignment: Assignment) -> Case | None:
    """The case (graded or sweep) a timing was taken on; None where the spec no longer has it."""
    kernel = assignment.kernel(timed.kernel)
    return next((c for c in kernel.cases + kernel.sweep_cases if c.name == timed.case), None)


def parameter_of(timed: KernelTiming, assignment: Assignment, parameter: str) -> float | None:
    """The timed case's value of `parameter` where it is a positive number (None: the case has none)."""
    case = case_of(timed, assignment)
    value = case.params.get(parameter) if case is not None else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None
