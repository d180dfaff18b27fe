"""The spec's model: an assignment as typed, frozen objects (what `loader` builds from its assignment.toml)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Literal

from grader.boundary.protocol import SCALAR_DTYPES
from grader.errors import SpecError
from grader.assignment.assignments import load_assignment_function, load_assignment_module
from grader.assignment.trees import TreeKind, tree_file, tree_folder

if TYPE_CHECKING:
    from grader.checks import CheckSpec

Role = Literal["input", "output", "scratch"]
PartialCredit = Literal["fraction", "all_or_nothing"]
# What a scratch buffer holds when the kernel is called: zeros (as a program that cudaMemsets its
# activations leaves it), the NaN poison, or deterministic finite garbage (as a reused allocation).
# Outputs are always poisoned, so that an element never written is told apart.
Init = Literal["zeros", "poison", "leftover"]
INITS: tuple[str, ...] = ("zeros", "poison", "leftover")
GoldSource = Literal["reference", "numpy"]
# What a variant may ask the binaries to show of its technique (grader.evidence; in words: results.EVIDENCE_WORDS).
# constant_memory: SASS reads __constant__ data; restrict_loads: non-coherent loads (LDG.E.CONSTANT);
# async_copies: cp.async (LDGSTS); ptx_mma: tensor cores from raw mma.sync in the embedded PTX, not wmma;
# cutlass: a function named in cutlass:: or cute::. shared_memory_per_tile (a kernel's only: it reads the kernel's
# cases): for each case's `tile`, a function with the static shared memory a tile of that edge of each input needs.
Evidence = Literal["tensor_cores", "shared_memory", "cublas", "constant_memory", "restrict_loads", "async_copies",
                   "ptx_mma", "cutlass", "shared_memory_per_tile"]
EVIDENCE: tuple[str, ...] = ("tensor_cores", "shared_memory", "cublas", "constant_memory", "restrict_loads",
                             "async_copies", "ptx_mma", "cutlass", "shared_memory_per_tile")
# What ncu measures for a variant whose claim is one (grader.ncu): reported, never scored.
NCU_METRICS: tuple[str, ...] = ("shared_bank_conflicts", "l2_hit_rate")
# The input types a tensor-core instruction is read as taking (grader.evidence: HMMA.1684.F32.TF32 takes TF32).
TENSOR_CORE_PRECISIONS: tuple[str, ...] = ("TF32", "FP16", "BF16", "FP64", "FP8", "FP4", "INT8", "INT4", "1-bit")
# Libraries an assignment may link when the machine has them (their use can still be forbidden). CUTLASS is
# headers only: its include folder, as the course's Makefile adds CUTLASS_INCLUDES (grader.targets.cuda).
LIBRARIES = ("cublas", "cutlass")


@dataclass(frozen=True)
class Parameter:
    """One parameter of a host function, as its C signature spells it."""

    name: str
    ctype: str  # base type without const or '*': "float", "int", ...
    pointer: bool
    const: bool

    @property
    def dtype(self) -> str:
        return SCALAR_DTYPES[self.ctype]

    @property
    def declaration(self) -> str:
        return f"{'const ' if self.const else ''}{self.ctype}{'*' if self.pointer else ''} {self.name}"


@dataclass(frozen=True)
class Signature:
    function: str
    parameters: tuple[Parameter, ...]

    @property
    def text(self) -> str:
        return f"void {self.function}({', '.join(p.declaration for p in self.parameters)})"


@dataclass(frozen=True)
class Buffer:
    """A pointer argument: what the harness allocates, fills or poisons, and what gets graded."""

    name: str
    role: Role
    dtype: str
    shape: tuple[str, ...]  # expressions over the case's parameters
    allocate: str | None = None  # element count when larger than the shape (scratch reuse)
    nullable: bool = False
    mutable: bool = False  # an input the kernel may overwrite as scratch
    init: Init = "poison"  # scratch only: what it holds when the kernel is called (outputs: always poison)
    # Scratch a variant's technique must leave (nearly) unwritten (`Variant.untouched`): it starts as `init` says
    # (zeros or poison), and the harness counts the elements the call changed.
    count_written: bool = False
    # An output whose values (a few: accuracy per k) the result keeps, for a report's figure (`CaseResult.reported`).
    report: bool = False
    # An output judged against another output of the same call instead of gold: the truth the course states is
    # the submission's own (the KV cache's generation against its own model's uncached one, which the grader's
    # adapter writes in the same call). The output it names is that truth, and is not judged itself.
    judged_against: str | None = None
    # What one element is, in the student's words ("token"), where the reports should say it: an integer output's
    # first wrong element is then "the first wrong token at step 3 of 24 (batch row 0)".
    element: str | None = None


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


@dataclass(frozen=True)
class Case:
    name: str
    public: bool
    params: dict[str, Any]  # integers for scalar arguments and shapes, plus generator knobs
    null: tuple[str, ...] = ()  # nullable buffers passed as NULL in this case
    tolerance: Tolerance | None = None  # overrides the kernel's for an ill-conditioned case


# A memory bound's growth: each peak counts as at least this much, so that a kernel that holds next to nothing at the
# small case (a few KiB of row statistics) is not judged by the allocator's noise.
MEMORY_FLOOR_BYTES = 64 << 10


@dataclass(frozen=True)
class MemoryBound:
    """The memory a kernel's technique keeps it within (`memory_bound` of its [[kernels]] table): its peak extra memory
    (what a call allocates beyond its arguments: host heap for CPU kernels) at most `max_extra_bytes` at case `case`,
    and/or that peak growing at most `max_growth` times from case `small` to case `large` (each peak counted as at
    least MEMORY_FLOOR_BYTES). Exceeding it costs `penalty` of the kernel's weight; `meaning` says what it means, in
    the student's words ("an N x N matrix: Algorithm 1 keeps O(N d)"); `sizes`: the case parameters the words name.
    """

    case: str | None = None
    max_extra_bytes: int | None = None
    small: str | None = None
    large: str | None = None
    max_growth: float | None = None
    penalty: float = 1.0
    meaning: str = ""
    sizes: tuple[str, ...] = ()

    @property
    def cases(self) -> tuple[str, ...]:
        """The cases it measures, each once."""
        return tuple(dict.fromkeys(c for c in (self.case, self.small, self.large) if c is not None))


@dataclass(frozen=True)
class Kernel:
    name: str
    weight: float
    header: str
    # The files that must exist, as the template names them: each `source_entries` entry's first alternative.
    sources: tuple[str, ...]
    signature: Signature
    buffers: tuple[Buffer, ...]
    tolerance: Tolerance
    cases: tuple[Case, ...]
    time_limit_s: float
    partial_credit: PartialCredit
    forbidden_symbols: tuple[str, ...]
    forbidden_penalty: float
    # compute-sanitizer tools run on one small case ("memcheck", "racecheck"), and the share of the
    # weight a finding costs (1.0: the kernel fails).
    sanitizer: tuple[str, ...] = ()
    sanitizer_penalty: float = 0.0
    # Wall time for all of this kernel's cases together, harness starts included: a looping kernel
    # costs its own budget, not the per-call limit once per case.
    time_budget_s: float | None = None
    # An optimization variant's copy of a base kernel ("req_0/matmul"): the variant's name, and the
    # base kernel's, by which its inputs and gold are keyed (shared with the base). A base kernel:
    # None, and its own name.
    variant: str | None = None
    base: str = ""
    # Cases `grader time --sweep` times instead of `cases` (the kernel's `sweep_cases`): never graded.
    sweep_cases: tuple[Case, ...] = ()
    # What its own binary must show of the technique it is named for (tiled-matmul's tiled kernel: shared memory;
    # its cublas kernel: a call into cuBLAS), and the share of its weight a lack costs (0: reported only).
    evidence: tuple[Evidence, ...] = ()
    required_symbols: tuple[str, ...] = ()
    evidence_penalty: float = 0.0
    # Graded only in the variants that name it in their `kernels` (gpt2-m3's local attention: req_5's file alone),
    # never in the base folder.
    variant_only: bool = False
    # The names its host function may have (the course's local attention: a `_gpu` suffix in one
    # semester, none in another), the signature's among them; the build calls the one the
    # submission defines (`grader.sources.defined_function`). (): the signature's name alone.
    functions: tuple[str, ...] = ()
    # C++ definitions compiled into its library beside the shim (a variant's `defines`): the globals the course's
    # own program defines and a kernel's header declares extern (req_6's KV-cache state).
    defines: tuple[str, ...] = ()
    # The spec's `sources` as written: per entry, its alternatives in order (a path, or a glob such as `src/*.cpp`),
    # of which a checkout's first present one is used (`grader.sources`). (): each of `sources` alone.
    source_entries: tuple[tuple[str, ...], ...] = ()
    # What a failed comparison of this kernel usually means, in the assignment's own terms (its `hints`): the reports give
    # these instead of the generic pattern hints, which are about array kernels (strides, tiles).
    hints: tuple[str, ...] = ()
    # The memory its technique keeps it within, measured on its cases (`MemoryBound`); None: not bounded.
    memory_bound: MemoryBound | None = None
    # The assignment's provided files, which every build of it gets (the grader's adapter among them): a
    # traceback marks their frames as the grader's, not the student's.
    provided: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.base:
            object.__setattr__(self, "base", self.name)
        if not self.source_entries:
            object.__setattr__(self, "source_entries", tuple((s,) for s in self.sources))

    def buffer(self, name: str) -> Buffer:
        return next(b for b in self.buffers if b.name == name)

    def buffers_with(self, role: Role) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.role == role)

    def tolerance_for(self, case: Case) -> Tolerance:
        return case.tolerance or self.tolerance

    @property
    def budget_s(self) -> float:
        """The kernel's whole budget: the spec's, else twice the per-call limit."""
        return self.time_budget_s or 2 * self.time_limit_s


@dataclass(frozen=True)
class Untouched:
    """A scratch buffer a variant's technique has no use for (FlashAttention's att: the T x T matrix it never builds).

    In the variant's cases it starts as the spec says (zeros: a course program's cudaMemset activations, on which a
    course-style softmax over the zeroed triangle relies; or the poison), and the harness counts the elements the call
    changed; a case that changed more than `at_most_written` of them is reported, and costs the variant `penalty` of
    its weight (0: reported only). Zeros written over zeros are not seen: a materialised causal attention shows its
    lower triangle, about half of the matrix.
    """

    buffer: str
    at_most_written: float  # share of its elements, 0..1
    penalty: float = 0.0
    meaning: str = ""  # what writing it means, in the report's words ("the T x T matrix was materialised")


@dataclass(frozen=True)
class Variant:
    """An optimization variant: a folder laid over the base folder, graded on every kernel of the assignment."""

    name: str
    title: str
    folder: str  # in the submission, laid over `onto` by the course's rule
    onto: str
    weight: float
    partial_credit: PartialCredit  # across its kernels: all or nothing, or each kernel's share
    must_change: tuple[str, ...]  # base files (under `onto`) the optimization must change
    # Applied to its kernels when the loader expands them: the assignment's forbidden symbols replaced
    # (None: kept), and tolerances by base kernel name.
    forbidden_symbols: tuple[str, ...] | None = None
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    required_symbols: tuple[str, ...] = ()  # patterns a must_change kernel's library must call (req_2: cublas*)
    evidence: tuple[Evidence, ...] = ()  # what the must_change kernels' binaries must show
    evidence_penalty: float = 0.0  # share of `weight` that missing evidence or a missing required symbol costs
    # "each": every must_change kernel's binary must show the evidence (req_0: matmul and attention); "any": one of
    # them is enough (op_8: the team chooses the kernels that read __constant__ memory).
    evidence_in: Literal["each", "any"] = "each"
    # The tensor-core input types its must_change kernels may use (req_1: TF32); () allows any. A tensor-core
    # instruction of another type (FP16 WMMA) costs `precision_penalty` of the variant's points.
    tensor_core_precisions: tuple[str, ...] = ()
    precision_penalty: float = 1.0
    # Glob patterns under the submission's root ("kernels_op_7/*.py"): the folder must hold a file matching one of
    # them (op_7's sweep script, op_13's gpt2.cuh), or the variant scores 0 with the patterns named.
    required_files: tuple[str, ...] = ()
    # Facts about the folder's text, reported only: a label and a regular expression ("aligned allocations").
    source_patterns: dict[str, str] = field(default_factory=dict)
    # What ncu measures of its kernels where its claim is one (NCU_METRICS): reported, never scored.
    ncu_metrics: tuple[str, ...] = ()
    # The kernels and checks it is graded on, by base name, its weight shared by theirs; None: every kernel and check
    # that is not variant-only. Kernels a named check composes are graded too, with no weight of their own.
    kernels: tuple[str, ...] | None = None
    # C++ definitions ("bool g_enable_kv_cache = false") compiled into each of its kernels' libraries: the globals the
    # course's harness program defines for the headers that declare them extern.
    defines: tuple[str, ...] = ()
    untouched: Untouched | None = None  # scratch the technique must leave unwritten, and what writing it costs

    def grades(self, name: str, variant_only: bool) -> bool:
        """It is graded on the kernel or check of that base name (weighted, or composed by a check it grades: see
        `grader.assignment.variants.expanded`)."""
        return name in self.kernels if self.kernels is not None else not variant_only

    def must_change_kernel(self, kernel: Kernel) -> bool:
        """The kernel is built from a file the optimization must change."""
        return any(source in self.must_change for source in kernel.sources)

    def overlay_path(self, base_file: str) -> str:
        """Where the folder holds its replacement of `base_file` (`kernels/matmul.cuh`: `kernels_req_0/matmul.cuh`)."""
        return (Path(self.folder) / Path(base_file).relative_to(self.onto)).as_posix()


@dataclass(frozen=True)
class CreditGroup:
    """[assignment.additional]: variants that are chosen, not all required (the course's op_7 ... op_18).

    Their points must add up to `minimum` for full marks; what they add beyond it is extra credit, up to
    `extra_credit_cap` points (None: no cap); of each `exclusive` set only the best-scoring variant counts.
    The assignment's max_score counts `minimum` for the group, not its variants' weights.
    """

    variants: tuple[str, ...]  # the variants' names, in the spec's order
    minimum: float
    extra_credit_cap: float | None = None
    exclusive: tuple[tuple[str, ...], ...] = ()
    title: str = "additional optimizations"

    @property
    def most(self) -> float | None:
        """The most points the group can add (minimum + cap); None: no cap."""
        return None if self.extra_credit_cap is None else self.minimum + self.extra_credit_cap


@dataclass(frozen=True)
class LatePolicy:
    """What a late submission costs: whole late days past the grace days, each a fraction of max_score."""

    grace_days: float = 0.0
    penalty_per_day: float = 0.0  # fraction of max_score per late day past the grace days
    cap: float = 1.0  # the most the policy takes, as a fraction of max_score
    max_late_days: float | None = None  # commits later than this are not accepted; None: until the cap is reached

    @property
    def accepted_days(self) -> float:
        """How long after the deadline a commit still counts."""
        if self.max_late_days is not None:
            return self.max_late_days
        if self.penalty_per_day <= 0:
            return self.grace_days
        return self.grace_days + math.ceil(self.cap / self.penalty_per_day - 1e-9)


@dataclass(frozen=True)
class RubricItem:
    """A part of the written work a TA scores by hand ([[assignment.written.rubric]])."""

    name: str  # its column in the TA's sheet and the gradebook
    points: float
    earns: str = ""  # what earns the points, as the sheet and the student's report say it


class ClaimKind(str, enum.Enum):
    """What a claimed figure is, as the runner measures it."""

    TIME = "time"  # the kernel's median time per call at the case, in milliseconds
    MEMORY = "memory"  # the most heap memory a call held beyond its arguments, in MiB (CPU kernels)
    SPEEDUP = "speedup"  # the baseline's median time over the kernel's, at the case
    FASTEST = "fastest"  # which of the cases the kernel runs fastest at (a sweet spot): a case's name


@dataclass(frozen=True)
class ClaimedFigure:
    """One figure of [[assignment.claims.figure]]: what the student states per case, what the runner measures."""

    name: str  # the student's results file names it (its `figure` column)
    kind: ClaimKind
    kernel: str
    cases: tuple[str, ...]  # one claim per case; FASTEST: the cases it chooses among, one claim
    says: str = ""  # the figure in the handout's words
    baseline: str | None = None  # SPEEDUP: the kernel whose time is divided by `kernel`'s
    baseline_assignment: str | None = None  # SPEEDUP: the baseline is timed under this assignment (SciPy for CuPy)
    baseline_cases: tuple[str, ...] = ()  # SPEEDUP: the baseline's case for each of `cases` (empty: the same names)

    def baseline_case(self, case: str) -> str:
        return self.baseline_cases[self.cases.index(case)] if self.baseline_cases else case


@dataclass(frozen=True)
class ClaimsPart:
    """[assignment.claims]: the figures a student's repository states, checked against the runner's (grader.claims)."""

    file: tuple[str, ...]  # the results file (CSV: figure, case, value), alternatives in order
    figures: tuple[ClaimedFigure, ...]
    off_by: float = 2.0  # a claim more than this factor from the measurement, either way, is flagged


@dataclass(frozen=True)
class WrittenPart:
    """[assignment.written]: the study's report file and its rubric (grader.written, grader.rubric)."""

    report: tuple[str, ...] = ()  # the report's file, alternatives in order: the first the commit holds
    max_bytes: int = 20 * 2**20  # a larger report is flagged, not collected
    rubric: tuple[RubricItem, ...] = ()

    @property
    def points(self) -> float:
        return sum(item.points for item in self.rubric)


@dataclass(frozen=True)
class Assignment:
    name: str
    title: str
    version: str
    target: str  # the name of its target (grader.targets): what the kernels are written in
    root: Path  # the assignment's folder: assignments/<name>/, the whole assignment
    provided: tuple[str, ...]
    public_seed: int
    compile_flags: tuple[str, ...]
    kernels: tuple[Kernel, ...]
    late: LatePolicy | None = None  # [assignment.late]; None: nothing is accepted after the deadline
    # The sandbox's limits for this assignment (None: the grader's defaults, see grader.sandbox.Limits).
    memory_limit_mb: int | None = None
    process_limit: int | None = None
    device_memory_limit_mb: int | None = None  # device memory a call may keep after returning (None: 8 GiB)
    submission_time_limit_s: float | None = None  # the whole run stage; None: the sum of the kernels' budgets
    # Folders of the submission that every kernel's build sees whole (the course compiles kernels/
    # as one program, so kernel files include each other); `sources` are the files that must exist.
    source_dirs: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()  # linked where installed (e.g. cuBLAS); forbidden_symbols still apply
    # Python packages its harnesses see besides its target's own (a python assignment's scipy, cupy): `grader.targets.target_of`.
    python_packages: tuple[str, ...] = ()
    # The names of the runtimes of its own (`grader.boundary.runtimes`), loaded from the modules its `runtimes` names.
    runtimes: tuple[str, ...] = ()
    gold: GoldSource = "reference"  # what gold comes from: the reference run the same way, or numpy_reference.py
    variants: tuple[Variant, ...] = ()  # their kernels ("req_0/matmul") follow the base kernels in `kernels`
    based_on: str | None = None  # the assignment this one inherits from
    # Where inputs.py and numpy_reference.py are: this assignment's folder, or (based_on) the inherited one's.
    module_root: Path | None = None
    # The folders its template and reference are laid from (grader.assignment.trees): its bases', then its own.
    lineage: tuple[Path, ...] = ()
    checks: tuple[CheckSpec, ...] = ()  # whole-program checks (grader.checks), each from its table
    # The checks as kernels of the result: each check's own (named after it), then each variant's ("req_0/<check>").
    check_kernels: tuple[Kernel, ...] = ()
    # The [[kernels]] marked variant_only, as written: no base result, but their gold and inputs are keyed by them.
    variant_only_kernels: tuple[Kernel, ...] = ()
    additional: CreditGroup | None = None  # [assignment.additional]: chosen variants, a minimum, extra credit
    # "compilation errors resulting in a 0 for your whole team's code grade": any kernel that does not build
    # (the base's or a variant's) makes the whole score 0, with the kernel named.
    compile_error_zeroes: bool = False
    written: WrittenPart | None = None  # [assignment.written]: a report file and rubric items a TA scores
    claims: ClaimsPart | None = None  # [assignment.claims]: the figures the student states, checked by measurement

    @property
    def spec_file(self) -> Path:
        return self.root / "assignment.toml"

    @property
    def reference_dir(self) -> Path:
        """The trusted implementation, laid out exactly like a student repository: the template with the solution
        laid over (`reference/` holds only what the solution changes), its bases' first (grader.assignment.trees)."""
        return tree_folder(self.name, self.lineage or (self.root,), "reference")

    @property
    def template_dir(self) -> Path:
        """The starter code students receive, with its CI workflow: its bases' templates with `template/` laid over."""
        return tree_folder(self.name, self.lineage or (self.root,), "template")

    def tree_file(self, kind: TreeKind, relative: str) -> Path:
        """The template's or reference's file at `relative` (a provided file, an interface header), read where it
        is stored, without writing the tree."""
        return tree_file(self.lineage or (self.root,), kind, relative)

    @property
    def samples_dir(self) -> Path:
        """Sample submissions (`grader.samples`): alternatives, course-style families, mutants, attacks."""
        return self.root / "samples"

    @property
    def max_score(self) -> float:
        """The kernels' and checks' weights; an [assignment.additional] group counts its minimum, not its weights."""
        return max_score_of(self.additional, [(k.variant, k.weight) for k in (*self.kernels, *self.check_kernels)])

    @property
    def inputs_file(self) -> Path:
        return (self.module_root or self.root) / "inputs.py"

    @property
    def numpy_reference_file(self) -> Path:
        return (self.module_root or self.root) / "numpy_reference.py"

    @property
    def base_kernels(self) -> tuple[Kernel, ...]:
        return tuple(k for k in self.kernels if k.variant is None)

    def kernel(self, name: str) -> Kernel:
        for k in (*self.kernels, *self.check_kernels, *self.variant_only_kernels):
            if k.name == name:
                return k
        variants = f"; variants: {', '.join(v.name for v in self.variants)}" if self.variants else ""
        raise SpecError(f"{self.spec_file}: no kernel named {name!r} (have "
                        f"{', '.join(k.name for k in self.base_kernels)}{variants})")

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise SpecError(f"{self.spec_file}: no variant named {name!r} (have "
                        f"{', '.join(v.name for v in self.variants) or 'none'})")

    def kernels_of(self, variant: str) -> tuple[Kernel, ...]:
        return tuple(k for k in self.kernels if k.variant == variant)

    def select(self, names: tuple[str, ...]) -> tuple[Kernel, ...]:
        """The kernels `names` pick, in the spec's order: by a kernel's name ("req_0/matmul"), or a variant's (all its
        kernels); none named: all. A check's kernel (its name, or a variant's copy's, "req_0/<check>") picks the
        kernels it composes."""
        if not names:
            return self.kernels
        variants = {v.name for v in self.variants}
        picked = {k.name for n in names
                  for k in (self.kernels_of(n) if n in variants else self.composed_by(self.kernel(n)))}
        return tuple(k for k in self.kernels if k.name in picked)

    def check(self, name: str) -> CheckSpec:
        """The spec of the check of that name (its table's)."""
        for c in self.checks:
            if c.name == name:
                return c
        have = ", ".join(c.name for c in self.checks) or "none"
        raise SpecError(f"{self.spec_file}: no check named {name!r} (have {have})")

    def composed_by(self, kernel: Kernel) -> tuple[Kernel, ...]:
        """The kernels a check's kernel composes (a variant's copy: that variant's copies of them); a kernel: itself."""
        if kernel not in self.check_kernels:
            return (kernel,)
        prefix = f"{kernel.variant}/" if kernel.variant else ""
        return tuple(self.kernel(prefix + name) for name in self.check(kernel.base).composes)

    def checks_among(self, kernels: tuple[Kernel, ...]) -> tuple[Kernel, ...]:
        """The checks' kernels whose composed kernels are all among `kernels` (a grade of some kernels runs none)."""
        chosen = {k.name for k in kernels}
        return tuple(c for c in self.check_kernels if all(k.name in chosen for k in self.composed_by(c)))

    def make_inputs(self) -> Callable[..., dict]:
        return load_assignment_function(self.inputs_file, "make_inputs")

    def numpy_reference(self) -> ModuleType:
        return load_assignment_module(self.numpy_reference_file)


def max_score_of(group: CreditGroup | None, weights: list[tuple[str | None, float]]) -> float:
    """The most a grade is out of: each (variant, weight) added, the group's variants' together counted at most as
    its minimum (a grade of some of them only: their weights, up to the minimum)."""
    if group is None:
        return round(sum(w for _, w in weights), 6)
    grouped = sum(w for v, w in weights if v in group.variants)
    return round(sum(w for v, w in weights if v not in group.variants) + min(grouped, group.minimum), 6)
