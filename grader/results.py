"""The one model of a graded submission: every report and export reads this and nothing else.

A `Result` serialises to plain JSON (non-finite floats become null) and loads back unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

# forbidden: it ran (and its outputs were judged), but it uses a library or symbol the spec forbids.
KernelStatus = Literal["passed", "failed", "forbidden", "compile_error", "crashed", "timeout", "not_run"]
# A whole submission: graded, nothing to grade (unreachable or empty repository), or the grader failed on it.
SubmissionStatus = Literal["graded", "not_submitted", "error"]
CaseStatus = Literal["passed", "failed", "crashed", "timeout", "not_run"]
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Mismatch:
    buffer: str
    index: list[int]
    expected: float | None
    got: float | None


@dataclass(frozen=True)
class CaseResult:
    name: str
    public: bool
    status: CaseStatus
    passed: bool
    message: str
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rel_l2_err: float | None = None
    tolerance_used: float | None = None  # worst element's |y - g| / (atol + rtol |g|); <= 1 passes
    mismatches: int | None = None
    elements: int | None = None
    never_written: int | None = None
    first_mismatch: Mismatch | None = None
    wall_ms: float | None = None
    device_ms: float | None = None
    # The failure's pattern, for the reports' hints (see compare.Verdict); None where not measured.
    nonfinite: int | None = None
    zeros: int | None = None
    transposed: bool | None = None
    row_shift: int | None = None
    params: dict[str, int] | None = None  # the case's sizes (N, d, ...), as the spec gives them
    while_loading: bool | None = None  # crashed while its library was loaded (static constructors)
    atol: float | None = None  # the tolerance this case was judged with (a case may override the kernel's)
    rtol: float | None = None
    # The limit that ended its run, one word (grader.sandbox.LimitKind): "memory", "processes", "output",
    # "tmp" or "time"; the message says it with its value.
    limit: str | None = None


@dataclass(frozen=True)
class Deduction:
    reason: str
    points: float


@dataclass(frozen=True)
class KernelResult:
    name: str
    score: float
    max_score: float
    status: KernelStatus
    message: str
    cases: list[CaseResult]
    deductions: list[Deduction] = field(default_factory=list)
    build_seconds: float | None = None
    build_cached: bool | None = None
    sanitizer: list[str] = field(default_factory=list)  # compute-sanitizer's findings, in its own words
    forbidden_symbols: list[str] = field(default_factory=list)  # what it needs that the spec forbids
    built_from: list[str] = field(default_factory=list)  # the files its library was compiled from
    log: str = ""  # the tail of its harnesses' stdout/stderr (instructors see it; students' reports don't)

    @property
    def cases_passed(self) -> int:
        return sum(c.passed for c in self.cases)


@dataclass(frozen=True)
class Submission:
    """What was graded."""

    path: str
    commit: str | None = None
    commit_time: str | None = None
    dirty: bool | None = None


@dataclass(frozen=True)
class Late:
    """How late the graded commit was, and what the late policy took for it."""

    deadline: str  # ISO 8601, the student's own (extensions included)
    days_late: float  # 0 when on time
    grace_days: float
    penalty_per_day: float  # fraction of max_score per late day past the grace days
    cap: float  # the most the policy takes, as a fraction of max_score
    points_deducted: float


@dataclass(frozen=True)
class Environment:
    """Where it was graded: every figure measured on this run."""

    grader_version: str
    target: str
    device: str
    compiler: str
    sandbox: str
    sandbox_enforced: list[str]
    host: str
    python: str


@dataclass(frozen=True)
class Result:
    assignment: str
    assignment_version: str
    title: str
    score: float
    max_score: float
    kernels: list[KernelResult]
    submission: Submission
    environment: Environment
    stages: dict[str, float]  # seconds per pipeline stage
    seed: dict[str, str]  # mode ("public" or "secret") and a fingerprint, never the secret
    public_only: bool
    graded_at: str
    student: str | None = None  # the roster's id, in batches
    status: SubmissionStatus = "graded"
    message: str = ""  # why a submission was not graded (the git error, ...)
    raw_score: float | None = None  # before the late penalty; `score` is after it
    late: Late | None = None
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return _finite(dataclasses.asdict(self))

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json() + "\n")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        kernels = [
            KernelResult(
                **{**k, "cases": [CaseResult(**{**c, "first_mismatch": Mismatch(**c["first_mismatch"])
                                                if c.get("first_mismatch") else None}) for c in k["cases"]],
                   "deductions": [Deduction(**d) for d in k.get("deductions", [])]}
            )
            for k in data["kernels"]
        ]
        late = Late(**data["late"]) if data.get("late") else None
        return cls(**{**data, "kernels": kernels, "submission": Submission(**data["submission"]),
                      "environment": Environment(**data["environment"]), "late": late})

    @classmethod
    def from_json(cls, text: str) -> Result:
        return cls.from_dict(json.loads(text))


def _finite(value: Any) -> Any:
    """JSON has no Infinity or NaN: an unbounded error is recorded as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
