"""The one model of a graded submission: every report and export reads this and nothing else.

A `Result` serialises to plain JSON (non-finite floats become null) and loads back unchanged.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.status import CaseStatus, KernelStatus, Outcome, SubmissionStatus

SCHEMA_VERSION = 1

@dataclass(frozen=True)
class Mismatch:
    buffer: str
    index: list[int]
    expected: float | None
    got: float | None
    # Where got is the harness's poison or a NaN computed from one: "never_written", "read_before_written" or
    # "read_out_of_bounds" (grader.compare); None: a value the kernel computed.
    poison: str | None = None
    # The index's axes as the buffer's shape names them ("N", "d"; None: an axis it does not name); [] where unknown.
    axes: list[str | None] = field(default_factory=list)


@dataclass(frozen=True)
class MarginRead:
    """A margin an output's NaN was computed from: memory just before a buffer (after=False) or just past it."""

    buffer: str | None  # None: a buffer the result cannot name
    after: bool


# What an output element still holding poison means (Mismatch.poison): the harness's own poison, untouched; the
# output's poison carried through arithmetic (read before written); a margin's (an index out of bounds).
NEVER_WRITTEN, READ_BEFORE_WRITTEN, READ_OUT_OF_BOUNDS = "never_written", "read_before_written", "read_out_of_bounds"


def index_in_words(buffer: str, index: Sequence[int], axes: Sequence[str | None]) -> str:
    """ "O[N=5, d=3]" along named axes ("tokens[batch=1, 7]" where one is not named); "[5, 3]" without them."""
    if not axes:
        return str(list(index))
    return f"{buffer}[{', '.join(f'{a}={i}' if a else str(i) for a, i in zip(axes, index))}]"


def margins_in_words(margins: Sequence[MarginRead]) -> str:
    """ "past the end of K and V, before the start of Q": the margins, past ends first."""
    parts = []
    for after, words in ((True, "past the end of"), (False, "before the start of")):
        names = [m.buffer or "a buffer" for m in margins if m.after == after]
        if names:
            parts.append(f"{words} {' and '.join([', '.join(names[:-1]), names[-1]] if len(names) > 1 else names)}")
    return ", ".join(parts)


@dataclass(frozen=True)
class ScratchWritten:
    """How much of a scratch buffer the call wrote, where its variant asks it to stay unwritten (`Variant.untouched`)."""

    buffer: str
    written: int  # elements that no longer hold the poison they started with
    elements: int

    @property
    def share(self) -> float:
        return self.written / self.elements if self.elements else 0.0


@dataclass(frozen=True)
class ForbiddenUse:
    """A module or method the assignment forbids, where the submission's code has it: seen running during a case's
    call (`CaseResult.forbidden_used`), or only named by a file that never ran it (`KernelResult.forbidden_named`)."""

    name: str  # a module ("scipy.linalg") or a method with its leading dot (".toarray"), as the spec's patterns are
    file: str  # relative to the submission; "" where no line of it was on the stack
    line: int

    @property
    def is_method(self) -> bool:
        return self.name.startswith(".")

    @property
    def is_function(self) -> bool:
        """A C library's function ("cublasSgemm_v2()", the harness's `c_abi.CALLED` mark), seen called by its watch."""
        return self.name.endswith("()")

    @property
    def is_call(self) -> bool:
        """Something called (a method, a function) rather than a module imported."""
        return self.is_method or self.is_function

    @property
    def where(self) -> str:
        """"kernels/k.py:19" ("" where it has no line)."""
        return f"{self.file}:{self.line}" if self.file else ""


@dataclass(frozen=True)
class LaunchedKernel:
    """A kernel a case's call launched, as its library's launch watch saw it (a CUDA kernel whose spec asks its tile)."""

    kernel: str  # its name in the binary (mangled, as the evidence's functions are named)
    block: list[int]  # blockDim x, y, z
    dynamic_shared_bytes: int  # the shared memory it asked for at launch, beyond what the binary declares


