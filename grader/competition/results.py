"""What a competition found: each run's speed or why it has none, the geometric mean, whether the submission is
entered. Plain, JSON-ready facts (words about a run are made where it is judged, in `gate`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grader.boundary.timing_statistics import geometric_mean
from grader.errors import GraderError
from grader.status import TimingStatus

MEASURE = "tokens_per_s_geomean"  # the leaderboard's value: higher is better


@dataclass(frozen=True)
class RunResult:
    """One run of the run set: its shape, how it ended, and its speed where it passed the gate."""

    name: str
    B: int
    prompt: int
    generate: int
    status: TimingStatus  # TIMED: gated in; WRONG: gated out (logits or tokens); CRASHED, TIMEOUT, ...
    message: str = ""  # what the gate found, or why there is no speed
    samples_s: tuple[float, ...] = ()  # each timed generation's kernel seconds
    wall_samples_s: tuple[float, ...] = ()  # ... and its wall seconds, the harness's host work included
    median_s: float | None = None
    rse: float | None = None
    stopped_by: str = ""
    max_abs_err: float | None = None  # the largest logit error over every generated step
    rmse: float | None = None  # the largest step's RMSE
    tokens: tuple[tuple[int, ...], ...] = ()  # the generated tokens, row by row

    @property
    def tokens_per_s(self) -> float | None:
        """B * generate over the median generation's kernel seconds; None where the run has no speed."""
        if not self.status.has_speed or not self.median_s:
            return None
        return self.B * self.generate / self.median_s

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value, "tokens_per_s": self.tokens_per_s}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        fields = {k: v for k, v in data.items() if k != "tokens_per_s"}
        return cls(**{**fields, "status": TimingStatus(data["status"]), "samples_s": tuple(data.get("samples_s", ())),
                      "wall_samples_s": tuple(data.get("wall_samples_s", ())),
                      "tokens": tuple(tuple(row) for row in data.get("tokens", ()))})


@dataclass(frozen=True)
class CompetitionResult:
    """A submission's competition: every run, and the folder its kernels came from."""

    submission: str
    assignment: str
    student: str  # the name the leaderboard shows (default: the submission folder's)
    folder: str  # "kernels/" or "kernels/ with kernels_competition/ laid over it"
    runs: tuple[RunResult, ...]
    device: str = ""
    commit: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def entered(self) -> bool:
        """Every run passed the gate with a speed: only then is there a leaderboard entry."""
        return bool(self.runs) and all(r.tokens_per_s is not None for r in self.runs)

    @property
    def geomean_tokens_per_s(self) -> float | None:
        """The geometric mean of the runs' tokens per second; None unless entered."""
        return geometric_mean([r.tokens_per_s for r in self.runs if r.tokens_per_s is not None]) \
            if self.entered else None

    @property
    def words(self) -> str:
        """The entry in a line: its score, or why there is none (the first run without a speed)."""
        if self.entered:
            return (f"{self.geomean_tokens_per_s:,.1f} tokens/s (geometric mean over {len(self.runs)} runs; "
                    f"kernels: {self.folder})")
        failed = next((r for r in self.runs if r.tokens_per_s is None), None)
        if failed is None:
            return "not entered: no run was made"
        return f"not entered: run {failed.name} (B={failed.B}, {failed.generate} tokens) {failed.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"submission": self.submission, "assignment": self.assignment, "student": self.student,
                "folder": self.folder, "device": self.device, "commit": self.commit, "notes": list(self.notes),
                "measure": MEASURE, "entered": self.entered, MEASURE: self.geomean_tokens_per_s,
                "words": self.words, "runs": [r.to_dict() for r in self.runs]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompetitionResult:
        return cls(data["submission"], data["assignment"], data["student"], data["folder"],
                   tuple(RunResult.from_dict(r) for r in data["runs"]), data.get("device", ""), data.get("commit"),
                   tuple(data.get("notes", ())))


def read_competition(path: Path) -> CompetitionResult:
    """A competition file as `grader time --competition` wrote it."""
    try:
        return CompetitionResult.from_dict(json.loads(path.read_text())["competition"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GraderError(f"{path}: not a competition file written by `grader time --competition` "
                          f"({type(error).__name__}: {error})") from None
