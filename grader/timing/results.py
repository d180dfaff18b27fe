"""What timing one kernel found, and a submission's timings: plain, JSON-ready facts (words are made in `table`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from grader.boundary.timing_statistics import Summary
from grader.status import TimingStatus


@dataclass(frozen=True)
class KernelTiming:
    """One kernel (a variant's copy: "req_0/matmul") timed on its case, and what the protocol saw."""

    kernel: str
    base: str  # the base kernel's name ("matmul"): the rows of the speed-up table
    variant: str | None  # None: the base kernels (the student's milestone-1 kernels/)
    case: str
    status: TimingStatus
    message: str = ""  # why it has no speed, in words, where it has none
    summary: Summary | None = None
    samples_us: tuple[float, ...] = ()
    wall_median_us: float | None = None  # the host's wall clock around call + synchronisation
    gap_median_us: float | None = None  # wall clock the events do not explain: a non-blocking stream's work
    side_streams: bool = False  # that gap is large: the events may miss work (the median is the events')
    unwritten_calls: int = 0  # timed calls after which an output still held only poison
    pool: int = 0  # distinct input sets the timed calls rotated through
    stopped_by: str = ""
    clocks_before: dict[str, Any] = field(default_factory=dict)  # NVML's SM clocks (MHz) before the timed calls
    clocks_after: dict[str, Any] = field(default_factory=dict)
    timer: dict[str, Any] = field(default_factory=dict)  # the timer's facts: L2 and flush bytes, the spin
    device: str = ""
    # The most heap memory any call held beyond its arguments (the counting allocator: CPU kernels; None: not counted).
    peak_extra_bytes: int | None = None

    @property
    def median_us(self) -> float | None:
        return self.summary.median_us if self.summary is not None and self.status.has_speed else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value, "samples_us": [round(s, 3) for s in self.samples_us]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelTiming:
        summary = Summary(**data["summary"]) if data.get("summary") else None
        return cls(**{**data, "status": TimingStatus(data["status"]), "summary": summary,
                      "samples_us": tuple(data.get("samples_us", ()))})


@dataclass(frozen=True)
class SubmissionTiming:
    """Every timed kernel of one submission (or of the reference), base kernels and variants."""

    submission: str
    assignment: str
    kernels: tuple[KernelTiming, ...]

    def of(self, variant: str | None, base: str) -> KernelTiming | None:
        return next((k for k in self.kernels if k.variant == variant and k.base == base), None)

    def to_dict(self) -> dict[str, Any]:
        return {"submission": self.submission, "assignment": self.assignment,
                "kernels": [k.to_dict() for k in self.kernels]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SubmissionTiming:
        return cls(data["submission"], data["assignment"], tuple(KernelTiming.from_dict(k) for k in data["kernels"]))