def _uses(values: list[Any]) -> list[ForbiddenUse]:
    return [u if isinstance(u, ForbiddenUse) else ForbiddenUse(**u) for u in values]


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
    read_before_written: int | None = None  # NaN computed from an output's poison: read before it was written
    read_out_of_bounds: int | None = None  # NaN computed from a margin's poison: read outside a buffer
    margins_read: list[MarginRead] = field(default_factory=list)  # those margins
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
    # Facts the message says in words, kept as fields so that reports never parse the message back.
    out_of_bounds: list[str] = field(default_factory=list)  # "32 element(s) past the end of out", one per write
    inputs_modified: list[str] = field(default_factory=list)  # input buffers it wrote into
    signal: str | None = None  # the signal that killed its harness ("SIGSEGV"), where one did
    uncaught: str | None = None  # the C++ exception that ended it uncaught ("std::bad_alloc"), where one did
    scratch_written: list[ScratchWritten] = field(default_factory=list)  # what it wrote of scratch to leave untouched
    # The memory the call took beyond its arguments. A CPU kernel's: its peak heap memory, counted by the grader's
    # allocator (what it malloc'd, new'd or NumPy allocated; None where the counter could not be built). A GPU kernel's,
    # where its variant asks: device memory sampled while it ran (what it cudaMalloc'd for itself, a library's
    # workspace; device-wide, so another process's allocation shows too), or torch's allocator's own count.
    peak_extra_bytes: int | None = None
    # The values of the outputs the spec marks `report` (None where not finite), for a report's figure; and gold's
    # values of the same outputs, drawn beside them (where they differ, the student sees by how much and where).
    reported: dict[str, list[float | None]] = field(default_factory=dict)
    reported_gold: dict[str, list[float | None]] = field(default_factory=dict)
    # What its call did that the assignment forbids, seen while it ran (a python kernel's imports and methods).
    forbidden_used: list[ForbiddenUse] = field(default_factory=list)
    # The kernels its call launched, where its library watches launches (a tiled kernel's: which tile ran).
    launched: list[LaunchedKernel] = field(default_factory=list)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", CaseStatus(self.status))  # loaded JSON and callers may pass the string
        object.__setattr__(self, "scratch_written", [w if isinstance(w, ScratchWritten) else ScratchWritten(**w)
                                                     for w in self.scratch_written])
        object.__setattr__(self, "margins_read", [m if isinstance(m, MarginRead) else MarginRead(**m)
                                                  for m in self.margins_read])
        object.__setattr__(self, "forbidden_used", _uses(self.forbidden_used))
        object.__setattr__(self, "launched", [k if isinstance(k, LaunchedKernel) else LaunchedKernel(**k)
                                              for k in self.launched])


@dataclass(frozen=True)
class Deduction:
    reason: str
    points: float


@dataclass(frozen=True)
class MemoryMeasured:
    """One case's peak extra memory as its kernel's memory bound judged it."""

    case: str
    peak_extra_bytes: int
    params: dict[str, int] = field(default_factory=dict)  # the sizes the bound's words name (N, d)


