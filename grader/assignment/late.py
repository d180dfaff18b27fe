"""The [assignment.late] table into a `LatePolicy`: grace days, a penalty per day, its cap, a last day."""

from __future__ import annotations

from typing import Any

from grader.errors import SpecError
from grader.assignment.document import Reader
from grader.assignment.model import LatePolicy

LATE_KEYS = ("grace_days", "penalty_per_day", "cap", "max_late_days")


def load_late_policy(table: Any, where: str) -> LatePolicy | None:
    """The policy, or None where the assignment gives none (no penalty)."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise SpecError(f"{where}: expected a table with grace_days, penalty_per_day, cap, max_late_days")
    read = Reader(table, where)
    unknown = set(table) - set(LATE_KEYS)
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}; expected grace_days, penalty_per_day, cap, "
                        "max_late_days")
    policy = LatePolicy(grace_days=read.get("grace_days", float, 0.0),
                        penalty_per_day=read.get("penalty_per_day", float, 0.0), cap=read.get("cap", float, 1.0),
                        max_late_days=read.get("max_late_days", float, None))
    if policy.grace_days < 0 or policy.penalty_per_day < 0 or (policy.max_late_days or 0) < 0:
        raise SpecError(f"{where}: grace_days, penalty_per_day and max_late_days must be >= 0, found {policy}")
    if not 0 <= policy.cap <= 1:
        raise SpecError(f"{where}: key 'cap' is a fraction of the score between 0 and 1, found {policy.cap}")
    return policy
