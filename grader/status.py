"""Every status the grader records, one enum per level, and the groupings reports count by.

Each enum mixes in `str` and prints as its value, so stored JSON, f-strings, templates and
`status == "passed"` read exactly as the plain strings did. A grouping ("crashed or timed out",
"the student's code is at fault") is a predicate here, defined once, so the batch summary, the
dashboard and the exports can never count a status differently.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class _Status(str, enum.Enum):
    """A status that is its value wherever it is printed, formatted or serialised."""

    def __str__(self) -> str:
        return self.value

    # str-mixin enums format as "Class.MEMBER" on some Python versions; a status always formats as its value.
    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class CallStatus(_Status):
    """How one harness call of a kernel on a case ended (before its outputs are judged)."""

    OK = "ok"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    NOT_RUN = "not_run"

    @property
    def stopped_harness(self) -> bool:
        """The call ended its harness: a crash or a timeout (a fresh harness continues)."""
        return self in (CallStatus.CRASHED, CallStatus.TIMEOUT)


class BuildStatus(_Status):
    BUILT = "built"
    COMPILE_ERROR = "compile_error"


class CaseStatus(_Status):
    PASSED = "passed"
    FAILED = "failed"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    NOT_RUN = "not_run"

    @property
    def ran(self) -> bool:
        return self is not CaseStatus.NOT_RUN

    @property
    def was_judged(self) -> bool:
        """Its outputs were compared with the gold (it ran to its end)."""
        return self in (CaseStatus.PASSED, CaseStatus.FAILED)

    @property
    def stopped_harness(self) -> bool:
        """It crashed or timed out: no outputs to judge."""
        return self in (CaseStatus.CRASHED, CaseStatus.TIMEOUT)

    @property
    def counts_as_crash(self) -> bool:
        return self is CaseStatus.CRASHED

    @property
    def counts_as_timeout(self) -> bool:
        return self is CaseStatus.TIMEOUT

    @classmethod
    def of_call(cls, call: CallStatus) -> CaseStatus:
        """A case that did not run to its end keeps its call's status; one that did is judged later."""
        return {CallStatus.CRASHED: cls.CRASHED, CallStatus.TIMEOUT: cls.TIMEOUT,
                CallStatus.NOT_RUN: cls.NOT_RUN}[call]


class KernelStatus(_Status):
    PASSED = "passed"
    FAILED = "failed"
    FORBIDDEN = "forbidden"  # it ran (outputs judged) but uses a library or symbol the spec forbids
    COMPILE_ERROR = "compile_error"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    NOT_RUN = "not_run"  # nothing was run (no device for its target, ...): neither credit nor blame
    NOT_SUBMITTED = "not_submitted"  # a variant's kernel whose folder is not in the submission: nothing to build

    @property
    def is_failure_of_student_code(self) -> bool:
        """The kernel lost points through its own code (not through the grader or this machine)."""
        return self not in (KernelStatus.PASSED, KernelStatus.NOT_RUN)

    @property
    def stopped_harness(self) -> bool:
        return self in (KernelStatus.CRASHED, KernelStatus.TIMEOUT)

    @property
    def counts_as_crash(self) -> bool:
        return self is KernelStatus.CRASHED

    @property
    def counts_as_timeout(self) -> bool:
        return self is KernelStatus.TIMEOUT

    @property
    def worth_regrading(self) -> bool:
        """A regrade may end otherwise: the run was cut short or never happened (`batch --failed`)."""
        return self in (KernelStatus.CRASHED, KernelStatus.TIMEOUT, KernelStatus.NOT_RUN)


class SubmissionStatus(_Status):
    GRADED = "graded"
    NOT_SUBMITTED = "not_submitted"  # nothing to grade: the repository or commit does not exist, or none is in time
    FETCH_FAILED = "fetch_failed"  # the repository could not be fetched (network, time limit, access): tried again
    ERROR = "error"  # the grader failed on it

    @property
    def was_graded(self) -> bool:
        return self is SubmissionStatus.GRADED

    @property
    def fetch_again(self) -> bool:
        """Nothing is known of the submission yet: the next batch run (and `--failed`) fetches it again."""
        return self is SubmissionStatus.FETCH_FAILED

    @property
    def worth_regrading(self) -> bool:
        """`batch --failed` grades it again: the grader failed on it, or its repository could not be fetched."""
        return self in (SubmissionStatus.ERROR, SubmissionStatus.FETCH_FAILED)


