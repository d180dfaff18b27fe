"""One exception type per kind of user mistake; each message names what and where.

Student code's failures are never exceptions: they are verdicts (compile_error, crashed, timeout).
"""


class GraderError(Exception):
    """A mistake the user of the grader can fix; the CLI prints its message and exits non-zero."""


class SpecError(GraderError):
    """An assignment pack (assignment.toml, inputs.py, numpy_reference.py) is broken."""


class SubmissionError(GraderError):
    """A submission can't be graded at all: missing folder, unreachable repository."""


class GoldError(GraderError):
    """The trusted reference failed to produce gold outputs: the pack, not the student, is wrong."""


class StoreError(GraderError):
    """The results store is unreadable, corrupt or from another schema version."""