@dataclass(frozen=True)
class MemoryBoundResult:
    """A kernel's memory bound (`grader.assignment.MemoryBound`) against what its cases measured: the peak at `case`
    against `max_extra_bytes`, and/or the growth from `small` to `large` against `max_growth` (each peak counted as at
    least `floor_bytes`). Only the cases that ran are there: `grader check` runs the public ones, and a CPU kernel's
    memory is counted only where the grader's counting allocator could be built."""

    max_extra_bytes: int | None = None
    max_growth: float | None = None
    floor_bytes: int = 0
    case: MemoryMeasured | None = None
    small: MemoryMeasured | None = None
    large: MemoryMeasured | None = None
    growth: float | None = None  # large's peak / small's, each at least floor_bytes
    exceeded: bool = False  # over max_extra_bytes at `case`, or over max_growth
    measured: bool = False  # some part of the bound had its cases measured
    points: float = 0.0  # what exceeding it cost
    meaning: str = ""  # the spec's words for what exceeding it means

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryBoundResult:
        return cls(**{**data, **{k: MemoryMeasured(**data[k]) for k in ("case", "small", "large") if data.get(k)}})


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
    variant: str | None = None  # an optimization variant's copy of a kernel ("req_0/matmul"): the variant's name
    # The whole-program check (grader/checks) whose result this is, by its registered name; None for a kernel.
    check: str | None = None
    check_hints: list[str] = field(default_factory=list)  # what the check's failure says beyond its cases
    hints: list[str] = field(default_factory=list)  # the assignment's own hints for this kernel (its spec's `hints`)
    # Forbidden modules and methods its files name but that never ran while it was graded: they cost nothing, and
    # the reports say so (a python kernel; `forbidden_symbols` holds what ran).
    forbidden_named: list[ForbiddenUse] = field(default_factory=list)
    # Its memory bound, where its spec declares one: what its cases measured against it (`MemoryBoundResult`).
    memory_bound: MemoryBoundResult | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", KernelStatus(self.status))
        object.__setattr__(self, "forbidden_named", _uses(self.forbidden_named))

    @property
    def cases_passed(self) -> int:
        return sum(c.passed for c in self.cases)


# Each kind of evidence a spec may ask for (grader.assignment.model.EVIDENCE), in words: "no tensor-core instruction".
EVIDENCE_WORDS = {"tensor_cores": "tensor-core instruction", "shared_memory": "shared-memory use",
                  "cublas": "call into cuBLAS", "constant_memory": "read of __constant__ memory",
                  "restrict_loads": "read-only (non-coherent) global load",
                  "async_copies": "asynchronous copy into shared memory (cp.async)",
                  "ptx_mma": "raw mma.sync tensor-core instruction (inline PTX or CuTe)",
                  "cutlass": "CUTLASS or CuTe kernel",
                  "shared_memory_per_tile": "shared memory sized for each case's tile"}

# A function whose (demangled) name says it is CUTLASS's or CuTe's code: cutlass::Kernel<cutlass::gemm::...>.
CUTLASS_NAMESPACES = ("cutlass::", "cute::")


class FunctionTechniques:
    """What a function's figures say of the techniques: shared by the build's reading (grader.evidence) and the
    facts a result keeps of it (`FunctionFacts`)."""

    name: str
    tensor_core_instructions: int
    shared_bytes: int
    shared_instructions: int
    warp_shuffles: int
    constant_reads: int
    readonly_loads: int
    async_copies: int
    ptx_mma_instructions: int

    @property
    def uses_tensor_cores(self) -> bool:
        return self.tensor_core_instructions > 0

    @property
    def uses_shared_memory(self) -> bool:
        """Static shared memory, or shared-memory instructions (dynamic shared memory has no size in the binary)."""
        return self.shared_bytes > 0 or self.shared_instructions > 0

    @property
    def is_cutlass(self) -> bool:
        """CUTLASS's or CuTe's code by its name (a CUTLASS device GEMM's kernel is cutlass::Kernel<...>)."""
        return any(namespace in self.name for namespace in CUTLASS_NAMESPACES)


