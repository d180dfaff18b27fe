"""One exception type per kind of user mistake; each message names what and where.

Student code's failures are never exceptions: they are verdicts (compile_error, crashed, timeout).
"""


class GraderError(Exception):
    """A mistake the user of the grader can fix; the CLI prints its message and exits non-zero."""


class SpecError(GraderError):
    """An assignment (assignment.toml, inputs.py, numpy_reference.py) is broken."""


class SubmissionError(GraderError):
    """A submission can't be graded at all: missing folder, unreachable repository."""


class GoldError(GraderError):
    """The trusted reference failed to produce gold outputs: the assignment, not the student, is wrong."""


class StoreError(GraderError):
    """The results store is unreadable, corrupt or from another schema version."""


class SetupError(GraderError):
    """The grading machine lacks what an assignment needs before anyone is graded (a Python package its harnesses
    import, its compiler): the instructor installs it; no student is charged for it."""


class MachineError(GraderError):
    """The grading machine, not the submission, failed before any student code ran: no device, no harness.

    `fault` says which, in one word (`grader.dispatch.faults.FaultKind`): a batch grades such a
    submission again alone rather than charging it to the student.
    """

    def __init__(self, message: str, fault: str) -> None:
        super().__init__(message)
        self.fault = fault

    def __reduce__(self):  # raised in a run slot's process, re-raised in the coordinator's
        return type(self), (str(self), self.fault)
