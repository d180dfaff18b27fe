"""The late policy: the spec's `[assignment.late]` with the command line's overrides, and the
penalty it takes from a graded result, measured against the student's own deadline.
"""

from __future__ import annotations

import dataclasses
import datetime
import math

from grader.errors import SubmissionError
from grader.results import Late, Result
from grader.assignment import LatePolicy


def with_overrides(policy: LatePolicy | None, **overrides: float | None) -> LatePolicy | None:
    """`policy` with the overrides that are given (grace_days, penalty_per_day, cap, max_late_days) in place."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if not given:
        return policy
    for key, value in given.items():
        if value < 0 or (key == "cap" and value > 1):
            raise SubmissionError(f"--{key.replace('_', '-')} {value:g}: must be >= 0" + (" and <= 1" if key == "cap" else ""))
    return dataclasses.replace(policy or LatePolicy(), **given)


def late_days(deadline: datetime.datetime, submitted_at: datetime.datetime) -> int:
    """Whole days late, a started day counting as a day (a minute late is one late day)."""
    seconds = (submitted_at - deadline).total_seconds()
    return max(0, math.ceil(seconds / 86400))


def apply_late_policy(result: Result, policy: LatePolicy | None, deadline: datetime.datetime | None,
                      submitted_at: datetime.datetime | None) -> Result:
    """The result with the late penalty taken: late days past the grace days, each a share of max_score, capped.

    `raw_score` keeps the score before the penalty; `late` records the deadline, the days and the policy.
    """
    if deadline is None or submitted_at is None or not result.status.was_graded:
        return dataclasses.replace(result, raw_score=result.score)
    policy = policy or LatePolicy()
    days = late_days(deadline, submitted_at)
    charged = max(0.0, days - policy.grace_days)
    fraction = min(policy.cap, charged * policy.penalty_per_day)
    points = round(min(result.score, fraction * result.max_score), 6)
    late = Late(deadline=deadline.isoformat(), days_late=float(days), grace_days=policy.grace_days,
                penalty_per_day=policy.penalty_per_day, cap=policy.cap, points_deducted=points)
    return dataclasses.replace(result, raw_score=result.score, score=round(result.score - points, 6), late=late)