class LibraryTechniques:
    """What a library's functions and symbols say of the techniques: shared like `FunctionTechniques`."""

    functions: Sequence[FunctionTechniques]
    cublas_symbols: Sequence[str]
    sass_read: bool
    ptx_read: bool
    readable: bool

    @property
    def uses_tensor_cores(self) -> bool:
        return any(f.uses_tensor_cores for f in self.functions)

    @property
    def calls_cublas(self) -> bool:
        return bool(self.cublas_symbols)

    @property
    def uses_shared_memory(self) -> bool:
        return any(f.uses_shared_memory for f in self.functions)

    @property
    def uses_warp_shuffles(self) -> bool:
        return any(f.warp_shuffles for f in self.functions)

    def shows(self, kind: str) -> bool | None:
        """Whether it shows the technique `kind` (a spec's evidence name); None where that could not be read."""
        sass = self.sass_read
        if kind == "tensor_cores":
            return self.uses_tensor_cores if sass else None
        if kind == "shared_memory":
            return self.uses_shared_memory if self.functions else None
        if kind == "cublas":
            return self.calls_cublas if self.readable else None
        if kind == "constant_memory":  # SASS reads user __constant__ data from constant bank 3 (c[0x3][...])
            return any(f.constant_reads for f in self.functions) if sass else None
        if kind == "restrict_loads":  # LDG.E.CONSTANT: what __restrict__ const pointers and __ldg compile to
            return any(f.readonly_loads for f in self.functions) if sass else None
        if kind == "async_copies":  # LDGSTS (cp.async), or Hopper's TMA and bulk copies
            return any(f.async_copies for f in self.functions) if sass else None
        if kind == "ptx_mma":
            # SASS cannot tell wmma's HMMA from mma.sync's; the embedded PTX can (wmma.mma.sync vs mma.sync).
            if not sass:
                return None
            if not self.uses_tensor_cores:
                return False
            return any(f.ptx_mma_instructions for f in self.functions) if self.ptx_read else None
        if kind == "cutlass":
            return any(f.is_cutlass for f in self.functions) if self.functions else None
        if kind == "shared_memory_per_tile":  # per case's tile: grader.evidence.tile_shortfalls, which reads the cases
            return None
        raise ValueError(f"unknown evidence {kind!r}")


@dataclass(frozen=True)
class FunctionFacts(FunctionTechniques):
    """One CUDA function of a built library, for one arch, as the evidence reports show it (grader.evidence)."""

    name: str  # without return type and parameters: "ns::tile<64>"
    arch: str  # "sm_90"
    registers: int = 0  # per thread
    shared_bytes: int = 0  # static shared memory per block, as declared
    stack_bytes: int = 0  # per thread: local arrays and register spills
    local_bytes: int = 0  # per thread: .local variables
    tensor_core_instructions: int = 0  # static counts, not how often they execute
    tensor_core_precisions: list[str] = field(default_factory=list)  # the types they take: "TF32", "FP16", ...
    shared_instructions: int = 0  # shared-memory loads, stores, atomics and async copies
    warp_shuffles: int = 0
    constant_reads: int = 0  # instructions reading user __constant__ data (constant bank 3)
    readonly_loads: int = 0  # non-coherent global loads (LDG.E.CONSTANT: __restrict__ const, __ldg)
    async_copies: int = 0  # cp.async (LDGSTS), TMA and bulk copies into shared memory
    ldmatrix_instructions: int = 0  # LDSM
    ptx_mma_instructions: int = 0  # raw mma.sync in its PTX (not wmma's): inline PTX, CuTe's MMA atoms


@dataclass(frozen=True)
class LibraryFacts(LibraryTechniques):
    """What one kernel's built library shows of an optimization technique (grader.evidence reads it)."""

    functions: list[FunctionFacts] = field(default_factory=list)
    cublas_symbols: list[str] = field(default_factory=list)  # what it calls in cuBLAS
    sass_read: bool = False  # its SASS was read: "no tensor-core instruction" is then a finding, not a gap
    readable: bool = True  # its symbols could be read: no cuBLAS is then a finding
    ptx_read: bool = False  # its embedded PTX was read (only where its SASS shows tensor cores)
    note: str = ""  # why some or all of the evidence is missing, in words

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LibraryFacts:
        return cls(**{**data, "functions": [FunctionFacts(**f) for f in data.get("functions", [])]})


