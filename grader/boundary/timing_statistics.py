"""The timing statistics: a median of timed calls, and when to stop timing (relative standard error, caps).

Stdlib only: the sandboxed timing harness decides when to stop with these very functions, and the
grader recomputes the summary from the samples the harness reported (it never takes the
harness's word for a median).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class StopRule:
    """When the timed calls of one kernel stop: at least `min_calls`, then once the relative standard
    error is below `rse`, or at `max_calls`, or once `cap_s` seconds of timing are spent."""

    min_calls: int = 10
    max_calls: int = 200
    rse: float = 0.01
    cap_s: float = 3.0


@dataclass(frozen=True)
class Summary:
    """What the timed calls measured, in microseconds; `stopped_by` says which part of the rule ended them."""

    calls: int
    median_us: float
    mean_us: float
    min_us: float
    max_us: float
    stdev_us: float
    rse: float  # standard error of the mean over the mean
    stopped_by: str  # "rse", "max_calls", "cap" or "too_few" (fewer than min_calls, e.g. a harness that died)


def relative_standard_error(samples: list[float]) -> float:
    """The standard error of the mean over the mean (inf below two samples or for a zero mean)."""
    if len(samples) < 2:
        return math.inf
    mean = statistics.fmean(samples)
    return statistics.stdev(samples) / math.sqrt(len(samples)) / mean if mean > 0 else math.inf


def stop_reason(samples: list[float], elapsed_s: float, rule: StopRule) -> str | None:
    """Why timing stops after these samples (`Summary.stopped_by`'s words), or None to time another call.

    The cap never cuts below `min_calls`: a kernel slower than cap_s / min_calls is bounded by its
    time limit per call, not by this rule.
    """
    if len(samples) >= rule.max_calls:
        return "max_calls"
    if len(samples) < rule.min_calls:
        return None
    if relative_standard_error(samples) < rule.rse:
        return "rse"
    return "cap" if elapsed_s >= rule.cap_s else None


def summarise(samples_us: list[float], stopped_by: str) -> Summary | None:
    """The summary of the timed calls (None without any)."""
    if not samples_us:
        return None
    return Summary(len(samples_us), statistics.median(samples_us), statistics.fmean(samples_us), min(samples_us),
                   max(samples_us), statistics.stdev(samples_us) if len(samples_us) > 1 else 0.0,
                   relative_standard_error(samples_us), stopped_by)


def geometric_mean(values: list[float]) -> float | None:
    """The geometric mean of positive values (None without any)."""
    positive = [v for v in values if v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in positive)) if positive else None