class Outcome(_Status):
    """One word per submission, for the batch's counts; the same groups as the dashboard's."""

    PASSED = "passed"
    FAILED = "failed"
    COMPILE_ERROR = "compile_error"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    NOT_SUBMITTED = "not_submitted"
    FETCH_FAILED = "fetch_failed"
    ERROR = "error"
    NOT_RUN = "not_run"  # built, but nothing ran (no GPU on the grading machine): no score is known

    @property
    def scored(self) -> bool:
        """Whether the submission's score is known: a fetch that failed, the grader's error or nothing run is no 0
        of the student's (a gradebook leaves the cell empty, with this word beside it)."""
        return self not in (Outcome.FETCH_FAILED, Outcome.ERROR, Outcome.NOT_RUN)

    @classmethod
    def of(cls, status: SubmissionStatus, kernels: Iterable[KernelStatus]) -> Outcome:
        """The submission's word: its worst kernel's, a crash before a timeout before a compile error."""
        status = SubmissionStatus(status)
        if not status.was_graded:
            return cls(status.value)
        statuses = [KernelStatus(k) for k in kernels]
        if statuses and all(k is KernelStatus.NOT_RUN for k in statuses):
            return cls.NOT_RUN
        if any(k.counts_as_crash for k in statuses):
            return cls.CRASHED
        if any(k.counts_as_timeout for k in statuses):
            return cls.TIMEOUT
        if KernelStatus.COMPILE_ERROR in statuses:
            return cls.COMPILE_ERROR
        return cls.PASSED if all(k is KernelStatus.PASSED for k in statuses) else cls.FAILED


class TimingStatus(_Status):
    """How one kernel's timing ended; only `timed` carries a speed."""

    TIMED = "timed"
    WRONG = "wrong"  # its outputs after the timed calls did not match gold: fast and wrong gets no speed
    NO_WORK = "no_work"  # a timed call left an output all poison: it skipped its work (e.g. replayed a cached answer)
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    COMPILE_ERROR = "compile_error"
    NOT_SUBMITTED = "not_submitted"  # a variant whose folder is not in the submission
    NOT_RUN = "not_run"  # nothing could run here (no GPU)

    @property
    def has_speed(self) -> bool:
        return self is TimingStatus.TIMED


class ClaimStatus(_Status):
    """A study's claim against the runner's measurement (grader.claims)."""

    AGREES = "agrees"  # within the assignment's off_by of the measurement
    FLAGGED = "flagged"  # further than off_by from it (a sweet spot: not the fastest case)
    NOT_CLAIMED = "not_claimed"  # the results file states nothing for it
    NOT_MEASURED = "not_measured"  # the runner has no measurement of it


class MutantStatus(_Status):
    """A mutant of a pack's reference, after its grade (grader.audit)."""

    KILLED = "killed"  # some case failed on its values (or a check, a forbidden call): the cases see it
    WEAK_KILL = "weak_kill"  # lost points only by a crash or a time-out: no case judged a wrong output
    SURVIVED = "survived"  # full marks: no case notices the change
    EQUIVALENT = "equivalent"  # survived, and its outputs match the reference's on every case and on fresh inputs
    STILLBORN = "stillborn"  # does not build (or parse): never run, not counted in the score
    ERROR = "error"  # the grader failed on it: not counted either

    @property
    def counts(self) -> bool:
        """Part of the mutation score's denominator."""
        return self in (MutantStatus.KILLED, MutantStatus.WEAK_KILL, MutantStatus.SURVIVED)

    @property
    def is_kill(self) -> bool:
        return self in (MutantStatus.KILLED, MutantStatus.WEAK_KILL)
