"""Deadlines: the class's deadline in its time zone, each student's own (extensions included), the
last moment a commit still counts (the late policy's accepted days), and the push log that says
when the server received each commit.
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import zoneinfo
from dataclasses import dataclass
from pathlib import Path

from grader.batch.roster import Entry
from grader.errors import SubmissionError
from grader.assignment import LatePolicy
from grader.timestamps import parse_timestamp

DAY = datetime.timedelta(days=1)


def parse_deadline(text: str) -> datetime.datetime:
    """A time-zone aware deadline: '2026-12-05 23:59 America/Chicago', '... UTC' or ISO 8601 with an offset."""
    text = text.strip()
    zone: datetime.tzinfo | None = None
    moment = text
    head, _, last = text.rpartition(" ")
    if head and any(ch.isalpha() for ch in last) and _looks_like_a_time(head):
        try:
            zone = datetime.timezone.utc if last.upper() in ("UTC", "Z") else zoneinfo.ZoneInfo(last)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise SubmissionError(f"deadline {text!r}: unknown time zone {last!r}; use an IANA name such as "
                                  "'America/Chicago', 'UTC', or an offset such as '-06:00'") from None
        moment = head
    try:
        parsed = parse_timestamp(moment.replace(" +", "+").replace(" -", "-"))
    except ValueError:
        raise SubmissionError(f"deadline {text!r}: expected 'YYYY-MM-DD HH:MM ZONE', e.g. "
                              "'2026-12-05 23:59 America/Chicago'") from None
    if zone is not None:
        if parsed.tzinfo is not None:
            raise SubmissionError(f"deadline {text!r}: gives both an offset and a time zone; give one")
        parsed = parsed.replace(tzinfo=zone)
    if parsed.tzinfo is None:
        raise SubmissionError(f"deadline {text!r}: no time zone; add one, e.g. '{text} America/Chicago' or "
                              f"'{text} UTC', so that nobody's deadline moves with the grading machine's clock")
    return parsed


def _looks_like_a_time(text: str) -> bool:
    try:
        parse_timestamp(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Push:
    """One line of a push log: when the server received a commit (times the student cannot set)."""

    commit: str
    pushed_at: datetime.datetime


def read_push_log(path: Path) -> dict[str, list[Push]]:
    """A CSV with a header `student,commit,pushed_at` (ISO 8601 with an offset), as a git server's hook writes it."""
    try:
        text = path.read_text()
    except OSError as error:
        raise SubmissionError(f"push log {path}: cannot be read ({error.strerror})") from None
    rows = csv.DictReader(text.splitlines())
    needed = {"student", "commit", "pushed_at"}
    if not rows.fieldnames or not needed <= {f.strip() for f in rows.fieldnames}:
        raise SubmissionError(f"push log {path}: line 1 must be the header 'student,commit,pushed_at', found "
                              f"{','.join(rows.fieldnames or [])!r}")
    pushes: dict[str, list[Push]] = {}
    for number, row in enumerate(rows, start=2):
        row = {k.strip(): (v or "").strip() for k, v in row.items() if k}
        try:
            moment = parse_timestamp(row["pushed_at"])
        except ValueError:
            raise SubmissionError(f"push log {path} line {number}: pushed_at {row['pushed_at']!r} is not ISO 8601") from None
        if moment.tzinfo is None:
            raise SubmissionError(f"push log {path} line {number}: pushed_at {row['pushed_at']!r} has no UTC offset")
        pushes.setdefault(row["student"], []).append(Push(row["commit"], moment))
    return pushes


@dataclass(frozen=True)
class Pin:
    """How to choose the graded commit of one student."""

    cutoff: datetime.datetime | None  # the last moment a commit counts (deadline + extension + accepted late days)
    commit: str | None = None  # the roster names one
    submitted_at: datetime.datetime | None = None  # the roster says when it was submitted
    pushes: list[Push] | None = None  # --pin push-log: this student's pushes


@dataclass(frozen=True)
class Deadlines:
    """The class's deadline and what stretches it: extensions, accepted late days, the push log."""

    deadline: datetime.datetime | None = None  # None: grade each repository's latest commit
    late: LatePolicy | None = None
    pushes: dict[str, list[Push]] | None = None  # None: pin by commit time

    def deadline_of(self, entry: Entry) -> datetime.datetime | None:
        """The student's own deadline, extension included: what lateness is measured against."""
        return self.deadline + DAY * entry.extension_days if self.deadline else None

    def pin(self, entry: Entry) -> Pin:
        """The student's pin: the roster's commit, else the last push or commit up to the late window's end."""
        own = self.deadline_of(entry)
        accepted = DAY * (self.late.accepted_days if self.late else 0)
        pushes = None if self.pushes is None or entry.commit else self.pushes.get(entry.student, [])
        return Pin(cutoff=own + accepted if own else None, commit=entry.commit, submitted_at=entry.submitted_at,
                   pushes=pushes)

    def choice(self, entry: Entry) -> dict[str, str | None]:
        """What chooses the student's graded commit and its lateness, as plain strings: recorded with a run,
        compared by the next one that keeps its results (CHOICE_WORDS names each key)."""
        pin, own = self.pin(entry), self.deadline_of(entry)
        pushes = None if pin.pushes is None else hashlib.sha256(
            "\n".join(sorted(f"{p.commit} {p.pushed_at.isoformat()}" for p in pin.pushes)).encode()).hexdigest()[:16]
        return {"repository": entry.repository, "deadline": own.isoformat() if own else None,
                "cutoff": pin.cutoff.isoformat() if pin.cutoff else None, "commit": pin.commit,
                "submitted_at": pin.submitted_at.isoformat() if pin.submitted_at else None, "pushes": pushes}


# Each key of Deadlines.choice, as the warning names it, in the order a difference is told.
CHOICE_WORDS = {"deadline": "deadline (--deadline, extension_days)",
                "cutoff": "last accepted commit time (--max-late-days)", "pushes": "push log (--pin)",
                "commit": "roster commit", "submitted_at": "roster submitted_at", "repository": "repository"}