@dataclass(frozen=True)
class VariantResult:
    """One optimization variant: its folder laid over the base, graded on every kernel; the facts its flags come from.

    Its kernels are the result's kernels whose `variant` is its name; their scores add up to `score`.
    """

    name: str
    title: str
    folder: str
    weight: float
    score: float
    max_score: float
    status: Outcome  # not_submitted: the folder is missing; else its kernels' outcome (failed if it lost points)
    message: str
    kernels: list[str] = field(default_factory=list)  # its kernels' names in the result ("req_0/matmul")
    must_change: list[str] = field(default_factory=list)
    unchanged_files: list[str] = field(default_factory=list)  # must_change files it lacks or leaves identical
    # Per base kernel: the evidence kinds asked for that its library lacks, and the same for required
    # symbols (must_change kernels only); why there is no evidence where it could not be read.
    missing_evidence: dict[str, list[str]] = field(default_factory=dict)
    missing_symbols: dict[str, list[str]] = field(default_factory=dict)
    evidence_unread: dict[str, str] = field(default_factory=dict)
    penalty: float = 0.0  # points that missing evidence or symbols, a tensor-core precision not allowed, or scratch it
    # was to leave untouched, cost
    # Per base kernel: its tensor-core instructions of a precision the variant does not allow ("FP16 in kernel_name").
    wrong_precision: dict[str, list[str]] = field(default_factory=dict)
    # The kinds of evidence the variant asks its binaries to show (the spec's: "tensor_cores", ...), and per
    # base kernel what its built library shows (where it was read): the reports say it in sentences.
    evidence_kinds: list[str] = field(default_factory=list)
    libraries: dict[str, LibraryFacts] = field(default_factory=dict)
    # The sentences themselves, as a result stored before `libraries` was kept said them; empty since.
    evidence: list[str] = field(default_factory=list)
    # Files the folder must hold (patterns from the root: "kernels_op_7/*.py"), and those it holds that match.
    required_files: list[str] = field(default_factory=list)
    required_found: list[str] = field(default_factory=list)
    # Per source_patterns label ("aligned allocations"): the folder's files whose text matches (reported only).
    source_patterns: dict[str, list[str]] = field(default_factory=dict)
    ncu_metrics: list[str] = field(default_factory=list)  # what ncu measures of it where its claim is one
    # The credit rules of its group (grader.assignment.CreditGroup): the variant of its exclusive set that counted
    # instead of it (it then counts 0), and its points beyond the group's extra-credit cap (not counted).
    excluded_by: str | None = None
    capped: float = 0.0
    # The scratch buffer its technique must leave unwritten (`Variant.untouched`), the share it may write, and the
    # cases ("attention/gpt2-full") that wrote more of it; the cases' own `scratch_written` hold the counts.
    untouched: str | None = None
    at_most_written: float | None = None
    overwritten: list[str] = field(default_factory=list)
    # In those cases, the most device memory one call took beyond its arguments, and that case ("attention/gpt2-full").
    peak_extra_bytes: int | None = None
    peak_case: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Outcome(self.status))

    @property
    def changes_nothing(self) -> bool:
        """The folder changes none of the files the optimization must change (the unchanged-folder flag)."""
        return bool(self.must_change) and set(self.must_change) <= set(self.unchanged_files)


@dataclass(frozen=True)
class GroupResult:
    """The variants of an [assignment.additional] group together: what they add up to against the course's minimum."""

    title: str  # "additional optimizations"
    variants: list[str]  # in the spec's order
    points: dict[str, float]  # each counted variant's points (before the cap), in the spec's order
    minimum: float
    extra_credit_cap: float | None
    credited: float  # what the group adds to the score: its points, capped at minimum + cap
    # Per exclusive set, as "op_14, op_15, op_16": the variant counted (None: none scored).
    exclusive: dict[str, str | None] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return round(sum(self.points.values()), 6)

    @property
    def shortfall(self) -> float:
        return max(0.0, round(self.minimum - self.credited, 6))

    @property
    def extra_credit(self) -> float:
        return max(0.0, round(self.credited - self.minimum, 6))


@dataclass(frozen=True)
class LaterCommit:
    """The newest commit (or push) after the last moment one counts, which was therefore not graded."""

    commit: str
    committed_at: str  # ISO 8601: the commit's time, or the push's with --pin push-log
    deadline: str  # ISO 8601: the student's own deadline, extension included
    accepted_days: float  # the late days the policy accepts after it (0: no late policy)


@dataclass(frozen=True)
class WrittenReport:
    """What the graded commit holds of the assignment's written report ([assignment.written], grader.written)."""

    expected: list[str]  # the file and its alternatives, as the assignment names them
    file: str | None = None  # the one found, relative to the repository (None: none)
    size: int = 0
    sha256: str = ""  # of the collected file ("": not collected)
    message: str = ""  # why none was collected: missing, a symbolic link, too large

    @property
    def collected(self) -> bool:
        return bool(self.file and self.sha256)


