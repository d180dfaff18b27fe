"""Points for speed-ups ([timing] `speedup_points`): "tiled faster than naive by at least X at N = 4096" judged on a
submission's timings (`grader time`, with or without `--sweep`). Grading does not time kernels, so these points are
awarded here, beside the timings, not in a `Result`."""

from __future__ import annotations

from dataclasses import dataclass

from grader.assignment import Assignment
from grader.timing.results import SubmissionTiming
from grader.timing.spec import SpeedupRule
from grader.timing.sweep import parameter_of


@dataclass(frozen=True)
class SpeedupAward:
    """One rule judged: each kernel's fastest time at the rule's parameter value (None: not timed there, or no
    speed), the speed-up and the points it earns."""

    rule: SpeedupRule
    kernel_us: float | None
    over_us: float | None

    @property
    def speedup(self) -> float | None:
        return self.over_us / self.kernel_us if self.kernel_us and self.over_us else None

    @property
    def points(self) -> float:
        return self.rule.points if self.speedup is not None and self.speedup >= self.rule.min_speedup else 0.0

    def to_dict(self) -> dict[str, object]:
        return {"kernel": self.rule.kernel, "over": self.rule.over, "at": self.rule.at,
                "min_speedup": self.rule.min_speedup, "kernel_us": self.kernel_us, "over_us": self.over_us,
                "speedup": self.speedup, "points": self.points, "max_points": self.rule.points}


def fastest_at(timing: SubmissionTiming, assignment: Assignment, kernel: str, parameter: str,
               value: float) -> float | None:
    """The base kernel's fastest median over its timed cases whose `parameter` is `value` (None: none with a speed)."""
    times = [t.median_us for t in timing.kernels if t.variant is None and t.base == kernel and t.median_us is not None
             and parameter_of(t, assignment, parameter) == value]
    return min(times, default=None)


def speedup_awards(rules: tuple[SpeedupRule, ...], timing: SubmissionTiming, assignment: Assignment,
                   parameter: str) -> list[SpeedupAward]:
    """Each rule judged on these timings (the student's base kernels)."""
    return [SpeedupAward(rule, fastest_at(timing, assignment, rule.kernel, parameter, rule.at),
                         fastest_at(timing, assignment, rule.over, parameter, rule.at)) for rule in rules]


def award_words(award: SpeedupAward, parameter: str) -> str:
    """One award in words: the speed-up measured against the one asked for, and the points."""
    rule = award.rule
    asked = f"{rule.kernel} at least {rule.min_speedup:g}x faster than {rule.over} at {parameter} = {rule.at:g}"
    if award.speedup is None:
        missing = " and ".join(k for k, t in ((rule.kernel, award.kernel_us), (rule.over, award.over_us)) if t is None)
        return f"{asked}: {missing} has no speed there (not timed, or failed): 0 of {rule.points:g} point(s)"
    return f"{asked}: {award.speedup:.2f}x measured, {award.points:g} of {rule.points:g} point(s)"