@dataclass(frozen=True)
class Submission:
    """What was graded."""

    path: str
    commit: str | None = None
    commit_time: str | None = None
    dirty: bool | None = None
    later: LaterCommit | None = None  # a newer commit the batch left ungraded, past the deadline

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
class Retry:
    """A stage of this grade that failed for the grading machine's reasons and was run again alone.

    Beside other submissions the machine could not start a thread or a process, open its GPU, or
    keep the grading process alive: not the student's doing, so nothing was recorded until the
    stage had run again with no other submission beside it (`grader.dispatch.local`).
    """

    stage: str  # "build", "run" or "score"
    fault: str  # one word of grader.dispatch.faults.FAULT_KINDS ("process_died", "device", "library", ...)
    detail: str  # what the first attempt raised, in the grader's words
    alone: bool = True  # the attempt that followed had no other submission beside it


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
    # The most kernel harnesses that ran at once: above 1, the cases' times were measured side by
    # side, not alone. A result stored before this field ran them one at a time.
    harnesses_at_once: int = 1
    # The settings its harnesses fixed so that a run repeats (a torch assignment's seed, deterministic algorithms,
    # cuBLAS's workspace); empty where the target fixes none.
    determinism: list[str] = field(default_factory=list)


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
    status: SubmissionStatus = SubmissionStatus.GRADED
    message: str = ""  # why a submission was not graded (the git error, ...)
    raw_score: float | None = None  # before the late penalty; `score` is after it
    late: Late | None = None
    variants: list[VariantResult] = field(default_factory=list)  # an assignment's optimization variants, in its order
    retries: list[Retry] = field(default_factory=list)  # stages run again alone after the machine failed them
    additional: GroupResult | None = None  # the assignment's [assignment.additional] group, where it has one
    # The kernels that did not build, where the assignment makes a compile error 0 for the whole grade
    # (`compile_error_zeroes`): every kernel then scores 0, these named.
    zeroed_by: list[str] = field(default_factory=list)
    written: WrittenReport | None = None  # the written report at the graded commit, where the assignment asks for one
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", SubmissionStatus(self.status))

    @property
    def outcome(self) -> Outcome:
        """One word for the batch's counts (passed, crashed, timeout, ...), grouped as the dashboard groups."""
        return Outcome.of(self.status, (k.status for k in self.kernels))

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
                **{**k, "cases": [CaseResult(**{**c, "first_mismatch": Mismatch(
                                                   **c["first_mismatch"]) if c.get("first_mismatch") else None})
                                               for c in k["cases"]],
                   "deductions": [Deduction(**d) for d in k.get("deductions", [])],
                   "memory_bound": MemoryBoundResult.from_dict(k["memory_bound"]) if k.get("memory_bound") else None}
            )
            for k in data["kernels"]
        ]
        late = Late(**data["late"]) if data.get("late") else None
        variants = [VariantResult(**{**v, "libraries": {name: LibraryFacts.from_dict(library) for name, library
                                                        in v.get("libraries", {}).items()}})
                    for v in data.get("variants", [])]
        retries = [Retry(**r) for r in data.get("retries", [])]
        additional = GroupResult(**data["additional"]) if data.get("additional") else None
        submission = {**data["submission"], "later": LaterCommit(**data["submission"]["later"])
                      if data["submission"].get("later") else None}
        written = WrittenReport(**data["written"]) if data.get("written") else None
        return cls(**{**data, "kernels": kernels, "submission": Submission(**submission),
                      "environment": Environment(**data["environment"]), "late": late, "variants": variants,
                      "retries": retries, "additional": additional, "written": written})

    @classmethod
    def from_json(cls, text: str) -> Result:
        return cls.from_dict(json.loads(text))


def _finite(value: Any) -> Any:
    """JSON has no Infinity or NaN: an unbounded error is recorded as null; a status is its bare string."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
